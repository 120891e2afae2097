"""The code location loads, with every asset, check, job and resource the design names."""

import subprocess
import sys
from pathlib import Path

import dagster as dg

from meddevkg_dagster.definitions import defs

REPO = Path(__file__).resolve().parents[2]
EXPECTED_ASSETS = {
    "pma_documents", "patents", "gold_links", "rejected_records", "company_dictionary", "meddevonto",
    "device_entities", "patent_entities", "device_embeddings", "patent_embeddings", "candidate_pool",
    "cross_encoder_scores", "training_pairs", "reranker_model", "reranked_links", "meddevkg", "graph_export",
    "link_evaluation", "pma_quarantine", "pma_supplements", "patent_quarantine", "ontology_quarantine",
    "device_entity_quarantine", "patent_entity_quarantine",
}
DEVICE_ASSETS = {"pma_documents", "pma_quarantine", "pma_supplements", "device_entities", "device_entity_quarantine",
                 "device_embeddings", "candidate_pool", "cross_encoder_scores", "reranked_links"}
PATENT_ASSETS = {"patents", "patent_quarantine", "patent_entities", "patent_entity_quarantine", "patent_embeddings"}


def test_every_asset_is_defined_and_device_and_patent_assets_are_partitioned():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == EXPECTED_ASSETS
    for key in EXPECTED_ASSETS:
        node = graph.get(dg.AssetKey(key))
        expected = "pma_devices" if key in DEVICE_ASSETS else "patent_years" if key in PATENT_ASSETS else None
        assert (node.partitions_def.name if node.partitions_def else None) == expected, key
        if expected:
            assert node.backfill_policy == dg.BackfillPolicy.single_run()
        assert node.pools == {"duckdb"}, key


def test_the_whole_graph_is_two_jobs_and_downstream_assets_read_every_patent_year():
    patents_job, meddevkg_job = defs.resolve_job_def("patents_job"), defs.resolve_job_def("meddevkg_job")
    in_patents = {k.to_user_string() for k in patents_job.asset_layer.executable_asset_keys}
    in_graph = {k.to_user_string() for k in meddevkg_job.asset_layer.executable_asset_keys}
    ontology = {"meddevonto", "ontology_quarantine"}
    assert in_patents == PATENT_ASSETS | ontology
    # one job owns the ontology: devices and patents are extracted against the same one
    assert in_patents | in_graph == EXPECTED_ASSETS and not in_patents & in_graph
    graph = defs.resolve_asset_graph()
    for key in ("candidate_pool", "cross_encoder_scores", "company_dictionary", "link_evaluation"):
        node = graph.get(dg.AssetKey(key))
        for parent in node.parent_keys & {dg.AssetKey(p) for p in PATENT_ASSETS}:
            assert isinstance(graph.get_partition_mapping(node.key, parent), dg.AllPartitionMapping), (key, parent)


def test_gpu_steps_are_tagged_and_checks_and_jobs_exist():
    graph = defs.resolve_asset_graph()
    for key in ("device_embeddings", "patent_embeddings", "cross_encoder_scores"):
        assert graph.get(dg.AssetKey(key)).tags.get("meddevkg/gpu") == "true" or \
            defs.get_assets_def(key).op.tags.get("meddevkg/gpu") == "true"
        assert graph.get(dg.AssetKey(key)).pools == {"duckdb"}  # one at a time across runs (dagster.yaml)
    checks = {k.name for k in graph.asset_check_keys}
    assert {"pma_documents_keys_unique", "device_embeddings_complete", "recall_on_gold"} <= checks
    assert defs.resolve_job_def("meddevkg_job") and defs.resolve_job_def("device_links_job")
    assert defs.resolve_job_def("patents_job")
    assert set(defs.resources) >= {"io_manager", "corpus", "embedding_model", "cross_encoder", "pipeline_config",
                                   "alerts", "entity_extractor"}
    # the stored-table checks query the IO manager's database, one DuckDB user at a time
    assert defs.resources["warehouse"].database == defs.resources["io_manager"].database
    from meddevkg_dagster.checks import CHECKS

    stored = [c for c in CHECKS if c.node_def.name != "link_evaluation_recall_on_gold"]
    assert len(stored) == 6 and all(c.node_def.pools == {"duckdb"} for c in stored)


def test_failed_runs_are_reported_from_the_start_with_the_webhook_url_an_env_var(monkeypatch):
    sensors = {s.name: s for s in defs.sensors}
    assert set(sensors) == {"new_pma_sensor", "relink_after_patent_refresh", "run_failure_alert"}
    assert sensors["run_failure_alert"].default_status == dg.DefaultSensorStatus.RUNNING  # the others start stopped
    assert sensors["run_failure_alert"].required_resource_keys == {"alerts"}
    monkeypatch.setenv("MEDDEVKG_ALERT_WEBHOOK_URL", "https://hooks.example/services/s3cr3t")
    from meddevkg_dagster.resources import build_resources

    alerts = build_resources()["alerts"]  # the UI shows the variable's name, never the URL
    assert isinstance(alerts.webhook_url, dg.EnvVar) and alerts.ui_url is None
    assert alerts.webhook_url.env_var_name == "MEDDEVKG_ALERT_WEBHOOK_URL"


def test_dagster_cli_validates_the_workspace(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
                         cwd=REPO, capture_output=True, text=True, env={"DAGSTER_HOME": str(tmp_path),
                                                                         "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout + out.stderr


def test_loading_the_definitions_prints_no_backfill_policy_beta_warning():
    # Every `meddevkg demo` and `dagster` command started with seven copies of this warning.
    out = subprocess.run([sys.executable, "-W", "default", "-c", "import meddevkg_dagster.definitions"],
                         cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "backfill_policy" not in out.stderr
