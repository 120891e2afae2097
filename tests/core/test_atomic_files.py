"""Outputs replaced whole: the previous version stays until the new one is complete."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest

from meddevkg_core import atomic_files
from meddevkg_core.atomic_files import (
    COMPLETE,
    STAGE,
    check_writable_directory,
    claimed_directory,
    finish_interrupted_commit,
    replaced_directory,
    replaced_file,
    replaced_files,
)
from meddevkg_core.errors import InputError


def test_a_file_is_replaced_only_when_its_writer_finishes(tmp_path):
    path = tmp_path / "out" / "report.json"
    with replaced_file(path) as tmp:
        tmp.write_text("v1")
    assert path.read_text() == "v1"
    with pytest.raises(RuntimeError), replaced_file(path) as tmp:
        tmp.write_text("half of v")
        raise RuntimeError("the writer died")
    assert path.read_text() == "v1" and [p.name for p in path.parent.iterdir()] == ["report.json"]


def test_a_directory_is_replaced_whole_or_not_at_all(tmp_path):
    out = tmp_path / "export"
    with replaced_directory(out) as work:
        (work / "a.csv").write_text("1")
        (work / "b.csv").write_text("1")
    with pytest.raises(RuntimeError), replaced_directory(out) as work:
        (work / "a.csv").write_text("2")
        raise RuntimeError("the writer died")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a.csv": "1", "b.csv": "1"}
    with replaced_directory(out) as work:
        (work / "a.csv").write_text("3")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a.csv": "3"}  # b.csv was the old export's
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_a_set_of_outputs_replaces_its_files_together_and_leaves_the_others(tmp_path):
    out = tmp_path / "run"
    with replaced_files(out) as stage:
        (stage / "links.parquet").write_text("1")
        (stage / "plots").mkdir()
        (stage / "plots" / "a.png").write_text("1")
    (out / "mine.txt").write_text("kept")
    with pytest.raises(RuntimeError), replaced_files(out) as stage:
        (stage / "links.parquet").write_text("2")
        raise RuntimeError("the writer died")
    assert {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()} == {
        "links.parquet": "1", "plots/a.png": "1", "mine.txt": "kept"}
    with replaced_files(out) as stage:
        (stage / "links.parquet").write_text("3")
        (stage / "plots").mkdir()
        (stage / "plots" / "b.png").write_text("3")
    assert {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()} == {
        "links.parquet": "3", "plots/b.png": "3", "mine.txt": "kept"}  # a subdirectory is replaced whole


@pytest.fixture
def synced(tmp_path, monkeypatch):
    """Each fsync and rename of atomic_files, in order: ("fsync", path), ("replace", source, target), each
    with whether tmp_path/run's stage is marked COMPLETE then (a power cut loses what is not fsynced)."""
    log: list[tuple[str, ...]] = []
    fsync, replace = os.fsync, os.replace
    marked = lambda: "marked" if (tmp_path / "run" / STAGE / COMPLETE).exists() else ""  # noqa: E731

    def logged_fsync(fd: int) -> None:
        log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), marked()))
        fsync(fd)

    def logged_replace(source: Path, target: Path) -> None:
        log.append(("replace", str(source), str(target), marked()))
        replace(source, target)

    monkeypatch.setattr(atomic_files.os, "fsync", logged_fsync)
    monkeypatch.setattr(atomic_files.os, "replace", logged_replace)
    return log


def test_a_file_is_on_disk_before_it_replaces_the_previous_one_and_so_is_the_rename(tmp_path, synced):
    path = tmp_path.resolve() / "out" / "links.parquet"
    with replaced_file(path) as tmp:
        tmp.write_text("1")
    assert synced == [("fsync", str(tmp_path.resolve()), ""),  # the directory it made: out's entry
                      ("fsync", str(tmp), ""), ("replace", str(tmp), str(path), ""),
                      ("fsync", str(path.parent), "")]


def test_a_directory_is_on_disk_before_it_replaces_the_previous_one_and_so_is_the_rename(tmp_path, synced):
    out = tmp_path.resolve() / "export"
    with replaced_directory(out) as work:
        (work / "a.csv").write_text("1")
        (work / "sub").mkdir()
        (work / "sub" / "b.csv").write_text("1")
    swap = synced.index(("replace", str(work), str(out), ""))
    assert {entry[1] for entry in synced[:swap]} == {str(work / "a.csv"), str(work / "sub" / "b.csv"),
                                                    str(work / "sub"), str(work)}
    assert synced[swap + 1:] == [("fsync", str(tmp_path.resolve()), "")]


def test_a_set_of_outputs_is_on_disk_before_it_is_marked_complete_and_its_renames_before_the_mark_goes(
        tmp_path, synced):
    out = tmp_path.resolve() / "run"
    stage = out / STAGE
    with replaced_files(out) as written:
        for name in ("links.parquet", "report.json"):
            (written / name).write_text("1")
        (written / "plots").mkdir()
        (written / "plots" / "a.png").write_text("1")
    staged = {str(stage / name) for name in ("links.parquet", "report.json", "plots/a.png", "plots")}
    assert staged <= {entry[1] for entry in synced if entry[0] == "fsync" and not entry[-1]}
    renames = [i for i, entry in enumerate(synced) if entry[0] == "replace"]
    before = synced[:renames[0]]
    assert {("fsync", str(stage / COMPLETE), "marked"), ("fsync", str(stage), "marked")} <= set(before)
    assert ("fsync", str(out), "marked") in synced[renames[-1]:]  # the mark goes after: its renames are on disk


def test_the_directories_a_claim_makes_are_on_disk_before_any_output_is(tmp_path, synced):
    # a power cut after the first run into a new --out would otherwise take it away, outputs and all
    root = tmp_path.resolve()
    out = root / "a" / "b" / "run"
    with claimed_directory(out):
        made = list(synced)  # at the claim: before the command's work, so before any output of it
        with replaced_files(out) as stage:
            (stage / "links.parquet").write_text("1")
    assert made == [("fsync", str(parent), "") for parent in (root / "a" / "b", root / "a", root)]
    assert not {entry[1] for entry in synced[len(made):]} & {str(root / "a" / "b"), str(root / "a"), str(root)}
    assert (out / "links.parquet").read_text() == "1"


def test_a_claim_of_a_directory_that_is_there_fsyncs_no_directory_above_it(tmp_path, synced):
    out = tmp_path.resolve() / "run"
    out.mkdir()
    with claimed_directory(out):
        assert synced == []
        with replaced_files(out) as stage:
            (stage / "links.parquet").write_text("1")
    assert all(Path(entry[1]).is_relative_to(out) for entry in synced if entry[0] == "fsync")
    with replaced_file(out / "report.json") as tmp:  # the single-file writer alike
        tmp.write_text("{}")
    assert all(Path(entry[1]).is_relative_to(out) for entry in synced if entry[0] == "fsync")


@pytest.mark.parametrize("error", [errno.EINVAL, errno.EBADF])
def test_a_file_system_that_cannot_fsync_a_directory_still_gets_its_outputs(tmp_path, monkeypatch, error):
    fsync = os.fsync

    def refused_for_directories(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(error, os.strerror(error))
        fsync(fd)

    monkeypatch.setattr(atomic_files.os, "fsync", refused_for_directories)
    with replaced_files(tmp_path / "run") as stage:
        (stage / "links.parquet").write_text("1")
    assert (tmp_path / "run" / "links.parquet").read_text() == "1"


def test_a_failed_fsync_fails_the_write_and_keeps_the_previous_output(tmp_path, monkeypatch):
    path = tmp_path / "links.parquet"
    path.write_text("1")

    def disk_error(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(atomic_files.os, "fsync", disk_error)
    with pytest.raises(OSError, match="Input/output error"), replaced_file(path) as tmp:
        tmp.write_text("2")
    assert path.read_text() == "1" and [p.name for p in tmp_path.iterdir()] == ["links.parquet"]


def test_a_stage_a_run_killed_while_writing_left_is_cleared_by_the_next_run(tmp_path):
    out = tmp_path / "run"
    (out / STAGE).mkdir(parents=True)  # what a kill in the middle of the writes leaves: no marker
    (out / STAGE / "links.parquet").write_text("half")
    (out / "links.parquet").write_text("1")
    with replaced_files(out) as stage:
        (stage / "report.json").write_text("{}")
    assert _files(out) == {"links.parquet": "1", "report.json": "{}"}  # the half-written links not moved in


KILLED_RUN = textwrap.dedent("""
    import os, signal, sys
    from meddevkg_core.atomic_files import replaced_files

    out, kill_after = sys.argv[1], int(sys.argv[2])
    renames, rename = [], os.replace

    def rename_then_die(*args):  # SIGKILL: no finally, no exit handler runs
        rename(*args)
        renames.append(args)
        if len(renames) == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
    os.replace = rename_then_die
    with replaced_files(out) as stage:
        (stage / "links.parquet").write_text("2")
        (stage / "plots").mkdir()
        (stage / "plots" / "b.png").write_text("2")
        (stage / "report.json").write_text("2")
""")


def _kill_a_run_into(out: Path, kill_after: int) -> None:
    """The second run of KILLED_RUN's outputs into `out`, killed after its `kill_after`-th rename:
    links.parquet; plots (the old one renamed away, then the new one in); report.json."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", KILLED_RUN, str(out), str(kill_after)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def _files(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()}


def _previous_run_and_a_file_of_mine(out: Path) -> None:
    with replaced_files(out) as stage:
        for name in ("links.parquet", "report.json", "summary.json"):
            (stage / name).write_text("1")
        (stage / "plots").mkdir()
        (stage / "plots" / "a.png").write_text("1")
    (out / "mine.txt").write_text("kept")


KILLED_RUN_DONE = {"links.parquet": "2", "plots/b.png": "2", "report.json": "2",
                   "summary.json": "1", "mine.txt": "kept"}  # summary.json: not one of its outputs


@pytest.mark.parametrize("kill_after", [1, 2, 3, 4])
def test_a_run_killed_between_its_renames_is_finished_by_the_next_one(tmp_path, kill_after):
    out = tmp_path / "run"
    _previous_run_and_a_file_of_mine(out)
    _kill_a_run_into(out, kill_after)
    if kill_after == 1:  # what it left: its links beside the previous run's report
        assert _files(out)["links.parquet"] == "2" and _files(out)["report.json"] == "1"
    with replaced_files(out) as stage:  # the next run finishes the killed one's commit before its own
        (stage / "rankings.parquet").write_text("3")
    assert _files(out) == {**KILLED_RUN_DONE, "rankings.parquet": "3"}
    assert sorted(p.name for p in out.iterdir()) == [  # no stage, no old plots renamed away
        "links.parquet", "mine.txt", "plots", "rankings.parquet", "report.json", "summary.json"]


def test_a_reader_finishes_the_commit_a_kill_interrupted_and_leaves_a_stage_being_written(tmp_path):
    out = tmp_path / "run"
    _previous_run_and_a_file_of_mine(out)
    _kill_a_run_into(out, 2)  # between plots renamed away and the new plots renamed in: no plots at all
    assert "plots/a.png" not in _files(out) and "plots/b.png" not in _files(out)
    finish_interrupted_commit(out)
    assert _files(out) == KILLED_RUN_DONE and not (out / STAGE).exists()
    (out / STAGE).mkdir()  # unmarked: a run writing now, or killed while writing; its outputs are not read
    (out / STAGE / "links.parquet").write_text("half")
    finish_interrupted_commit(out)
    assert _files(out) == {**KILLED_RUN_DONE, f"{STAGE}/links.parquet": "half"}


def test_a_commit_that_cannot_be_finished_is_named(tmp_path, monkeypatch):
    (tmp_path / STAGE).mkdir()
    (tmp_path / STAGE / "links.parquet").write_text("2")
    (tmp_path / STAGE / COMPLETE).touch()

    def refuse(*args):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(InputError, match=f"^{tmp_path}: a run killed while moving its outputs in left them mixed, "
                                         "and they cannot be moved in now \\(Permission denied\\)$"):
        finish_interrupted_commit(tmp_path)
    assert (tmp_path / STAGE / COMPLETE).is_file()  # still there for the next try


PREVIOUS_RUN = {"links.parquet": "1", "report.json": "1", "summary.json": "1", "plots/a.png": "1", "mine.txt": "kept"}


def _busy(out: Path, pid: int) -> str:
    return (f"^{out}: another run \\(pid {pid}\\) is writing its outputs here; "
            "wait for it to end, or write them elsewhere$")


def test_a_run_into_a_directory_another_run_is_writing_into_is_refused_and_leaves_it_its_stage(tmp_path, other_run):
    out = tmp_path / "run"
    _previous_run_and_a_file_of_mine(out)
    first = other_run(out, "writing")
    with pytest.raises(InputError, match=_busy(out, first.pid)):
        check_writable_directory(out)  # what a command checks at its start
    with pytest.raises(InputError, match=_busy(out, first.pid)), replaced_files(out) as stage:
        (stage / "links.parquet").write_text("second")
    assert _files(out) == {**PREVIOUS_RUN, f"{STAGE}/links.parquet": "first"}  # its stage, as it wrote it
    first.communicate("\n", timeout=60)
    assert first.returncode == 0 and _files(out) == {**PREVIOUS_RUN, "links.parquet": "first", "report.json": "first"}


def test_a_run_killed_while_writing_leaves_no_lock_behind(tmp_path, other_run):
    out = tmp_path / "run"
    _previous_run_and_a_file_of_mine(out)
    killed = other_run(out, "writing")
    killed.kill()
    killed.wait()
    check_writable_directory(out)
    with replaced_files(out) as stage:  # its stage is cleared, its lock went with it
        (stage / "rankings.parquet").write_text("3")
    assert _files(out) == {**PREVIOUS_RUN, "rankings.parquet": "3"}


def _read_in_a_thread(out: Path) -> tuple[threading.Thread, list[BaseException | None]]:
    """finish_interrupted_commit(out) in a thread: a test waiting on it forever fails instead of hanging."""
    ended: list[BaseException | None] = []

    def read() -> None:
        try:
            finish_interrupted_commit(out)
            ended.append(None)
        except BaseException as exc:
            ended.append(exc)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader, ended


def test_a_reader_does_not_wait_for_a_run_writing_and_waits_briefly_for_its_renames(tmp_path, other_run, monkeypatch):
    out = tmp_path / "run"
    _previous_run_and_a_file_of_mine(out)
    writing = other_run(out, "writing")  # an hour of work maybe: the reader reads the previous run at once
    reader, ended = _read_in_a_thread(out)
    reader.join(timeout=10)
    assert ended == [None] and _files(out) == {**PREVIOUS_RUN, f"{STAGE}/links.parquet": "first"}
    writing.kill()
    writing.wait()
    moving = other_run(out, "moving")  # its stage marked, stopped before its renames
    monkeypatch.setattr(atomic_files, "COMMIT_WAIT", 0.2)
    reader, ended = _read_in_a_thread(out)
    reader.join(timeout=10)
    assert len(ended) == 1 and isinstance(ended[0], InputError), ended
    assert str(ended[0]) == (f"{out}: another run (pid {moving.pid}) is moving its outputs in here and has not "
                             "finished in 0.2 s; try again when it has")
    assert (out / STAGE / COMPLETE).is_file()  # its renames are its own
    monkeypatch.setattr(atomic_files, "COMMIT_WAIT", 60)
    reader, ended = _read_in_a_thread(out)
    reader.join(timeout=0.5)
    assert reader.is_alive()  # waiting for the renames to end
    moving.communicate("\n", timeout=60)
    reader.join(timeout=10)
    assert moving.returncode == 0 and ended == [None]
    assert _files(out) == {**PREVIOUS_RUN, "links.parquet": "first", "report.json": "first"}


def test_an_out_directory_that_cannot_be_written_is_named_before_the_work(tmp_path):
    taken = tmp_path / "afile"
    taken.write_text("not a directory")
    for path in (taken, taken / "sub", taken / "sub" / "out"):  # the file in the way is named
        with pytest.raises(InputError, match=f"^{path}: cannot be written to \\({taken} is not a directory\\)$"):
            check_writable_directory(path)


def test_the_check_of_a_missing_out_directory_makes_nothing(tmp_path):
    # it made the directory and its parents, which a command failing after the check left behind empty
    out = tmp_path / "new" / "out"
    check_writable_directory(out)
    assert not any(tmp_path.iterdir())
    with replaced_files(out) as stage:  # the directory is made when the outputs are written
        (stage / "report.json").write_text("{}")
    assert [p.name for p in out.iterdir()] == ["report.json"]


def test_a_claim_makes_a_missing_directory_and_removes_it_if_left_empty(tmp_path):
    out = tmp_path / "new" / "out"
    with pytest.raises(RuntimeError), claimed_directory(out):
        assert out.is_dir()  # made to be locked: another run is refused from now on
        raise RuntimeError("the ranking failed")
    assert not any(tmp_path.iterdir())  # a command that fails leaves no empty --out
    with claimed_directory(out), replaced_files(out) as stage:  # a command's claim, then its outputs: one lock
        (stage / "report.json").write_text("{}")
    assert _files(tmp_path) == {"new/out/report.json": "{}"}


WRITERS = {
    "claimed_directory": lambda out: claimed_directory(out),
    "replaced_file": lambda out: replaced_file(out / "report.json"),
    "replaced_directory": lambda out: replaced_directory(out / "plots"),
}
"""Each writer that makes its directory (`out`) and any missing parent before its block."""


def _refused(monkeypatch, call: str, error: int, meanwhile=lambda: None) -> None:
    """os.`call` raises `error`, after `meanwhile` (what another process does then): every fsync, and
    the mkdir of a directory named out once its parent is there (a deeper level, after the others)."""
    real = getattr(os, call)

    def refused(target, *args, **kwargs):
        if call == "fsync" or (Path(target).name == "out" and Path(target).parent.is_dir()):
            meanwhile()
            raise OSError(error, os.strerror(error))
        return real(target, *args, **kwargs)
    monkeypatch.setattr(atomic_files.os, call, refused)


@pytest.mark.parametrize("call, error", [("fsync", errno.EIO), ("mkdir", errno.ENOSPC)])
@pytest.mark.parametrize("writer", WRITERS)
def test_a_writer_that_fails_to_make_its_directory_removes_the_directories_it_made(
        tmp_path, monkeypatch, writer, call, error):
    # the fsync of a new --out's parent failing, or a full disk at a deeper level, left them there empty
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "keep.txt").write_text("mine")
    _refused(monkeypatch, call, error)
    with pytest.raises(OSError) as failed, WRITERS[writer](runs / "new" / "out"):
        pytest.fail("the block runs only in a directory made")
    assert failed.value.errno == error  # its own error, not one of removing what it made
    assert _files(tmp_path) == {"runs/keep.txt": "mine"} and [p.name for p in runs.iterdir()] == ["keep.txt"]


def test_a_directory_another_process_fills_or_makes_meanwhile_stays_when_the_writer_fails(tmp_path, monkeypatch):
    out = tmp_path / "new" / "out"
    _refused(monkeypatch, "fsync", errno.EIO, meanwhile=lambda: (out.parent / "theirs.txt").write_text("theirs"))
    with pytest.raises(OSError, match="Input/output error"), claimed_directory(out):
        pass
    assert _files(tmp_path) == {"new/theirs.txt": "theirs"} and not out.exists()  # out removed, new not: not empty
    mkdir = os.mkdir

    def made_by_another_process_first(target, *args, **kwargs):
        if Path(target) == out:
            mkdir(target, *args, **kwargs)  # as this one found it missing
        mkdir(target, *args, **kwargs)
    (out.parent / "theirs.txt").unlink()
    out.parent.rmdir()
    monkeypatch.setattr(atomic_files.os, "mkdir", made_by_another_process_first)
    with pytest.raises(OSError, match="Input/output error"), replaced_file(out / "report.json"):
        pass
    assert out.is_dir() and not any(out.iterdir()) and list(tmp_path.iterdir()) == [out.parent]  # theirs: stays


def test_a_directory_this_process_cannot_write_into_is_named(tmp_path, monkeypatch):
    # chmod does not stop root, so the probe's failure is simulated
    probed = []

    def refuse(*args, dir, **kwargs):
        probed.append(dir)
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(tempfile, "TemporaryDirectory", refuse)
    with pytest.raises(InputError, match=f"^{tmp_path}: cannot be written to \\(Permission denied\\)$"):
        check_writable_directory(tmp_path)
    out = tmp_path / "new" / "out"  # missing: the nearest directory there is the one it would be made in
    with pytest.raises(InputError, match=f"^{out}: cannot be written to \\({tmp_path}: Permission denied\\)$"):
        check_writable_directory(out)
    assert probed == [tmp_path, tmp_path] and not any(tmp_path.iterdir())


def test_a_parent_another_process_makes_as_a_run_claims_its_out_stays_after_the_run(tmp_path, monkeypatch):
    out = tmp_path / "new" / "out"
    made_durable = atomic_files._made_durable

    def another_process_makes_the_parent_first(path):
        out.parent.mkdir()  # after the run found it missing, before it made it
        return made_durable(path)
    monkeypatch.setattr(atomic_files, "_made_durable", another_process_makes_the_parent_first)
    with pytest.raises(RuntimeError, match="failed"), claimed_directory(out):
        raise RuntimeError("failed")
    assert list(tmp_path.iterdir()) == [out.parent] and not out.exists()  # the other's: stays; the run's: gone
