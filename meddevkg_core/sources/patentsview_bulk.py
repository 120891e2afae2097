"""PatentsView bulk "g_" tables (DATA_SOURCES.md §2.1) -> the corpus patents table, streamed.

g_cpc_current alone has ~57M rows, so no table is ever held whole: each `<table>.tsv.zip` member
is opened as a stream, parsed by the csv module and handed on in record batches, and the build
keeps only what the filter admits. The order of passes shrinks the working set early:

1. g_cpc_current: which patents have a cardiovascular (or manufacturing) CPC symbol;
2. g_patent: type, withdrawn flag, grant date, title (and the manufacturing title rule);
3. g_assignee_disambiguated: drop patents without an organisational assignee;
4. g_application, g_patent_abstract, g_cpc_current again: filing date, abstract, every symbol
   (the CPC rule is then re-checked on the symbols kept).

Format: tab-separated with a header row; PatentsView's own read-in scripts use
csv.QUOTE_NONNUMERIC, i.e. text fields in double quotes (a quote inside doubled), numbers bare.
The csv module reads both quoted and bare fields, and quoted fields may hold tabs and newlines.
Everything is read as text and checked here. A row with the wrong column count, undecodable
bytes, a missing or malformed patent_id, an unparseable date or code, or a duplicate key is
quarantined with a reason naming its table, line and patent id; the first valid row of a key
wins (file order, so the result does not depend on the batch size).
"""

from __future__ import annotations

import csv
import io
import zipfile
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TextIO, TypeVar

import polars as pl

from meddevkg_core.errors import InputError
from meddevkg_core.gc_pause import gc_paused
from meddevkg_core.sources.patentsview import (
    PATENT_ID,
    CpcScope,
    PatentFilter,
    PatentParts,
    PatentTable,
    PatentTableStats,
    assemble_patents,
    is_patent_id,
    normalise_cpc,
    parse_code,
    parse_iso_date,
    rejected_frame,
    rejected_row,
)
from meddevkg_core.unstorable_text import UNDECODABLE

SOURCE = "patentsview_bulk"
DEFAULT_BATCH_SIZE = 100_000

TABLES: dict[str, tuple[str, ...]] = {
    "g_patent": ("patent_id", "patent_type", "patent_date", "patent_title", "withdrawn"),
    "g_patent_abstract": ("patent_id", "patent_abstract"),
    "g_assignee_disambiguated": ("patent_id", "assignee_sequence", "assignee_type", "disambig_assignee_organization",
                                 "disambig_assignee_individual_name_first", "disambig_assignee_individual_name_last"),
    "g_cpc_current": ("patent_id", "cpc_sequence", "cpc_group"),
    "g_application": ("patent_id", "filing_date"),
}
"""The columns each build reads (others, e.g. wipo_kind or cpc_type, may be present and are ignored)."""

T = TypeVar("T")


class BulkFormatError(InputError):
    """A whole bulk file is unusable (absent, not a zip, no header, a required column missing)."""


@dataclass(frozen=True)
class TsvBatch:
    """A record batch of one table: structurally sound rows and the rows quarantined while reading."""

    table: str
    columns: tuple[str, ...]
    rows: list[tuple[int, list[str]]]  # (line where the record starts, fields in header order)
    rejected: list[dict[str, str]]

    def to_frame(self) -> pl.DataFrame:
        """The rows as an all-text polars frame, with the line number, for callers that want tables."""
        data: dict[str, list[int] | list[str]] = {"line": [line for line, _ in self.rows]}
        data |= {name: [fields[i] for _, fields in self.rows] for i, name in enumerate(self.columns)}
        return pl.DataFrame(data, schema={"line": pl.Int64, **{c: pl.String for c in self.columns}})


def table_path(bulk_dir: Path, table: str) -> Path | None:
    """`<table>.tsv.zip` as released (an unzipped `<table>.tsv` is accepted too), or None."""
    for name in (f"{table}.tsv.zip", f"{table}.tsv"):
        if (bulk_dir / name).is_file():
            return bulk_dir / name
    return None


@contextmanager
def _open_text(path: Path) -> Iterator[TextIO]:
    """A text stream over the TSV; undecodable bytes survive as surrogates so the row can be named."""
    if not path.name.endswith(".zip"):
        with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
            yield handle
        return
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise BulkFormatError(f"{path}: not a zip file ({exc})") from exc
    with archive:
        members = [m for m in archive.namelist() if m.lower().endswith((".tsv", ".txt", ".csv"))]
        if len(members) != 1:
            raise BulkFormatError(f"{path}: expected one TSV in the zip, found {members or 'none'}")
        with archive.open(members[0]) as raw:
            try:
                yield io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")
            except (zlib.error, zipfile.BadZipFile, EOFError) as exc:  # raised while its lines are read
                raise BulkFormatError(f"{path}: {members[0]} is damaged ({exc}); download it again") from exc


def _structural_problem(fields: list[str], columns: tuple[str, ...], key: int) -> str | None:
    """Why a row cannot be used at all, or None. Runs on every row of ~100M, hence the fast paths."""
    if len(fields) != len(columns):
        return f"wrong column count: {len(fields)} fields, the header has {len(columns)}"
    joined = "\t".join(fields)
    if not joined.isascii() and UNDECODABLE.search(joined):
        name = next(n for n, v in zip(columns, fields, strict=True) if UNDECODABLE.search(v))
        return f"non-UTF-8 bytes in column {name}"
    patent_id = fields[key]
    if PATENT_ID.fullmatch(patent_id):
        return None
    patent_id = patent_id.strip()
    if not patent_id:
        return "missing patent_id"
    return None if is_patent_id(patent_id) else f"malformed patent_id {patent_id[:40]!r}"


def _reject(table: str, line: int, fields: Sequence[str], problem: str, patent_id: str = "") -> dict[str, str]:
    patent_id = patent_id.strip()[:40]
    named = f"{table} line {line}" + (f" (patent_id {patent_id})" if patent_id else "")
    return rejected_row(f"{SOURCE}:{table}", f"{table}:{line}:{patent_id}", f"{named}: {problem}", "\t".join(fields))


def iter_tsv_batches(path: Path, table: str, *, required: Sequence[str] = (),
                     batch_size: int = DEFAULT_BATCH_SIZE) -> Iterator[TsvBatch]:
    """Stream one g_ table in batches of at most `batch_size` rows; structural problems are
    quarantined here, so every yielded row has the header's width, UTF-8 text and a patent_id."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    with _open_text(path) as handle:
        reader = csv.reader(handle, delimiter="\t", quotechar='"', doublequote=True, strict=False)
        try:
            columns = tuple(name.strip() for name in next(reader))
        except StopIteration:
            raise BulkFormatError(f"{path}: empty file, no header row") from None
        except csv.Error as exc:
            raise BulkFormatError(f"{path}: unreadable header ({exc})") from exc
        missing = [c for c in (*required, "patent_id") if c not in columns]
        if missing:
            raise BulkFormatError(f"{path}: no column(s) {', '.join(dict.fromkeys(missing))} "
                                  f"(header: {', '.join(columns)})")
        key = columns.index("patent_id")
        rows: list[tuple[int, list[str]]] = []
        rejected: list[dict[str, str]] = []
        start = reader.line_num + 1
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                rejected.append(_reject(table, start, [], f"unparseable TSV record ({exc})"))
                start = reader.line_num + 1
                continue
            line, start = start, reader.line_num + 1
            if not fields:
                continue
            problem = _structural_problem(fields, columns, key)
            if problem is None:
                rows.append((line, fields))
            else:
                rejected.append(_reject(table, line, fields, problem, fields[key] if key < len(fields) else ""))
            if len(rows) + len(rejected) >= batch_size:
                yield TsvBatch(table, columns, rows, rejected)
                rows, rejected = [], []
        if rows or rejected:
            yield TsvBatch(table, columns, rows, rejected)


class _Build:
    """One bulk build: the passes share the surviving patents, the quarantine and the stats."""

    def __init__(self, bulk_dir: Path, patent_filter: PatentFilter, grant_years: tuple[int, int] | None,
                 batch_size: int) -> None:
        self.dir, self.filter, self.grant_years, self.batch_size = bulk_dir, patent_filter, grant_years, batch_size
        self.stats = PatentTableStats(source=SOURCE)
        self.rejected: list[dict[str, str]] = []
        self.kept: dict[str, PatentParts] = {}
        self.paths = {table: table_path(bulk_dir, table) for table in TABLES}

    def path(self, table: str) -> Path:
        found = self.paths[table]
        if found is None:
            raise BulkFormatError(f"{self.dir}: {table}.tsv.zip not found")
        return found

    def rows(self, table: str, *, report: bool = True,
             columns: Sequence[str] | None = None) -> Iterator[tuple[int, list[str], dict[str, int]]]:
        """(line, fields, column index) of every sound row; quarantined rows are recorded once (`report`)."""
        for batch in iter_tsv_batches(self.path(table), table, required=columns or TABLES[table],
                                      batch_size=self.batch_size):
            index = {name: i for i, name in enumerate(batch.columns)}
            if report:
                self.stats.rows_read[table] += len(batch.rows) + len(batch.rejected)
                self.stats.rejected[table] += len(batch.rejected)
                self.rejected.extend(batch.rejected)
            for line, fields in batch.rows:
                yield line, fields, index

    def quarantine(self, table: str, line: int, fields: list[str], index: dict[str, int], problem: str) -> None:
        self.stats.rejected[table] += 1
        self.rejected.append(_reject(table, line, fields, problem, fields[index["patent_id"]]))

    def first_of_key(self, seen: dict[object, int], key: object, table: str, line: int, fields: list[str],
                     index: dict[str, int]) -> bool:
        """True for the first valid row of a key; later copies are quarantined as duplicates."""
        if key in seen:
            self.stats.duplicates += 1
            self.quarantine(table, line, fields, index, f"duplicate of line {seen[key]} (key {key!r})")
            return False
        seen[key] = line
        return True

    def cpc_scopes(self) -> dict[str, CpcScope] | None:
        """Pass 1: the patents with a cardiovascular (or only a manufacturing) CPC symbol."""
        if self.filter.cpc_prefixes is None:
            return None
        scopes: dict[str, CpcScope] = {}
        for _, fields, index in self.rows("g_cpc_current"):
            scope = self.filter.code_scope(fields[index["cpc_group"]])
            if scope is not None:
                patent_id = fields[index["patent_id"]].strip()
                if scopes.get(patent_id) != "medical":
                    scopes[patent_id] = scope
        return scopes

    def patents(self, scopes: dict[str, CpcScope] | None) -> None:
        """Pass 2: g_patent rows in CPC scope, validated, de-duplicated and filtered."""
        seen: dict[object, int] = {}
        table = "g_patent"
        with_abstract = self.paths["g_patent_abstract"] is None
        for line, fields, index in self.rows(table, columns=TABLES[table] + (("patent_abstract",) if with_abstract
                                                                              else ())):
            patent_id = fields[index["patent_id"]].strip()
            if scopes is not None and patent_id not in scopes:
                self.stats.filtered_out["cpc"] += 1  # counted per row: unchecked rows are not de-duplicated
                continue
            try:
                grant_date = parse_iso_date(fields[index["patent_date"]])
                if grant_date is None:
                    raise ValueError("empty")
            except ValueError as exc:
                self.quarantine(table, line, fields, index, f"bad patent_date ({exc})")
                continue
            try:
                withdrawn = bool(parse_code(fields[index["withdrawn"]]))
            except ValueError as exc:
                self.quarantine(table, line, fields, index, f"bad withdrawn flag ({exc})")
                continue
            if not self.first_of_key(seen, patent_id, table, line, fields, index):
                continue
            title = fields[index["patent_title"]].strip()
            reason = self.filter.type_reason(fields[index["patent_type"]], withdrawn)
            first, last = self.grant_years or (grant_date.year, grant_date.year)
            if reason is None and not first <= grant_date.year <= last:
                reason = "grant_year"
            reason = reason or self.filter.cpc_reason(scopes[patent_id] if scopes is not None else "medical", title)
            if reason:
                self.stats.filtered_out[reason] += 1
                continue
            abstract = fields[index["patent_abstract"]] if with_abstract else None
            self.kept[patent_id] = PatentParts(patent_id, title, grant_date, abstract=abstract)

    def assignees(self) -> None:
        """Pass 3: organisational assignees by sequence; patents without one leave the build."""
        table = "g_assignee_disambiguated"
        seen: dict[object, int] = {}
        found: dict[str, list[tuple[int, int | None, str]]] = defaultdict(list)
        for line, fields, index in self.rows(table):
            patent_id = fields[index["patent_id"]].strip()
            if patent_id not in self.kept:
                continue
            try:
                sequence = parse_code(fields[index["assignee_sequence"]])
                if sequence is None:
                    raise ValueError("empty assignee_sequence")
                kind = parse_code(fields[index["assignee_type"]])
            except ValueError as exc:
                self.quarantine(table, line, fields, index, f"bad assignee_sequence or assignee_type ({exc})")
                continue
            if not self.first_of_key(seen, (patent_id, sequence), table, line, fields, index):
                continue
            name = fields[index["disambig_assignee_organization"]].strip() or " ".join(
                fields[index[c]].strip() for c in ("disambig_assignee_individual_name_first",
                                                   "disambig_assignee_individual_name_last")).strip()
            found[patent_id].append((sequence, kind, name))
        for patent_id in list(self.kept):
            entries = found.get(patent_id, [])
            reason = self.filter.assignee_reason(kind for _, kind, _ in entries)
            if reason:
                self.stats.filtered_out[reason] += 1
                del self.kept[patent_id]
                continue
            self.kept[patent_id].assignees = [(s, n) for s, k, n in entries if self.filter.admits_assignee(k)]

    def per_patent(self, table: str, parse: Callable[[list[str], dict[str, int]], T],
                   key: Callable[[str, T], object], apply: Callable[[PatentParts, T], None], *,
                   report: bool = True) -> None:
        """Passes 4-6: values of kept patents; `parse` raising ValueError quarantines the row, and a
        key's first valid row wins."""
        seen: dict[object, int] = {}
        for line, fields, index in self.rows(table, report=report):
            parts = self.kept.get(fields[index["patent_id"]].strip())
            if parts is None:
                continue
            try:
                value = parse(fields, index)
            except ValueError as exc:
                self.quarantine(table, line, fields, index, str(exc))
                continue
            if self.first_of_key(seen, key(parts.pat_id, value), table, line, fields, index):
                apply(parts, value)

    def recheck_cpc(self) -> None:
        """The CPC rule once more on the symbols actually kept (pass 1 also saw rows that pass 6
        quarantined), so a bulk build admits exactly what the API path admits for the same record."""
        for patent_id, parts in list(self.kept.items()):
            reason = self.filter.cpc_reason(self.filter.cpc_scope(code for _, code in parts.cpc), parts.title)
            if reason:
                self.stats.filtered_out[reason] += 1
                del self.kept[patent_id]

    def run(self) -> PatentTable:
        scopes = self.cpc_scopes()
        self.patents(scopes)
        self.assignees()
        self.per_patent("g_application", _filing_date, _by_patent, _set_filing_date)
        if self.paths["g_patent_abstract"] is not None:
            self.per_patent("g_patent_abstract", lambda fields, index: fields[index["patent_abstract"]], _by_patent,
                            _set_abstract)
        self.per_patent("g_cpc_current", _cpc, _by_patent_and_sequence, _add_cpc, report=scopes is None)
        self.recheck_cpc()
        patents, rejected = assemble_patents(self.kept.values(), f"{SOURCE}:g_patent")
        self.rejected.extend(rejected)
        self.stats.rejected["g_patent"] += len(rejected)
        self.stats.patents = patents.height
        return PatentTable(patents, _in_file_order(rejected_frame(self.rejected)), self.stats)


def _in_file_order(rejected: pl.DataFrame) -> pl.DataFrame:
    """Quarantine by table, then line: the same for every batch size (batches interleave the passes)."""
    rank = {f"{SOURCE}:{table}": i for i, table in enumerate(TABLES)}
    parts = pl.col("record_key").str.split(":")
    return rejected.sort(pl.col("source").replace_strict(rank, default=len(rank), return_dtype=pl.Int32),
                         parts.list.get(1, null_on_oob=True).cast(pl.Int64, strict=False), "record_key", "reason",
                         nulls_last=True, maintain_order=True)


def _filing_date(fields: list[str], index: dict[str, int]) -> date | None:
    try:
        return parse_iso_date(fields[index["filing_date"]])
    except ValueError as exc:
        raise ValueError(f"bad filing_date ({exc})") from None


def _cpc(fields: list[str], index: dict[str, int]) -> tuple[int, str]:
    try:
        sequence = parse_code(fields[index["cpc_sequence"]])
    except ValueError as exc:
        raise ValueError(f"bad cpc_sequence ({exc})") from None
    code = normalise_cpc(fields[index["cpc_group"]])
    if sequence is None or not code:
        raise ValueError("missing cpc_sequence or cpc_group")
    return sequence, code


def _set_filing_date(parts: PatentParts, value: date | None) -> None:
    parts.filing_date = value


def _set_abstract(parts: PatentParts, value: str) -> None:
    parts.abstract = value


def _add_cpc(parts: PatentParts, value: tuple[int, str]) -> None:
    parts.cpc.append(value)


def _by_patent(patent_id: str, value: object) -> object:
    return patent_id


def _by_patent_and_sequence(patent_id: str, value: tuple[int, str]) -> object:
    return patent_id, value[0]




def build_patent_table(bulk_dir: str | Path, *, patent_filter: PatentFilter | None = None,
                       grant_years: tuple[int, int] | None = None,
                       batch_size: int = DEFAULT_BATCH_SIZE) -> PatentTable:
    """The corpus patents table from a directory of PatentsView g_ bulk files.

    `patent_filter` defaults to the paper's (`PatentFilter.paper()`; `PatentFilter()` admits
    everything); `grant_years` = (first, last), inclusive, keeps patents granted in those years.
    Returns (patents in schemas.PATENTS sorted by pat_id, rejected in schemas.REJECTED_RECORDS, stats).
    """
    root = Path(bulk_dir)
    if not root.is_dir():
        raise BulkFormatError(f"PatentsView bulk directory {root} does not exist")
    if grant_years is not None and grant_years[0] > grant_years[1]:
        raise ValueError(f"grant_years {grant_years}: the first year is after the last")
    build = _Build(root, patent_filter if patent_filter is not None else PatentFilter.paper(), grant_years,
                   batch_size)
    for table in ("g_patent", "g_assignee_disambiguated", "g_cpc_current", "g_application"):
        build.path(table)  # fail before reading anything when a table is absent
    with gc_paused():
        return build.run()

