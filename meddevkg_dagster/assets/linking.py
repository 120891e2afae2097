"""Stages 2 and 3: company resolution, the candidate pool, cross-encoder, reranker and links."""

import dagster as dg
import polars as pl
from dagster_duckdb import DuckDBResource

from meddevkg_core import schemas
from meddevkg_core.block_scores import Stage2Inputs
from meddevkg_core.candidates import collect_candidates
from meddevkg_core.companies import build_company_dictionary
from meddevkg_core.company_resolver import CompanyResolver
from meddevkg_core.config import PipelineConfig
from meddevkg_core.cross_encoder import score_candidate_pairs
from meddevkg_core.fold_models import FoldModels, RerankerTrainingError, fit_fold_models
from meddevkg_core.pipeline import market_company_matches, stage2_inputs
from meddevkg_core.reranked_links import RivalPool, rank_pool, uses_contest
from meddevkg_core.text_adapter import Vectors
from meddevkg_core.training_pairs import training_pairs as build_training_pairs
from meddevkg_dagster.assets.sources import ontology_from_table
from meddevkg_dagster.lib import log_progress, partition_keys, stopwatch, stored_table, table_metadata
from meddevkg_dagster.partitions import DEVICE_PARTITIONED, EVERY_PARTITION, every_partition
from meddevkg_dagster.resources import (
    DUCKDB_POOL,
    GPU_TAG,
    WAREHOUSE_SCHEMA,
    CorpusResource,
    CrossEncoderResource,
    PipelineConfigResource,
    SourcesResource,
)

POOL_KEYS = dg.AssetIn(metadata={"columns": ["fda_id", "pat_id"]})
"""The pool's pair keys only: the cross-encoder reads the texts from the device and patent tables."""


def _by_device(schema: pl.Schema) -> dict[str, object]:
    return stored_table(schema, partition_expr="fda_id")


@dg.asset(group_name="companies", pool=DUCKDB_POOL, kinds={"polars", "duckdb"}, ins=every_partition("patents"))
def company_dictionary(pma_documents: pl.DataFrame, patents: pl.DataFrame,
                       corpus: CorpusResource) -> dg.Output[pl.DataFrame]:
    """Every raw applicant/assignee name -> canonical company id, with how it was resolved."""
    names = pl.concat([pma_documents["applicant"], patents["assignee"].str.split("; ").explode()]).drop_nulls()
    out = build_company_dictionary(names.unique().sort().to_list(), corpus.resolver())
    by_method = dict(out.group_by("method").len().sort("method").iter_rows())
    return dg.Output(out, metadata=table_metadata(out, companies=out["company_id"].n_unique(),
                                                  **{f"method_{k}": v for k, v in by_method.items()}))


def stage2_inputs_of(corpus: CorpusResource, sources: SourcesResource, config: PipelineConfig,
                     pma_documents: pl.DataFrame, pma_supplements: pl.DataFrame, patents: pl.DataFrame,
                     device_embeddings: pl.DataFrame, patent_embeddings: pl.DataFrame,
                     device_entities: pl.DataFrame, patent_entities: pl.DataFrame,
                     meddevonto: pl.DataFrame, resolver: CompanyResolver | None = None) -> Stage2Inputs:
    """The candidate pool's inputs, with the devices' supplements where FDA records are read; `resolver`
    is the corpus's (`corpus.resolver()`) when the caller already holds it."""
    # Patent-side tables arrive year by year from the store: a fixed order keeps the run reproducible.
    patents, patent_embeddings = patents.sort("pat_id"), patent_embeddings.sort("doc_id")
    supplements = dossier_supplements(corpus, sources, pma_supplements)
    matches = market_company_matches(pma_documents, supplements, patents, resolver or corpus.resolver())
    return stage2_inputs(device_embeddings, patent_embeddings, device_entities, patent_entities, matches,
                         ontology_from_table(meddevonto), config, pma_documents, patents, supplements)


def dossier_supplements(corpus: CorpusResource, sources: SourcesResource,
                        pma_supplements: pl.DataFrame) -> pl.DataFrame | None:
    """The supplements that make the devices' dossiers; None when no FDA records are read (corpus
    devices without MEDDEVKG_FDA_PMA), so the dossier score is missing, as in `meddevkg run`
    without --fda-pma, rather than computed from the device texts alone."""
    return pma_supplements if sources.device_source == "openfda" or corpus.fda_pma_path else None


@dg.asset(group_name="candidates", pool=DUCKDB_POOL, kinds={"numpy", "duckdb"}, deps=["company_dictionary"],
          ins=every_partition("patents", "patent_embeddings", "patent_entities",  # and every device (siblings)
                              "pma_documents", "pma_supplements", "device_embeddings", "device_entities"),
          metadata=_by_device(schemas.CANDIDATES), **DEVICE_PARTITIONED)
def candidate_pool(context: dg.AssetExecutionContext, corpus: CorpusResource, sources: SourcesResource,
                   pipeline_config: PipelineConfigResource, pma_documents: pl.DataFrame,
                   pma_supplements: pl.DataFrame, patents: pl.DataFrame,
                   device_embeddings: pl.DataFrame, patent_embeddings: pl.DataFrame,
                   device_entities: pl.DataFrame, patent_entities: pl.DataFrame,
                   meddevonto: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """Stage 2: every device x patent pair scored (company, vector, entity, words); admitted pairs kept.

    The device inputs are the whole stored catalogue and the run's devices are scored against it:
    a device's sibling features (siblings) compare it with its company's other devices, whichever
    of them this run materialises."""
    config = pipeline_config.config()
    batch = partition_keys(context) or pma_documents["fda_id"].sort().to_list()
    with stopwatch() as t:
        inputs = stage2_inputs_of(corpus, sources, config, pma_documents, pma_supplements, patents,
                                  device_embeddings, patent_embeddings, device_entities, patent_entities, meddevonto)
        parts = collect_candidates(inputs, config.candidates, batch, progress=log_progress(context, "devices"))
        del inputs  # vectors and entity index go before the pool is assembled (see collect_candidates)
        pool = parts.to_frame()
    pairs = len(batch) * patents.height
    admitted = dict(pool.group_by("admitted_by").len().sort("admitted_by").iter_rows())
    context.log.info(f"scored {pairs} pairs in {t['seconds']}s; kept {pool.height}")
    return dg.Output(pool, metadata=table_metadata(
        pool, pairs_scored=pairs, share_kept=round(pool.height / max(1, pairs), 5), seconds=t["seconds"],
        **{f"admitted_{k}": v for k, v in admitted.items()}))


@dg.asset(group_name="rerank", pool=DUCKDB_POOL, op_tags=GPU_TAG, kinds={"pytorch", "duckdb"},
          ins={"candidate_pool": POOL_KEYS}, deps=[dg.AssetDep("patents", partition_mapping=EVERY_PARTITION)],
          metadata=_by_device(schemas.CROSS_ENCODER_SCORES), **DEVICE_PARTITIONED)
def cross_encoder_scores(context: dg.AssetExecutionContext, cross_encoder: CrossEncoderResource,
                         warehouse: DuckDBResource, candidate_pool: pl.DataFrame,
                         pma_documents: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """Cross-encoder relevance per candidate pair; no rows when none is configured (reranked_links then
    reads ai_score as a missing feature).

    The patents are a dependency, not a loaded input: with a scorer only the texts of the pool's
    patents are read, and without one nothing is (the whole corpus's text at full scale)."""
    scorer = cross_encoder.scorer()
    cfg = cross_encoder.config()
    with stopwatch() as t:
        patents = (_stored_rows(warehouse, "patents", "pat_id", ["pat_id", "text"], candidate_pool["pat_id"].unique())
                   if scorer is not None else pl.DataFrame(schema={"pat_id": pl.String, "text": pl.String}))
        out = score_candidate_pairs(candidate_pool, pma_documents, patents, scorer, cfg.max_chars, cfg.batch_size)
    status = scorer.model_id if scorer else "none configured: ai_score is missing and XGBoost treats it as such"
    if scorer is None:
        context.log.warning("no cross-encoder configured (MEDDEVKG_CROSS_ENCODER): ai_score left missing")
    return dg.Output(out, metadata=table_metadata(out, cross_encoder=status, pool_pairs=candidate_pool.height,
                                                  seconds=t["seconds"]))


def _stored_rows(warehouse: DuckDBResource, table: str, key: str, columns: list[str],
                 ids: pl.Series) -> pl.DataFrame:
    """`columns` of the stored `table`'s rows whose `key` is in `ids` (every partition): what a step
    that keeps a patent table as a dependency reads instead of the whole corpus."""
    wanted = ids.to_frame("id").to_arrow()
    with warehouse.get_connection() as con:
        con.register("wanted_ids", wanted)
        return con.sql(f"select {', '.join(columns)} from {WAREHOUSE_SCHEMA}.{table} "
                       f"where {key} in (select id from wanted_ids)").pl()


@dg.asset(group_name="rerank", pool=DUCKDB_POOL, kinds={"numpy", "duckdb"},
          ins=every_partition("patents", "patent_embeddings", "patent_entities"))
def training_pairs(corpus: CorpusResource, sources: SourcesResource, pipeline_config: PipelineConfigResource,
                   pma_documents: pl.DataFrame, pma_supplements: pl.DataFrame,
                   patents: pl.DataFrame, device_embeddings: pl.DataFrame, patent_embeddings: pl.DataFrame,
                   device_entities: pl.DataFrame, patent_entities: pl.DataFrame, meddevonto: pl.DataFrame,
                   candidate_pool: pl.DataFrame, cross_encoder_scores: pl.DataFrame,
                   gold_links: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """Reranker training rows: pool pairs of gold devices plus the configured out-of-pool sample."""
    config = pipeline_config.config()
    with stopwatch() as t:
        # The Stage-2 index is rebuilt only for the out-of-pool sample; the pool itself carries the rest.
        inputs = (stage2_inputs_of(corpus, sources, config, pma_documents, pma_supplements, patents,
                                   device_embeddings, patent_embeddings, device_entities, patent_entities, meddevonto)
                  if config.rerank.outside_pool_negative_rate > 0 else None)
        out = build_training_pairs(inputs, candidate_pool, cross_encoder_scores, gold_links, config)
    outside = out.filter(~pl.col("in_pool"))
    return dg.Output(out, metadata=table_metadata(
        out, gold_devices=out["fda_id"].n_unique(), in_pool_rows=out.height - outside.height,
        outside_pool_rows=outside.height, outside_pool_negative_rate=config.rerank.outside_pool_negative_rate,
        seconds=t["seconds"]))


@dg.asset(group_name="rerank", pool=DUCKDB_POOL, kinds={"xgboost", "pytorch", "duckdb"},
          ins=every_partition("patent_embeddings"))
def reranker_model(context: dg.AssetExecutionContext, pipeline_config: PipelineConfigResource,
                   training_pairs: pl.DataFrame, gold_links: pl.DataFrame, device_embeddings: pl.DataFrame,
                   patent_embeddings: pl.DataFrame, pma_documents: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """The XGBoost reranker and the text adapters: a full model plus device-grouped fold models.
    The labels of every device tell which of their words name a product line (device_names)."""
    cfg = pipeline_config.config().rerank
    with stopwatch() as t:
        try:
            models = fit_fold_models(training_pairs, gold_links, cfg,
                                     Vectors.of(device_embeddings, patent_embeddings, pma_documents))
        except RerankerTrainingError as exc:  # the gold's fault, named in one line: no traceback
            raise dg.Failure(str(exc)) from None
    out = models.to_frame()
    context.log.info(f"trained {len(models.folds)} fold models and the full model in {t['seconds']}s")
    return dg.Output(out, metadata=table_metadata(
        out, threshold=round(models.full.threshold, 4), train_pairs=models.full.n_train_pairs,
        train_devices=models.full.n_train_devices, folds=len(models.folds),
        has_ai_score=models.full.has_ai_score, text_adapter=models.full_adapter is not None,
        known_links=len(models.full.known.links), known_link_devices=len(models.full.known.device_ids),
        known_link_named_devices=len(models.full.known.names),
        seconds=t["seconds"]))


@dg.asset(group_name="rerank", pool=DUCKDB_POOL, kinds={"xgboost", "duckdb"},
          deps=[dg.AssetDep("patent_embeddings", partition_mapping=EVERY_PARTITION)],
          metadata=_by_device(schemas.LINKS), **DEVICE_PARTITIONED)
def reranked_links(context: dg.AssetExecutionContext, pipeline_config: PipelineConfigResource,
                   warehouse: DuckDBResource, candidate_pool: pl.DataFrame, cross_encoder_scores: pl.DataFrame,
                   reranker_model: pl.DataFrame, device_embeddings: pl.DataFrame,
                   pma_documents: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """Final links: probability (out-of-fold for gold devices), decision, immunity, evidence and each
    pair's rank within its device.

    The patent vectors are a dependency, not a loaded input: the ranks read those of each device's
    top pairs only (at most `top_k` per device, not the corpus's)."""
    cfg = pipeline_config.config().rerank
    models = FoldModels.from_frame(reranker_model)
    contest = uses_contest(cfg)
    rivals, texts = None, pma_documents.select("fda_id", "text")
    if contest:  # the rivals' rows, and every stored label: which words are rare in the catalogue
        rivals = _rival_pool(warehouse, candidate_pool)
        texts = pl.concat([texts, _stored_table(warehouse, "pma_documents", ["fda_id", "text"])]).unique(
            "fda_id", keep="first", maintain_order=True)
    out = rank_pool(candidate_pool, cross_encoder_scores, models, device_embeddings,
                    lambda pat_ids: _stored_rows(warehouse, "patent_embeddings", "doc_id",
                                                 ["doc_id", "content_hash", "embedding"], pat_ids), cfg,
                    texts, rivals)
    kept = out.filter(pl.col("decision"))
    return dg.Output(out, metadata=table_metadata(
        out, links_kept=kept.height, immune=int(out["immune"].sum()),
        noise_reduction=round(1 - kept.height / out.height, 4) if out.height else None,
        text_adapter=models.full_adapter is not None, company_contest=contest,
        rival_pool_rows=rivals.candidates.height if rivals is not None else 0))


def _rival_pool(warehouse: DuckDBResource, candidate_pool: pl.DataFrame) -> RivalPool:
    """The stored pools of the other devices company-matched to a patent this run's devices are
    company-matched to, with their cross-encoder scores and device vectors (company_contest): a
    device partition is ranked against every stored device, not only those in its run. Whole pools,
    because a pair's pool features read every pool row of its device (pair_features)."""
    patents = candidate_pool.filter(pl.col("score_company") > 0)["pat_id"].unique()
    with warehouse.get_connection() as con:
        con.register("matched_patents", patents.to_frame("id").to_arrow())
        con.register("run_devices", candidate_pool["fda_id"].unique().to_frame("id").to_arrow())
        devices = con.sql(f"select distinct fda_id from {WAREHOUSE_SCHEMA}.candidate_pool where score_company > 0 "
                          "and pat_id in (select id from matched_patents) "
                          "and fda_id not in (select id from run_devices)").pl()["fda_id"]
    return RivalPool(_stored_rows(warehouse, "candidate_pool", "fda_id", ["*"], devices),
                     _stored_rows(warehouse, "cross_encoder_scores", "fda_id", ["fda_id", "pat_id", "ai_score"],
                                  devices),
                     _stored_rows(warehouse, "device_embeddings", "doc_id", ["doc_id", "content_hash", "embedding"],
                                  devices))


def _stored_table(warehouse: DuckDBResource, table: str, columns: list[str]) -> pl.DataFrame:
    """`columns` of every stored row of `table`."""
    with warehouse.get_connection() as con:
        return con.sql(f"select {', '.join(columns)} from {WAREHOUSE_SCHEMA}.{table}").pl()
