from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from meddevkg_core import rerank, schemas
from meddevkg_core.config import RerankConfig
from meddevkg_core.rerank import FEATURES, feature_frame, label_pairs, recall_threshold, training_sample

CFG = RerankConfig(n_estimators=20, folds=4)


def synthetic_pool(n_devices=12, per_device=30, seed=0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A pool where gold pairs tend to have higher scores, with noise, plus the gold table."""
    rng = np.random.default_rng(seed)
    rows, gold = [], []
    for d in range(n_devices):
        for p in range(per_device):
            is_gold = p < 4
            sim = float(np.clip(rng.normal(0.55 if is_gold else 0.4, 0.1), 0, 1))
            company = 20 if (is_gold or rng.random() < 0.3) else 0
            entity = float(rng.choice([0, 20, 30, 60] if is_gold else [0, 0, 5, 20]))
            vector = 65 if sim > 0.6 else 30 if sim > 0.45 else 0
            rows.append({"fda_id": f"P{d:02d}", "pat_id": f"{d * 100 + p}", "sim": sim, "score_company": company,
                         "score_vector": vector, "score_entity": entity,
                         "score_total": company + vector + entity, "entity_tier": "S" if entity >= 30 else "none",
                         "entity_detail": "", "entity_matches": 1, "shared_terms": "stent" if entity >= 30 else "",
                         "tier_s_match": entity >= 30,
                         "company_path": None, "admitted_by": "threshold"})
            if is_gold:
                gold.append({"fda_id": f"P{d:02d}", "pat_id": f"{d * 100 + p}"})
    # devices without gold
    for p in range(10):
        rows.append({**rows[p], "fda_id": "PX", "pat_id": f"9{p}"})
    return schemas.conform(pl.DataFrame(rows), schemas.CANDIDATES), pl.DataFrame(gold)


def test_features_follow_the_paper_order_and_flags():
    pool, _ = synthetic_pool(2, 5)
    f = feature_frame(pool, None)
    assert FEATURES[4] == "ai_score" and f["ai_score"].null_count() == f.height
    assert set(f["has_tiers"].unique()) <= {0, 1}
    assert (f["is_same_company"] == (f["score_company"] > 0).cast(pl.Int8)).all()


def test_training_sample_caps_negatives_per_device_and_is_deterministic():
    pool, gold = synthetic_pool()
    labeled = label_pairs(feature_frame(pool, None), gold)
    cfg = RerankConfig(negatives_per_positive=2, max_negative_share_per_device=0.1)
    a, b = training_sample(labeled, cfg), training_sample(labeled, cfg)
    assert a.equals(b)
    neg = a.filter(pl.col("label") == 0)
    assert neg.height <= 2 * gold.height
    assert neg.group_by("fda_id").len()["len"].max() <= int(0.1 * 2 * gold.height)
    assert a.filter(pl.col("label") == 1).height == gold.height
    assert training_sample(labeled, RerankConfig(negatives_per_positive=0)).equals(labeled)  # 0: every negative


def test_recall_threshold_keeps_the_target_share_of_positives():
    prob = np.array([0.9, 0.8, 0.7, 0.6, 0.1], np.float32)
    labels = np.array([1, 1, 1, 1, 0])
    assert recall_threshold(prob, labels, 0.75) == pytest.approx(0.7)
    assert recall_threshold(prob, labels, 1.0) == pytest.approx(0.6)
    assert recall_threshold(prob, labels, 0.9) == pytest.approx(0.6)  # 3 of 4 is short of 90%: rounds up


def test_recall_threshold_reads_only_scored_positives():
    # a positive without an out-of-fold score (NaN) neither counts nor becomes a NaN cut-off that rejects all
    prob = np.array([np.nan, 0.9, 0.8, 0.7], np.float32)
    assert recall_threshold(prob, np.ones(4), 0.5) == pytest.approx(0.8)
    assert recall_threshold(np.full(2, np.nan, np.float32), np.ones(2), 0.96) == 0.5


def test_the_learned_cut_off_keeps_the_target_share_of_pool_positives_only(monkeypatch):
    pool, gold = synthetic_pool(4, 10)
    labeled = label_pairs(feature_frame(pool, None), gold).with_columns(
        (pl.int_range(pl.len()) % 2 == 0).alias("in_pool"))  # the others: out-of-pool training pairs
    prob = np.where(labeled["in_pool"].to_numpy(), 0.9, 0.1).astype(np.float32)
    monkeypatch.setattr(rerank, "oof_probabilities", lambda *args, **kwargs: prob)
    model = rerank.train_reranker(labeled, RerankConfig(n_estimators=5, folds=2, target_recall=1.0))
    assert model.threshold == pytest.approx(0.9)


def test_a_bag_averages_members_trained_on_their_own_samples():
    pool, gold = synthetic_pool()
    labeled = label_pairs(feature_frame(pool, None), gold)
    single = rerank.train_reranker(labeled, CFG.model_copy(update={"bagging": 1}))
    bagged = rerank.train_reranker(labeled, CFG.model_copy(update={"bagging": 3}))
    assert single.bagged_json == () and len(bagged.bagged_json) == 2
    assert bagged.booster_json == single.booster_json  # the first member is the unbagged model
    members = [replace(bagged, booster_json=b, bagged_json=()) for b in (bagged.booster_json, *bagged.bagged_json)]
    rows = feature_frame(pool, None)
    expected = np.mean([m.predict(rows) for m in members], axis=0)
    assert np.allclose(bagged.predict(rows), expected, atol=1e-6)
    assert len({m.predict(rows).tobytes() for m in members}) == 3  # different samples, different trees
    assert rerank.RerankerModel.from_json(bagged.to_json()) == bagged


def _mid_band_pool() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Gold pairs are exactly those with a cosine in [0.40, 0.50]: a shape no similarity should teach."""
    pool, _ = synthetic_pool(n_devices=16, per_device=40, seed=3)
    rng = np.random.default_rng(3)
    pool = pool.with_columns(pl.Series("sim", rng.uniform(0, 1, pool.height), pl.Float32))
    gold = pool.filter(pl.col("sim").is_between(0.40, 0.50) & (pl.col("fda_id") != "PX")).select("fda_id", "pat_id")
    return pool, gold


@pytest.mark.parametrize("monotone", [True, False])
def test_monotone_similarity_lets_a_higher_cosine_only_raise_the_probability(monotone):
    pool, gold = _mid_band_pool()
    cfg = CFG.model_copy(update={"features": "paper", "monotone_similarity": monotone, "bagging": 1})
    model = rerank.train_reranker(label_pairs(feature_frame(pool, None), gold), cfg)
    grid = np.linspace(0, 1, 41, dtype=np.float32)
    row = feature_frame(pool, None).head(1)
    probe = pl.concat([row] * len(grid)).with_columns(pl.Series("sim_raw", grid))
    steps = np.diff(model.predict(probe))
    if monotone:
        assert (steps >= -1e-6).all()
    else:  # the same data unconstrained learns the band, so the check above can fail
        assert steps.min() < -0.05
