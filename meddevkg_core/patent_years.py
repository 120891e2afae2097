"""Patent partitions: one per grant year, so a new year of grants is new work and nothing else is.

A granted patent's grant year never changes, so a year's partition is complete once the year is
over, and the weekly PatentsView grants only ever touch the current year. Hash shards would spread
every new week over all shards and make each of them re-extract and re-encode its old patents.
Patents without a grant date (the Bridge-MedDevKG benchmark ships none) share one key, `undated`,
which also holds quarantined source rows that name no known patent.
"""

from __future__ import annotations

from datetime import date

import polars as pl

UNDATED = "undated"
YEAR_KEY_SQL = f"coalesce(cast(year(grant_date) as varchar), '{UNDATED}')"
"""The same key as `year_key`, as a DuckDB expression over the stored patents table."""


def year_key(grant_date: str = "grant_date") -> pl.Expr:
    """A patent's partition key: its grant year ("2019"), or `undated`."""
    return pl.col(grant_date).dt.year().cast(pl.String).fill_null(UNDATED)


def year_keys(patents: pl.DataFrame) -> list[str]:
    """Every key the patents occupy, plus `undated` (always registered: it holds unplaceable rows)."""
    keys = set(patents.select(year_key())["grant_date"].to_list()) if patents.height else set()
    return sorted(keys | {UNDATED})


def in_years(patents: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The patents that belong to these partitions (all of them when `keys` is empty: no partitions)."""
    return patents.filter(year_key().is_in(keys)) if keys else patents


def with_year_key(df: pl.DataFrame, patents: pl.DataFrame, id_col: str, out: str = "patent_year") -> pl.DataFrame:
    """`df` with its patents' year key in `out` (joined on `id_col` = pat_id; `undated` when unknown)."""
    years = patents.select(pl.col("pat_id").alias(id_col), year_key().alias(out)).unique(id_col)
    return df.join(years, on=id_col, how="left", maintain_order="left").with_columns(pl.col(out).fill_null(UNDATED))


def quarantine_year_keys(rejected: pl.DataFrame, patents: pl.DataFrame) -> pl.DataFrame:
    """Quarantined rows with the year of the patent their key names (the key's last ':' part), else `undated`."""
    named = rejected.with_columns(pl.col("record_key").str.extract(r"([^:]*)$", 1).alias("_pat_id"))
    return with_year_key(named, patents, "_pat_id").drop("_pat_id")


def year_span(keys: list[str], since: date, today: date) -> tuple[date, date] | None:
    """The grant-date window that covers these year keys inside [since, today]; None if it is empty.

    `undated` has no window (a source that dates every grant has nothing to put there).
    """
    years = sorted(int(k) for k in keys if k != UNDATED)
    if not years:
        return None
    start, end = max(since, date(years[0], 1, 1)), min(today, date(years[-1], 12, 31))
    return (start, end) if start <= end else None


def parse_year_keys(spec: str) -> list[str]:
    """Year keys from "2019", "1976-2026" or `undated`, comma-separated ("2019-2021,undated")."""
    keys: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        first, dash, last = part.partition("-")
        if part == UNDATED:
            keys.append(UNDATED)
        elif first.isdigit() and len(first) == 4 and (not dash or (last.isdigit() and len(last) == 4)):
            if int(last or first) < int(first):
                raise ValueError(f"grant years {part!r}: the last year is before the first")
            keys += [str(y) for y in range(int(first), int(last or first) + 1)]
        else:
            raise ValueError(f"grant years {part!r}: expected YYYY, YYYY-YYYY or {UNDATED}")
    return list(dict.fromkeys(keys))


def grant_year_bounds(keys: list[str]) -> tuple[int, int] | None:
    """The first and last grant years these keys name, so a bulk source can skip other years' rows;
    None (read everything) without keys or with `undated` among them."""
    if not keys or UNDATED in keys:
        return None
    years = [int(k) for k in keys]
    return min(years), max(years)


def current_year_keys(today: date) -> list[str]:
    """The keys a weekly grant refresh touches: this year (and last year during January's first week,
    so the grants of the year's last Tuesday are picked up even when the refresh ran before them)."""
    keys = [str(today.year)]
    if today.month == 1 and today.day <= 7:
        keys.insert(0, str(today.year - 1))
    return keys
