"""Stage 1 under Dagster with the LLM extractor (MEDDEVKG_ENTITY_EXTRACTOR=llm), against a fake
OpenAI-compatible endpoint on 127.0.0.1 (tests/fake_llm.py, the `llm` fixture): grounded mentions, the
quarantined rejects, the run's figures, and the key kept out of every event."""

from __future__ import annotations

import json
import re
import socket

import dagster as dg
from dagster._serdes import serialize_value

from meddevkg_core.corpus import read_corpus
from meddevkg_core.patent_years import in_years
from meddevkg_core.pipeline import documents
from meddevkg_dagster.cli import run_failure
from meddevkg_dagster.jobs import ONTOLOGY_ASSETS
from meddevkg_dagster.resources import build_resources
from tests.fake_llm import HALLUCINATED, KEY

DEVICE_STEP = dg.AssetSelection.assets("pma_documents", "pma_quarantine", "pma_supplements", "device_entities",
                                       "device_entity_quarantine") | ONTOLOGY_ASSETS
PATENT_STEP = dg.AssetSelection.assets("patents", "patent_quarantine", "patent_entities",
                                       "patent_entity_quarantine") | ONTOLOGY_ASSETS


def _extractor_from_env(harness):
    resource = build_resources()["entity_extractor"]
    harness.resources["entity_extractor"] = resource
    return resource


def _first_device(harness) -> tuple[str, str]:
    devices = documents(read_corpus(harness.corpus).devices, "fda_id").sort("doc_id")
    key, text = next((k, t) for k, t in devices.rows() if "stent" in t.lower())
    harness.register([key])
    return key, text


def _metadata(result, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events()
               if e.event_specific_data.materialization.asset_key.to_user_string() == asset]
    return {k: v.value for k, v in event.event_specific_data.materialization.metadata.items()}


def _failure(result) -> str:
    [failure] = [e for e in result.all_events if e.is_step_failure]
    return failure.step_failure_data.error.message.strip()


def _stored_everywhere(harness, result) -> str:
    """Every event of the run and its stored run config, serialised: where a key would leak to."""
    run = harness.instance.get_run_by_id(result.run_id)
    return serialize_value(harness.instance.all_logs(result.run_id)) + json.dumps(run.run_config, default=str)


def test_device_entities_with_the_llm_are_grounded_and_hallucinations_quarantined(harness, llm):
    resource = _extractor_from_env(harness)
    assert isinstance(resource.llm_api_key, dg.EnvVar)  # the UI shows the variable, never the key
    key, text = _first_device(harness)
    result = harness.materialize(DEVICE_STEP, partition_key=key)
    assert result.success
    mentions = harness.table("device_entities")
    assert set(mentions["doc_id"]) == {key} and "stent" in mentions["norm"].to_list()
    for row in mentions.iter_rows(named=True):  # every mention quotes the text where it says it is
        assert text[row["start"]:row["end"]] == row["mention"]
    quarantine = harness.table("device_entity_quarantine")
    assert quarantine.select("source", "record_key", "reason").rows() == [("entities", key, "span not found in text")]
    assert json.loads(quarantine["record"][0])["entity"]["span"] == HALLUCINATED

    meta = _metadata(result, "device_entities")
    assert (meta["extractor"], meta["llm_model"], meta["llm_documents"], meta["llm_requests"],
            meta["llm_cache_hits"], meta["llm_failed_documents"]) == ("llm", "fake-model", 1, 1, 0, 0)
    assert meta["rejected_mentions"] == 1 and meta["rejected_by_reason"] == {"span not found in text": 1}
    assert _metadata(result, "device_entity_quarantine")["dagster/row_count"] == 1
    [(_, path, _, headers)] = llm.requests
    assert path == "/v1/chat/completions" and headers["authorization"] == f"Bearer {KEY}"
    stored = _stored_everywhere(harness, result)
    assert "llm_cache_hits" in stored and "span not found in text" in stored and KEY not in stored

    again = harness.materialize(DEVICE_STEP, partition_key=key)  # the reply comes from the cache
    assert again.success and len(llm.requests) == 1
    meta = _metadata(again, "device_entities")
    assert (meta["llm_requests"], meta["llm_cache_hits"]) == (0, 1)
    assert harness.table("device_entities").equals(mentions)
    assert harness.table("device_entity_quarantine").height == 1  # replaced, not appended


def test_patent_entities_with_the_llm_are_stored_by_grant_year_with_their_quarantine(harness, llm):
    _extractor_from_env(harness)
    harness.register([])
    year = "2010"
    in_year = in_years(read_corpus(harness.corpus).patents, [year])
    assert in_year.height
    result = harness.materialize(PATENT_STEP, partition_key=year)
    assert result.success
    mentions, quarantine = harness.table("patent_entities"), harness.table("patent_entity_quarantine")
    assert set(mentions["patent_year"]) == {year} and set(mentions["doc_id"]) <= set(in_year["pat_id"])
    assert mentions.height > 0
    assert quarantine.height == in_year.height  # one hallucinated span per patent
    assert set(quarantine["patent_year"]) == {year} and set(quarantine["reason"]) == {"span not found in text"}
    meta = _metadata(result, "patent_entities")
    assert meta["llm_requests"] == in_year.height and meta["rejected_mentions"] == in_year.height
    assert KEY not in _stored_everywhere(harness, result)


def test_a_refused_key_fails_the_step_in_one_line_and_stores_no_mentions(harness, llm):
    _extractor_from_env(harness)
    key, _ = _first_device(harness)
    llm.inject("/v1/chat/completions", 401)
    result = harness.materialize(DEVICE_STEP, partition_key=key)
    assert not result.success
    message = _failure(result)
    assert "LLMAuthError" in message and "MEDDEVKG_LLM_API_KEY" in message and "HTTP 401" in message
    assert KEY not in message and KEY not in _stored_everywhere(harness, result)
    assert not [e for e in result.get_asset_materialization_events()
                if "entit" in e.event_specific_data.materialization.asset_key.to_user_string()]


def test_an_unreachable_endpoint_fails_the_step_naming_it(harness, llm, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MEDDEVKG_LLM_BASE_URL", f"http://127.0.0.1:{port}/v1")
    _extractor_from_env(harness)
    key, _ = _first_device(harness)
    result = harness.materialize(DEVICE_STEP, partition_key=key)
    assert not result.success
    message = _failure(result)
    assert re.search(r"LLMUnavailableError: no reply to any of the 1 document\(s\) sent", message), message
    assert KEY not in _stored_everywhere(harness, result)


def test_a_bad_extractor_is_refused_naming_the_variable(harness, monkeypatch):
    monkeypatch.setenv("MEDDEVKG_ENTITY_EXTRACTOR", "gpt")
    _extractor_from_env(harness)
    key, _ = _first_device(harness)
    result = harness.materialize(DEVICE_STEP, partition_key=key)
    assert not result.success  # as the run starts its resources, before any step
    assert run_failure(result.all_events) == ("its resources: MEDDEVKG_ENTITY_EXTRACTOR='gpt' (the entity_extractor "
                                              "resource's extractor): expected one of spacy, llm")


def test_the_llm_without_its_endpoint_is_refused_naming_the_missing_variables(harness, monkeypatch):
    monkeypatch.setenv("MEDDEVKG_ENTITY_EXTRACTOR", "llm")
    for name in ("MEDDEVKG_LLM_BASE_URL", "MEDDEVKG_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEDDEVKG_LLM_TIMEOUT", "soon")
    _extractor_from_env(harness)
    key, _ = _first_device(harness)
    result = harness.materialize(DEVICE_STEP, partition_key=key)
    assert "needs MEDDEVKG_LLM_BASE_URL and MEDDEVKG_LLM_MODEL to be set" in _failure(result)
    monkeypatch.setenv("MEDDEVKG_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEDDEVKG_LLM_MODEL", "m")
    _extractor_from_env(harness)
    result = harness.materialize(DEVICE_STEP, partition_key=key)
    assert "MEDDEVKG_LLM_TIMEOUT: " in _failure(result) and "\n" not in _failure(result)


def test_spacy_is_the_default_extractor_and_the_llm_cache_is_under_meddevkg_home(monkeypatch, tmp_path):
    for name in ("MEDDEVKG_ENTITY_EXTRACTOR", "MEDDEVKG_LLM_CACHE_DIR", "MEDDEVKG_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path))
    resource = build_resources()["entity_extractor"]
    assert resource.extractor == "spacy" and resource.llm_api_key is None
    assert resource.llm_cache_dir == str(tmp_path / "llm_cache")


def test_the_entity_assets_kinds_name_both_extractors_the_resource_may_run():
    # they said spacy alone, also when MEDDEVKG_ENTITY_EXTRACTOR=llm made every mention an LLM's
    from meddevkg_dagster.assets.features import device_entities, patent_entities

    for asset in (device_entities, patent_entities):
        kinds = {str(key.path[-1]): spec.kinds for key, spec in asset.specs_by_key.items()}
        assert {name: k for name, k in kinds.items() if "quarantine" not in name} == {
            asset.op.name: {"spacy", "llm", "duckdb"}}
