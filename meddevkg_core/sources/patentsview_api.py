"""The PatentSearch API (DATA_SOURCES.md §2.3) -> the corpus patents table, for the weekly refresh.

`https://search.patentsview.org/api/v1/patent/` takes q (query), f (fields), s (sort) and o
(options) as a POST JSON body or as URL-encoded JSON on GET, with the key in the `X-Api-Key`
header. Pages come by cursor: sort by patent_id and send the last patent_id of a page as
`o.after`; a page shorter than `o.size` (max 1,000) is the last. The limit is 45 requests a
minute per key. Retries, Retry-After, the rate limit and secret scrubbing are `JsonClient`'s;
records are filtered with the same `PatentFilter` and built by the same `assemble_patents` as the
bulk files, so a refresh adds exactly the rows a full rebuild would have.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field, SecretStr

from meddevkg_core.http_client import ApiKey, JsonClient, RetryPolicy, SourceAuthError, SourceError
from meddevkg_core.sources.patentsview import (
    PatentFilter,
    PatentParts,
    PatentTable,
    PatentTableStats,
    assemble_patents,
    is_patent_id,
    parse_code,
    parse_iso_date,
    rejected_frame,
    rejected_row,
)
from meddevkg_core.unstorable_text import LONE_SURROGATE

SOURCE = "patentsview_api"
API_KEY_ENV = "MEDDEVKG_PATENTSVIEW_API_KEY"
DEFAULT_BASE_URL = "https://search.patentsview.org/api/v1"
MAX_PAGE_SIZE = 1000
REQUESTS_PER_MINUTE = 45.0

PATENT_FIELDS: tuple[str, ...] = (
    "patent_id", "patent_type", "patent_title", "patent_abstract", "patent_date",
    "application.filing_date",
    "assignees.assignee_sequence", "assignees.assignee_type", "assignees.assignee_organization",
    "assignees.assignee_individual_name_first", "assignees.assignee_individual_name_last",
    "cpc_current.cpc_sequence", "cpc_current.cpc_group_id",
)
"""Everything schemas.PATENTS and the filter need, as PatentSearch field paths."""


class PatentSearchConfig(BaseModel, frozen=True):
    """Where and how to call PatentSearch; the key comes from MEDDEVKG_PATENTSVIEW_API_KEY."""

    base_url: str = DEFAULT_BASE_URL
    api_key: ApiKey = Field(default=None, description=f"Usually from the {API_KEY_ENV} variable.")
    method: Literal["POST", "GET"] = Field(default="POST", description="POST for long queries (the filter's).")
    page_size: int = Field(default=MAX_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE)
    policy: RetryPolicy = RetryPolicy(requests_per_minute=REQUESTS_PER_MINUTE)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **values: Any) -> PatentSearchConfig:
        key = (os.environ if environ is None else environ).get(API_KEY_ENV)
        return cls(api_key=SecretStr(key) if key else None, **values)


def open_client(config: PatentSearchConfig, *, transport: httpx.BaseTransport | None = None,
                sleep: Callable[[float], None] = time.sleep) -> JsonClient:
    """A JsonClient that sends the key as X-Api-Key; no key at all fails here, before any request."""
    if config.api_key is None or not config.api_key.get_secret_value():
        raise SourceAuthError(f"PatentsView PatentSearch needs an API key: set {API_KEY_ENV}")
    return JsonClient("PatentsView PatentSearch", config.policy,
                      headers={"X-Api-Key": config.api_key.get_secret_value(), "Accept": "application/json"},
                      secret=config.api_key, secret_env=API_KEY_ENV, transport=transport, sleep=sleep)


def granted_between_query(start: date, end: date, patent_filter: PatentFilter) -> dict[str, Any]:
    """Grant dates in [start, end] and the filter's patent types; CPC, title and assignee rules
    are applied to the records, exactly as for the bulk files."""
    clauses: list[dict[str, Any]] = [{"_gte": {"patent_date": start.isoformat()}},
                                     {"_lte": {"patent_date": end.isoformat()}}]
    if patent_filter.patent_types is not None:
        clauses.append({"_or": [{"patent_type": t} for t in sorted(patent_filter.patent_types)]})
    return {"_and": clauses}


def _page_records(body: Any, entity: str) -> list[Any]:
    if not isinstance(body, dict):
        raise SourceError(f"PatentSearch: expected a JSON object, got {type(body).__name__}")
    if body.get("error"):
        raise SourceError(f"PatentSearch reported an error: {str(body.get('error'))[:200]}")
    records = body.get(entity)
    if records is None and not body.get("count"):
        return []
    if not isinstance(records, list):
        raise SourceError(f"PatentSearch: no list under {entity!r} (keys: {', '.join(map(str, body))})")
    return records


def iter_pages(client: JsonClient, config: PatentSearchConfig, query: Mapping[str, Any],
               fields: Sequence[str] = PATENT_FIELDS, endpoint: str = "patent",
               options: Mapping[str, Any] | None = None) -> Iterator[list[Any]]:
    """Every page of a query, in patent_id order, following the `after` cursor; `options` go into
    every request's `o` beside the paging ones."""
    url = f"{config.base_url.rstrip('/')}/{endpoint}/"
    entity = endpoint.rsplit("/", 1)[-1] + "s"
    after: str | None = None
    while True:
        paging = {"size": config.page_size} | ({"after": after} if after is not None else {})
        request = {"q": query, "f": list(fields), "s": [{"patent_id": "asc"}], "o": {**(options or {}), **paging}}
        if config.method == "POST":
            body = client.post_json(url, request)
        else:
            body = client.get_json(url, {k: json.dumps(v, separators=(",", ":")) for k, v in request.items()})
        records = _page_records(body, entity)
        yield records
        if len(records) < config.page_size:
            return
        last = records[-1].get("patent_id") if isinstance(records[-1], dict) else None
        if last is None or str(last) == after:
            raise SourceError(f"PatentSearch: the paging cursor did not advance (after={after!r})")
        after = str(last)


def _text(value: Any) -> str:
    """A scalar as stripped text; an object, a list or a boolean raises ValueError, so that the record
    or entry is quarantined instead of read as its Python repr ("['Heart valve']", "False"). So does a
    lone surrogate (a JSON "\\ud800" escape): no UTF-8 table can hold it."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"a {type(value).__name__}, not text")
    text = str(value).strip()
    if LONE_SURROGATE.search(text):
        raise ValueError("not valid Unicode: a lone surrogate")
    return text


def _withdrawn(value: Any) -> bool:
    """The withdrawn flag: a JSON boolean, or a code as the bulk tables write it ("0" is not withdrawn)."""
    return value if isinstance(value, bool) else bool(parse_code(value))


class _Collector:
    """Turns API records into PatentParts with the filter applied; bad records are quarantined."""

    def __init__(self, patent_filter: PatentFilter, stats: PatentTableStats) -> None:
        self.filter, self.stats = patent_filter, stats
        self.parts: dict[str, PatentParts] = {}
        self.seen: set[str] = set()
        self.rejected: list[dict[str, str]] = []

    def reject(self, key: str, problem: str, record: Any) -> None:
        self.stats.rejected["patent"] += 1
        self.rejected.append(rejected_row(SOURCE, key, f"{key}: {problem}", json.dumps(record, default=str)))

    def nested(self, record: Mapping[str, Any], group: str, key: str) -> list[Mapping[str, Any]]:
        """A nested group as a list of objects (the API sends lists; a single object is tolerated); an
        entry that is no object (null holds nothing), or a group that is neither, is quarantined and
        the patent kept."""
        value = record.get(group)
        if value is None:
            return []
        if isinstance(value, Mapping):
            return [value]
        if not isinstance(value, list):
            self.reject(key, f"{group} is a {type(value).__name__}, not a list of objects", value)
            return []
        for entry in value:
            if entry is not None and not isinstance(entry, Mapping):
                self.reject(key, f"{group} entry is a {type(entry).__name__}, not a JSON object", entry)
        return [entry for entry in value if isinstance(entry, Mapping)]

    def add(self, record: Any, where: str) -> None:
        self.stats.rows_read["records"] += 1
        if not isinstance(record, Mapping):
            return self.reject(where, "not a JSON object", record)
        try:
            patent_id = _text(record.get("patent_id"))
        except ValueError as exc:
            return self.reject(where, f"bad patent_id ({exc})", record)
        key = f"patent {patent_id}" if patent_id else where
        if not is_patent_id(patent_id):
            return self.reject(key, "missing patent_id" if not patent_id else "malformed patent_id", record)
        try:
            grant_date = parse_iso_date(_text(record.get("patent_date")))
            if grant_date is None:
                raise ValueError("empty")
        except ValueError as exc:
            return self.reject(key, f"bad patent_date ({exc})", record)
        text: dict[str, str] = {}
        for name in ("patent_title", "patent_abstract", "patent_type"):
            try:
                text[name] = _text(record.get(name))
            except ValueError as exc:
                return self.reject(key, f"bad {name} ({exc})", record)
        try:
            withdrawn = _withdrawn(record.get("withdrawn"))
        except ValueError as exc:
            return self.reject(key, f"bad withdrawn flag ({exc})", record)
        if patent_id in self.seen:
            self.stats.duplicates += 1
            return self.reject(key, "duplicate patent_id (the first record is kept)", record)
        self.seen.add(patent_id)
        filing_date = None
        for application in self.nested(record, "application", key)[:1]:
            try:
                filing_date = parse_iso_date(_text(application.get("filing_date")))
            except ValueError as exc:
                self.reject(key, f"bad filing_date ({exc}); the patent is kept without it", application)
        assignees: list[tuple[int, int | None, str]] = []
        for position, entry in enumerate(self.nested(record, "assignees", key)):
            try:
                sequence, kind = parse_code(entry.get("assignee_sequence")), parse_code(entry.get("assignee_type"))
            except ValueError as exc:
                self.reject(key, f"bad assignee_sequence or assignee_type ({exc})", entry)
                continue
            try:
                name = _text(entry.get("assignee_organization")) or " ".join(
                    _text(entry.get(f"assignee_individual_name_{p}")) for p in ("first", "last")).strip()
            except ValueError as exc:
                self.reject(key, f"bad assignee name ({exc})", entry)
                continue
            assignees.append((position if sequence is None else sequence, kind, name))
        cpc: list[tuple[int, str]] = []
        for position, entry in enumerate(self.nested(record, "cpc_current", key)):
            try:
                sequence = parse_code(entry.get("cpc_sequence"))
            except ValueError as exc:
                self.reject(key, f"bad cpc_sequence ({exc})", entry)
                continue
            try:
                symbol = _text(entry.get("cpc_group_id"))
            except ValueError as exc:
                self.reject(key, f"bad cpc_group_id ({exc})", entry)
                continue
            if symbol:
                cpc.append((position if sequence is None else sequence, symbol))
        title = text["patent_title"]
        reason = self.filter.reject_reason(
            patent_type=text["patent_type"], withdrawn=withdrawn, title=title,
            cpc_codes=[code for _, code in cpc], assignee_types=[kind for _, kind, _ in assignees])
        if reason:
            self.stats.filtered_out[reason] += 1
            return None
        self.parts[patent_id] = PatentParts(
            patent_id, title, grant_date, abstract=text["patent_abstract"] or None,
            filing_date=filing_date, cpc=cpc,
            assignees=[(s, n) for s, k, n in assignees if self.filter.admits_assignee(k)])
        return None


def patents_from_records(pages: Iterator[list[Any]] | Sequence[list[Any]],
                         patent_filter: PatentFilter | None = None) -> PatentTable:
    """Pages of PatentSearch patent records -> (patents, rejected, stats); the first copy of a
    patent_id wins, later copies are quarantined."""
    stats = PatentTableStats(source=SOURCE)
    collector = _Collector(patent_filter if patent_filter is not None else PatentFilter.paper(), stats)
    for page_number, records in enumerate(pages, 1):
        for position, record in enumerate(records, 1):
            collector.add(record, f"page {page_number} record {position}")
    patents, rejected = assemble_patents(collector.parts.values(), SOURCE)
    collector.rejected.extend(rejected)
    stats.rejected["patent"] += len(rejected)
    stats.patents = patents.height
    return PatentTable(patents, rejected_frame(collector.rejected), stats)


def fetch_patents_granted(client: JsonClient, config: PatentSearchConfig, start: date, end: date, *,
                          patent_filter: PatentFilter | None = None) -> PatentTable:
    """Patents granted from `start` to `end` (inclusive) that pass the filter (default: the paper's)."""
    if start > end:
        raise ValueError(f"start {start} is after end {end}")
    patent_filter = patent_filter if patent_filter is not None else PatentFilter.paper()
    before = client.stats.requests
    # The API leaves out withdrawn patents unless told otherwise, and the records do not say which are:
    # the filter's choice goes into the request, or exclude_withdrawn=False would change nothing.
    pages = iter_pages(client, config, granted_between_query(start, end, patent_filter),
                       options={"exclude_withdrawn": patent_filter.exclude_withdrawn})
    table = patents_from_records(pages, patent_filter)
    table.stats.requests = client.stats.requests - before
    return table
