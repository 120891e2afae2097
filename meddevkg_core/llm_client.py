"""An OpenAI-compatible chat-completions client over httpx: retries, backoff, rate limit.

Used by the optional LLM entity extractor (llm_extraction.py). Nothing here knows about
entities: it sends messages to POST {base_url}/chat/completions and returns the reply text.

- 429, 5xx, timeouts and connection errors are retried with exponential backoff and full jitter;
  a Retry-After header (seconds or HTTP date) is honoured as the minimum wait.
- 401/403 raise LLMAuthError naming the environment variable of the key; the key itself never
  appears in a message, a log line or a repr (pydantic SecretStr).
- Every attempt first waits for the rate limiter (a minimum interval between requests).
- Clock, sleep and random source are injectable, so tests never really wait.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, Field, SecretStr

from meddevkg_core.http_client import (  # noqa: F401  (re-exported: the LLM client's public names)
    RETRYABLE_STATUS,
    ClientStats,
    RateLimiter,
    backoff_delay,
    parse_retry_after,
)

log = logging.getLogger(__name__)

ENV_PREFIX = "MEDDEVKG_LLM_"
API_KEY_ENV = ENV_PREFIX + "API_KEY"
ENV_FIELDS = ("base_url", "model", "api_key", "cache_dir", "requests_per_minute", "timeout", "max_retries")
"""Settings LLMConfig.from_env reads, each from MEDDEVKG_LLM_<NAME> (e.g. MEDDEVKG_LLM_BASE_URL)."""


class LLMConfig(BaseModel, frozen=True):
    """Where and how to call the LLM. Temperature 0 so the same input gives the same answer."""

    base_url: str = Field(description="OpenAI-compatible API root, e.g. https://api.deepseek.com/v1.")
    model: str = Field(description="Model name sent in the request; part of the cache key.")
    api_key: SecretStr | None = Field(default=None, description=f"Bearer token; from {API_KEY_ENV}. None = no header.")
    timeout: float = 60.0
    max_retries: int = Field(default=5, ge=0, description="Retries after the first attempt (429, 5xx, timeouts).")
    backoff_base: float = Field(default=1.0, ge=0, description="First backoff cap in seconds; doubles per retry.")
    backoff_max: float = Field(default=60.0, ge=0)
    max_retry_after: float = Field(default=300.0, ge=0, description="Longest Retry-After the client will honour.")
    requests_per_minute: float | None = Field(default=60.0, gt=0, description="None = no rate limit.")
    temperature: float = 0.0
    max_tokens: int | None = 2048
    json_mode: bool = Field(default=True, description='Send response_format={"type": "json_object"}.')
    cache_dir: Path | None = Field(default=None, description="Response cache directory; None = no disk cache.")
    prompt_version: str = "v1"
    max_consecutive_failures: int = Field(
        default=5, ge=1, description="Abort the run after this many documents in a row whose request failed."
    )

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> LLMConfig:
        """Read MEDDEVKG_LLM_BASE_URL, _MODEL, _API_KEY, _CACHE_DIR, _REQUESTS_PER_MINUTE, _TIMEOUT,
        _MAX_RETRIES; keyword overrides win. A missing base URL or model names its variable."""
        env = os.environ if environ is None else environ
        values = {name: env[ENV_PREFIX + name.upper()] for name in ENV_FIELDS if env.get(ENV_PREFIX + name.upper())}
        values.update(overrides)
        missing = [ENV_PREFIX + name.upper() for name in ("base_url", "model") if not values.get(name)]
        if missing:
            raise ValueError(f"LLM extraction needs {' and '.join(missing)} to be set")
        return cls(**values)


class LLMError(RuntimeError):
    """Any failure of the LLM client."""


class LLMAuthError(LLMError):
    """The endpoint refused the credentials (401/403): a configuration error, so the run stops."""


class LLMRequestError(LLMError):
    """A request failed for good: a non-retryable status, retries exhausted, or an unreadable reply."""

    def __init__(self, message: str, status: int | None = None, attempts: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts


class ChatClient:
    """POST {base_url}/chat/completions and return the assistant's message text."""

    def __init__(self, config: LLMConfig, *, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None, limiter: RateLimiter | None = None) -> None:
        self.config = config
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.limiter = limiter or RateLimiter(config.requests_per_minute, clock=clock, sleep=sleep)
        self.stats = ClientStats()
        headers = {"Content-Type": "application/json"}
        if config.api_key is not None and config.api_key.get_secret_value():
            headers["Authorization"] = f"Bearer {config.api_key.get_secret_value()}"
        self._http = httpx.Client(timeout=config.timeout, headers=headers, transport=transport)
        self.url = config.base_url.rstrip("/") + "/chat/completions"

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:
        return f"ChatClient(url={self.url!r}, model={self.config.model!r})"

    def complete(self, messages: Sequence[dict[str, str]]) -> str:
        """The reply text of one chat completion, after retries; raises LLMAuthError or LLMRequestError."""
        payload: dict[str, Any] = {"model": self.config.model, "messages": list(messages),
                                   "temperature": self.config.temperature}
        if self.config.max_tokens is not None:
            payload["max_tokens"] = self.config.max_tokens
        if self.config.json_mode:
            payload["response_format"] = {"type": "json_object"}
        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            self.limiter.acquire()
            self.stats.requests += 1
            retry_after: float | None = None
            try:
                response = self._http.post(self.url, json=payload)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code in (401, 403):
                    raise LLMAuthError(
                        f"LLM endpoint {self.url} refused the credentials (HTTP {response.status_code}); "
                        f"set {API_KEY_ENV} to a valid API key for model {self.config.model!r}"
                    )
                if response.is_success:
                    return self._content(response, attempt + 1)
                problem = f"HTTP {response.status_code}: {self._scrub(response.text[:300])}"
                if response.status_code not in RETRYABLE_STATUS:
                    raise LLMRequestError(f"{self.url}: {problem}", response.status_code, attempt + 1)
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if attempt + 1 == attempts:
                raise LLMRequestError(f"{self.url}: no success after {attempts} attempt(s), last {problem}",
                                      None, attempts)
            delay = self.backoff(attempt, retry_after)
            log.warning("LLM request attempt %d/%d failed (%s); retrying in %.2fs", attempt + 1, attempts,
                        problem, delay)
            self.stats.retries += 1
            self.stats.waited_seconds += delay
            self._sleep(delay)
        raise AssertionError("unreachable")

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        return backoff_delay(self.config, attempt, self._rng, retry_after)

    def _content(self, response: httpx.Response, attempts: int) -> str:
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            body = self._scrub(response.text[:300])
            raise LLMRequestError(f"{self.url}: reply is not a chat completion ({type(exc).__name__}): {body!r}",
                                  response.status_code, attempts) from None
        if not isinstance(content, str):
            raise LLMRequestError(f"{self.url}: reply has no text content: {content!r:.300}",
                                  response.status_code, attempts)
        return content

    def _scrub(self, text: str) -> str:
        """Remove the key from server text before it reaches a message (some servers echo it)."""
        key = self.config.api_key.get_secret_value() if self.config.api_key is not None else ""
        return text.replace(key, "***") if key else text
