"""The run-failure alert: its message, and its POST to a chat webhook whose URL is a secret."""

import json
import logging

import pytest
from pydantic import SecretStr

from meddevkg_core.alerts import MAX_ERROR_CHARS, RunFailureAlert, first_line, post_alert
from meddevkg_core.http_client import SourceError

HOOK = "/services/T000/B000/s3cr3tT0ken"


def test_the_message_names_job_run_failed_steps_the_errors_first_line_and_links_the_run():
    alert = RunFailureAlert.of("device_links_job", "r-1", ["candidate_pool", "reranked_links", "candidate_pool"],
                               "\nValueError: no patents for P100045\n  File x.py, line 3\n", "http://ui:3000/ ")
    assert alert.payload() == {
        "text": "MedDevKG run r-1 of device_links_job failed; failed steps: candidate_pool, reranked_links; "
                "error: ValueError: no patents for P100045\nhttp://ui:3000/runs/r-1",
        "job": "device_links_job", "run_id": "r-1", "failed_steps": ["candidate_pool", "reranked_links"],
        "error": "ValueError: no patents for P100045", "run_url": "http://ui:3000/runs/r-1"}


def test_a_run_that_failed_outside_its_steps_and_no_ui_url_still_make_a_message():
    alert = RunFailureAlert.of("patents_job", "r-2", [], None, ui_url="")
    assert alert.line() == ("MedDevKG run r-2 of patents_job failed; failed steps: none (the run failed outside "
                            "its steps); error: unknown")
    assert alert.run_url is None and alert.payload()["text"] == alert.line()
    assert len(first_line("x" * 1000)) == MAX_ERROR_CHARS and first_line("x" * 1000).endswith("...")


def test_the_alert_is_posted_a_plain_ok_is_success_and_the_url_is_never_logged(fake_source, caplog):
    caplog.set_level(logging.DEBUG)
    bodies = []
    fake_source.route(HOOK, lambda path, q, h, body: (bodies.append(json.loads(body)) or (200, b"ok")))  # Slack's
    alert = RunFailureAlert.of("meddevkg_job", "r-3", ["reranked_links"], "boom")
    post_alert(alert, SecretStr(fake_source.url + HOOK + "\n"))  # from a file: a trailing newline
    assert bodies == [alert.payload()]
    assert 'POST *** "HTTP/1.0 200 OK"' in caplog.text and "s3cr3tT0ken" not in caplog.text


def test_a_failing_webhook_raises_an_error_that_does_not_name_the_url(fake_source, caplog):
    caplog.set_level(logging.DEBUG)
    alert = RunFailureAlert.of("meddevkg_job", "r-4", [], "boom")
    with pytest.raises(SourceError) as err:  # an unknown route: a revoked webhook's 404
        post_alert(alert, SecretStr(fake_source.url + HOOK))
    assert err.value.status == 404 and "s3cr3tT0ken" not in str(err.value) + caplog.text
    for bad in ("hooks.example/services/s3cr3tT0ken", "https://hooks.example/services/\as3cr3tT0ken"):
        with pytest.raises(SourceError, match="MEDDEVKG_ALERT_WEBHOOK_URL is not") as err:
            post_alert(alert, SecretStr(bad))
        assert "s3cr3tT0ken" not in str(err.value)
