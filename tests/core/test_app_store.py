"""Where the applications find a run's corpus."""

from __future__ import annotations

import json
import os
import re

import polars as pl
import pytest

from meddevkg_core.app_store import corpus_of, from_output_dir
from meddevkg_core.atomic_files import COMPLETE, STAGE
from meddevkg_core.errors import InputError
from tests.conftest import PANICKED_ON_IT, WOULD_ABORT_ON_IT


def test_a_directory_written_by_benchmark_then_run_names_the_runs_corpus(tmp_path, monkeypatch):
    monkeypatch.delenv("MEDDEVKG_CORPUS", raising=False)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "devices.parquet").touch()
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"corpus": {"path": str(tmp_path / "a")}}))  # benchmark on a
    (out / "summary.json").write_text(json.dumps({"corpus": {"path": str(tmp_path / "b")}}))  # then run on b
    os.utime(out / "report.json", ns=(1_000_000_000, 1_000_000_000))
    assert corpus_of(out) == tmp_path / "b"
    os.utime(out / "summary.json", ns=(1, 1))  # and the other way round
    assert corpus_of(out) == tmp_path / "a"


@pytest.mark.parametrize("body", ["{not json", '{"corpus": "x"}', '{"corpus": {"path": 3}}', "[1]",
                                  "[" * 100_000 + "]" * 100_000])
def test_a_report_that_no_run_wrote_is_named_instead_of_a_traceback(tmp_path, body):
    (tmp_path / "report.json").write_text(body)
    with pytest.raises(InputError, match=r"report\.json: not a run or benchmark report .*--corpus"):
        corpus_of(tmp_path)


def test_a_report_without_a_corpus_falls_back_to_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDDEVKG_CORPUS", str(tmp_path / "c"))
    (tmp_path / "report.json").write_text('{"corpus": {"path": null}, "R@10": 0.5}')
    assert corpus_of(tmp_path) == tmp_path / "c"


def test_links_without_the_columns_the_applications_read_are_named(tmp_path):
    pl.DataFrame({"fda_id": ["P1"], "pat_id": ["1"]}).write_parquet(tmp_path / "links.parquet")
    with pytest.raises(InputError, match=r"links\.parquet: not the links of a run or benchmark "
                                         r"\(no probability, decision\)"):
        from_output_dir(tmp_path)


def test_a_damaged_links_file_is_named_in_one_line_instead_of_a_traceback(tmp_path, damaged_parquet,
                                                                          aborting_parquet):
    # polars raised a PanicException, a BaseException no reader caught
    path = damaged_parquet(tmp_path / "links.parquet")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: cannot be read: {PANICKED_ON_IT}$"):
        from_output_dir(tmp_path)
    aborting_parquet(path)  # polars aborted the process: no error, no file named
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: cannot be read: {WOULD_ABORT_ON_IT}$"):
        from_output_dir(tmp_path)


def test_the_links_of_a_run_killed_while_moving_them_in_are_read_once_moved_in(tmp_path, monkeypatch):
    monkeypatch.delenv("MEDDEVKG_CORPUS", raising=False)

    def links(pat_id: str) -> pl.DataFrame:
        return pl.DataFrame({"fda_id": ["P1"], "pat_id": [pat_id], "probability": [0.9], "decision": ["link"]})
    links("1").write_parquet(tmp_path / "links.parquet")  # the previous run's
    (tmp_path / STAGE).mkdir()  # a run writing now: its outputs are not read yet
    links("2").write_parquet(tmp_path / STAGE / "links.parquet")
    assert from_output_dir(tmp_path).links["pat_id"].to_list() == ["1"]
    (tmp_path / STAGE / COMPLETE).touch()  # the run was killed before its first rename
    assert from_output_dir(tmp_path).links["pat_id"].to_list() == ["2"]
    assert [p.name for p in tmp_path.iterdir()] == ["links.parquet"]
