"""Where the applications find a run's corpus."""

from __future__ import annotations

import json
import os

from meddevkg_core.app_store import corpus_of


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
