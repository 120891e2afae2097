"""Device-grouped cross-validation of pair classifiers on labelled (device text, patent text) pairs.

Replaces the paper's Step-6 comparison and Step-5a CV (METHOD.md §5.2, §9 items 1-3 and 17):
folds are grouped by device (devices that share a device text or a patent are kept together, so
no text is ever on both sides of a split), the split itself never looks at labels, every cut-off
is chosen on training devices only (nested), and latency excludes model loading.

The pairs are read and split into folds by text_pairs; their features come from text_pair_features.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import polars as pl
import xgboost as xgb
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import (
    average_precision_score,
    f1_score,
    precision_recall_curve,
    precision_score,
    recall_score,
    roc_auc_score,
)
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from meddevkg_core.atomic_files import replaced_files
from meddevkg_core.config import CrossEncoderConfig, RerankConfig
from meddevkg_core.cross_encoder import PairScorer
from meddevkg_core.embeddings import Encoder
from meddevkg_core.errors import prefixed
from meddevkg_core.lineage import inputs_json, read_fingerprinted
from meddevkg_core.ontology import Ontology
from meddevkg_core.rerank import xgb_classifier
from meddevkg_core.text_pair_features import (
    CHAR_FEATURES,
    DOSSIER_FEATURES,
    LENGTH_FEATURES,
    YEAR_FEATURES,
    pair_features,
)
from meddevkg_core.text_pairs import (
    PairsError,
    assign_folds,
    check_classes,
    check_folds,
    check_pairs,
    device_groups,
    load_pairs,
)
from meddevkg_core.text_repair import repair_counts

if TYPE_CHECKING:
    from spacy.language import Language

ZERO_SHOT = ("tfidf_cosine", "char_tfidf_cosine", "dossier_tfidf_cosine", "sbert_cosine", "entity_score",
             "token_jaccard", "cross_encoder")


# --- scoring and metrics --------------------------------------------------------------------


def best_f1_threshold(labels: np.ndarray, scores: np.ndarray) -> tuple[float, float]:
    """(cut-off, F1) maximising F1 when predicting positive for score >= cut-off."""
    if labels.sum() == 0 or labels.sum() == len(labels):
        return float("inf") if labels.sum() == 0 else float("-inf"), 0.0
    precision, recall, thresholds = precision_recall_curve(labels, scores)
    p, r = precision[:-1], recall[:-1]
    f1 = np.divide(2 * p * r, p + r, out=np.zeros_like(p), where=(p + r) > 0)
    best = int(np.argmax(f1))
    return float(thresholds[best]), float(f1[best])


class Model(Protocol):
    def predict_proba(self, x: np.ndarray) -> np.ndarray: ...


Fitter = Callable[[np.ndarray, np.ndarray], Model]


def xgb_fitter(cfg: RerankConfig) -> Fitter:
    """Stage 3's XGBoost (RerankConfig's hyper-parameters), one thread: the sets are small."""

    def fit(x: np.ndarray, y: np.ndarray) -> Model:
        return xgb_classifier(cfg, y, n_jobs=1).fit(x, y)

    return fit


def logistic_fitter(x: np.ndarray, y: np.ndarray) -> Model:
    """Standardised L2 logistic regression: fewer degrees of freedom than trees for ~2K pairs.
    A missing value (an id without a year) takes the training folds' median."""
    return make_pipeline(SimpleImputer(strategy="median", keep_empty_features=True), StandardScaler(),
                         LogisticRegression(C=1.0, max_iter=5000)).fit(x, y)


def _importance(model: Model, names: Sequence[str]) -> np.ndarray:
    """XGBoost: share of total gain; logistic: |standardised coefficient| share."""
    if isinstance(model, xgb.XGBClassifier):
        gain = model.get_booster().get_score(importance_type="total_gain")
        raw = np.array([gain.get(f"f{i}", 0.0) for i in range(len(names))])
    elif isinstance(model, Pipeline):
        raw = np.abs(model[-1].coef_.ravel())
    else:
        return np.zeros(len(names))
    return raw / raw.sum() if raw.sum() > 0 else raw


def _oof(x: np.ndarray, y: np.ndarray, fold: np.ndarray, fitter: Fitter) -> tuple[np.ndarray, list[Model | None]]:
    """Out-of-fold probabilities; a training side with one class predicts its base rate."""
    scores = np.full(len(y), np.nan)
    models: list[Model | None] = []
    for k in range(int(fold.max()) + 1):
        train, test = fold != k, fold == k
        if len(np.unique(y[train])) < 2:
            scores[test] = y[train].mean()
            models.append(None)
            continue
        model = fitter(x[train], y[train])
        scores[test] = model.predict_proba(x[test])[:, 1]
        models.append(model)
    return scores, models


@dataclass(frozen=True)
class LearnedScores:
    scores: np.ndarray  # out-of-fold probability per pair
    thresholds: list[float]  # nested cut-off per outer fold
    importance: dict[str, float]  # mean over the outer-fold models


def learned_oof(x: np.ndarray, names: Sequence[str], labels: np.ndarray, groups: np.ndarray, fold: np.ndarray,
                fitter: Fitter, seed: int) -> LearnedScores:
    """Out-of-fold probabilities, and per outer fold the F1-optimal cut-off on inner out-of-fold
    scores of its training devices (the nested step: the held-out fold never picks its cut-off)."""
    n_folds = int(fold.max()) + 1
    scores, models = _oof(x, labels, fold, fitter)
    thresholds = []
    for k in range(n_folds):
        train = fold != k
        inner_groups = groups[train]
        if len(np.unique(inner_groups)) < 2 or len(np.unique(labels[train])) < 2:
            thresholds.append(0.5)
            continue
        inner = assign_folds(inner_groups, min(max(2, n_folds - 1), len(np.unique(inner_groups))), seed)
        inner_scores, _ = _oof(x[train], labels[train], inner, fitter)
        thresholds.append(best_f1_threshold(labels[train], inner_scores)[0])
    fitted = [m for m in models if m is not None]
    share = np.mean([_importance(m, names) for m in fitted], axis=0) if fitted else np.zeros(len(names))
    return LearnedScores(scores.astype(np.float32), thresholds,
                         {n: round(float(v), 4) for n, v in zip(names, share, strict=True)})


def zero_shot_thresholds(scores: np.ndarray, labels: np.ndarray, fold: np.ndarray) -> list[float]:
    """Per outer fold, the F1-optimal cut-off on the other folds' scores."""
    return [best_f1_threshold(labels[fold != k], scores[fold != k])[0] for k in range(int(fold.max()) + 1)]


def _safe_auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    return float(roc_auc_score(labels, scores)) if 0 < labels.sum() < len(labels) else None


def scorer_metrics(scores: np.ndarray, labels: np.ndarray, fold: np.ndarray, device: np.ndarray,
                   thresholds: list[float]) -> dict[str, Any]:
    """sklearn metrics of out-of-fold scores; `f1` uses each fold's nested cut-off."""
    predicted = np.zeros(len(labels), bool)
    for k, cut in enumerate(thresholds):
        predicted[fold == k] = scores[fold == k] >= cut
    by_fold = [_safe_auc(labels[fold == k], scores[fold == k]) for k in range(len(thresholds))]
    by_device = [_safe_auc(labels[device == d], scores[device == d]) for d in np.unique(device)]
    fold_auc = [a for a in by_fold if a is not None]
    within = [a for a in by_device if a is not None]
    cut, best_f1 = best_f1_threshold(labels, scores)
    return {
        "roc_auc": round(float(roc_auc_score(labels, scores)), 4),
        "pr_auc": round(float(average_precision_score(labels, scores)), 4),
        "roc_auc_fold_mean": round(float(np.mean(fold_auc)), 4) if fold_auc else None,
        "roc_auc_fold_std": round(float(np.std(fold_auc)), 4) if fold_auc else None,
        "within_device_roc_auc": round(float(np.mean(within)), 4) if within else None,
        "n_mixed_devices": len(within),
        "f1": round(float(f1_score(labels, predicted, zero_division=0.0)), 4),
        "precision": round(float(precision_score(labels, predicted, zero_division=0.0)), 4),
        "recall": round(float(recall_score(labels, predicted, zero_division=0.0)), 4),
        "thresholds": [round(t, 6) for t in thresholds],
        "best_f1_optimistic": round(best_f1, 4),
        "best_f1_threshold_optimistic": round(cut, 6),
    }


# --- the run --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairCvResult:
    pair_scores: pl.DataFrame  # fda_id, pat_id, label, score, fold, one column per other scorer
    features: pl.DataFrame  # fda_id, pat_id and every feature
    report: dict[str, Any]


def learned_variants(available: Sequence[str], cfg: RerankConfig) -> dict[str, tuple[list[str], Fitter]]:
    """The learned scorer (written as `score`) and its comparisons and ablations.

    `learned` is the L2 logistic regression over the pair features: text lengths describe one side
    only (LENGTH_FEATURES), so they stay out. A linear model because the pairs come from ~250
    device groups and a held-out group is scored by a model that never saw its device: trees of
    any depth (1-4) learned group-specific splits and scored 0.02-0.03 AUC lower out of fold
    (five splits, 2026-11-24). XGBoost with Stage 3's settings stays as `learned_xgboost`."""
    pair_only = [f for f in available if f not in LENGTH_FEATURES]

    def without(names: Sequence[str]) -> list[str]:
        return [f for f in pair_only if f not in names]

    variants: dict[str, tuple[list[str], Fitter]] = {
        "learned": (pair_only, logistic_fitter),
        "learned_with_lengths": (list(available), logistic_fitter),
        "learned_no_pool_pct": ([f for f in pair_only if not f.endswith("_pct")], logistic_fitter),
        "learned_xgboost": (list(available), xgb_fitter(cfg)),
        "learned_xgboost_pair_only": (pair_only, xgb_fitter(cfg)),
    }
    if any(f in available for f in CHAR_FEATURES):
        variants["learned_no_char_tfidf"] = (without(CHAR_FEATURES), logistic_fitter)
    if any(f in available for f in YEAR_FEATURES):
        variants["learned_no_years"] = (without(YEAR_FEATURES), logistic_fitter)
    if any(f in available for f in DOSSIER_FEATURES):
        variants["learned_no_dossier"] = (without(DOSSIER_FEATURES), logistic_fitter)
    if "cross_encoder" in available:
        variants["learned_no_cross_encoder"] = (without(("cross_encoder",)), logistic_fitter)
    return variants


@dataclass(frozen=True)
class _Split:
    """Every scorer evaluated on one fold assignment."""

    scores: dict[str, np.ndarray]
    metrics: dict[str, dict[str, Any]]
    importance: dict[str, dict[str, float]]
    fit_seconds: dict[str, float]


_ZERO_SHOT_FAMILY = {"sbert_cosine": "sbert", "tfidf_cosine": "tfidf", "char_tfidf_cosine": "char_tfidf",
                     "dossier_tfidf_cosine": "dossier",
                     "token_jaccard": "jaccard", "entity_score": "entities", "cross_encoder": "cross_encoder"}


def _evaluate(features: pl.DataFrame, labels: np.ndarray, groups: np.ndarray, device: np.ndarray,
              fold: np.ndarray, seed: int, cfg: RerankConfig, feature_seconds: dict[str, float]) -> _Split:
    names = [c for c in features.columns if c not in ("fda_id", "pat_id")]
    n = len(labels)
    scores: dict[str, np.ndarray] = {}
    metrics: dict[str, dict[str, Any]] = {}
    for name in (z for z in ZERO_SHOT if z in names):
        values = features[name].to_numpy().astype(np.float64)
        scores[name] = values
        metrics[name] = {"kind": "zero-shot", **scorer_metrics(
            values, labels, fold, device, zero_shot_thresholds(values, labels, fold)),
            "ms_per_pair": round(1000 * feature_seconds[_ZERO_SHOT_FAMILY[name]] / n, 3)}
    importance: dict[str, dict[str, float]] = {}
    fit_seconds: dict[str, float] = {}
    for variant, (used, fitter) in learned_variants(names, cfg).items():
        start = time.perf_counter()
        x = features.select(pl.col(c).cast(pl.Float64) for c in used).to_numpy()
        learned = learned_oof(x, used, labels, groups, fold, fitter, seed)
        fit_seconds[variant] = time.perf_counter() - start
        scores[variant] = learned.scores
        metrics[variant] = {"kind": "learned", **scorer_metrics(
            learned.scores.astype(np.float64), labels, fold, device, learned.thresholds),
            "ms_per_pair": round(1000 * sum(feature_seconds.values()) / n, 3), "features": list(used)}
        importance[variant] = learned.importance
    return _Split(scores, metrics, importance, fit_seconds)


def _repeat_summary(runs: Sequence[_Split]) -> dict[str, dict[str, float]]:
    """Mean and spread over fold assignments: one split of ~250 device groups moves AUC by ~0.01."""
    out: dict[str, dict[str, float]] = {}
    for name in runs[0].metrics:
        row: dict[str, float] = {}
        for metric in ("roc_auc", "pr_auc", "within_device_roc_auc", "f1"):
            values = [r.metrics[name][metric] for r in runs if r.metrics[name][metric] is not None]
            if values:
                row[f"{metric}_mean"] = round(float(np.mean(values)), 4)
                row[f"{metric}_std"] = round(float(np.std(values)), 4)
        out[name] = row
    return out


def run_pairs_cv(pairs: pl.DataFrame, encoder: Encoder, nlp: Language | None, ontology: Ontology | None,
                 cross_encoder: PairScorer | None = None, folds: int = 5, seed: int = 42, *, repeats: int = 1,
                 model_cfg: RerankConfig | None = None,
                 cross_encoder_cfg: CrossEncoderConfig | None = None,
                 dossiers: dict[str, str] | None = None) -> PairCvResult:
    """Zero-shot and learned pair scorers, evaluated out of fold on held-out device groups.

    `pair_scores` and `report["scorers"]` come from the split of `seed`; with `repeats` > 1 the
    CV is rerun on the splits of seed+1, seed+2, ... (features are computed once) and
    `report["repeated"]` gives each metric's mean and spread.
    """
    pairs = check_pairs(pairs)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    cfg = (model_cfg or RerankConfig()).model_copy(update={"seed": seed})
    labels = pairs["label"].to_numpy().astype(np.int32)
    check_classes(labels)
    groups = device_groups(pairs)
    fold = assign_folds(groups, folds, seed)
    features, seconds = pair_features(pairs, encoder, nlp, ontology, cross_encoder, cross_encoder_cfg, dossiers)
    device = pairs["fda_id"].to_numpy()
    runs = [_evaluate(features, labels, groups, device, fold, seed, cfg, seconds)]
    for r in range(1, repeats):
        runs.append(_evaluate(features, labels, groups, device, assign_folds(groups, folds, seed + r),
                              seed + r, cfg, seconds))
    first = runs[0]
    extra = {k: v for k, v in first.scores.items() if k != "learned"}
    out = pairs.select("fda_id", "pat_id", "label").with_columns(
        pl.Series("score", first.scores["learned"], dtype=pl.Float32),
        pl.Series("fold", fold, dtype=pl.Int32),
        *(pl.Series(name, values, dtype=pl.Float32) for name, values in extra.items()),
    )
    names = [c for c in features.columns if c not in ("fda_id", "pat_id")]
    report = {
        "n_pairs": len(labels),
        "n_positives": int(labels.sum()),
        "n_devices": int(pairs["fda_id"].n_unique()),
        "n_device_groups": int(len(np.unique(groups))),
        "folds": folds,
        "seed": seed,
        "repeats": repeats,
        "split": "device groups (devices sharing a device text, patent id or patent text form one group), "
                 "largest first into the lightest fold, seeded among equal sizes; the split never reads labels",
        "fold_sizes": [{"fold": k, "pairs": int((fold == k).sum()), "positives": int(labels[fold == k].sum()),
                        "devices": int(len(np.unique(device[fold == k])))} for k in range(folds)],
        "threshold": "f1/precision/recall: per outer fold, the F1-optimal cut-off chosen on the training folds "
                     "only (zero-shot: their scores; learned: inner device-grouped out-of-fold scores); "
                     "best_f1_optimistic: cut-off chosen on the pooled out-of-fold scores themselves (optimistic)",
        "auc": "roc_auc/pr_auc: pooled out-of-fold scores; roc_auc_fold_*: per held-out fold; "
               "within_device_roc_auc: mean over devices with both classes, blind to which devices carry gold "
               "(the sampling artefact of METHOD §9.1)",
        "unsupervised_fits": "TF-IDF idf and pool percentiles are fitted on all distinct texts of the input, "
                             "without labels (leak-free, transductive); year_gap is read off the two ids",
        "features": names,
        "scorers": first.metrics,
        "repeated": _repeat_summary(runs) if repeats > 1 else None,
        "feature_importance": first.importance,
        "feature_importance_note": "share of total gain (XGBoost) or of |standardised coefficient| (logistic), "
                                   "mean over the outer-fold models",
        "xgboost": cfg.model_dump(include={"n_estimators", "max_depth", "learning_rate", "subsample",
                                           "colsample_bytree", "seed"}),
        "models": {"encoder": encoder.model_id,
                   "cross_encoder": cross_encoder.model_id if cross_encoder is not None else None,
                   "entities": "spaCy + MedDevOnto" if "entity_score" in names else None},
        "timings_s": {**{f"features_{k}": round(v, 3) for k, v in seconds.items()},
                      **{f"cv_{k}": round(v, 3) for k, v in first.fit_seconds.items()}},
        "latency_note": "ms_per_pair = time to compute the scorer's features over the pair set / n_pairs (all "
                        "features for learned scorers; the model adds microseconds), model loading excluded; "
                        "cv_* = training and nested-CV time of one split",
    }
    return PairCvResult(pair_scores=out, features=features, report=report)


# --- output and CLI -------------------------------------------------------------------------


def write_pairs_cv(result: PairCvResult, out_dir: str | Path) -> tuple[Path, Path]:
    """OUT/pair_scores.parquet and OUT/report.json, replacing a previous run's as one set
    (atomic_files.replaced_files: never new scores beside an old report)."""
    out = Path(out_dir)
    with replaced_files(out) as stage:
        result.pair_scores.write_parquet(stage / "pair_scores.parquet")
        (stage / "report.json").write_text(json.dumps(result.report, indent=2, sort_keys=False) + "\n")
    scores_path, report_path = out / "pair_scores.parquet", out / "report.json"
    return scores_path, report_path


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The learned scorer's figures in one flat record: its split, and the mean over all splits."""
    learned = report["scorers"]["learned"]
    repeated = (report.get("repeated") or {}).get("learned", {})
    return {"scorer": "learned", "model": "logistic regression", "features": len(learned["features"]),
            "n_pairs": report["n_pairs"], "seed": report["seed"], "roc_auc": learned["roc_auc"],
            "pr_auc": learned["pr_auc"], "within_device_roc_auc": learned["within_device_roc_auc"],
            "f1_nested": learned["f1"], "splits": report["repeats"],
            "roc_auc_mean": repeated.get("roc_auc_mean", learned["roc_auc"]),
            "roc_auc_std": repeated.get("roc_auc_std", 0.0),
            "xgboost_roc_auc": report["scorers"]["learned_xgboost"]["roc_auc"]}


def main_pairs_cv(pairs_path: str, out: str, cross_encoder: str | None, device: str, hashing: bool, *,
                  folds: int = 5, seed: int = 42, repeats: int = 5, fda_pma: str | None = None,
                  embedding_model: str | None = None, models_dir: Path | None = None,
                  cross_encoder_backend: str = "sentence-transformers", embedding_backend: str | None = None) -> dict:
    """Load the models, run the CV, write OUT/ and return the report (for the `meddevkg` CLI), whose
    `inputs` are the fingerprints of the pair file and the FDA records read (lineage).

    `embedding_model` is an embeddings.load_embedding_model setting (None: the packaged MiniLM);
    split packaged models are assembled under `models_dir` (default packaged_models.default_models_dir())."""
    from meddevkg_core.cross_encoder import load_cross_encoder
    from meddevkg_core.dossier import device_dossiers, load_supplements
    from meddevkg_core.embeddings import HashingEncoder, load_embedding_model
    from meddevkg_core.entities import load_spacy_pipeline
    from meddevkg_core.ontology import load_meddevonto
    from meddevkg_core.packaged_models import default_models_dir

    read, pairs_input = read_fingerprinted(pairs_path, load_pairs)
    # labels and device groups are known now: a file pairs-cv cannot use fails here, not once the (slow)
    # models are loaded
    with prefixed(pairs_path, PairsError):
        check_classes(read.pairs["label"].to_numpy())
        check_folds(device_groups(read.pairs), folds)
    inputs = {"pairs": pairs_input}
    start = time.perf_counter()
    # `hashing` is the dry-run switch: it names the encoder whatever `embedding_model` says (the CLI fills
    # that from $MEDDEVKG_EMBEDDING_MODEL), as `embedding_model="hashing"` does
    encoder: Encoder = HashingEncoder() if hashing else load_embedding_model(
        embedding_model, models_dir or default_models_dir(), device=device, backend=embedding_backend)
    nlp = load_spacy_pipeline()
    ontology = load_meddevonto()
    ce_cfg = CrossEncoderConfig(model=cross_encoder, backend=cross_encoder_backend)
    scorer = load_cross_encoder(ce_cfg, device=device)
    loading = time.perf_counter() - start
    dossiers = None
    dossier_input: dict[str, Any] = {"fda_pma": None}
    if fda_pma is not None:
        devices = read.pairs.select("fda_id", pl.col("device_text").alias("text")).unique("fda_id", keep="first")
        fda, inputs["fda_pma"] = read_fingerprinted(fda_pma, partial(load_supplements,
                                                                     fda_ids=devices["fda_id"].to_list()))
        supplements = fda.valid
        dossiers = device_dossiers(devices, supplements)
        dossier_input = {"fda_pma": str(fda_pma), "supplements": supplements.height,
                         "devices_with_supplements": supplements["fda_id"].n_unique(), "devices": devices.height,
                         "fda_pma_quarantined": fda.rejected.height,
                         "fda_pma_quarantine_examples": fda.rejected.head(5).to_dicts()}
    with prefixed(pairs_path, PairsError):
        result = run_pairs_cv(read.pairs, encoder, nlp, ontology, scorer, folds, seed, repeats=repeats,
                              cross_encoder_cfg=ce_cfg, dossiers=dossiers)
    report = {**result.report, "input": {"path": str(pairs_path), "rows_valid": read.pairs.height,
                                         "rows_quarantined": read.rejected.height,
                                         "quarantine_examples": read.rejected.head(5).to_dicts(),
                                         "text_repairs": repair_counts(read.text_repairs),
                                         **dossier_input},
              "inputs": inputs_json(inputs)}
    report["timings_s"] = {"model_loading": round(loading, 3), **report["timings_s"]}
    final = PairCvResult(result.pair_scores, result.features, report)
    write_pairs_cv(final, out)
    return report
