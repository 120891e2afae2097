"""Baselines on a hand-made corpus: lexical sense, tie order, shape, purity, block invariance."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from meddevkg_core.baselines import (
    TOP_K,
    Bm25Scorer,
    CompanyScorer,
    CosineScorer,
    FusionScorer,
    Scorer,
    TfidfScorer,
    all_pair_scores_iter,
    exact_gold_ranks,
    rank_metrics,
    run_scorer,
    top_k,
)
from meddevkg_core.curves import recall_volume_curve
from meddevkg_core.evaluation import gold_ranks, ranking_metrics

DEVICES = ["D_STENT", "D_VALVE", "D_PACER"]
DEVICE_TEXTS = [
    "Drug-eluting coronary stent system with a balloon-expandable cobalt chromium stent",
    "Transcatheter aortic heart valve with bovine pericardial leaflets",
    "Implantable cardiac pacemaker pulse generator and pacing lead",
]
PATENTS = ["P40", "P10", "P30", "P20", "P50"]
PATENT_TEXTS = [
    "Prosthetic heart valve with pericardial tissue leaflets for transcatheter aortic implantation",
    "Coronary stent with a drug-eluting polymer coating on a cobalt chromium stent frame",
    "Pacing lead for an implantable pacemaker with a steroid eluting electrode",
    "Balloon catheter for angioplasty of peripheral arteries",
    "Method of sterilising packaging for surgical instruments",
]
GOLD = pl.DataFrame({"fda_id": ["D_STENT", "D_VALVE", "D_PACER"], "pat_id": ["P10", "P40", "P30"]})


@pytest.fixture(scope="module", params=["tfidf", "bm25"])
def lexical(request: pytest.FixtureRequest) -> Scorer:
    fit = TfidfScorer.fit if request.param == "tfidf" else Bm25Scorer.fit
    return fit(DEVICE_TEXTS, PATENT_TEXTS)


def _ordered(scorer: Scorer, device: str) -> list[str]:
    top = top_k(scorer, DEVICES, PATENTS, k=len(PATENTS))
    return top.filter(pl.col("fda_id") == device).sort("rank")["pat_id"].to_list()


def test_lexical_baselines_rank_the_stent_patent_above_the_valve_patent(lexical: Scorer) -> None:
    stent = _ordered(lexical, "D_STENT")
    assert stent[0] == "P10" and stent.index("P10") < stent.index("P40")
    assert _ordered(lexical, "D_VALVE")[0] == "P40"
    assert _ordered(lexical, "D_PACER")[0] == "P30"


def test_top_k_shape_schema_and_contiguous_ranks(lexical: Scorer) -> None:
    top = top_k(lexical, DEVICES, PATENTS, k=3, block=2)
    assert top.schema == TOP_K and top.height == len(DEVICES) * 3
    for _, group in top.group_by("fda_id"):
        assert group["rank"].to_list() == [1, 2, 3]
        scores = group["score"].to_list()
        assert scores == sorted(scores, reverse=True)
    assert top_k(lexical, DEVICES, PATENTS, k=500).height == len(DEVICES) * len(PATENTS)


def test_company_scorer_breaks_ties_by_pat_id_ascending() -> None:
    matches = pl.DataFrame({"fda_id": ["D_STENT"] * 3 + ["D_VALVE"], "pat_id": ["P50", "P20", "P40", "P10"]})
    scorer = CompanyScorer.from_matches(matches, DEVICES, PATENTS)
    assert _ordered(scorer, "D_STENT") == ["P20", "P40", "P50", "P10", "P30"]
    assert _ordered(scorer, "D_PACER") == sorted(PATENTS)  # all zero: pure pat_id order
    top = top_k(scorer, DEVICES, PATENTS, k=2).filter(pl.col("fda_id") == "D_VALVE")
    assert top["pat_id"].to_list() == ["P10", "P20"] and top["score"].to_list() == [1.0, 0.0]


def test_company_scorer_ignores_pairs_outside_the_corpus_and_duplicates() -> None:
    matches = pl.DataFrame({"fda_id": ["D_STENT", "D_STENT", "D_GONE"], "pat_id": ["P10", "P10", "P10"]})
    m = CompanyScorer.from_matches(matches, DEVICES, PATENTS).score_block([0, 1, 2])
    assert m.sum() == 1.0 and m[0, PATENTS.index("P10")] == 1.0


def test_ranks_agree_with_evaluation_gold_ranks_and_metrics(lexical: Scorer) -> None:
    full = top_k(lexical, DEVICES, PATENTS, k=len(PATENTS))
    expected = gold_ranks(full.select("fda_id", "pat_id", "score"), GOLD).sort("fda_id")
    got = exact_gold_ranks(lexical, DEVICES, PATENTS, GOLD, block=2).sort("fda_id")
    assert got["rank"].to_list() == expected["rank"].cast(pl.Int64).to_list()
    assert rank_metrics(got, ks=(1, 2)) == pytest.approx(ranking_metrics(full, GOLD, ks=(1, 2)))


def test_gold_outside_the_corpus_has_no_rank_and_counts_as_a_miss() -> None:
    gold = pl.concat([GOLD, pl.DataFrame({"fda_id": ["D_STENT"], "pat_id": ["P99"]})])
    ranks = exact_gold_ranks(TfidfScorer.fit(DEVICE_TEXTS, PATENT_TEXTS), DEVICES, PATENTS, gold)
    assert ranks.filter(pl.col("pat_id") == "P99")["rank"].to_list() == [None]
    assert rank_metrics(ranks)["R@500"] == pytest.approx(3 / 4)


def test_block_size_does_not_change_any_result(lexical: Scorer) -> None:
    runs = [run_scorer(lexical, DEVICES, PATENTS, GOLD, k=4, block=b, points=10) for b in (1, 2, 64)]
    for other in runs[1:]:
        assert other.top.equals(runs[0].top)
        assert other.gold_ranks.equals(runs[0].gold_ranks)
        assert other.curve.equals(runs[0].curve)
        assert other.metrics == runs[0].metrics


def test_run_scorer_equals_the_separate_passes(lexical: Scorer) -> None:
    run = run_scorer(lexical, DEVICES, PATENTS, GOLD, k=3, block=2, points=10)
    assert run.top.equals(top_k(lexical, DEVICES, PATENTS, k=3))
    assert run.gold_ranks.equals(exact_gold_ranks(lexical, DEVICES, PATENTS, GOLD))
    curve = recall_volume_curve(all_pair_scores_iter(lexical, DEVICES), GOLD, DEVICES, PATENTS, points=10)
    assert run.curve.equals(curve)


def test_fusion_is_pure_deterministic_and_shares_ranks_on_ties() -> None:
    tfidf = TfidfScorer.fit(DEVICE_TEXTS, PATENT_TEXTS)
    company = CompanyScorer.from_matches(
        pl.DataFrame({"fda_id": ["D_STENT", "D_STENT"], "pat_id": ["P50", "P40"]}), DEVICES, PATENTS)
    before = tfidf.score_block([0, 1, 2]).copy()
    fusion = FusionScorer((tfidf, company))
    a, b = fusion.score_block([0, 1, 2]), fusion.score_block([0, 1, 2])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(tfidf.score_block([0, 1, 2]), before)
    np.testing.assert_array_equal(fusion.score_block([2, 0])[1], a[0])  # a row does not depend on its block
    # Company alone: the two matched patents tie (same average rank) and so do the three others.
    solo = FusionScorer((company,)).score_block([0])[0]
    assert solo[PATENTS.index("P50")] == solo[PATENTS.index("P40")] > solo[PATENTS.index("P10")]
    assert solo[PATENTS.index("P10")] == solo[PATENTS.index("P30")] == solo[PATENTS.index("P20")]
    # One member: RRF keeps that member's order.
    assert _ordered(FusionScorer((tfidf,)), "D_STENT") == _ordered(tfidf, "D_STENT")


def test_fusion_rejects_mismatched_members() -> None:
    tfidf = TfidfScorer.fit(DEVICE_TEXTS, PATENT_TEXTS)
    other = TfidfScorer.fit(DEVICE_TEXTS, PATENT_TEXTS[:3])
    with pytest.raises(ValueError):
        FusionScorer((tfidf, other))
    with pytest.raises(ValueError):
        FusionScorer((tfidf,), weights=(1.0, 2.0))


def test_cosine_scorer_normalises_and_matches_a_hand_cosine() -> None:
    devices = np.array([[3.0, 0.0], [1.0, 1.0]])
    patents = np.array([[2.0, 0.0], [0.0, 5.0], [1.0, 1.0]])
    scores = CosineScorer.of(devices, patents).score_block([0, 1])
    np.testing.assert_allclose(scores, [[1.0, 0.0, 2**-0.5], [2**-0.5, 2**-0.5, 1.0]], atol=1e-6)
    with pytest.raises(ValueError):
        CosineScorer.of(devices, np.ones((2, 3)))


def test_nan_scores_rank_last_and_a_wrong_patent_count_is_refused() -> None:
    class Nan:
        n_patents = 3

        def score_block(self, device_rows: list[int]) -> np.ndarray:
            return np.tile([np.nan, 0.5, 0.1], (len(device_rows), 1))

    top = top_k(Nan(), ["D"], ["a", "b", "c"], k=3)
    assert top["pat_id"].to_list() == ["b", "c", "a"]
    with pytest.raises(ValueError):
        top_k(Nan(), ["D"], ["a", "b"], k=3)


def test_bm25_query_without_indexed_terms_scores_zero() -> None:
    scorer = Bm25Scorer.fit(["zzzz qqqq", "the and of"], PATENT_TEXTS)
    assert not scorer.score_block([0, 1]).any()
