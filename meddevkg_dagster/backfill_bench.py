"""What Dagster costs: a backfill of every device partition vs the same work through the core.

The graph is materialised once (patents, reranker and caches warm), then two things are timed
alternately `runs` times: `device_links_job` over every device partition as one run (IO manager
reads and writes, events, checks), and the same steps called directly on in-memory inputs
(device mentions and embeddings, Stage 2, cross-encoder, Stage 3 with evidence and ranks). The ratio of the
medians is what the orchestration adds; it is given for wall time and for the process's CPU time. After
the runs, the core side's pool and links must be the (fda_id, pat_id) pairs the run stored, with the same
values in every column both have (floats within rounding), or the ratio would compare unlike work.

Dagster's cost is mostly per partition and asset (events, IO manager calls), the core's grows with
the patents each device is scored against. `patent_copies` > 1 shows how the ratio moves toward
the paper's 698K-patent scale: after the graph is materialised, the stored patent tables
(patents, embeddings, mentions) are replaced by that many copies of themselves, copy i's ids
suffixed `~i`, and both sides then link the real devices against them.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import duckdb
import polars as pl

from meddevkg_core.lineage import InputFile, inputs_json

if TYPE_CHECKING:
    import dagster as dg


class CoreLinks(NamedTuple):
    """What the core side made and read: the pool and links the device assets store, and the files."""

    pool: pl.DataFrame
    links: pl.DataFrame
    inputs: dict[str, InputFile]


def core_device_links(tables: dict[str, pl.DataFrame], resources: dict[str, Any]) -> CoreLinks:
    """The device partitions' work, straight through the core functions the assets call, with what they
    pass them from the same resources: the devices' FDA supplements when `corpus.fda_pma_path`
    (MEDDEVKG_FDA_PMA) is set, which make the dossier score and each device's deal window, and the
    configured entity extractor (MEDDEVKG_ENTITY_EXTRACTOR). So the pool and links are those a run over
    every device stores; the files read (the corpus tables, its own company tables, the FDA records) carry
    their bytes' digest."""
    from meddevkg_core import schemas
    from meddevkg_core.candidates import generate_candidates
    from meddevkg_core.cross_encoder import score_candidate_pairs
    from meddevkg_core.embeddings import embed_documents
    from meddevkg_core.fold_models import FoldModels, apply_fold_models
    from meddevkg_core.links_table import links_frame
    from meddevkg_core.pipeline import documents
    from meddevkg_core.progress import no_progress
    from meddevkg_core.rerank import feature_frame
    from meddevkg_core.reranked_links import decide, with_ranks
    from meddevkg_core.text_adapter import Vectors
    from meddevkg_dagster.assets.linking import stage2_inputs_of
    from meddevkg_dagster.assets.sources import ontology_from_table

    corpus, model = resources["corpus"], resources["embedding_model"]
    config = resources["pipeline_config"].config()
    loaded, resolver = corpus.load(), corpus.resolver()
    devices, patents = loaded.devices, tables["patents"].sort("pat_id")
    fda = corpus.supplements(devices["fda_id"].to_list())  # as pma_documents reads them: every device
    supplements = schemas.empty(schemas.SUPPLEMENTS) if fda is None else fda[0].valid
    docs = documents(devices, "fda_id")
    extracted, _ = resources["entity_extractor"].extract("device", docs, ontology_from_table(tables["meddevonto"]),
                                                         no_progress)  # as device_entities does
    vectors = embed_documents(docs, model.encoder(), model.cache())
    inputs = stage2_inputs_of(corpus, resources["sources"], config, devices, supplements, patents, vectors,
                              tables["patent_embeddings"], extracted.mentions, tables["patent_entities"],
                              tables["meddevonto"], resolver)
    pool = generate_candidates(inputs, config.candidates)
    ce = resources["cross_encoder"]
    scores = score_candidate_pairs(pool, devices, patents, ce.scorer(), ce.config().max_chars, ce.config().batch_size)
    models = FoldModels.from_frame(tables["reranker_model"])
    embeddings = Vectors.of(vectors, tables["patent_embeddings"], devices)
    scored = decide(apply_fold_models(feature_frame(pool, scores), models, embeddings), config.rerank)
    ranked = with_ranks(scored, models, embeddings, config.rerank)
    read = {**loaded.inputs, **resolver.inputs, **({"fda_pma": fda[1]} if fda else {})}
    return CoreLinks(pool, links_frame(ranked), read)


def source_inputs(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    """The files a run's pma_documents read, as its materialisation metadata names them (`inputs`): the
    corpus devices, and MEDDEVKG_FDA_PMA's records when it is set (the core side reads them too)."""
    read: dict[str, Any] = {}
    for materialization in result.asset_materializations_for_node("pma_documents"):
        read.update(_recorded_inputs(materialization))
    return read


def ontology_inputs(instance: dg.DagsterInstance) -> dict[str, Any]:
    """The UMLS / MeSH files the stored meddevonto was merged from, as its last materialisation names them
    (none when neither MEDDEVKG_UMLS_DIR nor MEDDEVKG_MESH_XML was set): both sides link with that ontology."""
    import dagster as dg

    event = instance.get_latest_materialization_event(dg.AssetKey("meddevonto"))
    return _recorded_inputs(event.asset_materialization if event else None)


def _recorded_inputs(materialization: dg.AssetMaterialization | None) -> dict[str, Any]:
    """The files a materialisation's metadata names (`inputs`, lineage.inputs_json), or none."""
    import dagster as dg

    entry = materialization.metadata.get("inputs") if materialization else None
    return dict(entry.data) if isinstance(entry, dg.JsonMetadataValue) and isinstance(entry.data, dict) else {}


PATENT_TABLES = {"patents": "pat_id", "patent_embeddings": "doc_id", "patent_entities": "doc_id"}


def replicate_patent_tables(con: duckdb.DuckDBPyConnection, copies: int) -> int:
    """Replace each stored patent table by `copies` copies of itself (one transaction); the patent count."""
    if copies < 1:
        raise ValueError(f"patent_copies must be at least 1, got {copies}")
    con.begin()
    for table, key in PATENT_TABLES.items():
        con.execute(f"create temp table original as select * from meddevkg.{table}")
        con.execute(f"delete from meddevkg.{table}")
        con.execute(f"insert into meddevkg.{table} select * exclude (i) replace (case when i = 0 then {key} "
                    f"else {key} || '~' || i end as {key}) from original, range({copies}) copy(i)")
        con.execute("drop table original")
    con.commit()
    [(patents,)] = con.sql("select count(*) from meddevkg.patents").fetchall()
    return patents


@contextmanager
def _timed(wall: list[float], cpu: list[float]) -> Iterator[None]:
    """Wall and this process's CPU seconds (all its threads) of the block. On a shared machine the
    CPU time is the steadier figure: wall time also counts waiting for the cores."""
    start, start_cpu = time.perf_counter(), time.process_time()
    yield
    wall.append(time.perf_counter() - start)
    cpu.append(time.process_time() - start_cpu)


PAIR = ["fda_id", "pat_id"]
SAME_WORK = {"candidate_pool": "pool pairs", "reranked_links": "links"}
"""The tables a device_links_job run stores that the core side also makes (CoreLinks' pool and links)."""


def different_work(what: str, made: pl.DataFrame, stored: pl.DataFrame) -> str | None:
    """Why the core side's rows are not the run's, in one line, or None when they are the same pairs."""
    unstored = made.select(PAIR).join(stored.select(PAIR), on=PAIR, how="anti").height
    if made.height == stored.height and not unstored:
        return None
    detail = f" ({unstored} of its pairs not among them)" if unstored else ""
    return (f"bench-backfill: the core side made {made.height} {what}, the Dagster run stored {stored.height}"
            f"{detail}: the two sides did different work, the ratio would mislead")


FLOAT_TOLERANCE = 1e-5
"""How far a float of the core side's may be from the stored one: 1e-5, or 1e-5 of the larger of the two above 1
(math.isclose's abs_tol and rel_tol; scores such as score_total reach about 100). Both sides make them with the
same functions on the same inputs, so only float32 rounding may differ, e.g. a cosine summed in another order
in another block of devices; 1e-5 is what the Stage-2 tests allow for that (tests/core/test_candidates.py,
tests/dagster/test_assets.py), about 80 float32 steps at 1, while another model or feature moves a score or
probability by far more."""


def _shown(value: object) -> str:
    """A value of the example pair: floats to float32's 7 digits, null as such, the rest as Python writes it."""
    if value is None:
        return "null"
    return f"{value:.7g}" if isinstance(value, float) else repr(value)


def different_values(table: str, made: pl.DataFrame, stored: pl.DataFrame) -> str | None:
    """Why the core side's values are not the run's, in one line, or None: the first column both have whose
    values differ on some pair (exact, floats within FLOAT_TOLERANCE; NaN and null equal themselves), how
    many pairs, and the first such pair. Both hold the same pairs (different_work); a column one side lacks
    is a difference too, not a column skipped."""
    core_only = sorted(set(made.columns) - set(stored.columns))
    run_only = sorted(set(stored.columns) - set(made.columns))
    if core_only or run_only:
        return (f"bench-backfill: {table}'s columns differ: core side only {core_only}, Dagster run only {run_only}: "
                "the two sides did different work, the ratio would mislead")
    columns = [c for c in made.columns if c not in PAIR]
    joined = made.select(*PAIR, *columns).join(stored.select(*PAIR, *columns), on=PAIR, suffix="_stored")
    for column in columns:
        core, run = pl.col(column), pl.col(f"{column}_stored")
        differ = core.ne_missing(run)
        if made.schema[column].is_float():
            differ &= ~core.is_close(run, abs_tol=FLOAT_TOLERANCE, rel_tol=FLOAT_TOLERANCE, nans_equal=True
                                     ).fill_null(False)
        rows = joined.filter(differ)
        if rows.height:
            fda_id, pat_id, a, b = rows.sort(PAIR).select(*PAIR, core, run).row(0)
            return (f"bench-backfill: {table}.{column} differs on {rows.height} of {joined.height} pairs, e.g. "
                    f"({fda_id}, {pat_id}): core side {_shown(a)}, Dagster run {_shown(b)}: the two sides did "
                    "different work, the ratio would mislead")
    return None


def check_same_work(core: CoreLinks, database: Path) -> None:
    """The core side's pool and links against those the last run stored, pairs then values (one query per
    table): a change to an asset the core side does not follow would otherwise go on timing unlike work,
    unnoticed."""
    with duckdb.connect(str(database), read_only=True) as con:
        for (table, what), made in zip(SAME_WORK.items(), (core.pool, core.links), strict=True):
            stored = con.sql(f"select * from meddevkg.{table}").pl()
            if reason := different_work(what, made, stored) or different_values(table, made, stored):
                raise RuntimeError(reason)


def refuse_other_devices() -> None:
    """MEDDEVKG_DEVICE_SOURCE=openfda, read as the `sources` resource reads it, is refused before anything is
    materialised: the Dagster run would fetch the devices from openFDA, the core side reads the corpus's."""
    from meddevkg_core.errors import InputError
    from meddevkg_dagster.resources import SourcesResource, setting_value, source_resources

    sources = source_resources()["sources"]
    assert isinstance(sources, SourcesResource)
    if (source := setting_value(sources.device_source)) == "openfda":
        raise InputError(f"bench-backfill: MEDDEVKG_DEVICE_SOURCE={source}: the Dagster run would fetch the devices "
                         "from openFDA while the core side reads the corpus's, so the ratio would compare unlike "
                         "work; unset it or set it to corpus")


def run_backfill_bench(corpus_dir: Path, runs: int = 3, patent_copies: int = 1) -> dict[str, Any]:
    """Materialise the corpus under the current MEDDEVKG_HOME, then time Dagster vs core `runs` times; the
    report names the files both sides read (`inputs`: path, size, SHA-256, as run reports record them)."""
    import dagster as dg

    for name, value in (("runs", runs), ("patent_copies", patent_copies)):  # before the corpus is materialised
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    refuse_other_devices()

    from meddevkg_dagster.cli import materialize_corpus

    materialize_corpus(corpus_dir)
    from meddevkg_dagster.definitions import defs
    from meddevkg_dagster.resources import setting_value

    resources = defs.resources
    assert resources is not None  # build_definitions always gives the resources
    database = Path(setting_value(resources["io_manager"].database))
    report = time_backfill(dg.DagsterInstance.get(), defs.resolve_job_def("device_links_job"), resources, database,
                           runs, patent_copies)
    return {"corpus": str(corpus_dir), **report}


def time_backfill(instance: dg.DagsterInstance, job: dg.JobDefinition, resources: Mapping[str, Any], database: Path,
                  runs: int, patent_copies: int) -> dict[str, Any]:
    """On a materialised store: `job` (device_links_job) over every device partition vs the core, `runs`
    times; then the core side's pool and links are checked against those the last run stored. The files
    read: the core side's, the run's source asset's and the stored ontology's (its UMLS / MeSH release)."""
    import dagster as dg

    from meddevkg_dagster.partitions import PMA_DEVICES, range_tags

    keys = instance.get_dynamic_partitions(PMA_DEVICES)
    if patent_copies > 1:
        with duckdb.connect(str(database)) as con:
            replicate_patent_tables(con, patent_copies)
    with duckdb.connect(str(database), read_only=True) as con:
        tables = {t: con.sql(f"select * from meddevkg.{t}").pl() for t in
                  ("patents", "patent_embeddings", "patent_entities", "meddevonto", "reranker_model")}
    tags = range_tags(keys[0], keys[-1])
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    wall: dict[str, list[float]] = {"dagster": [], "core": []}
    cpu: dict[str, list[float]] = {"dagster": [], "core": []}
    links, read = 0, {}
    needed = {k: resources[k] for k in ("corpus", "sources", "entity_extractor", "embedding_model", "pipeline_config",
                                        "cross_encoder")}
    with dg.build_resources(needed) as resolved:  # EnvVar settings resolved as a run resolves them
        for _ in range(runs):
            with _timed(wall["dagster"], cpu["dagster"]):
                result = job.execute_in_process(instance=instance, tags=tags, run_config=quiet)
            if not result.success:
                raise RuntimeError("device_links_job failed; see the log above")
            with _timed(wall["core"], cpu["core"]):
                core = core_device_links(tables, {k: getattr(resolved, k) for k in needed})
            links, read = core.links.height, {**inputs_json(core.inputs), **source_inputs(result)}
    check_same_work(core, database)
    d, c = statistics.median(wall["dagster"]), statistics.median(wall["core"])
    d_cpu, c_cpu = statistics.median(cpu["dagster"]), statistics.median(cpu["core"])
    return {"devices": len(keys), "patents": tables["patents"].height, "links": links,
            "runs": runs, "patent_copies": patent_copies, "dagster_runs_per_backfill": 1,
            # milliseconds: on a small corpus the core's time is a fraction of a second, and its ratio
            # is read back from these figures
            "dagster_s": [round(x, 3) for x in wall["dagster"]],
            "core_s": [round(x, 3) for x in wall["core"]], "dagster_median_s": round(d, 3),
            "core_median_s": round(c, 3), "ratio": round(d / c, 3) if c else None,
            "dagster_cpu_median_s": round(d_cpu, 3), "core_cpu_median_s": round(c_cpu, 3),
            "cpu_ratio": round(d_cpu / c_cpu, 3) if c_cpu else None,
            "home": os.environ.get("MEDDEVKG_HOME"), "event_log": type(instance.event_log_storage).__name__,
            "event_batch_size": int(os.environ.get("DAGSTER_EVENT_BATCH_SIZE", "0")),
            "inputs": {**read, **ontology_inputs(instance)}}
