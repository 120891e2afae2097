"""Source assets: the corpus tables as the pipeline's entry points, with quarantine."""

import dagster as dg
import polars as pl

from meddevkg_core.ontology import Ontology, load_meddevonto
from meddevkg_dagster.lib import only_devices, partition_keys, require_known, table_metadata
from meddevkg_dagster.partitions import DEVICE_BACKFILL, pma_devices
from meddevkg_dagster.resources import DUCKDB_POOL, CorpusResource

GROUP = "sources"


@dg.asset(group_name=GROUP, partitions_def=pma_devices, backfill_policy=DEVICE_BACKFILL, pool=DUCKDB_POOL,
          metadata={"partition_expr": "fda_id"}, kinds={"polars", "duckdb"})
def pma_documents(context: dg.AssetExecutionContext, corpus: CorpusResource) -> dg.Output[pl.DataFrame]:
    """PMA device documents (applicant, names, product code, decision date, text), one row per device."""
    keys = partition_keys(context)
    devices = corpus.load().devices
    require_known(keys, devices["fda_id"], f"corpus at {corpus.path}")
    out = only_devices(devices, keys)
    return dg.Output(out, metadata=table_metadata(out, devices_in_corpus=devices.height))


@dg.asset(group_name=GROUP, pool=DUCKDB_POOL, kinds={"polars", "duckdb"})
def patents(corpus: CorpusResource) -> dg.Output[pl.DataFrame]:
    """Patents (title + abstract, assignee, dates, CPC codes) that devices are linked to."""
    out = corpus.load().patents
    return dg.Output(out, metadata=table_metadata(out, assignees=out["assignee"].n_unique()))


@dg.asset(group_name=GROUP, pool=DUCKDB_POOL, kinds={"polars", "duckdb"})
def gold_links(corpus: CorpusResource) -> dg.Output[pl.DataFrame]:
    """Expert-verified device-patent links where the corpus has them (evaluation and training)."""
    out = corpus.load().gold_links
    return dg.Output(out, metadata=table_metadata(out, gold_devices=out["fda_id"].n_unique()))


@dg.asset(group_name=GROUP, pool=DUCKDB_POOL, kinds={"polars", "duckdb"})
def rejected_records(corpus: CorpusResource) -> dg.Output[pl.DataFrame]:
    """Quarantine: every corpus row that failed validation, with the reason (nothing is dropped)."""
    out = corpus.load().rejected
    reasons = out.group_by("reason").len().sort("len", descending=True)
    return dg.Output(out, metadata=table_metadata(
        out, by_reason=dg.MetadataValue.md(_markdown(reasons)) if out.height else None))


def _markdown(df: pl.DataFrame) -> str:
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * df.width]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.iter_rows()]
    return "\n".join(lines)


@dg.asset(group_name="ontology", pool=DUCKDB_POOL, kinds={"polars", "duckdb"})
def meddevonto() -> dg.Output[pl.DataFrame]:
    """MedDevOnto concepts with synonyms, parents, semantic type, category, weight and anchor flag."""
    onto = load_meddevonto()
    out = ontology_table(onto)
    return dg.Output(out, metadata=table_metadata(
        out, anchors=int(out["is_anchor"].sum()), terms=onto.terms.height, parent_links=onto.hierarchy.height))


def ontology_table(onto: Ontology) -> pl.DataFrame:
    """One row per concept with its terms and parents as lists (a DuckDB-friendly single table)."""
    terms = onto.terms.group_by("concept_id").agg(pl.col("term").sort().alias("terms"))
    parents = onto.hierarchy.group_by("concept_id").agg(pl.col("parent_id").sort().alias("parents"))
    return (onto.concepts.join(terms, on="concept_id", how="left").join(parents, on="concept_id", how="left")
            .sort("concept_id"))


def ontology_from_table(table: pl.DataFrame) -> Ontology:
    """The inverse of `ontology_table`: downstream assets read the ontology the graph holds."""
    from meddevkg_core import schemas
    from meddevkg_core.ontology import normalize_term

    terms = table.select("concept_id", pl.col("terms")).explode("terms").drop_nulls("terms").rename({"terms": "term"})
    terms = terms.with_columns(pl.col("term").map_elements(normalize_term, return_dtype=pl.String).alias("term_norm"))
    parents = table.select("concept_id", "parents").explode("parents").drop_nulls("parents").rename(
        {"parents": "parent_id"})
    return Ontology.from_frames(schemas.conform(table, schemas.CONCEPTS), schemas.conform(terms, schemas.CONCEPT_TERMS),
                                schemas.conform(parents, schemas.CONCEPT_PARENTS))
