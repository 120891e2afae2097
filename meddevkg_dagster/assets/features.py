"""Stage 1 features: grounded entity mentions and sentence embeddings, for devices and patents."""

import dagster as dg
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.embeddings import embed_documents
from meddevkg_core.llm_extraction import Domain
from meddevkg_core.patent_years import with_year_key
from meddevkg_core.pipeline import documents
from meddevkg_dagster.assets.sources import ontology_from_table
from meddevkg_dagster.lib import log_progress, stopwatch, stored_table, table_metadata
from meddevkg_dagster.partitions import DEVICE_PARTITIONED, YEAR_PARTITIONED
from meddevkg_dagster.resources import DUCKDB_POOL, GPU_TAG, EmbeddingModelResource, EntityExtractorResource

ENTITY_KINDS = {"spacy", "llm", "duckdb"}
"""Both extractors: kinds are fixed as the definitions are built, and the entity_extractor resource chooses
between them per run (MEDDEVKG_ENTITY_EXTRACTOR); each materialisation's `extractor` metadata says which ran."""


def _by_device(schema: pl.Schema) -> dict[str, object]:
    return stored_table(schema, partition_expr="doc_id")


def _by_patent_year(schema: pl.Schema) -> dict[str, object]:
    return stored_table(pl.Schema({**schema, "patent_year": pl.String()}), partition_expr="patent_year")


def _mentions(context: dg.AssetExecutionContext, docs: pl.DataFrame, meddevonto: pl.DataFrame,
              extractor: EntityExtractorResource, domain: Domain) -> tuple[dg.Output, dg.Output]:
    """The `{domain}_entities` output, and what the extractor rejected (a span not in the text, a
    malformed reply, a document the LLM failed on) as `{domain}_entity_quarantine`."""
    quarantine = f"{domain}_entity_quarantine"
    with stopwatch() as t:
        result, figures = extractor.extract(domain, docs, ontology_from_table(meddevonto),
                                            log_progress(context, "documents"))
    m, rejected = result.mentions, result.rejected
    tiers = m.group_by("map_tier").len().sort("map_tier")  # group_by's order changes per call
    coverage = {f"coverage_{tier}": round(n / max(1, m.height), 4) for tier, n in tiers.iter_rows()}
    by_reason = dict(rejected.group_by(pl.col("reason").str.split(": ").list.first()).len().sort("reason").iter_rows())
    context.log.info(f"extracted {m.height} mentions from {docs.height} documents in {t['seconds']}s "
                     f"({figures['extractor']})")
    if rejected.height:
        context.log.warning(f"{rejected.height} extracted record(s) quarantined (see {quarantine}): "
                            + ", ".join(f"{n} {reason}" for reason, n in by_reason.items()))
    by_reason_md = dg.MetadataValue.json(by_reason) if by_reason else None
    return (dg.Output(m, output_name=f"{domain}_entities", metadata=table_metadata(
                m, documents=docs.height, docs_per_second=round(docs.height / max(t["seconds"], 1e-9), 1),
                rejected_mentions=rejected.height, rejected_by_reason=by_reason_md, **figures, **coverage)),
            dg.Output(rejected, output_name=quarantine, metadata=table_metadata(rejected,
                                                                                 by_reason=by_reason_md)))


def _quarantine_out(what: str, metadata: dict[str, object]) -> dg.AssetOut:
    return dg.AssetOut(group_name="entities", kinds={"polars", "duckdb"}, metadata=metadata,
                       description=f"What entity extraction rejected in {what}, with the reason: spans not in the "
                                   "text, rule and schema violations, documents the LLM failed on.")


@dg.multi_asset(
    outs={"device_entities": dg.AssetOut(
              group_name="entities", kinds=ENTITY_KINDS, metadata=_by_device(schemas.MENTIONS),
              description="Grounded COMPONENT/MECHANISM mentions in device texts, mapped to MedDevOnto concepts."),
          "device_entity_quarantine": _quarantine_out(
              "device texts", stored_table(schemas.REJECTED_RECORDS, partition_expr="record_key"))},
    pool=DUCKDB_POOL, **DEVICE_PARTITIONED)
def device_entities(context: dg.AssetExecutionContext, pma_documents: pl.DataFrame, meddevonto: pl.DataFrame,
                    entity_extractor: EntityExtractorResource):
    """Device mentions by the configured extractor (MEDDEVKG_ENTITY_EXTRACTOR), and its rejects."""
    yield from _mentions(context, documents(pma_documents, "fda_id"), meddevonto, entity_extractor, "device")


@dg.multi_asset(
    outs={"patent_entities": dg.AssetOut(
              group_name="entities", kinds=ENTITY_KINDS, metadata=_by_patent_year(schemas.MENTIONS),
              description="Grounded COMPONENT/MECHANISM mentions in patent titles and abstracts, by grant year."),
          "patent_entity_quarantine": _quarantine_out(
              "patent texts", _by_patent_year(schemas.REJECTED_RECORDS))},
    pool=DUCKDB_POOL, **YEAR_PARTITIONED)
def patent_entities(context: dg.AssetExecutionContext, patents: pl.DataFrame, meddevonto: pl.DataFrame,
                    entity_extractor: EntityExtractorResource):
    """Patent mentions by the configured extractor (MEDDEVKG_ENTITY_EXTRACTOR), and its rejects, by grant year."""
    mentions, rejected = _mentions(context, documents(patents, "pat_id"), meddevonto, entity_extractor, "patent")
    yield _by_year(mentions, patents)
    yield _by_year(rejected, patents, "record_key")


def _embeddings(context: dg.AssetExecutionContext, docs: pl.DataFrame,
                model: EmbeddingModelResource) -> dg.Output[pl.DataFrame]:
    encoder = model.encoder()
    with stopwatch() as t:
        out = embed_documents(docs, encoder, model.cache(), progress=log_progress(context, "texts"))
    context.log.info(f"embedded {out.height} documents with {encoder.model_id} in {t['seconds']}s")
    return dg.Output(out, metadata=table_metadata(
        out, model=encoder.model_id, dimension=encoder.dimension, device=model.device, seconds=t["seconds"]))


@dg.asset(group_name="embeddings", pool=DUCKDB_POOL, op_tags=GPU_TAG, kinds={"pytorch", "duckdb"},
          metadata=_by_device(schemas.EMBEDDINGS), **DEVICE_PARTITIONED)
def device_embeddings(context: dg.AssetExecutionContext, pma_documents: pl.DataFrame,
                      embedding_model: EmbeddingModelResource) -> dg.Output[pl.DataFrame]:
    """Unit-normalised sentence embeddings of device texts (GPU when the resource says so)."""
    return _embeddings(context, documents(pma_documents, "fda_id"), embedding_model)


@dg.asset(group_name="embeddings", pool=DUCKDB_POOL, op_tags=GPU_TAG, kinds={"pytorch", "duckdb"},
          metadata=_by_patent_year(schemas.EMBEDDINGS), **YEAR_PARTITIONED)
def patent_embeddings(context: dg.AssetExecutionContext, patents: pl.DataFrame,
                      embedding_model: EmbeddingModelResource) -> dg.Output[pl.DataFrame]:
    """Unit-normalised sentence embeddings of patent texts by grant year, cached by content hash across runs."""
    return _by_year(_embeddings(context, documents(patents, "pat_id"), embedding_model), patents)


def _by_year(output: dg.Output[pl.DataFrame], patents: pl.DataFrame,
             id_col: str = "doc_id") -> dg.Output[pl.DataFrame]:
    """The rows with their patent's year key: the column the year partitions are stored by."""
    return dg.Output(with_year_key(output.value, patents, id_col), output_name=output.output_name,
                     metadata=output.metadata)
