"""Benchmark runs compared device by device."""

from __future__ import annotations

import json

import polars as pl
import pytest

from meddevkg_core.errors import InputError
from meddevkg_core.lineage import InputFile
from meddevkg_core.run_comparison import (
    InputCheck,
    RankingsError,
    check_inputs,
    compare_runs,
    device_metrics,
    format_comparison,
    input_check_lines,
    recorded_inputs,
)

GOLD = pl.DataFrame({"fda_id": ["D1", "D1", "D2"], "pat_id": ["a", "b", "c"]})


def _rankings(order: dict[str, list[str]]) -> pl.DataFrame:
    rows = [(dev, pat, rank) for dev, pats in order.items() for rank, pat in enumerate(pats, start=1)]
    return pl.DataFrame(rows, schema={"fda_id": pl.String, "pat_id": pl.String, "rank": pl.Int32}, orient="row")


def test_device_metrics_count_a_gold_patent_missing_from_the_ranking_as_not_found():
    fillers = [f"x{i}" for i in range(12)]
    ranks = _rankings({"D1": ["x", "a", *fillers], "D2": [*fillers, "c"]})  # b is not ranked; c at 13
    metrics = {r["fda_id"]: r for r in device_metrics(ranks, GOLD).iter_rows(named=True)}
    assert metrics["D1"]["rr"] == 0.5 and metrics["D1"]["recall_10"] == 0.5 and metrics["D1"]["hits_10"] == 1
    assert metrics["D2"]["rr"] == pytest.approx(1 / 13) and metrics["D2"]["recall_10"] == 0
    assert metrics["D2"]["recall_100"] == 1 and metrics["D1"]["gold"] == 2


def test_a_ranking_without_a_gold_device_or_a_column_is_refused_by_name():
    with pytest.raises(RankingsError, match="D2"):
        device_metrics(_rankings({"D1": ["a", "b"]}), GOLD)
    with pytest.raises(RankingsError, match="rank"):
        device_metrics(_rankings({"D1": ["a"], "D2": ["c"]}).drop("rank"), GOLD)


def _gold_devices(n: int) -> pl.DataFrame:
    return pl.DataFrame({"fda_id": [f"D{i:02d}" for i in range(n)], "pat_id": [f"g{i}" for i in range(n)]})


def _ranked_at(gold: pl.DataFrame, rank_of: dict[str, int]) -> pl.DataFrame:
    """Each device's gold patent at the given rank (else first), behind filler patents."""
    order = {}
    for dev, pat in gold.iter_rows():
        rank = rank_of.get(dev, 1)
        order[dev] = [f"f{i}" for i in range(rank - 1)] + [pat]
    return _rankings(order)


def test_a_change_that_helps_most_devices_is_significant_and_one_device_is_not():
    gold = _gold_devices(12)
    before = _ranked_at(gold, {f"D{i:02d}": 3 for i in range(12)})
    after = _ranked_at(gold, {f"D{i:02d}": 1 for i in range(11)} | {"D11": 4})  # 11 devices gain, one loses
    comparison, paired = compare_runs([before], [after], gold)
    rr = next(m for m in comparison.metrics if m.metric == "rr")
    assert (rr.gain, rr.lose) == (11, 1) and rr.p_value < 0.01
    assert rr.mean_b > rr.mean_a and paired.height == 12
    lucky = _ranked_at(gold, {f"D{i:02d}": 3 for i in range(11)} | {"D11": 1})  # one device gains a lot
    one = next(m for m in compare_runs([before], [lucky], gold)[0].metrics if m.metric == "rr")
    assert (one.gain, one.lose) == (1, 0) and one.p_value == 1.0  # a single device: no evidence
    assert "D11" in format_comparison(*compare_runs([before], [lucky], gold))


def test_each_side_is_averaged_over_its_runs_before_devices_are_paired():
    gold = _gold_devices(3)
    at_1, at_2 = _ranked_at(gold, {}), _ranked_at(gold, {d: 2 for d in gold["fda_id"]})
    comparison, paired = compare_runs([at_1, at_2], [at_1], gold)
    assert paired["rr_a"].to_list() == [0.75, 0.75, 0.75] and paired["rr_b"].to_list() == [1.0, 1.0, 1.0]
    assert comparison.runs_a == 2 and comparison.micro_recall_10_a == comparison.micro_recall_10_b == 1.0
    unchanged = compare_runs([at_1], [at_1], gold)[0]
    assert all(m.gain == m.lose == 0 and m.p_value == 1.0 for m in unchanged.metrics)
    with pytest.raises(RankingsError, match="at least one run"):
        compare_runs([], [at_1], gold)


def test_a_comparison_without_gold_devices_is_refused_by_name():
    at_1 = _ranked_at(_gold_devices(2), {})
    with pytest.raises(RankingsError, match="no gold links"):
        compare_runs([at_1], [at_1], GOLD.clear())


def _file(path: str, digest: str) -> InputFile:
    return InputFile(path=path, size=10, sha256=digest * 64)


BASE = {"devices": _file("/c/devices.parquet", "a"), "patents": _file("/c/patents.parquet", "b"),
        "gold_links": _file("/c/gold_links.parquet", "c"), "config": _file("/tmp/seed_42.json", "d")}


def test_runs_on_the_same_bytes_read_the_same_inputs_whatever_their_paths_and_configs():
    copied = {name: f.model_copy(update={"path": "/copy" + f.path}) for name, f in BASE.items()}
    seed_7 = BASE | {"config": _file("/tmp/seed_7.json", "e")}  # the config is what a variant changes
    check = check_inputs({"a42": BASE, "a7": seed_7}, {"b42": copied}, corpus=BASE)
    assert check == InputCheck(differing={}, unknown=[]) and input_check_lines(check) == []


def test_the_tables_that_differ_are_named_with_the_sides_that_read_them():
    other_devices = BASE | {"devices": _file("/c/devices.parquet", "f")}
    with_fda = BASE | {"fda_pma": _file("/fda/fdadata_pma.parquet", "9")}
    check = check_inputs({"a": BASE}, {"b": other_devices | {"fda_pma": with_fda["fda_pma"]}},
                         corpus={"gold_links": _file("/c/gold_links.parquet", "0")})
    assert check.differing == {"devices": "side a's and side b's differ", "fda_pma": "read by side b only",
                               "gold_links": "the runs' and --corpus's differ"}
    assert input_check_lines(check) == [
        "the runs read different inputs: devices (side a's and side b's differ), fda_pma (read by side b only), "
        "gold_links (the runs' and --corpus's differ)"]
    within = check_inputs({"a1": BASE, "a2": other_devices}, {"b": BASE})
    assert within.differing == {"devices": "side a's runs differ"}


def test_runs_written_before_inputs_were_recorded_are_compared_with_a_note():
    check = check_inputs({"/runs/a": None}, {"/runs/b": BASE, "/runs/b2": BASE | {"patents": _file("/p", "f")}})
    assert check.unknown == ["/runs/a"] and check.differing == {"patents": "side b's runs differ"}
    assert input_check_lines(check)[1] == ("note: inputs unknown for 1 run(s), written before report.json "
                                           "recorded them (/runs/a): not checked to have read the same data")
    assert input_check_lines(check_inputs({"a": None}, {"b": None})) == [
        "note: inputs unknown for 2 run(s), written before report.json recorded them (a, b): not checked to "
        "have read the same data"]


def test_a_runs_inputs_are_read_from_its_report_and_an_unreadable_report_is_named(tmp_path):
    assert recorded_inputs(tmp_path) is None  # no report.json: a directory with rankings only
    (tmp_path / "report.json").write_text('{"corpus": {"path": "/c"}}')
    assert recorded_inputs(tmp_path) is None  # written before inputs were recorded
    (tmp_path / "report.json").write_text(json.dumps({"inputs": {k: v.model_dump() for k, v in BASE.items()}}))
    assert recorded_inputs(tmp_path) == BASE
    for broken in ("{truncated", '{"inputs": {"devices": {"path": "/c/devices.parquet"}}}', '{"inputs": []}'):
        (tmp_path / "report.json").write_text(broken)
        with pytest.raises(InputError, match=rf"^{tmp_path}/report.json: not a benchmark report's inputs \("):
            recorded_inputs(tmp_path)
