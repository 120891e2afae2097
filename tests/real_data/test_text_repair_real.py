"""The benchmark's device texts lost every "the"; readers put them back (text_repair)."""

from __future__ import annotations

import importlib.util
import re
from collections import Counter

import polars as pl
import pytest

from meddevkg_core.corpus import read_corpus
from meddevkg_core.text_pairs import load_pairs
from meddevkg_core.text_repair import restore_the
from tests.conftest import REPO, SHARED_DATA

BROKEN = r"(?i)\bca ters?\b|\bendopros sis\b|\brmocool\b|\brapy\b"
"""Fragments the damage leaves in the benchmark's device texts: CATHETER(S), ENDOPROSTHESIS,
THERMOCOOL, THERAPY."""


@pytest.mark.real_data
def test_the_corpus_reader_repairs_the_benchmark_devices_and_says_which(benchmark_dir):
    raw = pl.read_parquet(benchmark_dir / "devices.parquet")
    assert raw["text"].str.contains(BROKEN).sum() >= 100
    corpus = read_corpus(benchmark_dir)
    assert corpus.devices["text"].str.contains(BROKEN).sum() == 0
    assert corpus.devices["text"].str.contains(r"\bCATHETERS?\b|\b[Cc]atheters?\b").sum() > \
        raw["text"].str.contains(r"\bCATHETERS?\b|\b[Cc]atheters?\b").sum()
    repairs = corpus.text_repairs
    assert repairs.height >= 150 and repairs["fda_id"].is_unique().all()
    assert set(repairs["fda_id"]) <= set(corpus.devices["fda_id"])
    p030031 = corpus.devices.filter(pl.col("fda_id") == "P030031")["text"][0]
    assert "THERMOCOOL DEFLECTABLE DIAGNOSTIC/ABLATION CATHETERS" in p030031


@pytest.mark.real_data
def test_pairs_cv_reads_the_labelled_pairs_repaired(benchmark_dir):
    read = load_pairs(benchmark_dir / "pair_eval.parquet")
    raw = pl.read_parquet(benchmark_dir / "pair_eval.parquet")
    assert raw["device_text"].str.contains(BROKEN).sum() >= 500
    assert read.pairs["device_text"].str.contains(BROKEN).sum() == 0
    assert read.pairs["patent_text"].equals(raw["patent_text"])
    assert read.text_repairs.height >= 100


@pytest.mark.real_data
def test_the_packaged_word_table_is_what_the_build_script_makes_from_fda_records(tmp_path):
    fda = SHARED_DATA / "fda"
    if not (fda / "fdadata_pma.parquet").is_file():
        pytest.skip(f"FDA records not found at {fda}")
    spec = importlib.util.spec_from_file_location("build_the_words", REPO / "scripts" / "build_the_words.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    rebuilt = build.the_words(build.word_counts(fda))
    packaged = REPO / "meddevkg_core" / "data" / "text_repair" / "the_words.csv"
    out = tmp_path / "the_words.csv"
    rebuilt.write_csv(out)
    assert out.read_bytes() == packaged.read_bytes()
    assert {"catheter", "therapy", "transcatheter", "thermocool", "atherosclerotic"} <= set(rebuilt["word"])


def _damaged(text: str) -> str:
    """What the benchmark's builder did to FDA's statements: every "the" -> space, spaces collapsed."""
    return re.sub(" +", " ", re.sub("(?i)the", " ", text)).strip()


@pytest.mark.real_data
def test_on_the_benchmark_patents_damaged_alike_the_repair_is_precise(benchmark_dir):
    """The patents kept their "the"s: damage them as the devices were and measure the repair."""
    word = re.compile(r"[A-Za-z]+")
    texts = pl.read_parquet(benchmark_dir / "patents.parquet")["text"].to_list()
    holding, restored, changed, wrong = 0, 0, 0, 0
    for text in texts:
        original = Counter(w.lower() for w in word.findall(text) if w.lower() != "the")
        damaged = _damaged(text)
        fixed, words = restore_the(damaged)
        after = Counter(w.lower() for w in word.findall(fixed))
        before = Counter(w.lower() for w in word.findall(damaged))
        target = Counter({w: n for w, n in original.items() if "the" in w})
        holding += sum(target.values())
        restored += sum(min(after[w], n) for w, n in target.items())
        changed += len(words)
        wrong += sum(max(0, min(n - before[w], n - original[w])) for w, n in after.items())  # made, not there
    assert holding > 3000
    assert restored / holding > 0.70
    assert changed > 2000 and wrong / changed < 0.002
