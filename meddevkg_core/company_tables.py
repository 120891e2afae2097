"""The company tables: aliases, dated acquisitions and alliances, shipped with the package
(data/companies/README.md) or a corpus directory's own, read and validated as its other tables are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import polars as pl

from meddevkg_core.company_names import normalize_company
from meddevkg_core.corpus import (
    COMPANY_TABLES,
    TableRead,
    find_table,
    read_fingerprinted_table,
    rejected_rows,
    validate_table,
)
from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import InputFile


@dataclass(frozen=True)
class CompanyTables:
    """A corpus directory's own company tables, valid rows only, and the rows quarantined from them."""

    aliases: pl.DataFrame  # corpus.COMPANY_ALIASES
    acquisitions: pl.DataFrame  # schemas.ACQUISITIONS
    alliances: pl.DataFrame  # schemas.ALLIANCES
    rejected: pl.DataFrame  # schemas.REJECTED_RECORDS
    sources: tuple[str, ...] = ()  # the files they were read from
    inputs: Mapping[str, InputFile] = field(default_factory=dict)  # those files' fingerprints, by table


def read_company_tables(corpus_dir: Path | str) -> CompanyTables | None:
    """The corpus's `aliases`, `acquisitions` and `alliances` tables (each .parquet, .csv or .jsonl),
    read and validated as its other tables are (corpus.read_table: a row missing a required value,
    with a bad date or bytes that are not UTF-8, or repeating a key is quarantined with its reason;
    a file without a required column is a CorpusError naming it), and so is a row the resolver could
    not use (`_naming_companies`); None when there are none."""
    root = Path(corpus_dir)
    paths = {table: find_table(root, table) for table in COMPANY_TABLES}
    if not any(paths.values()):
        return None
    found = {table: read_fingerprinted_table(path, table) for table, path in paths.items() if path is not None}
    reads = {table: found[table][0] if table in found else validate_table(pl.DataFrame(), table, "")
             for table in paths}
    sources = {table: path.name for table, path in paths.items() if path is not None}
    reads["aliases"] = _naming_companies(reads["aliases"], "aliases", sources.get("aliases", ""), {})
    aliases = normalized_aliases(pl.concat([aliases_frame(), reads["aliases"].valid]))
    for table in ("acquisitions", "alliances"):
        reads[table] = _naming_companies(reads[table], table, sources.get(table, ""), aliases)
    return CompanyTables(reads["aliases"].valid, reads["acquisitions"].valid, reads["alliances"].valid,
                         pl.concat([read.rejected for read in reads.values()]), tuple(sources.values()),
                         {table: fingerprint for table, (_, fingerprint) in found.items()})


def normalized_aliases(aliases: pl.DataFrame) -> dict[str, str]:
    """Normalised alias -> normalised canonical; a later row of an alias wins (a corpus's over the shipped)."""
    alias_map: dict[str, str] = {}
    for alias, canonical in aliases.select("alias", "canonical").iter_rows():
        key, target = normalize_company(alias), normalize_company(canonical)
        if key and target:
            alias_map[key] = target
    return alias_map


_PARTIES = {"aliases": ("alias", "canonical"), "acquisitions": ("acquirer", "acquired"),
            "alliances": ("company_a", "company_b")}


def _naming_companies(read: TableRead, table: str, source: str, aliases: Mapping[str, str]) -> TableRead:
    """The valid rows `from_frames` would pass over without a word, quarantined with their reason: a
    name that normalises to no company ("Inc.", "&"), an alias that is an earlier one once normalised
    but names another company (the later would win), an alliance of a company with itself (`aliases`
    say which names are one company). Named by their companies, as corpus._known_pairs names a pair."""
    columns = _PARTIES[table]
    reasons: list[str | None] = []
    first: dict[str, tuple[str, str]] = {}  # normalised alias -> its first row's alias and company
    for row in read.valid.select(columns).iter_rows():
        ids = [normalize_company(name) for name in row]
        companies = [aliases.get(company, company) for company in ids if company]
        if len(companies) < len(ids):
            empty = ids.index(None)
            reasons.append(f"{columns[empty]} {row[empty]!r} names no company once normalised")
        elif table == "aliases" and first.setdefault(companies[0], (row[0], companies[1]))[1] != companies[1]:
            kept = first[companies[0]]
            reasons.append(f"alias {row[0]!r} is alias {kept[0]!r} once normalised ({companies[0]}), "
                           f"which names {kept[1]}")
        elif table == "alliances" and companies[0] == companies[1]:
            reasons.append(f"company_a and company_b are one company ({companies[0]})")
        else:
            reasons.append(None)
    marked = read.valid.with_columns(pl.Series("__reason__", reasons, pl.String))
    key = pl.concat_str([pl.lit(f"{table}:"), pl.concat_str(list(columns), separator="|")])
    return TableRead(marked.filter(pl.col("__reason__").is_null()).drop("__reason__"),
                     pl.concat([read.rejected, rejected_rows(marked, read.valid.columns, source, key)]))


def _shipped(table: str) -> pl.DataFrame:
    """A shipped table, read as a corpus's is; a row it would have to quarantine is a packaging error."""
    where = f"meddevkg_core/data/companies/{table}.csv"
    data = (resources.files("meddevkg_core") / "data" / "companies" / f"{table}.csv").read_bytes()
    read = validate_table(pl.read_csv(data, infer_schema=False), table, where)
    if read.rejected.height:
        raise CorpusError(f"{where}: {read.rejected['record_key'][0]}: {read.rejected['reason'][0]}")
    return read.valid


@cache
def aliases_frame() -> pl.DataFrame:
    """The shipped alias table (alias, canonical, source)."""
    return _shipped("aliases")


@cache
def acquisitions_frame() -> pl.DataFrame:
    """The shipped dated acquisitions, conforming to schemas.ACQUISITIONS."""
    return _shipped("acquisitions")


@cache
def alliances_frame() -> pl.DataFrame:
    """The shipped dated development and licence agreements, conforming to schemas.ALLIANCES."""
    return _shipped("alliances")
