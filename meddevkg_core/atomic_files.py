"""Outputs replaced whole: a reader sees the previous version or the new one, never a half-written file
or a directory mixing both, whether the writer ends in an exception, a full disk or a kill (for a set
of files in a directory the user names, `replaced_files`, a kill between its renames is finished by
the next writer or reader: `finish_interrupted_commit`)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from meddevkg_core.errors import InputError

STAGE = ".staged"
"""The directory `replaced_files` writes a run's outputs into; one a killed run left is cleared by the
next run, or moved in when it carries COMPLETE."""
COMPLETE = ".complete"
"""An empty file in STAGE, made before the first rename: every output is written, move them all in."""


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.{suffix}")


_OLD_SIBLING = re.compile(r"\..+\.[0-9a-f]{8}\.old")
"""The name `_sibling(path, "old")` gives: what `_swap_in` renames a replaced directory to."""


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
    while writing leaves the stage directory, cleared by the next run into `directory`. The renames
    (one per output) start only once the stage is marked COMPLETE, so a kill between two of them
    leaves a stage that says so: the next run, or a reader, finishes them first
    (`finish_interrupted_commit`), and the outputs are the killed run's, all of them."""
    check_writable_directory(directory)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    finish_interrupted_commit(directory)
    stage = directory / STAGE
    shutil.rmtree(stage, ignore_errors=True)  # unmarked: a run killed while writing
    stage.mkdir()
    marked = False
    try:
        yield stage
        (stage / COMPLETE).touch()  # empty: made or not, never half-written
        marked = True
        _move_in(directory)
    finally:
        if not marked:
            shutil.rmtree(stage, ignore_errors=True)


def finish_interrupted_commit(directory: str | Path) -> None:
    """Finish the renames of a `replaced_files` run into `directory` that was killed between two of
    them (its stage marked COMPLETE), so `directory` holds that run's outputs and none it replaced;
    else do nothing. A command reading a run directory calls it first, as `replaced_files` does:
    the mix a kill left is never read. A stage without the mark (a run killed while writing, or one
    writing now) is left alone: the outputs beside it are one run's."""
    directory = Path(directory)
    if not (directory / STAGE / COMPLETE).is_file():
        return
    try:
        _move_in(directory)
    except OSError as exc:
        raise InputError(f"{directory}: a run killed while moving its outputs in left them mixed, and they "
                         f"cannot be moved in now ({exc.strerror or exc})") from exc


def _move_in(directory: Path) -> None:
    """Move each entry of the COMPLETE stage into `directory` (a file by a rename, a subdirectory by
    `_swap_in`), clear the old directories `_swap_in` renamed away, then the stage. Under a lock on
    `directory` (released by a kill too), so a reader finishing a commit never races the writer
    still making it: whoever comes second finds the stage gone."""
    stage = directory / STAGE
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not (stage / COMPLETE).is_file():
            return
        for entry in sorted(stage.iterdir()):
            if entry.name == COMPLETE:
                continue
            if entry.is_dir():
                _swap_in(entry, directory / entry.name)
            else:
                os.replace(entry, directory / entry.name)
        for old in directory.iterdir():  # a kill between _swap_in's renames, or before it removed the old
            if _OLD_SIBLING.fullmatch(old.name):
                shutil.rmtree(old, ignore_errors=True)
        (stage / COMPLETE).unlink()  # first: what is left of the stage is nothing to move in
        shutil.rmtree(stage, ignore_errors=True)
    finally:
        os.close(fd)
