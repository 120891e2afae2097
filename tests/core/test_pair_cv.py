"""Device-grouped pair CV on a hand-written pair set with the hashing encoder (no model weights)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score

from meddevkg_core import pair_cv, text_pair_features, text_pairs
from meddevkg_core.embeddings import HashingEncoder
from meddevkg_core.lineage import fingerprint, inputs_json

TOPICS = {
    "P001": ("Coronary stent system. Balloon-expandable drug-eluting coronary stent for de novo lesions.",
             ["Drug eluting stent. A coronary stent with a polymer coating eluting drug.",
              "Stent delivery balloon catheter. A balloon catheter crimps and expands a coronary stent."]),
    "P002": ("Mechanical heart valve. Bileaflet prosthetic heart valve replacing the aortic valve.",
             ["Prosthetic heart valve leaflet. A bileaflet mechanical valve with pyrolytic carbon leaflets.",
              "Aortic valve prosthesis. Heart valve prosthesis with a sewing ring for aortic replacement."]),
    "P003": ("Implantable pacemaker. Dual chamber pulse generator for cardiac pacing of bradycardia.",
             ["Cardiac pacing lead. Pacemaker lead with electrode for dual chamber pacing.",
              "Pulse generator battery. Implantable pulse generator for pacing therapy of bradycardia."]),
    "P004": ("Implantable cardioverter defibrillator. Delivers defibrillation shocks for ventricular arrhythmia.",
             ["Defibrillation electrode. Shock electrode for an implantable defibrillator.",
              "Arrhythmia detection. Defibrillator detects ventricular fibrillation and delivers a shock."]),
    "P005": ("Left atrial appendage occluder. Percutaneous occluder closes the appendage to prevent stroke.",
             ["Occlusion device. Braided occluder for a left atrial appendage delivered percutaneously.",
              "Appendage closure. Implant closes the left atrial appendage of the heart."]),
    "P006": ("Cardiac ablation catheter. Radiofrequency catheter ablation of atrial fibrillation.",
             ["Ablation electrode catheter. Irrigated tip electrode delivers radiofrequency energy.",
              "Catheter ablation system. Generator controls radiofrequency ablation of cardiac tissue."]),
    "P007": ("Endovascular stent graft. Bifurcated aortic graft for abdominal aortic aneurysm repair.",
             ["Bifurcated stent graft. Endovascular graft excludes an abdominal aortic aneurysm.",
              "Graft delivery system. Sheath deploys an aortic stent graft in the aneurysm."]),
    "P008": ("Pulse oximeter sensor. Optical sensor measures blood oxygen saturation on the finger.",
             ["Oximetry sensor. Light emitting sensor measures oxygen saturation of blood.",
              "Finger clip oximeter. Photodetector sensor clips to the finger for pulse oximetry."]),
}


def synthetic_pairs() -> pl.DataFrame:
    """Per device its 2 own patents (label 1) and 3 negatives: a variant of another topic's patent
    with its own id and text, so no text is shared and each device is its own group."""
    ids = list(TOPICS)
    rows = []
    for i, fda in enumerate(ids):
        text, patents = TOPICS[fda]
        for j, pat in enumerate(patents):
            rows.append((fda, f"{fda}-{j}", text, pat, 1))
        for k in (1, 3, 5):
            other = ids[(i + k) % len(ids)]
            rows.append((fda, f"N{fda}-{k}", text, f"{TOPICS[other][1][i % 2]} Variant {k} of {fda}.", 0))
    return pl.DataFrame(rows, schema=text_pairs.PAIRS, orient="row")


@pytest.fixture(scope="module")
def pairs() -> pl.DataFrame:
    return synthetic_pairs()


@pytest.fixture(scope="module")
def result(pairs: pl.DataFrame) -> pair_cv.PairCvResult:
    return pair_cv.run_pairs_cv(pairs, HashingEncoder(), None, None, folds=4, seed=3)


# --- folds ----------------------------------------------------------------------------------


def test_folds_never_share_a_device_or_text(pairs: pl.DataFrame, result: pair_cv.PairCvResult):
    scored = result.pair_scores
    per_device = scored.group_by("fda_id").agg(pl.col("fold").n_unique())
    assert per_device["fold"].max() == 1
    joined = scored.join(pairs, on=["fda_id", "pat_id"])
    for col in ("device_text", "patent_text"):
        assert joined.group_by(col).agg(pl.col("fold").n_unique())["fold"].max() == 1
    assert sorted(scored["fold"].unique().to_list()) == [0, 1, 2, 3]


# --- out-of-fold property -------------------------------------------------------------------


def test_changing_one_devices_labels_never_changes_its_scores(pairs: pl.DataFrame, result: pair_cv.PairCvResult):
    flipped = pairs.with_columns(
        pl.when(pl.col("fda_id") == "P003").then(1 - pl.col("label")).otherwise(pl.col("label")).alias("label"))
    other = pair_cv.run_pairs_cv(flipped, HashingEncoder(), None, None, folds=4, seed=3)
    score_cols = [c for c in result.pair_scores.columns if c not in ("fda_id", "pat_id", "label", "fold")]
    assert "score" in score_cols and "learned_xgboost" in score_cols
    mine = pl.col("fda_id") == "P003"
    before, after = result.pair_scores.filter(mine), other.pair_scores.filter(mine)
    for col in score_cols:
        assert before[col].to_list() == after[col].to_list(), col
    # ... while devices whose training folds held P003 do move: the check has teeth.
    rest = ~mine & (pl.col("fold") != before["fold"][0])
    assert result.pair_scores.filter(rest)["score"].to_list() != other.pair_scores.filter(rest)["score"].to_list()


# --- metrics ----------------------------------------------------------------------------------


def test_metrics_match_sklearn_on_a_toy_case():
    labels = np.array([0, 0, 1, 1, 0, 1, 0, 1, 0, 0])
    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.2, 0.9, 0.7, 0.3, 0.05, 0.6])
    fold = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    device = np.array(list("abbacddeff"))
    thresholds = pair_cv.zero_shot_thresholds(scores, labels, fold)
    m = pair_cv.scorer_metrics(scores, labels, fold, device, thresholds)
    assert m["roc_auc"] == round(roc_auc_score(labels, scores), 4)
    assert m["pr_auc"] == round(average_precision_score(labels, scores), 4)
    predicted = np.where(fold == 0, scores >= thresholds[0], scores >= thresholds[1])
    assert m["f1"] == round(f1_score(labels, predicted), 4)
    best = max(f1_score(labels, scores >= t) for t in scores)
    assert m["best_f1_optimistic"] == round(best, 4)
    assert m["n_mixed_devices"] == 3  # a, b and d hold both classes
    within = [roc_auc_score(labels[device == d], scores[device == d]) for d in "abd"]
    assert m["within_device_roc_auc"] == round(float(np.mean(within)), 4)


def test_a_pair_scored_at_its_folds_cut_off_is_predicted_positive():
    labels, scores, fold = np.array([1, 0, 1, 0]), np.array([0.5, 0.2, 0.6, 0.4]), np.array([0, 0, 1, 1])
    m = pair_cv.scorer_metrics(scores, labels, fold, np.array(list("abcd")), [0.5, 0.6])
    assert m["recall"] == 1.0 and m["precision"] == 1.0 and m["f1"] == 1.0


def test_nested_threshold_comes_from_the_other_folds_only():
    labels = np.array([1, 1, 0, 0, 1, 1, 0, 0])
    scores = np.array([0.9, 0.8, 0.3, 0.2, 0.35, 0.3, 0.1, 0.05])
    fold = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    t0, t1 = pair_cv.zero_shot_thresholds(scores, labels, fold)
    assert t0 == pair_cv.best_f1_threshold(labels[4:], scores[4:])[0] == pytest.approx(0.3)
    assert t1 == pair_cv.best_f1_threshold(labels[:4], scores[:4])[0] == pytest.approx(0.8)


# --- report, files, scorers -------------------------------------------------------------------


def test_report_lists_every_scorer_with_labelled_metrics(result: pair_cv.PairCvResult, pairs: pl.DataFrame):
    r = result.report
    assert (r["n_pairs"], r["n_positives"], r["n_devices"], r["folds"]) == (pairs.height, 16, 8, 4)
    assert {"tfidf_cosine", "char_tfidf_cosine", "sbert_cosine", "token_jaccard", "learned",
            "learned_xgboost", "learned_no_char_tfidf"} <= set(r["scorers"])
    assert "entity_score" not in r["scorers"]  # no spaCy pipeline given
    for m in r["scorers"].values():
        assert {"roc_auc", "pr_auc", "f1", "best_f1_optimistic", "within_device_roc_auc", "ms_per_pair"} <= set(m)
        assert len(m["thresholds"]) == 4
    assert "optimistic" in r["threshold"]
    assert r["scorers"]["learned"]["roc_auc"] == round(
        roc_auc_score(result.pair_scores["label"], result.pair_scores["score"]), 4)
    # The headline model reads pair features only; the lengths variant adds one-sided ones.
    assert not set(text_pair_features.LENGTH_FEATURES) & set(r["scorers"]["learned"]["features"])
    assert set(text_pair_features.LENGTH_FEATURES) <= set(r["scorers"]["learned_with_lengths"]["features"])
    assert set(text_pair_features.CHAR_FEATURES) <= set(r["features"])
    line = pair_cv.headline(r)
    assert line["roc_auc"] == r["scorers"]["learned"]["roc_auc"] and line["splits"] == 1
    assert line["roc_auc_mean"] == line["roc_auc"]


def test_write_pairs_cv_contract(tmp_path: Path, result: pair_cv.PairCvResult):
    scores_path, report_path = pair_cv.write_pairs_cv(result, tmp_path / "out")
    written = pl.read_parquet(scores_path)
    assert written.columns[:4] == ["fda_id", "pat_id", "label", "score"]
    assert written.equals(result.pair_scores)
    assert json.loads(report_path.read_text())["n_pairs"] == result.report["n_pairs"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["pair_scores.parquet", "report.json"]


def test_a_report_that_cannot_be_written_leaves_the_previous_scores_too(tmp_path: Path,
                                                                       result: pair_cv.PairCvResult):
    out = tmp_path / "out"
    pair_cv.write_pairs_cv(result, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rescored = pair_cv.PairCvResult(result.pair_scores.with_columns(pl.lit(0.5).alias("score")), result.features,
                                    {**result.report, "started": date(2026, 11, 28)})  # not JSON
    with pytest.raises(TypeError, match="not JSON serializable"):
        pair_cv.write_pairs_cv(rescored, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@dataclass(frozen=True)
class WordOverlapScorer:
    """A stand-in cross-encoder: share of patent words found in the device text."""

    model_id: str = "fake-ce"

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        out = [len(set(d.lower().split()) & set(p.lower().split())) / max(1, len(p.split())) for d, p in pairs]
        return np.array(out, np.float32)


def test_cross_encoder_is_a_zero_shot_scorer_and_a_feature(pairs: pl.DataFrame):
    res = pair_cv.run_pairs_cv(pairs, HashingEncoder(), None, None, cross_encoder=WordOverlapScorer(), folds=4)
    assert "cross_encoder" in res.pair_scores.columns and "cross_encoder" in res.report["features"]
    assert res.report["scorers"]["cross_encoder"]["kind"] == "zero-shot"
    assert "learned_no_cross_encoder" in res.report["scorers"]
    assert res.report["models"]["cross_encoder"] == "fake-ce"


def test_run_rejects_unusable_input(pairs: pl.DataFrame):
    """As a PairsError, an input error: the CLI prints it as one line, not as a traceback."""
    with pytest.raises(text_pairs.PairsError, match="positives"):
        pair_cv.run_pairs_cv(pairs.with_columns(pl.lit(0, pl.Int8).alias("label")), HashingEncoder(), None, None)
    with pytest.raises(text_pairs.PairsError, match="folds"):
        pair_cv.run_pairs_cv(pairs, HashingEncoder(), None, None, folds=9)
    with pytest.raises(text_pairs.PairsError, match="duplicate pairs"):
        pair_cv.run_pairs_cv(pl.concat([pairs, pairs.head(1)]), HashingEncoder(), None, None)


# --- the CLI's entry (spaCy) ------------------------------------------------------------------


@pytest.mark.real_model
def test_main_pairs_cv_writes_and_returns_the_report(tmp_path: Path, pairs: pl.DataFrame):
    src = tmp_path / "pairs.parquet"
    pairs.write_parquet(src)
    report = pair_cv.main_pairs_cv(str(src), str(tmp_path / "out"), None, "cpu", True, folds=4, repeats=2)
    assert report["input"]["rows_valid"] == pairs.height and report["input"]["rows_quarantined"] == 0
    assert "entity_score" in report["scorers"] and report["models"]["cross_encoder"] is None
    assert report["repeated"]["learned"]["roc_auc_std"] >= 0
    line = pair_cv.headline(report)
    assert line["splits"] == 2 and line["roc_auc_mean"] == report["repeated"]["learned"]["roc_auc_mean"]
    assert "model_loading" in report["timings_s"]
    assert json.loads((tmp_path / "out" / "report.json").read_text())["scorers"].keys() == report["scorers"].keys()


@pytest.mark.parametrize(("positives", "folds", "says"), [
    (None, 9, "9 folds for 8 device groups"),
    (0, 5, "need positives and negatives; got 0 positives of 40"),
    (1, 5, "need positives and negatives; got 1 positives of 40"),
    (40, 5, "need positives and negatives; got 40 positives of 40"),
])
def test_main_pairs_cv_refuses_what_it_cannot_cross_validate_before_loading_a_model(
        tmp_path: Path, pairs: pl.DataFrame, monkeypatch: pytest.MonkeyPatch, positives: int | None, folds: int,
        says: str):
    """Loading the models takes long: folds above the device groups, or a file without both classes, fail as
    soon as the pairs are read."""
    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded")

    for loader in ("embeddings.load_embedding_model", "entities.load_spacy_pipeline",
                   "ontology.load_meddevonto", "cross_encoder.load_cross_encoder"):
        monkeypatch.setattr(f"meddevkg_core.{loader}", no_model)
    if positives is not None:
        pairs = pairs.with_columns(label=(pl.int_range(pl.len()) < positives).cast(pairs["label"].dtype))
    src = tmp_path / "pairs.parquet"
    pairs.write_parquet(src)  # 8 devices, each its own group
    with pytest.raises(text_pairs.PairsError, match=rf"^{re.escape(str(src))}: .*{re.escape(says)}"):
        pair_cv.main_pairs_cv(str(src), str(tmp_path / "out"), None, "cpu", False, folds=folds, models_dir=tmp_path)
    assert not (tmp_path / "out").exists()


# --- missing values (an id without a year) ----------------------------------------------------


def test_logistic_fitter_takes_missing_values_from_the_training_median():
    # The second column's known values 2, 3 and 10: median 3, mean 5. A missing value is scored as 3.
    x = np.array([[0.0, np.nan], [1.0, 2.0], [0.1, 10.0], [0.9, 3.0]])
    model = pair_cv.logistic_fitter(x, np.array([0, 1, 0, 1]))
    missing = model.predict_proba(np.array([[0.5, np.nan]]))
    assert np.isfinite(missing).all()
    np.testing.assert_allclose(missing, model.predict_proba(np.array([[0.5, 3.0]])))
    assert not np.allclose(missing, model.predict_proba(np.array([[0.5, 5.0]])))  # not the mean


# --- dossier features -------------------------------------------------------------------------


def test_dossier_features_read_the_device_supplements_and_add_an_ablation(pairs: pl.DataFrame):
    # P006's own text shares no word with its second patent's "generator controls"; its dossier does
    dossiers = {"P006": TOPICS["P006"][0] + " New generator controls software."}
    features = text_pair_features.dossier_features(pairs, dossiers)
    assert set(features) == set(text_pair_features.DOSSIER_FEATURES)
    plain = text_pair_features.tfidf_features(text_pair_features.text_index(pairs))
    rows = pairs.with_row_index("i").filter(pl.col("fda_id") == "P006")
    gained = rows.filter(pl.col("patent_text").str.contains("Generator controls"))["i"].item()
    assert features["dossier_tfidf_cosine"][gained] > plain["tfidf_cosine"][gained]
    others = pairs.with_row_index("i").filter(pl.col("fda_id") != "P006")["i"].to_numpy()
    # another device keeps its text; the idf is refitted over the dossiers, so values move slightly
    np.testing.assert_allclose(features["dossier_tfidf_cosine"][others], plain["tfidf_cosine"][others], atol=0.05)
    result = pair_cv.run_pairs_cv(pairs, HashingEncoder(), None, None, folds=4, seed=3, dossiers=dossiers)
    assert {"dossier_tfidf_cosine", "learned_no_dossier"} <= set(result.report["scorers"])
    assert set(text_pair_features.DOSSIER_FEATURES) <= set(result.report["scorers"]["learned"]["features"])


def test_main_pairs_cv_reads_supplements_from_fda_records(tmp_path: Path, pairs: pl.DataFrame):
    src, fda = tmp_path / "pairs.parquet", tmp_path / "pma.parquet"
    pairs.with_columns(pl.col("fda_id").str.replace("^P", "P100")).write_parquet(src)  # real PMA numbers: P100006
    pl.DataFrame({"submission_number": ["P100006/S001", "P999999/S001"], "date_decision": ["2020-01-01", "2020-01-01"],
                  "device": ["ABLATOR", "X"], "approval_order_statement": ["New generator controls.", "Y"]}
                 ).write_parquet(fda)
    # hashing names the encoder whatever the model setting says ($MEDDEVKG_EMBEDDING_MODEL fills it in the CLI)
    report = pair_cv.main_pairs_cv(str(src), str(tmp_path / "out"), None, "cpu", True, folds=4, repeats=1,
                                   fda_pma=str(fda), embedding_model=str(tmp_path / "no-such-model"))
    assert report["input"]["fda_pma"] == str(fda) and report["input"]["devices_with_supplements"] == 1
    assert "learned_no_dossier" in report["scorers"]
    # the bytes read, as `run` and `benchmark` record theirs
    assert report["inputs"] == inputs_json({"pairs": fingerprint(src), "fda_pma": fingerprint(fda)})
    assert json.loads((tmp_path / "out" / "report.json").read_text())["inputs"] == report["inputs"]
