"""The paper's three applications of the link set: recall root cause, M&A IP discovery, technology trajectory.

Pure functions over the tables a run leaves behind (links, devices, patents, the candidates'
company paths), so they answer the same way on the Dagster store and on a `meddevkg run` /
`benchmark` output directory (app_store.py loads either). Only kept links (`decision`) count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from meddevkg_core.atomic_files import replaced_file
from meddevkg_core.sources.openfda_recall import recall_pma_numbers, recall_summary

_LINK_COLS = ("fda_id", "pat_id", "rank", "probability", "evidence")
_DATE = r"\d{4}-\d{2}-\d{2}"


def kept_links(links: pl.DataFrame) -> pl.DataFrame:
    """The final link set (decision = true), or every row of a table that has no decision column."""
    kept = links.filter(pl.col("decision")) if "decision" in links.columns else links
    return kept.select([c for c in _LINK_COLS if c in kept.columns])


def _with(df: pl.DataFrame, other: pl.DataFrame | None, on: str, cols: tuple[str, ...]) -> pl.DataFrame:
    """Left-join the descriptive columns of `other` that exist (devices or patents may be absent)."""
    if other is None:
        return df
    keep = [c for c in cols if c in other.columns and c not in df.columns]
    return df.join(other.select(on, *keep).unique(on), on=on, how="left") if keep else df


# --------------------------------------------------------------------------- recall root cause


def _strongest_first(links: pl.DataFrame) -> pl.DataFrame:
    """Each device's links in their final order (`rank`: company_contest, text_adapter), else by probability (a links
    table written before links had a rank)."""
    if "rank" in links.columns:
        return links.sort(["fda_id", "rank", "pat_id"])
    return links.sort(["fda_id", "probability", "pat_id"], descending=[False, True, False])


def device_patents(links: pl.DataFrame, fda_ids: list[str], patents: pl.DataFrame | None = None) -> pl.DataFrame:
    """The patents linked to these devices, strongest first, with rank, probability and evidence."""
    out = _strongest_first(kept_links(links).filter(pl.col("fda_id").is_in(fda_ids)))
    return _with(out, patents, "pat_id", ("title", "assignee", "grant_date", "filing_date"))


def shared_patent_devices(links: pl.DataFrame, fda_ids: list[str],
                          devices: pl.DataFrame | None = None) -> pl.DataFrame:
    """Other devices linked to the same patents, ranked by how many they share (then by probability)."""
    kept = kept_links(links)
    mine = kept.filter(pl.col("fda_id").is_in(fda_ids)).select("pat_id").unique()
    out = (kept.filter(~pl.col("fda_id").is_in(fda_ids)).join(mine, on="pat_id", how="semi")
           .group_by("fda_id").agg(pl.len().alias("n_shared"), pl.col("pat_id").sort().alias("shared_pat_ids"),
                                   pl.col("probability").mean().alias("mean_probability"))
           .sort(["n_shared", "mean_probability", "fda_id"], descending=[True, True, False]))
    return _with(out, devices, "fda_id", ("trade_name", "description", "applicant"))


@dataclass
class RootCause:
    """What a recall (or a device) touches: its linked patents and the devices sharing them."""

    fda_ids: list[str]
    unknown: list[str]
    patents: pl.DataFrame
    shared_devices: pl.DataFrame
    recall: dict[str, Any] | None = None


def known_devices(links: pl.DataFrame, devices: pl.DataFrame | None = None) -> set[str]:
    """The devices a link set can answer for: those with a kept link, and every device of its corpus
    (a device with no link is a known answer, "none"; an id outside both is a typo or another corpus)."""
    known = set(kept_links(links)["fda_id"].unique())
    return known | set(devices["fda_id"]) if devices is not None else known


def recall_root_cause(links: pl.DataFrame, *, fda_id: str | None = None, recall: dict[str, Any] | None = None,
                      devices: pl.DataFrame | None = None, patents: pl.DataFrame | None = None) -> RootCause:
    """Root-cause candidates for a device, or for an openFDA recall record (through its PMA numbers).

    PMA numbers the link set does not know are reported in `unknown` rather than dropped, so an
    analyst sees when a recall concerns a device outside the corpus.
    """
    if (fda_id is None) == (recall is None):
        raise ValueError("give exactly one of fda_id or recall")
    named = [fda_id.strip().upper()] if fda_id else recall_pma_numbers(recall or {})
    known = known_devices(links, devices)
    ids = [i for i in named if i in known]
    return RootCause(ids, [i for i in named if i not in known], device_patents(links, ids, patents),
                     shared_patent_devices(links, ids, devices), recall_summary(recall) if recall else None)


# --------------------------------------------------------------------------- M&A IP discovery


PARTNER_PATH_RE = rf"(.+?)\s~\s(.+?)\s\(alliance\s({_DATE})(?:\sto\s{_DATE})?\)"
"""A whole `A ~ B (alliance d[ to e])` path: device company, partner, start date."""
DEAL_STEP_RE = rf"\s(<-|->)\s(.+?)\s\(({_DATE})\)"
"""One deal of an ownership path, ` <- B (d)` or ` -> B (d)`: arrow, company, close date."""
ARROW_RE = r"\s(?:<-|->)\s"
"""The regexes of `parse_company_path`, shared with app_store's app_acquired_patents view (Python's
re and DuckDB's RE2 read them alike) so that the view and `acquired_patents` agree."""


def parse_company_path(path: str | None) -> dict[str, Any]:
    """`MEDTRONIC <- COVIDIEN (2015-01-26)` -> device company, patent company, relation, deal dates.

    `A <- B (d)`: the device's company A bought B on d ("acquired"); `A -> B (d)`: B bought A
    ("acquirer"); `A <- B (d) -> C (d0)`: C owned B before A bought it ("former_owner"); `A ~ B
    (alliance d[ to e])`: A and B had a development and licence agreement ("partner"). Longer
    chains list every deal (company_resolver.py writes these paths).
    """
    if not path:
        return {"device_company": None, "patent_company": None, "relation": None, "deal_dates": []}
    if pact := re.fullmatch(PARTNER_PATH_RE, path.strip()):
        return {"device_company": pact[1], "patent_company": pact[2], "relation": "partner", "deal_dates": [pact[3]]}
    steps = re.findall(DEAL_STEP_RE, path)
    first = re.split(ARROW_RE, path, maxsplit=1)[0].strip()
    if not steps:
        return {"device_company": first, "patent_company": first, "relation": "same", "deal_dates": []}
    arrows = [s[0] for s in steps]
    relation = "acquirer" if arrows[0] == "->" else "former_owner" if "->" in arrows else "acquired"
    return {"device_company": first, "patent_company": steps[-1][1].strip(), "relation": relation,
            "deal_dates": [s[2] for s in steps]}


def acquired_patents(links: pl.DataFrame, company_paths: pl.DataFrame, fda_id: str | None = None) -> pl.DataFrame:
    """Linked patents whose company match came through an acquisition, with the path and deal dates.

    `company_paths`: fda_id, pat_id, company_path (the candidates table or company_match_table).
    Kept: the assignee company differs from the applicant's and the path carries at least one
    dated deal; `latest_close_date` is when the last deal on the path closed.
    """
    kept = kept_links(links)
    if fda_id is not None:
        kept = kept.filter(pl.col("fda_id") == fda_id)
    paths = (company_paths.select("fda_id", "pat_id", "company_path").drop_nulls("company_path")
             .unique(["fda_id", "pat_id"]))
    out = kept.join(paths, on=["fda_id", "pat_id"])
    parsed = [parse_company_path(p) for p in out["company_path"]]
    out = out.with_columns(
        pl.Series("device_company", [p["device_company"] for p in parsed], pl.String),
        pl.Series("patent_company", [p["patent_company"] for p in parsed], pl.String),
        pl.Series("relation", [p["relation"] for p in parsed], pl.String),
        pl.Series("deal_dates", [p["deal_dates"] for p in parsed], pl.List(pl.String)).cast(pl.List(pl.Date)),
    ).with_columns(pl.col("deal_dates").list.max().alias("latest_close_date"))
    out = out.filter((pl.col("deal_dates").list.len() > 0) & (pl.col("device_company") != pl.col("patent_company")))
    cols = ["fda_id", "pat_id", "rank", "probability", "relation", "device_company", "patent_company",
            "latest_close_date", "company_path", "deal_dates", "evidence"]
    return _strongest_first(out.select([c for c in cols if c in out.columns]))


# --------------------------------------------------------------------------- technology trajectory

FIRST_UTILITY_PATENT_OF_YEAR: dict[int, int] = {
    1976: 3930271, 1977: 4000000, 1978: 4065812, 1979: 4131952, 1980: 4180867, 1981: 4242757, 1982: 4308622,
    1983: 4366868, 1984: 4423140, 1985: 4490885, 1986: 4562596, 1987: 4633526, 1988: 4716594, 1989: 4794652,
    1990: 4890335, 1991: 4980927, 1992: 5077836, 1993: 5175886, 1994: 5274846, 1995: 5377359, 1996: 5479658,
    1997: 5590420, 1998: 5704101, 1999: 5855021, 2000: 6009555, 2001: 6167569, 2002: 6334220, 2003: 6502244,
    2004: 6671884, 2005: 6836899, 2006: 6981282, 2007: 7155746, 2008: 7313829, 2009: 7472428, 2010: 7640598,
    2011: 7861317, 2012: 8087787, 2013: 8341762, 2014: 8621662, 2015: 8925110, 2016: 9226798, 2017: 9532796,
    2018: 9854839, 2019: 10165721, 2020: 10524124, 2021: 10881832, 2022: 11212915, 2023: 11540375,
    2024: 11856049, 2025: 12185108,
}
"""First US utility patent number issued each year (USPTO "Issue Years and Patent Numbers"; the
last years approximate to within the first week). Numbers rise with the issue date, so a number
gives its grant year where a corpus stores no dates (the benchmark's patents have none)."""


def grant_year_from_number(pat_id: str | None) -> int | None:
    """Grant year of a US utility patent from its number (`US10000000B2` or `10000000`); None otherwise."""
    if not isinstance(pat_id, str):
        return None
    return grant_years(pl.Series([pat_id], dtype=pl.String)).item()


_FIRST_NUMBERS = np.array([FIRST_UTILITY_PATENT_OF_YEAR[y] for y in sorted(FIRST_UTILITY_PATENT_OF_YEAR)], np.int64)
_LAST_NUMBER = int(_FIRST_NUMBERS[-1]) + 450_000
"""Numbers past the table's last year plus a year of grants are not real US numbers (demo ids)."""


PATENT_NUMBER_RE = r"^(?:US)?0*(\d{7,8})(?:[AB]\d)?$"
"""A US utility patent id, upper-cased and without commas (`US10000000B2`, `10000000`): group 1 is its number."""


def number_ranges() -> list[tuple[int, int, int]]:
    """(year, first number, first number past it) of every year in the table: the rule of `grant_years`,
    as rows a SQL join can use (app_store's app_trajectory view)."""
    firsts = [int(n) for n in _FIRST_NUMBERS]
    return [(min(FIRST_UTILITY_PATENT_OF_YEAR) + i, first, end)
            for i, (first, end) in enumerate(zip(firsts, [*firsts[1:], _LAST_NUMBER], strict=True))]


def patent_numbers(pat_ids: pl.Series) -> pl.Series:
    """The US utility number of every id (Int64, null where an id is not one), read by PATENT_NUMBER_RE."""
    return (pat_ids.cast(pl.String).str.strip_chars().str.to_uppercase().str.replace_all(",", "")
            .str.extract(PATENT_NUMBER_RE, 1).cast(pl.Int64))


def grant_years(pat_ids: pl.Series) -> pl.Series:
    """`grant_year_from_number` of every id (Int32, null where an id gives no year), vectorised."""
    number = patent_numbers(pat_ids).fill_null(-1).to_numpy()
    known = (number >= _FIRST_NUMBERS[0]) & (number < _LAST_NUMBER)
    year = np.full(len(number), np.nan, np.float32)
    year[known] = min(FIRST_UTILITY_PATENT_OF_YEAR) + np.searchsorted(_FIRST_NUMBERS, number[known], side="right") - 1
    return pl.Series("grant_year", year).fill_nan(None).cast(pl.Int32)


def patent_years(patents: pl.DataFrame) -> pl.DataFrame:
    """pat_id, filing_year, grant_year, grant_year_source (`grant_date` or `patent_number`)."""
    def year(col: str) -> pl.Expr:
        return pl.col(col).cast(pl.Date, strict=False).dt.year() if col in patents.columns else pl.lit(None, pl.Int32)

    out = patents.select("pat_id", year("filing_date").alias("filing_year"), year("grant_date").alias("grant_year"))
    guess = grant_years(out["pat_id"])
    return out.with_columns(
        pl.when(pl.col("grant_year").is_not_null()).then(pl.lit("grant_date"))
        .when(guess.is_not_null()).then(pl.lit("patent_number")).alias("grant_year_source"),
        pl.coalesce(pl.col("grant_year").cast(pl.Int32), guess).alias("grant_year"),
        pl.col("filing_year").cast(pl.Int32))


def approval_date(devices: pl.DataFrame | None, fda_id: str) -> date | None:
    """The device's FDA decision date in the devices table (its original approval); None when unknown."""
    if devices is None or "decision_date" not in devices.columns:
        return None
    row = devices.filter(pl.col("fda_id") == fda_id).select(pl.col("decision_date").cast(pl.Date, strict=False))
    return row.item(0, 0) if row.height else None


@dataclass
class Trajectory:
    """A device's linked patents over time: one row per patent, and counts per year."""

    fda_id: str
    patents: pl.DataFrame
    counts: pl.DataFrame
    decision_year: int | None = None
    notes: list[str] = field(default_factory=list)


def trajectory(links: pl.DataFrame, patents: pl.DataFrame, fda_id: str,
               devices: pl.DataFrame | None = None) -> Trajectory:
    """Linked patents of one device by filing and grant year, with the device's approval year."""
    linked = device_patents(links, [fda_id]).select("pat_id", "probability")
    per_patent = linked.join(patent_years(patents), on="pat_id", how="left").with_columns(
        pl.coalesce(pl.col("grant_year_source"), pl.lit("unknown")).alias("grant_year_source"))
    per_patent = _with(per_patent, patents, "pat_id", ("grant_date", "filing_date", "title", "assignee"))
    # in a year, by grant date, then by number: as text, 10000001 would come before 9999999
    by_date = [pl.col("grant_date").cast(pl.Date, strict=False)] if "grant_date" in per_patent.columns else []
    per_patent = per_patent.sort([pl.col("grant_year"), *by_date, pl.lit(patent_numbers(per_patent["pat_id"])),
                                  pl.col("pat_id")], nulls_last=True)
    filed = per_patent.drop_nulls("filing_year").group_by(pl.col("filing_year").alias("year")).agg(
        pl.len().alias("n_filed"))
    granted = per_patent.drop_nulls("grant_year").group_by(pl.col("grant_year").alias("year")).agg(
        pl.len().alias("n_granted"))
    counts = (filed.join(granted, on="year", how="full", coalesce=True)
              .with_columns(pl.col("n_filed", "n_granted").fill_null(0).cast(pl.UInt32)).sort("year"))
    approved = approval_date(devices, fda_id)
    decision_year = approved.year if approved else None
    notes = []
    if (per_patent["grant_year_source"] == "patent_number").any():
        notes.append("grant years estimated from patent numbers (the patents table has no grant_date)")
    if per_patent["filing_year"].null_count() == per_patent.height and per_patent.height:
        notes.append("no filing dates in the patents table")
    return Trajectory(fda_id, per_patent, counts, decision_year, notes)


def plot_trajectory(traj: Trajectory, out: str | Path, title: str | None = None) -> Path:
    """Bars of linked patents per year (filed, granted) and a line at the device's approval year."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(out)
    fig = Figure(figsize=(10.0, 5.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    years = traj.counts["year"].to_list()
    filed = traj.counts["n_filed"].sum() > 0
    width = 0.4 if filed else 0.8
    estimated = (traj.patents["grant_year_source"] == "patent_number").any()
    if filed:
        ax.bar([y - width / 2 for y in years], traj.counts["n_filed"].to_list(), width, label="filed")
    ax.bar([y + width / 2 if filed else y for y in years], traj.counts["n_granted"].to_list(), width,
           label="granted" + (" (year from the patent number where no grant date)" if estimated else ""))
    if traj.decision_year is not None:
        ax.axvline(traj.decision_year, color="black", linestyle="--", linewidth=1.5,
                   label=f"FDA approval ({traj.decision_year})")
    ax.set_xlabel("year")
    ax.set_ylabel("linked patents")
    ax.set_title(title or f"Technology trajectory of {traj.fda_id}: {traj.patents.height} linked patents")
    # matplotlib's stubs type the base Locator.set_params without arguments; a new axis has an AutoLocator
    ax.yaxis.get_major_locator().set_params(integer=True)  # type: ignore[call-arg]
    if years:
        peak: int = traj.counts.select(pl.max_horizontal("n_filed", "n_granted").max()).item()
        ax.set_ylim(0, peak * 1.3 + 0.5)
    if years or traj.decision_year is not None:
        ax.legend(loc="upper left")
    fig.tight_layout()
    with replaced_file(out) as tmp:
        fig.savefig(tmp, format="png")
    return out
