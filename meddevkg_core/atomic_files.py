"""Outputs replaced whole: a reader sees the previous version or the new one, never a half-written file
or a directory mixing both, whether the writer ends in an exception, a full disk or a kill (for a set
of files in a directory the user names, see `replaced_files` for the one narrow exception)."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from meddevkg_core.errors import InputError

STAGE = ".staged"
"""The directory `replaced_files` writes a run's outputs into; one a killed run left is cleared by the next."""


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
        _swap_in(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(new: Path, path: Path) -> None:
    old = _sibling(path, "old")
    if path.exists():
        os.replace(path, old)
    os.replace(new, path)
    shutil.rmtree(old, ignore_errors=True)


def check_writable_directory(path: str | Path) -> None:
    """Refuse `path` unless outputs can be written there: a directory this process can write into, or
    a missing one whose nearest existing ancestor is such a directory (no file on the way). A command
    checks its `--out` with it before its long work, so a file in the way or a directory it may not
    write to is named at the start, not after an hour of ranking. It makes nothing (the probe is a
    temporary directory, removed): a command failing after the check leaves no empty `--out`, which
    `replaced_files` makes when the outputs are written."""
    path = Path(path)
    # lexists: a dangling symlink is in the way too, and a stat refused counts as missing (the probe says why)
    nearest = next((p for p in (path, *path.parents) if os.path.lexists(p)), Path(path.anchor or "."))
    if not nearest.is_dir():
        raise InputError(f"{path}: cannot be written to ({nearest} is not a directory)")
    try:
        tempfile.TemporaryDirectory(dir=nearest).cleanup()
    except OSError as exc:
        where = "" if nearest == path else f"{nearest}: "
        raise InputError(f"{path}: cannot be written to ({where}{exc.strerror or exc})") from exc


@contextmanager
def replaced_files(directory: str | Path) -> Iterator[Path]:
    """A temporary directory inside `directory` to write one run's outputs into; when the block ends
    without error each of its entries takes its place in `directory` (a file by a rename, a
    subdirectory replaced whole), and it is removed otherwise.

    For a directory the user names (`--out`), which may hold other files: those stay. A failure
    while writing leaves every previous output as it was, none new and no temporary file. A kill
    leaves the stage directory (cleared by the next run into `directory`), and a kill during the
    final renames (one per output, microseconds) could leave some outputs of each run."""
    check_writable_directory(directory)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stage = directory / STAGE
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        yield stage
        for entry in sorted(stage.iterdir()):
            if entry.is_dir():
                _swap_in(entry, directory / entry.name)
            else:
                os.replace(entry, directory / entry.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
