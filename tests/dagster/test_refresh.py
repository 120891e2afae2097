"""New approvals from a fake openFDA: the sensor adds exactly their partitions and requests one run;
device documents come from openFDA through faults with the same table as a clean run."""

from __future__ import annotations

import json
from datetime import date

import dagster as dg
import polars as pl
import pytest

from meddevkg_dagster.assets import sources
from meddevkg_dagster.partitions import range_tags
from meddevkg_dagster.resources import OpenFDAResource, SourcesResource
from meddevkg_dagster.sensors import BATCH_TAG, new_pma_sensor

PATH = "/device/pma.json"


def _record(pma: str, decided: str, generic: str = "Transcatheter Heart Valve", supplement: str = "", **kw) -> dict:
    return {"pma_number": pma, "supplement_number": supplement, "applicant": "Aortica Medical, Inc.",
            "generic_name": generic, "trade_name": f"Lumen Valve {pma}", "product_code": "NPT",
            "advisory_committee": "CV", "decision_date": decided, "decision_code": "APPR",
            "ao_statement": f"Approval for the Lumen Valve {pma}. It is indicated for aortic stenosis.", **kw}


RECORDS = [
    _record("P260001", "2026-11-05"),
    _record("P260002", "2026-11-12"),
    _record("P260001", "2026-11-19", supplement="S001"),  # a supplement: never a new device
    _record("P260009", "2026-11-10", generic="Intraocular Lens", advisory_committee="OP"),  # not cardiovascular
    _record("P250050", "2026-11-02"),  # already a partition
]


def _serve(records: list[dict]):
    def handler(path, query, headers, body):
        search = query.get("search", [""])[0]
        if "decision_date" in search:
            hits = records
        else:
            hits = [r for r in records if f'"{r["pma_number"]}"' in search or r["pma_number"] in search]
        if not hits:
            return 404, {"error": {"code": "NOT_FOUND", "message": "No matches found!"}}
        return 200, {"meta": {"results": {"skip": 0, "limit": len(hits), "total": len(hits)}}, "results": hits}
    return handler


OPENFDA_SOURCE = SourcesResource(device_source="openfda")


@pytest.fixture
def openfda(fake_source):
    fake_source.route(PATH, _serve(RECORDS))
    return OpenFDAResource(base_url=fake_source.url, requests_per_minute=60_000, timeout=0.5)


def test_one_tick_adds_the_new_approvals_and_requests_one_run_then_nothing(openfda, monkeypatch):
    monkeypatch.setenv("MEDDEVKG_REFRESH_SINCE", "2026-11-01")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("pma_devices", ["P250050"])

    first = new_pma_sensor(dg.build_sensor_context(instance=instance,
                                                   resources={"openfda": openfda, "sources": OPENFDA_SOURCE}))
    added = [k for r in first.dynamic_partitions_requests for k in r.partition_keys]
    assert added == ["P260001", "P260002"]
    assert len(first.run_requests) == 1
    run = first.run_requests[0]
    assert (run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"]) == (
        "P260001", "P260002")
    assert run.tags[BATCH_TAG] == run.run_key
    assert json.loads(first.cursor)["since"] == "2026-11-01"  # nothing has succeeded yet

    instance.add_dynamic_partitions("pma_devices", added)  # what the daemon does with the request
    second = new_pma_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor,
                                                    resources={"openfda": openfda, "sources": OPENFDA_SOURCE}))
    assert second.run_requests == [] and second.dynamic_partitions_requests == []
    assert second.cursor == first.cursor


def test_a_malformed_record_in_the_poll_is_logged_with_its_reason(fake_source, monkeypatch, capsys):
    monkeypatch.setenv("MEDDEVKG_REFRESH_SINCE", "2026-11-01")
    fake_source.route(PATH, _serve([*RECORDS, _record("P260003", "2026-13-45"), _record("P26-004", "2026-11-06")]))
    openfda = OpenFDAResource(base_url=fake_source.url, requests_per_minute=60_000, timeout=0.5)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("pma_devices", ["P250050", "P260001", "P260002"])

    tick = new_pma_sensor(dg.build_sensor_context(instance=instance,
                                                  resources={"openfda": openfda, "sources": OPENFDA_SOURCE}))

    assert tick.run_requests == [] and json.loads(tick.cursor)["since"] == "2026-11-01"
    assert tick.skip_reason.skip_message == (
        "no new approvals since 2026-11-01; 2 record(s) set aside (see the tick's log)")
    log = capsys.readouterr().err
    assert "openFDA record openfda device/pma#5:P260003 set aside: unparseable " \
           "decision_date '2026-13-45'" in log
    assert "#6:P26-004 set aside: pma_number 'P26-004' is not a PMA number" in log


def test_with_the_corpus_as_device_source_the_sensor_skips_without_polling(openfda, fake_source):
    # Its approvals would become partitions pma_documents cannot find in the corpus: runs failing forever.
    instance = dg.DagsterInstance.ephemeral()
    result = new_pma_sensor(dg.build_sensor_context(instance=instance, resources={
        "openfda": openfda, "sources": SourcesResource(device_source="corpus")}))
    assert result.run_requests == [] and result.dynamic_partitions_requests == []
    assert "MEDDEVKG_DEVICE_SOURCE=corpus" in result.skip_reason.skip_message
    assert fake_source.requests == [] and instance.get_dynamic_partitions("pma_devices") == []


def _materialize_openfda_devices(harness, openfda, keys):
    harness.resources["sources"] = SourcesResource(device_source="openfda")
    harness.resources["openfda"] = openfda
    harness.register(keys)
    selection = dg.AssetSelection.assets("pma_documents", "pma_quarantine", "pma_supplements")
    result = dg.materialize([sources.pma_documents], instance=harness.instance, resources=harness.resources,
                            selection=selection, tags=range_tags(keys[0], keys[-1]))
    assert result.success
    return harness.table("pma_documents").sort("fda_id"), harness.table("pma_quarantine")


def test_device_documents_from_openfda_survive_faults_and_quarantine_bad_records(harness, fake_source, openfda):
    broken = _record("P260003", "13/11/2026")  # unparseable date
    fake_source.route(PATH, _serve([*RECORDS, broken]))
    keys = ["P260001", "P260002", "P260003"]
    clean, quarantine = _materialize_openfda_devices(harness, openfda, keys)
    assert clean["fda_id"].to_list() == ["P260001", "P260002"]
    assert clean.filter(pl.col("fda_id") == "P260001")["decision_date"].item() == date(2026, 11, 5)
    assert quarantine.height == 1 and "decision_date" in quarantine["reason"].item()

    fake_source.inject(PATH, 429, 500, "timeout", "truncated")
    again, quarantine_again = _materialize_openfda_devices(harness, openfda, keys)
    assert again.equals(clean)  # same final table, no duplicated rows after a re-run through faults
    assert quarantine_again.height == 1

