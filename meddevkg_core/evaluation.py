"""Link evaluation on gold devices: recall of the pool and of the link set, volume, ranking.

Gold covers only some devices, so precision is not reported (METHOD.md §5.1); link-set recall is micro
over gold pairs, ranking recall is given both micro and per device (macro), and volumes are shares
of all device x patent pairs.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from pydantic import BaseModel


class LinkEvaluation(BaseModel, frozen=True):
    n_devices: int
    n_patents: int
    n_gold_pairs: int
    n_gold_devices: int
    pool_size: int
    pool_recall: float | None
    pool_share_of_pairs: float
    n_links: int
    link_recall: float | None
    link_share_of_pairs: float
    noise_reduction: float | None
    link_recall_out_of_fold_only: bool


def _recall(pairs: pl.DataFrame, gold: pl.DataFrame) -> float | None:
    if gold.height == 0:
        return None
    hit = gold.join(pairs.select("fda_id", "pat_id").unique(), on=["fda_id", "pat_id"], how="semi").height
    return hit / gold.height


def evaluate_links(candidates: pl.DataFrame, links: pl.DataFrame, gold: pl.DataFrame,
                   n_devices: int, n_patents: int) -> LinkEvaluation:
    """Recall and volume of the Stage-2 pool and of the final link set (decision = True)."""
    all_pairs = max(1, n_devices * n_patents)
    kept = links.filter(pl.col("decision"))
    gold_devices = gold["fda_id"].unique()
    oof = links.filter(pl.col("fda_id").is_in(gold_devices.implode()))
    return LinkEvaluation(
        n_devices=n_devices, n_patents=n_patents, n_gold_pairs=gold.height, n_gold_devices=gold_devices.len(),
        pool_size=candidates.height, pool_recall=_recall(candidates, gold),
        pool_share_of_pairs=candidates.height / all_pairs,
        n_links=kept.height, link_recall=_recall(kept, gold), link_share_of_pairs=kept.height / all_pairs,
        noise_reduction=(1 - kept.height / candidates.height) if candidates.height else None,
        link_recall_out_of_fold_only=bool(oof.height == 0 or oof["out_of_fold"].all()),
    )


def evaluation_frame(figures: dict[str, object]) -> pl.DataFrame:
    """The evaluation's figures as one stored row. A figure that can be missing (a recall without
    gold, a volume never reached, pool reduction of an empty pool) is a float; typed by its first
    null instead, the stored column would be INTEGER and round every later run's figure."""
    return pl.DataFrame([figures], schema_overrides={k: pl.Float64 for k, v in figures.items() if v is None})


def gold_ranks(scores: pl.DataFrame, gold: pl.DataFrame) -> pl.DataFrame:
    """Rank (1 = best) of each gold patent among its device's scored patents; null if unscored.

    Ties are broken by pat_id so ranks are deterministic and never flatter a method.
    """
    ranked = scores.sort(["fda_id", "score", "pat_id"], descending=[False, True, False]).with_columns(
        pl.int_range(1, pl.len() + 1).over("fda_id").alias("rank"))
    return gold.join(ranked.select("fda_id", "pat_id", "rank"), on=["fda_id", "pat_id"], how="left")


def ranking_metrics(scores: pl.DataFrame, gold: pl.DataFrame,
                    ks: tuple[int, ...] = (10, 50, 100, 500)) -> dict[str, float]:
    """`rank_metrics` of the gold pairs' ranks in `scores`."""
    return rank_metrics(gold_ranks(scores, gold), ks)


def rank_metrics(ranks: pl.DataFrame, ks: tuple[int, ...] = (10, 50, 100, 500)) -> dict[str, float]:
    """R@K two ways, MRR over gold devices (first gold hit) and the median gold rank.

    `R@K` is micro, over gold pairs: a device with 79 gold patents weighs 79 times one with a single
    link, and its R@10 can be at most 10/79. `macro_R@K` averages each gold device's own recall, as
    the paper and BEIR do (METHOD.md §5.3), so the paper's figures compare with it. A gold pair with
    no rank (outside the corpus) is a miss in both.
    """
    if ranks.height == 0:
        return {}
    ranks = ranks.with_columns(pl.col("rank").cast(pl.Float64).fill_null(np.inf))
    r = ranks["rank"].to_numpy()
    out = {f"R@{k}": float(np.mean(r <= k)) for k in ks}
    # sorted: a float mean depends on the order of its terms, and group_by's order changes per call
    per_device = ranks.group_by("fda_id").agg(*((pl.col("rank") <= k).mean().alias(f"macro_R@{k}") for k in ks),
                                              pl.col("rank").min().alias("first")).sort("fda_id")
    # polars types a Series' mean as any literal or None: of these non-empty float columns, a float
    out.update({f"macro_R@{k}": float(per_device[f"macro_R@{k}"].mean()) for k in ks})  # type: ignore[arg-type]
    out["MRR"] = float((1.0 / per_device["first"]).mean())  # type: ignore[arg-type]
    out["median_rank"] = float(np.median(r))
    return out
