"""PatentsView patents for the corpus: the paper's patent filter and the one way a patent row is built.

Bulk files (`patentsview_bulk`) and the PatentSearch API (`patentsview_api`) both end here, so a
patent reads the same whichever source delivered it: organisational assignees in
assignee-sequence order joined by "; ", CPC symbols in cpc-sequence order, and text = title + " "
+ abstract, as `corpus.py` builds it for a patents table without a text column.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from functools import cache
from importlib import resources
from typing import Literal, NamedTuple

import polars as pl
from pydantic import BaseModel

from meddevkg_core import schemas
from meddevkg_core.unstorable_text import is_blank

ASSIGNEE_SEPARATOR = "; "
TEXT_SEPARATOR = " "  # corpus._normalise_columns joins title and abstract with one space
MIN_PLAUSIBLE_YEAR = 1790  # the first US patent act; earlier years are corrupt dates
MAX_RECORD_CHARS = 2000  # quarantined payloads are cut here so one bad row cannot bloat the table

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
PATENT_ID = re.compile(r"(?:D|PP|RE|H|T|X|RX|AI)?[1-9][0-9]*")
"""7654321, D900000, RE49000, PP30000, H2000, T999001: no leading zeros, letter prefixes kept. A
padded "07654321" or a "US7654321" is no PatentsView id: it would be another patent, joined to no
abstract, CPC code or assignee of the real one."""
_FILTER_RULES = ("patent_type", "assignee_type", "cpc_prefix", "manufacturing_cpc_prefix", "title_keyword")

CpcScope = Literal["medical", "manufacturing"]


def parse_iso_date(value: str | None) -> date | None:
    """YYYY-MM-DD -> date, empty -> None; anything else raises ValueError so the row is quarantined."""
    text = (value or "").strip()
    if not text:
        return None
    if not _ISO_DATE.fullmatch(text):
        raise ValueError(f"not YYYY-MM-DD: {text[:40]!r}")
    parsed = date.fromisoformat(text)
    if parsed.year < MIN_PLAUSIBLE_YEAR:
        raise ValueError(f"implausible year in {text!r}")
    return parsed


def parse_code(value: object) -> int | None:
    """An integer code written as 2, "2" or "2.0" (pandas-written floats); empty -> None, else ValueError
    (a JSON boolean too: it is no code, and read as "none" it would silently fail the assignee rule)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"a bool, not a code: {value}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text:
        return None
    number = float(text)
    if not number.is_integer():
        raise ValueError(f"not an integer: {text[:20]!r}")
    return int(number)


def is_patent_id(value: str) -> bool:
    return bool(PATENT_ID.fullmatch(value))


def normalise_cpc(code: str) -> str:
    """'A61F 2/24' and 'A61F2/24' are the same symbol; the g_ tables and the API write the latter."""
    if code.isupper() and code.isprintable() and " " not in code:
        return code  # the common case, checked in C for ~100M bulk rows
    return "".join(code.split()).upper()


@cache
def _prefix_tests(prefixes: tuple[str, ...]) -> tuple[str, ...]:
    """A main-group prefix (A61B5) must end at the '/', or it would admit A61B50; others match as written."""
    return tuple(p if "/" in p or len(p) <= 4 else p + "/" for p in map(normalise_cpc, prefixes))


@cache
def _keyword_regex(keywords: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(k) for k in keywords), re.IGNORECASE) if keywords else re.compile(r"(?!)")


class PatentFilter(BaseModel, frozen=True):
    """Which patents enter the corpus. None on a rule means "no restriction", so PatentFilter()
    admits every patent and `PatentFilter.paper()` is the paper's scope (METHOD.md §0)."""

    patent_types: frozenset[str] | None = None
    assignee_types: frozenset[int] | None = None
    cpc_prefixes: tuple[str, ...] | None = None
    manufacturing_cpc_prefixes: tuple[str, ...] = ()
    title_keywords: tuple[str, ...] = ()
    exclude_withdrawn: bool = True

    @classmethod
    def paper(cls) -> PatentFilter:
        return paper_patent_filter()

    @property
    def title_regex(self) -> re.Pattern[str]:
        return _keyword_regex(self.title_keywords)

    def code_scope(self, code: str) -> CpcScope | None:
        """Where one CPC symbol falls: a cardiovascular-device prefix, a manufacturing one, or neither."""
        if self.cpc_prefixes is None:
            return "medical"
        code = normalise_cpc(code)
        if code.startswith(_prefix_tests(self.cpc_prefixes)):
            return "medical"
        if code.startswith(_prefix_tests(self.manufacturing_cpc_prefixes)):
            return "manufacturing"
        return None

    def cpc_scope(self, codes: Iterable[str]) -> CpcScope | None:
        """medical if any symbol is in a cardiovascular-device prefix, manufacturing if only a
        manufacturing one matches, else None. Without CPC prefixes every patent is medical."""
        if self.cpc_prefixes is None:
            return "medical"
        scope: CpcScope | None = None
        for code in codes:
            scope = self.code_scope(code) or scope
            if scope == "medical":
                break
        return scope

    def type_reason(self, patent_type: str, withdrawn: bool) -> str | None:
        if self.patent_types is not None and patent_type.strip().lower() not in self.patent_types:
            return "patent_type"
        if withdrawn and self.exclude_withdrawn:
            return "withdrawn"
        return None

    def cpc_reason(self, scope: CpcScope | None, title: str) -> str | None:
        if scope == "medical":
            return None
        if scope == "manufacturing":
            return None if self.title_regex.search(title) else "manufacturing_title"
        return "cpc"

    def admits_assignee(self, assignee_type: int | None) -> bool:
        return self.assignee_types is None or assignee_type in self.assignee_types

    def assignee_reason(self, assignee_types: Iterable[int | None]) -> str | None:
        if self.assignee_types is None or any(self.admits_assignee(t) for t in assignee_types):
            return None
        return "assignee_type"

    def reject_reason(self, *, patent_type: str, withdrawn: bool, title: str, cpc_codes: Iterable[str],
                      assignee_types: Iterable[int | None]) -> str | None:
        """The first rule a complete patent breaks (a stats key), or None when it is admitted."""
        return (self.type_reason(patent_type, withdrawn) or self.cpc_reason(self.cpc_scope(cpc_codes), title)
                or self.assignee_reason(assignee_types))


def read_patent_filter(data: bytes) -> PatentFilter:
    """A filter from `rule,value,source` CSV rows (the shipped file's format)."""
    values: dict[str, list[str]] = {rule: [] for rule in _FILTER_RULES}
    for row in csv.DictReader(io.StringIO(data.decode("utf-8"))):
        rule, value = row["rule"].strip(), row["value"].strip()
        if rule not in values:
            raise ValueError(f"patent filter: unknown rule {rule!r} (known: {', '.join(_FILTER_RULES)})")
        values[rule].append(value)
    return PatentFilter(  # a rule without rows restricts nothing
        patent_types=frozenset(v.lower() for v in values["patent_type"]) if values["patent_type"] else None,
        assignee_types=frozenset(int(v) for v in values["assignee_type"]) if values["assignee_type"] else None,
        cpc_prefixes=tuple(values["cpc_prefix"]) if values["cpc_prefix"] else None,
        manufacturing_cpc_prefixes=tuple(values["manufacturing_cpc_prefix"]),
        title_keywords=tuple(values["title_keyword"]),
    )


@cache
def paper_patent_filter() -> PatentFilter:
    """The shipped paper filter (meddevkg_core/data/patent_filter/patent_filter.csv)."""
    path = resources.files("meddevkg_core") / "data" / "patent_filter" / "patent_filter.csv"
    return read_patent_filter(path.read_bytes())


@dataclass
class PatentParts:
    """One patent as gathered from several tables or one API record, before it becomes a row."""

    pat_id: str
    title: str
    grant_date: date
    abstract: str | None = None
    filing_date: date | None = None
    assignees: list[tuple[int, str]] = field(default_factory=list)  # (assignee_sequence, name)
    cpc: list[tuple[int, str]] = field(default_factory=list)  # (cpc_sequence, symbol)


def _ordered_unique(pairs: list[tuple[int, str]]) -> list[str]:
    """Values by sequence (stable: equal sequences keep arrival order), first occurrence kept."""
    seen: dict[str, None] = {}
    for _, value in sorted(pairs, key=lambda pair: pair[0]):
        if value and value not in seen:
            seen[value] = None
    return list(seen)


def assemble_patents(parts: Iterable[PatentParts], source: str) -> tuple[pl.DataFrame, list[dict[str, str]]]:
    """Rows in schemas.PATENTS, sorted by pat_id; a patent with neither title nor abstract is quarantined."""
    rows: list[dict[str, object]] = []
    rejected: list[dict[str, str]] = []
    for p in parts:
        title, abstract = p.title.strip(), (p.abstract or "").strip()
        text = TEXT_SEPARATOR.join(t for t in (title, abstract) if t)
        if is_blank(text):
            rejected.append(rejected_row(source, f"patent:{p.pat_id}", f"patent {p.pat_id}: no title and no abstract",
                                         p.pat_id))
            continue
        assignees = _ordered_unique(p.assignees)
        rows.append({"pat_id": p.pat_id, "title": title, "text": text,
                     "assignee": ASSIGNEE_SEPARATOR.join(assignees) if assignees else None,
                     "grant_date": p.grant_date, "filing_date": p.filing_date,
                     "cpc_codes": _ordered_unique([(s, normalise_cpc(c)) for s, c in p.cpc])})
    frame = pl.DataFrame(rows, schema=schemas.PATENTS) if rows else schemas.empty(schemas.PATENTS)
    return frame.sort("pat_id"), rejected


def printable(text: str) -> str:
    """Undecodable bytes (kept as surrogates while reading) shown as U+FFFD, cut to a bounded size."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")[:MAX_RECORD_CHARS]


def rejected_row(source: str, record_key: str, reason: str, record: str) -> dict[str, str]:
    return {"source": source, "record_key": printable(record_key), "reason": printable(reason),
            "record": printable(record)}


def rejected_frame(rows: list[dict[str, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=schemas.REJECTED_RECORDS) if rows else schemas.empty(schemas.REJECTED_RECORDS)


@dataclass
class PatentTableStats:
    """What a build read, quarantined and filtered out: the asset's metadata."""

    source: str
    rows_read: Counter[str] = field(default_factory=Counter)  # per table (bulk) or "records" (API)
    rejected: Counter[str] = field(default_factory=Counter)  # per table
    filtered_out: Counter[str] = field(default_factory=Counter)  # per filter rule
    duplicates: int = 0
    requests: int = 0
    patents: int = 0

    def as_metadata(self) -> dict[str, int | str]:
        meta: dict[str, int | str] = {"source": self.source, "patents": self.patents, "duplicates": self.duplicates,
                                      "rejected": sum(self.rejected.values())}
        if self.requests:
            meta["requests"] = self.requests
        meta |= {f"rows_read.{k}": v for k, v in sorted(self.rows_read.items())}
        meta |= {f"rejected.{k}": v for k, v in sorted(self.rejected.items())}
        meta |= {f"filtered_out.{k}": v for k, v in sorted(self.filtered_out.items())}
        return meta


class PatentTable(NamedTuple):
    """A source's result: patents (schemas.PATENTS), rejected (schemas.REJECTED_RECORDS), stats."""

    patents: pl.DataFrame
    rejected: pl.DataFrame
    stats: PatentTableStats
