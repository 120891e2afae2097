"""`write_result`: a run's files are replaced as one set."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.pipeline import PipelineResult, write_result


def _result(version: int) -> PipelineResult:
    frame = pl.DataFrame({"fda_id": ["P1"], "pat_id": [f"US{version}"]})
    full = SimpleNamespace(threshold=0.5, n_train_pairs=1, n_train_devices=1)
    model = SimpleNamespace(full=full, folds=[], to_frame=lambda: pl.DataFrame({"fold": [version]}))
    evaluation = SimpleNamespace(model_dump=lambda: {"n_links": version})
    return PipelineResult(frame, frame, frame, model, evaluation, schemas.empty(schemas.REJECTED_RECORDS),
                          frame, frame, frame)


def _contents(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_write_that_fails_midway_leaves_the_previous_run_and_no_temporary_file(tmp_path, monkeypatch):
    out = tmp_path / "run"
    write_result(_result(1), out)
    (out / "notes.txt").write_text("the user's own file")
    before = _contents(out)
    real = pl.DataFrame.write_parquet

    def disk_full_on_the_model(self, file, *args, **kwargs):
        if "reranker_model" in Path(file).name:
            Path(file).write_bytes(b"PAR1 half a")
            raise OSError("No space left on device")
        return real(self, file, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", disk_full_on_the_model)
    with pytest.raises(OSError, match="No space left"):
        write_result(_result(2), out)
    assert _contents(out) == before
    monkeypatch.undo()
    write_result(_result(2), out)
    assert pl.read_parquet(out / "links.parquet")["pat_id"].to_list() == ["US2"]
    assert (out / "notes.txt").read_text() == "the user's own file"
    assert sorted(p.name for p in out.iterdir()) == sorted(before)
