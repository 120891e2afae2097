"""The text features of a labelled pair on hand-written texts."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from meddevkg_core import text_pair_features, text_pairs
from meddevkg_core.config import CandidateConfig
from meddevkg_core.entity_match import EntityMatcher, doc_keys
from tests.core.test_pair_cv import synthetic_pairs


@pytest.fixture(scope="module")
def pairs() -> pl.DataFrame:
    return synthetic_pairs()


def test_pool_percentiles_rank_a_pair_against_every_text_of_the_other_side():
    idx = text_pair_features.TextIndex(["d0", "d1"], ["p0", "p1", "p2"], np.array([0, 0, 1]), np.array([0, 2, 2]))
    sim = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.3]])
    dev_pct, pat_pct = text_pair_features._pool_percentiles(sim, idx)
    np.testing.assert_allclose(dev_pct, [2 / 3, 1 / 3, 1 / 3])  # d0: 0.9 beats 2 of 3 patents, 0.5 one
    np.testing.assert_allclose(pat_pct, [1 / 2, 1 / 2, 0])  # p2: 0.5 beats d1's 0.3, 0.3 beats none


def test_char_tfidf_sees_shared_word_parts_that_word_tfidf_misses():
    idx = text_pair_features.text_index(pl.DataFrame(
        [("P1", "1", "Coronary stents.", "Stenting the coronary artery.", 1),
         ("P1", "2", "Coronary stents.", "A valve leaflet.", 0),
         ("P2", "3", "Heart valve.", "Valvular prosthesis leaflets.", 1),
         ("P2", "4", "Heart valve.", "Pacing lead electrodes.", 0)], schema=text_pairs.PAIRS, orient="row"))
    char = text_pair_features.char_tfidf_features(idx)
    word = text_pair_features.tfidf_features(idx)
    pair = {(d, p): i for i, (d, p) in enumerate(zip(idx.device_idx, idx.patent_idx, strict=True))}
    heart, valvular = idx.device_texts.index("Heart valve."), idx.patent_texts.index("Valvular prosthesis leaflets.")
    row = pair[(heart, valvular)]
    assert word["tfidf_cosine"][row] == 0 < char["char_tfidf_cosine"][row]
    assert set(char) == set(text_pair_features.CHAR_FEATURES)
    assert ((char["char_tfidf_device_pct"] >= 0) & (char["char_tfidf_device_pct"] <= 1)).all()


@pytest.mark.real_model
def test_entity_features_agree_with_entity_matcher(pairs: pl.DataFrame):
    from meddevkg_core.entities import extract_mentions, load_spacy_pipeline
    from meddevkg_core.ontology import load_meddevonto

    nlp, onto, cfg = load_spacy_pipeline(), load_meddevonto(), CandidateConfig()
    idx = text_pair_features.text_index(pairs)
    feats = text_pair_features.entity_features(idx, nlp, onto, cfg)
    assert feats["entity_score"].max() > 0 and feats["n_shared_anchor"].max() > 0
    dev_ids = [f"d{i}" for i in range(len(idx.device_texts))]
    pat_ids = [f"p{i}" for i in range(len(idx.patent_texts))]
    docs = pl.DataFrame({"doc_id": dev_ids + pat_ids, "text": idx.device_texts + idx.patent_texts})
    keys = doc_keys(extract_mentions(docs, onto, nlp).mentions, onto, cfg)
    block = EntityMatcher(keys, keys, pat_ids, cfg).score_block(dev_ids)
    expected = block.score[idx.device_idx, idx.patent_idx]
    np.testing.assert_allclose(feats["entity_score"], expected)
    assert (feats["entity_overlap"] >= feats["entity_score"]).all()


def test_year_gap_is_read_off_the_ids_and_missing_where_an_id_has_no_year():
    df = pl.DataFrame([("P040002", "7000000", "a", "b", 1), ("P990001", "5000000", "c", "d", 0),
                       ("N12345", "7000000", "e", "f", 0)], schema=text_pairs.PAIRS, orient="row")
    feats = text_pair_features.year_features(df)
    np.testing.assert_allclose(feats["year_gap"][:2], [2006 - 2004, 1991 - 1999])
    np.testing.assert_allclose(feats["abs_year_gap"][:2], [2, 8])
    assert np.isnan(feats["year_gap"][2]) and np.isnan(feats["abs_year_gap"][2])
    assert text_pair_features.year_features(df.with_columns(pl.lit("x").alias("pat_id"))) == {}
