"""The MedDevKG graph: devices, patents, companies and concepts, and the edges between them.

One table holds nodes and edges (`element` = node/edge) so a single DuckDB table answers graph
questions; `write_graph` splits it into node and edge files, and `graph_export.export_graph` writes
them as Parquet and as the typed CSV layout `neo4j-admin database import full` reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from meddevkg_core import schemas

GRAPH = pl.Schema({
    "element": pl.String, "label": pl.String, "id": pl.String,
    "source_id": pl.String, "target_id": pl.String, "properties": pl.String,
})


def _props(df: pl.DataFrame, cols: list[str]) -> pl.Expr:
    return pl.struct([c for c in cols if c in df.columns]).struct.json_encode() if cols else pl.lit("{}")


def _nodes(df: pl.DataFrame, label: str, id_expr: pl.Expr, cols: list[str]) -> pl.DataFrame:
    return df.select(pl.lit("node").alias("element"), pl.lit(label).alias("label"), id_expr.alias("id"),
                     pl.lit(None, pl.String).alias("source_id"), pl.lit(None, pl.String).alias("target_id"),
                     _props(df, cols).alias("properties"))


def _edges(df: pl.DataFrame, label: str, src: pl.Expr, dst: pl.Expr, cols: list[str]) -> pl.DataFrame:
    return df.select(pl.lit("edge").alias("element"), pl.lit(label).alias("label"),
                     pl.concat_str([pl.lit(label + ":"), src, pl.lit("->"), dst]).alias("id"),
                     src.alias("source_id"), dst.alias("target_id"), _props(df, cols).alias("properties"))


def build_graph(devices: pl.DataFrame, patents: pl.DataFrame, links: pl.DataFrame,
                company_dictionary: pl.DataFrame, acquisitions: pl.DataFrame,
                mentions: pl.DataFrame, concepts: pl.DataFrame, parents: pl.DataFrame,
                alliances: pl.DataFrame | None = None) -> pl.DataFrame:
    """Assemble the graph; node ids are prefixed by kind (device:, patent:, company:, concept:).

    `alliances` (schemas.ALLIANCES) adds PARTNER_OF edges between companies that had a dated
    development and licence agreement (the `partner` company match).
    """
    alliances = alliances if alliances is not None else schemas.empty(schemas.ALLIANCES)
    company_of = company_dictionary.select("raw_name", "company_id").unique("raw_name")
    dev = devices.join(company_of, left_on="applicant", right_on="raw_name", how="left")
    pat = (patents.with_columns(pl.col("assignee").str.split("; ").alias("assignee_one")).explode("assignee_one")
           .join(company_of, left_on="assignee_one", right_on="raw_name", how="left"))
    companies = pl.concat([dev.select("company_id"), pat.select("company_id"),
                           acquisitions.select(pl.col("acquirer").alias("company_id")),
                           acquisitions.select(pl.col("acquired").alias("company_id")),
                           alliances.select(pl.col("company_a").alias("company_id")),
                           alliances.select(pl.col("company_b").alias("company_id"))]).drop_nulls().unique()
    kept = links.filter(pl.col("decision"))
    used_concepts = mentions.select("concept_id").drop_nulls().unique().join(concepts, on="concept_id", how="semi")
    is_a = _ancestry(parents.join(concepts.select(pl.col("concept_id").alias("parent_id")), on="parent_id",
                                  how="semi"), used_concepts)
    concept_nodes = concepts.join(pl.concat([used_concepts, is_a.select(pl.col("parent_id").alias("concept_id"))]),
                                  on="concept_id", how="semi").unique("concept_id", maintain_order=True)
    dev_id = pl.concat_str([pl.lit("device:"), pl.col("fda_id")])
    pat_id = pl.concat_str([pl.lit("patent:"), pl.col("pat_id")])
    comp = pl.concat_str([pl.lit("company:"), pl.col("company_id")])
    concept = pl.concat_str([pl.lit("concept:"), pl.col("concept_id")])
    ment = mentions.join(used_concepts, on="concept_id", how="semi").unique(["doc_id", "concept_id"])
    doc_node = pl.when(pl.col("doc_id").is_in(devices["fda_id"].implode())).then(
        pl.concat_str([pl.lit("device:"), pl.col("doc_id")])).otherwise(
        pl.concat_str([pl.lit("patent:"), pl.col("doc_id")]))
    parts = [
        _nodes(devices, "Device", dev_id,
               ["fda_id", "applicant", "trade_name", "generic_name", "product_code", "decision_date"]),
        _nodes(patents, "Patent", pat_id, ["pat_id", "title", "assignee", "grant_date", "filing_date"]),
        _nodes(companies, "Company", comp, ["company_id"]),
        _nodes(concept_nodes, "Concept", concept,
               ["concept_id", "preferred_name", "tui", "category", "weight", "is_anchor"]),
        _edges(kept, "LINKED_TO", dev_id, pat_id, ["probability", "rank", "immune", "verdict", "evidence"]),
        _edges(pat.drop_nulls("company_id").unique(["pat_id", "company_id"]), "ASSIGNED_TO", pat_id, comp, []),
        _edges(dev.drop_nulls("company_id"), "APPLIED_BY", dev_id, comp, []),
        _edges(acquisitions, "ACQUIRED", pl.concat_str([pl.lit("company:"), pl.col("acquirer")]),
               pl.concat_str([pl.lit("company:"), pl.col("acquired")]), ["close_date", "source"]),
        _edges(alliances, "PARTNER_OF", pl.concat_str([pl.lit("company:"), pl.col("company_a")]),
               pl.concat_str([pl.lit("company:"), pl.col("company_b")]), ["start_date", "end_date", "source"]),
        _edges(ment, "MENTIONS", doc_node, concept, ["map_tier", "mention"]),
        _edges(is_a, "IS_A", concept, pl.concat_str([pl.lit("concept:"), pl.col("parent_id")]), []),
    ]
    graph = pl.concat([p.cast(GRAPH) for p in parts]).unique("id", keep="first", maintain_order=True)
    return graph.sort("element", "label", "id")


def _ancestry(parents: pl.DataFrame, start: pl.DataFrame) -> pl.DataFrame:
    """IS_A rows of the used concepts and of all their ancestors, so every hierarchy path reaches a root."""
    frontier, seen, rows = start, start, []
    while frontier.height:
        step = parents.join(frontier, on="concept_id", how="semi")
        rows.append(step)
        frontier = (step.select(pl.col("parent_id").alias("concept_id")).unique()
                    .join(seen, on="concept_id", how="anti"))
        seen = pl.concat([seen, frontier])
    return pl.concat(rows).unique(maintain_order=True) if rows else parents.clear()


def dangling_edges(graph: pl.DataFrame) -> pl.DataFrame:
    """Edges whose source or target is not a node (must be empty)."""
    nodes = graph.filter(pl.col("element") == "node")["id"].implode()
    dangling = ~(pl.col("source_id").is_in(nodes) & pl.col("target_id").is_in(nodes))
    return graph.filter((pl.col("element") == "edge") & dangling)


def write_graph(graph: pl.DataFrame, out: str | Path) -> dict[str, Path]:
    """Write nodes.parquet and edges.parquet (properties kept as JSON text)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for element in ("node", "edge"):
        path = out / f"{element}s.parquet"
        graph.filter(pl.col("element") == element).drop("element").write_parquet(path)
        paths[element] = path
    return paths


def properties(row: dict) -> dict:
    return json.loads(row["properties"] or "{}")
