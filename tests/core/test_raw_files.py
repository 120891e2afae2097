import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from meddevkg_core.corpus import read_corpus
from meddevkg_core.errors import CorpusError
from meddevkg_core.raw_files import read_raw
from tests.conftest import PANICKED_ON_IT, WOULD_ABORT_ON_IT


def _write_jsonl(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")


def test_a_jsonl_column_null_on_every_line_is_read_as_a_text_column_of_nulls(tmp_path):
    # it came back untyped, and the reader stopped on a polars SchemaError naming no file
    _write_jsonl(tmp_path / "devices.jsonl", [{"fda_id": "P1", "trade_name": None, "text": "Coronary stent"},
                                              {"fda_id": "P2", "trade_name": None, "text": "Heart valve"}])
    (tmp_path / "patents.csv").write_text("pat_id,text\n9000001,A stent\n")
    corpus = read_corpus(tmp_path)
    assert corpus.devices["fda_id"].to_list() == ["P1", "P2"] and corpus.devices["trade_name"].null_count() == 2
    assert corpus.rejected.height == 0


def test_rows_with_bytes_that_are_not_utf8_are_quarantined_not_read_with_a_replacement_character(tmp_path):
    (tmp_path / "devices.csv").write_bytes(b"fda_id,text\nP1,Coronary stent\nP\xe92,Heart valve\nP3,Cath\xe9ter\n")
    (tmp_path / "patents.jsonl").write_bytes(b'{"pat_id": "9000001", "text": "A stent"}\n'
                                             b'{"pat_id": "9000002", "text": "A valve \xff"}\n')
    corpus = read_corpus(tmp_path)
    assert corpus.devices["fda_id"].to_list() == ["P1"] and corpus.patents["pat_id"].to_list() == ["9000001"]
    reasons = dict(corpus.rejected.select("record_key", "reason").iter_rows())
    assert sorted(reasons.values()) == ["bytes that are not UTF-8 in fda_id (read as U+FFFD)",
                                        "bytes that are not UTF-8 in text (read as U+FFFD)",
                                        "bytes that are not UTF-8 in text (read as U+FFFD)"]


def test_a_jsonl_text_holding_a_line_or_paragraph_separator_is_one_record(tmp_path):
    # str.splitlines also ends a line at U+2028, U+2029 and U+0085, which JSON lets a string hold as
    # they are: each such record was split in two and quarantined as two lines of invalid JSON
    texts = ["Coronary\u2028stent", "Heart\u2029valve", "Cardiac\x85lead"]
    rows = [{"fda_id": f"P{i}", "text": text} for i, text in enumerate([*texts, "Catheter"], 1)]
    (tmp_path / "devices.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n",
                                            encoding="utf-8")
    (tmp_path / "patents.jsonl").write_text('{"pat_id": "1", "text": "stent"}\r\n{"pat_id": "2", "text": "valve"}\r\n')
    corpus = read_corpus(tmp_path)
    assert corpus.devices["text"].to_list() == [*texts, "Catheter"]
    assert corpus.patents["pat_id"].to_list() == ["1", "2"]
    assert corpus.rejected.height == 0


def test_a_byte_order_mark_opening_a_jsonl_file_is_ignored_as_in_a_csv_file(tmp_path):
    # the first record was quarantined as "invalid JSON (Unexpected UTF-8 BOM ...)"; a BOM anywhere
    # else is no file's mark: one opening a later line is still invalid JSON, one in a text is its text
    bom = "\ufeff"
    (tmp_path / "devices.jsonl").write_text(f'{bom}{{"fda_id": "P1", "text": "stent"}}\n'
                                            f'{bom}{{"fda_id": "P2", "text": "valve"}}\n'
                                            f'{{"fda_id": "P3", "text": "{bom}lead"}}\n', encoding="utf-8")
    (tmp_path / "patents.csv").write_text(f"{bom}pat_id,text\n1,stent\n", encoding="utf-8")
    corpus = read_corpus(tmp_path)
    assert corpus.devices.select("fda_id", "text").rows() == [("P1", "stent"), ("P3", f"{bom}lead")]
    assert corpus.patents["pat_id"].to_list() == ["1"]
    [reason] = corpus.rejected["reason"].to_list()
    assert reason.startswith("line 2: invalid JSON (Unexpected UTF-8 BOM")


def test_a_jsonl_record_giving_a_key_twice_is_quarantined_not_read_with_its_last_value(tmp_path):
    # json.loads keeps the last of the two values: P2 was read as a device "P9", P1's text silently lost
    (tmp_path / "devices.jsonl").write_text('{"fda_id": "P1", "text": "stent", "text": "valve"}\n'
                                            '{"fda_id": "P2", "text": "lead", "fda_id": "P9"}\n'
                                            '{"fda_id": "P3", "text": "catheter"}\n')
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    corpus = read_corpus(tmp_path)
    assert corpus.devices["fda_id"].to_list() == ["P3"]
    assert corpus.rejected.select("record_key", "reason").rows() == [
        ("devices#0:", "line 1: invalid JSON (key 'text' given twice)"),
        ("devices#1:", "line 2: invalid JSON (key 'fda_id' given twice)")]


def test_a_jsonl_line_nested_deeper_than_json_reads_is_quarantined_not_a_traceback(tmp_path):
    # json.loads raised RecursionError, which ended the whole read
    (tmp_path / "devices.jsonl").write_text('{"fda_id": "P1", "text": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
                                            '{"fda_id": "P2", "text": "lead"}\n')
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    corpus = read_corpus(tmp_path)
    assert corpus.devices["fda_id"].to_list() == ["P2"]
    [reason] = corpus.rejected["reason"].to_list()
    assert reason.startswith("line 1: invalid JSON (maximum recursion depth")


def test_a_jsonl_object_where_a_value_belongs_is_quarantined_not_read_as_its_python_text(tmp_path):
    # str() of the dict was kept: device "{'N': 'P1'}", a text "{'en': 'Heart valve'}"
    _write_jsonl(tmp_path / "devices.jsonl", [{"fda_id": {"n": "P1"}, "text": "Coronary stent"},
                                              {"fda_id": "P2", "text": {"en": "Heart valve"}},
                                              {"fda_id": "P3", "text": ["Pacing", {"b": "lead"}]},
                                              {"fda_id": "P4", "text": ["Cardiac", "catheter"]}])
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    corpus = read_corpus(tmp_path)
    assert corpus.devices.select("fda_id", "text").rows() == [("P4", "Cardiac catheter")]
    assert corpus.rejected.select("record_key", "reason").rows() == [
        ('devices#0:{"n": "P1"}', "line 1: 'fda_id' holds a JSON object or nested array, not a value"),
        ("devices#1:P2", "line 2: 'text' holds a JSON object or nested array, not a value"),
        ("devices#2:P3", "line 3: 'text' holds a JSON object or nested array, not a value")]
    assert json.loads(corpus.rejected["record"][1]) == {"fda_id": "P2", "text": '{"en": "Heart valve"}'}


def test_a_null_in_a_jsonl_array_is_left_out_as_in_a_parquet_list_not_read_as_none(tmp_path):
    # str(None) was joined in: a CPC code "None", a text "None" that was no text
    _write_jsonl(tmp_path / "patents.jsonl", [{"pat_id": "1", "text": "stent", "cpc_codes": ["A61F2/82", None]},
                                              {"pat_id": "2", "text": [None]}])
    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,stent\n")
    corpus = read_corpus(tmp_path)
    assert corpus.patents.select("pat_id", "cpc_codes").rows() == [("1", ["A61F2/82"])]
    assert corpus.rejected.select("record_key", "reason").rows() == [("patents#1:2", "missing text")]
    (tmp_path / "patents.jsonl").unlink()
    pl.DataFrame({"pat_id": ["1", "2"], "text": [["stent"], [None]], "cpc_codes": [["A61F2/82", None], []]}
                 ).write_parquet(tmp_path / "patents.parquet")
    again = read_corpus(tmp_path)
    assert again.patents.equals(corpus.patents) and again.rejected["reason"].to_list() == ["missing text"]


@pytest.mark.parametrize(("values", "reason"), [
    ([{"n": "P1", "v": 2}], r"column 'extra' holds nested data \(Struct"),  # was read as the text '{"P1",2}'
    ([[["a"]]], r"column 'extra' holds nested data \(List\(List"),
    ([b"\xff"], r"column 'extra' \(Binary\) cannot be read as text: invalid utf8"),
    ([dt.timedelta(days=1)], r"column 'extra' \(Duration.*\) cannot be read as text"),
    # a date polars stores but cannot write as text: its panic escaped as a traceback naming no file
    (pl.Series([2**31 - 1], dtype=pl.Int32).cast(pl.Date), r"column 'extra' \(Date\) cannot be read as text: "
                                                           ".*: out-of-range date$"),
])
def test_a_parquet_column_that_is_not_one_value_a_row_refuses_the_file_naming_it(tmp_path, values, reason):
    # the last three ended in a polars traceback naming no file
    pl.DataFrame({"fda_id": ["P1"], "text": ["stent"], "extra": values}).write_parquet(tmp_path / "devices.parquet")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    with pytest.raises(CorpusError, match=r"devices\.parquet: " + reason):
        read_corpus(tmp_path)


@pytest.mark.parametrize(("name", "content", "reason"), [
    # polars refused a second __row__ with a traceback; a file's own __parse_error__ quarantined the rows it filled
    ("devices.csv", "fda_id,text,__row__\nP1,stent,7\n", "column '__row__'"),
    ("devices.csv", "fda_id,text,__parse_error__\nP1,stent,\nP2,valve,bad\n", "column '__parse_error__'"),
    ("devices.csv", "fda_id,text,__raw__\nP1,stent,x\nP2,valve\n", "column '__raw__'"),  # a short record too
    ("devices.jsonl", '{"fda_id": "P1", "text": "stent"}\n{"fda_id": "P2", "text": "valve", "__reason__": "x"}\n',
     "line 2: column '__reason__'"),
    ("devices.parquet", None, "column '__row__'"),
], ids=["csv-row", "csv-parse-error", "csv-raw", "jsonl-reason", "parquet-row"])
def test_a_column_named_as_the_readers_own_refuses_the_file_naming_it(tmp_path, name, content, reason):
    if content is None:
        pl.DataFrame({"fda_id": ["P1"], "text": ["stent"], "__row__": [3]}).write_parquet(tmp_path / name)
    else:
        (tmp_path / name).write_text(content)
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    with pytest.raises(CorpusError, match=f"{name}: {reason} is a name the reader keeps for itself"):
        read_corpus(tmp_path)


def test_a_csv_record_with_more_or_fewer_fields_than_the_header_is_quarantined_with_its_line(tmp_path):
    # polars stopped the whole read on the longer record ("found more fields than defined") and
    # padded the shorter one with nulls; quoted commas and newlines are still one field each
    (tmp_path / "devices.csv").write_text('fda_id,text,applicant\n'
                                          'P1,"Coronary stent, drug-eluting\nsystem",Acme\n'
                                          'P2,stent,Acme,b\n'
                                          'P3,"Heart valve"\n'
                                          'P4,"Pacemaker, dual\nchamber",\n')
    (tmp_path / "patents.csv").write_text("pat_id,text,assignee\n9000001,A stent,Acme\n9000002,A valve\n")
    corpus = read_corpus(tmp_path)
    assert corpus.patents["pat_id"].to_list() == ["9000001"]
    assert corpus.devices.select("fda_id", "text", "applicant").rows() == [
        ("P1", "Coronary stent, drug-eluting\nsystem", "Acme"), ("P4", "Pacemaker, dual\nchamber", None)]
    rejected = corpus.rejected.select("source", "record_key", "reason").rows()
    assert rejected == [("devices.csv", "devices#1:P2", "line 4: 4 fields where the header has 3"),
                        ("devices.csv", "devices#2:P3", "line 5: 2 fields where the header has 3"),
                        ("patents.csv", "patents#1:9000002", "line 3: 2 fields where the header has 3")]
    assert json.loads(corpus.rejected["record"][0])["__raw__"] == "P2,stent,Acme,b"


def test_a_csv_file_whose_lines_end_in_a_carriage_return_alone_is_refused_not_read_as_empty(tmp_path):
    # polars read one header "fda_id,text,applicant\rP1,..." and no rows: every device gone, no error
    (tmp_path / "devices.csv").write_bytes(b"fda_id,text,applicant\rP1,stent,Acme\rP2,valve,Acme\r")
    (tmp_path / "patents.csv").write_bytes(b"pat_id,text\r\n1,stent\r\n")  # CR LF is a line end
    with pytest.raises(CorpusError, match=r"devices\.csv: cannot be read: its header runs on past a carriage "
                                          r"return \('applicant\\rP1'\); lines must end in LF or CR LF"):
        read_corpus(tmp_path)
    (tmp_path / "devices.csv").write_bytes(b"fda_id,text,applicant\r\nP1,stent,Acme\r\n")
    assert read_corpus(tmp_path).patents["pat_id"].to_list() == ["1"]


@pytest.mark.parametrize("stray", [b'P3,3.5" coronary\rstent,Acme\n', b"P3,stent\r,Acme\n",
                                   b"P3,stent,Acme\rP4,valve,Acme\n"],
                         ids=["inside a field", "ending a field", "ending a line"])
def test_a_carriage_return_alone_outside_quotes_in_a_csv_file_refuses_it_naming_its_line(tmp_path, stray):
    # polars kept "Coronary\rstent" as the text and dropped the CR of "stent\r,"; where a record came
    # out short or long, the csv module, which ends a line at the CR, misaligned the records. The first
    # case's quote is no opening one: a quote opens a field or it is text (as polars and csv read it)
    head = (b'fda_id,text,applicant\n'
            b'P1,"Heart\r\nvalve, aortic\rroot",\n'  # quoted: the CR is the text's
            b'P2,"Catheter ""3.5""",Acme\n')
    (tmp_path / "devices.csv").write_bytes(head + stray + b"P5,Pacemaker,Acme,x\n")
    (tmp_path / "patents.csv").write_bytes(b"pat_id,text\n1,stent\r\n")
    with pytest.raises(CorpusError, match=r"devices\.csv: cannot be read: line 6 has a carriage return alone \(not "
                                          r"before a line feed\) outside quotes; quote the field that holds it, or "
                                          r"end lines in LF or CR LF$"):
        read_corpus(tmp_path)
    (tmp_path / "devices.csv").write_bytes(head + b'P3,"Coronary\rstent",Acme\n')
    assert read_corpus(tmp_path).devices.select("fda_id", "text").rows() == [
        ("P1", "Heart\r\nvalve, aortic\rroot"), ("P2", 'Catheter "3.5"'), ("P3", "Coronary\rstent")]


@pytest.mark.parametrize(("record", "reason"), [
    (b'P2,"Heart valve,Acme\nP3,stent,Acme\n',
     "line 3, column 'text': field '\"Heart valve,Acme\\nP3,stent,Acme\\n' is not properly escaped (its quote is "
     "never closed)"),
    (b'P2,"Heart valve"s,Acme\nP3,"Aortic valve, with an aortic valve delivery system and a loading kit",\n',
     "line 3, column 'text': field '\"Heart valve\"s' is not properly escaped (text follows its closing quote)"),
    (b'P2,"Aortic valve, with an aortic valve delivery system"s,Acme\n',
     "line 3, column 'text': field '\"Aortic valve, with an aortic valve deli...' is not properly escaped (text "
     "follows its closing quote)"),
], ids=["never closed", "text after the quote", "a long field"])
def test_a_csv_field_with_a_malformed_quote_refuses_the_file_in_one_line_naming_its_line(tmp_path, record, reason):
    # the error was polars' own: the field (the rest of the file, for a quote never closed), then
    # "You might want to try:" and a list of read_csv options, over 15 lines
    (tmp_path / "devices.csv").write_bytes(b"fda_id,text,applicant\nP1,stent,Acme\n" + record)
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    with pytest.raises(CorpusError) as refused:
        read_corpus(tmp_path)
    assert str(refused.value) == f"{tmp_path / 'devices.csv'}: cannot be read: {reason}"


@pytest.mark.parametrize(("data", "reason"), [
    (b'fda_id,text,applicant\nP1,stent,Acme\nP2,"Heart valve\nP3,stent,""',
     "line 3, column 'text': field '\"Heart valve\\nP3,stent,\"\"'"),
    (b'fda_id,text,applicant\r\nP1,stent,Acme\r\n\r\nP2,valve,"""', "line 4, column 'applicant': field '\"\"\"'"),
    (b'fda_id,"text,applicant\nP1,stent,Acme\nP2,valve,Acme\n',
     "line 1, column '#2': field '\"text,applicant\\nP1,stent,Acme\\nP2,valve,A...'"),
    (b'\xef\xbb\xbf"fda_id,text,applicant\nP1,stent,Acme\n',
     "line 1, column '#1': field '\"fda_id,text,applicant\\nP1,stent,Acme\\n'"),
], ids=["two records read as one", "an empty field", "in the header", "after a byte order mark"])
def test_a_csv_quote_never_closed_refuses_the_file_naming_its_line_however_polars_reads_it(tmp_path, data, reason):
    # an odd number of quotes in the file: polars read these without error, as the quote closing the
    # field at the file's end, P3 ("Heart valve\nP3,stent," quarantined as P2's short record) or P2's
    # applicant ('') read from the doubled quote; in the header, as a header and no rows, every device gone
    (tmp_path / "devices.csv").write_bytes(data)
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    with pytest.raises(CorpusError) as refused:
        read_corpus(tmp_path)
    assert str(refused.value) == (f"{tmp_path / 'devices.csv'}: cannot be read: {reason} is not properly escaped "
                                  "(its quote is never closed)")


@pytest.mark.parametrize(("records", "field"), [
    (b'P1,"Best" 3" catheter,Acme\nP2,stent,Acme\nP3,x",Acme\n',
     "line 2, column 'text': field '\"Best\" 3\" catheter'"),
    (b'P1,stent,"Acme\nMedical" Inc\nP2,valve,Acme\n', "line 2, column 'applicant': field '\"Acme\\nMedical\" Inc'"),
], ids=["records read as one", "a field of two lines"])
def test_text_after_a_closing_quote_refuses_a_csv_file_whatever_polars_makes_of_it(tmp_path, records, field):
    # polars refused the second, but read the first as ONE record, its text
    # 'Best 3 catheter,Acme\nP2,stent,Acme\nP3,x': devices P2 and P3 lost without a word
    path = tmp_path / "devices.csv"
    path.write_bytes(b"fda_id,text,applicant\n" + records)
    with pytest.raises(CorpusError) as refused:
        read_raw(path)
    assert str(refused.value) == (f"{path}: cannot be read: {field} is not properly escaped (text follows its closing "
                                  "quote)")


@pytest.mark.parametrize(("records", "reason"), [
    (b'P2,3.5" catheter,Acme\nP3,"Heart valve, aortic",Acme\n', "line 3, column 'text': field '3.5\" catheter'"),
    (b'P2,"valve, aortic",3.5" catheter\nP3,heart valve,3.5"\nP4,heart valve,Acme\nP5,,3.5"\n',
     "line 3, column 'applicant': field '3.5\" catheter'"),
    (b'P2,3.5","Pacemaker, dual\nchamber"\nP3,stent,Acme\n', "line 3, column 'text': field '3.5\"'"),
    (b'P2",stent,Acme\n', "line 3, column 'fda_id': field 'P2\"'"),
    (b'P2,"Heart valve\nwith ""3.5"" ring",Acme\nP3,stent,3" x 2" kit\n',
     "line 5, column 'applicant': field '3\" x 2\" kit'"),
], ids=["before a quoted field", "two records read as one", "later field blamed", "in the id", "two quotes"])
def test_a_quote_inside_an_unquoted_csv_field_refuses_the_file_in_one_line_naming_its_line(tmp_path, records, reason):
    # the csv module reads it as text, polars as a quote opening a field when it splits the file into
    # records: it refused the file as "CSV malformed: expected 1 rows, actual 2 rows" or blamed a later,
    # valid field ("column 'text': field '\"Pacemaker, dual\\n' is not properly escaped"), naming no
    # line; or it read two records as one, device P3 lost without a word. It read the last two as the
    # csv module does, by the luck of where the quotes fall: one rule (RFC 4180) refuses them all
    (tmp_path / "devices.csv").write_bytes(b"fda_id,text,applicant\nP1,stent,Acme\n" + records)
    (tmp_path / "patents.csv").write_bytes(b'\xef\xbb\xbf"pat_id",text\n1,"a ""3.5"" stent"\n')
    with pytest.raises(CorpusError) as refused:
        read_corpus(tmp_path)
    assert str(refused.value) == (f"{tmp_path / 'devices.csv'}: cannot be read: {reason} is not properly escaped (a "
                                  "quote inside a field that does not open with one; quote the field and double the "
                                  "quote)")
    (tmp_path / "devices.csv").write_bytes(b'fda_id,text,applicant\nP1,"3.5"" catheter",Acme\n')
    corpus = read_corpus(tmp_path)
    assert corpus.devices["text"].to_list() == ['3.5" catheter']
    assert corpus.patents["text"].to_list() == ['a "3.5" stent']


@pytest.mark.parametrize(("records", "refusal"), [
    (b'"PMA, number",text\nP1,\nP2,valve\n', None),
    (b'"fda_id,",text\nP1,stent\rP2,valve\n', "line 2 has a carriage return alone (not before a line feed) outside "
                                            "quotes; quote the field that holds it, or end lines in LF or CR LF"),
    (b'"fda_id,",text\nP1,"stent\nP2,valve\n', "line 2, column 'text': field '\"stent\\nP2,valve\\n' is not "
                                             "properly escaped (its quote is never closed)"),
], ids=["short record", "carriage return alone", "quote never closed"])
def test_a_byte_order_mark_opening_a_csv_file_is_no_part_of_its_first_field_for_the_csv_module_either(
        tmp_path, records, refusal):
    # the csv module read it as text opening the first field, so the quote after it was text too, not
    # one opening a field, and the comma in that field split it in two: it counted 3 header fields for
    # polars' 2 and refused the file for its short record, missed the CR alone (polars refused the file
    # in its own words, "found more fields than defined in 'Schema'") and blamed a quote never closed on
    # line 2 on the header, as "line 1, ... (text follows its closing quote)"
    path = tmp_path / "devices.csv"
    for data in (b"\xef\xbb\xbf" + records, records):  # the same with the mark as without it
        path.write_bytes(data)
        if refusal is None:
            assert read_raw(path).rows() == [("P1", None), ("P2", "valve")]
        else:
            with pytest.raises(CorpusError) as refused:
                read_raw(path)
            assert str(refused.value) == f"{path}: cannot be read: {refusal}"


def test_a_csv_header_naming_a_column_twice_is_refused_not_read_with_the_first_alone(tmp_path):
    # polars named the second "text_duplicated_0": P1 was read as a "stent", its "valve" dropped unseen
    (tmp_path / "devices.csv").write_text("fda_id,text,applicant,text\nP1,stent,Acme,valve\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    with pytest.raises(CorpusError, match="devices.csv: cannot be read: its header names column 'text' more than"):
        read_corpus(tmp_path)
    (tmp_path / "devices.csv").write_text("fda_id,text,,\nP1,stent,,\n")  # a spreadsheet's empty columns
    assert read_corpus(tmp_path).devices["fda_id"].to_list() == ["P1"]


def test_date_typed_columns_are_read_as_their_dates(tmp_path):
    """pandas writes dates as timestamps; Parquet from polars or Arrow may hold real dates."""
    from datetime import date, datetime

    pl.DataFrame({"fda_id": ["P1", "P2"], "text": ["stent", "valve"],
                  "decision_date": [datetime(2015, 3, 2), datetime(2016, 7, 1, 13, 30)]},
                 schema_overrides={"decision_date": pl.Datetime("ns")}).write_parquet(tmp_path / "devices.parquet")
    pl.DataFrame({"pat_id": ["1"], "text": ["stent"], "grant_date": [date(2010, 1, 5)]}).write_parquet(
        tmp_path / "patents.parquet")

    corpus = read_corpus(tmp_path)

    assert corpus.rejected.height == 0
    assert corpus.devices["decision_date"].to_list() == [date(2015, 3, 2), date(2016, 7, 1)]
    assert corpus.patents["grant_date"].to_list() == [date(2010, 1, 5)]


def test_a_damaged_parquet_file_polars_panics_on_is_refused_naming_it_in_one_line(tmp_path, damaged_parquet):
    # polars raised a PanicException, a BaseException no reader caught: a traceback naming no file
    path = damaged_parquet(tmp_path / "devices.parquet")
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(path))}: cannot be read: {PANICKED_ON_IT}$"):
        read_raw(path)


def test_a_parquet_file_polars_would_abort_on_is_refused_naming_it_in_one_line(tmp_path, aborting_parquet):
    # polars aborted the process on it (SIGABRT): a CLI run or a Dagster run worker died naming no file.
    # Read in a subprocess, so that an abort fails the test and not the test run
    path = aborting_parquet(tmp_path / "devices.parquet")
    code = ("import sys\nfrom pathlib import Path\nfrom meddevkg_core.raw_files import read_raw\n"
            "try:\n    read_raw(Path(sys.argv[1]))\nexcept Exception as exc:\n    print(type(exc).__name__, exc)")
    read = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert read.returncode == 0, read.stderr[:300]
    assert re.fullmatch(rf"CorpusError {re.escape(str(path))}: cannot be read: {WOULD_ABORT_ON_IT}\n",
                        read.stdout), read.stdout
