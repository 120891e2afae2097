"""Pipeline configuration as pydantic models: every number of METHOD.md in one typed place.

Defaults are the paper's deployed values; anything a later issue tunes is chosen on validation
devices only and then written here or passed in, never read off the test set.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field


class Admission(StrEnum):
    """Why a pair entered the Stage-2 pool (METHOD.md §3.5)."""

    THRESHOLD = "threshold"
    RESCUE_VECTOR = "rescue_vector"
    RESCUE_ANCHOR = "rescue_anchor"
    SAME_COMPANY = "same_company"


class VectorBin(BaseModel, frozen=True, extra="forbid"):
    min_cosine: float
    points: int


PAPER_VECTOR_BINS: tuple[VectorBin, ...] = (
    VectorBin(min_cosine=0.88, points=65),
    VectorBin(min_cosine=0.82, points=45),
    VectorBin(min_cosine=0.75, points=30),
    VectorBin(min_cosine=0.70, points=15),
)


class QuantileBin(BaseModel, frozen=True, extra="forbid"):
    min_quantile: float
    points: int


DEVICE_QUANTILE_BINS: tuple[QuantileBin, ...] = (
    QuantileBin(min_quantile=0.99, points=65),
    QuantileBin(min_quantile=0.97, points=45),
    QuantileBin(min_quantile=0.93, points=30),
    QuantileBin(min_quantile=0.85, points=15),
)


UNIFORM_ENTITY_POINTS = {"uniform_high": 60.0, "uniform_mid": 30.0, "uniform_low": 6.0}


class CandidateConfig(BaseModel, frozen=True, extra="forbid"):
    """Stage 2: S = S_company + S_vector + S_entity, admission and rescues."""

    company_points: int = 20
    vector_mode: Literal["device_quantile", "absolute"] = Field(
        default="device_quantile",
        description=(
            "absolute: the paper's cosine bins (made for its anisotropic mpnet vectors, random-pair "
            "cosine 0.86; on unit-normalised MiniLM no pair of the benchmark reaches 0.70). "
            "device_quantile: the same points for the top quantiles of each device's cosines."
        ),
    )
    vector_bins: tuple[VectorBin, ...] = PAPER_VECTOR_BINS
    vector_quantile_bins: tuple[QuantileBin, ...] = DEVICE_QUANTILE_BINS
    tier_s_points: float = 60.0
    tier_a_points: float = 50.0
    tier_b_points: float = 20.0
    entity_weighting: Literal["ontology", "uniform_high", "uniform_mid", "uniform_low"] = Field(
        default="ontology",
        description="ontology: tier points x category weight; uniform_*: 60/30/6 for any match "
                    "(the paper's variants).",
    )
    tier_b_parent_child: bool = Field(
        default=True,
        description="Also count a direct parent/child pair of concepts as Tier B (not only siblings).",
    )
    admission_threshold: float = 70.0
    rescue_vector_points: int | None = Field(
        default=65, description="Rescue:HighVec when S_vector reaches this (the paper's cosine >= 0.88)."
    )
    rescue_anchor: bool = Field(
        default=False,
        description="Rescue:TierS_Core: a lone Tier-S anchor match (S_entity 60) admits the pair. Off since issue 6 "
        "(the issue keeps a rescue only where the validation folds show it helps): on the benchmark it admits no "
        "gold pair that another rule does not (0 of 426, so none on the training devices of any fold) but, with "
        "the device texts repaired (text_repair), 15,104 other pairs; without it the pool holds 8.6% of all pairs "
        "instead of 10.2%, at the same recall (99.8%). The benchmark's ablation paper_anchor_rescue turns it on.",
    )
    same_company_min_score: float | None = Field(
        default=0.0,
        description=(
            "Same-company pairs reach Stage 3 when S reaches this; None disables the clause. The paper's "
            "graph stored edges from S in (20, 40] (35 here before issue 6). 0 admits every same-company "
            "pair: 95% of gold pairs share a company, and on the training devices of every benchmark fold "
            "only this setting kept >= 99% of their gold (S >= 35: 89-92%)."
        ),
    )
    device_block_size: int = 64


class TextAdapterConfig(BaseModel, frozen=True, extra="forbid"):
    """Stage 3's optional last step: each device's top pairs re-ordered by a learned text similarity
    (text_adapter).

    Off by default since the sibling features (siblings): over five reranker seeds the probability
    order alone gives R@10 0.425 and MRR 0.609, the fusion R@10 0.398 and MRR 0.619 (README)."""

    enabled: bool = Field(default=False, description="True: each device's top pairs are re-ordered by the fusion; "
                          "False: by probability only.")
    top_k: int = Field(default=30, ge=1, le=500,
                       description="Pairs per device, by probability, that the fusion re-orders (the benchmark's "
                       "rankings keep each device's top 500).")
    rrf_k: int = Field(default=60, ge=1, description="Reciprocal-rank-fusion constant (the usual 60).")
    hard_negatives: int = Field(default=30, ge=1, description="Most similar non-gold pool patents per gold pair.")
    epochs: int = Field(default=3, ge=1)
    temperature: float = Field(default=0.05, gt=0)
    learning_rate: float = Field(default=1e-3, gt=0)
    ensemble: int = Field(default=3, ge=1, description="Maps trained from different seeds; similarities averaged.")
    seed: int = 0


class CompanyContestConfig(BaseModel, frozen=True, extra="forbid"):
    """Stage 3's last step by default: each device's top pairs re-ordered by how well the device
    holds each patent against its company's other products (company_contest)."""

    enabled: bool = Field(default=True, description="False: each device's pairs in probability order. The text "
                          "adapter, when enabled, orders the same top pairs instead.")
    weight: float = Field(default=0.5, ge=0, description="Weight of the pair's log share among the company's "
                          "devices. Out of fold over 11 benchmark runs: 0.5 gave R@10 0.471 and MRR 0.687, the "
                          "weight chosen per fold on inner validation folds (0-1) 0.470 and 0.693, none 0.462 and "
                          "0.669 (README).")
    top_k: int = Field(default=30, ge=1, le=500, description="Pairs per device, by probability, that are re-ordered. "
                       "Without a limit R@100 fell on every run (to 0.948 on one).")
    product_line_max_devices: int = Field(default=5, ge=0, description="Devices sharing a label head word held by at "
                                          "most this many devices are one product line, not rivals (0: none).")


class RerankConfig(BaseModel, frozen=True, extra="forbid"):
    """Stage 3: the XGBoost classifier, its training set and the decision rule."""

    features: Literal["paper", "extended", "extended_corpus"] = Field(
        default="extended",
        description="paper: the 9 features of METHOD.md §4.2; extended: plus the cosine's z-score within the "
        "device, lexical similarity, entity match count, the acquisition flag and the grant year against the "
        "device's year, the sibling margins and more (rerank.EXTENDED_FEATURES); extended_corpus: plus the "
        "cosine's z-score within the patent, over every device of the catalogue (rerank.CORPUS_FEATURES).",
    )
    n_estimators: int = 100
    max_depth: int = 4
    learning_rate: float = 0.1
    subsample: float = 0.8
    colsample_bytree: float = 0.8
    seed: int = 42
    bagging: int = Field(
        default=6, ge=1,
        description="Classifiers per model, each on its own negative sample and trees (seeds seed, seed+1000, "
        "...); the probability is their mean. Over seeds 42/7/123 (issue 6), 3 instead of 1 kept 1.47% of pairs "
        "in the link set instead of 1.79% (recall 95.2% vs 95.3%), FPR at 90% recall 11.8% vs 12.4%, MRR 0.630 "
        "vs 0.620; 6 instead of 3 gave R@100 0.936 vs 0.927, FPR 11.6% vs 11.8% and link recall >= 95.1% on "
        "every seed (3: 94.8% on one), at about twice the training time.",
    )
    monotone_similarity: bool = Field(
        default=True,
        description="Constrain the classifier so that a pair's text similarities (rerank.MONOTONE_INCREASING) "
        "can only raise its probability. Over reranker seeds 42/7/123/1/2 (issue 6, 2026-11-25, no FDA records), "
        "against unconstrained: MRR 0.645 vs 0.616, link set 95.9% of gold at 1.51% of pairs vs 95.5% at 1.78%, "
        "macro R@10 0.582 vs 0.574, R@10 0.439 vs 0.440, R@100 0.970 vs 0.969. Constraining the Stage-2 scores "
        "as well did worse on seed 42 (R@10 0.430, MRR 0.636 against 0.439, 0.658).",
    )
    product_line_names: bool = Field(
        default=True,
        description="Compare the pair's device with the devices known to be linked to its patent by the words "
        "of their labels' heads too (known_links.known_link_name_idf: the idf of the rarest word they share, "
        "high for a trade name). False leaves the feature out.",
    )
    negatives_per_positive: int = Field(
        default=10,
        description="Pool negatives sampled per positive for training (0 = every pool negative). 10 since "
        "issue 6: over seeds 42/7/123 it kept 18% fewer pairs than 3 at 90% out-of-fold recall "
        "(share 1.83% vs 2.25%), the same at 95%.",
    )
    outside_pool_negative_rate: float = Field(
        default=0.1, ge=0.0, le=1.0,
        description="Share of out-of-pool pairs of gold devices added to training as easy negatives "
        "(out-of-pool gold is then added too), so the model ranks every pair, not only the pool.",
    )
    max_negative_share_per_device: float = 0.25
    folds: int = 5
    fold_seed: int | None = Field(
        default=None,
        description="None: scikit-learn's GroupKFold without shuffling (devices dealt to folds by size and id), "
        "the same folds for every `seed`. An int shuffles the devices with that seed first, so that runs over "
        "several fold seeds show how much the figures owe to one split of the devices (README, benchmark).",
    )
    decision_threshold: float | None = Field(
        default=None,
        description="Probability cut-off; None = chosen on out-of-fold validation devices.",
    )
    target_recall: float = Field(
        default=0.96,
        description="Recall the learned cut-off aims for on validation devices. One point above the "
        "link-set goal (95%): held-out recall scatters about a point around the target. On the benchmark, "
        "over 8 runs (reranker seeds 42/7/123, fold seeds 1-5): 0.95 fell under 95% on 1 run with MiniLM "
        "and 3 with MiniLM+mpnet; 0.96 on 1 with each, keeping 1.0%-1.8% of pairs; 0.97 kept over 2% on 5 "
        "MiniLM runs.",
    )
    dormant_device_years: int | None = Field(
        default=3,
        description="A pair whose patent was granted more than this many years after its device's latest "
        "FDA decision (approval or supplement; device_activity) has its probability multiplied by 1/1000: "
        "a device no longer changed is not marked with patents granted long after. None: off. Needs the "
        "devices' supplements (FDA records); without them no pair is affected. On the benchmark every gold "
        "patent was granted at least two years before its device's latest decision. Over reranker seeds "
        "42/7/123 and fold seed 1 (issue 6): R@10 0.482 against 0.480 and MRR 0.721 against 0.710, both "
        "higher on every run, 6%-8% fewer links at the same recall; 5 years gave the same figures, 1 year "
        "one more gold pair in a top 10 on one run. 3 leaves a margin for a device not yet changed since "
        "its approval.",
    )
    immunity_same_company_min_cosine: float | None = Field(
        default=0.92, description="Immunity 1: same company and cosine at least this."
    )
    immunity_tier_s_anchor: bool = Field(
        default=False,
        description="Immunity 2: Tier-S anchor rescue. Off since issue 6: on the training devices of every "
        "benchmark fold it kept about 2,000 pairs below the cut-off for at most one gold pair.",
    )
    text_adapter: TextAdapterConfig = TextAdapterConfig()
    company_contest: CompanyContestConfig = CompanyContestConfig()


CrossEncoderBackend = Literal["sentence-transformers", "flagembedding"]
"""How a cross-encoder is loaded (cross_encoder.BACKENDS): a configuration naming another is refused as it is read."""


class CrossEncoderConfig(BaseModel, frozen=True, extra="forbid"):
    model: str | None = Field(default=None, description="Model name or local path; None = no cross-encoder.")
    backend: CrossEncoderBackend = Field(default="sentence-transformers",
                                         description="sentence-transformers or flagembedding")
    max_chars: int = 1024
    batch_size: int = 32


class PipelineConfig(BaseModel, frozen=True, extra="forbid"):
    candidates: CandidateConfig = CandidateConfig()
    rerank: RerankConfig = RerankConfig()
    cross_encoder: CrossEncoderConfig = CrossEncoderConfig()


def parse_pipeline_config(text: str, source: str) -> PipelineConfig:
    """A PipelineConfig from JSON (empty: the defaults); an error names `source` (a file or a setting)."""
    from pydantic import ValidationError

    try:
        return PipelineConfig.model_validate_json(text) if text.strip() else PipelineConfig()
    except ValidationError as exc:
        raise ValueError(f"{source} is not a valid pipeline configuration (meddevkg_core.config.PipelineConfig):"
                         f"\n{exc}") from exc
