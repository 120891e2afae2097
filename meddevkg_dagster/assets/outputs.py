"""Outputs for analysts: the knowledge graph and the evaluation of the link set."""

import base64
import shutil
from collections.abc import Collection
from pathlib import Path

import dagster as dg
import polars as pl

from meddevkg_core.atomic_files import replaced_directory
from meddevkg_core.baselines import CompanyScorer, CosineScorer, Scorer, run_scorer
from meddevkg_core.curves import pairs_for_recall
from meddevkg_core.embeddings import embedding_matrix
from meddevkg_core.evaluation import evaluate_links, evaluation_frame
from meddevkg_core.fold_models import FoldModels
from meddevkg_core.graph import build_graph, dangling_edges
from meddevkg_core.plots import plot_rank_distribution, plot_recall_volume
from meddevkg_core.ranking import pipeline_runs
from meddevkg_dagster.assets.linking import stage2_inputs_of
from meddevkg_dagster.assets.sources import ontology_from_table
from meddevkg_dagster.lib import evaluation_metadata, table_metadata
from meddevkg_dagster.partitions import every_partition
from meddevkg_dagster.resources import DUCKDB_POOL, CorpusResource, PipelineConfigResource, SourcesResource, home_dir


@dg.asset(group_name="graph", pool=DUCKDB_POOL, kinds={"polars", "duckdb"},
          ins=every_partition("patents", "patent_entities"))
def meddevkg(pma_documents: pl.DataFrame, patents: pl.DataFrame, reranked_links: pl.DataFrame,
             company_dictionary: pl.DataFrame, device_entities: pl.DataFrame, patent_entities: pl.DataFrame,
             meddevonto: pl.DataFrame, corpus: CorpusResource) -> dg.Output[pl.DataFrame]:
    """The knowledge graph: Device, Patent, Company, Concept nodes and their edges in one table."""
    onto = ontology_from_table(meddevonto)
    resolver = corpus.resolver()
    graph = build_graph(pma_documents, patents, reranked_links, company_dictionary, resolver.acquisitions,
                        pl.concat([device_entities, patent_entities.drop("patent_year", strict=False)]), onto.concepts,
                        onto.hierarchy, alliances=resolver.alliance_table)
    if (bad := dangling_edges(graph)).height:
        raise dg.Failure(f"{bad.height} graph edges point to missing nodes, e.g. {bad['id'][0]}")
    counts = dict(graph.group_by("label").len().iter_rows())
    return dg.Output(graph, metadata=table_metadata(graph, **{f"count_{k}": v for k, v in sorted(counts.items())}))


@dg.asset(group_name="graph", pool=DUCKDB_POOL, kinds={"neo4j", "parquet"})
def graph_export(meddevkg: pl.DataFrame) -> dg.MaterializeResult:
    """The stored graph under MEDDEVKG_HOME/graph_export as Parquet and as neo4j-admin import CSVs
    (with import.sh), so it loads into Neo4j without going through DuckDB.

    A step of its own, reading the stored table, so the files change only once the `meddevkg` table
    is stored: a failed store leaves the previous export beside the previous table. Its product is
    the files, so it stores no table.
    """
    from meddevkg_core.graph_export import export_graph

    export = export_graph(meddevkg, home_dir() / "graph_export")
    return dg.MaterializeResult(metadata=dict(
        export_dir=dg.MetadataValue.path(export["directory"]),
        export_nodes=sum(export["nodes"].values()), export_relationships=sum(export["relationships"].values()),
        neo4j_import=dg.MetadataValue.md(f"`{export['command']}` (run in the export directory, or `sh import.sh`)")))


PLOT_RUNS_KEPT = 10
"""`link_evaluation` keeps the plot directories of this many latest runs under MEDDEVKG_HOME/plots
(by mtime), and always the one the stored materialisation names; older ones are removed."""
PLOT_NAMES = ("recall_volume.png", "rank_distribution.png")
"""The plots of one run; before plots had a directory per run, these sat directly in plots/."""


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile
        return 0.0


def prune_plot_runs(root: Path, spare: Collection[Path], keep: int = PLOT_RUNS_KEPT) -> None:
    """Remove the directories in `root` beyond the `keep` newest, never one of `spare`, so plots/ stays
    bounded (a failed run's directory, which no materialisation names, goes with the oldest). The
    plots of the layout without run directories go unless `spare` names `root` itself: the stored
    materialisation still shows those."""
    spared = {p.resolve() for p in spare}
    runs = sorted((p for p in root.iterdir() if p.is_dir() and not p.is_symlink()),
                  key=lambda p: (_mtime(p), p.name), reverse=True)
    for path in runs[keep:]:
        if path.resolve() not in spared:
            shutil.rmtree(path, ignore_errors=True)
    if root.resolve() not in spared:
        for name in PLOT_NAMES:
            (root / name).unlink(missing_ok=True)


def _stored_plots_dir(context: dg.AssetExecutionContext) -> Path | None:
    """The plots directory the stored materialisation of this asset names (this run's is not stored yet)."""
    event = context.instance.get_latest_materialization_event(context.asset_key)
    value = event.asset_materialization.metadata.get("plots_dir") if event and event.asset_materialization else None
    return Path(value.value) if isinstance(value, dg.PathMetadataValue) else None


def _image(path: Path) -> dg.MetadataValue:
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    return dg.MetadataValue.md(f"![{path.stem}](data:image/png;base64,{encoded})")


@dg.asset(group_name="evaluation", pool=DUCKDB_POOL, kinds={"polars", "duckdb"},
          ins=every_partition("patents", "patent_embeddings", "patent_entities"))
def link_evaluation(context: dg.AssetExecutionContext, corpus: CorpusResource, sources: SourcesResource,
                    pipeline_config: PipelineConfigResource, pma_documents: pl.DataFrame,
                    pma_supplements: pl.DataFrame, patents: pl.DataFrame,
                    candidate_pool: pl.DataFrame, reranked_links: pl.DataFrame, gold_links: pl.DataFrame,
                    device_embeddings: pl.DataFrame, patent_embeddings: pl.DataFrame,
                    device_entities: pl.DataFrame, patent_entities: pl.DataFrame, meddevonto: pl.DataFrame,
                    cross_encoder_scores: pl.DataFrame, reranker_model: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """Recall on gold (out-of-fold) of the pool and the link set, rankings over all pairs, and plots."""
    ev = evaluate_links(candidate_pool, reranked_links, gold_links, pma_documents.height, patents.height)
    meta = evaluation_metadata(ev)
    row = ev.model_dump()
    if gold_links.height:
        config = pipeline_config.config()
        inputs = stage2_inputs_of(corpus, sources, config, pma_documents, pma_supplements, patents,
                                  device_embeddings, patent_embeddings, device_entities, patent_entities, meddevonto)
        ids, pids, matches = inputs.device_ids, inputs.patent_ids, inputs.company_matches
        baselines: dict[str, Scorer] = {"sbert_cosine": CosineScorer.of(embedding_matrix(device_embeddings)[1],
                                                                       embedding_matrix(patent_embeddings)[1]),
                                         "company_only": CompanyScorer.from_matches(matches, ids, pids)}
        runs = {**pipeline_runs(inputs, FoldModels.from_frame(reranker_model), cross_encoder_scores, config,
                                gold_links, candidate_pool),
                **{name: run_scorer(s, ids, pids, gold_links) for name, s in baselines.items()}}
        # A directory of this run's own, written whole: the table is stored after this body, so a failed
        # store leaves the directory the stored materialisation names as it was (and this one unnamed).
        plots = home_dir() / "plots" / context.run_id
        with replaced_directory(plots) as stage:
            images = {"recall_volume_plot": _image(plot_recall_volume({k: r.curve for k, r in runs.items()},
                                                                      stage / PLOT_NAMES[0])),
                      "rank_distribution_plot": _image(plot_rank_distribution(
                          {k: r.gold_ranks for k, r in runs.items()}, stage / PLOT_NAMES[1]))}
        prune_plot_runs(plots.parent, {plots, *filter(None, [_stored_plots_dir(context)])})
        ranking = {**runs["pipeline"].metrics, **pairs_for_recall(runs["pipeline"].curve)}
        row.update({k.replace("@", "_at_"): v for k, v in ranking.items()})
        meta.update({f"pipeline_{k}": round(v, 4) for k, v in ranking.items() if isinstance(v, float)})
        meta.update({**images, "plots_dir": dg.MetadataValue.path(str(plots))})
        context.log.info(f"pipeline ranking on gold devices: {ranking}")
    return dg.Output(evaluation_frame(row), metadata=meta)
