"""The graph export: every label present, headers neo4j-admin accepts, no dangling edge, and it loads back."""

from __future__ import annotations

import csv
import json
from datetime import date
from pathlib import Path

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.graph import build_graph, dangling_edges
from meddevkg_core.graph_export import export_graph

TRICKY = 'Aurora "XL", 2.5 mm\nstent'  # a quote, a comma and a newline: CSV quoting must survive them


def small_graph() -> pl.DataFrame:
    devices = schemas.conform(pl.DataFrame({
        "fda_id": ["P1", "P2"], "applicant": ["Helix Vascular, Inc.", "Meridian Cardiac"],
        "trade_name": [TRICKY, "Pulse"], "decision_date": [date(2012, 5, 14), None], "text": ["a", "b"]}),
        schemas.DEVICES)
    patents = schemas.conform(pl.DataFrame({
        "pat_id": ["100", "200", "300"], "title": ["Stent", "Lead", "Valve"], "text": ["x", "y", "z"],
        "assignee": ["Helix Vascular, Inc.", "PulseWave Medical; Helix Vascular, Inc.", None],
        "grant_date": [date(2010, 1, 5), date(2015, 3, 3), None]}), schemas.PATENTS)
    links = schemas.conform(pl.DataFrame({
        "fda_id": ["P1", "P1", "P2", "P2"], "pat_id": ["100", "200", "200", "300"],
        "probability": [0.9, 0.4, 0.7, 0.01], "decision": [True, True, True, False], "immune": [False] * 4,
        "verdict": ["probability"] * 4, "evidence": ['S=105; shared="stent, drug"', "S=80", "S=90", "S=10"]}),
        schemas.LINKS)
    dictionary = pl.DataFrame({"raw_name": ["Helix Vascular, Inc.", "Meridian Cardiac", "PulseWave Medical"],
                               "company_id": ["HELIX VASCULAR", "MERIDIAN CARDIAC", "PULSEWAVE MEDICAL"]})
    acquisitions = schemas.conform(pl.DataFrame({
        "acquirer": ["MERIDIAN CARDIAC"], "acquired": ["PULSEWAVE MEDICAL"], "close_date": [date(2017, 3, 31)],
        "source": ["demo"]}), schemas.ACQUISITIONS)
    mentions = schemas.conform(pl.DataFrame({
        "doc_id": ["P1", "100", "100", "P2"], "mention": ["stent", "stent", "drug-eluting stent", "lead"],
        "concept_id": ["C_STENT", "C_STENT", "C_DES", None], "map_tier": ["exact"] * 4}), schemas.MENTIONS)
    concepts = schemas.conform(pl.DataFrame({
        "concept_id": ["C_DEVICE", "C_IMPLANT", "C_STENT", "C_DES", "C_UNUSED"],
        "preferred_name": ["device", "implant", "stent", "drug-eluting stent", "unused"],
        "weight": [0.5, 0.6, 1.0, 1.0, 0.1], "is_anchor": [False, False, True, True, False]}), schemas.CONCEPTS)
    parents = pl.DataFrame({"concept_id": ["C_DES", "C_STENT", "C_IMPLANT", "C_UNUSED"],
                            "parent_id": ["C_STENT", "C_IMPLANT", "C_DEVICE", "C_DEVICE"]})
    alliances = pl.DataFrame({"company_a": ["HELIX VASCULAR"], "company_b": ["NAVIGATE MAGNETICS"],
                              "start_date": [date(2002, 5, 7)], "end_date": [None], "source": ["demo"]},
                             schema_overrides={"end_date": pl.Date})
    return build_graph(devices, patents, links, dictionary, acquisitions, mentions, concepts, parents,
                       alliances=alliances)


def test_build_graph_has_every_label_and_the_whole_concept_ancestry():
    graph = small_graph()
    assert {"Device", "Patent", "Company", "Concept", "LINKED_TO", "ASSIGNED_TO", "APPLIED_BY", "ACQUIRED",
            "PARTNER_OF", "MENTIONS", "IS_A"} <= set(graph["label"])
    assert dangling_edges(graph).height == 0  # the partner company no device or patent names is a node too
    partner = graph.filter(pl.col("label") == "PARTNER_OF").row(0, named=True)
    assert (partner["source_id"], partner["target_id"]) == ("company:HELIX VASCULAR", "company:NAVIGATE MAGNETICS")
    assert json.loads(partner["properties"])["start_date"] == "2002-05-07"
    is_a = graph.filter(pl.col("label") == "IS_A").select("source_id", "target_id").rows()
    # DES -> STENT -> IMPLANT -> DEVICE: the grandparents are reached too; an unused concept is not
    assert set(is_a) == {("concept:C_DES", "concept:C_STENT"), ("concept:C_STENT", "concept:C_IMPLANT"),
                         ("concept:C_IMPLANT", "concept:C_DEVICE")}
    linked = graph.filter(pl.col("label") == "LINKED_TO")
    assert linked.height == 3  # the rejected pair (decision false) is no edge


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def check_export(graph: pl.DataFrame, out: Path) -> dict:
    info = export_graph(graph, out)
    check_export_dir(graph, out)
    return info


def check_export_dir(graph: pl.DataFrame, out: Path) -> None:
    """An export directory of `graph` as neo4j-admin needs it (shared with the demo asset test)."""
    node_files, rel_files = sorted(out.glob("nodes_*.csv")), sorted(out.glob("relationships_*.csv"))
    labels = set(graph.filter(pl.col("element") == "node")["label"])
    assert {f.stem.removeprefix("nodes_") for f in node_files} == labels
    ids: list[str] = []
    for f in node_files:
        header, rows = _read(f)
        assert [h for h in header if h.endswith(":ID")] == ["id:ID"] and header[-1] == ":LABEL", f.name
        assert all(len(r) == len(header) for r in rows) and {r[-1] for r in rows} == {f.stem.removeprefix("nodes_")}
        ids += [r[0] for r in rows]
    assert len(ids) == len(set(ids)) == graph.filter(pl.col("element") == "node").height
    known = set(ids)
    reloaded = []
    for f in rel_files:
        header, rows = _read(f)
        assert header[:2] == [":START_ID", ":END_ID"] and header[-1] == ":TYPE", f.name
        assert not any(h.endswith(":ID") for h in header), f.name
        df = pl.read_csv(f, infer_schema=False)
        assert df.height == len(rows)
        assert set(df[":START_ID"]) <= known and set(df[":END_ID"]) <= known, f"dangling endpoint in {f.name}"
        reloaded.append(df.select(pl.col(":TYPE").alias("label"), pl.col(":START_ID").alias("source_id"),
                                  pl.col(":END_ID").alias("target_id")))
    edges = graph.filter(pl.col("element") == "edge").select("label", "source_id", "target_id")
    assert sorted(pl.concat(reloaded).rows()) == sorted(edges.rows())
    for name in ("nodes.parquet", "edges.parquet", "import.sh", "README.md"):
        assert (out / name).is_file()
    assert pl.read_parquet(out / "edges.parquet").height == edges.height
    script = (out / "import.sh").read_text()
    assert "neo4j-admin database import full" in script and "--multiline-fields=true" in script
    assert all(f"--nodes={f.name}" in script for f in node_files)
    assert all(f"--relationships={f.name}" in script for f in rel_files)


def test_export_writes_neo4j_admin_csvs_that_load_back(tmp_path):
    graph = small_graph()
    info = check_export(graph, tmp_path / "export")
    assert info["nodes"] == {"Company": 4, "Concept": 4, "Device": 2, "Patent": 3}
    assert info["relationships"]["LINKED_TO"] == 3 and info["relationships"]["ACQUIRED"] == 1
    assert info["relationships"]["PARTNER_OF"] == 1
    assert {"start_date:date", "end_date:date"} <= set(_read(tmp_path / "export" / "relationships_PARTNER_OF.csv")[0])

    header, _ = _read(tmp_path / "export" / "relationships_LINKED_TO.csv")
    assert "probability:float" in header and "immune:boolean" in header and "evidence" in header
    assert "close_date:date" in _read(tmp_path / "export" / "relationships_ACQUIRED.csv")[0]
    assert "decision_date:date" in _read(tmp_path / "export" / "nodes_Device.csv")[0]
    assert {"weight:double", "is_anchor:boolean"} <= set(_read(tmp_path / "export" / "nodes_Concept.csv")[0])

    devices = pl.read_csv(tmp_path / "export" / "nodes_Device.csv", infer_schema=False)
    assert devices.filter(pl.col("id:ID") == "device:P1")["trade_name"].item() == TRICKY
    assert devices.filter(pl.col("id:ID") == "device:P2")["decision_date:date"].item() is None
    links = pl.read_csv(tmp_path / "export" / "relationships_LINKED_TO.csv")
    assert links.filter(pl.col(":END_ID") == "patent:100")["evidence"].item() == 'S=105; shared="stent, drug"'
    assert links["probability:float"].dtype == pl.Float64
    acquired = pl.read_csv(tmp_path / "export" / "relationships_ACQUIRED.csv", try_parse_dates=True)
    assert acquired["close_date:date"].to_list() == [date(2017, 3, 31)]


def test_a_second_export_replaces_the_files_of_labels_that_are_gone(tmp_path):
    graph = small_graph()
    export_graph(graph, tmp_path)
    assert (tmp_path / "relationships_ACQUIRED.csv").exists()
    export_graph(graph.filter(pl.col("label") != "ACQUIRED"), tmp_path)
    assert not (tmp_path / "relationships_ACQUIRED.csv").exists()
    assert "ACQUIRED" not in (tmp_path / "import.sh").read_text()


def test_an_export_that_fails_midway_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    out = tmp_path / "graph_export"
    export_graph(small_graph(), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    write_csv, calls = pl.DataFrame.write_csv, []

    def second_write_fails(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("No space left on device")
        return write_csv(self, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_csv", second_write_fails)
    with pytest.raises(OSError, match="No space left"):
        export_graph(small_graph().filter(pl.col("label") != "ACQUIRED"), out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # import.sh still names what is there
    assert [p.name for p in tmp_path.iterdir()] == ["graph_export"]  # no temporary directory left


def test_a_dangling_edge_or_duplicate_id_is_refused(tmp_path):
    graph = small_graph()
    bad_edge = graph.filter(pl.col("label") == "LINKED_TO").head(1).with_columns(
        pl.lit("patent:999").alias("target_id"), pl.lit("LINKED_TO:x").alias("id"))
    with pytest.raises(ValueError, match="missing nodes"):
        export_graph(pl.concat([graph, bad_edge]), tmp_path)
    with pytest.raises(ValueError, match="share an id"):
        export_graph(pl.concat([graph, graph.filter(pl.col("label") == "Device").head(1)]), tmp_path)
