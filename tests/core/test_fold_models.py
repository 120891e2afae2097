"""The fold models: one per device-grouped fold, each scoring the gold devices it held out."""

import polars as pl
import pytest

from meddevkg_core import fold_models, rerank
from meddevkg_core.candidates import generate_candidates
from meddevkg_core.config import RerankConfig
from meddevkg_core.fold_models import (
    FoldModels,
    RerankerTrainingError,
    apply_fold_models,
    fit_fold_models,
    require_both_classes,
)
from meddevkg_core.rerank import feature_frame
from meddevkg_core.reranked_links import decide
from tests.core.test_rerank import synthetic_pool

CFG = RerankConfig(n_estimators=20, folds=4)


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
    from meddevkg_core.config import PipelineConfig
    from meddevkg_core.synthetic_corpus import stage2_inputs, synthetic_corpus, synthetic_gold

    corpus = synthetic_corpus(3_000, 20, seed=0)
    cfg = PipelineConfig()
    pool = generate_candidates(stage2_inputs(corpus, cfg), cfg.candidates)
    gold = synthetic_gold(pool, n_devices=8, seed=0)
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
