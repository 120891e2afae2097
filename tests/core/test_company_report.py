"""`meddevkg_core.company_report` on small synthetic frames: every figure checked by hand."""

from __future__ import annotations

import hashlib
import json
from datetime import date

import polars as pl
import pytest

from meddevkg_core.companies import company_match_table
from meddevkg_core.company_report import (
    company_report,
    cross_company_gold,
    exact_name_pairs,
    extra_pairs,
    fda_decisions,
    fda_sponsors,
    format_company_report,
    headline,
    sponsor_resolution,
)
from meddevkg_core.company_resolver import CompanyResolver


def _resolver() -> CompanyResolver:
    """ALPHA bought BETA in 2010; BETA had been owned by GAMMA 2000-2010; 'Alpha Vascular' is ALPHA."""
    return CompanyResolver.from_frames(
        pl.DataFrame([("Alpha Vascular", "ALPHA")], schema=["alias", "canonical"], orient="row"),
        pl.DataFrame(
            [("ALPHA", "BETA", date(2010, 1, 1)), ("GAMMA", "BETA", date(2000, 1, 1))],
            schema=["acquirer", "acquired", "close_date"], orient="row",
        ),
    )


def _fda() -> pl.DataFrame:
    rows = [
        ("P000001", "P000001", "Alpha Vascular, Inc.", date(2012, 5, 1), True),
        ("P000001/S001", "P000001", "Alpha Vascular, Inc.", date(2013, 1, 1), False),
        ("P000002", "P000002", "Alpha Vascular, Inc.", date(2008, 3, 1), True),  # BETA's, renamed; before 2010
        ("P000003", "P000003", "Zed Devices LLC", date(2015, 1, 1), True),  # unknown, unrelated sponsor
        ("P000004/S002", "P000004", "Old Name Inc", date(1990, 1, 1), False),  # no original row
        ("P000004/S007", "P000004", "Beta Corp.", date(1999, 1, 1), False),
    ]
    return pl.DataFrame(rows, schema={"submission_number": pl.String, "pma_number": pl.String, "sponsor": pl.String,
                                      "date_decision": pl.Date, "is_original": pl.Boolean}, orient="row")


def _corpus() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    devices = pl.DataFrame({"fda_id": ["P000001", "P000002", "p000003", "P000004", "P000005"],
                            "applicant": ["ALPHA", "ALPHA", "ALPHA", "ALPHA", "UNKNOWN CO"]})
    patents = pl.DataFrame({
        "pat_id": ["1", "2", "3", "4", "5", "6", "7"],
        "assignee": ["ALPHA", "BETA", "GAMMA", "BETA STATE UNIVERSITY OF NOWHERE", "Mayo Clinic; Beta Corp.",
                     "ZED WIDGETS", None],
        "grant_date": [None, None, date(2005, 6, 1), None, None, None, None],  # GAMMA's, while it held BETA
    })
    gold = pl.DataFrame({
        "fda_id": ["P000001", "P000001", "P000002", "P000001", "P000001", "p000003", "P000001", "P000004"],
        "pat_id": ["1", "2", "2", "4", "5", "6", "3", "7"],
    })
    return devices, patents, gold


# ----------------------------------------------------------------------------- FDA sponsors


def test_fda_sponsors_takes_the_original_and_keeps_unknown_dates_unknown() -> None:
    s = fda_sponsors(_fda())
    assert s.rows() == [
        ("P000001", "Alpha Vascular, Inc.", date(2012, 5, 1)),
        ("P000002", "Alpha Vascular, Inc.", date(2008, 3, 1)),
        ("P000003", "Zed Devices LLC", date(2015, 1, 1)),
        ("P000004", "Beta Corp.", None),  # latest sponsor; a supplement date is not the approval date
    ]


def test_fda_sponsors_from_submission_numbers_only() -> None:
    raw = _fda().drop("pma_number", "is_original").with_columns(pl.col("submission_number").str.to_lowercase())
    assert fda_sponsors(raw).rows() == fda_sponsors(_fda()).rows()


# ----------------------------------------------------------------------------- sponsor resolution


def test_sponsor_resolution_counts_same_id_and_lineage() -> None:
    devices, _, _ = _corpus()
    out = sponsor_resolution(devices, fda_sponsors(_fda()), _resolver())
    # P1, P2 alias -> ALPHA (same id); P3 unrelated; P4 BETA bought by ALPHA (lineage); P5 no FDA record
    assert (out["n_devices"], out["n_with_sponsor"], out["n_without_sponsor"]) == (5, 4, 1)
    assert (out["same_id"], out["same_company"]) == (2, 3)
    assert out["share"] == pytest.approx(3 / 4)
    assert out["misses"] == [{"fda_id": "p000003", "sponsor": "Zed Devices LLC", "applicant": "ALPHA",
                              "sponsor_id": "ZED DEVICES", "applicant_id": "ALPHA"}]


def test_a_former_owner_is_not_the_same_company_today() -> None:
    r = CompanyResolver.from_frames(
        pl.DataFrame(schema=["alias", "canonical"]),
        pl.DataFrame([("NEWCO", "LINE", date(2016, 1, 1)), ("OLDCO", "LINE", date(2000, 1, 1))],
                     schema=["acquirer", "acquired", "close_date"], orient="row"),
    ).with_former_owners()
    devices = pl.DataFrame({"fda_id": ["P1"], "applicant": ["NEWCO"]})
    sponsors = pl.DataFrame({"fda_id": ["P1"], "sponsor": ["OLDCO"], "decision_date": [date(2018, 1, 1)]})
    assert r.company_relation("NEWCO", None, "OLDCO", 2010).kind == "former_owner"
    assert sponsor_resolution(devices, sponsors, r)["same_company"] == 0


# ----------------------------------------------------------------------------- cross-company gold


def test_cross_company_gold_views_dates_and_reasons() -> None:
    devices, patents, gold = _corpus()
    out = cross_company_gold(devices, patents, gold, fda_sponsors(_fda()), _resolver())
    # gold rows whose device and patent exist: 8; the one with applicant == assignee is (P000001, 1)
    assert (out["n_gold"], out["n_cross"]) == (8, 7)
    # Stage 2 (no dates in the corpus): BETA x2, run-together BETA+university, '; '-joined BETA, and
    # GAMMA's patent granted while it held BETA (former owner). Not: ZED WIDGETS (unknown), P000004's
    # patent without assignee.
    assert out["stage2"]["cross_recovered"] == 5
    assert out["stage2"]["cross_by_kind"] == {"acquired": 4, "former_owner": 1}
    assert out["ownership_only"]["cross_recovered"] == 4
    paths = {(r["assignee"], r["company_path"]) for r in out["stage2"]["cross_by_path"]}
    assert ("GAMMA", "ALPHA <- BETA (2010-01-01) -> GAMMA (2000-01-01)") in paths
    # dated: P000002 was approved in 2008, before ALPHA bought BETA in 2010 -> refused; P000001 (2012) gets
    # GAMMA's patent through the former owner
    assert out["dated"]["cross_recovered"] == 4
    assert out["dated"]["cross_share"] == pytest.approx(4 / 7)
    missed = {(u["fda_id"], u["pat_id"]): u for u in out["unrecovered"]}
    assert set(missed) == {("P000002", "2"), ("p000003", "6"), ("P000004", "7")}
    late = missed[("P000002", "2")]
    assert late["decision_date"] == "2008-03-01" and late["stage2_path"] == "ALPHA <- BETA (2010-01-01)"
    assert "ALPHA <- BETA (2010-01-01)" in late["reason"] and "2008-03-01" in late["reason"]
    assert missed[("p000003", "6")]["reason"].startswith("no ownership or alliance relation")
    assert missed[("P000004", "7")]["reason"] == "assignee resolves to no company"


def test_the_dated_view_counts_a_deal_while_fda_still_decides_on_the_device() -> None:
    devices, patents, gold = _corpus()

    def with_supplement(decided: date) -> pl.DataFrame:  # P000002 (2008), ALPHA bought BETA in 2010
        row = pl.DataFrame([("P000002/S001", "P000002", "Alpha Vascular, Inc.", decided, False)],
                           schema=_fda().schema, orient="row")
        return pl.concat([_fda(), row])

    later = with_supplement(date(2011, 6, 1))
    assert fda_decisions(later).filter(pl.col("fda_id") == "P000002")["decision_date"].max() == date(2011, 6, 1)
    out = cross_company_gold(devices, patents, gold, fda_sponsors(later), _resolver(), fda_decisions(later))
    assert out["dated"]["cross_recovered"] == 5
    assert ("P000002", "2") not in {(u["fda_id"], u["pat_id"]) for u in out["unrecovered"]}
    assert company_report(devices, patents, gold, later, _resolver())[
        "cross_company_gold_recovered_share_dated"] == pytest.approx(5 / 7)

    earlier = with_supplement(date(2009, 6, 1))  # still before the deal: no match, and the reason says so
    out = cross_company_gold(devices, patents, gold, fda_sponsors(earlier), _resolver(), fda_decisions(earlier))
    missed = {(u["fda_id"], u["pat_id"]): u for u in out["unrecovered"]}
    assert out["dated"]["cross_recovered"] == 4 and missed[("P000002", "2")]["last_decision_date"] == "2009-06-01"
    assert "approved 2008-03-01 and last decided 2009-06-01 before the path" in missed[("P000002", "2")]["reason"]


def test_a_former_owners_patent_outside_its_years_is_no_match() -> None:
    devices, patents, gold = _corpus()
    patents = patents.with_columns(pl.when(pl.col("pat_id") == "3").then(pl.lit(date(2011, 1, 1)))
                                   .otherwise(pl.col("grant_date")).alias("grant_date"))  # after GAMMA sold BETA
    out = cross_company_gold(devices, patents, gold, fda_sponsors(_fda()), _resolver())
    assert out["stage2"]["cross_recovered"] == 4 and "former_owner" not in out["stage2"]["cross_by_kind"]


def test_cross_by_path_lists_equal_counts_in_one_order() -> None:
    """Paths with the same count and applicant come in a fixed order: analysts diff the report."""
    bought = [f"TARGET {i:02d}" for i in range(30)]
    r = CompanyResolver.from_frames(
        pl.DataFrame(schema=["alias", "canonical"]),
        pl.DataFrame([("ALPHA", name, date(2010, 1, 1)) for name in bought],
                     schema=["acquirer", "acquired", "close_date"], orient="row"))
    devices = pl.DataFrame({"fda_id": ["P000001"], "applicant": ["ALPHA"]})
    patents = pl.DataFrame({"pat_id": [str(i) for i in range(30)], "assignee": bought})
    gold = pl.DataFrame({"fda_id": ["P000001"] * 30, "pat_id": [str(i) for i in range(30)]})
    empty = fda_sponsors(_fda()).clear()
    for _ in range(3):  # polars' group_by returns its groups in a new order on each call
        rows = cross_company_gold(devices, patents, gold, empty, r)["stage2"]["cross_by_path"]
        assert [row["assignee"] for row in rows] == bought


def test_unknown_names_never_match_anything_but_themselves() -> None:
    r = CompanyResolver.from_frames(pl.DataFrame(schema=["alias", "canonical"]), pl.DataFrame(
        schema={"acquirer": pl.String, "acquired": pl.String, "close_date": pl.Date}))
    devices = pl.DataFrame({"fda_id": ["P1", "P2", "P3"], "applicant": ["Qux Medical", None, "%%%"]})
    patents = pl.DataFrame({"pat_id": ["1", "2", "3", "4"],
                            "assignee": ["QUX MEDICAL INC", "Quux Medical", None, "..."]})
    table = company_match_table(devices, patents, r)
    assert table.select("fda_id", "pat_id", "match_kind").rows() == [("P1", "1", "same")]
    assert extra_pairs(devices, patents, table)["extra_pairs"] == 0


def test_extra_pairs_against_plain_name_equality() -> None:
    devices, patents, _ = _corpus()
    r = _resolver().with_former_owners()
    table = company_match_table(devices, patents, r)
    exact = exact_name_pairs(devices, patents)
    assert exact.rows() == [("P000001", "1"), ("P000002", "1"), ("P000004", "1"), ("p000003", "1")]
    out = extra_pairs(devices, patents, table)
    assert out["all_pairs"] == 5 * 7
    assert out["exact_name_pairs"] == 4 and out["exact_pairs_lost"] == 0
    # four ALPHA devices x patents 2, 3, 4, 5 (BETA, GAMMA, BETA + university, '; ' BETA)
    assert out["extra_pairs"] == 16 and out["company_pairs"] == 20
    assert out["extra_by_kind"] == {"acquired": 12, "former_owner": 4}
    brute = {(d, p) for d, p in table.select("fda_id", "pat_id").iter_rows()} - set(exact.rows())
    assert len(brute) == out["extra_pairs"]


def test_report_and_format_end_with_one_json_line() -> None:
    devices, patents, gold = _corpus()
    report = company_report(devices, patents, gold, _fda(), _resolver())
    assert report["sponsor_resolution_share"] == pytest.approx(0.75)
    assert report["cross_company_gold_recovered_share"] == pytest.approx(5 / 7)
    assert report["cross_company_gold_recovered_share_dated"] == pytest.approx(4 / 7)
    assert report["cross_company_gold_recovered_share_ownership_only"] == pytest.approx(4 / 7)
    assert report["cross_company_gold_recovered_by_kind"] == {"acquired": 4, "former_owner": 1}
    assert report["extra_company_pairs"] == 16 and report["extra_company_pairs_ownership_only"] == 12
    text = format_company_report(report)
    last = json.loads(text.splitlines()[-1])
    assert last == json.loads(json.dumps(headline(report), default=str))
    for key in ("sponsor_resolution_share", "cross_company_gold_recovered_share", "extra_company_pairs"):
        assert key in last
    assert "Zed Devices LLC" in text and "2008-03-01" in text


def test_report_on_an_empty_corpus_does_not_crash() -> None:
    devices = pl.DataFrame(schema={"fda_id": pl.String, "applicant": pl.String})
    patents = pl.DataFrame(schema={"pat_id": pl.String, "assignee": pl.String})
    gold = pl.DataFrame(schema={"fda_id": pl.String, "pat_id": pl.String})
    report = company_report(devices, patents, gold, _fda(), _resolver())
    assert report["sponsor_resolution_share"] is None and report["cross_company_gold_recovered_share"] is None
    assert report["extra_company_pairs"] == 0
    assert json.loads(format_company_report(report).splitlines()[-1])["all_pairs"] == 0


def test_a_csv_fda_record_of_the_wrong_width_is_reported_not_counted(tmp_path) -> None:
    from meddevkg_core.company_report import main_company_report

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "devices.csv").write_text("fda_id,text,applicant\nP000001,stent,ALPHA\nP000002,valve,ALPHA\n")
    (corpus / "patents.csv").write_text("pat_id,text,assignee\n1,stent,ALPHA\n")
    fda = tmp_path / "pma.csv"  # polars refused the whole file for the unquoted comma on line 3
    fda.write_text("submission_number,sponsor,date_decision,approval_order_statement\n"
                   "P000001,Alpha Vascular,2012-05-01,APPROVAL.\n"
                   "P000002,Alpha Vascular, Inc.,2008-03-01,APPROVAL.\n")
    report = main_company_report(corpus, fda)
    assert (report["n_devices"], report["n_devices_with_sponsor"]) == (2, 1)
    assert report["fda_pma_rejected"] == 1
    assert report["detail"]["fda_pma_rejected"] == [{"record_key": "pma.csv#1:P000002",
                                                     "reason": "line 3: 5 fields where the header has 4"}]
    assert "pma.csv#1:P000002  line 3: 5 fields where the header has 4" in format_company_report(report)


def test_the_report_records_each_file_it_read_with_its_bytes_digest(tmp_path) -> None:
    # the report named the corpus and FDA records by path only: a file changed there left no trace in it
    from meddevkg_core.company_report import main_company_report

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "devices.csv").write_text("fda_id,text,applicant\nP000001,stent,ALPHA\n")
    (corpus / "patents.csv").write_text("pat_id,text,assignee\n1,stent,BETA\n")
    (corpus / "gold_links.csv").write_text("fda_id,pat_id\nP000001,1\n")
    (corpus / "acquisitions.csv").write_text("acquirer,acquired,close_date\nALPHA,BETA,2010-01-01\n")
    fda, out = tmp_path / "pma.csv", tmp_path / "report.json"
    fda.write_text("submission_number,sponsor,date_decision,approval_order_statement\n"
                   "P000001,Alpha Vascular,2012-05-01,APPROVAL.\n")
    report = main_company_report(corpus, fda, out)
    files = {"devices": corpus / "devices.csv", "patents": corpus / "patents.csv",
             "gold_links": corpus / "gold_links.csv", "acquisitions": corpus / "acquisitions.csv", "fda_pma": fda}
    expected = {name: {"path": str(path.resolve()), "size": path.stat().st_size,
                       "sha256": hashlib.sha256(path.read_bytes()).hexdigest()} for name, path in files.items()}
    assert report["inputs"] == expected and json.loads(out.read_text())["inputs"] == expected
    assert json.loads(format_company_report(report).splitlines()[-1])["inputs"] == expected  # the headline's too
