"""Outputs replaced whole: a reader sees the previous version or the new one, never a half-written file
or a directory mixing both, whether the writer ends in an exception, a full disk, a kill or a power cut
(for a set of files in a directory the user names, `replaced_files`, a kill between its renames is
finished by the next writer or reader: `finish_interrupted_commit`; and one run at a time writes into
such a directory, the others refused at their start: `claimed_directory`). A power cut or kernel crash
may write a rename to disk before the data renamed, so what is renamed into place is fsynced first, and
the directory renamed in after (`_fsync`): the renames it lost leave the previous version. A directory
made to hold outputs is fsynced into its parent as it is made (`_made_durable`): a power cut after the
first run into a new `--out` never takes the directory, and its outputs, away."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from meddevkg_core.errors import InputError

STAGE = ".staged"
"""The directory `replaced_files` writes a run's outputs into; one a killed run left is cleared by the
next run, or moved in when it carries COMPLETE. Never one a live run writes into: the next run is
refused while that one holds `claimed_directory`."""
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
    _made_durable(path.parent)
    tmp = _sibling(path, "tmp")
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def replaced_directory(path: str | Path) -> Iterator[Path]:
    """A temporary sibling directory to fill; it takes `path`'s place when the block ends without error,
    and is removed otherwise. The old directory is renamed away first, so a reader meets either the
    old directory, the new one, or (between two renames) none: never a mix."""
    path = Path(path)
    _made_durable(path.parent)
    tmp = _sibling(path, "tmp")
    tmp.mkdir()
    try:
        yield tmp
        _fsync(tmp, tree=True)
        _swap_in(tmp, path)
        _fsync(path.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(new: Path, path: Path) -> None:
    old = _sibling(path, "old")
    if path.exists():
        os.replace(path, old)
    os.replace(new, path)
    shutil.rmtree(old, ignore_errors=True)


def _fsync(path: Path, *, tree: bool = False) -> None:
    """Flush `path` (a file, or a directory's entries) to disk; with `tree`, each regular file and
    directory under it first. A directory some file systems cannot fsync (EINVAL, EBADF) is left as it
    is: their renames are as durable as they make them. Any other error is raised: a write not on disk."""
    if tree:
        for root, _, files in os.walk(path, topdown=False):  # a directory after what it holds
            for name in files:
                if stat.S_ISREG(os.lstat(os.path.join(root, name)).st_mode):
                    _fsync(Path(root, name))
            _fsync(Path(root))
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF) or not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise
    finally:
        os.close(fd)


def _missing(path: Path) -> list[Path]:
    """`path` and its parents that are not there (nor a symlink), deepest first."""
    return [p for p in (path, *path.parents) if not os.path.lexists(p)]


def _made_durable(path: Path) -> list[Path]:
    """Make directory `path` and any missing parent, and fsync the parent of each one made, deepest first:
    a new directory's entry is on disk before outputs are committed in it, or a power cut could take it
    with them. A directory that was there costs nothing. If a mkdir or an fsync fails, the directories
    this call made are removed again (`_removed_if_empty`) and its error raised: a command that fails
    leaves no empty `--out` behind; one another process made meanwhile is its, and stays. Returns the
    directories this call made, deepest first."""
    made: list[Path] = []  # deepest first
    try:
        for directory in reversed(_missing(path)):
            with suppress(FileExistsError):  # made by another process since: not this call's
                directory.mkdir()
                made.insert(0, directory)
        path.mkdir(exist_ok=True)  # a file in the way is refused, as it was there or came meanwhile
        for directory in made:
            _fsync(directory.parent)
    except BaseException:
        _removed_if_empty(made)
        raise
    return made


def _removed_if_empty(made: list[Path]) -> None:
    """Remove the directories a writer `made` (deepest first), each only if empty, never a tree: at the
    first one another process has written into meanwhile (or removed), it stops, and that one and its
    parents stay. It never raises: the writer's own error is the one to name."""
    for directory in made:
        try:
            directory.rmdir()
        except OSError:
            break


def check_writable_directory(path: str | Path) -> None:
    """Refuse `path` unless outputs can be written there: a directory this process can write into, or
    a missing one whose nearest existing ancestor is such a directory (no file on the way). A command
    checks its `--out` with it before its long work (`claimed_directory` does), so a file in the way
    or a directory it may not write to is named at the start, not after an hour of ranking; so is one
    another run holds (its lock, tried without waiting and let go). It makes nothing (the probe is a
    temporary directory, removed)."""
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
    if nearest == path:
        with _locked(path) as other:
            if other:
                raise _busy(path, other)


@contextmanager
def claimed_directory(path: str | Path) -> Iterator[Path]:
    """`path`, checked (`check_writable_directory`), made if missing, and locked until the block ends: a
    command holds it from before its long work until its outputs are written (its `replaced_files`
    takes the same lock), so a second run into the same directory is refused at its start, in one
    line, never an hour later and never by clearing the first's stage. A commit a killed run left is
    finished first. The directories it makes are fsynced into their parents before the block
    (`_made_durable`, which removes them again if that fails), and removed again if the block leaves
    them empty: a command that fails leaves no empty `--out` behind. A kill leaves them, and takes its
    lock along."""
    path = Path(path)
    check_writable_directory(path)
    made: list[Path] = []  # by this run, deepest first: not a parent another process made meanwhile
    with ExitStack() as held:
        while True:  # again if a run that made it removed it, empty, as this one locked it
            made = sorted({*made, *_made_durable(path)}, key=lambda p: len(p.parts), reverse=True)
            with suppress(FileNotFoundError):
                other = held.enter_context(_locked(path))
                break
        if other:
            raise _busy(path, other)
        try:
            finish_interrupted_commit(path)
            yield path
        finally:
            _removed_if_empty(made)  # locked still: no other run holds them


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
    (`finish_interrupted_commit`), and the outputs are the killed run's, all of them. The block holds
    `claimed_directory(directory)` (the command's own claim if it holds one): another run writing
    there meanwhile is refused, and the stage it finds is never one a live run is writing."""
    with claimed_directory(directory) as directory:
        stage = directory / STAGE
        shutil.rmtree(stage, ignore_errors=True)  # unmarked: a run killed while writing
        stage.mkdir()
        marked = False
        try:
            yield stage
            _fsync(stage, tree=True)  # before the mark: a power cut never leaves one over outputs lost
            (stage / COMPLETE).touch()  # empty: made or not, never half-written
            _fsync(stage / COMPLETE)
            _fsync(stage)
            marked = True
            _move_in(directory)
        finally:
            if not marked:
                shutil.rmtree(stage, ignore_errors=True)


COMMIT_WAIT = 10.0
"""Seconds `finish_interrupted_commit` waits for a live run's renames (milliseconds) before refusing."""


def finish_interrupted_commit(directory: str | Path) -> None:
    """Finish the renames of a `replaced_files` run into `directory` that was killed between two of
    them (its stage marked COMPLETE), so `directory` holds that run's outputs and none it replaced;
    else do nothing. A command reading a run directory calls it first, as `claimed_directory` does:
    the mix a kill left is never read. A stage without the mark (a run killed while writing, or one
    writing now) is left alone: the outputs beside it are one run's.

    A reader never waits for a run's lock, held from a command's start to its end (an hour maybe):
    the mark with the lock held means that run is in its renames (a killed run's are finished as the
    lock is taken), so it waits for the mark to go, COMMIT_WAIT seconds at most, then refuses naming
    the run: neither kept behind a long run nor shown its renames half done."""
    directory = Path(directory)
    deadline = time.monotonic() + COMMIT_WAIT
    while (directory / STAGE / COMPLETE).is_file():
        with _locked(directory) as other:
            if not other:
                try:
                    _move_in(directory)
                except OSError as exc:
                    raise InputError(f"{directory}: a run killed while moving its outputs in left them mixed, "
                                     f"and they cannot be moved in now ({exc.strerror or exc})") from exc
                return
        if time.monotonic() > deadline:
            raise InputError(f"{directory}: {other} is moving its outputs in here and has not finished in "
                             f"{COMMIT_WAIT:g} s; try again when it has")
        time.sleep(0.05)


def _move_in(directory: Path) -> None:
    """Move each entry of the COMPLETE stage into `directory` (a file by a rename, a subdirectory by
    `_swap_in`), clear the old directories `_swap_in` renamed away, then the stage. The caller holds
    `directory`'s lock: a reader finishing a commit never races the writer still making it."""
    stage = directory / STAGE
    if not (stage / COMPLETE).is_file():  # the writer finished it as the reader took the lock
        return
    for entry in sorted(stage.iterdir()):
        if entry.name == COMPLETE:
            continue
        if entry.is_dir():
            _swap_in(entry, directory / entry.name)
        else:
            os.replace(entry, directory / entry.name)
    _fsync(directory)  # before the mark goes: a power cut never leaves some renames lost and no mark
    for old in directory.iterdir():  # a kill between _swap_in's renames, or before it removed the old
        if _OLD_SIBLING.fullmatch(old.name):
            shutil.rmtree(old, ignore_errors=True)
    (stage / COMPLETE).unlink()  # first: what is left of the stage is nothing to move in
    shutil.rmtree(stage, ignore_errors=True)


_HELD: set[tuple[int, int, int]] = set()
"""(device, inode, thread) of each directory whose lock a thread of this process holds: a block nested
in another on the same directory (a command's `claimed_directory`, then its `replaced_files`) uses
it, since a second flock, on a new descriptor, would conflict with the first."""


@contextmanager
def _locked(directory: Path) -> Iterator[str]:
    """Hold `directory`'s lock for the block, taken without waiting: "" then, or the run holding it
    ("another run (pid N)") and nothing held. An flock, released with its descriptor, by a kill too:
    no lock outlives its run. FileNotFoundError when `directory` is not there, or not the one locked."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino, threading.get_ident())
        if key in _HELD:
            yield ""
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield f"another run{_pid_holding(st)}"
            return
        if not os.path.samestat(st, os.stat(directory)):  # removed by the run that made it as this one opened it
            raise FileNotFoundError(errno.ENOENT, "removed as it was locked", str(directory))
        _HELD.add(key)
        try:
            yield ""
        finally:
            _HELD.discard(key)
    finally:
        os.close(fd)


def _pid_holding(st: os.stat_result) -> str:
    """" (pid N)", the process holding an flock on the file `st` describes as /proc/locks (Linux) names
    it; "" where it does not. For the message only: the lock is the flock, whatever this says."""
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        rows = [line.split() for line in Path("/proc/locks").read_text().splitlines()]
    except OSError:
        return ""
    pids = [row[4] for row in rows if row[1:2] == ["FLOCK"] and row[5:6] == [where] and row[4].isdigit()]
    return f" (pid {pids[0]})" if pids and pids[0] != "0" else ""


def _busy(directory: Path, other: str) -> InputError:
    return InputError(f"{directory}: {other} is writing its outputs here; wait for it to end, or write them elsewhere")
