import math

import numpy as np
import polars as pl
import pytest

from meddevkg_core.config import RerankConfig
from meddevkg_core.fold_models import apply_fold_models, fit_fold_models
from meddevkg_core.known_links import KNOWN_LINK_FEATURES, KnownLinks
from meddevkg_core.rerank import EXTENDED_FEATURES, RerankerModel, feature_frame, label_pairs, train_reranker
from meddevkg_core.text_adapter import Vectors
from tests.core.test_rerank import synthetic_pool

CFG = RerankConfig(n_estimators=20, folds=4)
SIM, NAMES = KNOWN_LINK_FEATURES


def vectors_of(devices: dict[str, list[float]], words: dict[str, set[str]] | None = None) -> Vectors:
    return Vectors(list(devices), np.asarray(list(devices.values()), np.float32), [], np.zeros((0, 2), np.float32),
                   {d: frozenset(w) for d, w in (words or {}).items()})


def test_the_feature_is_the_best_cosine_to_another_device_linked_to_the_patent():
    vectors = vectors_of({"A": [1, 0], "B": [0, 2], "C": [3, 4], "D": [1, 1]})
    labeled = pl.DataFrame({"fda_id": ["A", "B", "B", "A", "C"], "pat_id": ["1", "1", "2", "1", "9"],
                            "label": [1, 1, 1, 1, 0]})
    known = KnownLinks.of(labeled, vectors)
    assert known.links == (("A", "1"), ("B", "1"), ("B", "2")) and known.device_ids == ("A", "B")
    pairs = pl.DataFrame({"fda_id": ["C", "A", "D", "B", "E", "A"], "pat_id": ["1", "1", "2", "2", "1", "7"],
                          SIM: [9.0] * 6})
    out = known.features(pairs, vectors)
    # C-1: A (0.6) or B (0.8); A-1: B, never A itself (0); D-2: B (0.707); B-2: nobody but B;
    # E has no vector; nobody is known to be linked to 7
    assert out[SIM].to_list() == pytest.approx([0.8, 0.0, 2 ** -0.5, None, None, None], abs=1e-6)
    assert out.select("fda_id", "pat_id").equals(pairs.select("fda_id", "pat_id"))  # row order kept
    assert out.columns == [*pairs.columns, NAMES]  # the old column replaced, no helper left
    assert out[NAMES].null_count() == pairs.height  # no label words given: no names known
    assert KnownLinks.from_dict(known.to_dict()) == known
    with pytest.raises(ValueError, match="pass the device vectors"):
        known.features(pairs, None)


def test_the_name_feature_is_the_idf_of_the_rarest_word_shared_with_a_known_device():
    words = {"A": {"POWERLINK", "ENDOGRAFT", "SYSTEM"}, "B": {"OVATION", "ENDOGRAFT", "SYSTEM"},
             "C": {"NAVISTAR", "CATHETER", "SYSTEM"}, "D": {"NAVISTAR", "CELSIUS", "CATHETER", "SYSTEM"},
             "E": {"CATHETER", "SYSTEM"}}
    vectors = vectors_of({d: [1.0, 0.0] for d in [*words, "X"]}, words)
    labeled = pl.DataFrame({"fda_id": ["A", "C", "E", "B"], "pat_id": ["1", "2", "2", "3"], "label": [1, 1, 1, 0]})
    known = KnownLinks.of(labeled, vectors)
    idf = {"SYSTEM": 0.0, "CATHETER": math.log(5 / 3), "ENDOGRAFT": math.log(5 / 2), "NAVISTAR": math.log(5 / 2),
           "POWERLINK": math.log(5)}  # over the five devices with words; B is not linked to anything
    assert {d: dict(w) for d, w in known.names} == {
        "A": {w: idf[w] for w in ("ENDOGRAFT", "POWERLINK", "SYSTEM")},
        "C": {w: idf[w] for w in ("CATHETER", "NAVISTAR", "SYSTEM")}, "E": {w: idf[w] for w in ("CATHETER", "SYSTEM")}}
    pairs = pl.DataFrame({"fda_id": ["B", "D", "C", "A", "B", "X"], "pat_id": ["1", "2", "2", "1", "9", "1"]})
    # B-1: ENDOGRAFT with A; D-2: NAVISTAR with C (CATHETER with E); C-2: E only (never C itself);
    # nobody but A; nobody is known to be linked to 9; X has no label words
    assert known.features(pairs, vectors)[NAMES].to_list() == pytest.approx(
        [idf["ENDOGRAFT"], idf["NAVISTAR"], idf["CATHETER"], None, None, None])
    assert KnownLinks.from_dict(known.to_dict()) == known
    with pytest.raises(ValueError, match="pass their label texts"):
        known.features(pairs, vectors_of({"B": [1.0, 0.0]}))


def test_links_known_without_vectors_give_no_similarity_in_training_or_scoring():
    labeled = pl.DataFrame({"fda_id": ["A", "B"], "pat_id": ["1", "1"], "label": [1, 1]})
    known = KnownLinks.of(labeled, None)
    assert known.links == (("A", "1"), ("B", "1")) and known.device_ids == ()
    assert known.features(labeled, None)[SIM].null_count() == 2
    assert KnownLinks().features(labeled, None)[SIM].null_count() == 2


def shared_patent_pool() -> tuple[pl.DataFrame, pl.DataFrame, Vectors]:
    """The synthetic pool with product lines: devices 2k and 2k+1 share their first gold patent and
    have alike embeddings."""
    pool, gold = synthetic_pool()

    def line(df: pl.DataFrame) -> pl.DataFrame:
        device = pl.col("fda_id").str.slice(1).cast(pl.Int32, strict=False)
        first = pl.col("pat_id") == (device * 100).cast(pl.String)
        return df.with_columns(pl.when(first).then(pl.format("L{}", device // 2)).otherwise(pl.col("pat_id"))
                               .alias("pat_id"))

    rng = np.random.default_rng(1)
    lines = rng.normal(size=(6, 8))
    devices = {f"P{d:02d}": (lines[d // 2] + 0.1 * rng.normal(size=8)).tolist() for d in range(12)}
    words = {f"P{d:02d}": {"STENT", f"LINE{d // 2}"} for d in range(12)} | {"PX": {"STENT"}}
    return (line(pool).sort("fda_id", "pat_id"), line(gold),
            vectors_of(devices | {"PX": rng.normal(size=8).tolist()}, words))


def test_a_fold_model_knows_its_training_devices_only():
    pool, gold, vectors = shared_patent_pool()
    models = fit_fold_models(feature_frame(pool, None), gold, CFG, vectors)
    assert set(KNOWN_LINK_FEATURES) <= set(EXTENDED_FEATURES) <= set(models.full.features)
    assert set(models.full.known.links) == set(gold.iter_rows())
    assert set(models.full.known.device_ids) == set(gold["fda_id"])
    for held_out, model in models.folds:
        assert model.known.links and not {f for f, _ in model.known.links} & set(held_out)
        assert not set(model.known.device_ids) & set(held_out)
        assert {d for d, _ in model.known.names} == set(model.known.device_ids)
    assert dict(dict(models.full.known.names)["P03"]) == pytest.approx({"STENT": 0.0, "LINE1": np.log(13 / 2)})
    assert RerankerModel.from_json(models.full.to_json()) == models.full
    with pytest.raises(ValueError, match="pass the device vectors"):
        apply_fold_models(feature_frame(pool, None), models)


def test_a_devices_own_gold_never_changes_its_scores_through_known_links():
    """The leak test with shared patents: take the target's shared patent off its gold; its
    out-of-fold probabilities and cut-off must not move, while its sibling's do (the models that
    trained on the target no longer know that link)."""
    pool, gold, vectors = shared_patent_pool()
    features = feature_frame(pool, None)
    target, sibling = "P03", "P02"
    changed = pl.concat([gold.filter(pl.col("fda_id") != target),
                         pl.DataFrame({"fda_id": [target] * 2, "pat_id": ["301", "310"]})])
    before_models = fit_fold_models(features, gold, CFG, vectors)
    assert before_models.model_for(target)[0] is not before_models.model_for(sibling)[0]  # not held out together
    before = apply_fold_models(features, before_models, vectors)
    after = apply_fold_models(features, fit_fold_models(features, changed, CFG, vectors), vectors)
    own = pl.col("fda_id") == target
    assert before.filter(own)["probability"].to_list() == after.filter(own)["probability"].to_list()
    assert before.filter(own)["threshold"].to_list() == after.filter(own)["threshold"].to_list()
    line = (pl.col("fda_id") == sibling) & (pl.col("pat_id") == "L1")
    assert before.filter(line)["probability"].item() != after.filter(line)["probability"].item()


def test_training_rows_leave_their_own_device_out():
    pool, gold, vectors = shared_patent_pool()
    labeled = label_pairs(feature_frame(pool, None), gold)
    model = train_reranker(labeled, CFG, vectors=vectors)
    rows = model.known.features(labeled, vectors).filter(pl.col("label") == 1)
    shared = rows.filter(pl.col("pat_id").str.starts_with("L"))
    assert shared.height == 12 and shared[SIM].min() > 0.9  # each with its alike sibling, never itself
    assert shared[NAMES].to_numpy() == pytest.approx(np.log(13 / 2))  # the line's name, shared with the sibling
    unshared = rows.filter(~pl.col("pat_id").str.starts_with("L"))
    assert unshared[SIM].null_count() == unshared[NAMES].null_count() == rows.height - 12


def test_product_line_names_off_leaves_the_name_feature_out():
    pool, gold, vectors = shared_patent_pool()
    cfg = CFG.model_copy(update={"product_line_names": False})
    model = train_reranker(label_pairs(feature_frame(pool, None), gold), cfg, vectors=vectors)
    assert SIM in model.features and NAMES not in model.features
    assert NAMES in train_reranker(label_pairs(feature_frame(pool, None), gold), CFG, vectors=vectors).features
