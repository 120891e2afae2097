"""Two sets of benchmark runs compared device by device, with a paired test over the gold devices.

A change measured over several seeds can gain on every seed and still come from a few devices:
the seeds redraw the negative samples and the trees, not the folds (GroupKFold assigns devices
to folds without a seed unless `rerank.fold_seed` is set) and not the devices. Here the unit is
the gold device (54 on the benchmark): each side's runs are averaged per device, and the Wilcoxon
signed-rank test asks whether the per-device differences lean one way, as IR evaluation compares
two systems query by query (ranx's `compare`, for one). On 2026-11-25 a change that raised MRR and
lowered FPR on all five seeds had p 0.23 over the devices' reciprocal ranks (docs/EXPERIMENTS.md,
2026-11-25).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
from pydantic import BaseModel
from scipy.stats import wilcoxon

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


class RunComparison(BaseModel, frozen=True):
    """What `meddevkg compare-runs` prints as JSON: the sizes, each side's micro R@10, the tested metrics."""

    devices: int
    runs_a: int
    runs_b: int
    micro_recall_10_a: float
    micro_recall_10_b: float
    metrics: list[MetricComparison]


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
