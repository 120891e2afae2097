"""Outputs for analysts: the knowledge graph and the evaluation of the link set."""

import dagster as dg
import polars as pl

from meddevkg_core.companies import acquisitions_frame
from meddevkg_core.evaluation import evaluate_links
from meddevkg_core.graph import build_graph, dangling_edges
from meddevkg_dagster.assets.sources import ontology_from_table
from meddevkg_dagster.lib import evaluation_metadata, table_metadata
from meddevkg_dagster.resources import DUCKDB_POOL


@dg.asset(group_name="graph", pool=DUCKDB_POOL, kinds={"polars", "duckdb"})
def meddevkg(pma_documents: pl.DataFrame, patents: pl.DataFrame, reranked_links: pl.DataFrame,
             company_dictionary: pl.DataFrame, device_entities: pl.DataFrame, patent_entities: pl.DataFrame,
             meddevonto: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """The knowledge graph: Device, Patent, Company, Concept nodes and their edges in one table."""
    onto = ontology_from_table(meddevonto)
    graph = build_graph(pma_documents, patents, reranked_links, company_dictionary, acquisitions_frame(),
                        pl.concat([device_entities, patent_entities]), onto.concepts, onto.hierarchy)
    if (bad := dangling_edges(graph)).height:
        raise dg.Failure(f"{bad.height} graph edges point to missing nodes, e.g. {bad['id'][0]}")
    counts = dict(graph.group_by("label").len().iter_rows())
    return dg.Output(graph, metadata=table_metadata(graph, **{f"count_{k}": v for k, v in sorted(counts.items())}))


@dg.asset(group_name="evaluation", pool=DUCKDB_POOL, kinds={"polars", "duckdb"})
def link_evaluation(pma_documents: pl.DataFrame, patents: pl.DataFrame, candidate_pool: pl.DataFrame,
                    reranked_links: pl.DataFrame, gold_links: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    """Recall on gold of the pool and the link set (out-of-fold), volumes and noise reduction."""
    ev = evaluate_links(candidate_pool, reranked_links, gold_links, pma_documents.height, patents.height)
    out = pl.DataFrame([ev.model_dump()])
    return dg.Output(out, metadata=evaluation_metadata(ev))
