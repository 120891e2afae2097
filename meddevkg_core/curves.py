"""Recall against candidate volume from ONE global threshold over all device x patent pairs.

The paper's Stage-2 tables report recall on the gold pairs only, which rewards looseness
(METHOD.md §9.5). A curve here pairs every recall with the volume it costs: keep all pairs with
score >= t, count them (share of ALL pairs) and the gold pairs among them, for a sweep of t.

Each point is an exact (pairs kept, recall) pair for its threshold. Which thresholds appear:
the score of every gold pair (the corners where recall steps up, so "pairs needed for 95%" is
read off exactly) plus `points` volumes spread log-uniformly for drawing, plus (0, 0) and "keep
everything". Between points recall is constant until the next corner, so plot with steps-post.

Memory: up to `exact_max_pairs` pair scores are simply concatenated (exact). Above that, pair
scores go into a fixed histogram over float32 order (`sketch_bits` leading bits of each float,
about 2**-(sketch_bits - 9) relative width per bucket; 8 MB at 20 bits), gold scores are kept
exactly, and a corner is moved down to the lower edge of its gold score's bucket. The point is
then still exact for that (lower) threshold; it just keeps the few extra pairs sharing the
bucket, so the sketch can only overstate the volume a recall needs, never flatter it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import polars as pl

CURVE = pl.Schema(
    {"share_of_pairs": pl.Float64, "pairs_kept": pl.Int64, "recall": pl.Float64, "threshold": pl.Float64}
)
"""One operating point: keeping every pair with score >= threshold gives this volume and recall."""

EXACT_MAX_PAIRS = 5_000_000


def recall_volume_curve(
    blocks_iter: Iterable[tuple[Sequence[str], np.ndarray]],
    gold: pl.DataFrame,
    device_ids: Sequence[str],
    patent_ids: Sequence[str],
    points: int = 200,
    exact_max_pairs: int = EXACT_MAX_PAIRS,
    sketch_bits: int = 20,
) -> pl.DataFrame:
    """Global threshold sweep over all pairs' scores (blocks of (device ids, n x n_patents) scores).

    Recall is micro over distinct gold pairs; a gold pair outside the corpus counts as never
    retrieved. Every device of `device_ids` must appear in the blocks exactly once.
    """
    n_pairs = len(device_ids) * len(patent_ids)
    pairs = gold.select(pl.col("fda_id").cast(pl.String), pl.col("pat_id").cast(pl.String)).unique()
    col_of = {p: j for j, p in enumerate(patent_ids)}
    cols_by_device: dict[str, list[int]] = {}
    for fda_id, pat_id in pairs.iter_rows():
        if pat_id in col_of:
            cols_by_device.setdefault(fda_id, []).append(col_of[pat_id])
    exact = n_pairs <= exact_max_pairs
    kept: list[np.ndarray] = []
    hist = np.zeros(0 if exact else 1 << sketch_bits, dtype=np.int64)
    gold_scores: list[float] = []
    seen = 0
    for ids, matrix in blocks_iter:
        m = np.asarray(matrix, dtype=np.float64)
        if m.shape != (len(ids), len(patent_ids)):
            raise ValueError(f"block of shape {m.shape} for {len(ids)} devices x {len(patent_ids)} patents")
        m = np.where(np.isnan(m), -np.inf, m)
        seen += m.size
        for i, fda_id in enumerate(ids):
            gold_scores.extend(m[i, cols_by_device.get(fda_id, [])].tolist())
        if exact:
            kept.append(m.ravel())
        else:
            hist += np.bincount(_buckets(m.ravel(), sketch_bits), minlength=hist.size)
    if seen != n_pairs:
        raise ValueError(f"blocks held {seen} pair scores, expected {n_pairs}")
    g = np.asarray(gold_scores, dtype=np.float64)
    if exact:
        rows = _exact_points(np.sort(np.concatenate(kept)) if kept else np.zeros(0), g, points)
    else:
        rows = _sketch_points(hist, g, points, sketch_bits)
    return _curve_frame(rows, n_pairs, found=g.size, n_gold=pairs.height)


def rank_cutoff_curve(ranks: pl.DataFrame, n_devices: int, n_patents: int, points: int = 200) -> pl.DataFrame:
    """The per-device alternative: keep each device's top K (one K for all devices), as CURVE.

    Volume is K x n_devices; recall is the share of gold pairs with rank <= K (ranks from
    `baselines.exact_gold_ranks`; null = never retrieved). Here `threshold` holds the cutoff K.
    """
    n_pairs = n_devices * n_patents
    r = ranks["rank"].drop_nulls().cast(pl.Int64).to_numpy()
    cutoffs = np.unique(np.concatenate([r, _volume_targets(n_patents, points)]))
    cutoffs = cutoffs[(cutoffs >= 1) & (cutoffs <= n_patents)]
    hits = np.searchsorted(np.sort(r), cutoffs, side="right")
    rows = list(zip((cutoffs * n_devices).tolist(), hits.tolist(), cutoffs.astype(float).tolist(), strict=True))
    return _curve_frame(rows, n_pairs, found=r.size, n_gold=ranks.height).with_columns(
        pl.when(pl.col("pairs_kept") == 0).then(0.0).when(pl.col("pairs_kept") == n_pairs).then(float(n_patents))
        .otherwise(pl.col("threshold")).alias("threshold"))


def pairs_for_recall(curve: pl.DataFrame, targets: Sequence[float] = (0.90, 0.95, 0.99)) -> dict[str, float | None]:
    """Smallest volume reaching each recall: keys share@R90, pairs@R90, ...; None if never reached."""
    out: dict[str, float | None] = {}
    for target in targets:
        hit = curve.filter(pl.col("recall") >= target - 1e-12).sort("pairs_kept").head(1)
        label = f"R{target * 100:g}"
        out[f"share@{label}"] = float(hit["share_of_pairs"][0]) if hit.height else None
        out[f"pairs@{label}"] = float(hit["pairs_kept"][0]) if hit.height else None
    return out


def recall_at_share(curve: pl.DataFrame, share: float) -> float:
    """Best recall a single global threshold reaches while keeping at most `share` of all pairs."""
    within = curve.filter(pl.col("share_of_pairs") <= share * (1 + 1e-12))
    return float(within["recall"].max()) if within.height else 0.0  # type: ignore[arg-type]


# --------------------------------------------------------------------------- internals

Point = tuple[int, float, float]  # pairs kept, gold pairs kept, threshold


def _volume_targets(n_pairs: int, points: int) -> np.ndarray:
    if n_pairs == 0 or points <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.round(np.logspace(0, np.log10(n_pairs), points)).astype(np.int64))


def _exact_points(all_sorted: np.ndarray, g: np.ndarray, points: int) -> list[Point]:
    n = all_sorted.size
    g_sorted = np.sort(g)
    thresholds = np.unique(np.concatenate([g, all_sorted[n - _volume_targets(n, points)]]))
    kept = n - np.searchsorted(all_sorted, thresholds, side="left")
    hits = g.size - np.searchsorted(g_sorted, thresholds, side="left")
    return list(zip(kept.tolist(), hits.tolist(), thresholds.tolist(), strict=True))


def _sketch_points(hist: np.ndarray, g: np.ndarray, points: int, bits: int) -> list[Point]:
    above = np.cumsum(hist[::-1])[::-1]  # above[b] = pairs in bucket b or higher
    g_buckets = np.sort(_buckets(g, bits))
    n = int(above[0]) if above.size else 0
    # Volume targets: the highest bucket whose cumulative count reaches the target.
    nonempty = np.flatnonzero(hist)
    targets = _volume_targets(n, points)
    asc = above[nonempty][::-1]  # cumulative counts from the top bucket down: non-decreasing
    grid = nonempty[::-1][np.searchsorted(asc, targets, side="left").clip(0, max(nonempty.size - 1, 0))]
    buckets = np.unique(np.concatenate([g_buckets, grid]))
    kept = above[buckets]
    hits = g.size - np.searchsorted(g_buckets, buckets, side="left")
    return list(zip(kept.tolist(), hits.tolist(), _lower_edges(buckets, bits).tolist(), strict=True))


def _curve_frame(rows: list[Point], n_pairs: int, found: int, n_gold: int) -> pl.DataFrame:
    rows = [(0, 0.0, float("inf")), *rows, (n_pairs, float(found), float("-inf"))]
    df = pl.DataFrame(
        {"pairs_kept": [r[0] for r in rows], "hits": [float(r[1]) for r in rows], "threshold": [r[2] for r in rows]},
        schema={"pairs_kept": pl.Int64, "hits": pl.Float64, "threshold": pl.Float64},
    )
    df = df.sort(["pairs_kept", "hits", "threshold"], descending=[False, True, True]).unique(
        "pairs_kept", keep="first", maintain_order=True)
    hits = np.maximum.accumulate(df["hits"].to_numpy())
    df = df.with_columns(  # numpy division: polars may multiply by a reciprocal, giving 0.9999... for all pairs
        pl.Series("share_of_pairs", df["pairs_kept"].to_numpy() / max(n_pairs, 1), dtype=pl.Float64),
        pl.Series("recall", hits / n_gold if n_gold else np.full(hits.size, np.nan), dtype=pl.Float64),
    ).with_columns(pl.col("recall").fill_nan(None))
    return df.select([pl.col(c).cast(t) for c, t in CURVE.items()])


def _buckets(x: np.ndarray, bits: int) -> np.ndarray:
    """Monotone bucket index of float32(x) from its leading `bits` bits in sortable-integer form."""
    f = np.asarray(x, dtype=np.float32) + np.float32(0.0)  # -0.0 -> 0.0, so zero has one bucket
    f = np.where(np.isnan(f), np.float32(-np.inf), f)
    i = f.view(np.int32).astype(np.int64)
    key = np.where(i < 0, i ^ 0x7FFFFFFF, i) + (1 << 31)  # order-preserving, 0 .. 2**32 - 1
    return (key >> (32 - bits)).astype(np.int64)


def _lower_edges(buckets: np.ndarray, bits: int) -> np.ndarray:
    """Smallest float32 in each bucket (the threshold its point stands for); -inf at the bottom."""
    key = (np.asarray(buckets, dtype=np.int64) << (32 - bits)) - (1 << 31)
    i = np.where(key < 0, key ^ 0x7FFFFFFF, key).astype(np.int32)
    with np.errstate(invalid="ignore"):  # the bottom bucket's edge is a NaN bit pattern
        edges = i.view(np.float32).astype(np.float64)
    return np.where(np.isnan(edges), -np.inf, edges)
