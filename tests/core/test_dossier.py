"""Device dossiers: supplements read from FDA PMA records, and the Stage-2 score over them."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.candidates import generate_candidates
from meddevkg_core.config import PipelineConfig
from meddevkg_core.corpus import Corpus
from meddevkg_core.dossier import device_dossiers, load_supplements, read_supplements, supplements_of, with_supplements
from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import fingerprint
from meddevkg_core.ontology import load_meddevonto
from meddevkg_core.pipeline import stage2_inputs
from meddevkg_core.sources.pma_records import canonical_pma
from tests.conftest import PANICKED_ON_IT, WOULD_ABORT_ON_IT

DEVICES = pl.DataFrame({"fda_id": ["P130026", "P100001", "P200002"],
                        "text": ["Cardiac ablation catheter TACTICATH.", "Coronary stent system.",
                                 "Heart valve prosthesis."]})
SUPPLEMENTS = pl.DataFrame({
    "fda_id": ["P130026", "P130026", "P130026", "P999999"],
    "supplement_number": ["S002", "S001", "S003", "S001"],
    "decision_date": [date(2016, 5, 1), date(2015, 2, 1), date(2017, 1, 1), date(2015, 1, 1)],
    "trade_name": ["TACTICATH QUARTZ", "TACTICATH QUARTZ", "TACTICATH SE", None],
    "statement": ["a new distal tip adhesive.", "alternative supplier for the optical fiber component.",
                  "a new distal tip adhesive.", "unrelated device."],
}, schema=schemas.SUPPLEMENTS)


def test_a_dossier_is_the_device_text_then_distinct_names_and_statements_oldest_first():
    dossiers = device_dossiers(DEVICES, SUPPLEMENTS)
    assert dossiers["P130026"] == ("Cardiac ablation catheter TACTICATH. TACTICATH QUARTZ TACTICATH SE "
                                   "alternative supplier for the optical fiber component. a new distal tip adhesive.")
    assert dossiers["P100001"] == "Coronary stent system."  # no supplements: its own text
    assert set(dossiers) == set(DEVICES["fda_id"])  # another device's supplements are not read


def _fdadata(rows: list[tuple[str, str, str | None, str | None]]) -> pl.DataFrame:
    """Rows in fdadata_pma's own column names: submission_number, date_decision, device, statement."""
    return pl.DataFrame({
        "submission_number": [r[0] for r in rows],
        "date_decision": [date.fromisoformat(r[1]) for r in rows],
        "device": [r[2] for r in rows],
        "approval_order_statement": [r[3] for r in rows],
        "sponsor": ["St Jude Medical"] * len(rows),
    })


def test_supplements_are_read_from_fda_pma_records(tmp_path: Path):
    path = tmp_path / "pma.parquet"
    _fdadata([("P130026", "2014-10-24", "TACTICATH", "APPROVAL FOR THE TACTICATH QUARTZ CATHETER."),
              ("P130026/S001", "2015-02-01", "TACTICATH(TM) QUARTZ", "APPROVAL FOR A NEW DISTAL TIP ADHESIVE."),
              ("P130026/S002", "2016-05-01", None, None),
              ("P100001/S001", "2012-01-01", "STENT", "CHANGE IN THE STERILIZATION PROCESS."),
              ("BAD-NUMBER/S001", "2012-01-01", "X", "Y")]).write_parquet(path)
    every = read_supplements(path)
    assert every.schema == schemas.SUPPLEMENTS and every.height == 3  # the original is not one, BAD-NUMBER not valid
    mine = read_supplements(path, ["P130026"])
    assert mine.rows() == [("P130026", "S001", date(2015, 2, 1), "TACTICATH QUARTZ", "A NEW DISTAL TIP ADHESIVE."),
                           ("P130026", "S002", date(2016, 5, 1), None, None)]
    assert supplements_of(every, ["P100001"])["statement"].to_list() == ["CHANGE IN THE STERILIZATION PROCESS."]


def test_records_of_the_devices_that_fail_validation_are_quarantined_and_reach_the_corpus(tmp_path: Path):
    path = tmp_path / "pma.csv"  # dates as text, as a CSV holds them
    path.write_text("submission_number,date_decision,device,approval_order_statement\n"
                    "P100001,2010-01-05,STENT,APPROVAL FOR THE STENT.\n"
                    "P100001/S001,2099-13-45,STENT,A NEW COATING.\n"
                    "P100001/S002,2011-01-01,STENT,A NEW SUPPLIER.\n"
                    "P100001/S002,2012-01-01,STENT,CONFLICTING STATEMENT.\n"
                    "P100001/S003,2012-06-01,STENT,A NEW LABEL.\n"
                    "P200002/S001,0000-00-00,OTHER,NOT OF THESE DEVICES.\n")
    read = load_supplements(path, ["P100001"])
    assert read.valid.select("supplement_number", "statement").rows() == [("S002", "CONFLICTING STATEMENT."),
                                                                          ("S003", "A NEW LABEL.")]
    reasons = dict(zip(read.rejected["record_key"], read.rejected["reason"], strict=True))
    assert reasons == {
        "pma.csv#1:P100001": "supplement S001: unparseable decision_date '2099-13-45' (want YYYY-MM-DD or YYYYMMDD)",
        "pma.csv#2:P100001": "duplicate supplement S002 of P100001: superseded by record #3 (kept: latest "
                             "decision_date, then greatest record JSON)"}
    corpus = with_supplements(Corpus(DEVICES, schemas.empty(schemas.PATENTS), schemas.empty(schemas.GOLD_LINKS),
                                     schemas.empty(schemas.LABELED_PAIRS), schemas.empty(schemas.REJECTED_RECORDS)),
                              path)
    assert corpus.supplements.equals(read.valid)  # P200002's one supplement is not valid either
    assert corpus.rejected["record_key"].to_list() == ["pma.csv#1:P100001", "pma.csv#2:P100001",
                                                       "pma.csv#5:P200002"]  # run writes them to rejected_records


def test_a_csv_record_of_the_wrong_width_is_quarantined_with_its_line_and_the_others_are_read(tmp_path: Path):
    from meddevkg_core.dossier import read_pma_file, readable_pma_rows

    path = tmp_path / "pma.csv"  # polars refused the whole file for the unquoted comma on line 3
    path.write_text("submission_number,date_decision,device,approval_order_statement\n"
                    "P100001,2010-01-05,STENT,APPROVAL FOR THE STENT.\n"
                    "P100001/S001,2011-01-01,STENT,A NEW SUPPLIER, AND A NEW LABEL.\n"
                    "P100001/S002,2012-06-01,STENT,A NEW COATING.\n")
    read = load_supplements(path, ["P100001"])
    assert read.valid.select("supplement_number", "statement").rows() == [("S002", "A NEW COATING.")]
    [row] = read.rejected.to_dicts()
    assert (row["record_key"], row["reason"]) == ("pma.csv#1:P100001", "supplement S001: line 3: 5 fields where "
                                                                       "the header has 4")
    assert '"__raw__": "P100001/S001,2011-01-01,STENT,A NEW SUPPLIER, AND A NEW LABEL."' in row["record"]
    corpus = with_supplements(Corpus(DEVICES, schemas.empty(schemas.PATENTS), schemas.empty(schemas.GOLD_LINKS),
                                     schemas.empty(schemas.LABELED_PAIRS), schemas.empty(schemas.REJECTED_RECORDS)),
                              path)
    assert corpus.rejected.equals(read.rejected)  # run writes it to rejected_records
    rows = readable_pma_rows(read_pma_file(path), path.name)  # company-report and select-devices read every row
    assert rows.valid["submission_number"].to_list() == ["P100001", "P100001/S002"]
    assert rows.valid.columns == ["submission_number", "date_decision", "device", "approval_order_statement"]
    assert rows.rejected.equals(read.rejected)


def test_a_file_that_is_not_pma_records_is_an_error_naming_it(tmp_path: Path):
    path = tmp_path / "patents.parquet"
    pl.DataFrame({"pat_id": ["1"], "text": ["a"]}).write_parquet(path)
    with pytest.raises(CorpusError, match="patents.parquet: not PMA records"):
        read_supplements(path)
    with pytest.raises(CorpusError, match="cannot be read"):
        read_supplements(tmp_path / "missing.parquet")


def test_a_records_file_with_a_column_named_as_the_readers_own_is_an_error_naming_it(tmp_path: Path):
    # its __row__ made polars refuse the reader's own; its __parse_error__ replaced the reasons of the records
    for column, values in (("__row__", [5]), ("__parse_error__", [-1])):
        path = tmp_path / "pma.parquet"
        _fdadata([("P130026", "2014-10-24", "TACTICATH", "APPROVAL FOR THE CATHETER.")]).with_columns(
            pl.Series(column, values)).write_parquet(path)
        with pytest.raises(CorpusError, match=f"pma.parquet: column '{column}' is a name the reader keeps"):
            read_supplements(path)


def test_records_that_tell_an_original_by_is_original_alone_are_read_from_csv_and_a_bad_flag_is_quarantined(
        tmp_path: Path):
    from meddevkg_core.dossier import load_pma_records, read_pma_file, readable_pma_rows

    # a CSV flag is text: polars refused it in pl.when (SchemaError); without the flag, ColumnNotFoundError
    path = tmp_path / "pma.csv"
    path.write_text("pma_number,date_decision,device,approval_order_statement,is_original\n"
                    "P100001,2010-01-05,STENT,APPROVAL FOR THE STENT.,True\n"
                    "P100001,2011-01-01,STENT,A NEW SUPPLIER.,false\n"
                    "P100001,2012-06-01,STENT,A NEW COATING.,maybe\n"
                    "P100001,2013-06-01,STENT,A NEW LABEL.,\n")
    read = load_pma_records(path)
    assert read.originals["decision_date"].to_list() == [date(2010, 1, 5)]
    assert read.supplements.select("decision_date", "statement").rows() == [(date(2011, 1, 1), "A NEW SUPPLIER.")]
    assert read.rejected.select("record_key", "reason").rows() == [
        ("pma.csv#2:P100001", "is_original 'maybe' is neither true nor false"),
        ("pma.csv#3:P100001", "missing is_original")]
    rows = readable_pma_rows(read_pma_file(path), path.name)  # select-devices reads the same rows
    assert rows.valid["is_original"].to_list() == [True, False] and rows.rejected.equals(read.rejected)
    pl.read_csv(path).drop("is_original").write_csv(path)
    with pytest.raises(CorpusError, match="pma.csv: no is_original column, and no submission_number or "
                                          "supplement_number column: its originals cannot be told from"):
        load_pma_records(path)


def test_a_decision_date_written_as_a_number_is_read_as_written_not_as_days_since_1970(tmp_path: Path):
    from meddevkg_core.dossier import load_pma_records

    # cast to a date, 20100105 was the year 57002 (quarantined under that date) and 14000 was 2008-05-01
    path = tmp_path / "pma.parquet"
    pl.DataFrame({"submission_number": ["P100001", "P100001/S001", "P100001/S002"],
                  "date_decision": [20100105, 14000, None],
                  "approval_order_statement": ["APPROVAL FOR THE STENT.", "A NEW SUPPLIER.", "A NEW LABEL."]}
                 ).write_parquet(path)
    read = load_pma_records(path)
    assert read.originals["decision_date"].to_list() == [date(2010, 1, 5)]
    assert read.supplements.select("supplement_number", "decision_date").rows() == [("S002", None)]
    assert read.rejected.select("record_key", "reason").rows() == [
        ("pma.parquet#1:P100001", "supplement S001: unparseable decision_date '14000' (want YYYY-MM-DD or YYYYMMDD)")]
    # select-devices reads the same file's dates the same way
    assert canonical_pma(pl.read_parquet(path))["decision_date"].to_list() == [date(2010, 1, 5), None, None]


@pytest.mark.parametrize(("numbers", "reasons"), [
    ([100001, None], ["pma_number '100001' is not a PMA number", "missing pma_number"]),
    (pl.Series([None, None], dtype=pl.Null), ["missing pma_number", "missing pma_number"]),
])
def test_a_submission_number_column_that_is_not_text_is_read_as_text_and_its_records_quarantined(
        tmp_path: Path, numbers, reasons):
    from meddevkg_core.dossier import load_pma_records

    # polars refused to split a number or an all-null column: a SchemaError naming no file
    path = tmp_path / "pma.parquet"
    pl.DataFrame({"submission_number": numbers, "approval_order_statement": ["A STENT.", "A VALVE."]}
                 ).write_parquet(path)
    assert load_pma_records(path).rejected["reason"].to_list() == reasons
    assert load_pma_records(path, ["P100001"]).rejected.height == 0  # none is a record of P100001
    for column in ("pma_number", "submission_number"):  # bytes that are not UTF-8: polars cannot read them as text
        pl.DataFrame({column: [b"P100001", b"P10000\xff"], "supplement_number": [None, "S001"],
                      "ao_statement": ["A STENT.", "A VALVE."]}).write_parquet(path)
        with pytest.raises(CorpusError, match="pma.parquet: cannot be read as PMA records: invalid utf8"):
            load_pma_records(path, ["P100001"])


def test_a_damaged_parquet_file_of_pma_records_is_refused_naming_it_in_one_line(tmp_path: Path, damaged_parquet,
                                                                                 aborting_parquet):
    from meddevkg_core.dossier import load_pma_records

    # polars raised a PanicException, a BaseException no reader caught: a traceback naming no file
    path = damaged_parquet(tmp_path / "pma.parquet")
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(path))}: cannot be read as PMA records: "
                                          rf"{PANICKED_ON_IT}$"):
        load_pma_records(path)
    aborting_parquet(path)  # polars aborted the process: no error, no file named
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(path))}: cannot be read as PMA records: "
                                          rf"{WOULD_ABORT_ON_IT}$"):
        load_pma_records(path)


def test_a_submission_number_with_a_second_slash_keeps_all_of_its_supplement_number(tmp_path: Path):
    # "P130026/S001/X" was read as S001: a second copy of it, one of the two quarantined as superseded
    path = tmp_path / "pma.parquet"
    _fdadata([("P130026", "2014-10-24", "TACTICATH", "APPROVAL FOR THE CATHETER."),
              ("P130026/S001", "2015-02-01", None, "A NEW DISTAL TIP ADHESIVE."),
              ("P130026/S001/X", "2015-03-01", None, "A NEW LABEL.")]).write_parquet(path)
    read = load_supplements(path, ["P130026"])
    assert read.valid["supplement_number"].to_list() == ["S001", "S001/X"] and read.rejected.height == 0


def test_approval_dates_are_read_from_records_in_either_naming(tmp_path: Path):
    from meddevkg_core.app_store import with_fda_decision_dates

    devices = pl.DataFrame({"fda_id": ["P130026", "P999999"], "text": ["catheter", "stent"]})
    fdadata = tmp_path / "pma.parquet"
    _fdadata([("P130026", "2014-10-24", "TACTICATH", "APPROVAL."),
              ("P130026/S001", "2015-02-01", "TACTICATH", "A NEW TIP.")]).write_parquet(fdadata)
    openfda = tmp_path / "pma.csv"  # openFDA's field names, as `meddevkg run --fda-pma` also reads them
    openfda.write_text("pma_number,supplement_number,decision_date,ao_statement\n"
                       "P130026,,2014-10-24,APPROVAL.\nP130026,S001,2015-02-01,A NEW TIP.\n")
    for path in (fdadata, openfda):  # the original's date, never a supplement's
        assert with_fda_decision_dates(devices, path)["decision_date"].to_list() == [date(2014, 10, 24), None]
    with pytest.raises(CorpusError, match="not PMA records"):
        with_fda_decision_dates(devices, _not_pma(tmp_path))


def _not_pma(tmp_path: Path) -> Path:
    path = tmp_path / "patents.parquet"
    pl.DataFrame({"pat_id": ["1"], "text": ["a"]}).write_parquet(path)
    return path


def test_without_records_the_corpus_has_no_supplements(tmp_path: Path):
    corpus = Corpus(DEVICES, schemas.empty(schemas.PATENTS), schemas.empty(schemas.GOLD_LINKS),
                    schemas.empty(schemas.LABELED_PAIRS), schemas.empty(schemas.REJECTED_RECORDS))
    assert with_supplements(corpus, None) is corpus and corpus.supplements is None
    path = tmp_path / "pma.parquet"
    _fdadata([("P100001/S001", "2012-01-01", "STENT", "CHANGE IN THE STERILIZATION PROCESS.")]).write_parquet(path)
    read = with_supplements(corpus, path)
    assert read.supplements["fda_id"].to_list() == ["P100001"]
    assert read.inputs == {"fda_pma": fingerprint(path)} and corpus.inputs == {}  # the records' file, recorded


PATENTS = pl.DataFrame({"pat_id": ["1", "2", "3"],
                        "text": ["Optical fiber force sensor in an ablation catheter tip.",
                                 "Adhesive bond joint of a distal tip.", "Coronary stent with drug coating."]})


NO_COMPANY_MATCHES = pl.DataFrame(schema={"fda_id": pl.String, "pat_id": pl.String, "match_kind": pl.String,
                                          "company_path": pl.String})


def _pool(devices: pl.DataFrame, supplements: pl.DataFrame | None, patents: pl.DataFrame = PATENTS) -> pl.DataFrame:
    rng = np.random.default_rng(0)
    embeddings = {name: pl.DataFrame({"doc_id": ids, "content_hash": ids,
                                      "embedding": list(rng.normal(size=(len(ids), 8)).astype(np.float32))},
                                     schema=schemas.EMBEDDINGS)
                  for name, ids in (("d", devices["fda_id"].to_list()), ("p", patents["pat_id"].to_list()))}
    config = PipelineConfig()
    everything = config.candidates.model_copy(update={"admission_threshold": -1.0})
    config = config.model_copy(update={"candidates": everything})
    inputs = stage2_inputs(embeddings["d"], embeddings["p"], schemas.empty(schemas.MENTIONS),
                           schemas.empty(schemas.MENTIONS), NO_COMPANY_MATCHES,
                           load_meddevonto(), config, devices, patents, supplements)
    return generate_candidates(inputs, config.candidates).sort("fda_id", "pat_id")


def test_the_dossier_score_reads_the_supplements_and_not_the_batch():
    pool = _pool(DEVICES, SUPPLEMENTS)
    assert pool.height == 9  # every pair admitted (threshold below every score)
    row = {(r["fda_id"], r["pat_id"]): r for r in pool.iter_rows(named=True)}
    # "adhesive", "joint"... the device text shares no word with patent 2, its supplements do
    assert row[("P130026", "2")]["lexical"] == 0 < row[("P130026", "2")]["dossier_lexical"]
    # a device without supplements scores its own text
    assert row[("P100001", "3")]["dossier_lexical"] == pytest.approx(row[("P100001", "3")]["lexical"])
    alone = _pool(DEVICES.head(1), SUPPLEMENTS)  # IDF from the patents: the same whichever devices run
    same_device = pool.filter(pl.col("fda_id") == "P130026")
    assert alone["dossier_lexical"].to_list() == same_device["dossier_lexical"].to_list()
    assert _pool(DEVICES, None)["dossier_lexical"].is_nan().all()  # no records read: missing, not zero


def test_an_approval_date_comes_from_the_original_the_dossiers_keep_and_a_conflicting_copy_is_quarantined(
        tmp_path: Path):
    # the dates took the earliest of conflicting originals, which the dossier reader quarantines
    from meddevkg_core.app_store import with_fda_decision_dates
    from meddevkg_core.dossier import load_pma_records

    devices = pl.DataFrame({"fda_id": ["P130026"], "text": ["catheter"]})
    path = tmp_path / "pma.csv"
    path.write_text("pma_number,supplement_number,decision_date,ao_statement\n"
                    "P130026,,2014-10-24,APPROVAL.\nP130026,,2013-01-02,AN EARLIER COPY.\n")
    assert with_fda_decision_dates(devices, path)["decision_date"].to_list() == [date(2014, 10, 24)]
    [reason] = load_pma_records(path, ["P130026"]).rejected["reason"].to_list()
    assert reason.startswith("duplicate original of P130026: superseded by record #0")


def test_an_original_without_text_still_dates_its_device_and_is_not_quarantined(tmp_path: Path):
    # the device comes from the corpus: the record only needs a valid number and date here
    from meddevkg_core.app_store import with_fda_decision_dates
    from meddevkg_core.dossier import load_pma_records

    path = tmp_path / "pma.csv"
    path.write_text("pma_number,supplement_number,decision_date,ao_statement\nP100045,,2014-05-28,\n")
    devices = pl.DataFrame({"fda_id": ["P100045"], "text": ["sensor"]})
    assert with_fda_decision_dates(devices, path)["decision_date"].to_list() == [date(2014, 5, 28)]
    assert load_pma_records(path, ["P100045"]).rejected.height == 0
