"""The device x patent company match table and the company dictionary (meddevkg_core.companies)."""

from __future__ import annotations

import itertools
from datetime import date

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.applications import grant_years
from meddevkg_core.companies import COMPANY_MATCHES, build_company_dictionary, company_match_table
from meddevkg_core.company_resolver import CompanyMatch, CompanyResolver
from tests.core.conftest import toy_resolver

# ----------------------------------------------------------------------------- match table


def test_the_match_table_reads_the_devices_latest_decision(shipped: CompanyResolver) -> None:
    devices = pl.DataFrame({"fda_id": ["P1", "P2", "P3"], "applicant": ["ABBOTT"] * 3,
                            "decision_date": [date(2014, 5, 28)] * 3,
                            "last_decision_date": [date(2024, 9, 30), date(2016, 1, 4), None]})
    patents = pl.DataFrame({"pat_id": ["1", "2"], "assignee": ["CardioMEMS, Inc.", "Abbott Laboratories"]})
    out = company_match_table(devices, patents, shipped)
    assert out.select("fda_id", "pat_id", "match_kind").sort("fda_id", "pat_id").rows() == [
        ("P1", "1", "acquired"), ("P1", "2", "same"), ("P2", "2", "same"), ("P3", "2", "same")]
    without = company_match_table(devices.drop("last_decision_date"), patents, shipped)
    assert without.filter(pl.col("pat_id") == "1").height == 0


def test_patent_matches_if_any_assignee_matches(shipped: CompanyResolver) -> None:
    devices = pl.DataFrame({"fda_id": ["P1"], "applicant": ["ABBOTT"], "decision_date": [date(2018, 1, 1)]})
    patents = pl.DataFrame({"pat_id": ["1", "2"], "assignee": ["Mayo Clinic; St. Jude Medical, Inc.", "Mayo Clinic"]})
    out = company_match_table(devices, patents, shipped)
    assert out.rows() == [("P1", "1", "acquired", "ABBOTT <- ST JUDE MEDICAL (2017-01-04)")]


# ----------------------------------------------------------------------------- vectorised table


def _small_world() -> tuple[CompanyResolver, pl.DataFrame, pl.DataFrame]:
    r = toy_resolver(
        [("Alpha Vascular", "ALPHA"), ("Gamma Div. of Beta", "BETA")],
        [
            ("ALPHA", "BETA", date(2010, 1, 1)),
            ("BETA", "DELTA", date(2005, 6, 1)),
            ("OMEGA", "DELTA", date(2015, 1, 1)),
        ],
    )
    names = ["Alpha Inc.", "Alpha Vascular", "Beta Corp", "Delta", "Omega", "Unknown Co", None]
    # and on the deals' own days, where a reach starts holding (close date) or stops (a later buyer's)
    dates = [None, date(2004, 1, 1), date(2007, 1, 1), date(2012, 1, 1), date(2016, 1, 1),
             date(2005, 6, 1), date(2010, 1, 1), date(2015, 1, 1)]
    devices = pl.DataFrame(
        [(f"P{i}", n, d) for i, (n, d) in enumerate(itertools.product(names, dates))],
        schema={"fda_id": pl.String, "applicant": pl.String, "decision_date": pl.Date},
        orient="row",
    )
    devices = pl.concat([devices, devices.head(5).with_columns(pl.lit("Delta").alias("applicant"))])  # two names
    # BETA held DELTA 2005-06-01 to 2015-01-01: its patent "1" is dated outside (the date beats the
    # number's 2008), "7" is inside by its number's year (2005), "10" is inside by date, "11" has no year;
    # "12" is granted on the window's last day (outside: it ends there), "9000000" in its last year (inside).
    patents = pl.DataFrame(
        {"pat_id": ["0", "7338518", "2", "3", "4", "5", "6", "6957102", "8", "9", "10", "11", "12", "9000000"],
         "assignee": ["Alpha", "BETA CORP.", "Delta; Zed", "Omega Ltd", "unknown co", None, "", "Gamma Div. of Beta",
                      "DELTA UNIVERSITY OF SOMEWHERE", "OMEGA ELECTRIC", "Beta", "Beta", "Beta", "Beta"],
         "grant_date": [None, date(2004, 1, 1), None, None, None, None, None, None, None, None, date(2014, 12, 31),
                        None, date(2015, 1, 1), None]},
    )
    return r, devices, patents


def _order(m: CompanyMatch) -> tuple[int, int, str]:
    """Best match first: same, acquired, acquirer, former owner; then fewer steps; then the path text."""
    rank = {"same": 0, "acquired": 1, "acquirer": 2, "former_owner": 3, "partner": 4}[m.kind]
    return rank, m.path.count("<-") + m.path.count("->"), m.path


@pytest.mark.parametrize("former_owners", [False, True])
def test_match_table_equals_brute_force(former_owners: bool) -> None:
    r, devices, patents = _small_world()
    r = r.with_former_owners(former_owners)
    table = company_match_table(devices, patents, r)
    assert table.schema == COMPANY_MATCHES
    best: dict[tuple[str, str], CompanyMatch] = {}
    known = {r.resolve(a) for a in devices["applicant"]} - {None}
    for fda_id, applicant, when in devices.iter_rows():
        dev = r.resolve(applicant)
        for pat_id, assignee, granted_on in patents.iter_rows():
            granted = granted_on or grant_years(pl.Series([pat_id]))[0]
            for one in r.assignee_companies(assignee, known):
                hits = [x for x in (r.reach(dev) if dev else ())
                        if x.target == one and x.holds(when) and x.covers(granted)]
                m = CompanyMatch(hits[0].kind, hits[0].path) if hits else None
                key = (fda_id, pat_id)
                if m and (key not in best or _order(m) < _order(best[key])):
                    best[key] = m
    brute = {(k[0], k[1], m.kind, m.path) for k, m in best.items()}
    assert set(table.rows()) == brute
    if former_owners:  # the window was exercised both ways
        former = {k[1] for k, m in best.items() if m.kind == "former_owner"}
        assert former == {"6957102", "10", "9000000"}  # not "7338518" (dated 2004), "11" (no year) nor "12"
    assert table.select("fda_id", "pat_id").is_unique().all()


def test_match_table_handles_empty_and_missing_dates(shipped: CompanyResolver) -> None:
    empty = company_match_table(
        pl.DataFrame(schema={"fda_id": pl.String, "applicant": pl.String, "decision_date": pl.Date}),
        pl.DataFrame(schema={"pat_id": pl.String, "assignee": pl.String}),
        shipped,
    )
    assert empty.height == 0 and empty.schema == COMPANY_MATCHES
    no_dates = company_match_table(
        pl.DataFrame({"fda_id": ["P1"], "applicant": ["Medtronic"]}),
        pl.DataFrame({"pat_id": ["9"], "assignee": ["Covidien LP"]}),
        shipped,
    )
    assert no_dates.rows() == [("P1", "9", "acquired", "MEDTRONIC <- COVIDIEN (2015-01-26)")]


# ----------------------------------------------------------------------------- dictionary


def test_build_company_dictionary(shipped: CompanyResolver) -> None:
    raw = ["Guidant Corp.", "Medtronic Vascular", "Avdanced Cardiovascular Systemss", "Zzyzx Widgets",
           "Guidant Corp.", None, "..."]
    d = build_company_dictionary(raw, shipped)
    assert d.schema == schemas.COMPANY_DICTIONARY
    assert d["raw_name"].to_list() == sorted({n for n in raw if n})
    by = {row["raw_name"]: row for row in d.iter_rows(named=True)}
    assert by["Guidant Corp."]["method"] == "exact" and by["Guidant Corp."]["company_id"] == "GUIDANT"
    assert by["Medtronic Vascular"]["method"] == "alias" and by["Medtronic Vascular"]["company_id"] == "MEDTRONIC"
    assert by["Avdanced Cardiovascular Systemss"]["method"] == "fuzzy"
    assert by["Zzyzx Widgets"]["method"] == "unknown" and by["Zzyzx Widgets"]["company_id"] == "ZZYZX WIDGETS"
    assert by["..."]["company_id"] is None
    assert set(d["method"]) <= {"alias", "exact", "fuzzy", "unknown"}
    assert build_company_dictionary(raw, shipped).equals(d)  # deterministic
