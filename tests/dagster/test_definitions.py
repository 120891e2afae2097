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
    "cross_encoder_scores", "training_pairs", "reranker_model", "reranked_links", "meddevkg", "link_evaluation",
    "pma_quarantine", "patent_quarantine",
}
DEVICE_ASSETS = {"pma_documents", "pma_quarantine", "device_entities", "device_embeddings", "candidate_pool",
                 "cross_encoder_scores", "reranked_links"}


def test_every_asset_is_defined_and_device_assets_are_partitioned():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == EXPECTED_ASSETS
    for key in EXPECTED_ASSETS:
        node = graph.get(dg.AssetKey(key))
        partitioned = node.partitions_def is not None
        assert partitioned == (key in DEVICE_ASSETS), key
        if partitioned:
            assert node.partitions_def.name == "pma_devices"
            assert node.backfill_policy == dg.BackfillPolicy.single_run()
        assert node.pools == {"duckdb"}, key


def test_gpu_steps_are_tagged_and_checks_and_jobs_exist():
    graph = defs.resolve_asset_graph()
    for key in ("device_embeddings", "patent_embeddings", "cross_encoder_scores"):
        assert graph.get(dg.AssetKey(key)).tags.get("meddevkg/gpu") == "true" or \
            defs.get_assets_def(key).op.tags.get("meddevkg/gpu") == "true"
    checks = {k.name for k in graph.asset_check_keys}
    assert {"pma_documents_keys_unique", "device_embeddings_complete", "recall_on_gold"} <= checks
    assert defs.resolve_job_def("meddevkg_job") and defs.resolve_job_def("device_links_job")
    assert set(defs.resources) >= {"io_manager", "corpus", "embedding_model", "cross_encoder", "pipeline_config"}


def test_dagster_cli_validates_the_workspace(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
                         cwd=REPO, capture_output=True, text=True, env={"DAGSTER_HOME": str(tmp_path),
                                                                         "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout + out.stderr
