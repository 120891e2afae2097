"""Outputs replaced whole: the previous version stays until the new one is complete."""

from __future__ import annotations

import tempfile

import pytest

from meddevkg_core.atomic_files import (
    STAGE,
    check_writable_directory,
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


def test_a_stage_a_killed_run_left_is_cleared_by_the_next_run(tmp_path):
    out = tmp_path / "run"
    (out / STAGE).mkdir(parents=True)  # what a kill in the middle of the writes leaves
    (out / STAGE / "links.parquet").write_text("half")
    with replaced_files(out) as stage:
        (stage / "report.json").write_text("{}")
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]


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
