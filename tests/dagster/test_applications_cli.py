"""The demo materialised once: the `graph_export` asset's files, and the application commands on its store."""

from __future__ import annotations

import shlex
import subprocess

import duckdb
import polars as pl
import pytest

from meddevkg_core.corpus import read_corpus
from meddevkg_core.demo import demo_corpus_dir
from meddevkg_dagster.cli import main
from tests.core.test_graph_export import check_export_dir
from tests.dagster.conftest import Harness

ACQUIRING = "P909019"  # Meridian Cardiac's device; the demo's deal: Meridian bought PulseWave on 2017-03-31


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEDDEVKG_HOME", str(root / "home"))
        harness = Harness(root, demo_corpus_dir())
        keys = read_corpus(harness.corpus).devices["fda_id"].sort().to_list()
        harness.register(keys)
        result = harness.materialize(partition_range=(keys[0], keys[-1]))
        assert result.success
        meta = {e.event_specific_data.materialization.asset_key.to_user_string():
                e.event_specific_data.materialization.metadata for e in result.get_asset_materialization_events()}
        yield harness, meta, root / "home"


def test_the_graph_export_asset_writes_neo4j_admin_files_under_meddevkg_home(demo):
    harness, mats, home = demo
    meta, out = mats["graph_export"], home / "graph_export"
    assert "count_Device" in mats["meddevkg"] and "export_dir" not in mats["meddevkg"]
    assert "neo4j-admin database import full" in meta["neo4j_import"].value
    assert meta["export_dir"].value == str(out)
    graph = harness.table("meddevkg")
    assert {"APPLIED_BY", "MENTIONS", "IS_A"} <= set(graph["label"])
    check_export_dir(graph, out)
    with pytest.raises(duckdb.CatalogException):  # its product is the files: no table beside them
        harness.table("graph_export")
    assert meta["export_nodes"].value == graph.filter(pl.col("element") == "node").height
    assert meta["export_relationships"].value == graph.filter(pl.col("element") == "edge").height
    acquired = pl.read_csv(out / "relationships_ACQUIRED.csv", try_parse_dates=True)
    deal = acquired.filter(pl.col(":END_ID") == "company:PULSEWAVE MEDICAL")
    assert deal[":START_ID"].to_list() == ["company:MERIDIAN CARDIAC"]
    assert str(deal["close_date:date"].item()) == "2017-03-31"
    assert deal["source"].to_list() == ["demo corpus (fictional)"]  # the deal's row in the corpus' acquisitions.csv
    partners = pl.read_csv(out / "relationships_PARTNER_OF.csv")
    assert partners.height and partners["source"].null_count() == 0


def test_application_commands_answer_on_the_demo_store(demo, tmp_path, capsys):
    harness, _, _ = demo
    db = str(harness.db)
    assert main(["recall-rootcause", "--device", ACQUIRING.lower(), "--db", db]) == 0
    out = capsys.readouterr().out
    assert f"patents linked to {ACQUIRING}" in out and "other devices sharing those patents" in out

    assert main(["ma-discovery", "--device", ACQUIRING, "--db", db]) == 0
    out = capsys.readouterr().out
    assert "MERIDIAN CARDIAC <- PULSEWAVE MEDICAL (2017-03-31)" in out and "acquired" in out

    png = tmp_path / "trajectory.png"
    assert main(["trajectory", "--device", ACQUIRING, "--db", db, "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "FDA approval year: 2019" in out and "n_granted" in out
    assert png.read_bytes()[:4] == b"\x89PNG"

    assert main(["views", "--db", db]) == 0
    out = capsys.readouterr().out
    for view in ("app_device_patents", "app_shared_patents", "app_acquired_patents", "app_trajectory"):
        assert f"meddevkg.{view}:" in out
    query = shlex.split(out.split("query them with: ", 1)[1])  # the printed command runs as printed
    assert "other_fda_id" in subprocess.run(query, capture_output=True, text=True, check=True).stdout
    assert harness.table("app_acquired_patents").filter(pl.col("fda_id") == ACQUIRING).height > 0


def test_a_device_the_link_set_does_not_know_is_named_and_fails(demo, capsys):
    harness, _, _ = demo
    for command in ("recall-rootcause", "ma-discovery", "trajectory"):
        assert main([command, "--device", "P999999", "--db", str(harness.db)]) == 1
        assert "not in this link set: P999999" in capsys.readouterr().out


def _serve_recall(fake_source, monkeypatch, record: dict) -> None:
    """openFDA's device/recall endpoint, answering with `record` (as it is at each request)."""
    fake_source.route("/device/recall.json",
                      lambda *_: (200, {"meta": {"results": {"total": 1}}, "results": [record]}))
    monkeypatch.setenv("MEDDEVKG_OPENFDA_URL", fake_source.url)


def test_recall_number_is_fetched_from_openfda_and_traced(demo, fake_source, monkeypatch, capsys):
    harness, _, _ = demo
    record = {"cfres_id": "1", "product_res_number": "Z-1234-2024", "recall_status": "Open, Classified",
              "root_cause_description": "Device Design", "pma_numbers": [f"{ACQUIRING}/S003", "P999999"]}
    _serve_recall(fake_source, monkeypatch, record)
    assert main(["recall-rootcause", "--recall-number", "Z-1234-2024", "--db", str(harness.db)]) == 0
    out = capsys.readouterr().out
    assert "product_res_number=Z-1234-2024" in out and "not in this link set: P999999" in out
    assert f"patents linked to {ACQUIRING}" in out
    assert fake_source.requests[0][2]["search"] == ['product_res_number:"Z-1234-2024"']


def test_pma_numbers_of_the_product_code_are_named_so_and_a_510k_recall_traces_nothing(demo, fake_source,
                                                                                      monkeypatch, capsys):
    harness, _, _ = demo
    record = {"cfres_id": "1", "product_res_number": "Z-1234-2024", "product_code": "NGV", "pma_numbers": [],
              "k_numbers": [], "openfda": {"pma_number": [ACQUIRING, "P777777"]}}
    _serve_recall(fake_source, monkeypatch, record)
    assert main(["recall-rootcause", "--recall-number", "Z-1234-2024", "--db", str(harness.db)]) == 0
    out = capsys.readouterr().out
    assert "pma_numbers_from=product_code" in out and "come from its product code NGV" in out
    record["k_numbers"] = ["K123456"]
    assert main(["recall-rootcause", "--recall-number", "Z-1234-2024", "--db", str(harness.db)]) == 1
    out = capsys.readouterr().out
    assert "k_numbers=['K123456']" in out and "names no PMA number (a 510(k) recall" in out
    assert "patents linked to" not in out


def test_an_openfda_failure_ends_the_command_with_one_message_naming_the_source(demo, fake_source, monkeypatch):
    harness, _, _ = demo
    fake_source.inject("/device/recall.json", 403)
    monkeypatch.setenv("MEDDEVKG_OPENFDA_URL", fake_source.url)
    with pytest.raises(SystemExit) as stop:
        main(["recall-rootcause", "--recall-number", "Z-1234-2024", "--db", str(harness.db)])
    message = str(stop.value)
    assert message.startswith("openFDA device/recall") and message.count("openFDA device/recall") == 1


def test_a_recall_record_that_is_not_an_object_is_named_with_its_reason(demo, fake_source, monkeypatch, capsys):
    harness, _, _ = demo
    _serve_recall(fake_source, monkeypatch, "Z-1234-2024")  # a string, not a record
    with pytest.raises(SystemExit, match="openFDA has no device recall Z-1234-2024"):
        main(["recall-rootcause", "--recall-number", "Z-1234-2024", "--db", str(harness.db)])
    assert ('openFDA record openfda device/recall product_res_number:"Z-1234-2024"#0:? set aside: record is a str, '
            "not a JSON object") in capsys.readouterr().out
