"""Sibling margins: a pair's scores against the best of the patent's other company-matched devices."""

import numpy as np
import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.baselines import TfidfScorer
from meddevkg_core.block_scores import Stage2Inputs
from meddevkg_core.candidates import generate_candidates
from meddevkg_core.config import CandidateConfig
from meddevkg_core.entity_match import EntityMatcher, doc_keys
from meddevkg_core.siblings import SiblingIndex, TopTwo
from tests.core.test_candidates import ONTO

DEVICES = ["D1", "D2", "D3", "D4"]
PATENTS = ["p1", "p2", "p3"]
DEVICE_TEXTS = ["coronary stent delivery", "coronary stent coating", "cardiac ablation catheter", "heart valve"]
PATENT_TEXTS = ["a coronary stent with a drug coating", "an ablation catheter tip", "a prosthetic heart valve frame"]
# ACME makes D1, D2 and D3 and owns p1 and p2; D4 and p3 belong to nobody else's company
COMPANY = [("D1", "p1"), ("D2", "p1"), ("D3", "p1"), ("D1", "p2"), ("D4", "p3")]


def _inputs() -> Stage2Inputs:
    rng = np.random.default_rng(3)
    dv = rng.normal(size=(4, 8)).astype(np.float32)
    pv = rng.normal(size=(3, 8)).astype(np.float32)
    dv /= np.linalg.norm(dv, axis=1, keepdims=True)
    pv /= np.linalg.norm(pv, axis=1, keepdims=True)
    company = pl.DataFrame({"fda_id": [d for d, _ in COMPANY], "pat_id": [p for _, p in COMPANY],
                            "match_kind": ["same"] * len(COMPANY), "company_path": ["ACME"] * len(COMPANY)})
    cfg = CandidateConfig()
    no_mentions = schemas.empty(schemas.MENTIONS)
    matcher = EntityMatcher(doc_keys(no_mentions, ONTO, cfg), doc_keys(no_mentions, ONTO, cfg), PATENTS, cfg)
    return Stage2Inputs(DEVICES, dv, PATENTS, pv, company, matcher, TfidfScorer.fit(DEVICE_TEXTS, PATENT_TEXTS))


def _every_pair(inputs: Stage2Inputs) -> pl.DataFrame:
    cfg = CandidateConfig(admission_threshold=-1e9)  # admit every pair, to see every margin
    return generate_candidates(inputs, cfg)


def test_top_two_keeps_the_best_the_second_and_who_is_best():
    top = TopTwo.empty(4)
    top.add(np.array([0, 1]), np.array([0, 2]), np.array([[0.5, 0.7], [0.2, 0.1]], np.float32))  # a block
    top.add(np.array([0]), np.array([1]), np.array([[0.9]], np.float32))  # another device, later
    top.add(np.array([2]), np.array([3]), np.array([[0.4]], np.float32))
    assert top.best_row.tolist() == [1, 0, 3, -1]
    assert top.best.tolist() == pytest.approx([0.9, 0.2, 0.4, -np.inf])
    assert top.second[:2].tolist() == pytest.approx([0.7, 0.1]) and np.isneginf(top.second[2:]).all()
    # the best device sees the second best; every other device sees the best
    assert top.others_best(np.array([1, 0, 3, 0]), np.array([0, 0, 0, 3])).tolist() == pytest.approx(
        [0.7, 0.9, 0.9, -np.inf])
    tied = TopTwo.empty(1)
    tied.add(np.array([0]), np.array([2]), np.array([[0.5]], np.float32))
    tied.add(np.array([0]), np.array([1]), np.array([[0.5]], np.float32))
    assert tied.best_row.tolist() == [1] and tied.second.tolist() == [0.5]  # a tie: a margin of 0 for both


def test_margins_against_the_best_other_company_device_by_brute_force():
    inputs = _inputs()
    pool = _every_pair(inputs)
    assert pool.height == len(DEVICES) * len(PATENTS)
    sim = inputs.device_vectors @ inputs.patent_vectors.T
    lex = np.vstack([inputs.lexical.score_block([r]) for r in range(len(DEVICES))])
    matched = {(DEVICES.index(d), PATENTS.index(p)) for d, p in COMPANY}
    for row in pool.iter_rows(named=True):
        r, c = DEVICES.index(row["fda_id"]), PATENTS.index(row["pat_id"])
        assert row["company_device_count"] == sum((o, c) in matched for o in range(len(DEVICES)))
        others = [o for o in range(len(DEVICES)) if o != r and (o, c) in matched]
        if not others:
            assert np.isnan(row["sibling_sim_margin"]) and np.isnan(row["sibling_lexical_margin"])
            continue
        assert row["sibling_sim_margin"] == pytest.approx(sim[r, c] - max(sim[o, c] for o in others), abs=1e-6)
        assert row["sibling_lexical_margin"] == pytest.approx(lex[r, c] - max(lex[o, c] for o in others), abs=1e-6)
    by_pair = {(r["fda_id"], r["pat_id"]): r for r in pool.iter_rows(named=True)}
    assert np.isnan(by_pair[("D1", "p2")]["sibling_sim_margin"])  # D1 is p2's only company device
    assert not np.isnan(by_pair[("D4", "p2")]["sibling_sim_margin"])  # another company's device: against D1
    assert np.isnan(by_pair[("D4", "p3")]["sibling_sim_margin"])  # D4 has no sibling for p3


def test_a_devices_margins_do_not_depend_on_which_devices_are_scored_with_it():
    inputs = _inputs()
    everyone = _every_pair(inputs).filter(pl.col("fda_id") == "D2")
    alone = generate_candidates(inputs, CandidateConfig(admission_threshold=-1e9), ["D2"])
    assert alone["pat_id"].to_list() == everyone["pat_id"].to_list()
    for col in ("sibling_sim_margin", "sibling_lexical_margin"):  # BLAS rounding of the block's cosine only
        np.testing.assert_allclose(alone[col].to_numpy(), everyone[col].to_numpy(), atol=1e-6, equal_nan=True)


def test_a_pair_listed_twice_is_one_sibling_and_texts_are_optional():
    inputs = _inputs()
    twice = pl.concat([inputs.company_matches, inputs.company_matches.head(1)])
    doubled = Stage2Inputs(DEVICES, inputs.device_vectors, PATENTS, inputs.patent_vectors, twice, inputs.entities,
                           inputs.lexical)
    rows, cols, _ = doubled.company_cells
    assert len(rows) == len(COMPANY) + 1
    np.testing.assert_array_equal(doubled.siblings.sim.best_row, inputs.siblings.sim.best_row)
    np.testing.assert_array_equal(doubled.siblings.sim.second, inputs.siblings.sim.second)
    assert doubled.siblings.device_count.tolist() == inputs.siblings.device_count.tolist() == [3, 1, 1]
    no_texts = SiblingIndex.build(inputs.device_vectors, inputs.patent_vectors, None, *inputs.company_cells[:2])
    sim_margin, lex_margin = no_texts.margins(np.array([1]), np.array([0]), np.array([0.3], np.float32),
                                              np.array([np.nan], np.float32))
    assert not np.isnan(sim_margin[0]) and np.isnan(lex_margin[0])


def test_tfidf_cells_equal_the_block_rows():
    scorer = TfidfScorer.fit(DEVICE_TEXTS, PATENT_TEXTS)
    rows, cols = np.array([1, 3]), np.array([2, 0])
    np.testing.assert_allclose(scorer.cell_scorer()(rows, cols), scorer.score_block([1, 3])[:, cols].T, atol=1e-12)
    column_major = TfidfScorer(scorer.devices, scorer.patents.tocsc())  # as synthetic_corpus stores them
    np.testing.assert_allclose(column_major.cell_scorer()(rows, cols), scorer.cell_scorer()(rows, cols), atol=1e-12)
