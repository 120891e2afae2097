"""Recall-volume curves: a hand computation, sketch vs exact, and the read-outs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from meddevkg_core.curves import (
    CURVE,
    _buckets,
    _lower_edges,
    pairs_for_recall,
    rank_cutoff_curve,
    recall_at_share,
    recall_volume_curve,
)

DEVICES = ["D1", "D2"]
PATENTS = ["a", "b", "c"]
SCORES = np.array([[0.9, 0.5, 0.1], [0.8, 0.5, 0.2]])
GOLD = pl.DataFrame({"fda_id": ["D1", "D2"], "pat_id": ["b", "a"]})


def _blocks(scores: np.ndarray, ids: list[str], size: int = 1):
    for start in range(0, len(ids), size):
        yield ids[start : start + size], scores[start : start + size]


def test_toy_curve_equals_the_hand_computation() -> None:
    curve = recall_volume_curve(_blocks(SCORES, DEVICES), GOLD, DEVICES, PATENTS, points=0)
    # t = +inf keeps nothing; t = 0.8 keeps {0.9, 0.8}: 1 of 2 gold; t = 0.5 keeps 4 pairs: both gold.
    expected = pl.DataFrame(
        {"share_of_pairs": [0.0, 2 / 6, 4 / 6, 1.0], "pairs_kept": [0, 2, 4, 6], "recall": [0.0, 0.5, 1.0, 1.0],
         "threshold": [np.inf, 0.8, 0.5, -np.inf]},
        schema=CURVE,
    )
    assert curve.equals(expected)
    ops = pairs_for_recall(curve, (0.5, 0.9))
    assert ops == {"share@R50": 2 / 6, "pairs@R50": 2.0, "share@R90": 4 / 6, "pairs@R90": 4.0}
    assert recall_at_share(curve, 0.5) == 0.5 and recall_at_share(curve, 0.1) == 0.0
    assert recall_at_share(curve, 2 / 3) == 1.0


def test_volume_points_are_exact_points_of_the_sweep() -> None:
    curve = recall_volume_curve(_blocks(SCORES, DEVICES), GOLD, DEVICES, PATENTS, points=50)
    flat = np.sort(SCORES.ravel())
    gold_scores = np.array([0.5, 0.8])
    for t, kept, recall in curve.filter(pl.col("threshold").is_finite()).select(
            "threshold", "pairs_kept", "recall").iter_rows():
        assert kept == int((flat >= t).sum()) and recall == (gold_scores >= t).mean()
    assert curve["pairs_kept"].is_sorted() and curve["recall"].is_sorted()


def test_gold_outside_the_corpus_is_a_miss_and_unreachable_targets_are_none() -> None:
    gold = pl.concat([GOLD, pl.DataFrame({"fda_id": ["D1"], "pat_id": ["zzz"]})])
    curve = recall_volume_curve(_blocks(SCORES, DEVICES), gold, DEVICES, PATENTS)
    assert curve["recall"].max() == pytest.approx(2 / 3)
    ops = pairs_for_recall(curve, (0.6, 0.9))
    assert ops["pairs@R60"] == 4.0 and ops["share@R90"] is None and ops["pairs@R90"] is None


def test_recall_counts_a_gold_pair_listed_twice_once() -> None:
    gold = pl.concat([GOLD, GOLD.head(1)])  # D1-b twice
    curve = recall_volume_curve(_blocks(SCORES, DEVICES), gold, DEVICES, PATENTS, points=0)
    assert curve["recall"].to_list() == [0.0, 0.5, 1.0, 1.0]


def test_a_nan_score_is_kept_only_with_every_pair() -> None:
    scores = SCORES.copy()
    scores[0, 1] = np.nan  # D1-b, a gold pair
    curve = recall_volume_curve(_blocks(scores, DEVICES), GOLD, DEVICES, PATENTS, points=0)
    assert curve["pairs_kept"].to_list() == [0, 2, 6] and curve["recall"].to_list() == [0.0, 0.5, 1.0]
    assert curve["threshold"].to_list() == [np.inf, 0.8, -np.inf]


def test_missing_blocks_are_refused() -> None:
    with pytest.raises(ValueError):
        recall_volume_curve(_blocks(SCORES[:1], DEVICES[:1]), GOLD, DEVICES, PATENTS)


def _random_case(seed: int, n_dev: int = 150, n_pat: int = 400, n_gold: int = 300):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(n_dev, n_pat))
    devices = [f"D{i:03d}" for i in range(n_dev)]
    patents = [f"P{j:04d}" for j in range(n_pat)]
    flat = rng.choice(n_dev * n_pat, size=n_gold, replace=False)
    rows, cols = np.divmod(flat, n_pat)
    scores[rows, cols] += rng.uniform(0.0, 3.0, size=n_gold)  # gold scores higher, as for a useful method
    gold = pl.DataFrame({"fda_id": [devices[r] for r in rows], "pat_id": [patents[c] for c in cols]})
    return scores, devices, patents, gold


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sketch_matches_exact_within_tolerance_and_never_flatters(seed: int) -> None:
    scores, devices, patents, gold = _random_case(seed)
    exact = recall_volume_curve(_blocks(scores, devices, 32), gold, devices, patents)
    sketch = recall_volume_curve(_blocks(scores, devices, 32), gold, devices, patents, exact_max_pairs=0)
    targets = (0.5, 0.8, 0.9, 0.95, 0.99)
    e, s = pairs_for_recall(exact, targets), pairs_for_recall(sketch, targets)
    for key in e:
        assert s[key] >= e[key] - 1e-12  # the sketch may only overstate the volume
        assert s[key] == pytest.approx(e[key], rel=2e-3, abs=2.0 / scores.size)
    for share in (0.001, 0.01, 0.05, 0.2, 0.5):
        assert recall_at_share(sketch, share) <= recall_at_share(exact, share) + 1e-12
        assert recall_at_share(sketch, share) == pytest.approx(recall_at_share(exact, share), abs=0.01)


def test_sketch_is_exact_for_discrete_scores() -> None:
    rng = np.random.default_rng(7)
    scores = rng.integers(0, 3, size=(60, 80)).astype(float)
    devices = [f"D{i}" for i in range(60)]
    patents = [f"P{j}" for j in range(80)]
    gold = pl.DataFrame({"fda_id": devices[:30], "pat_id": patents[:30]})
    exact = recall_volume_curve(_blocks(scores, devices, 7), gold, devices, patents, points=0)
    sketch = recall_volume_curve(_blocks(scores, devices, 7), gold, devices, patents, points=0, exact_max_pairs=0)
    assert sketch.equals(exact)


def test_buckets_are_monotone_and_lower_edges_bound_their_members() -> None:
    x = np.sort(np.concatenate([np.random.default_rng(3).normal(scale=50, size=5000), [0.0, -0.0, np.inf, -np.inf]]))
    b = _buckets(x, 20)
    assert np.all(np.diff(b) >= 0)
    assert np.all(_lower_edges(b, 20) <= x.astype(np.float32))
    assert _buckets(np.array([0.0]), 20)[0] == _buckets(np.array([-0.0]), 20)[0]


def test_rank_cutoff_curve_counts_top_k_per_device() -> None:
    ranks = pl.DataFrame({"fda_id": ["D1", "D1", "D2", "D2"], "pat_id": ["a", "b", "c", "d"], "rank": [1, 3, 2, None]})
    curve = rank_cutoff_curve(ranks, n_devices=2, n_patents=10, points=0)
    assert curve["pairs_kept"].to_list() == [0, 2, 4, 6, 20]
    assert curve["recall"].to_list() == [0.0, 0.25, 0.5, 0.75, 0.75]
    assert curve["threshold"].to_list() == [0.0, 1.0, 2.0, 3.0, 10.0]  # K; keeping every pair is K = n_patents
    assert pairs_for_recall(curve, (0.5,))["share@R50"] == pytest.approx(4 / 20)
