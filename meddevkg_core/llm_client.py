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
from pydantic import BaseModel, Field

from meddevkg_core.http_client import (  # noqa: F401  (re-exported: the LLM client's public names)
    RETRYABLE_STATUS,
    ApiKey,
    ClientStats,
    JsonClient,
    RateLimiter,
    RetryPolicy,
    SourceAuthError,
    SourceError,
    parse_retry_after,
)
from meddevkg_core.unstorable_text import LONE_SURROGATE

log = logging.getLogger(__name__)

ENV_PREFIX = "MEDDEVKG_LLM_"
API_KEY_ENV = ENV_PREFIX + "API_KEY"
ENV_FIELDS = ("base_url", "model", "api_key", "cache_dir", "requests_per_minute", "timeout", "max_retries")
"""Settings LLMConfig.from_env reads, each from MEDDEVKG_LLM_<NAME> (e.g. MEDDEVKG_LLM_BASE_URL)."""


class LLMConfig(BaseModel, frozen=True):
    """Where and how to call the LLM. Temperature 0 so the same input gives the same answer."""

    base_url: str = Field(description="OpenAI-compatible API root, e.g. https://api.deepseek.com/v1.")
    model: str = Field(description="Model name sent in the request; part of the cache key.")
    api_key: ApiKey = Field(default=None, description=f"Bearer token; from {API_KEY_ENV}. None = no header.")
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
    """POST {base_url}/chat/completions and return the assistant's message text.

    The HTTP behaviour (retries, backoff, rate limit, key scrubbing) is JsonClient's; this class
    adds the chat payload, the reply format and the LLM's own error types.
    """

    def __init__(self, config: LLMConfig, *, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None, limiter: RateLimiter | None = None) -> None:
        self.config = config
        policy = RetryPolicy(timeout=config.timeout, max_retries=config.max_retries, backoff_base=config.backoff_base,
                             backoff_max=config.backoff_max, max_retry_after=config.max_retry_after,
                             requests_per_minute=config.requests_per_minute)
        headers = {"Content-Type": "application/json"}
        if config.api_key is not None and config.api_key.get_secret_value():
            headers["Authorization"] = f"Bearer {config.api_key.get_secret_value()}"
        self._json = JsonClient("LLM endpoint", policy, headers=headers, secret=config.api_key,
                                secret_env=API_KEY_ENV, transport=transport, sleep=sleep, clock=clock, rng=rng,
                                limiter=limiter)
        self.limiter = self._json.limiter
        self.stats = self._json.stats
        self.url = config.base_url.rstrip("/") + "/chat/completions"

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._json.close()

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
        try:
            body = self._json.post_json(self.url, payload)
        except SourceAuthError as exc:
            raise LLMAuthError(f"LLM endpoint {self.url} refused the credentials (HTTP {exc.status}); "
                               f"set {API_KEY_ENV} to a valid API key for model {self.config.model!r}") from None
        except SourceError as exc:
            raise LLMRequestError(f"{self.url}: {exc}", exc.status, exc.attempts) from None
        return self._content(body)

    def _content(self, body: Any) -> str:
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            shown = self._json._scrub(json.dumps(body))[:300]
            raise LLMRequestError(f"{self.url}: reply is not a chat completion ({type(exc).__name__}): {shown!r}",
                                  200, self.stats.requests) from None
        if not isinstance(content, str):
            raise LLMRequestError(f"{self.url}: reply has no text content: {self._json._scrub(repr(content))[:300]}",
                                  200, self.stats.requests)
        if LONE_SURROGATE.search(content):  # not storable: the cache and the tables are UTF-8
            raise LLMRequestError(f"{self.url}: reply text is not valid Unicode (a lone surrogate): "
                                  f"{self._json._scrub(repr(content))[:300]}", 200, self.stats.requests)
        return content
