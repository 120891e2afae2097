from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from meddevkg_core import fold_models, rerank, schemas
from meddevkg_core.candidates import generate_candidates
from meddevkg_core.config import RerankConfig
from meddevkg_core.fold_models import (
    FoldModels,
    RerankerTrainingError,
    apply_fold_models,
    fit_fold_models,
    require_both_classes,
)
from meddevkg_core.links_table import links_frame
from meddevkg_core.rerank import FEATURES, feature_frame, label_pairs, recall_threshold, training_sample
from meddevkg_core.reranked_links import decide, rank_pool, with_ranks

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


def test_gold_devices_are_scored_out_of_fold_and_others_by_the_full_model():
    pool, gold = synthetic_pool()
    features = feature_frame(pool, None)
    models = fit_fold_models(features, gold, CFG)
    scored = apply_fold_models(features, models)
    assert scored.height == pool.height
    assert scored.filter(pl.col("fda_id") == "PX")["out_of_fold"].to_list() == [False] * 10
    assert scored.filter(pl.col("fda_id") != "PX")["out_of_fold"].all()
    held_out = [d for devices, _ in models.folds for d in devices]
    assert sorted(held_out) == sorted(gold["fda_id"].unique().to_list())  # each gold device in exactly one fold


def test_gold_the_folds_cannot_use_is_refused_naming_what_there_is():
    pool, gold = synthetic_pool()
    features = feature_frame(pool, None)
    one = gold.filter(pl.col("fda_id") == "P03")
    with pytest.raises(RerankerTrainingError, match=r"at least 2 devices; the pool holds gold for 1 \(P03\)"):
        fit_fold_models(features, one, CFG)
    outside = pl.DataFrame({"fda_id": ["P03"], "pat_id": ["nowhere"]})
    with pytest.raises(RerankerTrainingError, match=r"full model: its training pairs, of 1 device \(P03\), "
                       "are 30 pairs and no gold link"):
        fit_fold_models(features, outside, CFG)


def test_a_devices_own_gold_never_changes_its_out_of_fold_scores():
    """The leak test: relabel one device's gold; its probabilities and cut-off must not move."""
    pool, gold = synthetic_pool()
    features = feature_frame(pool, None)
    target = "P03"
    changed = pl.concat([gold.filter(pl.col("fda_id") != target),
                         pl.DataFrame({"fda_id": [target] * 4, "pat_id": ["310", "311", "312", "313"]})])
    before = apply_fold_models(features, fit_fold_models(features, gold, CFG))
    after = apply_fold_models(features, fit_fold_models(features, changed, CFG))
    own = pl.col("fda_id") == target
    assert before.filter(own)["probability"].to_list() == after.filter(own)["probability"].to_list()
    assert before.filter(own)["threshold"].to_list() == after.filter(own)["threshold"].to_list()
    assert before.filter(~own & (pl.col("fda_id") != "PX"))["probability"].to_list() != \
        after.filter(~own & (pl.col("fda_id") != "PX"))["probability"].to_list()


def test_a_fold_seed_reshuffles_the_devices_between_folds_and_still_holds_each_out_once():
    pool, gold = synthetic_pool()
    features = feature_frame(pool, None)

    def split(fold_seed: int | None) -> set[tuple[str, ...]]:
        cfg = CFG.model_copy(update={"fold_seed": fold_seed, "n_estimators": 2, "bagging": 1})
        models = fit_fold_models(features, gold, cfg)
        assert sorted(d for devices, _ in models.folds for d in devices) == sorted(gold["fda_id"].unique())
        return {devices for devices, _ in models.folds}

    unshuffled, shuffled = split(None), split(3)
    assert shuffled == split(3)
    assert shuffled != unshuffled and split(4) != shuffled


def test_with_a_fold_seed_a_devices_own_gold_still_never_changes_its_scores():
    pool, gold = synthetic_pool()
    features = feature_frame(pool, None)
    cfg = CFG.model_copy(update={"fold_seed": 3})
    target = "P05"
    changed = pl.concat([gold.filter(pl.col("fda_id") != target),
                         pl.DataFrame({"fda_id": [target] * 4, "pat_id": ["510", "511", "512", "513"]})])
    before = apply_fold_models(features, fit_fold_models(features, gold, cfg)).filter(pl.col("fda_id") == target)
    after = apply_fold_models(features, fit_fold_models(features, changed, cfg)).filter(pl.col("fda_id") == target)
    assert before["probability"].to_list() == after["probability"].to_list()
    assert before["threshold"].to_list() == after["threshold"].to_list()


def test_fold_models_round_trip_through_a_table():
    pool, gold = synthetic_pool()
    features = feature_frame(pool, None)
    models = fit_fold_models(features, gold, CFG)
    again = FoldModels.from_frame(models.to_frame())
    assert apply_fold_models(features, again).equals(apply_fold_models(features, models))


def test_decide_applies_cut_off_and_immunity_and_explains():
    pool, gold = synthetic_pool(4, 10)
    features = feature_frame(pool, None).with_columns(
        pl.when(pl.col("pat_id") == "1").then(pl.lit("rescue_anchor")).otherwise(pl.col("admitted_by"))
        .alias("admitted_by"))
    scored = features.with_columns(pl.lit(0.5, pl.Float32).alias("probability"),
                                   pl.lit(0.6, pl.Float32).alias("threshold"), pl.lit(True).alias("out_of_fold"))
    links = links_frame(decide(scored, RerankConfig(immunity_tier_s_anchor=True)))
    assert links.schema == schemas.LINKS
    kept = links.filter(pl.col("decision"))
    assert kept["pat_id"].to_list() == ["1"] and kept["immune"].all()
    assert "p=0.500" in kept["evidence"][0] and "admitted=rescue_anchor" in kept["evidence"][0]
    assert links.filter(~pl.col("decision"))["evidence"].is_null().all()  # rejected: signals stay in the pool
    assert not decide(scored, RerankConfig())["decision"].any()  # the anchor immunity is off by default


def test_decide_keeps_a_pair_at_the_cut_off_and_the_similarity_immunity_needs_the_same_company():
    pool, _ = synthetic_pool(1, 4)
    scored = feature_frame(pool.filter(pl.col("fda_id") != "PX"), None).with_columns(
        pl.Series("probability", [0.5, 0.4, 0.4, 0.4], pl.Float32), pl.lit(0.5, pl.Float32).alias("threshold"),
        pl.Series("is_same_company", [0, 1, 0, 1], pl.Int8), pl.Series("sim", [0.1, 0.75, 0.75, 0.7]).cast(
            pool.schema["sim"]))
    decided = decide(scored, RerankConfig(immunity_same_company_min_cosine=0.75))
    assert decided["verdict"].to_list() == ["probability", "immune:same_company_high_sim", "below_threshold",
                                            "below_threshold"]
    assert decided["decision"].to_list() == [True, True, False, False]


def test_training_needs_positives_and_negatives():
    pool, gold = synthetic_pool(3, 5)
    with pytest.raises(ValueError, match="no gold positives and negatives"):
        fit_fold_models(feature_frame(pool, None), gold.head(0), CFG)


def _every_pair_gold_but_one_devices(pool: pl.DataFrame, gold: pl.DataFrame, mixed: str) -> pl.DataFrame:
    """Gold naming every pool pair of the other gold devices: only `mixed` has a pair that is not gold."""
    rest = pool.filter(~pl.col("fda_id").is_in([mixed, "PX"])).select("fda_id", "pat_id")
    return pl.concat([rest, gold.filter(pl.col("fda_id") == mixed)])


def test_a_training_set_of_one_class_is_refused_naming_it_before_any_model_is_fitted(monkeypatch):
    # a fold whose training devices had only gold pairs ended in XGBoost's "Invalid classes inferred from
    # unique values of y", after the full model was trained; one with no gold pair trained a model of nothing
    pool, gold = synthetic_pool(3, 6)  # 4 gold pairs of 6 per device
    features = feature_frame(pool, None)
    monkeypatch.setattr(rerank, "_fit", lambda *a: pytest.fail("a model was fitted before the refusal"))
    cfg = CFG.model_copy(update={"folds": 3})
    with pytest.raises(RerankerTrainingError) as refusal:
        fit_fold_models(features, _every_pair_gold_but_one_devices(pool, gold, "P02"), cfg)
    assert str(refusal.value) == (
        "cannot train the reranker's fold 1 of 3 (held out: P02): its training pairs, of 2 devices (P00, P01), "
        "are 12 gold links and no other pair, and XGBoost learns from both; give the corpus patents that are "
        "not gold links of these devices (more patents than gold links), or more gold devices")
    no_gold = pl.DataFrame({"fda_id": ["P00", "P01"], "pat_id": ["elsewhere", "elsewhere"]})
    with pytest.raises(RerankerTrainingError) as refusal:
        fit_fold_models(features, pl.concat([no_gold, gold.filter(pl.col("fda_id") == "P02")]), cfg)
    assert str(refusal.value) == (
        "cannot train the reranker's fold 1 of 3 (held out: P02): its training pairs, of 2 devices (P00, P01), "
        "are 12 pairs and no gold link, and XGBoost learns from both; give gold links of these devices that the "
        "Stage-2 pool holds, or more gold devices")


def test_a_long_list_of_training_devices_is_cut_short():
    labeled = pl.DataFrame({"fda_id": [f"P{i:02d}" for i in range(9)], "label": [1] * 9})
    with pytest.raises(RerankerTrainingError, match=r"of 9 devices \(P00, P01, P02, P03, P04 and 4 "
                       r"more\), are 9 gold links"):
        require_both_classes(labeled, "full model")
    require_both_classes(labeled.with_columns(pl.Series("label", [0] + [1] * 8)), "full model")


# --------------------------------------------------------------------------- apply_fold_models
# The implementation before the rewrite, kept as an oracle.


def _apply_fold_models_before(features: pl.DataFrame, models: FoldModels) -> pl.DataFrame:
    parts = []
    for devices, model in models.folds:
        part = features.filter(pl.col("fda_id").is_in(devices))
        parts.append(part.with_columns(pl.Series("probability", model.predict(part), pl.Float32),
                                       pl.lit(model.threshold, pl.Float32).alias("threshold"),
                                       pl.lit(True).alias("out_of_fold")))
    held_out = [d for devices, _ in models.folds for d in devices]
    rest = features.filter(~pl.col("fda_id").is_in(held_out))
    parts.append(rest.with_columns(pl.Series("probability", models.full.predict(rest), pl.Float32),
                                   pl.lit(models.full.threshold, pl.Float32).alias("threshold"),
                                   pl.lit(False).alias("out_of_fold")))
    return pl.concat(parts, how="vertical_relaxed").sort("fda_id", "pat_id")


def bench_stage3_frames() -> tuple[pl.DataFrame, FoldModels, pl.DataFrame]:
    """A realistic small Stage-2 pool (the scale benchmark's synthetic corpus), fold models and decisions."""
    from meddevkg_core import scale_bench
    from meddevkg_core.config import PipelineConfig

    corpus = scale_bench.synthetic_corpus(3_000, 20, seed=0)
    cfg = PipelineConfig()
    pool = generate_candidates(scale_bench.stage2_inputs(corpus, cfg), cfg.candidates)
    gold = scale_bench.synthetic_gold(pool, n_devices=8, seed=0)
    features = feature_frame(pool, None)
    models = fit_fold_models(features.filter(pl.col("fda_id").is_in(gold["fda_id"].unique().implode())), gold,
                             RerankConfig(n_estimators=20, folds=4))
    return features, models, decide(apply_fold_models(features, models), RerankConfig())


@pytest.fixture(scope="module")
def bench_stage3():
    return bench_stage3_frames()


def test_apply_fold_models_identical_to_before(bench_stage3, monkeypatch):
    features, models, _ = bench_stage3
    assert features.height > 1_000
    expected = _apply_fold_models_before(features, models)
    assert apply_fold_models(features, models).equals(expected)
    with monkeypatch.context() as m:
        m.setattr(fold_models, "PREDICT_ROWS", 97)  # predictions in chunks of rows
        assert apply_fold_models(features, models).equals(expected)
    shuffled = features.sample(fraction=1.0, shuffle=True, seed=1)  # not sorted by pair: sorted at the end
    assert apply_fold_models(shuffled, models).equals(expected)
    twice = pl.concat([features.head(50), features])  # repeated pairs: assembled per model as before
    assert apply_fold_models(twice, models).equals(_apply_fold_models_before(twice, models))
    devices, model = models.folds[0]
    overlapping = FoldModels(models.full, (*models.folds, (devices[:1], model)))  # a device in two folds
    assert apply_fold_models(features, overlapping).equals(_apply_fold_models_before(features, overlapping))


def _embeddings(ids, matrix: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame({"doc_id": list(ids), "content_hash": [""] * len(ids),
                         "embedding": pl.Series(matrix.astype(np.float32)).cast(pl.List(pl.Float32))})


def _synthetic_stage3(cfg: RerankConfig):
    """(pool, vectors, fold models) over a small synthetic corpus: 20 devices, 8 of them gold."""
    from meddevkg_core import scale_bench
    from meddevkg_core.config import PipelineConfig
    from meddevkg_core.text_adapter import Vectors

    corpus = scale_bench.synthetic_corpus(3_000, 20, seed=0)
    inputs = scale_bench.stage2_inputs(corpus, PipelineConfig())
    pool = generate_candidates(inputs, PipelineConfig().candidates)
    gold = scale_bench.synthetic_gold(pool, n_devices=8, seed=0)
    vectors = Vectors.of_inputs(inputs)
    gold_rows = pl.col("fda_id").is_in(gold["fda_id"].unique().implode())
    return pool, vectors, fit_fold_models(feature_frame(pool, None).filter(gold_rows), gold, cfg, vectors)


def test_rank_pool_reads_the_top_pairs_vectors_only_and_ranks_as_with_every_vector():
    from meddevkg_core.config import TextAdapterConfig

    cfg = RerankConfig(n_estimators=20, folds=4, text_adapter=TextAdapterConfig(enabled=True, top_k=5, epochs=2))
    pool, vectors, models = _synthetic_stage3(cfg)
    features = feature_frame(pool, None)
    assert models.full_adapter is not None and len(models.full.known.links) > 0
    expected = links_frame(with_ranks(decide(apply_fold_models(features, models, vectors), cfg), models, vectors,
                                      cfg))
    patents = _embeddings(vectors.patent_ids, vectors.patent_vectors)
    asked: list[pl.Series] = []

    def patent_embeddings_of(pat_ids: pl.Series) -> pl.DataFrame:
        asked.append(pat_ids)
        return patents.filter(pl.col("doc_id").is_in(pat_ids.implode()))

    got = rank_pool(pool, None, models, _embeddings(vectors.device_ids, vectors.device_vectors),
                    patent_embeddings_of, cfg)
    assert got.equals(expected)
    [ids] = asked
    devices = pool["fda_id"].n_unique()
    assert got["text_sim"].is_not_null().sum() == devices * 5
    ranked = set(got.filter(pl.col("text_sim").is_not_null())["pat_id"])
    assert ranked <= set(ids) and ids.len() < pool["pat_id"].n_unique() / 2  # each device's top 5 (and ties)
    off = cfg.model_copy(update={"text_adapter": cfg.text_adapter.model_copy(update={"enabled": False})})
    asked.clear()
    assert rank_pool(pool, None, models, _embeddings(vectors.device_ids, vectors.device_vectors),
                     patent_embeddings_of, off)["text_sim"].is_null().all() and asked == []


def test_the_company_contest_moves_top_pairs_only_and_ranks_one_device_as_the_whole_pool():
    from meddevkg_core.config import CompanyContestConfig
    from meddevkg_core.reranked_links import RivalPool

    cfg = RerankConfig(n_estimators=20, folds=4, company_contest=CompanyContestConfig(top_k=10, weight=1.0))
    pool, vectors, models = _synthetic_stage3(cfg)
    devices = _embeddings(vectors.device_ids, vectors.device_vectors)

    def no_patents(_: pl.Series) -> pl.DataFrame:
        raise AssertionError("the contest reads no patent vector")

    whole = rank_pool(pool, None, models, devices, no_patents, cfg)
    by_probability = rank_pool(pool, None, models, devices, no_patents,
                               cfg.model_copy(update={"company_contest": CompanyContestConfig(enabled=False)}))
    assert whole.drop("rank").equals(by_probability.drop("rank"))  # probabilities and decisions as they were
    moved = whole["rank"] != by_probability["rank"]
    assert moved.any() and (by_probability.filter(moved)["rank"] <= 10).all()  # only the top 10 moved
    held_out = whole.filter(moved & pl.col("out_of_fold"))["fda_id"].unique().sort()
    assert held_out.len()  # a gold device, ranked against rivals scored by its fold model
    for device in (held_out[0], whole.filter(moved & ~pl.col("out_of_fold"))["fda_id"].min()):
        # one device partition: its pool rows, and the other devices' rows as the stored rival pool
        mine = pl.col("fda_id") == device
        rivals = RivalPool(pool.filter(~mine), None, devices.filter(pl.col("doc_id") != device))
        one = rank_pool(pool.filter(mine), None, models, devices.filter(pl.col("doc_id") == device), no_patents, cfg,
                        None, rivals)
        assert one.equals(whole.filter(mine)), device
        alone = rank_pool(pool.filter(mine), None, models, devices.filter(pl.col("doc_id") == device), no_patents,
                          cfg)
        assert not alone["rank"].equals(one["rank"])  # without its rivals the device would be ordered otherwise


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
