"""run_failure_alert on real failed runs of a tiny job in a temporary instance: each failure logged
and posted once to a fake webhook whose URL (a secret) never shows in a log or a tick."""

from __future__ import annotations

import json
import logging

import dagster as dg

from meddevkg_dagster.resources import AlertsResource
from meddevkg_dagster.sensors import run_failure_alert

HOOK = "/services/T000/B000/s3cr3tT0ken"


@dg.op
def read_corpus():
    raise ValueError("devices.csv: no fda_id column\n  (a second line the alert leaves out)")


@dg.job
def tiny_job():
    read_corpus()


def _ticks(instance: dg.DagsterInstance, alerts: AlertsResource):
    """Evaluate the sensor as the daemon does, carrying its cursor from tick to tick."""
    cursor = None
    while True:
        tick = run_failure_alert.evaluate_tick(
            dg.build_sensor_context(instance=instance, cursor=cursor, resources={"alerts": alerts}))
        assert not [r.error for r in tick.dagster_run_reactions if r.error]
        cursor = tick.cursor
        yield tick


def test_a_failed_run_is_logged_and_posted_once_and_the_webhook_url_never_shows(fake_source, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    bodies = []
    fake_source.route(HOOK, lambda path, q, h, body: (bodies.append(json.loads(body)) or (200, b"ok")))
    alerts = AlertsResource(webhook_url=fake_source.url + HOOK, ui_url="http://dagster.example:3000")
    with dg.instance_for_test() as instance:
        ticks = _ticks(instance, alerts)
        first = next(ticks)  # the first tick only sets the cursor: earlier failures are not reported
        run_id = tiny_job.execute_in_process(instance=instance, raise_on_error=False).run_id
        seen = [next(ticks), next(ticks)]  # the second tick must not alert the same run again
    assert bodies == [{
        "text": f"MedDevKG run {run_id} of tiny_job failed; failed steps: read_corpus; error: ValueError: "
                f"devices.csv: no fda_id column\nhttp://dagster.example:3000/runs/{run_id}",
        "job": "tiny_job", "run_id": run_id, "failed_steps": ["read_corpus"],
        "error": "ValueError: devices.csv: no fda_id column", "run_url": f"http://dagster.example:3000/runs/{run_id}"}]
    out = capsys.readouterr()
    assert f"MedDevKG run {run_id} of tiny_job failed; failed steps: read_corpus; error: ValueError" in out.err
    shown = out.out + out.err + caplog.text + repr([first, *seen])
    assert "s3cr3tT0ken" not in shown


def test_a_failing_webhook_is_logged_and_the_next_failed_run_is_still_posted(fake_source, capsys):
    bodies = []
    fake_source.route(HOOK, lambda path, q, h, body: (bodies.append(json.loads(body)) or (200, b"ok")))
    fake_source.inject(HOOK, 400)  # the first post is refused (not retried)
    with dg.instance_for_test() as instance:
        ticks = _ticks(instance, AlertsResource(webhook_url=fake_source.url + HOOK))
        next(ticks)
        runs = [tiny_job.execute_in_process(instance=instance, raise_on_error=False).run_id for _ in range(2)]
        next(ticks)
    assert [b["run_id"] for b in bodies] == runs[1:] and bodies[0]["run_url"] is None
    err = capsys.readouterr().err
    assert f"run {runs[0]}: the alert webhook failed: alert webhook POST ***: HTTP 400" in err
    assert all(f"MedDevKG run {r} of tiny_job failed" in err for r in runs) and "s3cr3tT0ken" not in err


def test_without_a_webhook_failed_runs_are_only_logged_one_failed_outside_its_steps_too(fake_source, capsys):
    with dg.instance_for_test() as instance:
        ticks = _ticks(instance, AlertsResource())
        next(ticks)
        run_id = tiny_job.execute_in_process(instance=instance, raise_on_error=False).run_id
        outside = instance.add_run(dg.DagsterRun(job_name="patents_job", run_id="r-outside"))
        instance.report_run_failed(outside)  # as run monitoring does when a run worker dies
        next(ticks)
    err = capsys.readouterr().err
    assert f"MedDevKG run {run_id} of tiny_job failed; failed steps: read_corpus" in err
    assert ("MedDevKG run r-outside of patents_job failed; failed steps: none (the run failed outside its steps); "
            "error: This run has been marked as failed from outside the execution context.") in err
    assert not fake_source.requests
