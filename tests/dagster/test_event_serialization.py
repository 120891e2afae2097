"""Per-asset templated serialisation writes exactly what Dagster's serialiser writes, event by event."""

import dagster as dg
import pytest
from dagster._serdes import serialize_value

from meddevkg_dagster import event_serialization
from meddevkg_dagster.event_log import BatchingSqliteEventLogStorage, _batchable
from meddevkg_dagster.event_serialization import TIMESTAMP_SENTINEL, serialize_events

KEYS = [f"P{i:03d}" for i in range(12)]
parts = dg.StaticPartitionsDefinition(KEYS)


@dg.asset(partitions_def=parts)
def devices(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    for i, key in enumerate(context.partition_keys):  # as the store's IO manager counts each partition's rows
        context.add_asset_metadata({"dagster/row_count": i}, partition_key=key)
    return dg.MaterializeResult(metadata={"rows": 3 * len(context.partition_keys), "note": 'quotes " and é'})


@dg.asset(partitions_def=parts, deps=[devices])
def links(context: dg.AssetExecutionContext) -> None:
    for key in context.partition_keys[:3]:  # partition-scoped metadata: these events differ beyond the key
        context.add_asset_metadata({"scoped": key}, partition_key=key)


@pytest.fixture(scope="module")
def logs():
    job = dg.Definitions(assets=[devices, links]).resolve_implicit_global_asset_job_def()
    tags = {"dagster/asset_partition_range_start": KEYS[0], "dagster/asset_partition_range_end": KEYS[-1]}
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, tags=tags)
        assert result.success
        return instance.all_logs(result.run_id)


def test_a_backfills_events_serialise_exactly_as_dagster_serialises_them(logs, monkeypatch):
    calls = []
    monkeypatch.setattr(event_serialization, "serialize_value", lambda v: calls.append(v) or serialize_value(v))
    assert serialize_events(logs) == [serialize_value(e) for e in logs]
    partition_events = [e for e in logs if e.is_dagster_event and e.get_dagster_event().partition]
    assert len(partition_events) == 4 * len(KEYS)  # planned and materialised, two assets
    assert len(calls) < len(logs) - len(partition_events) / 2  # most partition events came from a template


def test_a_partitions_own_row_count_is_templated_too(logs, monkeypatch):
    calls = []
    monkeypatch.setattr(event_serialization, "serialize_value", lambda v: calls.append(v) or serialize_value(v))
    counted = [e for e in logs if e.is_dagster_event and e.get_dagster_event().is_step_materialization
               and e.get_dagster_event().asset_key == dg.AssetKey("devices")]
    assert len(counted) == len(KEYS)
    assert serialize_events(counted) == [serialize_value(e) for e in counted]
    assert len(calls) == 1


def test_keys_that_look_like_json_or_the_sentinels_come_out_intact(logs):
    event = next(e for e in logs if e.is_dagster_event and e.get_dagster_event().partition)
    data = event.dagster_event.event_specific_data
    odd = [f'"{TIMESTAMP_SENTINEL}"', 'a"b\\c', "é\x00", repr(TIMESTAMP_SENTINEL)]
    events = []
    for i, key in enumerate(odd):
        changed = (data._replace(materialization=data.materialization._replace(partition=key))
                   if hasattr(data, "materialization") else data._replace(partition=key))
        events.append(event._replace(timestamp=event.timestamp + i,
                                     dagster_event=event.dagster_event._replace(event_specific_data=changed)))
    assert serialize_events(events) == [serialize_value(e) for e in events]


def test_stored_rows_are_dagsters_rows(logs, tmp_path):
    storage = BatchingSqliteEventLogStorage(base_dir=str(tmp_path))
    try:
        batch = [e for e in logs if _batchable(e)]
        assert batch
        for event, text in zip(batch, serialize_events(batch), strict=True):
            assert storage._event_row(event, text) == storage._event_to_row(event)
    finally:
        storage.dispose()
