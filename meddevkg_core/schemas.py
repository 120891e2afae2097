"""Declared polars schemas: the data contracts every stage reads and writes.

One place for them so that sources, stages, the Dagster layer and the CLI agree on names and
types (the BEIR idea of small, stable contracts, as typed tables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

DEVICES = pl.Schema(
    {
        "fda_id": pl.String,
        "applicant": pl.String,
        "trade_name": pl.String,
        "generic_name": pl.String,
        "product_code": pl.String,
        "decision_date": pl.Date,
        "text": pl.String,
    }
)
"""A PMA device (an original approval). `text` is what the models read."""

SUPPLEMENTS = pl.Schema(
    {
        "fda_id": pl.String,
        "supplement_number": pl.String,
        "decision_date": pl.Date,
        "trade_name": pl.String,
        "statement": pl.String,
    }
)
"""A PMA supplement of a device: a later approved change, in the words of its approval order (dossier)."""

# Typed where dtype classes and instances (pl.List(...)) mix, which mypy would infer as dict[str, object].
_PATENT_COLUMNS: dict[str, PolarsDataType] = {
    "pat_id": pl.String,
    "title": pl.String,
    "text": pl.String,
    "assignee": pl.String,
    "grant_date": pl.Date,
    "filing_date": pl.Date,
    "cpc_codes": pl.List(pl.String),
}
PATENTS = pl.Schema(_PATENT_COLUMNS)
"""A granted patent. `text` is title + abstract; `assignee` may hold several names joined by '; '."""

GOLD_LINKS = pl.Schema({"fda_id": pl.String, "pat_id": pl.String})

LABELED_PAIRS = pl.Schema({"fda_id": pl.String, "pat_id": pl.String, "label": pl.Int8})

REJECTED_RECORDS = pl.Schema(
    {
        "source": pl.String,
        "record_key": pl.String,
        "reason": pl.String,
        "record": pl.String,
    }
)
"""Quarantine: every input row that failed validation, with the reason; nothing is dropped silently."""

TEXT_REPAIRS = pl.Schema(
    {
        "fda_id": pl.String,
        "restored_words": pl.Int32,
        "words": pl.String,
    }
)
"""Device texts whose lost "the"s were put back on reading (text_repair): the words restored."""

CONCEPTS = pl.Schema(
    {
        "concept_id": pl.String,
        "preferred_name": pl.String,
        "tui": pl.String,
        "category": pl.String,
        "weight": pl.Float64,
        "is_anchor": pl.Boolean,
        "source": pl.String,
    }
)

CONCEPT_TERMS = pl.Schema({"term": pl.String, "term_norm": pl.String, "concept_id": pl.String})

CONCEPT_PARENTS = pl.Schema({"concept_id": pl.String, "parent_id": pl.String})

MENTIONS = pl.Schema(
    {
        "doc_id": pl.String,
        "mention": pl.String,
        "start": pl.Int32,
        "end": pl.Int32,
        "entity_type": pl.String,
        "norm": pl.String,
        "concept_id": pl.String,
        "map_tier": pl.String,
        "grounding": pl.String,
    }
)
"""A grounded entity mention in a device or patent text.

`entity_type` is COMPONENT or MECHANISM; `norm` the normalised surface string (Tier-S key);
`concept_id` the ontology concept or null; `map_tier` exact / head_noun / none;
`grounding` exact / case_insensitive / fuzzy (Quote-then-Verify outcome).
"""

_EMBEDDING_COLUMNS: dict[str, PolarsDataType] = {"doc_id": pl.String, "content_hash": pl.String,
                                                 "embedding": pl.List(pl.Float32)}
EMBEDDINGS = pl.Schema(_EMBEDDING_COLUMNS)

COMPANY_DICTIONARY = pl.Schema(
    {
        "raw_name": pl.String,
        "normalized_name": pl.String,
        "company_id": pl.String,
        "method": pl.String,
        "score": pl.Float64,
    }
)

ACQUISITIONS = pl.Schema(
    {
        "acquirer": pl.String,
        "acquired": pl.String,
        "close_date": pl.Date,
        "source": pl.String,
    }
)

ALLIANCES = pl.Schema(
    {"company_a": pl.String, "company_b": pl.String, "start_date": pl.Date, "end_date": pl.Date, "source": pl.String}
)
"""A dated development and licence agreement between two companies (data/companies/alliances.csv)."""

CANDIDATES = pl.Schema(
    {
        "fda_id": pl.String,
        "pat_id": pl.String,
        "sim": pl.Float32,
        "score_company": pl.Int16,
        "score_vector": pl.Int16,
        "score_entity": pl.Float32,
        "score_total": pl.Float32,
        "entity_tier": pl.String,
        "entity_detail": pl.String,
        "entity_matches": pl.Int16,
        "tier_s_match": pl.Boolean,
        "company_via_deal": pl.Boolean,
        "sim_z_device": pl.Float32,
        "sim_z_patent": pl.Float32,
        "lexical": pl.Float32,
        "dossier_lexical": pl.Float32,
        "sibling_sim_margin": pl.Float32,
        "sibling_lexical_margin": pl.Float32,
        "company_device_count": pl.Int16,
        "granted_after_last_decision": pl.Float32,
        "shared_terms": pl.String,
        "company_path": pl.String,
        "admitted_by": pl.String,
    }
)
"""A Stage-2 candidate pair with every score component as a typed column (METHOD.md §3.5)."""

CROSS_ENCODER_SCORES = pl.Schema({"fda_id": pl.String, "pat_id": pl.String, "ai_score": pl.Float32})

TRAINING_PAIRS = pl.Schema(
    {
        "fda_id": pl.String,
        "pat_id": pl.String,
        "in_pool": pl.Boolean,
        "admitted_by": pl.String,
        "sim": pl.Float32,
        "score_company": pl.Int16,
        "score_vector": pl.Int16,
        "score_entity": pl.Float32,
        "score_total": pl.Float32,
        "ai_score": pl.Float32,
        "has_tiers": pl.Int8,
        "has_rescue": pl.Int8,
        "is_same_company": pl.Int8,
        "sim_raw": pl.Float32,
        "sim_z_device": pl.Float32,
        "sim_z_patent": pl.Float32,
        "lexical": pl.Float32,
        "dossier_lexical": pl.Float32,
        "sibling_sim_margin": pl.Float32,
        "sibling_lexical_margin": pl.Float32,
        "company_device_count": pl.Int16,
        "entity_matches": pl.Int16,
        "company_via_deal": pl.Boolean,
    }
)
"""Reranker feature rows of gold devices: the pool plus, when configured, an out-of-pool sample."""

LINKS = pl.Schema(
    {
        "fda_id": pl.String,
        "pat_id": pl.String,
        "probability": pl.Float32,
        "decision": pl.Boolean,
        "immune": pl.Boolean,
        "verdict": pl.String,
        "out_of_fold": pl.Boolean,
        "evidence": pl.String,
        "rank": pl.Int32,
        "text_sim": pl.Float32,
    }
)
"""A scored candidate after Stage 3; `decision` marks membership of the final link set, `rank` the
pair's place among its device's pairs (1 = first; company_contest, text_adapter), `text_sim` the learned text
similarity that placed it (null below the device's top pairs)."""


_RERANKER_MODEL_COLUMNS: dict[str, PolarsDataType] = {
    "model": pl.String,
    "held_out_devices": pl.List(pl.String),
    "model_json": pl.String,
    "text_adapter": pl.Binary,
}
RERANKER_MODELS = pl.Schema(_RERANKER_MODEL_COLUMNS)
"""The stored reranker (fold_models.FoldModels): the full model and one per fold, each with its text adapter."""


def fingerprint() -> str:
    """A short hash of every declared schema: stores written under another one must be rebuilt."""
    import hashlib

    declared = sorted((name, str(value)) for name, value in globals().items() if isinstance(value, pl.Schema))
    return hashlib.sha256(repr(declared).encode()).hexdigest()[:12]


def empty(schema: pl.Schema) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def conform(df: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """Select and cast `df` to exactly `schema` (missing columns become nulls)."""
    cols = [
        (pl.col(name).cast(dtype) if name in df.columns else pl.lit(None, dtype=dtype)).alias(name)
        for name, dtype in schema.items()
    ]
    return df.select(cols)
