"""Company normalisation, aliases, fuzzy fallback and the dated M&A graph (meddevkg_core.company_names,
company_tables, company_resolver, companies)."""

from __future__ import annotations

import itertools
import json
from datetime import date
from pathlib import Path

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.applications import grant_years
from meddevkg_core.companies import COMPANY_MATCHES, build_company_dictionary, company_match_table
from meddevkg_core.company_names import normalize_company, split_assignees
from meddevkg_core.company_resolver import CompanyMatch, CompanyResolver, company_relation
from meddevkg_core.company_tables import acquisitions_frame, aliases_frame, alliances_frame
from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import fingerprint


@pytest.fixture(scope="module")
def default() -> CompanyResolver:
    return CompanyResolver.default()


def _resolver(aliases: list[tuple[str, str]], deals: list[tuple[str, str, date]]) -> CompanyResolver:
    return CompanyResolver.from_frames(
        pl.DataFrame(aliases, schema=["alias", "canonical"], orient="row"),
        pl.DataFrame(deals, schema=["acquirer", "acquired", "close_date"], orient="row"),
    )


# ----------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("St. Jude Medical, Inc.", "ST JUDE MEDICAL"),
        ("Johnson & Johnson", "JOHNSON AND JOHNSON"),
        ("Guidant Corp.", "GUIDANT"),
        ("Biotronik GmbH & Co. KG", "BIOTRONIK"),
        ("BIOTRONIK AND", "BIOTRONIK"),
        ("Goodman Co., Ltd.", "GOODMAN"),
        ("Occlutech Holding AG", "OCCLUTECH"),
        ("Rex Medical, L.P.", "REX MEDICAL"),
        ("TERUMO KABUSHIKI KAISHA", "TERUMO"),
        ("The Spectranetics Corp.", "SPECTRANETICS"),
        ("Biosensors International USA, Inc.", "BIOSENSORS INTL USA"),
        ("Alliance Medical Technologies, Inc.", "ALLIANCE MEDICAL TECH"),
        ("OrbusNeich Medical (Shenzhen) Co., Ltd.", "ORBUSNEICH MEDICAL SHENZHEN"),
        ("Meadox Medicals, Div. Boston Scientific Corp.", "BOSTON SCIENTIFIC"),
        ("MEADOX MEDICALS DIV BOSTON SCIENTIFIC", "BOSTON SCIENTIFIC"),
        ("St. Jude Medical, Cardiac Rhythm Management Divisi", "ST JUDE MEDICAL CARDIAC RHYTHM MANAGEMENT"),
        ("Graphic Controls D.B.A. Vermed", "VERMED"),
        ("Micro Therapeutics, Inc. d/b/a ev3 Neurovascular", "EV3 NEUROVASCULAR"),
        ("  Édwards   Lifesciences, LLC ", "EDWARDS LIFESCIENCES"),
        ("W L GORE", "W L GORE"),
    ],
)
def test_normalize_examples(raw: str, expected: str) -> None:
    assert normalize_company(raw) == expected


@pytest.mark.parametrize("raw", [None, "", "   ", "...", "Inc.", 42])
def test_normalize_empty_and_garbage_is_none(raw: object) -> None:
    assert normalize_company(raw) is None  # type: ignore[arg-type]


def test_normalize_is_idempotent_on_canonical_ids() -> None:
    acq, pacts = acquisitions_frame(), alliances_frame()
    ids = (set(aliases_frame()["canonical"]) | set(acq["acquirer"]) | set(acq["acquired"])
           | set(pacts["company_a"]) | set(pacts["company_b"]))
    assert {c for c in ids if normalize_company(c) != c} == set()
    assert pacts["source"].null_count() == 0 and acq["source"].null_count() == 0


# ----------------------------------------------------------------------------- aliases


@pytest.mark.parametrize(
    ("raw", "company"),
    [
        ("W. L. Gore & Associates, Inc.", "W L GORE"),
        ("St. Jude Medical, Inc.", "ST JUDE MEDICAL"),
        ("Guidant Corp.", "GUIDANT"),
        ("Medtronic Cardiac Rhythm Disease Management", "MEDTRONIC"),
        ("Medtronic Vascular, Inc.", "MEDTRONIC"),
        ("Abbott Vascular, Inc.", "ABBOTT"),
        ("ABBOTT MEDICAL", "ABBOTT"),
        ("Biosense Webster, Inc.", "JOHNSON AND JOHNSON"),
        ("Ethicon, Inc.", "JOHNSON AND JOHNSON"),
        ("Boston Scientific Scimed, Inc.", "BOSTON SCIENTIFIC"),
        ("Becton, Dickinson and Company", "BD"),
        ("C.R. Bard, Inc.", "C R BARD"),
        ("Usci, Div. C.R. Bard, Inc.", "C R BARD"),
        ("Nellcor Puritan Bennett", "NELLCOR"),
        ("ev3 Santa Rosa", "EV3"),
        ("ev3 Sunnyvale", "EV3"),
        ("Sorin Biomedica Cardio S.p.A.", "LIVANOVA"),
        ("Great Batch Medical", "GREATBATCH"),
        ("Greatbatch Medical", "GREATBATCH"),
        ("Pacesetter, Inc.", "PACESETTER SYSTEMS"),
        ("Covidien LP", "COVIDIEN"),
        ("Edwards Lifesciences, LLC", "EDWARDS LIFESCIENCES"),
        ("Spectranetics (Philips)", "PHILIPS"),
        ("Irvine Biomedical,Inc.(Ibi)", "IRVINE BIOMEDICAL"),
    ],
)
def test_aliases_and_rules(default: CompanyResolver, raw: str, company: str) -> None:
    assert default.resolve(raw) == company


def test_every_alias_row_has_a_source() -> None:
    for frame in (aliases_frame(), acquisitions_frame()):
        assert frame["source"].null_count() == 0
        assert (frame["source"].str.len_chars() > 5).all()


def test_alias_may_not_remap_a_known_company() -> None:
    with pytest.raises(ValueError, match="re-map"):
        _resolver([("Guidant", "BOSTON SCIENTIFIC")], [("ABBOTT", "GUIDANT", date(2006, 4, 21))])


# ----------------------------------------------------------------------------- fuzzy fallback


def test_fuzzy_fixes_typos_against_known_names_only() -> None:
    r = _resolver([], [("ABBOTT", "ADVANCED CARDIOVASCULAR SYSTEMS", date(2006, 4, 21))])
    hit = r.resolve_detail("Avdanced Cardiovascular Systems, Inc.")
    assert (hit.company_id, hit.method) == ("ADVANCED CARDIOVASCULAR SYSTEMS", "fuzzy")
    assert hit.score is not None and hit.score >= r.fuzzy_cutoff


def test_fuzzy_never_merges_two_known_companies() -> None:
    when = date(2000, 1, 1)
    r = _resolver([], [("X", "ADVANCED CARDIOVASCULAR SYSTEMS", when), ("Y", "CARDIOVASCULAR SYSTEMS", when)])
    for known in r.canonical:
        assert r.resolve(known) == known
    assert r.resolve_detail("Cardiovascular Systems, Inc.").method == "exact"
    # the shipped tables: every known name stays itself
    default = CompanyResolver.default()
    assert {c for c in default.canonical if default.resolve(c) != c} == set()


def test_fuzzy_rejects_other_firms_and_ties(default: CompanyResolver) -> None:
    assert default.resolve("LINVATEC") == "LINVATEC"  # not INVATEC
    assert default.resolve("P TECH") == "P TECH"  # not EP TECH
    tie = _resolver([], [("A", "ACME MEDICAL ONE", date(2000, 1, 1)), ("A", "ACME MEDICAL ONF", date(2000, 1, 1))])
    # cleanco takes "ONG" for a legal form (so nothing scored 92 before); "ONH" scores 93.75 with both names
    assert tie.resolve_detail("ACME MEDICAL ONH").method == "unknown"


def test_fuzzy_cutoff_is_configurable() -> None:
    frames = (pl.DataFrame(schema=["alias", "canonical"]), acquisitions_frame())
    strict = CompanyResolver.from_frames(*frames, fuzzy_cutoff=100.0)
    assert strict.resolve("Avdanced Cardiovascular Systemz") == "AVDANCED CARDIOVASCULAR SYSTEMZ"


# ----------------------------------------------------------------------------- unknown names


def test_unknown_and_none_never_crash_nor_match_others(default: CompanyResolver) -> None:
    assert default.resolve(None) is None
    assert default.resolve("") is None
    assert default.resolve("%%%") is None
    assert default.resolve("Zzyzx Widgets LLC") == "ZZYZX WIDGETS"
    itself = default.company_relation("Zzyzx Widgets LLC", None, "zzyzx widgets")
    assert itself == CompanyMatch("same", "ZZYZX WIDGETS")
    assert default.company_relation("Zzyzx Widgets LLC", None, "Medtronic") is None
    assert default.company_relation(None, None, "Medtronic") is None
    assert default.company_relation("Medtronic", date(2020, 1, 1), None) is None


# ----------------------------------------------------------------------------- dated M&A


def test_acquired_company_counts_from_the_close_date(default: CompanyResolver) -> None:
    assert default.company_relation("ABBOTT", date(2017, 1, 3), "St. Jude Medical, Inc.") is None
    on_close = default.company_relation("ABBOTT", date(2017, 1, 4), "St. Jude Medical, Inc.")
    assert on_close == CompanyMatch("acquired", "ABBOTT <- ST JUDE MEDICAL (2017-01-04)")
    assert default.company_relation("ABBOTT", None, "ST JUDE MEDICAL") == on_close  # no date: allowed


def test_a_deal_counts_while_fda_still_decides_on_the_device(default: CompanyResolver) -> None:
    # CardioMEMS's sensor (2014) is filed under Abbott, which owns CardioMEMS since St Jude in 2017
    approved = date(2014, 5, 28)
    assert default.company_relation("ABBOTT", approved, "CardioMEMS") is None  # the approval day alone
    later = default.company_relation("ABBOTT", approved, "CardioMEMS", device_last_decision=date(2024, 9, 30))
    assert later == CompanyMatch("acquired", "ABBOTT <- ST JUDE MEDICAL (2017-01-04) <- CARDIOMEMS (2014-06-02)")
    assert default.company_relation("ABBOTT", approved, "CardioMEMS", device_last_decision=date(2017, 1, 3)) is None
    # a divestiture still ends the reach by the approval date: J&J sold Cordis in 2015
    assert default.company_relation("Johnson & Johnson", date(2016, 1, 1), "Cordis Corp.",
                                    device_last_decision=date(2020, 1, 1)) is None
    assert default.company_relation("Johnson & Johnson", date(2000, 1, 1), "Cordis Corp.",
                                    device_last_decision=date(2020, 1, 1)) is not None


def test_the_match_table_reads_the_devices_latest_decision(default: CompanyResolver) -> None:
    devices = pl.DataFrame({"fda_id": ["P1", "P2", "P3"], "applicant": ["ABBOTT"] * 3,
                            "decision_date": [date(2014, 5, 28)] * 3,
                            "last_decision_date": [date(2024, 9, 30), date(2016, 1, 4), None]})
    patents = pl.DataFrame({"pat_id": ["1", "2"], "assignee": ["CardioMEMS, Inc.", "Abbott Laboratories"]})
    out = company_match_table(devices, patents, default)
    assert out.select("fda_id", "pat_id", "match_kind").sort("fda_id", "pat_id").rows() == [
        ("P1", "1", "acquired"), ("P1", "2", "same"), ("P2", "2", "same"), ("P3", "2", "same")]
    without = company_match_table(devices.drop("last_decision_date"), patents, default)
    assert without.filter(pl.col("pat_id") == "1").height == 0


def test_acquirer_patents_count_for_the_acquired_name_at_any_date(default: CompanyResolver) -> None:
    old = default.company_relation("St. Jude Medical, Inc.", date(1990, 1, 1), "ABBOTT")
    assert old == CompanyMatch("acquirer", "ST JUDE MEDICAL -> ABBOTT (2017-01-04)")
    tri = default.company_relation("TriVascular, Inc.", date(2012, 10, 5), "Endologix")
    assert tri is not None and tri.kind == "acquirer"


def test_chains_resolve_transitively_with_every_step(default: CompanyResolver) -> None:
    m = default.company_relation("ABBOTT", date(2018, 1, 1), "CardioMEMS, Inc.")
    assert m == CompanyMatch("acquired", "ABBOTT <- ST JUDE MEDICAL (2017-01-04) <- CARDIOMEMS (2014-06-02)")
    assert default.company_relation("ABBOTT", date(2015, 1, 1), "CardioMEMS") is None  # St Jude not yet Abbott
    up = default.company_relation("CardioMEMS", None, "Abbott Laboratories")
    assert up == CompanyMatch("acquirer", "CARDIOMEMS -> ST JUDE MEDICAL (2014-06-02) -> ABBOTT (2017-01-04)")
    r = _resolver([], [("A", "B", date(2010, 1, 1)), ("B", "C", date(2005, 1, 1))])
    chain = CompanyMatch("acquired", "A <- B (2010-01-01) <- C (2005-01-01)")
    assert r.company_relation("A", date(2011, 1, 1), "C") == chain
    assert r.company_relation("A", date(2009, 1, 1), "C") is None


def test_a_later_buyer_ends_the_earlier_ownership(default: CompanyResolver) -> None:
    assert default.company_relation("Johnson & Johnson", date(2000, 1, 1), "Cordis Corp.") is not None
    assert default.company_relation("Johnson & Johnson", date(2016, 1, 1), "Cordis Corp.") is None
    after = default.company_relation("Cardinal Health", date(2016, 1, 1), "Cordis Corp.")
    assert after == CompanyMatch("acquired", "CARDINAL HEALTH <- CORDIS (2015-10-04)")


def test_same_company_wins_over_acquisition_paths(default: CompanyResolver) -> None:
    assert default.company_relation("Medtronic, Inc.", date(2020, 1, 1), "Medtronic Vascular") == CompanyMatch(
        "same", "MEDTRONIC"
    )


def test_module_level_relation_uses_shipped_tables() -> None:
    m = company_relation("BD", date(2018, 6, 1), "C. R. Bard, Inc.")
    assert m == CompanyMatch("acquired", "BD <- C R BARD (2017-12-29)")


def test_cycles_in_the_graph_terminate() -> None:
    r = _resolver([], [("A", "B", date(2000, 1, 1)), ("B", "A", date(2010, 1, 1))])
    assert r.company_relation("A", date(2005, 1, 1), "B") is not None
    assert r.company_relation("A", date(2020, 1, 1), "B") is not None  # as acquirer of A since 2010


# ----------------------------------------------------------------------------- multi-assignee


def test_split_assignees() -> None:
    assert split_assignees("Foo Inc.; Bar Corp | Baz ;") == ["Foo Inc.", "Bar Corp", "Baz"]
    assert split_assignees(None) == []
    assert split_assignees("  ") == []


def test_patent_matches_if_any_assignee_matches(default: CompanyResolver) -> None:
    devices = pl.DataFrame({"fda_id": ["P1"], "applicant": ["ABBOTT"], "decision_date": [date(2018, 1, 1)]})
    patents = pl.DataFrame({"pat_id": ["1", "2"], "assignee": ["Mayo Clinic; St. Jude Medical, Inc.", "Mayo Clinic"]})
    out = company_match_table(devices, patents, default)
    assert out.rows() == [("P1", "1", "acquired", "ABBOTT <- ST JUDE MEDICAL (2017-01-04)")]


def test_run_together_assignees_split_at_known_companies(default: CompanyResolver) -> None:
    # the benchmark stores several assignees as one string; a company + an institution splits
    assert default.assignee_companies("NOVOSTE EMORY UNIVERSITY") == ("NOVOSTE EMORY UNIVERSITY", "NOVOSTE",
                                                                     "EMORY UNIVERSITY")
    assert default.assignee_companies("EMORY UNIVERSITY NOVOSTE")[1:] == ("EMORY UNIVERSITY", "NOVOSTE")
    sorin = default.assignee_companies("SORIN CRM SAS INSERM INSTITUT NATIONAL DE LA SANTE ET DE LA RECHERCHE")
    assert sorin[1] == "SORIN CRM"
    # a known name followed by ordinary words is another firm, not two assignees
    assert default.assignee_companies("SCHNEIDER ELECTRIC USA") == ("SCHNEIDER ELECTRIC USA",)
    assert default.assignee_companies("MARQUETTE UNIVERSITY") == ("MARQUETTE UNIVERSITY",)
    assert default.assignee_companies("SMITH AND NEPHEW") == ("SMITH AND NEPHEW",)
    # known names and aliases are never split; separators still work; garbage yields nothing
    assert default.assignee_companies("Boston Scientific Scimed, Inc.") == ("BOSTON SCIENTIFIC",)
    assert default.assignee_companies("Mayo Clinic; St. Jude Medical, Inc. | Mayo Clinic") == ("MAYO CLINIC",
                                                                                           "ST JUDE MEDICAL")
    assert default.assignee_companies(None) == () and default.assignee_companies(" ; ... ") == ()
    # unknown + unknown stays whole; a corpus company of two words or more may be passed as known
    assert default.assignee_companies("KINETICOR UNIVERSITY OF HAWAII") == ("KINETICOR UNIVERSITY OF HAWAII",)
    assert default.assignee_companies("LEMAITRE VASCULAR UNIVERSITY OF UTAH", ["LEMAITRE VASCULAR"])[1:] == (
        "LEMAITRE VASCULAR", "UNIVERSITY OF UTAH")
    assert default.assignee_companies("CONCEPT UNIVERSITY OF UTAH", ["CONCEPT"]) == ("CONCEPT UNIVERSITY OF UTAH",)


def test_former_owner_patents_follow_the_line_it_sold(default: CompanyResolver) -> None:
    assert default.former_owners is True  # on in the shipped resolver (and so in Stage 2)
    assert default.with_former_owners() is default
    off = default.with_former_owners(False)
    assert off.company_relation("ENDOLOGIX", None, "Boston Scientific Corp.", 2006) is None
    assert off.company_relation("STRYKER", None, "MEDTRONIC", 2005) is None
    assert default.ownership_only().company_relation("STRYKER", None, "MEDTRONIC", 2005) is None
    assert default.ownership_only().alliances == () and default.alliances
    ovation = default.company_relation("ENDOLOGIX", None, "Boston Scientific Corp.", date(2006, 8, 15))
    assert ovation == CompanyMatch("former_owner",
                                   "ENDOLOGIX <- TRIVASCULAR (2016-02-03) -> BOSTON SCIENTIFIC (2005-04-18)")
    # only the patents Boston Scientific was granted while it held TriVascular (2005-04-18 to the 2008 sale)
    assert default.company_relation("ENDOLOGIX", None, "BOSTON SCIENTIFIC", 2008) == ovation  # year overlaps
    assert default.company_relation("ENDOLOGIX", None, "BOSTON SCIENTIFIC", date(2005, 4, 1)) is None
    assert default.company_relation("ENDOLOGIX", None, "BOSTON SCIENTIFIC", 2009) is None
    assert default.company_relation("ENDOLOGIX", None, "BOSTON SCIENTIFIC") is None  # grant date unknown
    # dated like the acquisition it extends: an Endologix device approved before 2016 does not get it
    assert default.company_relation("ENDOLOGIX", date(2012, 10, 5), "BOSTON SCIENTIFIC", 2006) is None
    lifepak = default.company_relation("STRYKER", date(2018, 7, 2), "MEDTRONIC", 2005)
    assert lifepak == CompanyMatch("former_owner", "STRYKER <- PHYSIO CONTROL (2016-12-31) -> MEDTRONIC (1998-09-30)")
    assert default.company_relation("STRYKER", date(2018, 7, 2), "MEDTRONIC", 2015) is None  # Bain's years
    # Boston Scientific owned TriVascular only until the 2008 sale to TV2
    assert default.company_relation("BOSTON SCIENTIFIC", date(2006, 1, 1), "TriVascular") is not None
    assert default.company_relation("BOSTON SCIENTIFIC", date(2012, 1, 1), "TriVascular") is None
    # co-buyers on the same day are not earlier owners of each other's halves (Guidant 2006)
    assert default.company_relation("ABBOTT", None, "BOSTON SCIENTIFIC", 2007) is None
    assert default.company_relation("BOSTON SCIENTIFIC", None, "ABBOTT", 2007) is None
    r = _resolver([], [("NEW", "LINE", date(2016, 1, 1)), ("OLD", "LINE", date(2000, 1, 1)),
                       ("LATER", "LINE", date(2020, 1, 1))]).with_former_owners()
    assert r.company_relation("NEW", date(2017, 1, 1), "OLD", 2010).kind == "former_owner"
    assert r.company_relation("NEW", date(2017, 1, 1), "OLD", 1999) is None  # before OLD held the line
    assert r.company_relation("NEW", date(2017, 1, 1), "LATER", 2010) is None  # a later owner is not a former one
    assert r.company_relation("NEW", date(2021, 1, 1), "OLD", 2010) is None  # NEW no longer owns the line


def test_alliance_partners_patents_count_both_ways_from_the_start(default: CompanyResolver) -> None:
    biosense = default.company_relation("Biosense Webster, Inc.", date(2006, 8, 11), "Stereotaxis, Inc.")
    assert biosense == CompanyMatch("partner", "JOHNSON AND JOHNSON ~ STEREOTAXIS (alliance 2002-05-07)")
    assert default.company_relation("STEREOTAXIS", None, "Johnson & Johnson").kind == "partner"
    assert default.company_relation("Biosense Webster, Inc.", date(2001, 1, 1), "Stereotaxis, Inc.") is None
    # an alliance is not ownership: the partner's acquisitions and acquirers are not reached through it
    r = CompanyResolver.from_frames(
        pl.DataFrame(schema=["alias", "canonical"]),
        pl.DataFrame([("BIGCO", "SMALLCO", date(2010, 1, 1))], schema=["acquirer", "acquired", "close_date"],
                     orient="row"),
        alliances=pl.DataFrame({"company_a": ["Partner Inc."], "company_b": ["BIGCO"],
                                "start_date": [date(2005, 1, 1)], "end_date": [date(2015, 1, 1)]}),
    )
    assert r.company_relation("PARTNER", date(2014, 12, 31), "BIGCO") == CompanyMatch(
        "partner", "PARTNER ~ BIGCO (alliance 2005-01-01 to 2015-01-01)")
    assert r.company_relation("PARTNER", date(2015, 1, 1), "BIGCO") is None  # ended
    assert r.company_relation("PARTNER", None, "SMALLCO") is None
    assert r.company_relation("BIGCO", None, "SMALLCO").kind == "acquired"  # better than nothing, not partner


def test_corpus_alliances_extend_the_shipped_ones(tmp_path: Path) -> None:
    (tmp_path / "alliances.csv").write_text("company_a,company_b,start_date,source\nACME,WIDGETCO,2001-02-03,test\n")
    r = CompanyResolver.for_corpus(tmp_path)
    assert r.company_relation("WIDGETCO", None, "ACME").kind == "partner"
    assert r.company_relation("STEREOTAXIS", None, "JOHNSON AND JOHNSON").kind == "partner"
    # a party named by an alias is that company (not a new id that the alias table would clash with)
    (tmp_path / "alliances.csv").write_text("company_a,company_b,start_date\nBiosense Webster Inc.,ACME,2001-02-03\n")
    assert CompanyResolver.for_corpus(tmp_path).company_relation("ACME", None, "Ethicon, Inc.").path == (
        "ACME ~ JOHNSON AND JOHNSON (alliance 2001-02-03)")
    (tmp_path / "alliances.csv").write_text("company_a,company_b,start_date\nACME,WIDGETCO,03/02/2001\n")
    r = CompanyResolver.for_corpus(tmp_path)  # a date the corpus tables would not take either: quarantined
    assert r.company_relation("WIDGETCO", None, "ACME") is None
    assert r.rejected.select("record_key", "reason").rows() == [
        ("alliances#0:ACME", "unparseable start_date (want YYYY-MM-DD)")]


# ----------------------------------------------------------------------------- vectorised table


def _small_world() -> tuple[CompanyResolver, pl.DataFrame, pl.DataFrame]:
    r = _resolver(
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


def test_match_table_handles_empty_and_missing_dates(default: CompanyResolver) -> None:
    empty = company_match_table(
        pl.DataFrame(schema={"fda_id": pl.String, "applicant": pl.String, "decision_date": pl.Date}),
        pl.DataFrame(schema={"pat_id": pl.String, "assignee": pl.String}),
        default,
    )
    assert empty.height == 0 and empty.schema == COMPANY_MATCHES
    no_dates = company_match_table(
        pl.DataFrame({"fda_id": ["P1"], "applicant": ["Medtronic"]}),
        pl.DataFrame({"pat_id": ["9"], "assignee": ["Covidien LP"]}),
        default,
    )
    assert no_dates.rows() == [("P1", "9", "acquired", "MEDTRONIC <- COVIDIEN (2015-01-26)")]


# ----------------------------------------------------------------------------- dictionary and frames


def test_build_company_dictionary(default: CompanyResolver) -> None:
    raw = ["Guidant Corp.", "Medtronic Vascular", "Avdanced Cardiovascular Systemss", "Zzyzx Widgets",
           "Guidant Corp.", None, "..."]
    d = build_company_dictionary(raw, default)
    assert d.schema == schemas.COMPANY_DICTIONARY
    assert d["raw_name"].to_list() == sorted({n for n in raw if n})
    by = {row["raw_name"]: row for row in d.iter_rows(named=True)}
    assert by["Guidant Corp."]["method"] == "exact" and by["Guidant Corp."]["company_id"] == "GUIDANT"
    assert by["Medtronic Vascular"]["method"] == "alias" and by["Medtronic Vascular"]["company_id"] == "MEDTRONIC"
    assert by["Avdanced Cardiovascular Systemss"]["method"] == "fuzzy"
    assert by["Zzyzx Widgets"]["method"] == "unknown" and by["Zzyzx Widgets"]["company_id"] == "ZZYZX WIDGETS"
    assert by["..."]["company_id"] is None
    assert set(d["method"]) <= {"alias", "exact", "fuzzy", "unknown"}
    assert build_company_dictionary(raw, default).equals(d)  # deterministic


def test_acquisitions_frame_has_the_verified_deals() -> None:
    acq = acquisitions_frame()
    assert acq.schema == schemas.ACQUISITIONS
    assert acq["close_date"].null_count() == 0
    deals = {(a, b): d for a, b, d, _ in acq.iter_rows()}
    for key, when in {
        ("ABBOTT", "ST JUDE MEDICAL"): date(2017, 1, 4),
        ("BOSTON SCIENTIFIC", "GUIDANT"): date(2006, 4, 21),
        ("MEDTRONIC", "COVIDIEN"): date(2015, 1, 26),
        ("ENDOLOGIX", "TRIVASCULAR"): date(2016, 2, 3),
        ("BD", "C R BARD"): date(2017, 12, 29),
        ("CARDINAL HEALTH", "CORDIS"): date(2015, 10, 4),
        ("ST JUDE MEDICAL", "THORATEC"): date(2015, 10, 8),
        ("MEDTRONIC", "ATS MEDICAL"): date(2010, 8, 12),
        ("ABBOTT", "TENDYNE"): date(2015, 9, 2),
        ("LIVANOVA", "CYBERONICS"): date(2015, 10, 19),
    }.items():
        assert deals[key] == when


def test_alias_keys_are_unique_after_normalisation() -> None:
    keys = [normalize_company(a) for a in aliases_frame()["alias"]]
    assert None not in keys
    assert len(keys) == len(set(keys))


def test_for_corpus_adds_the_corpus_deals(tmp_path) -> None:
    assert CompanyResolver.for_corpus(tmp_path) is CompanyResolver.default()
    (tmp_path / "acquisitions.csv").write_text(
        "acquirer,acquired,close_date,source\nMeridian Cardiac,Pulsewave Medical,2017-03-31,demo\n"
    )
    (tmp_path / "aliases.csv").write_text("alias,canonical,source\nPulsewave Med,PULSEWAVE MEDICAL,demo\n")
    r = CompanyResolver.for_corpus(tmp_path)
    assert r.inputs == {"aliases": fingerprint(tmp_path / "aliases.csv"),  # the files read, for the run's report
                        "acquisitions": fingerprint(tmp_path / "acquisitions.csv")}
    assert r.company_relation("Meridian Cardiac, Inc.", date(2018, 1, 1), "Pulsewave Med") == CompanyMatch(
        "acquired", "MERIDIAN CARDIAC <- PULSEWAVE MEDICAL (2017-03-31)"
    )
    assert r.company_relation("Meridian Cardiac, Inc.", date(2016, 1, 1), "Pulsewave Medical, Inc.") is None
    assert r.resolve("ABBOTT MEDICAL") == "ABBOTT"  # shipped tables still there
    demo = CompanyResolver.for_corpus(Path(__file__).resolve().parents[2] / "meddevkg_core" / "data" / "demo")
    assert demo.company_relation("MERIDIAN CARDIAC", date(2018, 1, 1), "PULSEWAVE MEDICAL") is not None


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_the_corpus_company_tables_are_read_in_every_corpus_format(tmp_path, suffix) -> None:
    """README: a corpus table may be Parquet, CSV or JSON Lines; these two were ignored."""
    tables = {"acquisitions": {"acquirer": ["ZETA MEDICAL"], "acquired": ["OMEGA DEVICES"],
                               "close_date": ["2015-06-01"], "source": ["memo"]},
              "aliases": {"alias": ["ZetaX Inc"], "canonical": ["ZETA MEDICAL"]},
              "alliances": {"company_a": ["ZETA MEDICAL"], "company_b": ["GADGETCO"], "start_date": ["2016-01-01"]}}
    for name, columns in tables.items():
        df = pl.DataFrame(columns)
        df.write_parquet(tmp_path / f"{name}{suffix}") if suffix == ".parquet" else df.write_ndjson(
            tmp_path / f"{name}{suffix}")
    r = CompanyResolver.for_corpus(tmp_path)
    assert r.company_relation("ZetaX Inc", date(2016, 1, 1), "OMEGA DEVICES") == CompanyMatch(
        "acquired", "ZETA MEDICAL <- OMEGA DEVICES (2015-06-01)")
    assert r.company_relation("GADGETCO", None, "ZETA MEDICAL").kind == "partner"
    assert r.rejected.height == 0
    (tmp_path / "acquisitions.csv").write_text("acquirer,acquired,close_date\n")
    with pytest.raises(CorpusError, match="'acquisitions' is given twice"):
        CompanyResolver.for_corpus(tmp_path)


def test_corpus_company_tables_that_re_map_a_known_company_are_an_error_naming_them(tmp_path) -> None:
    # the resolver's ValueError reached the command as a traceback naming no file
    (tmp_path / "aliases.csv").write_text("alias,canonical\nGUIDANT,Acme Inc.\n")  # GUIDANT is a company
    (tmp_path / "alliances.csv").write_text("company_a,company_b,start_date\nACME,WIDGETCO,2001-02-03\n")
    with pytest.raises(CorpusError, match=r"its company tables \(aliases.csv, alliances.csv\) cannot be used: "
                                          r"aliases would re-map known companies: \{'GUIDANT': 'ACME'\}"):
        CompanyResolver.for_corpus(tmp_path)
    # a deal naming a company by another's alias makes the alias a company of its own
    (tmp_path / "aliases.csv").unlink()
    (tmp_path / "acquisitions.csv").write_text("acquirer,acquired,close_date\nMedtronic Vascular,ACME,2001-02-03\n")
    with pytest.raises(CorpusError, match="'MEDTRONIC VASCULAR': 'MEDTRONIC'"):
        CompanyResolver.for_corpus(tmp_path)


def test_corpus_company_rows_the_resolver_cannot_use_are_quarantined_not_passed_over(tmp_path) -> None:
    # each was read as valid, and then left out of the resolver (or overrode an earlier row) without a word
    (tmp_path / "aliases.csv").write_text("alias,canonical\nZetaX,&\nZeta Devices,ZETA MEDICAL\n"
                                          "ZETA DEVICES INC.,OMEGA DEVICES\nZeta Devices Corp,Zeta Medical Inc\n")
    (tmp_path / "acquisitions.csv").write_text("acquirer,acquired,close_date\nInc.,OMEGA DEVICES,2015-06-01\n"
                                               "ZETA MEDICAL,OMEGA DEVICES,2015-06-01\n")
    (tmp_path / "alliances.csv").write_text("company_a,company_b,start_date\n"
                                            "Zeta Devices,Zeta Medical Inc.,2016-01-01\n"
                                            "Biosense Webster,Johnson & Johnson,2016-01-01\n"
                                            "ZETA MEDICAL,GADGETCO,2016-01-01\n")
    r = CompanyResolver.for_corpus(tmp_path)
    assert r.rejected.select("source", "record_key", "reason").rows() == [
        ("aliases.csv", "aliases:ZetaX|&", "canonical '&' names no company once normalised"),
        ("aliases.csv", "aliases:ZETA DEVICES INC.|OMEGA DEVICES", "alias 'ZETA DEVICES INC.' is alias 'Zeta "
                                                                    "Devices' once normalised (ZETA DEVICES), which "
                                                                    "names ZETA MEDICAL"),
        ("acquisitions.csv", "acquisitions:Inc.|OMEGA DEVICES", "acquirer 'Inc.' names no company once normalised"),
        ("alliances.csv", "alliances:Zeta Devices|Zeta Medical Inc.", "company_a and company_b are one company "
                                                                       "(ZETA MEDICAL)"),
        ("alliances.csv", "alliances:Biosense Webster|Johnson & Johnson", "company_a and company_b are one company "
                                                                           "(JOHNSON AND JOHNSON)")]
    assert json.loads(r.rejected["record"][2]) == {"acquirer": "Inc.", "acquired": "OMEGA DEVICES",
                                                   "close_date": "2015-06-01", "source": None}
    assert r.resolve("Zeta Devices") == "ZETA MEDICAL"  # the usable rows are all used
    assert [d.acquired for d in r.deals if d.acquirer == "ZETA MEDICAL"] == ["OMEGA DEVICES"]
    assert r.company_relation("GADGETCO", None, "ZETA MEDICAL").kind == "partner"


def test_corpus_company_rows_missing_a_value_are_quarantined_not_dropped(tmp_path) -> None:
    (tmp_path / "acquisitions.csv").write_text(
        "acquirer,acquired,close_date,source\nZETA MEDICAL,OMEGA DEVICES,,memo\nZETA MEDICAL,,2016-01-01,memo\n"
        "ZETA MEDICAL,ALPHA DEVICES,2017-01-01,memo\n")
    (tmp_path / "alliances.csv").write_text("company_a,company_b,start_date\nZETA MEDICAL,GADGETCO, \n")
    (tmp_path / "aliases.csv").write_text("alias,canonical\nZetaX Inc,\n")
    r = CompanyResolver.for_corpus(tmp_path)
    assert [d.acquired for d in r.deals if d.acquirer == "ZETA MEDICAL"] == ["ALPHA DEVICES"]
    assert r.rejected.select("source", "record_key", "reason").rows() == [
        ("aliases.csv", "aliases#0:ZetaX Inc", "missing canonical"),
        ("acquisitions.csv", "acquisitions#0:ZETA MEDICAL", "missing close_date"),
        ("acquisitions.csv", "acquisitions#1:ZETA MEDICAL", "missing acquired"),
        ("alliances.csv", "alliances#0:ZETA MEDICAL", "missing start_date"),
    ]
    assert r.rejected.schema == schemas.REJECTED_RECORDS
    assert r.with_former_owners(False).rejected is r.rejected
    (tmp_path / "acquisitions.jsonl").write_text(
        '{"acquirer": "ZETA MEDICAL", "acquired": null, "close_date": "2016-01-01"}\nnot json\n')
    (tmp_path / "acquisitions.csv").unlink()
    reasons = CompanyResolver.for_corpus(tmp_path).rejected.filter(pl.col("source") == "acquisitions.jsonl")["reason"]
    assert reasons[0] == "missing acquired" and reasons[1].startswith("line 2: invalid JSON")


@pytest.mark.parametrize(("name", "data", "problem"), [
    ("aliases.csv", b"name,canonical_name\nZetaX Inc,ZETA MEDICAL\n",
     r"table 'aliases' has no column 'alias' \(columns: name, canonical_name\)"),
    ("acquisitions.csv", b"acquirer,acquired,date\nZETA MEDICAL,OMEGA DEVICES,2015-06-01\n",
     r"table 'acquisitions' has no column 'close_date' \(columns: acquirer, acquired, date\)"),
])
def test_a_corpus_company_table_without_a_required_column_is_a_corpus_error_naming_it(tmp_path, name, data,
                                                                                       problem) -> None:
    (tmp_path / name).write_bytes(data)
    with pytest.raises(CorpusError, match=f"{name}: {problem}"):
        CompanyResolver.for_corpus(tmp_path)


def test_corpus_company_rows_with_a_bad_date_or_bytes_are_quarantined_as_the_corpus_tables_rows_are(
        tmp_path) -> None:
    (tmp_path / "acquisitions.csv").write_text(
        "acquirer,acquired,close_date\nZETA MEDICAL,OMEGA DEVICES,2099-13-45\nZETA MEDICAL,OMEGA DEVICES,2015-06-01\n"
        "ZETA MEDICAL,OMEGA DEVICES,2015-06-01\n")
    (tmp_path / "aliases.csv").write_bytes("alias,canonical\nZetaX Inc,ZETA M\u00c9DICAL\n".encode("latin-1"))
    (tmp_path / "alliances.jsonl").write_bytes(
        '{"company_a": "ZETA M\u00c9DICAL", "company_b": "X", "start_date": "2001-01-01"}'.encode("latin-1"))
    r = CompanyResolver.for_corpus(tmp_path)
    assert [d.close_date for d in r.deals if d.acquirer == "ZETA MEDICAL"] == [date(2015, 6, 1)]
    assert r.rejected.select("source", "reason").rows() == [
        ("aliases.csv", "bytes that are not UTF-8 in canonical (read as U+FFFD)"),
        ("acquisitions.csv", "unparseable close_date (want YYYY-MM-DD)"),
        ("acquisitions.csv", "duplicate key of row 1"),
        ("alliances.jsonl", "bytes that are not UTF-8 in company_a (read as U+FFFD)"),
    ]


def test_the_resolvers_deals_and_alliances_keep_their_source(tmp_path) -> None:
    """The graph's ACQUIRED and PARTNER_OF edges take their `source` from these tables."""
    shipped = CompanyResolver.default()
    assert shipped.acquisitions.height == acquisitions_frame().height
    assert shipped.acquisitions["source"].null_count() == 0 and shipped.alliance_table["source"].null_count() == 0
    (tmp_path / "acquisitions.csv").write_text(
        "acquirer,acquired,close_date,source\nACME,WIDGETCO,2001-02-03,deal memo\n")
    (tmp_path / "alliances.csv").write_text(  # the shipped J&J ~ Stereotaxis alliance again: one, shipped source
        "company_a,company_b,start_date,source\nACME,GADGETCO,2002-03-04,pact memo\n"
        "Johnson & Johnson,Stereotaxis,2002-05-07,again\n")
    r = CompanyResolver.for_corpus(tmp_path)
    deal = r.acquisitions.filter(pl.col("acquired") == "WIDGETCO")
    assert deal.select("acquirer", "source").rows() == [("ACME", "deal memo")]
    pacts = r.alliance_table
    assert pacts.filter(pl.col("company_b") == "GADGETCO")["source"].to_list() == ["pact memo"]
    jj = pacts.filter(pl.col("company_b") == "STEREOTAXIS")
    assert jj.height == 1 and jj["source"].item() == shipped.alliance_table.filter(
        pl.col("company_b") == "STEREOTAXIS")["source"].item()
