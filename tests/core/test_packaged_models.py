from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from meddevkg_core.embeddings import ConcatenatedEncoder, HashingEncoder, load_embedding_model
from meddevkg_core.packaged_models import (
    MPNET,
    SPLIT_ARCHIVES,
    SplitArchive,
    archive_parts,
    assemble_split_archive,
    model_directory,
)

WEIGHTS = b"not really safetensors" * 100


def _archive(sha: str) -> SplitArchive:
    return SplitArchive(distributions=("fake-part-1", "fake-part-2", "fake-part-3"), directory="tiny-model",
                        weights="model.safetensors", weights_sha256=sha, requirements="requirements-fake.txt")


def _split_zip(tmp_path: Path, n: int = 3) -> list[Path]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("tiny-model/model.safetensors", WEIGHTS)
        zf.writestr("tiny-model/config.json", "{}")
        zf.writestr("tiny-model/desktop.ini", "junk outside nothing")
        zf.writestr("elsewhere/ignored.txt", "not part of the model")
    data = buf.getvalue()
    size = -(-len(data) // n)
    parts = []
    for i in range(n):
        part = tmp_path / f"tiny.zip.00{i + 1}"
        part.write_bytes(data[i * size:(i + 1) * size])
        parts.append(part)
    return parts


def test_split_parts_are_joined_unzipped_and_checked(tmp_path):
    archive = _archive(hashlib.sha256(WEIGHTS).hexdigest())
    target = assemble_split_archive(_split_zip(tmp_path), tmp_path / "models" / "tiny", archive)
    assert (target / "model.safetensors").read_bytes() == WEIGHTS
    assert (target / "config.json").is_file()
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["tiny"]  # no temporaries left


def test_weights_with_another_hash_are_refused_and_nothing_is_left(tmp_path):
    archive = _archive("0" * 64)
    with pytest.raises(ValueError, match="model.safetensors has SHA-256 .* not the published model"):
        assemble_split_archive(_split_zip(tmp_path), tmp_path / "models" / "tiny", archive)
    assert list((tmp_path / "models").iterdir()) == []


def test_parts_out_of_order_are_refused(tmp_path):
    archive = _archive(hashlib.sha256(WEIGHTS).hexdigest())
    parts = _split_zip(tmp_path)
    with pytest.raises(ValueError):
        assemble_split_archive([parts[1], parts[0], parts[2]], tmp_path / "models" / "tiny", archive)
    assert list((tmp_path / "models").iterdir()) == []


def test_missing_packages_name_the_install_command():
    with pytest.raises(FileNotFoundError, match="fake-part-1 is not installed.*requirements-fake.txt"):
        archive_parts(_archive("0" * 64))


def test_unknown_model_names_are_refused(tmp_path):
    with pytest.raises(KeyError, match="no packaged model named 'bge-large'"):
        model_directory("bge-large", tmp_path)


def test_a_split_model_needs_a_models_directory():
    with pytest.raises(ValueError, match="give a models directory"):
        load_embedding_model(f"all-MiniLM-L6-v2,{MPNET}", None, device="cpu")


def test_concatenated_cosine_is_the_mean_of_the_encoders_cosines():
    small, large = HashingEncoder(64), HashingEncoder(256)
    both = ConcatenatedEncoder((small, large))
    texts = ["drug eluting coronary stent", "coronary stent delivery catheter", "glucose sensor"]
    v = both.encode(texts)
    assert v.shape == (3, 320) and both.dimension == 320
    assert both.model_id == "hashing-v1-d64+hashing-v1-d256"
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    s, lg = small.encode(texts), large.encode(texts)
    np.testing.assert_allclose(v @ v.T, (s @ s.T + lg @ lg.T) / 2, atol=1e-5)


def test_one_encoder_is_not_an_ensemble():
    with pytest.raises(ValueError, match="at least two"):
        ConcatenatedEncoder((HashingEncoder(),))


@pytest.mark.real_model
def test_the_installed_mpnet_parts_are_the_published_model(tmp_path):
    try:
        parts = archive_parts(SPLIT_ARCHIVES[MPNET])
    except FileNotFoundError:
        pytest.skip("all-mpnet-base-v2 parts not installed (MEDDEVKG_MPNET=0)")
    assert len(parts) == 5
    path = model_directory(MPNET, tmp_path)  # raises unless the weights have the publisher's SHA-256
    assert (path / "model.safetensors").stat().st_size == 437_971_872
    assert model_directory(MPNET, tmp_path) == path  # assembled once, then reused
