"""Source assets: the corpus tables as the pipeline's entry points, with quarantine."""

from collections.abc import Mapping

import dagster as dg
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.dossier import supplements_of
from meddevkg_core.lineage import InputFile, inputs_json
from meddevkg_core.ontology import Ontology
from meddevkg_core.patent_years import YEAR_KEY_SQL, grant_year_bounds, in_years, quarantine_year_keys, year_span
from meddevkg_core.terminologies import load_ontology
from meddevkg_core.text_repair import repair_counts
from meddevkg_dagster.lib import only_devices, partition_keys, require_known, stopwatch, stored_table, table_metadata
from meddevkg_dagster.partitions import DEVICE_BACKFILL, PATENT_BACKFILL, patent_years, pma_devices
from meddevkg_dagster.resources import (
    DUCKDB_POOL,
    CorpusResource,
    OpenFDAResource,
    SourcesResource,
    TerminologiesResource,
)

GROUP = "sources"
_QUARANTINE_DEVICE = pl.col("record_key").str.extract(r":([^:]*)$", 1)
"""The PMA number in a quarantined record's key ("#8:P249002"): its device partition."""


@dg.multi_asset(
    outs={
        "pma_documents": dg.AssetOut(
            group_name=GROUP, kinds={"polars", "duckdb"},
            metadata=stored_table(schemas.DEVICES, partition_expr="fda_id"),
            description="PMA device documents (applicant, names, product code, decision date, text), one row per "
                        "device."),
        "pma_quarantine": dg.AssetOut(
            group_name=GROUP, kinds={"polars", "duckdb"},
            metadata=stored_table(schemas.REJECTED_RECORDS,
                                  partition_expr="regexp_extract(record_key, ':([^:]*)$', 1)"),
            description="Source records of these devices that failed validation, with the reason."),
        "pma_supplements": dg.AssetOut(
            group_name=GROUP, kinds={"polars", "duckdb"},
            metadata=stored_table(schemas.SUPPLEMENTS, partition_expr="fda_id"),
            description="The devices' PMA supplements (later approved changes), which make their dossiers: from "
                        "openFDA with the devices, or from MEDDEVKG_FDA_PMA for corpus devices (none when unset)."),
    },
    partitions_def=pma_devices, backfill_policy=DEVICE_BACKFILL, pool=DUCKDB_POOL,
)
def pma_documents(context: dg.AssetExecutionContext, corpus: CorpusResource, sources: SourcesResource,
                  openfda: OpenFDAResource):
    """Devices from the corpus directory, or from openFDA (MEDDEVKG_DEVICE_SOURCE=openfda), with
    their supplements (openFDA returns them with the originals; for the corpus, MEDDEVKG_FDA_PMA)."""
    keys = partition_keys(context)
    source = sources.checked().device_source
    inputs = None  # the corpus files' fingerprints; openFDA is no file
    with stopwatch() as t:
        if source == "openfda":
            if not keys:
                raise dg.Failure("openFDA devices are fetched per device partition: select partitions")
            fetched = openfda.devices(keys)
            out, quarantine, counts = only_devices(fetched.devices, keys), fetched.rejected, fetched.counts
            supplements = supplements_of(fetched.supplements, keys)
            missing = sorted(set(keys) - set(out["fda_id"].to_list()))
            if missing:
                context.log.warning(f"{len(missing)} device(s) with no valid original record on openFDA: "
                                    f"{', '.join(missing[:10])} (see pma_quarantine)")
            keyed = _QUARANTINE_DEVICE.is_in(keys)
            unkeyed = quarantine.filter(~keyed)
            if unkeyed.height:  # stored by device partition: a row naming no requested device has no place here
                context.log.warning(f"{unkeyed.height} openFDA record(s) matched no requested device: "
                                    + "; ".join(unkeyed["reason"].head(5).to_list()))
            quarantine = quarantine.filter(keyed)
        else:
            loaded = corpus.load()
            devices = loaded.devices
            require_known(keys, devices["fda_id"], f"corpus at {corpus.path}")
            out = only_devices(devices, keys)
            repaired = repair_counts(loaded.text_repairs.filter(pl.col("fda_id").is_in(out["fda_id"].implode())))
            counts = {"devices_in_corpus": devices.height,  # texts whose lost "the"s were put back (text_repair)
                      "texts_repaired": repaired["devices"], "words_restored": repaired["words"]}
            fda = corpus.supplements(out["fda_id"].to_list())
            inputs = input_files({"devices": loaded.inputs["devices"]} | ({"fda_pma": fda[1]} if fda else {}))
            supplements = schemas.empty(schemas.SUPPLEMENTS) if fda is None else fda[0].valid
            # Corpus rows: see rejected_records; the MEDDEVKG_FDA_PMA records of these devices that failed are here.
            quarantine = schemas.empty(schemas.REJECTED_RECORDS) if fda is None else fda[0].rejected
    yield dg.Output(out, output_name="pma_documents", metadata=table_metadata(
        out, source=source, seconds=t["seconds"], inputs=inputs, **counts))
    yield dg.Output(quarantine, output_name="pma_quarantine", metadata=table_metadata(quarantine, source=source))
    yield dg.Output(supplements, output_name="pma_supplements", metadata=table_metadata(
        supplements, source=source, devices_with_supplements=supplements["fda_id"].n_unique()))


@dg.multi_asset(
    outs={
        "patents": dg.AssetOut(group_name=GROUP, kinds={"polars", "duckdb"},
                               metadata=stored_table(schemas.PATENTS, partition_expr=YEAR_KEY_SQL),
                               description="Patents (title + abstract, assignee, dates, CPC codes) that devices are "
                                           "linked to; one partition per grant year."),
        "patent_quarantine": dg.AssetOut(group_name=GROUP, kinds={"polars", "duckdb"},
                                         metadata=stored_table(pl.Schema({**schemas.REJECTED_RECORDS,
                                                                          "patent_year": pl.String()}),
                                                               partition_expr="patent_year"),
                                         description="Patent source rows that failed validation, with the reason "
                                                     "(stored under the year of the patent they name)."),
    },
    partitions_def=patent_years, backfill_policy=PATENT_BACKFILL, pool=DUCKDB_POOL,
)
def patents(context: dg.AssetExecutionContext, corpus: CorpusResource, sources: SourcesResource):
    """Patents from the corpus, PatentsView bulk files or the PatentSearch API (MEDDEVKG_PATENT_SOURCE)."""
    src = sources.checked()
    keys = partition_keys(context)
    inputs = None  # the corpus file's fingerprint; the other sources read no file of the corpus
    with stopwatch() as t:
        if src.patent_source == "patentsview_bulk":
            from meddevkg_core.sources.patentsview_bulk import build_patent_table

            assert src.patentsview_bulk_dir  # checked() requires it for this source
            # the selected years only: a weekly refresh of this year no longer builds every year's rows
            table = build_patent_table(src.patentsview_bulk_dir, grant_years=grant_year_bounds(keys))
            found, quarantine, stats = table.patents, table.rejected, table.stats.as_metadata()
        elif src.patent_source == "patentsview_api":
            found, quarantine, stats = _patents_from_api(src, keys)
        else:
            loaded = corpus.load()
            found = loaded.patents
            quarantine = schemas.empty(schemas.REJECTED_RECORDS)  # corpus rows: see rejected_records
            stats, inputs = {}, input_files({"patents": loaded.inputs["patents"]})
    out = in_years(found, keys)
    quarantine = quarantine_year_keys(quarantine, found)
    elsewhere = quarantine.filter(~pl.col("patent_year").is_in(keys)) if keys else quarantine.clear()
    if elsewhere.height:  # stored with the year they belong to, when that year's partition runs
        context.log.warning(f"{elsewhere.height} quarantined patent row(s) belong to other years: "
                            + ", ".join(sorted(set(elsewhere["patent_year"].to_list()))[:10]))
    quarantine = quarantine.filter(pl.col("patent_year").is_in(keys)) if keys else quarantine
    context.log.info(f"{out.height} patents from {src.patent_source} in {len(keys) or 'all'} year partition(s) "
                     f"({found.height} read); {quarantine.height} quarantined")
    yield dg.Output(out, output_name="patents", metadata=table_metadata(
        out, **{**stats, "source": src.patent_source, "assignees": out["assignee"].n_unique(), "read": found.height,
                "seconds": t["seconds"]}, inputs=inputs))
    yield dg.Output(quarantine, output_name="patent_quarantine",
                    metadata=table_metadata(quarantine, source=src.patent_source))


def input_files(inputs: Mapping[str, InputFile]) -> dg.JsonMetadataValue:
    """The files a source asset read, by table, with their bytes' digest, as run reports record them
    (lineage.inputs_json): which content a materialisation came from, not only the corpus path."""
    return dg.MetadataValue.json(inputs_json(inputs))


def _patents_from_api(src: SourcesResource, keys: list[str]) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """Grants of the selected years only (all since `patents_granted_since` when unpartitioned)."""
    from datetime import date

    from pydantic import SecretStr

    from meddevkg_core.sources.patentsview import parse_iso_date
    from meddevkg_core.sources.patentsview_api import PatentSearchConfig, fetch_patents_granted, open_client

    since = parse_iso_date(src.patents_granted_since)
    assert since is not None  # checked() requires a date for this source
    config = PatentSearchConfig(api_key=SecretStr(src.patentsview_api_key) if src.patentsview_api_key else None)
    today = date.today()
    span = year_span(keys, since, today) if keys else (since, today)
    if span is None:
        return schemas.empty(schemas.PATENTS), schemas.empty(schemas.REJECTED_RECORDS), {"requests": 0}
    with open_client(config) as client:
        table = fetch_patents_granted(client, config, *span)
    return table.patents, table.rejected, table.stats.as_metadata()


@dg.asset(group_name=GROUP, pool=DUCKDB_POOL, kinds={"polars", "duckdb"})
def gold_links(corpus: CorpusResource) -> dg.Output[pl.DataFrame]:
    """Expert-verified device-patent links where the corpus has them (evaluation and training)."""
    loaded = corpus.load()
    out = loaded.gold_links
    read = {"gold_links": loaded.inputs["gold_links"]} if "gold_links" in loaded.inputs else {}
    return dg.Output(out, metadata=table_metadata(out, gold_devices=out["fda_id"].n_unique(),
                                                  inputs=input_files(read) if read else None))


@dg.asset(group_name=GROUP, pool=DUCKDB_POOL, kinds={"polars", "duckdb"})
def rejected_records(corpus: CorpusResource) -> dg.Output[pl.DataFrame]:
    """Quarantine: every corpus row that failed validation, with the reason (nothing is dropped),
    the rows of the corpus's own company tables included."""
    out = pl.concat([corpus.load().rejected, corpus.resolver().rejected])
    reasons = out.group_by("reason").len().sort("len", "reason", descending=[True, False])
    return dg.Output(out, metadata=table_metadata(
        out, by_reason=dg.MetadataValue.md(_markdown(reasons)) if out.height else None))


def _markdown(df: pl.DataFrame) -> str:
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * df.width]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.iter_rows()]
    return "\n".join(lines)


@dg.multi_asset(
    outs={
        "meddevonto": dg.AssetOut(
            group_name="ontology", kinds={"polars", "duckdb"},
            description="MedDevOnto concepts with synonyms, parents, semantic type, category, weight and anchor "
                        "flag; with MEDDEVKG_UMLS_DIR / MEDDEVKG_MESH_XML, the licensed releases merged under it."),
        "ontology_quarantine": dg.AssetOut(
            group_name="ontology", kinds={"polars", "duckdb"}, metadata=stored_table(schemas.REJECTED_RECORDS),
            description="UMLS / MeSH records that failed validation or a merge rule, with the reason."),
    },
    pool=DUCKDB_POOL,
)
def meddevonto(context: dg.AssetExecutionContext, terminologies: TerminologiesResource):
    """The merged ontology; its metadata's `inputs` names the UMLS / MeSH files read (none when neither is set)."""
    with stopwatch() as t:
        merged = load_ontology(terminologies.config())
    onto, rejected = merged.ontology, merged.rejected
    out = ontology_table(onto)
    by_source = dict(out.group_by("source").len().sort("source").iter_rows())
    if rejected.height:
        context.log.warning(f"{rejected.height} terminology record(s) quarantined (see ontology_quarantine): "
                            + "; ".join(rejected["reason"].unique(maintain_order=True).head(5).to_list()))
    yield dg.Output(out, output_name="meddevonto", metadata=table_metadata(
        out, anchors=int(out["is_anchor"].sum()), terms=onto.terms.height, parent_links=onto.hierarchy.height,
        concepts_by_source=dg.MetadataValue.json(by_source), folded_into_shipped=merged.aliases.height,
        seconds=t["seconds"], inputs=input_files(merged.inputs) if merged.inputs else None))
    yield dg.Output(rejected, output_name="ontology_quarantine", metadata=table_metadata(rejected))


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
    return Ontology.from_frames(schemas.conform(table, schemas.CONCEPTS),
                                schemas.conform(terms, schemas.CONCEPT_TERMS),
                                schemas.conform(parents, schemas.CONCEPT_PARENTS))
