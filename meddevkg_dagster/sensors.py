"""New approvals flow in by themselves: poll openFDA, add device partitions, link just those;
and a failed run is reported.

The planning (which keys, when the cursor moves) is pure and lives in meddevkg_core.refresh;
this sensor only gathers its inputs (openFDA, the instance's partitions and run statuses) and
turns the plan into partition requests and one run per batch. The failure alert's message and
its delivery are meddevkg_core.alerts'.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import date, timedelta

import dagster as dg

from meddevkg_core.alerts import RunFailureAlert
from meddevkg_core.http_client import SourceError
from meddevkg_core.refresh import RefreshCursor, plan_refresh
from meddevkg_dagster.jobs import device_links_job
from meddevkg_dagster.partitions import PMA_DEVICES, pma_devices, range_tags
from meddevkg_dagster.resources import AlertsResource, OpenFDAResource, SourcesResource

START_ENV = "MEDDEVKG_REFRESH_SINCE"
DEFAULT_LOOKBACK_DAYS = 30
BATCH_TAG = "meddevkg/new_pma_batch"


def initial_cursor(today: date) -> RefreshCursor:
    """Where a sensor with no cursor starts: MEDDEVKG_REFRESH_SINCE, else 30 days back."""
    start = os.environ.get(START_ENV)
    return RefreshCursor(since=date.fromisoformat(start) if start else today - timedelta(days=DEFAULT_LOOKBACK_DAYS))


def _run_status(instance: dg.DagsterInstance, run_key: str) -> str | None:
    runs = instance.get_runs(filters=dg.RunsFilter(tags={BATCH_TAG: run_key}), limit=1)
    return runs[0].status.value if runs else None


@dg.sensor(job=device_links_job, minimum_interval_seconds=6 * 3600, default_status=dg.DefaultSensorStatus.STOPPED,
           description="Poll openFDA for cardiovascular PMA originals decided since the cursor; add their device "
                       "partitions and request one run that links just them. The cursor moves only after success.")
def new_pma_sensor(context: dg.SensorEvaluationContext, openfda: OpenFDAResource,
                   sources: SourcesResource) -> dg.SensorResult:
    if sources.device_source != "openfda":
        # Its devices would become partitions that pma_documents, reading the corpus, cannot find: every
        # run would fail, be requested again, and the cursor would never move.
        return dg.SensorResult(skip_reason=f"MEDDEVKG_DEVICE_SOURCE={sources.device_source}: this sensor adds "
                                           "openFDA approvals, for MEDDEVKG_DEVICE_SOURCE=openfda only")
    today = date.today()
    cursor = RefreshCursor.model_validate_json(context.cursor) if context.cursor else initial_cursor(today)
    statuses = {b.run_key: s for b in cursor.pending if (s := _run_status(context.instance, b.run_key))}
    found, rejected = openfda.selected_originals(cursor.since, today)
    # A malformed record cannot be selected or stored (it names no partition it could be quarantined in):
    # it is logged at every tick whose window holds it. It does not hold the cursor: openFDA may never
    # correct it, and every later approval would wait; once corrected, `meddevkg partitions --add-devices`.
    for key, reason in rejected.select("record_key", "reason").iter_rows():
        context.log.warning(f"openFDA record {key} set aside: {reason}")
    known = set(context.instance.get_dynamic_partitions(PMA_DEVICES))
    plan = plan_refresh(cursor, found, known, statuses)
    invalid = f"; {rejected.height} record(s) set aside (see the tick's log)" if rejected.height else ""
    context.log.info(f"openFDA: {found.height} selected original(s) decided {cursor.since}..{today}{invalid}; "
                     f"{len(plan.add_keys)} new, {len(plan.completed)} batch(es) done, "
                     f"{len(plan.cursor.pending)} pending; since -> {plan.cursor.since}")
    # A batch's keys were added in one request, so they are neighbours in the instance's order.
    requests = [dg.RunRequest(run_key=b.run_key, tags={BATCH_TAG: b.run_key, **range_tags(b.keys[0], b.keys[-1])})
                for b in plan.requests]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[pma_devices.build_add_request(plan.add_keys)] if plan.add_keys else [],
        cursor=plan.cursor.model_dump_json(),
        skip_reason=None if requests else f"no new approvals since {plan.cursor.since}{invalid}",
    )


def _error_message(context: dg.RunFailureSensorContext, steps: Sequence[dg.DagsterEvent]) -> str:
    """The first failed step's error, else the run's: a step's user-code error is wrapped in Dagster's
    "Error occurred while executing op", so the exception under it is the one that says what failed."""
    error = steps[0].step_failure_data.error if steps else getattr(context.failure_event.event_specific_data,
                                                                    "error", None)
    while error is not None and error.cls_name == "DagsterExecutionStepExecutionError" and error.cause:
        error = error.cause
    return error.message if error is not None else context.failure_event.message or ""


# Running by default, unlike new_pma_sensor and the patent refresh's schedule and sensor: it starts no
# run and calls nothing unless a webhook is set, and an alert that has to be turned on first is missing
# on the day it is needed.
@dg.run_failure_sensor(default_status=dg.DefaultSensorStatus.RUNNING,
                       description="Log each failed run of this code location (job, run id, failed steps, the "
                                   "error's first line) and post it to MEDDEVKG_ALERT_WEBHOOK_URL when set.")
def run_failure_alert(context: dg.RunFailureSensorContext, alerts: AlertsResource) -> None:
    run = context.dagster_run
    steps = context.get_step_failure_events()
    alert = RunFailureAlert.of(run.job_name, run.run_id, [e.step_key for e in steps if e.step_key],
                               _error_message(context, steps), alerts.ui_url)
    context.log.error(alert.line())
    if not alerts.webhook_url:
        return
    try:
        alerts.post(alert)
    except SourceError as exc:
        # Not raised: the cursor moves on either way, and the tick's other failed runs are still reported.
        context.log.warning(f"run {run.run_id}: the alert webhook failed: {exc}")


SENSORS = [new_pma_sensor, run_failure_alert]
