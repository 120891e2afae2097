"""A data release's checksum manifest: the SHA-256 digests its publisher listed, checked on each read.

Parquet and CSV carry no checksum that a reader checks. The benchmark's files have no page CRCs and
their zstd frames no content checksum: of 300 single-byte flips in its `devices.parquet`, 171 were
read without an error, as other rows. A publisher's `SHA256SUMS` beside the files (the output of
`sha256sum`) turns that silent damage into an error: every file read from such a directory must be
listed there, with the digest of the bytes read (lineage.read_fingerprinted checks it).
"""

from __future__ import annotations

import re
from pathlib import Path

from meddevkg_core.errors import CorpusError, one_line

MANIFEST = "SHA256SUMS"

_LINE = re.compile(r"(?P<digest>[0-9a-fA-F]{64}) [ *](?P<name>.+)")
"""One line of GNU `sha256sum`: the digest, a space, then a space (text) or `*` (binary), the name."""


def listed_digests(manifest: Path) -> dict[str, str]:
    """File name -> SHA-256 (lower-case hex) as the manifest lists them; a CorpusError names a line of
    another form, or a file listed twice with two digests."""
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{manifest}: cannot be read as a checksum manifest: {one_line(exc)}") from exc
    digests: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise CorpusError(f"{manifest}:{number}: not a line of sha256sum's output "
                              "(64 hex digits, two spaces, the file name)")
        name, digest = match["name"].removeprefix("./"), match["digest"].lower()
        if digests.setdefault(name, digest) != digest:
            raise CorpusError(f"{manifest}:{number}: {name} is listed before with another digest")
    return digests


def check_listed(path: Path, sha256: str) -> None:
    """Refuse (CorpusError) a file whose directory has a manifest that does not list these bytes."""
    manifest = path.parent / MANIFEST
    if path.name == MANIFEST or not manifest.is_file():
        return
    expected = listed_digests(manifest).get(path.name)
    if expected is None:
        raise CorpusError(f"{path}: not listed in {manifest}, so its bytes cannot be checked; list it "
                          f"(sha256sum {path.name} >> {MANIFEST}) or remove the manifest")
    if expected != sha256:
        raise CorpusError(f"{path}: its SHA-256 {sha256[:12]}... is not {expected[:12]}..., the digest "
                          f"{manifest} lists: the file is damaged, or not the release's")
