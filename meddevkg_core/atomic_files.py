"""Outputs replaced whole: a reader sees the previous version or the new one, never a half-written file
or a directory mixing both, however the writer ends (an exception, a full disk, a kill)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.{suffix}")


@contextmanager
def replaced_file(path: str | Path) -> Iterator[Path]:
    """A temporary sibling of `path` to write; it takes `path`'s place when the block ends without error
    (same directory, so one rename), and is removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def replaced_directory(path: str | Path) -> Iterator[Path]:
    """A temporary sibling directory to fill; it takes `path`'s place when the block ends without error,
    and is removed otherwise. The old directory is renamed away first, so a reader meets either the
    old directory, the new one, or (between two renames) none: never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "tmp")
    tmp.mkdir()
    try:
        yield tmp
        old = _sibling(path, "old")
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
