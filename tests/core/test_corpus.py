import json

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.corpus import read_corpus, write_corpus
from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import fingerprint


def _write_jsonl(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")


@pytest.mark.parametrize(("header", "named"), [
    ("id,pma_number,text", "'id', 'pma_number', each a name for 'fda_id'"),
    ("fda_id,company,Company,text", "'company', 'Company', each a name for 'applicant'"),
], ids=["fda_id", "applicant"])
def test_two_columns_that_are_names_for_one_are_an_error_naming_them(tmp_path, header, named):
    # both were renamed to it: a polars DuplicateError naming no file
    (tmp_path / "devices.csv").write_text(f"{header}\n" + ",".join(["P1"] * (header.count(",") + 1)) + "\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    with pytest.raises(CorpusError, match=f"devices.csv: table 'devices' has columns {named}: keep one"):
        read_corpus(tmp_path)


def test_reads_csv_and_jsonl_and_quarantines_bad_rows(tmp_path):
    _write_jsonl(tmp_path / "devices.jsonl", [
        {"fda_id": "P1", "applicant": "Acme", "text": "Coronary stent system", "decision_date": "2010-05-01"},
        {"fda_id": "P2", "applicant": "Acme"},  # no text
        "{not json",
        {"fda_id": "P1", "applicant": "Acme", "text": "duplicate of P1"},
        {"fda_id": "P3", "text": "Valve", "decision_date": "2010-13-45"},
    ])
    (tmp_path / "patents.csv").write_text(
        "pat_id,title,abstract,assignee,grant_date,cpc_codes\n"
        "9000001,Stent,A stent comprising struts,Acme Inc.,2012-01-03,A61F2/82 A61F2/91\n"
        ",No id,Missing id,Acme,2012-01-03,\n")
    (tmp_path / "gold_links.csv").write_text("fda_id,pat_id\nP1,9000001\nP9,9000001\n")

    corpus = read_corpus(tmp_path)

    assert corpus.devices["fda_id"].to_list() == ["P1"]
    assert corpus.devices.schema == schemas.DEVICES
    assert corpus.patents.row(0, named=True)["text"] == "Stent A stent comprising struts"
    assert corpus.patents["cpc_codes"].to_list() == [["A61F2/82", "A61F2/91"]]
    assert corpus.gold_links.height == 1
    reasons = sorted(corpus.rejected["reason"].to_list())
    assert any(r.startswith("line 3: invalid JSON") for r in reasons)
    assert "missing text" in reasons and "missing pat_id" in reasons
    assert "unparseable decision_date (want YYYY-MM-DD)" in reasons
    assert "duplicate key of row 0" in reasons
    assert "fda_id not among valid devices" in reasons
    assert corpus.rejected.height == 6
    assert all(json.loads(r) for r in corpus.rejected["record"])


def test_a_corpus_read_by_a_relative_path_knows_its_absolute_root(tmp_path, monkeypatch):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "devices.csv").write_text("fda_id,text\nP1,stent\n")
    (corpus / "patents.csv").write_text("pat_id,text\n1,stent\n")
    monkeypatch.chdir(tmp_path)
    assert read_corpus("c").root == corpus.resolve()  # runs record it; their readers may start elsewhere
    with pytest.raises(CorpusError, match="corpus directory nowhere does not exist"):
        read_corpus("nowhere")


def test_a_corpus_records_the_file_of_each_table_it_read_by_name(tmp_path, monkeypatch):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "devices.csv").write_text("fda_id,text\nP1,stent\n")
    _write_jsonl(corpus / "patents.jsonl", [{"pat_id": "1", "text": "stent"}])
    (corpus / "labeled_pairs.csv").write_text("fda_id,pat_id,label\nP1,1,1\n")
    (corpus / "notes.csv").write_text("not,a,table\n")
    monkeypatch.chdir(tmp_path)
    read = read_corpus("c")  # no gold_links: none recorded
    assert read.inputs == {"devices": fingerprint(corpus / "devices.csv"),
                           "patents": fingerprint(corpus / "patents.jsonl"),
                           "labeled_pairs": fingerprint(corpus / "labeled_pairs.csv")}
    assert read.inputs["devices"].path == str(corpus.resolve() / "devices.csv")


def test_missing_required_table_is_a_clear_error(tmp_path):
    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,stent\n")
    with pytest.raises(CorpusError, match="no patents table"):
        read_corpus(tmp_path)


def test_round_trip_through_canonical_parquet(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "devices.csv").write_text("fda_id,text,applicant\nP1,stent,ACME\n")
    (tmp_path / "in" / "patents.csv").write_text("pat_id,text,assignee\n1,stent,ACME\n")
    first = read_corpus(tmp_path / "in")
    again = read_corpus(write_corpus(first, tmp_path / "out"))
    assert again.devices.equals(first.devices) and again.patents.equals(first.patents)


def test_accepts_the_real_benchmark_as_is(benchmark_dir):
    corpus = read_corpus(benchmark_dir)
    assert (corpus.devices.height, corpus.patents.height) == (434, 2185)
    assert corpus.gold_links.height == 426 and corpus.rejected.height == 0
    assert corpus.labeled_pairs["label"].to_list().count(1) > 0
    assert corpus.devices["applicant"].null_count() == 0
    assert pl.Series(corpus.patents["text"]).str.len_chars().min() > 0


def test_an_id_with_stray_whitespace_is_a_duplicate_not_another_record(tmp_path):
    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,Coronary stent\nP1 ,Conflicting text\nP2,Valve\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n11,stent\n 11,other stent\n")
    (tmp_path / "gold_links.csv").write_text("fda_id,pat_id\nP1,11\nP1, 11\n")
    (tmp_path / "labeled_pairs.csv").write_text("fda_id,pat_id,label\nP1,11,1\n P1,11 ,0\n")

    corpus = read_corpus(tmp_path)

    assert corpus.devices.select("fda_id", "text").rows() == [("P1", "Coronary stent"), ("P2", "Valve")]
    assert corpus.patents["pat_id"].to_list() == ["11"]
    assert corpus.gold_links.rows() == [("P1", "11")]
    assert corpus.labeled_pairs.rows() == [("P1", "11", 1)]
    rejected = dict(zip(corpus.rejected["record_key"], corpus.rejected["reason"], strict=True))
    assert rejected == {"devices#1:P1 ": "duplicate key of row 0", "patents#1: 11": "duplicate key of row 0",
                        "gold_links#1:P1": "duplicate key of row 0", "labeled_pairs#1: P1": "duplicate key of row 0"}
    assert json.loads(corpus.rejected["record"][0])["text"] == "Conflicting text"  # kept as written


def test_a_device_id_is_read_upper_cased_as_fda_and_every_other_reader_write_pma_numbers(tmp_path):
    (tmp_path / "devices.csv").write_text("fda_id,text\np000018,Coronary stent\nP000018,Conflicting text\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\nd11,stent\n")
    (tmp_path / "gold_links.csv").write_text("fda_id,pat_id\np000018 ,d11\n")

    corpus = read_corpus(tmp_path)

    assert corpus.devices.select("fda_id", "text").rows() == [("P000018", "Coronary stent")]
    assert corpus.gold_links.rows() == [("P000018", "d11")]  # a patent id keeps its case, as PatentsView's
    assert corpus.rejected.select("record_key", "reason").rows() == [("devices#1:P000018", "duplicate key of row 0")]


def test_a_blank_text_or_a_label_other_than_0_or_1_is_quarantined(tmp_path):
    _write_jsonl(tmp_path / "devices.jsonl", [{"fda_id": "P1", "text": "stent"}, {"fda_id": "P2", "text": ""},
                                               {"fda_id": "P3", "text": "  "}])
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    (tmp_path / "labeled_pairs.csv").write_text("fda_id,pat_id,label\nP1,1,1.0\nP1,1 ,2\n")

    corpus = read_corpus(tmp_path)

    assert corpus.devices["fda_id"].to_list() == ["P1"] and corpus.labeled_pairs.rows() == [("P1", "1", 1)]
    assert corpus.rejected.select("record_key", "reason").rows() == [
        ("devices#1:P2", "missing text"), ("devices#2:P3", "missing text"),
        ("labeled_pairs#1:P1", "label is not 0 or 1")]


def test_a_text_or_id_of_invisible_characters_only_is_missing_and_invisible_ones_in_a_text_stay(tmp_path):
    # zero-width spaces and joiners, the word joiner and the BOM are no whitespace to strip_chars:
    # a device whose text showed nothing was read as having one, and ranked on it
    _write_jsonl(tmp_path / "devices.jsonl", [
        {"fda_id": "P1", "text": "Coronary\u200bstent"}, {"fda_id": "P2", "text": "\u200b\ufeff \u200c\u200d"},
        {"fda_id": "\u2060 ", "text": "Heart valve"}, {"fda_id": "P4", "generic_name": "\u200b", "trade_name": " "}])
    (tmp_path / "patents.csv").write_text("pat_id,title,abstract\n1,A stent,\n2,\u200b,\ufeff\n")
    corpus = read_corpus(tmp_path)
    assert corpus.devices.select("fda_id", "text").rows() == [("P1", "Coronary\u200bstent")]
    assert corpus.patents["pat_id"].to_list() == ["1"]
    assert corpus.rejected.select("record_key", "reason").rows() == [
        ("devices#1:P2", "missing text"), ("devices#2:\u2060 ", "missing fda_id"), ("devices#3:P4", "missing text"),
        ("patents#1:2", "missing text")]


def test_a_valid_row_after_a_rejected_one_of_its_key_is_kept_not_taken_for_a_duplicate(tmp_path):
    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,\nP1,Coronary stent\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")

    corpus = read_corpus(tmp_path)

    assert corpus.devices.select("fda_id", "text").rows() == [("P1", "Coronary stent")]
    assert corpus.rejected.select("record_key", "reason").rows() == [("devices#0:P1", "missing text")]


def test_a_gold_link_to_an_unknown_patent_is_quarantined_naming_the_patent(tmp_path):
    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,stent\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    (tmp_path / "gold_links.csv").write_text("fda_id,pat_id\nP1,1\nP1,2\n")

    corpus = read_corpus(tmp_path)

    assert corpus.gold_links.rows() == [("P1", "1")]
    assert corpus.rejected.select("record_key", "reason").rows() == [
        ("gold_links:P1|2", "pat_id not among valid patents")]


def test_a_date_with_surrounding_spaces_is_read_as_its_date_on_either_side(tmp_path):
    # the check parsed the value unstripped: a trailing space was quarantined, a leading one read
    (tmp_path / "devices.csv").write_text("fda_id,text,decision_date\nP1,stent, 2010-05-01\nP2,valve,2010-05-01 \n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n9000001,A stent\n")
    corpus = read_corpus(tmp_path)
    assert corpus.rejected.height == 0
    assert corpus.devices["decision_date"].cast(pl.String).to_list() == ["2010-05-01", "2010-05-01"]
