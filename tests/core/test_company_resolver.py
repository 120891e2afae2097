"""Aliases, fuzzy fallback, the dated M&A graph, former owners and alliances (meddevkg_core.company_resolver)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import polars as pl
import pytest

from meddevkg_core.company_resolver import CompanyMatch, CompanyResolver, company_relation
from meddevkg_core.company_tables import acquisitions_frame
from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import fingerprint
from tests.core.conftest import toy_resolver

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
def test_aliases_and_rules(shipped: CompanyResolver, raw: str, company: str) -> None:
    assert shipped.resolve(raw) == company


def test_alias_may_not_remap_a_known_company() -> None:
    with pytest.raises(ValueError, match="re-map"):
        toy_resolver([("Guidant", "BOSTON SCIENTIFIC")], [("ABBOTT", "GUIDANT", date(2006, 4, 21))])


# ----------------------------------------------------------------------------- fuzzy fallback


def test_fuzzy_fixes_typos_against_known_names_only() -> None:
    r = toy_resolver([], [("ABBOTT", "ADVANCED CARDIOVASCULAR SYSTEMS", date(2006, 4, 21))])
    hit = r.resolve_detail("Avdanced Cardiovascular Systems, Inc.")
    assert (hit.company_id, hit.method) == ("ADVANCED CARDIOVASCULAR SYSTEMS", "fuzzy")
    assert hit.score is not None and hit.score >= r.fuzzy_cutoff


def test_fuzzy_never_merges_two_known_companies() -> None:
    when = date(2000, 1, 1)
    r = toy_resolver([], [("X", "ADVANCED CARDIOVASCULAR SYSTEMS", when), ("Y", "CARDIOVASCULAR SYSTEMS", when)])
    for known in r.canonical:
        assert r.resolve(known) == known
    assert r.resolve_detail("Cardiovascular Systems, Inc.").method == "exact"
    # the shipped tables: every known name stays itself
    shipped = CompanyResolver.default()
    assert {c for c in shipped.canonical if shipped.resolve(c) != c} == set()


def test_fuzzy_rejects_other_firms_and_ties(shipped: CompanyResolver) -> None:
    assert shipped.resolve("LINVATEC") == "LINVATEC"  # not INVATEC
    assert shipped.resolve("P TECH") == "P TECH"  # not EP TECH
    tie = toy_resolver([], [("A", "ACME MEDICAL ONE", date(2000, 1, 1)), ("A", "ACME MEDICAL ONF", date(2000, 1, 1))])
    # cleanco takes "ONG" for a legal form (so nothing scored 92 before); "ONH" scores 93.75 with both names
    assert tie.resolve_detail("ACME MEDICAL ONH").method == "unknown"


def test_fuzzy_cutoff_is_configurable() -> None:
    frames = (pl.DataFrame(schema=["alias", "canonical"]), acquisitions_frame())
    strict = CompanyResolver.from_frames(*frames, fuzzy_cutoff=100.0)
    assert strict.resolve("Avdanced Cardiovascular Systemz") == "AVDANCED CARDIOVASCULAR SYSTEMZ"


# ----------------------------------------------------------------------------- unknown names


def test_unknown_and_none_never_crash_nor_match_others(shipped: CompanyResolver) -> None:
    assert shipped.resolve(None) is None
    assert shipped.resolve("") is None
    assert shipped.resolve("%%%") is None
    assert shipped.resolve("Zzyzx Widgets LLC") == "ZZYZX WIDGETS"
    itself = shipped.company_relation("Zzyzx Widgets LLC", None, "zzyzx widgets")
    assert itself == CompanyMatch("same", "ZZYZX WIDGETS")
    assert shipped.company_relation("Zzyzx Widgets LLC", None, "Medtronic") is None
    assert shipped.company_relation(None, None, "Medtronic") is None
    assert shipped.company_relation("Medtronic", date(2020, 1, 1), None) is None


# ----------------------------------------------------------------------------- dated M&A


def test_acquired_company_counts_from_the_close_date(shipped: CompanyResolver) -> None:
    assert shipped.company_relation("ABBOTT", date(2017, 1, 3), "St. Jude Medical, Inc.") is None
    on_close = shipped.company_relation("ABBOTT", date(2017, 1, 4), "St. Jude Medical, Inc.")
    assert on_close == CompanyMatch("acquired", "ABBOTT <- ST JUDE MEDICAL (2017-01-04)")
    assert shipped.company_relation("ABBOTT", None, "ST JUDE MEDICAL") == on_close  # no date: allowed


def test_a_deal_counts_while_fda_still_decides_on_the_device(shipped: CompanyResolver) -> None:
    # CardioMEMS's sensor (2014) is filed under Abbott, which owns CardioMEMS since St Jude in 2017
    approved = date(2014, 5, 28)
    assert shipped.company_relation("ABBOTT", approved, "CardioMEMS") is None  # the approval day alone
    later = shipped.company_relation("ABBOTT", approved, "CardioMEMS", device_last_decision=date(2024, 9, 30))
    assert later == CompanyMatch("acquired", "ABBOTT <- ST JUDE MEDICAL (2017-01-04) <- CARDIOMEMS (2014-06-02)")
    assert shipped.company_relation("ABBOTT", approved, "CardioMEMS", device_last_decision=date(2017, 1, 3)) is None
    # a divestiture still ends the reach by the approval date: J&J sold Cordis in 2015
    assert shipped.company_relation("Johnson & Johnson", date(2016, 1, 1), "Cordis Corp.",
                                    device_last_decision=date(2020, 1, 1)) is None
    assert shipped.company_relation("Johnson & Johnson", date(2000, 1, 1), "Cordis Corp.",
                                    device_last_decision=date(2020, 1, 1)) is not None


def test_acquirer_patents_count_for_the_acquired_name_at_any_date(shipped: CompanyResolver) -> None:
    old = shipped.company_relation("St. Jude Medical, Inc.", date(1990, 1, 1), "ABBOTT")
    assert old == CompanyMatch("acquirer", "ST JUDE MEDICAL -> ABBOTT (2017-01-04)")
    tri = shipped.company_relation("TriVascular, Inc.", date(2012, 10, 5), "Endologix")
    assert tri is not None and tri.kind == "acquirer"


def test_chains_resolve_transitively_with_every_step(shipped: CompanyResolver) -> None:
    m = shipped.company_relation("ABBOTT", date(2018, 1, 1), "CardioMEMS, Inc.")
    assert m == CompanyMatch("acquired", "ABBOTT <- ST JUDE MEDICAL (2017-01-04) <- CARDIOMEMS (2014-06-02)")
    assert shipped.company_relation("ABBOTT", date(2015, 1, 1), "CardioMEMS") is None  # St Jude not yet Abbott
    up = shipped.company_relation("CardioMEMS", None, "Abbott Laboratories")
    assert up == CompanyMatch("acquirer", "CARDIOMEMS -> ST JUDE MEDICAL (2014-06-02) -> ABBOTT (2017-01-04)")
    r = toy_resolver([], [("A", "B", date(2010, 1, 1)), ("B", "C", date(2005, 1, 1))])
    chain = CompanyMatch("acquired", "A <- B (2010-01-01) <- C (2005-01-01)")
    assert r.company_relation("A", date(2011, 1, 1), "C") == chain
    assert r.company_relation("A", date(2009, 1, 1), "C") is None


def test_a_later_buyer_ends_the_earlier_ownership(shipped: CompanyResolver) -> None:
    assert shipped.company_relation("Johnson & Johnson", date(2000, 1, 1), "Cordis Corp.") is not None
    assert shipped.company_relation("Johnson & Johnson", date(2016, 1, 1), "Cordis Corp.") is None
    after = shipped.company_relation("Cardinal Health", date(2016, 1, 1), "Cordis Corp.")
    assert after == CompanyMatch("acquired", "CARDINAL HEALTH <- CORDIS (2015-10-04)")


def test_same_company_wins_over_acquisition_paths(shipped: CompanyResolver) -> None:
    assert shipped.company_relation("Medtronic, Inc.", date(2020, 1, 1), "Medtronic Vascular") == CompanyMatch(
        "same", "MEDTRONIC"
    )


def test_module_level_relation_uses_shipped_tables() -> None:
    m = company_relation("BD", date(2018, 6, 1), "C. R. Bard, Inc.")
    assert m == CompanyMatch("acquired", "BD <- C R BARD (2017-12-29)")


def test_cycles_in_the_graph_terminate() -> None:
    r = toy_resolver([], [("A", "B", date(2000, 1, 1)), ("B", "A", date(2010, 1, 1))])
    assert r.company_relation("A", date(2005, 1, 1), "B") is not None
    assert r.company_relation("A", date(2020, 1, 1), "B") is not None  # as acquirer of A since 2010


# ----------------------------------------------------------------------------- multi-assignee


def test_run_together_assignees_split_at_known_companies(shipped: CompanyResolver) -> None:
    # the benchmark stores several assignees as one string; a company + an institution splits
    assert shipped.assignee_companies("NOVOSTE EMORY UNIVERSITY") == ("NOVOSTE EMORY UNIVERSITY", "NOVOSTE",
                                                                     "EMORY UNIVERSITY")
    assert shipped.assignee_companies("EMORY UNIVERSITY NOVOSTE")[1:] == ("EMORY UNIVERSITY", "NOVOSTE")
    sorin = shipped.assignee_companies("SORIN CRM SAS INSERM INSTITUT NATIONAL DE LA SANTE ET DE LA RECHERCHE")
    assert sorin[1] == "SORIN CRM"
    # a known name followed by ordinary words is another firm, not two assignees
    assert shipped.assignee_companies("SCHNEIDER ELECTRIC USA") == ("SCHNEIDER ELECTRIC USA",)
    assert shipped.assignee_companies("MARQUETTE UNIVERSITY") == ("MARQUETTE UNIVERSITY",)
    assert shipped.assignee_companies("SMITH AND NEPHEW") == ("SMITH AND NEPHEW",)
    # known names and aliases are never split; separators still work; garbage yields nothing
    assert shipped.assignee_companies("Boston Scientific Scimed, Inc.") == ("BOSTON SCIENTIFIC",)
    assert shipped.assignee_companies("Mayo Clinic; St. Jude Medical, Inc. | Mayo Clinic") == ("MAYO CLINIC",
                                                                                           "ST JUDE MEDICAL")
    assert shipped.assignee_companies(None) == () and shipped.assignee_companies(" ; ... ") == ()
    # unknown + unknown stays whole; a corpus company of two words or more may be passed as known
    assert shipped.assignee_companies("KINETICOR UNIVERSITY OF HAWAII") == ("KINETICOR UNIVERSITY OF HAWAII",)
    assert shipped.assignee_companies("LEMAITRE VASCULAR UNIVERSITY OF UTAH", ["LEMAITRE VASCULAR"])[1:] == (
        "LEMAITRE VASCULAR", "UNIVERSITY OF UTAH")
    assert shipped.assignee_companies("CONCEPT UNIVERSITY OF UTAH", ["CONCEPT"]) == ("CONCEPT UNIVERSITY OF UTAH",)


# ----------------------------------------------------------------------------- former owners and alliances


def test_former_owner_patents_follow_the_line_it_sold(shipped: CompanyResolver) -> None:
    assert shipped.former_owners is True  # on in the shipped resolver (and so in Stage 2)
    assert shipped.with_former_owners() is shipped
    off = shipped.with_former_owners(False)
    assert off.company_relation("ENDOLOGIX", None, "Boston Scientific Corp.", 2006) is None
    assert off.company_relation("STRYKER", None, "MEDTRONIC", 2005) is None
    assert shipped.ownership_only().company_relation("STRYKER", None, "MEDTRONIC", 2005) is None
    assert shipped.ownership_only().alliances == () and shipped.alliances
    ovation = shipped.company_relation("ENDOLOGIX", None, "Boston Scientific Corp.", date(2006, 8, 15))
    assert ovation == CompanyMatch("former_owner",
                                   "ENDOLOGIX <- TRIVASCULAR (2016-02-03) -> BOSTON SCIENTIFIC (2005-04-18)")
    # only the patents Boston Scientific was granted while it held TriVascular (2005-04-18 to the 2008 sale)
    assert shipped.company_relation("ENDOLOGIX", None, "BOSTON SCIENTIFIC", 2008) == ovation  # year overlaps
    assert shipped.company_relation("ENDOLOGIX", None, "BOSTON SCIENTIFIC", date(2005, 4, 1)) is None
    assert shipped.company_relation("ENDOLOGIX", None, "BOSTON SCIENTIFIC", 2009) is None
    assert shipped.company_relation("ENDOLOGIX", None, "BOSTON SCIENTIFIC") is None  # grant date unknown
    # dated like the acquisition it extends: an Endologix device approved before 2016 does not get it
    assert shipped.company_relation("ENDOLOGIX", date(2012, 10, 5), "BOSTON SCIENTIFIC", 2006) is None
    lifepak = shipped.company_relation("STRYKER", date(2018, 7, 2), "MEDTRONIC", 2005)
    assert lifepak == CompanyMatch("former_owner", "STRYKER <- PHYSIO CONTROL (2016-12-31) -> MEDTRONIC (1998-09-30)")
    assert shipped.company_relation("STRYKER", date(2018, 7, 2), "MEDTRONIC", 2015) is None  # Bain's years
    # Boston Scientific owned TriVascular only until the 2008 sale to TV2
    assert shipped.company_relation("BOSTON SCIENTIFIC", date(2006, 1, 1), "TriVascular") is not None
    assert shipped.company_relation("BOSTON SCIENTIFIC", date(2012, 1, 1), "TriVascular") is None
    # co-buyers on the same day are not earlier owners of each other's halves (Guidant 2006)
    assert shipped.company_relation("ABBOTT", None, "BOSTON SCIENTIFIC", 2007) is None
    assert shipped.company_relation("BOSTON SCIENTIFIC", None, "ABBOTT", 2007) is None
    r = toy_resolver([], [("NEW", "LINE", date(2016, 1, 1)), ("OLD", "LINE", date(2000, 1, 1)),
                       ("LATER", "LINE", date(2020, 1, 1))]).with_former_owners()
    assert r.company_relation("NEW", date(2017, 1, 1), "OLD", 2010).kind == "former_owner"
    assert r.company_relation("NEW", date(2017, 1, 1), "OLD", 1999) is None  # before OLD held the line
    assert r.company_relation("NEW", date(2017, 1, 1), "LATER", 2010) is None  # a later owner is not a former one
    assert r.company_relation("NEW", date(2021, 1, 1), "OLD", 2010) is None  # NEW no longer owns the line


def test_alliance_partners_patents_count_both_ways_from_the_start(shipped: CompanyResolver) -> None:
    biosense = shipped.company_relation("Biosense Webster, Inc.", date(2006, 8, 11), "Stereotaxis, Inc.")
    assert biosense == CompanyMatch("partner", "JOHNSON AND JOHNSON ~ STEREOTAXIS (alliance 2002-05-07)")
    assert shipped.company_relation("STEREOTAXIS", None, "Johnson & Johnson").kind == "partner"
    assert shipped.company_relation("Biosense Webster, Inc.", date(2001, 1, 1), "Stereotaxis, Inc.") is None
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


# ----------------------------------------------------------------------------- a corpus's own tables


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
