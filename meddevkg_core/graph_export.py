"""Export the MedDevKG graph for graph databases: Parquet, and CSV for `neo4j-admin database import full`.

The graph table keeps properties as JSON text so one DuckDB table holds every label; a graph
database wants one typed column per property instead. The CSV layout is the one neo4j-admin reads
without a mapping file: one nodes file per label (`id:ID,<props>,:LABEL`) and one relationships
file per type (`:START_ID,:END_ID,<props>,:TYPE`), typed headers (`probability:float`,
`close_date:date`), RFC 4180 quoting (a quote is doubled; a field with a newline is quoted, hence
`--multiline-fields=true` in the command). Node ids are globally unique (`device:P...`,
`patent:...`), so a single ID space is used.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import polars as pl

from meddevkg_core.atomic_files import replaced_directory
from meddevkg_core.graph import dangling_edges, write_graph

PROPERTY_TYPES: dict[str, dict[str, str]] = {
    "Device": {"decision_date": "date"},
    "Patent": {"grant_date": "date", "filing_date": "date"},
    "Concept": {"weight": "double", "is_anchor": "boolean"},
    "LINKED_TO": {"probability": "float", "rank": "long", "immune": "boolean"},
    "ACQUIRED": {"close_date": "date"},
    "PARTNER_OF": {"start_date": "date", "end_date": "date"},
}
"""neo4j-admin types of the properties that are not strings (everything else is a string)."""

_CAST = {"date": pl.Date, "float": pl.Float64, "double": pl.Float64, "boolean": pl.Boolean,
         "long": pl.Int64, "string": pl.String}
# keyed by the classes: a dtype instance (a frame's schema) hashes and compares equal to its class
_INFERRED: dict[pl.DataType | type[pl.DataType], str] = {
    pl.Float64: "double", pl.Float32: "float", pl.Int64: "long", pl.Int32: "int", pl.Boolean: "boolean",
    pl.Date: "date", pl.String: "string"}
NODE_PREFIX, REL_PREFIX = "nodes_", "relationships_"


def typed_properties(part: pl.DataFrame, label: str) -> tuple[pl.DataFrame, dict[str, str]]:
    """The JSON `properties` of one label as typed columns, and each column's neo4j-admin type."""
    if part.height == 0 or part["properties"].fill_null("{}").eq("{}").all():
        return pl.DataFrame(), {}
    props = part["properties"].fill_null("{}").str.json_decode(infer_schema_length=None).struct.unnest()
    declared = PROPERTY_TYPES.get(label, {})
    types: dict[str, str] = {}
    columns = []
    for name, dtype in props.schema.items():
        kind = declared.get(name) or _INFERRED.get(dtype, "string")
        col = pl.col(name)
        if kind == "date" and dtype == pl.String:
            col = col.str.to_date("%Y-%m-%d", strict=False)
        elif kind == "string" and dtype not in (pl.String, pl.Null):
            col = col.map_elements(lambda v: json.dumps(v, default=str), return_dtype=pl.String)  # nested values
        columns.append(col.cast(_CAST[kind]).alias(name))
        types[name] = kind
    return props.select(columns), types


def _header(name: str, kind: str) -> str:
    return name if kind == "string" else f"{name}:{kind}"


def node_table(graph: pl.DataFrame, label: str) -> pl.DataFrame:
    """One label's nodes as the neo4j-admin CSV columns: id:ID, typed properties, :LABEL."""
    part = graph.filter((pl.col("element") == "node") & (pl.col("label") == label)).sort("id")
    props, types = typed_properties(part, label)
    return pl.concat([part.select(pl.col("id").alias("id:ID")),
                      props.rename({c: _header(c, types[c]) for c in props.columns}),
                      part.select(pl.col("label").alias(":LABEL"))], how="horizontal")


def relationship_table(graph: pl.DataFrame, rel_type: str) -> pl.DataFrame:
    """One type's edges as the neo4j-admin CSV columns: :START_ID, :END_ID, typed properties, :TYPE."""
    part = graph.filter((pl.col("element") == "edge") & (pl.col("label") == rel_type)).sort("source_id", "target_id")
    props, types = typed_properties(part, rel_type)
    return pl.concat([part.select(pl.col("source_id").alias(":START_ID"), pl.col("target_id").alias(":END_ID")),
                      props.rename({c: _header(c, types[c]) for c in props.columns}),
                      part.select(pl.col("label").alias(":TYPE"))], how="horizontal")


def import_command(node_files: list[str], relationship_files: list[str], database: str = "neo4j") -> str:
    """The neo4j-admin (Neo4j 5) command loading these files into an empty (stopped) database."""
    args = ["neo4j-admin", "database", "import", "full", "--overwrite-destination", "--multiline-fields=true"]
    args += [f"--nodes={f}" for f in node_files] + [f"--relationships={f}" for f in relationship_files]
    return " ".join(shlex.quote(a) for a in args) + f" {database}"


def export_graph(graph: pl.DataFrame, out_dir: str | Path) -> dict[str, Any]:
    """Write nodes/edges Parquet, neo4j-admin CSVs, import.sh and README.md; return counts and paths.

    Refuses a graph with duplicate node ids or edges pointing to missing nodes: neo4j-admin would
    otherwise drop or reject those rows silently in a long import. The export replaces the previous
    one whole (atomic_files.replaced_directory): import.sh names exactly what is there, and a failed
    export leaves the previous one as it was.
    """
    out = Path(out_dir)
    nodes = graph.filter(pl.col("element") == "node")
    if (dup := nodes.filter(pl.col("id").is_duplicated())).height:
        raise ValueError(f"{dup.height} graph nodes share an id, e.g. {dup['id'][0]}")
    if (bad := dangling_edges(graph)).height:
        raise ValueError(f"{bad.height} graph edges point to missing nodes, e.g. {bad['id'][0]}")
    with replaced_directory(out) as work:
        node_files, rel_files, node_counts, rel_counts = _write_export(graph, nodes, work)
    return {"directory": str(out), "nodes": node_counts, "relationships": rel_counts,
            "files": {"nodes_parquet": str(out / "nodes.parquet"), "edges_parquet": str(out / "edges.parquet"),
                      "node_csv": [str(out / f) for f in node_files],
                      "relationship_csv": [str(out / f) for f in rel_files],
                      "import_script": str(out / "import.sh")},
            "command": import_command(node_files, rel_files)}


def _write_export(graph: pl.DataFrame, nodes: pl.DataFrame, out: Path) -> tuple[list, list, dict, dict]:
    """Every file of the export into `out`; returns the CSV names and the counts by label and type."""
    write_graph(graph, out)
    labels = sorted(nodes["label"].unique())
    types = sorted(graph.filter(pl.col("element") == "edge")["label"].unique())
    node_files, rel_files, node_counts, rel_counts = [], [], {}, {}
    for label in labels:
        table = node_table(graph, label)
        name = f"{NODE_PREFIX}{label}.csv"
        table.write_csv(out / name, null_value="")
        node_files.append(name)
        node_counts[label] = table.height
    for rel_type in types:
        table = relationship_table(graph, rel_type)
        name = f"{REL_PREFIX}{rel_type}.csv"
        table.write_csv(out / name, null_value="")
        rel_files.append(name)
        rel_counts[rel_type] = table.height
    command = import_command(node_files, rel_files)
    script = out / "import.sh"
    script.write_text("#!/bin/sh\n# Load this export into an empty Neo4j 5 database (stop it first; run where "
                      "neo4j-admin is).\n# Usage: sh import.sh [database]   (default: neo4j)\nset -eu\n"
                      'cd "$(dirname "$0")"\n'
                      + import_command(node_files, rel_files, '"${1:-neo4j}"').replace(" --", " \\\n  --") + "\n")
    script.chmod(0o755)
    (out / "README.md").write_text(
        "# MedDevKG graph export\n\n"
        f"- `nodes.parquet`, `edges.parquet`: the graph table split by element (properties as JSON text).\n"
        f"- `{NODE_PREFIX}<Label>.csv`: `id:ID,<properties>,:LABEL`; `{REL_PREFIX}<TYPE>.csv`: "
        "`:START_ID,:END_ID,<properties>,:TYPE`.\n\n"
        f"Nodes: {node_counts}\n\nRelationships: {rel_counts}\n\n"
        "Load into an empty, stopped Neo4j 5 database (`sh import.sh [database]`):\n\n"
        f"```\n{command}\n```\n")
    return node_files, rel_files, node_counts, rel_counts
