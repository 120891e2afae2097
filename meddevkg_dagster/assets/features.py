"""Stage 1 features: grounded entity mentions and sentence embeddings, for devices and patents."""

import dagster as dg
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.embeddings import embed_documents
from meddevkg_core.entities import extract_mentions, load_spacy_pipeline
from meddevkg_core.patent_years import with_year_key
from meddevkg_core.pipeline import documents
from meddevkg_dagster.assets.sources import ontology_from_table
from meddevkg_dagster.lib import log_progress, stopwatch, stored_table, table_metadata
from meddevkg_dagster.partitions import DEVICE_PARTITIONED, YEAR_PARTITIONED
from meddevkg_dagster.resources import DUCKDB_POOL, GPU_TAG, EmbeddingModelResource


def _by_device(schema: pl.Schema) -> dict[str, object]:
    return stored_table(schema, partition_expr="doc_id")


def _by_patent_year(schema: pl.Schema) -> dict[str, object]:
    return stored_table(pl.Schema({**schema, "patent_year": pl.String()}), partition_expr="patent_year")


def _mentions(context: dg.AssetExecutionContext, docs: pl.DataFrame,
              meddevonto: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    with stopwatch() as t:
        result = extract_mentions(docs, ontology_from_table(meddevonto), load_spacy_pipeline(),
                                  progress=log_progress(context, "documents"))
    m = result.mentions
    tiers = m.group_by("map_tier").len().sort("map_tier")  # group_by's order changes per call
    coverage = {f"coverage_{tier}": round(n / max(1, m.height), 4) for tier, n in tiers.iter_rows()}
    context.log.info(f"extracted {m.height} mentions from {docs.height} documents in {t['seconds']}s")
    return dg.Output(m, metadata=table_metadata(
        m, documents=docs.height, docs_per_second=round(docs.height / max(t["seconds"], 1e-9), 1),
        rejected_mentions=result.rejected.height, **coverage))


@dg.asset(group_name="entities", pool=DUCKDB_POOL, kinds={"spacy", "duckdb"},
          metadata=_by_device(schemas.MENTIONS), **DEVICE_PARTITIONED)
def device_entities(context: dg.AssetExecutionContext, pma_documents: pl.DataFrame,
                    meddevonto: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """Grounded COMPONENT/MECHANISM mentions in device texts, mapped to MedDevOnto concepts."""
    return _mentions(context, documents(pma_documents, "fda_id"), meddevonto)


@dg.asset(group_name="entities", pool=DUCKDB_POOL, kinds={"spacy", "duckdb"},
          metadata=_by_patent_year(schemas.MENTIONS), **YEAR_PARTITIONED)
def patent_entities(context: dg.AssetExecutionContext, patents: pl.DataFrame,
                    meddevonto: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """Grounded COMPONENT/MECHANISM mentions in patent titles and abstracts, by grant year."""
    return _by_year(_mentions(context, documents(patents, "pat_id"), meddevonto), patents)


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


def _by_year(output: dg.Output[pl.DataFrame], patents: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """The rows with their patent's year key: the column the year partitions are stored by."""
    return dg.Output(with_year_key(output.value, patents, "doc_id"), metadata=output.metadata)
