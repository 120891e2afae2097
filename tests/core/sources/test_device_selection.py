"""The paper's device selection on small PMA frames: rules, exclusions, reasons for every miss."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import date

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.sources.device_selection import (
    SelectionRules,
    annotate_originals,
    benchmark_snapshot,
    compare_selection,
    format_selection_report,
    headline,
    main_select_devices,
    paper_rules,
    select_originals,
)
from meddevkg_core.sources.pma_records import devices_from_pma, pma_records_to_devices
from tests.conftest import PANICKED_ON_IT, WOULD_ABORT_ON_IT


def _row(submission: str, generic: str, trade: str, code: str, panel: str, decided: date) -> dict:
    pma, _, supplement = submission.partition("/")
    return {"submission_number": submission, "pma_number": pma, "supplement_number": supplement or None,
            "is_original": not supplement, "sponsor": "Acme Medical, Inc.", "generic_name": generic, "device": trade,
            "product_code": code, "panel_code": panel, "date_decision": decided, "decision_code": "APPR",
            "approval_order_statement": f"Approval for the {trade}."}


FDA = pl.DataFrame([
    _row("P100001", "Stent, coronary", "ACME CORONARY STENT", "MAF", "CV", date(2010, 1, 5)),
    _row("P100002", "Implantable pulse-generator", "PACER ONE", "DXY", "CV", date(2011, 2, 6)),
    _row("P100003", "Bone graft substitute", "OSTEO GRAFT", "MQV", "OR", date(2012, 3, 7)),
    _row("P100004", "Pulse generator, permanent, implantable", "KAPPA", "NVZ", "CV", date(2013, 4, 8)),
    _row("P100005/S001", "Heart-valve, mechanical", "BJORK VALVE", "LWQ", "CV", date(1983, 5, 9)),
    _row("P100007", "Stent, carotid", "NEW CAROTID STENT", "NIM", "CV", date(2025, 6, 1)),
    _row("P100008", "Catheter, urethral", "URO CATHETER", "QRH", "GU", date(2012, 7, 2)),
    _row("P100009", "Valve, aortic", "OLD VALVE", "DYE", "CV", date(1999, 1, 3)),
    _row("P100001/S001", "Stent, coronary", "ACME CORONARY STENT", "MAF", "CV", date(2010, 9, 9)),
])
BENCH = pl.DataFrame({"fda_id": ["P100001", "P100002", "P100003", "P100004", "P100005", "P100006"]})
CODES = pl.DataFrame({"product_code": ["NVZ"], "review_panel": ["Cardiovascular"],
                      "device_type_name": ["Pulse Generator, Permanent, Implantable"]})


def test_paper_rules_are_the_published_lists():
    rules = paper_rules()
    assert len(rules.keywords) == 24 and {"cardio", "stent", "arrhythmia"} <= set(rules.keywords)
    assert len(rules.product_codes) == 22 and {"DXY", "NPT", "DSY", "LOF"} <= rules.product_codes
    assert {(e.kind, e.value) for e in rules.exclusions} == {("advisory_committee", v) for v in ("OR", "DE", "OP")}
    assert not rules.advisory_committees and rules.decided_on_or_before is None


def test_annotation_says_why_each_original_is_selected_or_not():
    notes = {r["pma_number"]: r for r in annotate_originals(FDA).to_dicts()}
    assert "P100005" not in notes  # supplements only: not an original
    assert notes["P100001"]["keyword"] == "stent" and notes["P100001"]["selected"]
    assert notes["P100002"]["keyword"] is None and notes["P100002"]["on_code_list"] and notes["P100002"]["selected"]
    assert notes["P100003"]["keyword"] == "graft" and not notes["P100003"]["selected"]
    assert notes["P100003"]["excluded_by"] == "advisory_committee OR (orthopaedic/spine)"
    assert not notes["P100004"]["matched"] and not notes["P100004"]["selected"]
    assert select_originals(FDA)["pma_number"].to_list() == ["P100001", "P100002", "P100007", "P100008", "P100009"]


def test_opt_in_committee_and_cutoff():
    rules = paper_rules().model_copy(update={"advisory_committees": frozenset({"CV"}),
                                             "decided_on_or_before": date(2020, 1, 1)})
    chosen = select_originals(FDA, rules)["pma_number"].to_list()
    assert "P100004" in chosen and "P100007" not in chosen
    strict = SelectionRules(keywords=("valve",), product_codes=frozenset())
    assert select_originals(FDA, strict)["pma_number"].to_list() == ["P100009"]


def test_openfda_records_select_like_fdadata():
    records = [{"pma_number": r["pma_number"], "supplement_number": r["supplement_number"] or "",
                "applicant": r["sponsor"], "generic_name": r["generic_name"], "trade_name": r["device"],
                "product_code": r["product_code"], "advisory_committee": r["panel_code"],
                "decision_date": r["date_decision"].strftime("%Y%m%d"), "decision_code": r["decision_code"],
                "ao_statement": r["approval_order_statement"]} for r in FDA.to_dicts()]
    originals = pma_records_to_devices(records).originals
    assert select_originals(originals)["pma_number"].to_list() == select_originals(FDA)["pma_number"].to_list()


def test_snapshot_skips_originals_dated_after_their_own_supplements():
    odd = pl.concat([FDA, pl.DataFrame([_row("P100002/S001", "x", "y", "DXY", "CV", date(2011, 1, 1))])])
    assert benchmark_snapshot(FDA, ["P100001", "P100002"]) == date(2011, 2, 6)
    assert benchmark_snapshot(odd, ["P100001", "P100002"]) == date(2010, 1, 5)


def test_compare_gives_a_reason_for_every_miss():
    report = compare_selection(FDA, CODES, BENCH)
    assert (report["selected"], report["benchmark"], report["overlap"]) == (5, 6, 2)
    assert report["benchmark_snapshot"] == "2013-04-08"
    only_sel = {r["fda_id"]: r["reason"] for r in report["detail"]["only_selection"]}
    assert only_sel == {
        "P100007": "approved after the benchmark snapshot",
        "P100008": "outside the cardiovascular committee (likely one of the paper's unpublished hand removals)",
        "P100009": "cardiovascular, approved before the snapshot, yet not in the benchmark (unexplained)",
    }
    only_bench = {r["fda_id"]: r["reason"] for r in report["detail"]["only_benchmark"]}
    assert only_bench == {
        "P100003": "excluded: advisory_committee OR (orthopaedic/spine)",
        "P100004": "no keyword in its names and its product code is not on the list",
        "P100005": "no original row in the FDA records (supplements only)",
        "P100006": "not in the FDA records",
    }
    assert "Pulse Generator, Permanent, Implantable" in report["detail"]["only_benchmark"][1]["note"]
    assert sum(report["only_selection_reasons"].values()) == report["only_selection"] == 3
    assert report["selected_by"] == {"keyword_only": 4, "product_code_only": 1, "keyword_and_product_code": 0,
                                     "committee_only": 0}
    assert report["excluded"] == {"advisory_committee OR (orthopaedic/spine)": 1}
    assert report["variant_with_cv_committee"] == {"selected": 6, "overlap": 3}
    text = format_selection_report(report)
    assert json.loads(text.splitlines()[-1]) == json.loads(json.dumps(headline(report)))
    assert "P100006  not in the FDA records" in text


def test_main_writes_the_selected_devices(tmp_path):
    FDA.write_parquet(tmp_path / "pma.parquet")
    CODES.write_parquet(tmp_path / "codes.parquet")
    (tmp_path / "bench").mkdir()
    BENCH.with_columns(pl.lit("t").alias("text")).write_parquet(tmp_path / "bench" / "devices.parquet")
    report = main_select_devices(tmp_path / "pma.parquet", tmp_path / "codes.parquet", tmp_path / "bench",
                                 tmp_path / "out" / "devices.parquet")
    devices = pl.read_parquet(tmp_path / "out" / "devices.parquet")
    assert devices.schema == schemas.DEVICES and devices.height == report["selected"] == 5
    assert report["devices_written"]["rows"] == 5
    row = devices.filter(pl.col("fda_id") == "P100002").row(0, named=True)
    assert row["text"] == "Implantable Pulse-Generator PACER ONE." and row["applicant"] == "Acme Medical, Inc."
    assert row["decision_date"] == date(2011, 2, 6)


def test_keyword_matching_is_a_case_insensitive_substring():
    frame = pl.DataFrame([_row("P200001", "ELECTROCARDIOGRAPH", "X", "ZZZ", "CV", date(2001, 1, 1)),
                          _row("P200002", "lens", "Cardiovascular-free lens", "ZZZ", "OP", date(2001, 1, 1))])
    notes = {r["pma_number"]: r for r in annotate_originals(frame).to_dicts()}
    assert notes["P200001"]["keyword"] == "cardio" and notes["P200001"]["selected"]
    assert notes["P200002"]["keyword"] == "cardio" and not notes["P200002"]["selected"]  # excluded: OP


@pytest.mark.parametrize("column", ["is_original", "submission_number"])
def test_originals_are_found_from_either_marker(column):
    frame = FDA.drop("supplement_number", *([c for c in ("is_original", "submission_number") if c != column]))
    assert select_originals(frame)["pma_number"].to_list() == select_originals(FDA)["pma_number"].to_list()


def test_main_reads_the_benchmark_devices_in_any_corpus_format_and_names_a_wrong_file(tmp_path):
    from meddevkg_core.errors import CorpusError

    FDA.write_parquet(tmp_path / "pma.parquet")
    CODES.write_parquet(tmp_path / "codes.parquet")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "devices.csv").write_text(BENCH.with_columns(pl.lit("t").alias("text")).write_csv())
    report = main_select_devices(tmp_path / "pma.parquet", tmp_path / "codes.parquet", tmp_path / "bench")
    assert (report["benchmark"], report["overlap"]) == (6, 2)  # as from devices.parquet
    with pytest.raises(CorpusError, match="codes.parquet: not PMA records"):
        main_select_devices(tmp_path / "codes.parquet", tmp_path / "codes.parquet", tmp_path / "bench")
    with pytest.raises(CorpusError, match="missing.parquet: cannot be read as FDA product codes"):
        main_select_devices(tmp_path / "pma.parquet", tmp_path / "missing.parquet", tmp_path / "bench")
    with pytest.raises(CorpusError, match="no devices table"):
        main_select_devices(tmp_path / "pma.parquet", tmp_path / "codes.parquet", tmp_path)


def test_damaged_parquet_product_codes_are_refused_naming_the_file_in_one_line(tmp_path, damaged_parquet,
                                                                               aborting_parquet):
    from meddevkg_core.errors import CorpusError

    # polars raised a PanicException, a BaseException no reader caught: a traceback naming no file
    FDA.write_parquet(tmp_path / "pma.parquet")
    codes = damaged_parquet(tmp_path / "codes.parquet")
    (tmp_path / "bench").mkdir()
    BENCH.with_columns(pl.lit("t").alias("text")).write_parquet(tmp_path / "bench" / "devices.parquet")
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(codes))}: cannot be read as FDA product codes: "
                                          rf"{PANICKED_ON_IT}$"):
        main_select_devices(tmp_path / "pma.parquet", codes, tmp_path / "bench")
    aborting_parquet(codes)  # polars aborted the process: no error, no file named
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(codes))}: cannot be read as FDA product codes: "
                                          rf"{WOULD_ABORT_ON_IT}$"):
        main_select_devices(tmp_path / "pma.parquet", codes, tmp_path / "bench")


def test_main_reads_the_benchmark_ids_as_the_corpus_does_and_reports_the_rows_it_rejects(tmp_path):
    FDA.write_parquet(tmp_path / "pma.parquet")
    CODES.write_parquet(tmp_path / "codes.parquet")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "devices.csv").write_text("fda_id,text\nP100001 ,t\nP100001,t\n  ,t\nP100002,t\n")
    report = main_select_devices(tmp_path / "pma.parquet", tmp_path / "codes.parquet", tmp_path / "bench")
    assert (report["benchmark"], report["overlap"], report["only_benchmark"]) == (2, 2, 0)
    assert report["benchmark_rejected"] == 2
    assert report["detail"]["benchmark_rejected"] == [
        {"record_key": "devices#1:P100001", "reason": "duplicate key of row 0"},
        {"record_key": "devices#2:  ", "reason": "missing fda_id"}]
    assert "devices#1:P100001  duplicate key of row 0" in format_selection_report(report)


def test_main_reports_a_csv_fda_record_of_the_wrong_width_and_counts_the_others(tmp_path):
    CODES.write_parquet(tmp_path / "codes.parquet")
    (tmp_path / "bench").mkdir()
    BENCH.with_columns(pl.lit("t").alias("text")).write_parquet(tmp_path / "bench" / "devices.parquet")
    FDA.write_parquet(tmp_path / "pma.parquet")
    csv_file = tmp_path / "pma.csv"  # polars refused the whole file for the one record with a field too many
    csv_file.write_text(FDA.write_csv() + "P100010,P100010,,true,Acme,Stent,STENT,MAF,CV,2012-01-01,APPR,x,y\n")
    expected = main_select_devices(tmp_path / "pma.parquet", tmp_path / "codes.parquet", tmp_path / "bench")
    report = main_select_devices(csv_file, tmp_path / "codes.parquet", tmp_path / "bench")
    assert report["fda_pma_rejected"] == 1 and expected["fda_pma_rejected"] == 0
    assert report["detail"]["fda_pma_rejected"] == [{"record_key": "pma.csv#9:P100010",
                                                     "reason": "line 11: 13 fields where the header has 12"}]
    assert (report["fda_records"], report["selected"], report["overlap"]) == (
        expected["fda_records"], expected["selected"], expected["overlap"])
    assert "pma.csv#9:P100010  line 11: 13 fields" in format_selection_report(report)


def _digests(files: dict) -> dict:
    return {name: {"path": str(path.resolve()), "size": path.stat().st_size,
                   "sha256": hashlib.sha256(path.read_bytes()).hexdigest()} for name, path in files.items()}


def test_the_report_records_each_file_it_read_and_the_devices_table_the_fda_file_it_came_from(tmp_path):
    # the report named no file it read: a changed FDA file, code list or benchmark left no trace in it
    from meddevkg_core.corpus import read_corpus

    FDA.write_parquet(tmp_path / "pma.parquet")
    CODES.write_parquet(tmp_path / "codes.parquet")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "devices.csv").write_text(BENCH.with_columns(pl.lit("t").alias("text")).write_csv())
    out = tmp_path / "corpus" / "devices.parquet"
    report = main_select_devices(tmp_path / "pma.parquet", tmp_path / "codes.parquet", tmp_path / "bench", out)
    expected = _digests({"fda_pma": tmp_path / "pma.parquet", "product_codes": tmp_path / "codes.parquet",
                         "benchmark_devices": tmp_path / "bench" / "devices.csv"})
    assert report["inputs"] == expected
    assert json.loads(format_selection_report(report).splitlines()[-1])["inputs"] == expected  # the headline's too
    # the written table names the FDA records its rows came from (the code list and benchmark only compare)
    assert json.loads(pl.read_parquet_metadata(out)["inputs"]) == {"fda_pma": expected["fda_pma"]}
    (tmp_path / "corpus" / "patents.csv").write_text("pat_id,text\n1,stent\n")
    plain = tmp_path / "plain"
    plain.mkdir()
    devices_from_pma(select_originals(FDA)).write_parquet(plain / "devices.parquet")  # as written before
    (plain / "patents.csv").write_text("pat_id,text\n1,stent\n")
    assert read_corpus(tmp_path / "corpus").devices.equals(read_corpus(plain).devices)  # the reader unaffected
