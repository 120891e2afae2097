"""Incremental refresh planning: new approvals batched once, the cursor moves only after success."""

from datetime import date

import polars as pl

from meddevkg_core.refresh import RefreshCursor, plan_refresh


def _found(*rows: tuple[str, str]) -> pl.DataFrame:
    return pl.DataFrame({"fda_id": [r[0] for r in rows], "decision_date": [date.fromisoformat(r[1]) for r in rows]})


START = RefreshCursor(since=date(2026, 11, 1))


def test_new_approvals_form_one_batch_and_known_ones_are_ignored():
    plan = plan_refresh(START, _found(("P260002", "2026-11-05"), ("P260001", "2026-11-03"), ("P100045", "2026-11-02")),
                        known={"P100045"}, run_status={})
    assert plan.add_keys == ["P260001", "P260002"]
    assert [b.keys for b in plan.requests] == [["P260001", "P260002"]]
    assert plan.cursor.since == date(2026, 11, 1)  # nothing succeeded yet


def test_a_second_tick_with_nothing_new_requests_nothing():
    first = plan_refresh(START, _found(("P260001", "2026-11-03")), known=set(), run_status={})
    second = plan_refresh(first.cursor, _found(("P260001", "2026-11-03")), known={"P260001"}, run_status={})
    assert second.add_keys == [] and second.requests == []
    assert second.cursor == first.cursor


def test_the_cursor_advances_only_after_the_run_succeeds():
    first = plan_refresh(START, _found(("P260001", "2026-11-03"), ("P260002", "2026-11-05")), known=set(),
                         run_status={})
    key = first.requests[0].run_key
    running = plan_refresh(first.cursor, _found(), known={"P260001", "P260002"}, run_status={key: "STARTED"})
    assert running.cursor.since == date(2026, 11, 1) and running.requests == []
    done = plan_refresh(running.cursor, _found(), known={"P260001", "P260002"}, run_status={key: "SUCCESS"})
    assert done.cursor.since == date(2026, 11, 5) and done.cursor.pending == []
    assert [b.keys for b in done.completed] == [["P260001", "P260002"]]


def test_a_failed_batch_is_requested_again_and_holds_the_cursor_back():
    first = plan_refresh(START, _found(("P260001", "2026-11-03")), known=set(), run_status={})
    failed_key = first.requests[0].run_key
    retry = plan_refresh(first.cursor, _found(("P260001", "2026-11-03")), known={"P260001"},
                         run_status={failed_key: "FAILURE"})
    assert [b.keys for b in retry.requests] == [["P260001"]] and retry.add_keys == []
    assert retry.requests[0].run_key != failed_key and retry.requests[0].attempt == 2
    # a later batch succeeds while the failed one is still pending: the cursor stays before it
    later = plan_refresh(retry.cursor, _found(("P260009", "2026-11-20")), known={"P260001"}, run_status={})
    later_key = later.requests[0].run_key
    after = plan_refresh(later.cursor, _found(), known={"P260001", "P260009"},
                         run_status={later_key: "SUCCESS", retry.requests[0].run_key: "STARTED"})
    assert after.cursor.since == date(2026, 11, 3)


def test_cursor_round_trips_as_json():
    plan = plan_refresh(START, _found(("P260001", "2026-11-03")), known=set(), run_status={})
    assert RefreshCursor.model_validate_json(plan.cursor.model_dump_json()) == plan.cursor
