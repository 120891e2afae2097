"""The local (SQLite) event log: a batch of asset events in two transactions, on open connections.

A backfill over every device partition as one run records one event per partition per asset
(planned and materialised): 434 devices x 7 assets x 2 on the benchmark. Dagster's SQLite event
log opens a database, commits and closes it two or three times per event (about 30 ms each here),
so those events cost 50 times the pipeline's own work. Dagster already groups them into batches
when `DAGSTER_EVENT_BATCH_SIZE` is set, but only its Postgres storage writes a batch at once; the
SQLite one loops over `store_event`. This class writes a batch like the Postgres storage does (one
insert into the run's database, one transaction on the index) and keeps the same rows, so every
query the UI and the asset status cache make sees exactly what `store_event` would have written.
It builds on Dagster's SQL storage helpers (pinned Dagster); tests/dagster/test_event_log.py
compares a batched backfill with Dagster's own storage, query by query. A batch's events are
serialised once per asset rather than once per partition (event_serialization), to the same text.

Dagster's SQLite storage also opens a new connection for every read and write and closes it after.
In WAL mode closing the last connection to a database checkpoints it (two fsyncs), so a run's few
hundred step and log events cost about 7 ms each in connect, commit and close. This class keeps one
pooled connection per database for the index and the most recently used run shards instead.
Dagster's live run view learns of new events from a file watch on the run's database file, which
that checkpoint used to modify; a commit on an open connection only appends to the `-wal` file, so
after a transaction that changed rows the run's database file is touched (its mtime, no fsync).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

import dagster._check as check
import sqlalchemy as sa
from dagster import DagsterEventType, EventLogEntry, Field, StringSource
from dagster._config.config_schema import UserConfigSchema
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData

from meddevkg_dagster.event_serialization import serialize_events

BATCHED_TYPES = frozenset({
    DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_OBSERVATION,
    DagsterEventType.ASSET_MATERIALIZATION_PLANNED, DagsterEventType.ASSET_FAILED_TO_MATERIALIZE,
})
"""Asset events `SqliteEventLogStorage.store_event` mirrors into the index with tags and the
asset row and nothing else (asset check events take another path and stay one by one)."""

EVENT_SETTINGS: Mapping[str, str] = {"DAGSTER_EVENT_BATCH_SIZE": "1000"}
"""Dagster reads this per event: above 0 it hands a step's partition events (and a run's planned
events) to `store_event_batch` in batches of at most this many."""

OPEN_RUN_SHARDS = 8
"""Run databases whose connection stays open besides the index: the runs this process is writing
or the UI is reading. Older ones are closed, so a long-lived webserver holds a bounded number."""


def default_base_dir() -> str:
    """Where Dagster's default SQLite storage keeps event logs, so existing history stays visible."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise check.CheckError("DAGSTER_HOME must be set for the SQLite event log without a base_dir")
    return os.path.join(os.path.abspath(os.path.expanduser(home)), "history", "runs", "")


class BatchingSqliteEventLogStorage(SqliteEventLogStorage):
    """`SqliteEventLogStorage` whose `store_event_batch` is two transactions, not two per event, and
    whose connections stay open between events."""

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None):
        for name, value in EVENT_SETTINGS.items():  # every process on this instance batches, unless told otherwise
            os.environ.setdefault(name, value)
        self._engines: OrderedDict[str, sa.Engine] = OrderedDict()  # shard -> engine, least recently used first
        self._engines_pid = os.getpid()
        self._tables_present: set[str] = set()
        super().__init__(base_dir or default_base_dir(), inst_data=inst_data)

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None,
                          config_value: Mapping[str, Any]) -> BatchingSqliteEventLogStorage:
        return cls(inst_data=inst_data, **dict(config_value))

    @contextmanager
    def _connect(self, shard: str) -> Iterator[sa.Connection]:
        """As Dagster's `_connect` (one connection at a time, in a transaction), on a pooled engine."""
        with self._db_lock:
            check.str_param(shard, "shard")
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn:
                # SQLAlchemy types the DBAPI connection as Any | None (None once detached); a fresh one is sqlite3's
                sqlite = cast(sqlite3.Connection, conn.connection.driver_connection)
                changes = sqlite.total_changes
                with conn.begin():
                    yield conn
                if shard != INDEX_SHARD_NAME and sqlite.total_changes != changes:
                    with contextlib.suppress(FileNotFoundError):  # a wipe elsewhere removed it: no one to wake
                        os.utime(self.path_for_shard(shard))  # wake the run's watchers (module docstring)

    def _engine(self, shard: str) -> sa.Engine:
        if self._engines_pid != os.getpid():  # a forked child must not use its parent's connections
            for inherited in self._engines.values():
                inherited.dispose(close=False)
            self._engines.clear()
            self._engines_pid = os.getpid()
        engine = self._engines.pop(shard, None)
        if engine is None:
            # One connection kept open; schema set-up (`_initdb`) briefly needs a second one.
            engine = sa.create_engine(self.conn_string_for_shard(shard), pool_size=1, max_overflow=2,
                                      connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
        self._engines[shard] = engine
        runs = [s for s in self._engines if s != INDEX_SHARD_NAME]
        for old in runs[:max(0, len(runs) - OPEN_RUN_SHARDS)]:
            self._engines.pop(old).dispose()
        return engine

    def has_table(self, table_name: str) -> bool:
        """Dagster asks before every batch of asset tags, on a new connection; a table, once there, stays."""
        if table_name not in self._tables_present:
            if not super().has_table(table_name):
                return False
            self._tables_present.add(table_name)
        return True

    def _close_connections(self) -> None:
        with self._db_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()

    def wipe(self) -> None:
        self._close_connections()  # before the run databases' files are deleted
        super().wipe()

    def dispose(self) -> None:
        self._close_connections()
        super().dispose()

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        check.sequence_param(events, "events", of_type=EventLogEntry)
        batch = [e for e in events if _batchable(e)]
        if len(batch) < 2 or len({e.run_id for e in batch}) != 1:
            return super().store_event_batch(events)  # one by one, as Dagster would
        for event in events:  # e.g. a run's planned asset checks, planned with its partitions
            if not _batchable(event):
                self.store_event(event)
        events = batch
        rows = [self._event_row(e, text) for e, text in zip(events, serialize_events(events), strict=True)]
        table = SqlEventLogStorageTable
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(table.insert(), rows)
        with self.index_transaction() as conn:  # the cross-run mirror, as store_event writes it
            inserted = conn.execute(table.insert().returning(table.c.id, sort_by_parameter_order=True), rows)
            ids = [int(row[0]) for row in inserted]
            self._store_asset_event_tags(conn, events, ids)
            for i in _last_of_each_kind(events):  # the asset row keeps only the latest of each kind
                self._store_asset_event(conn, events[i], ids[i])

    def _event_row(self, event: EventLogEntry, serialized: str) -> dict[str, Any]:
        """Dagster's `_event_to_row` for an event already serialised (once, for both databases)."""
        dagster_event = event.get_dagster_event()
        assert dagster_event.asset_key is not None  # a batch holds _batchable events only
        return {"run_id": event.run_id, "event": serialized, "dagster_event_type": dagster_event.event_type_value,
                "timestamp": self._event_insert_timestamp(event), "step_key": dagster_event.step_key,
                "asset_key": dagster_event.asset_key.to_string(), "partition": dagster_event.partition or None}


def _last_of_each_kind(events: Sequence[EventLogEntry]) -> list[int]:
    """Per asset and event type, the position of the last event, in batch order.

    Each kind overwrites its own columns of the asset row (last materialisation, last run id,
    last event time), so applying the last of each kind in order leaves the row exactly as
    applying every event would.
    """
    last = {(e.get_dagster_event().asset_key, e.dagster_event_type): i for i, e in enumerate(events)}
    return sorted(last.values())


def _batchable(event: EventLogEntry) -> bool:
    return bool(event.is_dagster_event and event.dagster_event_type in BATCHED_TYPES
                and event.get_dagster_event().asset_key)
