"""Reading a labelled pair file, with its quarantine, and splitting the pairs into device-grouped folds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from meddevkg_core import text_pairs
from meddevkg_core.corpus import read_corpus
from tests.core.test_pair_cv import synthetic_pairs


@pytest.fixture(scope="module")
def pairs() -> pl.DataFrame:
    return synthetic_pairs()


# --- reading --------------------------------------------------------------------------------


def test_read_pairs_quarantines_bad_rows(tmp_path: Path):
    path = tmp_path / "pairs.csv"
    path.write_text(
        "fda_id,pat_id,device_text,patent_text,label\n"
        "P1,11,stent,coronary stent,1\n"
        "P1,12,stent,,0\n"
        "P2,13,valve,heart valve,2\n"
        "P1,11,stent,coronary stent,0\n"
        "P2,14,valve,mitral valve,0.0\n"
    )
    read = text_pairs.load_pairs(path)
    assert read.pairs.schema == text_pairs.PAIRS
    assert read.pairs.select("fda_id", "pat_id", "label").rows() == [("P1", "11", 1), ("P2", "14", 0)]
    reasons = dict(zip(read.rejected["record_key"], read.rejected["reason"], strict=True))
    assert reasons == {"pairs#1:P1|12": "missing patent_text", "pairs#2:P2|13": "label is not 0 or 1",
                       "pairs#3:P1|11": "duplicate pair of row 0"}
    assert text_pairs.read_pairs(path).height == 2


def test_read_pairs_quarantines_a_record_with_more_fields_than_the_header_and_keeps_it_whole(tmp_path: Path):
    path = tmp_path / "pairs.csv"
    path.write_text("fda_id,pat_id,device_text,patent_text,label\n"
                    'P1,11,stent,"coronary stent, with struts",1\n'
                    "P1,12,stent,coronary stent, with struts,0\n")
    read = text_pairs.load_pairs(path)
    assert read.pairs.select("fda_id", "pat_id", "patent_text").rows() == [("P1", "11", "coronary stent, with struts")]
    assert read.rejected["reason"].to_list() == ["line 3: 6 fields where the header has 5"]
    assert json.loads(read.rejected["record"][0])["__raw__"] == "P1,12,stent,coronary stent, with struts,0"


def test_read_pairs_quarantines_a_pair_repeated_with_stray_whitespace(tmp_path: Path):
    path = tmp_path / "pairs.csv"
    path.write_text("fda_id,pat_id,device_text,patent_text,label\n"
                    "P1,11,stent,coronary stent,1\n"
                    "P1 ,11,stent,coronary stent,0\n"
                    "P1, 11,stent,coronary stent,0\n")
    read = text_pairs.load_pairs(path)
    assert read.pairs.select("fda_id", "pat_id", "label").rows() == [("P1", "11", 1)]
    assert read.rejected["reason"].to_list() == ["duplicate pair of row 0"] * 2
    text_pairs.check_pairs(read.pairs)  # what pairs-cv checks before its folds: no duplicate left


def test_read_pairs_parquet_and_jsonl_and_missing_column(tmp_path: Path, pairs: pl.DataFrame):
    pairs.with_columns(pl.col("label").cast(pl.Int64)).write_parquet(tmp_path / "p.parquet")
    assert text_pairs.read_pairs(tmp_path / "p.parquet").equals(pairs)
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"fda_id": "P1", "pat_id": 7, "device_text": "a", "patent_text": "b", "label": true}\n'
                     "not json\n")
    read = text_pairs.load_pairs(jsonl)
    assert read.pairs.rows() == [("P1", "7", "a", "b", 1)]
    assert read.rejected.height == 1 and "invalid JSON" in read.rejected["reason"][0]
    pairs.drop("label").write_parquet(tmp_path / "nolabel.parquet")
    with pytest.raises(text_pairs.PairsError, match="label"):
        text_pairs.read_pairs(tmp_path / "nolabel.parquet")


def test_a_label_reads_alike_in_a_pair_file_and_in_a_corpus_labeled_pairs_table(tmp_path: Path):
    # the pair file read "true" (a Parquet boolean column, JSON true) as 1, the corpus quarantined it
    labels = ["1", "0", "1.0", "0.0", "true", "False", " TRUE ", "2", "yes", ""]
    (tmp_path / "devices.csv").write_text("fda_id,text\n" + "".join(f"P{i},stent {i}\n" for i in range(len(labels))))
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    (tmp_path / "labeled_pairs.csv").write_text(
        "fda_id,pat_id,label\n" + "".join(f"P{i},1,{label}\n" for i, label in enumerate(labels)))
    (tmp_path / "pairs.csv").write_text(
        "fda_id,pat_id,device_text,patent_text,label\n"
        + "".join(f"P{i},1,stent {i},stent,{label}\n" for i, label in enumerate(labels)))
    corpus, read = read_corpus(tmp_path), text_pairs.load_pairs(tmp_path / "pairs.csv")
    expected = [(f"P{i}", label) for i, label in enumerate([1, 0, 1, 0, 1, 0, 1])]
    assert corpus.labeled_pairs.select("fda_id", "label").rows() == expected
    assert read.pairs.select("fda_id", "label").rows() == expected
    reasons = ["label is not 0 or 1", "label is not 0 or 1", "missing label"]
    assert corpus.rejected["reason"].to_list() == read.rejected["reason"].to_list() == reasons
    (tmp_path / "labeled_pairs.csv").unlink()
    pl.DataFrame({"fda_id": ["P0", "P1"], "pat_id": ["1", "1"], "label": [True, False]}).write_parquet(
        tmp_path / "labeled_pairs.parquet")
    assert read_corpus(tmp_path).labeled_pairs.select("fda_id", "label").rows() == [("P0", 1), ("P1", 0)]


# --- folds ----------------------------------------------------------------------------------


def test_groups_join_devices_sharing_a_text():
    df = pl.DataFrame([("A", "1", "stent", "x", 1), ("B", "2", "stent", "y", 0), ("C", "3", "valve", "x", 0),
                       ("D", "4", "graft", "z", 1), ("E", "4", "lead", "w", 0)], schema=text_pairs.PAIRS, orient="row")
    g = text_pairs.device_groups(df)
    assert g[0] == g[1] == g[2]  # A-B share a device text, A-C a patent text
    assert g[3] == g[4] and g[3] != g[0]  # D-E share a patent id


def test_assign_folds_is_label_free_and_balanced():
    groups = np.repeat(np.arange(10), [9, 1, 1, 2, 2, 3, 3, 4, 4, 5])
    fold = text_pairs.assign_folds(groups, 3, seed=0)
    assert all(len(np.unique(fold[groups == g])) == 1 for g in range(10))
    sizes = np.bincount(fold)
    assert sizes.max() - sizes.min() <= 1
    with pytest.raises(ValueError, match="folds"):
        text_pairs.assign_folds(groups, 11, seed=0)
