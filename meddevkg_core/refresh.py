"""Incremental refresh: which new approvals to link next, and when the cursor may move.

The new-approvals sensor polls openFDA for originals decided on or after `since`. Each tick:

1. a pending batch whose run succeeded is done; one whose run failed or was cancelled is
   requested again (a new attempt, a new run key); one still queued or running waits;
2. approvals not yet known as device partitions and not in a pending batch form one new batch
   (its keys added as partitions, one run requested for all of them);
3. `since` moves to the latest decision date of the batches that succeeded, but never past the
   earliest decision date of a batch still pending: the cursor only advances after success, and a
   failed batch is never skipped. The poll is inclusive of `since`; known keys are ignored, so
   approvals published late for an already-seen date are still picked up.

Pure: the sensor passes in what it found and the run statuses; tests need no Dagster.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import date

import polars as pl
from pydantic import BaseModel, Field

DONE = frozenset({"SUCCESS"})
FAILED = frozenset({"FAILURE", "CANCELED"})


class PendingBatch(BaseModel):
    keys: list[str]
    min_date: date
    max_date: date
    attempt: int = 1

    @property
    def run_key(self) -> str:
        digest = hashlib.sha1(",".join(self.keys).encode()).hexdigest()[:12]
        return f"new-pma-{digest}-attempt-{self.attempt}"


class RefreshCursor(BaseModel):
    """The sensor's cursor, stored as JSON on the instance."""

    since: date
    pending: list[PendingBatch] = Field(default_factory=list)


@dataclass(frozen=True)
class RefreshPlan:
    cursor: RefreshCursor
    add_keys: list[str] = field(default_factory=list)
    requests: list[PendingBatch] = field(default_factory=list)
    completed: list[PendingBatch] = field(default_factory=list)


def plan_refresh(cursor: RefreshCursor, found: pl.DataFrame, known: set[str],
                 run_status: dict[str, str]) -> RefreshPlan:
    """One tick. `found`: fda_id, decision_date of selected originals decided on or after `since`;
    `known`: current device partitions; `run_status`: run key -> the latest run's status name."""
    waiting: list[PendingBatch] = []
    requests: list[PendingBatch] = []
    completed: list[PendingBatch] = []
    for batch in cursor.pending:
        status = run_status.get(batch.run_key)
        if status in DONE:
            completed.append(batch)
        elif status in FAILED:
            retry = batch.model_copy(update={"attempt": batch.attempt + 1})
            waiting.append(retry)
            requests.append(retry)
        else:
            waiting.append(batch)
    in_flight = {k for batch in waiting for k in batch.keys}
    fresh = (found.select("fda_id", pl.col("decision_date").cast(pl.Date))
             .filter(~pl.col("fda_id").is_in(sorted(known | in_flight)))
             .unique("fda_id").sort("fda_id"))
    add_keys: list[str] = []
    if fresh.height:
        batch = PendingBatch(keys=fresh["fda_id"].to_list(), min_date=fresh["decision_date"].min(),
                             max_date=fresh["decision_date"].max())
        waiting.append(batch)
        requests.append(batch)
        add_keys = batch.keys
    since = max([cursor.since, *(b.max_date for b in completed)])
    if waiting:
        since = min([since, *(b.min_date for b in waiting)])
    since = max(since, cursor.since)  # never backwards
    return RefreshPlan(RefreshCursor(since=since, pending=waiting), add_keys, requests, completed)
