"""The batching SQLite event log: the same rows as Dagster's own, written in batches.

A backfill over many partitions is run on two instances, one with Dagster's SqliteEventLogStorage
and one with BatchingSqliteEventLogStorage, and everything the UI and the asset status cache read
is compared; the batching instance must not have stored its partition events one by one.
"""

import shutil
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.event_log import SqliteEventLogStorage

from meddevkg_dagster.event_log import EVENT_SETTINGS, BatchingSqliteEventLogStorage

REPO = Path(__file__).resolve().parents[2]
KEYS = [f"P{i:06d}" for i in range(40)]
parts = dg.StaticPartitionsDefinition(KEYS)


@dg.asset(partitions_def=parts)
def upstream(context: dg.AssetExecutionContext) -> None:
    context.log.info(f"{len(context.partition_keys)} partitions")


@dg.asset(partitions_def=parts, deps=[upstream])
def downstream(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"partitions": len(context.partition_keys)})


@dg.asset_check(asset=downstream)
def downstream_ok() -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=True)


BATCHING = {"module": "meddevkg_dagster.event_log", "class": "BatchingSqliteEventLogStorage"}


def _backfill(instance: dg.DagsterInstance) -> str:
    defs = dg.Definitions(assets=[upstream, downstream], asset_checks=[downstream_ok])
    job = defs.resolve_implicit_global_asset_job_def()
    tags = {"dagster/asset_partition_range_start": KEYS[0], "dagster/asset_partition_range_end": KEYS[-1]}
    result = job.execute_in_process(instance=instance, tags=tags)
    assert result.success
    return result.run_id


def _view(instance: dg.DagsterInstance, run_id: str) -> dict:
    """What the UI reads: event counts, materialised partitions, the latest event per partition, asset rows."""
    logs = instance.all_logs(run_id)
    view: dict = {"events": Counter(e.dagster_event_type for e in logs if e.is_dagster_event)}
    for name in ("upstream", "downstream"):
        key = dg.AssetKey(name)
        records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1000).records
        latest = instance.get_latest_materialization_event(key)
        planned = instance.get_latest_planned_materialization_info(key)
        (record,) = instance.get_asset_records([key])
        view[name] = {
            "materialized": instance.get_materialized_partitions(key),
            "per_partition": Counter(r.partition_key for r in records),
            "run_ids": {r.run_id for r in records},
            "latest_partition": latest.dagster_event.partition if latest else None,
            "planned_run": planned.run_id if planned else None,
            "asset_row_run": record.asset_entry.last_run_id,
            "asset_row_partition": record.asset_entry.last_materialization.dagster_event.partition,
            "tag_keys": sorted(instance.event_log_storage.get_event_tags_for_asset(key)[0] or {}),
            "check": instance.event_log_storage.get_asset_check_execution_history(
                dg.AssetCheckKey(key, "downstream_ok"), limit=5)[0].status if name == "downstream" else None,
        }
    return view


def _without_run_ids(view: dict, run_id: str) -> dict:
    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, set):
            return {"<run>" if v == run_id else v for v in value}
        return "<run>" if value == run_id else value

    return clean(view)


def test_a_batched_backfill_stores_exactly_what_dagster_stores_one_by_one(monkeypatch, tmp_path):
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", EVENT_SETTINGS["DAGSTER_EVENT_BATCH_SIZE"])
    one_by_one = Counter()
    plain_store = SqliteEventLogStorage.store_event

    def counting(self, event):
        if isinstance(self, BatchingSqliteEventLogStorage) and event.dagster_event_type in (
                dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED):
            one_by_one[event.dagster_event_type] += 1
        return plain_store(self, event)

    monkeypatch.setattr(SqliteEventLogStorage, "store_event", counting)
    views = {}
    for name, overrides in (("dagster", {}), ("batching", {"event_log_storage": {
            **BATCHING, "config": {"base_dir": str(tmp_path / "events")}}})):
        with dg.instance_for_test(overrides=overrides) as instance:
            assert isinstance(instance.event_log_storage, BatchingSqliteEventLogStorage) == (name == "batching")
            run_id = _backfill(instance)
            views[name] = _without_run_ids(_view(instance, run_id), run_id)
    assert views["batching"] == views["dagster"]
    assert views["batching"]["events"][dg.DagsterEventType.ASSET_MATERIALIZATION] == 2 * len(KEYS)
    assert views["batching"]["upstream"]["materialized"] == set(KEYS)
    assert not one_by_one, f"partition events were stored one by one: {dict(one_by_one)}"


def test_the_project_instance_uses_it_in_dagsters_default_layout(monkeypatch, tmp_path):
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        storage = instance.event_log_storage
        assert isinstance(storage, BatchingSqliteEventLogStorage)
        assert Path(storage._base_dir) == home / "history" / "runs"  # where runs of older instances are
        import os

        assert os.environ["DAGSTER_EVENT_BATCH_SIZE"] == EVENT_SETTINGS["DAGSTER_EVENT_BATCH_SIZE"]
        _backfill(instance)
        assert instance.get_materialized_partitions(dg.AssetKey("downstream")) == set(KEYS)


def test_without_dagster_home_or_base_dir_it_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with pytest.raises(Exception, match="DAGSTER_HOME"):
        BatchingSqliteEventLogStorage()


def _batching_instance(tmp_path: Path):
    return dg.instance_for_test(overrides={"event_log_storage": {
        **BATCHING, "config": {"base_dir": str(tmp_path / "events")}}})


def test_a_run_reuses_open_connections_instead_of_opening_one_per_event(tmp_path):
    import sqlalchemy as sa

    opened = Counter()

    def count(dbapi_connection, _record) -> None:  # every new SQLite connection, whatever the pool
        opened[Path(dbapi_connection.execute("PRAGMA database_list").fetchone()[2]).name] += 1

    with _batching_instance(tmp_path) as instance:
        _backfill(instance)  # creates the schema of the index and of a first run database
        sa.event.listen(sa.pool.Pool, "connect", count)
        try:
            run_id = _backfill(instance)
        finally:
            sa.event.remove(sa.pool.Pool, "connect", count)
        storage = instance.event_log_storage
        assert instance.get_materialized_partitions(dg.AssetKey("downstream")) == set(KEYS)
        assert len(instance.all_logs(run_id)) > 100
        # one connection for the new run's database and at most one more for its schema set-up;
        # the index database's connection was already open
        assert opened[f"{run_id}.db"] <= 2 and not opened["index.db"], dict(opened)
    assert not storage._engines, "disposing the instance closes the pooled connections"


def test_open_run_databases_are_bounded_and_wipe_and_fork_start_afresh(tmp_path):
    from meddevkg_dagster.event_log import OPEN_RUN_SHARDS

    @dg.asset
    def tiny() -> None:
        return None

    job = dg.Definitions(assets=[tiny]).resolve_implicit_global_asset_job_def()
    with _batching_instance(tmp_path) as instance:
        storage = instance.event_log_storage
        runs = [job.execute_in_process(instance=instance).run_id for _ in range(OPEN_RUN_SHARDS + 3)]
        assert len(storage._engines) == OPEN_RUN_SHARDS + 1 and "index" in storage._engines
        assert runs[0] not in storage._engines and runs[-1] in storage._engines
        assert len(instance.all_logs(runs[0])) > 0  # a closed run database opens again when read

        index_engine = storage._engines["index"]
        storage._engines_pid = -1  # as a forked child sees it
        job.execute_in_process(instance=instance)
        assert storage._engines["index"] is not index_engine

        storage.wipe()
        assert not list((tmp_path / "events").glob(f"{runs[-1]}.db*"))
        assert job.execute_in_process(instance=instance).success


def test_a_watcher_of_a_run_sees_events_written_on_an_open_connection(tmp_path):
    """The UI follows a run through a file watch on its database, which a WAL commit alone does not touch."""
    import time

    def log(message: str) -> dg.EventLogEntry:
        return dg.EventLogEntry(error_info=None, level="INFO", user_message=message, run_id="run-1",
                                timestamp=time.time())

    storage = BatchingSqliteEventLogStorage(base_dir=str(tmp_path))
    try:
        storage.store_event(log("first"))  # creates the run's database and keeps its connection open
        seen: list[str] = []
        storage.watch("run-1", None, lambda entry, _cursor: seen.append(entry.user_message))
        time.sleep(0.5)  # the observer thread starts
        storage.store_event(log("second"))
        deadline = time.monotonic() + 10
        while "second" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "second" in seen
        reads_before = len(seen)
        storage.get_records_for_run("run-1")  # a read changes nothing, so it wakes no one
        time.sleep(1)
        assert len(seen) == reads_before
    finally:
        storage.dispose()
