"""openFDA device PMA (`device/pma`): the search API with its paging rules, and the bulk file.

Paging (DATA_SOURCES.md §1.3): `limit` <= 1000 and `skip` <= 25,000. The first page is requested
without `skip`, as search_after requires; if every match is reachable by `skip` the rest is paged
with `skip`, otherwise the `Link: <...search_after=...>; rel="next"` header of each response is
followed until it is absent. The two are never mixed: a request with a non-zero `skip` gets a Link
without a cursor. A 404 NOT_FOUND is openFDA's "no matches", not an error.

Retries, the rate limit (240 requests/min with or without a key), 401/403 naming
MEDDEVKG_OPENFDA_API_KEY and key scrubbing are JsonClient's (the key travels as the `api_key` query
parameter, and JsonClient scrubs it from httpx's own request log line too). Two things JsonClient does not
expose are done by a transport under it (`_PageTap`): it keeps the Link header, and it turns bytes
that are not UTF-8 into surrogate escapes, so one Latin-1 byte (FDA's source file is Latin-1)
quarantines one record in `pma_records_to_devices` instead of failing the page as undecodable JSON.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field, SecretStr

from meddevkg_core.errors import InputError
from meddevkg_core.http_client import ApiKey, ClientStats, JsonClient, RetryPolicy, SourceError
from meddevkg_core.sources.pma_records import PmaDevices, pma_records_to_devices

__all__ = ["API_KEY_ENV", "OpenFDAClient", "OpenFDAConfig", "PmaDevices", "SearchStats", "advisory_committee_search",
           "all_of", "decision_date_search", "pma_numbers_searches", "pma_records_to_devices", "read_pma_bulk"]

log = logging.getLogger(__name__)

API_KEY_ENV = "MEDDEVKG_OPENFDA_API_KEY"
PMA_PATH = "/device/pma.json"
MAX_LIMIT = 1000
MAX_SKIP = 25_000
_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?', re.IGNORECASE)
_COMMITTEE = re.compile(r"^[A-Z]{2}$")
_PMA_NUMBER = re.compile(r"^[A-Z]{1,2}\d{4,7}$")


class OpenFDAConfig(RetryPolicy, frozen=True):
    """Where openFDA is, the optional key, page size and the retry policy (RetryPolicy's fields)."""

    base_url: str = "https://api.fda.gov"
    api_key: ApiKey = Field(default=None, description=f"Optional; read from {API_KEY_ENV}.")
    requests_per_minute: float | None = Field(default=240.0, gt=0, description="openFDA's limit, key or not.")
    page_size: int = Field(default=MAX_LIMIT, ge=1, le=MAX_LIMIT)
    max_skip: int = Field(default=MAX_SKIP, ge=0, le=MAX_SKIP, description="Largest `skip` openFDA accepts.")

    @classmethod
    def from_env(cls, **overrides: Any) -> OpenFDAConfig:
        """The defaults plus the key from MEDDEVKG_OPENFDA_API_KEY when it is set (stripped: `ApiKey`)."""
        key = os.environ.get(API_KEY_ENV)
        return cls(**({"api_key": SecretStr(key)} if key else {}), **overrides)

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(**{name: getattr(self, name) for name in RetryPolicy.model_fields})


@dataclass
class SearchStats:
    """How the last search was paged; `received < total` means openFDA returned fewer than it counted."""

    search: str
    mode: str = "empty"  # empty | single | skip | search_after
    total: int = 0
    received: int = 0
    pages: int = 0


def _utf8_or_escaped(body: bytes) -> bytes:
    """Valid UTF-8 unchanged; otherwise each bad byte becomes a surrogate that json.loads restores."""
    try:
        body.decode("utf-8")
        return body
    except UnicodeDecodeError:
        return body.decode("utf-8", "surrogateescape").encode("utf-8", "surrogatepass")


class _PageTap(httpx.BaseTransport):
    """Sits under JsonClient: remembers the latest Link header and makes bodies decodable."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.link: str | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        try:
            body = response.read()
        finally:
            response.close()
        self.link = response.headers.get("link")
        drop = {"content-encoding", "content-length", "transfer-encoding"}  # the body is already decoded
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in drop]
        return httpx.Response(response.status_code, headers=headers, content=_utf8_or_escaped(body), request=request)

    def close(self) -> None:
        self.inner.close()


def _default_transport(base_url: str) -> httpx.BaseTransport:
    """Giving JsonClient a transport turns off httpx's own HTTPS_PROXY lookup, so honour it here."""
    url = httpx.URL(base_url)
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(url.host):
        return httpx.HTTPTransport(proxy=proxy)
    return httpx.HTTPTransport()


class OpenFDAEndpoint:
    """One openFDA endpoint over JsonClient: configuration, proxy, lifecycle.

    Subclasses name the endpoint and may wrap the transport (the PMA search keeps Link headers).
    """

    endpoint = ""
    path = ""

    def __init__(self, config: OpenFDAConfig | None = None, *, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config if config is not None else self._config_from_env()
        inner = transport if transport is not None else _default_transport(self.config.base_url)
        self._client = JsonClient(f"openFDA {self.endpoint}", self.config.retry_policy(), secret=self.config.api_key,
                                  secret_env=API_KEY_ENV, transport=self._wrap(inner), sleep=sleep)
        self.url = self.config.base_url.rstrip("/") + self.path

    def _config_from_env(self) -> OpenFDAConfig:
        return OpenFDAConfig.from_env()

    def _wrap(self, transport: httpx.BaseTransport) -> httpx.BaseTransport:
        return transport

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        key = "set" if self.config.api_key else "unset"
        return f"{type(self).__name__}(base_url={self.config.base_url!r}, api_key={key})"

    @property
    def stats(self) -> ClientStats:
        return self._client.stats


class OpenFDAClient(OpenFDAEndpoint):
    """`search_pma` over JsonClient; one client pages one search at a time (not thread-safe)."""

    endpoint = "device/pma"
    path = PMA_PATH

    def __init__(self, config: OpenFDAConfig | None = None, *, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.last_search: SearchStats | None = None
        super().__init__(config, transport=transport, sleep=sleep)

    def _wrap(self, transport: httpx.BaseTransport) -> httpx.BaseTransport:
        self._tap = _PageTap(transport)
        return self._tap

    def search_pma(self, search: str, *, sort: str | None = None) -> Iterator[dict[str, Any]]:
        """Every record matching `search` (openFDA syntax; see the helpers below), page by page."""
        stats = self.last_search = SearchStats(search=search)
        params: dict[str, Any] = {"search": search, "limit": self.config.page_size}
        if sort:
            params["sort"] = sort
        first = self._page(params, stats)
        if first is None:
            return
        results, stats.total = first
        stats.mode = "single"
        yield from results
        link = self._tap.link
        if stats.received >= stats.total or not results:
            return
        if stats.total <= self.config.max_skip + self.config.page_size:
            stats.mode = "skip"
            while stats.received < stats.total and stats.received <= self.config.max_skip:
                page = self._page({**params, "skip": stats.received}, stats)
                if page is None or not page[0]:
                    break
                yield from page[0]
        elif link is not None:
            stats.mode = "search_after"
            seen: set[str] = set()
            while link is not None and stats.received < stats.total:
                cursor = self._next_params(link)
                key = json.dumps(cursor, sort_keys=True)
                if key in seen:
                    raise SourceError(f"openFDA search_after loop at record {stats.received} of {stats.total}")
                seen.add(key)
                page = self._page(cursor, stats)
                if page is None or not page[0]:
                    break
                yield from page[0]
                link = self._tap.link
        else:
            raise SourceError(f"openFDA: {stats.total} matches exceed the skip ceiling ({self.config.max_skip}) and "
                              "the response has no Link header for search_after; split the search by "
                              "decision_date (decision_date_search) or read the bulk file (read_pma_bulk)")
        if stats.received < stats.total:
            log.warning("openFDA returned %d of the %d records it counted for %r (%s paging; the index may have "
                        "changed while paging)", stats.received, stats.total, search, stats.mode)

    def _page(self, params: dict[str, Any], stats: SearchStats) -> tuple[list[dict[str, Any]], int] | None:
        """(results, meta.results.total) of one request, or None for openFDA's 404 NOT_FOUND."""
        if self.config.api_key is not None:
            params = {**params, "api_key": self.config.api_key.get_secret_value()}
        body = self._client.get_json(self.url, params, not_found_ok=True)
        if body is None:
            return None
        try:
            results, total = body["results"], body["meta"]["results"]["total"]
        except (KeyError, TypeError) as exc:
            raise SourceError(f"openFDA answered without results/meta.results.total (missing {exc})") from exc
        if not isinstance(results, list) or not isinstance(total, int):
            raise SourceError("openFDA answered with a malformed results list or total")
        stats.pages += 1
        stats.received += len(results)
        return results, total

    def _next_params(self, link_header: str) -> dict[str, Any]:
        """The query of the rel="next" link, sent to our own endpoint (never to a host the link names)."""
        match = _NEXT_LINK.search(link_header)
        if match is None:
            raise SourceError("openFDA Link header has no rel=\"next\" URL")
        query = httpx.URL(match.group(1)).params
        return {k: query.get_list(k) if len(query.get_list(k)) > 1 else query[k] for k in query if k != "api_key"}


# --------------------------------------------------------------------------- search helpers


def decision_date_search(start: date, end: date) -> str:
    """`decision_date:[YYYYMMDD TO YYYYMMDD]`, both ends inclusive (spaces; the encoder makes them '+')."""
    if start > end:
        raise ValueError(f"decision date range is reversed: {start} > {end}")
    return f"decision_date:[{start:%Y%m%d} TO {end:%Y%m%d}]"


def advisory_committee_search(codes: Iterable[str]) -> str:
    """`advisory_committee:CV` or `advisory_committee:(CV OR OR)` for two-letter panel codes."""
    unique = sorted({c.strip().upper() for c in codes})
    bad = [c for c in unique if not _COMMITTEE.match(c)]
    if not unique or bad:
        raise ValueError(f"advisory committee codes must be two letters, got {bad or 'none'}")
    return f"advisory_committee:{unique[0]}" if len(unique) == 1 else f"advisory_committee:({' OR '.join(unique)})"


def pma_numbers_searches(numbers: Iterable[str], per_query: int = 100) -> list[str]:
    """`pma_number:(P1 OR P2 ...)` in chunks of `per_query`, so each URL stays short."""
    unique = sorted({n.strip().upper() for n in numbers})
    bad = [n for n in unique if not _PMA_NUMBER.match(n)]
    if bad:
        raise ValueError(f"not PMA numbers: {bad[:10]}")
    chunks = [unique[i:i + per_query] for i in range(0, len(unique), per_query)]
    return [f"pma_number:{c[0]}" if len(c) == 1 else f"pma_number:({' OR '.join(c)})" for c in chunks]


def all_of(*clauses: str) -> str:
    """Clauses joined with AND, e.g. all_of(advisory_committee_search(['CV']), decision_date_search(a, b))."""
    parts = [c for c in clauses if c]
    return " AND ".join(f"({c})" if len(parts) > 1 else c for c in parts)


# --------------------------------------------------------------------------- bulk file


def read_pma_bulk(path: str | Path) -> Iterator[object]:
    """The `results` of an openFDA bulk zip (`device-pma-0001-of-0001.json.zip`, §1.7), member by member.

    ijson is not installed, so each `.json` member is parsed whole with json.loads (the PMA file
    has one member, ~57k records, well within memory). Bytes that are not UTF-8 are kept as
    surrogate escapes so the record, not the file, is quarantined by `pma_records_to_devices`; a byte
    order mark opening a member is no part of its JSON ('utf-8-sig').
    A file that is no zip, or a member that is damaged, not JSON or no envelope, means a broken
    download: that raises InputError, naming the file and the member.
    """
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise InputError(f"{path}: not a zip file ({exc}); re-download it") from exc
    with archive:
        members = sorted(n for n in archive.namelist() if n.lower().endswith(".json"))
        if not members:
            raise InputError(f"{path}: no .json member (found {archive.namelist()[:5]})")
        for name in members:
            try:
                envelope = json.loads(archive.read(name).decode("utf-8-sig", "surrogateescape"))
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise InputError(f"{path}!{name}: damaged ({exc}); re-download the file") from exc
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}!{name}: not valid JSON ({exc}); re-download the file") from exc
            except RecursionError:
                raise InputError(f"{path}!{name}: JSON nested too deeply to be an openFDA file") from None
            results = envelope.get("results") if isinstance(envelope, dict) else None
            if not isinstance(results, list):
                raise InputError(f"{path}!{name}: no `results` list in the envelope")
            meta = envelope.get("meta")
            counted = meta.get("results") if isinstance(meta, dict) else None
            total = counted.get("total") if isinstance(counted, dict) else None  # only for the warning below
            if isinstance(total, int) and total != len(results):
                log.warning("%s!%s: meta.results.total is %d but %d records are present", path, name, total,
                            len(results))
            yield from results
