"""Which content a run read: each input file's absolute path, size and SHA-256 (its lineage).

A run's report named its corpus by path only, so two runs on one path could have read different
files without a trace, and `compare-runs` took runs on different data for variants of one method.
The readers parse a file from its path (polars, the csv module), not from bytes held once in
memory (UMLS's MRCONSO is gigabytes), so a file is hashed apart from its parse, in 1 MiB chunks:
before it and after it (from the page cache), 3-13 ms each for the benchmark's 4.3 MB of corpus
tables and FDA records, read and validated in 1.5 s. The file's identity (device, inode, size,
modification time) and its digest must be the same before the parse and after: a file replaced or
rewritten meanwhile is refused, not recorded with a digest of other bytes. The digests catch what
the identity cannot: a rewrite in place to the same size within one tick of the file system's
clock, or with its modification time set back. Only bytes changed and changed back during the
parse, with the modification time set back as well, would go unseen. Where the file's directory
has a release's `SHA256SUMS`, the digest must be the one it lists (checksums.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from meddevkg_core.checksums import check_listed
from meddevkg_core.errors import CorpusError, one_line

T = TypeVar("T")

_CHUNK = 1 << 20
SHOWN_DIGITS = 12
"""The hex digits of a digest a Markdown report shows: enough to tell two files apart at a glance."""


class InputFile(BaseModel, frozen=True):
    """One file a run read: where (absolute), how many bytes, and their SHA-256 in hex."""

    path: str
    size: int
    sha256: str


def fingerprint(path: str | Path) -> InputFile:
    """The file's bytes as they are now, hashed in chunks (never held whole)."""
    path = Path(path)
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return InputFile(path=str(path.resolve()), size=size, sha256=digest.hexdigest())


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None  # the reader names a missing or unreadable file
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def read_fingerprinted(path: str | Path, read: Callable[[Path], T]) -> tuple[T, InputFile]:
    """`read(path)` and the fingerprint of the file it read; a CorpusError names a file that changed
    (was replaced, rewritten, removed) between the hash before the read and the hash after it, or whose
    bytes are not those its directory's SHA256SUMS lists (checked before the read)."""
    path = Path(path)
    before = _identity(path), _digest_or_none(path)
    if before[1] is not None:  # before the parse: damage is named as such, not as what it breaks
        check_listed(path, before[1])  # against a release's SHA256SUMS, where its directory has one
    value = read(path)  # first: the reader's own error names a file it cannot use
    try:
        found = fingerprint(path)
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read to fingerprint it: {one_line(exc)}") from exc
    if None in before or (_identity(path), found.sha256) != before:
        raise CorpusError(f"{path}: changed while it was read (replaced or rewritten); "
                          "run again once it is written")
    return value, found


def _digest_or_none(path: Path) -> str | None:
    try:
        return fingerprint(path).sha256
    except OSError:
        return None  # the reader names a missing or unreadable file


def inputs_json(inputs: Mapping[str, InputFile]) -> dict[str, dict[str, str | int]]:
    """The inputs by name as a report's JSON holds them ({"devices": {"path", "size", "sha256"}, ...})."""
    return {name: found.model_dump() for name, found in inputs.items()}


def inputs_line(inputs: Mapping[str, Mapping[str, object]]) -> str:
    """A report's inputs in one short line for Markdown: each name with its digest's first digits."""
    if not inputs:
        return "Inputs: not recorded."
    return "Inputs (SHA-256): " + ", ".join(f"{name} `{str(found['sha256'])[:SHOWN_DIGITS]}`"
                                            for name, found in inputs.items()) + "."
