"""One resilient JSON-over-HTTP client for every network source (openFDA, PatentsView, recalls).

Sources differ in URLs and paging, not in how they must behave on a bad network, so that lives
here once:

- 429, 5xx, timeouts, connection errors and truncated or non-JSON bodies are retried with
  exponential backoff and full jitter; a Retry-After header (seconds or HTTP date) is the minimum
  wait.
- 401/403 raise `SourceAuthError` naming the environment variable that holds the key; the key
  never appears in a message, a log line or a repr.
- Every attempt first waits for the rate limiter (a minimum interval between requests).
- Clock, sleep and random source are injectable, so tests never really wait.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Protocol
from urllib.parse import quote, quote_plus

import httpx
from pydantic import AfterValidator, BaseModel, Field, SecretStr

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class RetryPolicy(BaseModel, frozen=True):
    """How hard to try: attempts, backoff and the rate limit of one source."""

    timeout: float = Field(default=30.0, gt=0, description="Seconds per request (connect and read).")
    max_retries: int = Field(default=6, ge=0, description="Retries after the first attempt.")
    backoff_base: float = Field(default=1.0, ge=0, description="First backoff cap in seconds; doubles per retry.")
    backoff_max: float = Field(default=60.0, ge=0)
    max_retry_after: float = Field(default=300.0, ge=0, description="Longest Retry-After honoured.")
    requests_per_minute: float | None = Field(default=None, gt=0, description="None = no rate limit.")


def stripped_secret(key: SecretStr | None) -> SecretStr | None:
    """A key without surrounding whitespace; None when nothing is left.

    A key read from a file or a Kubernetes secret (--from-file) often ends in a newline, and a
    Dagster resource passes it as read. In a header, httpx then refuses every attempt with an
    opaque LocalProtocolError whose message, which httpcore logs at DEBUG, holds the header, key
    included; in a URL the key is sent encoded and refused."""
    value = key.get_secret_value().strip() if key is not None else ""
    return SecretStr(value) if value else None


ApiKey = Annotated[SecretStr | None, AfterValidator(stripped_secret)]
"""A source's key as its config holds it: stripped (`stripped_secret`), None when blank."""


class SourceError(RuntimeError):
    """A network source failed for good."""

    def __init__(self, message: str, status: int | None = None, attempts: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts


class SourceAuthError(SourceError):
    """The source refused the credentials (401/403): a configuration error, so the run stops."""


class RateLimiter:
    """At most `requests_per_minute` requests: each `acquire` waits until 60/rpm seconds have passed
    since the previous one. Thread-safe; `clock` and `sleep` are injectable for tests."""

    def __init__(self, requests_per_minute: float | None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.interval = 60.0 / requests_per_minute if requests_per_minute else 0.0
        self._clock, self._sleep = clock, sleep
        self._next: float | None = None
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Wait for the next slot; returns the seconds waited."""
        if self.interval <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            waited = 0.0
            if self._next is not None and now < self._next:
                waited = self._next - now
                self._sleep(waited)
                now = self._next
            self._next = now + self.interval
            return waited


def parse_retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date; None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


class _Backoff(Protocol):
    # Read-only, so a frozen RetryPolicy fits.
    @property
    def backoff_base(self) -> float: ...
    @property
    def backoff_max(self) -> float: ...
    @property
    def max_retry_after(self) -> float: ...


def backoff_delay(policy: _Backoff, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
    """Full jitter: uniform(0, min(max, base * 2**attempt)); never less than Retry-After (capped)."""
    cap = min(policy.backoff_max, policy.backoff_base * 2**attempt)
    delay = rng.uniform(0.0, cap)
    if retry_after is not None:
        delay = max(delay, min(retry_after, policy.max_retry_after))
    return delay


@dataclass
class ClientStats:
    requests: int = 0  # HTTP attempts actually sent
    retries: int = 0
    waited_seconds: float = 0.0  # backoff sleeps (rate-limit waits are not counted)


class _ScrubbedLog(logging.Filter):
    """A log line with a client's secret in it, written with the secret scrubbed (JsonClient._scrub)."""

    def __init__(self, scrub: Callable[[str], str]) -> None:
        super().__init__()
        self.scrub = scrub

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if (scrubbed := self.scrub(message)) != message:
            record.msg, record.args = scrubbed, None
        return True


class JsonClient:
    """GET/POST JSON with retries. `not_found_ok` turns a 404 into None (openFDA: no match)."""

    def __init__(self, name: str, policy: RetryPolicy, *, headers: Mapping[str, str] | None = None,
                 secret: SecretStr | None = None, secret_env: str | None = None,
                 transport: httpx.BaseTransport | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None,
                 limiter: RateLimiter | None = None) -> None:
        self.name = name
        self.policy = policy
        self.secret_env = secret_env
        self._secret = secret.get_secret_value() if secret is not None else ""
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.limiter = limiter or RateLimiter(policy.requests_per_minute, clock=clock, sleep=sleep)
        self.stats = ClientStats()
        self._http = httpx.Client(timeout=policy.timeout, headers=dict(headers or {}), transport=transport)
        # httpx logs each request's URL at INFO: a secret in it (a webhook's token) is scrubbed while open
        self._log_filter = _ScrubbedLog(self._scrub) if self._secret else None
        if self._log_filter:
            logging.getLogger("httpx").addFilter(self._log_filter)

    def __enter__(self) -> JsonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
        if self._log_filter:
            logging.getLogger("httpx").removeFilter(self._log_filter)

    def __repr__(self) -> str:
        return f"JsonClient(name={self.name!r})"

    def get_json(self, url: str, params: Mapping[str, Any] | None = None, *, not_found_ok: bool = False) -> Any:
        return self.request("GET", url, params=params, not_found_ok=not_found_ok)

    def post_json(self, url: str, body: Any, *, json_reply: bool = True) -> Any:
        return self.request("POST", url, json_body=body, json_reply=json_reply)

    def request(self, method: str, url: str, *, params: Mapping[str, Any] | None = None, json_body: Any = None,
                not_found_ok: bool = False, json_reply: bool = True) -> Any:
        """The decoded JSON body after retries (None when `json_reply` is false: a chat webhook answers
        a plain `ok`, and a POST repeated for that would post twice); raises SourceAuthError or SourceError."""
        attempts = self.policy.max_retries + 1
        for attempt in range(attempts):
            self.limiter.acquire()
            self.stats.requests += 1
            retry_after: float | None = None
            try:
                response = self._http.request(method, url, params=params, json=json_body)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                problem = f"{type(exc).__name__}"
            else:
                status = response.status_code
                if status in (401, 403):
                    where = f"set {self.secret_env} to a valid key" if self.secret_env else "the source needs a key"
                    raise SourceAuthError(f"{self.name} refused the credentials (HTTP {status}): {where}", status,
                                          attempt + 1)
                if status == 404 and not_found_ok:
                    return None
                if response.is_success and not json_reply:
                    return None
                if response.is_success:
                    try:
                        return response.json()
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        problem = f"HTTP {status} with a truncated or non-JSON body ({len(response.content)} bytes)"
                    except RecursionError:  # the same answer again on a retry: no source sends such JSON
                        raise SourceError(f"{self.name} {method} {self._scrub(str(response.url))}: HTTP {status} "
                                          "with JSON nested too deeply to read", status, attempt + 1) from None
                else:
                    problem = f"HTTP {status}: {self._scrub(response.text)[:200]}"  # cut after: no key half
                    if status not in RETRYABLE_STATUS:
                        raise SourceError(f"{self.name} {method} {self._scrub(str(response.url))}: {problem}",
                                          status, attempt + 1)
                    retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if attempt + 1 == attempts:
                raise SourceError(f"{self.name}: no success after {attempts} attempt(s), last {problem}",
                                  None, attempts)
            delay = backoff_delay(self.policy, attempt, self._rng, retry_after)
            log.warning("%s request attempt %d/%d failed (%s); retrying in %.2fs", self.name, attempt + 1,
                        attempts, problem, delay)
            self.stats.retries += 1
            self.stats.waited_seconds += delay
            self._sleep(delay)
        raise AssertionError("unreachable")

    def _scrub(self, text: str) -> str:
        """Remove the key from text before it reaches a message (URLs and some servers carry it), as
        written and as a URL's query encodes it (a key with `+`, `/`, `=` or a space is not left as is)."""
        if not self._secret:
            return text
        for form in sorted({self._secret, quote(self._secret, safe=""), quote_plus(self._secret)}, key=len,
                           reverse=True):
            text = text.replace(form, "***")
        return text
