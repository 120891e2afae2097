"""Stage 3's classifier: learned noise reduction, its features, training and cut-off.

The classifier is XGBoost over the Stage-2 score components, the cross-encoder score and three
flags (the paper's 9 features, METHOD.md §4.2; the cosine is kept as a float instead of a 2-dp
string), by default with the extended set on top (EXTENDED_FEATURES, pair_features). Unlike the
paper, every probability reported for a gold device comes from a model that never saw that
device (device-grouped folds: fold_models), and every cut-off is chosen on training devices only,
from their out-of-fold scores (oof_probabilities). reranked_links then decides and ranks the pool.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np
import polars as pl
import xgboost as xgb
from sklearn.model_selection import GroupKFold

from meddevkg_core.config import Admission, RerankConfig
from meddevkg_core.device_activity import DORMANT_FACTOR, GRANTED_AFTER_LAST_DECISION, dormant
from meddevkg_core.known_links import KNOWN_LINK_FEATURES, KnownLinks
from meddevkg_core.pair_features import POOL_FEATURES, YEAR_FEATURES, with_derived_features
from meddevkg_core.siblings import SIBLING_FEATURES
from meddevkg_core.text_adapter import Vectors

FEATURES = (
    "score_company", "score_vector", "score_entity", "score_total", "ai_score",
    "has_tiers", "has_rescue", "is_same_company", "sim_raw",
)
EXTENDED_FEATURES = FEATURES + ("sim_z_device", "lexical", "entity_matches", "company_via_deal", *YEAR_FEATURES,
                                 *POOL_FEATURES, *KNOWN_LINK_FEATURES, "dossier_lexical", *SIBLING_FEATURES)
"""The paper's 9 plus where the cosine stands within the device (z-score), a lexical similarity,
how many entity keys are shared (not only the best one), whether the company match goes through
an acquisition (METHOD.md §9 items 7, 10, 13), the patent's grant year against the device's year
(a same-company patent from another product generation is the commonest hard negative) and where
the pair stands within its device's pool (pair_features), and how alike the pair's device is to
another device the model knows the patent is linked to (known_links), and the lexical similarity
of the patent to the device's dossier, its supplements included (dossier; missing when a run read
no FDA records), and how much better the patent fits the device than the best of the company's
other devices, and how many devices the patent's company has (siblings). Every one is the same
whichever devices a run scores together."""
CORPUS_FEATURES = EXTENDED_FEATURES + ("sim_z_patent",)
"""Plus where the cosine stands within the patent: its moments run over every device of the Stage-2
inputs (the stored catalogue in Dagster's candidate_pool), so each new device moves every pair's
value a little; the benchmark measures it as the ablation `extended_corpus_features`."""
FEATURE_SETS = {"paper": FEATURES, "extended": EXTENDED_FEATURES, "extended_corpus": CORPUS_FEATURES}
RESCUES = (Admission.RESCUE_VECTOR.value, Admission.RESCUE_ANCHOR.value)
PRODUCT_LINE_FEATURE = KNOWN_LINK_FEATURES[1]
"""known_link_name_idf: left out when RerankConfig.product_line_names is off."""
MONOTONE_INCREASING = ("ai_score", "sim_raw", "sim_z_device", "lexical", "sim_z_pool", "lexical_z_pool",
                       "sim_z_company", "lexical_z_company", "known_link_device_sim", "known_link_name_idf",
                       "dossier_lexical", "sibling_sim_margin", "sibling_lexical_margin", "sim_z_patent")
"""The text similarities and where they stand: with the others fixed, a pair more alike can only be
more likely a link (RerankConfig.monotone_similarity). Unconstrained, depth-4 trees over ~50 gold
devices learned bumps: for an ablation catheter (P220013), a cosine of 0.23 to a glucose monitor's
patent counted for the pair and one of 0.48 to its own force sensor's patent against it."""


def feature_names(cfg: RerankConfig) -> tuple[str, ...]:
    names = FEATURE_SETS[cfg.features]
    return names if cfg.product_line_names else tuple(n for n in names if n != PRODUCT_LINE_FEATURE)


def feature_frame(candidates: pl.DataFrame, ce_scores: pl.DataFrame | None) -> pl.DataFrame:
    """Candidates with every feature column (ai_score null when absent), derived ones included."""
    df = with_derived_features(candidates)
    if ce_scores is not None and ce_scores.height:
        df = df.join(ce_scores.select("fda_id", "pat_id", "ai_score"), on=["fda_id", "pat_id"], how="left")
    else:
        df = df.with_columns(pl.lit(None, dtype=pl.Float32).alias("ai_score"))
    return df.with_columns(
        pl.col("tier_s_match").fill_null(False).cast(pl.Int8).alias("has_tiers"),
        pl.col("admitted_by").is_in(RESCUES).cast(pl.Int8).alias("has_rescue"),
        (pl.col("score_company") > 0).cast(pl.Int8).alias("is_same_company"),
        pl.col("sim").alias("sim_raw"),
    )


def matrix(features: pl.DataFrame, names: tuple[str, ...] = FEATURES) -> np.ndarray:
    return features.select(pl.col(f).cast(pl.Float32) for f in names).to_numpy().astype(np.float32)


def label_pairs(candidates: pl.DataFrame, gold: pl.DataFrame) -> pl.DataFrame:
    """Pairs of gold devices with label 1 for gold links, 0 for the rest (hard negatives).

    `in_pool` (True when absent) tells Stage-2 pool rows from the out-of-pool training sample. The
    derived features (pair_features) are added when missing: stored training pairs do not hold them.
    """
    candidates = with_derived_features(candidates)
    gold_devices = gold["fda_id"].unique().implode()
    marked = gold.select("fda_id", "pat_id", pl.lit(1, pl.Int8).alias("label"))
    if "in_pool" not in candidates.columns:
        candidates = candidates.with_columns(pl.lit(True).alias("in_pool"))
    return (candidates.filter(pl.col("fda_id").is_in(gold_devices))
            .join(marked, on=["fda_id", "pat_id"], how="left")
            .with_columns(pl.col("label").fill_null(0)))


def training_sample(labeled: pl.DataFrame, cfg: RerankConfig) -> pl.DataFrame:
    """Every positive plus hard negatives, capped per device so no device dominates (seeded).

    Out-of-pool rows are already a seeded sample (training_pairs) and pass through untouched.
    """
    if cfg.negatives_per_positive <= 0:
        return labeled
    outside = labeled.filter(~pl.col("in_pool")) if "in_pool" in labeled.columns else labeled.clear()
    labeled = labeled.filter(pl.col("in_pool")) if "in_pool" in labeled.columns else labeled
    pos = labeled.filter(pl.col("label") == 1)
    neg = labeled.filter(pl.col("label") == 0)
    budget = max(1, cfg.negatives_per_positive * pos.height)
    cap = max(1, int(cfg.max_negative_share_per_device * budget))
    neg = (neg.with_columns(pl.col("fda_id").hash(cfg.seed).alias("_h1"),
                            pl.concat_str("fda_id", "pat_id").hash(cfg.seed).alias("_h2"))
           .sort("_h1", "_h2").with_columns(pl.int_range(pl.len()).over("fda_id").alias("_rank"))
           .filter(pl.col("_rank") < cap).sort("_h2").head(budget).drop("_h1", "_h2", "_rank"))
    return pl.concat([pos, neg, outside]).sort("fda_id", "pat_id")


@dataclass(frozen=True)
class RerankerModel:
    """A trained classifier plus the cut-off chosen for it on validation devices."""

    booster_json: str
    threshold: float
    n_train_pairs: int
    n_train_devices: int
    has_ai_score: bool
    features: tuple[str, ...] = FEATURES
    bagged_json: tuple[str, ...] = ()
    """The other members of a bag (RerankConfig.bagging); the probability is the members' mean."""
    known: KnownLinks = KnownLinks()
    """Its training devices' gold links and embeddings, for KNOWN_LINK_FEATURES."""
    dormant_device_years: int | None = None
    """RerankConfig.dormant_device_years when it was trained (None in models saved before it)."""

    @property
    def input_columns(self) -> tuple[str, ...]:
        """Columns `predict` needs: its features, with the ids in place of those it derives itself."""
        own = [f for f in self.features if f not in KNOWN_LINK_FEATURES]
        return (*own, "fda_id", "pat_id") if len(own) < len(self.features) else tuple(own)

    def columns_of(self, features: pl.DataFrame) -> pl.DataFrame:
        """The columns of `features` that `predict` reads: `input_columns`, and the pair's years
        after its device's latest FDA decision when the dormancy rule is on and the frame has them."""
        rule = self.dormant_device_years is not None and GRANTED_AFTER_LAST_DECISION in features.columns
        return features.select(*self.input_columns, *([GRANTED_AFTER_LAST_DECISION] if rule else []))

    @cached_property
    def _boosters(self) -> tuple[xgb.Booster, ...]:
        """Parsed once per model: the benchmark's ranking predicts device by device."""
        boosters = []
        for text in (self.booster_json, *self.bagged_json):
            booster = xgb.Booster()
            booster.load_model(bytearray(text, "utf-8"))
            boosters.append(booster)
        return tuple(boosters)

    def predict(self, features: pl.DataFrame, vectors: Vectors | None = None) -> np.ndarray:
        """Probabilities; `vectors` holds the devices' embeddings when the model compares devices."""
        if features.height == 0:
            return np.zeros(0, np.float32)
        if set(KNOWN_LINK_FEATURES) & set(self.features):
            features = self.known.features(features, vectors)
        x = matrix(features, self.features)
        out = np.zeros(features.height, np.float64)
        for booster in self._boosters:
            booster.set_param({"nthread": _threads(features.height)})
            out += booster.inplace_predict(x)
        out /= len(self._boosters)
        if self.dormant_device_years is not None and GRANTED_AFTER_LAST_DECISION in features.columns:
            gap = features[GRANTED_AFTER_LAST_DECISION].cast(pl.Float32).fill_null(np.nan).to_numpy()
            out[dormant(gap, self.dormant_device_years)] *= DORMANT_FACTOR
        return out.astype(np.float32)

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return json.dumps(data | {"known": self.known.to_dict()})

    @staticmethod
    def from_json(text: str) -> RerankerModel:
        data = json.loads(text)
        data["features"] = tuple(data.get("features", FEATURES))
        data["bagged_json"] = tuple(data.get("bagged_json", ()))
        data["known"] = KnownLinks.from_dict(data.get("known"))
        return RerankerModel(**data)


def _threads(rows: int) -> int:
    """One thread for small training sets: OpenMP spin-waiting costs more than it saves there."""
    return 1 if rows < 50_000 else 2


def xgb_classifier(cfg: RerankConfig, y: np.ndarray, n_jobs: int,
                   monotone: tuple[int, ...] | None = None) -> xgb.XGBClassifier:
    """Stage 3's XGBoost with `cfg`'s hyper-parameters, its base score the labels' prevalence."""
    extra = {"monotone_constraints": "(" + ",".join(map(str, monotone)) + ")"} if monotone else {}
    return xgb.XGBClassifier(
        n_estimators=cfg.n_estimators, max_depth=cfg.max_depth, learning_rate=cfg.learning_rate,
        subsample=cfg.subsample, colsample_bytree=cfg.colsample_bytree, random_state=cfg.seed,
        eval_metric="logloss", tree_method="hist", n_jobs=n_jobs,
        base_score=float(np.clip(y.mean(), 0.01, 0.99)) if len(y) else 0.5, **extra)


def monotone_constraints(names: tuple[str, ...]) -> tuple[int, ...]:
    """XGBoost's constraint per feature: 1 (non-decreasing) for MONOTONE_INCREASING, else 0."""
    return tuple(int(name in MONOTONE_INCREASING) for name in names)


def _fit(train: pl.DataFrame, cfg: RerankConfig) -> xgb.XGBClassifier:
    y = train["label"].to_numpy()
    names = feature_names(cfg)
    monotone = monotone_constraints(names) if cfg.monotone_similarity else None
    model = xgb_classifier(cfg, y, _threads(train.height), monotone)
    model.fit(matrix(train, names), y)
    return model


def bag(cfg: RerankConfig) -> list[RerankConfig]:
    """One configuration per member of the bag: each draws its own negative sample and trees."""
    return [cfg.model_copy(update={"seed": cfg.seed + 1000 * i}) for i in range(cfg.bagging)]


def _uses_known_links(cfg: RerankConfig) -> bool:
    return bool(set(KNOWN_LINK_FEATURES) & set(feature_names(cfg)))


def _knowing(labeled: pl.DataFrame, cfg: RerankConfig, vectors: Vectors | None) -> KnownLinks:
    """What a model trained on `labeled` knows (nothing when its features do not use it)."""
    return KnownLinks.of(labeled, vectors) if _uses_known_links(cfg) else KnownLinks()


def _with_known(frame: pl.DataFrame, cfg: RerankConfig, known: KnownLinks, vectors: Vectors | None) -> pl.DataFrame:
    return known.features(frame, vectors) if _uses_known_links(cfg) else frame


def _bagged_proba(labeled: pl.DataFrame, cfg: RerankConfig, test: pl.DataFrame,
                  vectors: Vectors | None) -> np.ndarray | None:
    """Mean probability for `test` over the bag's members trained on `labeled`, both knowing the
    links of `labeled` only; None if a sample lacks a class."""
    known = _knowing(labeled, cfg, vectors)
    labeled, test = _with_known(labeled, cfg, known, vectors), _with_known(test, cfg, known, vectors)
    x = matrix(test, feature_names(cfg))
    out = np.zeros(len(x), np.float64)
    for member in bag(cfg):
        train = training_sample(labeled, member)
        if train["label"].n_unique() < 2:
            return None
        out += _fit(train, member).predict_proba(x)[:, 1]
    return out / cfg.bagging


def device_folds(n_splits: int, fold_seed: int | None) -> GroupKFold:
    """Device-grouped folds; `fold_seed` (RerankConfig) shuffles which devices share a fold."""
    return GroupKFold(n_splits=n_splits, shuffle=fold_seed is not None, random_state=fold_seed)


def oof_probabilities(labeled: pl.DataFrame, cfg: RerankConfig, folds: int,
                      vectors: Vectors | None = None) -> np.ndarray:
    """Out-of-fold probabilities for labelled pool pairs, folds grouped by device."""
    prob = np.full(labeled.height, np.nan, np.float32)
    groups = labeled["fda_id"].to_numpy()
    n_splits = min(folds, len(np.unique(groups)))
    if n_splits < 2:
        return prob
    for train_idx, test_idx in device_folds(n_splits, cfg.fold_seed).split(np.zeros(len(groups)), groups=groups):
        scores = _bagged_proba(labeled[train_idx], cfg, labeled[test_idx], vectors)
        if scores is not None:
            prob[test_idx] = scores
    return prob


def recall_threshold(prob: np.ndarray, labels: np.ndarray, target_recall: float) -> float:
    """The highest cut-off that keeps at least `target_recall` of the positives."""
    pos = np.sort(prob[(labels == 1) & ~np.isnan(prob)])[::-1]
    if len(pos) == 0:
        return 0.5
    k = int(np.ceil(target_recall * len(pos))) - 1
    return float(pos[min(max(k, 0), len(pos) - 1)])


def train_reranker(labeled: pl.DataFrame, cfg: RerankConfig, inner_folds: int | None = None,
                   vectors: Vectors | None = None) -> RerankerModel:
    """Fit on every labelled pair; the cut-off comes from out-of-fold scores of those devices.

    `vectors` (device embeddings) lets the model compare devices for KNOWN_LINK_FEATURES."""
    if cfg.decision_threshold is not None:
        threshold = cfg.decision_threshold
    else:
        oof = oof_probabilities(labeled, cfg, inner_folds or cfg.folds, vectors)
        in_pool = labeled["in_pool"].to_numpy() if "in_pool" in labeled.columns else np.ones(len(oof), bool)
        threshold = recall_threshold(oof[in_pool], labeled["label"].to_numpy()[in_pool], cfg.target_recall)
    known = _knowing(labeled, cfg, vectors)
    labeled = _with_known(labeled, cfg, known, vectors)
    samples = [(training_sample(labeled, member), member) for member in bag(cfg)]
    boosters = [_fit(train, member).get_booster().save_raw("json").decode("utf-8") for train, member in samples]
    train = samples[0][0]
    return RerankerModel(
        booster_json=boosters[0], threshold=threshold,
        n_train_pairs=train.height, n_train_devices=train["fda_id"].n_unique(),
        has_ai_score=bool(labeled["ai_score"].is_not_null().any()), features=feature_names(cfg),
        bagged_json=tuple(boosters[1:]), known=known, dormant_device_years=cfg.dormant_device_years,
    )
