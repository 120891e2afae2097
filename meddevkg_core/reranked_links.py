"""Stage 3's last steps: a scored pool's link decisions and each device's ranks.

`decide` keeps a pair over its model's cut-off or by an immunity rule; `with_ranks` orders each
device's pairs (the text adapter's order, else the company contest's, else by probability);
`rank_pool` chains Stage 3 over a pool, as the reranked_links asset runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from meddevkg_core import schemas
from meddevkg_core.company_contest import catalogue_lines, contest_ranks
from meddevkg_core.config import Admission, RerankConfig
from meddevkg_core.fold_models import FoldModels, apply_fold_models, chunked_like, is_sorted_by_pair
from meddevkg_core.links_table import links_frame
from meddevkg_core.rerank import feature_frame
from meddevkg_core.text_adapter import Vectors, device_ranks, ranked_patents


def with_ranks(scored: pl.DataFrame, models: FoldModels, vectors: Vectors | None,
               cfg: RerankConfig, rivals: pl.DataFrame | None = None) -> pl.DataFrame:
    """`scored` (sorted by pair, as apply_fold_models returns it) with each pair's `rank` within its
    device and its `text_sim` (text_adapter.device_ranks; null where there is none).

    The rank is the text adapter's order when it is enabled, else the company contest's
    (company_contest) when that is; its rivals are the company-matched rows of `rivals` (feature
    rows of the pool, each device's whole pool; default `scored` itself), scored with `vectors`."""
    ordered = scored if is_sorted_by_pair(scored) else scored.sort("fda_id", "pat_id")
    rank, text_sim = device_ranks(ordered, models.adapter_for, vectors, cfg.text_adapter)
    if uses_contest(cfg):  # the text adapter is off: `rank` is the probability order
        contest = cfg.company_contest
        rank = contest_ranks(ordered, rank, ordered if rivals is None else rivals, lambda d: models.model_for(d)[0],
                             vectors, catalogue_lines(vectors, contest), contest)
    columns = [pl.Series("rank", rank, pl.Int32), pl.Series("text_sim", text_sim, pl.Float32).fill_nan(None)]
    return ordered.with_columns(chunked_like(ordered, columns))


def uses_contest(cfg: RerankConfig) -> bool:
    """Whether a device's top pairs are in the company contest's order (the text adapter goes first)."""
    return cfg.company_contest.enabled and not cfg.text_adapter.enabled


@dataclass(frozen=True)
class RivalPool:
    """What the company contest reads of the devices outside a pool (company_contest): their pool
    rows (CANDIDATES; every row of each device, which its pool features read), cross-encoder scores
    and device embeddings."""

    candidates: pl.DataFrame
    ce_scores: pl.DataFrame | None
    device_embeddings: pl.DataFrame


def rank_pool(candidates: pl.DataFrame, ce_scores: pl.DataFrame | None, models: FoldModels,
              device_embeddings: pl.DataFrame, patent_embeddings_of: Callable[[pl.Series], pl.DataFrame],
              cfg: RerankConfig, device_texts: pl.DataFrame | None = None,
              rival_pool: RivalPool | None = None) -> pl.DataFrame:
    """Stage 3 over a pool (probabilities, decisions, ranks) as LINKS, reading patent vectors for
    the text adapters' top pairs only: `patent_embeddings_of(pat_ids)` returns their EMBEDDINGS rows.

    The same rows as `with_ranks` over every patent's vector: the probabilities need the devices'
    vectors and label texts (fda_id, text) alone (known links), and the ranks read the vectors of
    `ranked_patents`. With `rival_pool` (the other devices' rows) and the catalogue's label texts,
    the company contest ranks the pool's devices as it would with the whole pool at once."""
    no_patents = schemas.empty(schemas.EMBEDDINGS)
    features = feature_frame(candidates, ce_scores)
    rivals = None
    if rival_pool is not None:
        device_embeddings = pl.concat([device_embeddings, rival_pool.device_embeddings],
                                      how="vertical_relaxed").unique("doc_id", keep="first").sort("doc_id")
        others = rival_pool.candidates.join(candidates.select("fda_id").unique(), on="fda_id", how="anti")
        if others.height:
            rivals = pl.concat([features, feature_frame(others, rival_pool.ce_scores)], how="diagonal_relaxed")
    devices = Vectors.of(device_embeddings, no_patents, device_texts)
    scored = decide(apply_fold_models(features, models, devices), cfg)
    wanted = ranked_patents(scored, cfg.text_adapter)
    vectors = devices.with_patents(patent_embeddings_of(wanted)) if wanted.len() else devices
    return links_frame(with_ranks(scored, models, vectors, cfg, rivals))


def decide(scored: pl.DataFrame, cfg: RerankConfig) -> pl.DataFrame:
    """Final link decisions: probability over the cut-off, or an immunity rule (METHOD.md §4.5)."""
    immune_sim = (pl.col("is_same_company") == 1) & (pl.col("sim") >= (cfg.immunity_same_company_min_cosine or 2.0))
    immune_core = pl.lit(cfg.immunity_tier_s_anchor) & (pl.col("admitted_by") == Admission.RESCUE_ANCHOR.value)
    return scored.with_columns(
        (immune_sim | immune_core).alias("immune"),
        pl.when(immune_sim).then(pl.lit("immune:same_company_high_sim"))
        .when(immune_core).then(pl.lit("immune:tier_s_anchor"))
        .when(pl.col("probability") >= pl.col("threshold")).then(pl.lit("probability"))
        .otherwise(pl.lit("below_threshold")).alias("verdict"),
    ).with_columns((pl.col("verdict") != "below_threshold").alias("decision"))
