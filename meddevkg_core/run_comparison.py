"""Two sets of benchmark runs compared device by device, with a paired test over the gold devices.

A change measured over several seeds can gain on every seed and still come from a few devices:
the seeds redraw the negative samples and the trees, not the folds (GroupKFold assigns devices
to folds without a seed unless `rerank.fold_seed` is set) and not the devices. Here the unit is
the gold device (54 on the benchmark): each side's runs are averaged per device, and the Wilcoxon
signed-rank test asks whether the per-device differences lean one way, as IR evaluation compares
two systems query by query (ranx's `compare`, for one). On 2026-11-25 a change that raised MRR and
lowered FPR on all five seeds had p 0.23 over the devices' reciprocal ranks (docs/EXPERIMENTS.md,
2026-11-25).

The runs compared must have read the same data: a device that moves between runs on different
corpora or FDA records moved for that, not for the variant. Each benchmark's report.json records
the files it read (lineage.py); `check_inputs` names the tables whose bytes differ.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl
from pydantic import BaseModel, TypeAdapter
from scipy.stats import wilcoxon

from meddevkg_core.errors import InputError, one_line
from meddevkg_core.lineage import InputFile

RANKINGS = pl.Schema({"fda_id": pl.String, "pat_id": pl.String, "rank": pl.Int32})
"""What a comparison reads of a benchmark's rankings.parquet (each device's top patents)."""

DEVICE_METRICS = pl.Schema({"fda_id": pl.String, "gold": pl.UInt32, "rr": pl.Float64, "recall_10": pl.Float64,
                            "recall_100": pl.Float64, "hits_10": pl.Float64})
"""Per gold device: the reciprocal rank of its best gold patent, its R@10 and R@100, and how many
of its gold patents are in its top 10 (the micro R@10's numerator). A gold patent missing from
the ranking counts as not found."""

TESTED = ("rr", "recall_10", "recall_100")
"""The metrics compared and tested; hits_10 is averaged too, for the micro R@10."""
METRICS = (*TESTED, "hits_10")


class MetricComparison(BaseModel, frozen=True):
    """One metric: the means over gold devices, how many devices gain and lose, and the test."""

    metric: str
    mean_a: float
    mean_b: float
    gain: int
    lose: int
    p_value: float
    """Wilcoxon signed-rank, two-sided, devices with no change left out; 1.0 when none changed."""


class InputCheck(BaseModel, frozen=True):
    """Whether the compared runs read the same data (`check_inputs`)."""

    differing: dict[str, str]
    """Each input whose bytes are not the same for every run, by name, with how it differs."""
    unknown: list[str]
    """The runs whose report records no inputs (written before they were recorded): not checked."""


class RunComparison(BaseModel, frozen=True):
    """What `meddevkg compare-runs` prints as JSON: the sizes, each side's micro R@10, the tested metrics,
    and whether the runs read the same data (None when it was not checked)."""

    devices: int
    runs_a: int
    runs_b: int
    micro_recall_10_a: float
    micro_recall_10_b: float
    metrics: list[MetricComparison]
    inputs: InputCheck | None = None


class RankingsError(ValueError):
    """A ranking cannot be compared: it lacks a column or a gold device, or there is no gold at all."""


def device_metrics(rankings: pl.DataFrame, gold: pl.DataFrame) -> pl.DataFrame:
    """DEVICE_METRICS of one run for every gold device."""
    missing = [c for c in RANKINGS if c not in rankings.columns]
    if missing:
        raise RankingsError(f"rankings lack the columns {missing}")
    absent = set(gold["fda_id"].unique()) - set(rankings["fda_id"].unique())
    if absent:
        raise RankingsError(f"rankings hold no patents for the gold devices {sorted(absent)[:5]} "
                            f"({len(absent)} in all)")
    ranks = gold.select("fda_id", "pat_id").unique().join(
        rankings.select("fda_id", "pat_id", pl.col("rank").cast(pl.Int64)), on=["fda_id", "pat_id"], how="left")
    return (ranks.group_by("fda_id")
            .agg(pl.len().cast(pl.UInt32).alias("gold"),
                 (1.0 / pl.col("rank").min()).fill_null(0.0).alias("rr"),
                 (pl.col("rank") <= 10).sum().cast(pl.Float64).alias("hits_10"),
                 (pl.col("rank") <= 100).sum().cast(pl.Float64).alias("hits_100"))
            .with_columns((pl.col("hits_10") / pl.col("gold")).alias("recall_10"),
                          (pl.col("hits_100") / pl.col("gold")).alias("recall_100"))
            .select(DEVICE_METRICS.names()).cast(DEVICE_METRICS).sort("fda_id"))


def paired_devices(runs_a: Sequence[pl.DataFrame], runs_b: Sequence[pl.DataFrame],
                   gold: pl.DataFrame) -> pl.DataFrame:
    """Per gold device, each metric averaged over side a's runs (`<metric>_a`) and side b's (`_b`)."""
    if not runs_a or not runs_b:
        raise RankingsError("each side needs at least one run")
    if gold.is_empty():
        raise RankingsError("no gold links: a comparison needs gold devices to pair the runs over")

    def side(runs: Sequence[pl.DataFrame], suffix: str) -> pl.DataFrame:
        per_run = pl.concat([device_metrics(r, gold) for r in runs])
        return per_run.group_by("fda_id").agg(pl.first("gold"), *(pl.mean(m).alias(m + suffix) for m in METRICS))

    return side(runs_a, "_a").join(side(runs_b, "_b").drop("gold"), on="fda_id").sort("fda_id")


def _test(diff: pl.Series) -> float:
    changed = diff.filter(diff != 0)
    return 1.0 if changed.is_empty() else float(wilcoxon(changed.to_numpy()).pvalue)


def _mean(column: pl.Series) -> float:
    # polars types mean() for any dtype; a Float64 column of a non-empty frame (paired_devices) gives a float
    return float(column.mean())  # type: ignore[arg-type]


def compare_runs(runs_a: Sequence[pl.DataFrame], runs_b: Sequence[pl.DataFrame],
                 gold: pl.DataFrame) -> tuple[RunComparison, pl.DataFrame]:
    """The comparison, and the per-device frame it rests on (with a `<metric>_diff` column each, b - a)."""
    paired = paired_devices(runs_a, runs_b, gold)
    paired = paired.with_columns((pl.col(m + "_b") - pl.col(m + "_a")).alias(m + "_diff") for m in METRICS)
    total = float(paired["gold"].sum())
    metrics = [MetricComparison(metric=m, mean_a=_mean(paired[m + "_a"]), mean_b=_mean(paired[m + "_b"]),
                                gain=int((paired[m + "_diff"] > 0).sum()), lose=int((paired[m + "_diff"] < 0).sum()),
                                p_value=_test(paired[m + "_diff"]))
               for m in TESTED]
    comparison = RunComparison(devices=paired.height, runs_a=len(runs_a), runs_b=len(runs_b),
                               micro_recall_10_a=float(paired["hits_10_a"].sum()) / total,
                               micro_recall_10_b=float(paired["hits_10_b"].sum()) / total, metrics=metrics)
    return comparison, paired


def format_comparison(comparison: RunComparison, paired: pl.DataFrame, top: int = 8) -> str:
    """A plain-text report: one line per metric, then the devices that moved most in reciprocal rank."""
    lines = [f"{comparison.devices} gold devices; side a: {comparison.runs_a} run(s), side b: {comparison.runs_b}",
             f"micro R@10: a {comparison.micro_recall_10_a:.3f}, b {comparison.micro_recall_10_b:.3f}",
             "metric (mean over devices)   a       b       gain  lose  Wilcoxon p"]
    lines += [f"{m.metric:<28} {m.mean_a:.3f}   {m.mean_b:.3f}   {m.gain:>4}  {m.lose:>4}  {m.p_value:.3f}"
              for m in comparison.metrics]
    moved = paired.filter(pl.col("rr_diff") != 0).sort(pl.col("rr_diff").abs(), "fda_id", descending=[True, False])
    if moved.height:
        lines.append("largest changes in reciprocal rank (device, gold patents, a -> b):")
        lines += [f"  {r['fda_id']}  {r['gold']:>3}  {r['rr_a']:.3f} -> {r['rr_b']:.3f}"
                  for r in moved.head(top).iter_rows(named=True)]
    return "\n".join(lines)


IGNORED_INPUTS = frozenset({"config"})
"""The inputs runs compared may differ in: the configuration is what a variant changes (a seed, a
setting), and report.json records it whole."""
_INPUTS = TypeAdapter(dict[str, InputFile])


def recorded_inputs(out_dir: str | Path) -> dict[str, InputFile] | None:
    """The inputs a benchmark directory's report.json records (lineage.inputs_json); None without a
    report.json (a directory of rankings only) or from a report written before inputs were recorded.
    A report that is not JSON, or whose inputs are not files by name, is an InputError naming it."""
    report = Path(out_dir) / "report.json"
    if not report.is_file():
        return None
    try:
        body = json.loads(report.read_text(encoding="utf-8"))
        if not isinstance(body, dict):
            raise ValueError(f"not a JSON object: {json.dumps(body)[:80]}")
        return _INPUTS.validate_python(body["inputs"]) if "inputs" in body else None
    except (ValueError, RecursionError) as exc:  # JSON, UTF-8 and pydantic's errors are ValueErrors
        raise InputError(f"{report}: not a benchmark report's inputs ({one_line(exc)})") from None


def _digests(runs: Mapping[str, Mapping[str, InputFile] | None]) -> list[dict[str, str]]:
    return [{name: found.sha256 for name, found in inputs.items() if name not in IGNORED_INPUTS}
            for inputs in runs.values() if inputs is not None]


def check_inputs(runs_a: Mapping[str, Mapping[str, InputFile] | None],
                 runs_b: Mapping[str, Mapping[str, InputFile] | None],
                 corpus: Mapping[str, InputFile] | None = None) -> InputCheck:
    """Which inputs (IGNORED_INPUTS aside) the runs of each side, by directory (`recorded_inputs`; None:
    not recorded), did not all read with the same bytes, wherever the file was; and which of
    `corpus`'s tables, the ones the comparison itself read (its gold), the runs read other bytes of."""
    sides = {"a": _digests(runs_a), "b": _digests(runs_b)}
    known = [*sides["a"], *sides["b"]]
    differing: dict[str, str] = {}
    for name in dict.fromkeys(name for run in known for name in run):
        read = {side: {run.get(name) for run in runs} for side, runs in sides.items() if runs}
        if within := next((side for side, digests in read.items() if len(digests) > 1), None):
            differing[name] = f"side {within}'s runs differ"
        elif len(read) == 2 and read["a"] != read["b"]:
            only = [side for side, digests in read.items() if digests != {None}]
            differing[name] = f"read by side {only[0]} only" if len(only) == 1 else "side a's and side b's differ"
    expected = _digests({"--corpus": corpus})[0] if corpus is not None else {}
    for name, digest in expected.items():
        if name not in differing and any(run.get(name) != digest for run in known):
            differing[name] = "the runs' and --corpus's differ"
    unknown = [run for runs in (runs_a, runs_b) for run, inputs in runs.items() if inputs is None]
    return InputCheck(differing=differing, unknown=unknown)


def input_check_lines(check: InputCheck) -> list[str]:
    """The check as the lines that open a comparison's report: the inputs that differ, then the runs
    that recorded none; no line when every run recorded the same."""
    lines = []
    if check.differing:
        lines.append("the runs read different inputs: "
                     + ", ".join(f"{name} ({how})" for name, how in check.differing.items()))
    if check.unknown:
        lines.append(f"note: inputs unknown for {len(check.unknown)} run(s), written before report.json recorded "
                     f"them ({', '.join(check.unknown)}): not checked to have read the same data")
    return lines
