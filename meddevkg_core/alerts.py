"""Run-failure alerts: the message a failed run makes, and its POST to a chat webhook.

A Slack or Teams incoming-webhook URL carries its token in the path, so the whole URL is the
secret: it is JsonClient's secret, scrubbed from every error message and from httpx's request log
line while it is posted; no message or log line here names any of it.

The message is pure; the run-failure sensor (meddevkg_dagster/sensors.py) gathers the facts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx
from pydantic import BaseModel, SecretStr

from meddevkg_core.http_client import JsonClient, RetryPolicy, SourceError

WEBHOOK_ENV = "MEDDEVKG_ALERT_WEBHOOK_URL"
UI_URL_ENV = "MEDDEVKG_UI_URL"
MAX_ERROR_CHARS = 300

WEBHOOK_POLICY = RetryPolicy(timeout=5.0, max_retries=1, backoff_base=1.0, backoff_max=1.0, max_retry_after=5.0)
"""Short: a sensor tick has a minute (Dagster's gRPC timeout) for up to five failed runs (Dagster's
per-tick limit); a tick that overruns keeps its old cursor and would report them all again."""


def first_line(text: str | None) -> str:
    """The first non-blank line, cut to MAX_ERROR_CHARS: what went wrong, not the stack under it."""
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 3] + "..."


class RunFailureAlert(BaseModel, frozen=True):
    """One failed run, as logged and as posted."""

    job: str
    run_id: str
    failed_steps: tuple[str, ...] = ()
    error: str = ""
    run_url: str | None = None

    @classmethod
    def of(cls, job: str, run_id: str, failed_steps: Iterable[str], error: str | None,
           ui_url: str | None = None) -> RunFailureAlert:
        """`error` cut to its first line; `run_url` is the run's page when the UI's base URL is known."""
        run_url = f"{ui_url.strip().rstrip('/')}/runs/{run_id}" if ui_url and ui_url.strip() else None
        return cls(job=job, run_id=run_id, failed_steps=tuple(dict.fromkeys(failed_steps)), error=first_line(error),
                   run_url=run_url)

    def line(self) -> str:
        steps = ", ".join(self.failed_steps) or "none (the run failed outside its steps)"
        error = self.error or "unknown"
        return f"MedDevKG run {self.run_id} of {self.job} failed; failed steps: {steps}; error: {error}"

    def payload(self) -> dict[str, Any]:
        """Slack's and Teams' incoming webhooks show `text`; the facts are fields too, for other receivers."""
        text = self.line() + (f"\n{self.run_url}" if self.run_url else "")
        return {"text": text, **self.model_dump(mode="json")}


def post_alert(alert: RunFailureAlert, webhook_url: SecretStr) -> None:
    """POST the alert's payload; raises SourceError, whose message never holds the URL, when it fails."""
    try:
        url = httpx.URL(webhook_url.get_secret_value().strip())
    except httpx.InvalidURL:
        raise SourceError(f"{WEBHOOK_ENV} is not a URL") from None  # its message may quote the URL
    if url.scheme not in ("http", "https") or not url.host:
        raise SourceError(f"{WEBHOOK_ENV} is not an http(s) URL")
    secret = str(url)  # as httpx writes it in a response's URL and its log line, so scrubbing finds it
    with JsonClient("alert webhook", WEBHOOK_POLICY, secret=SecretStr(secret), secret_env=WEBHOOK_ENV) as client:
        client.post_json(secret, alert.payload(), json_reply=False)
