"""Leak-free baselines over all 434 x 2,185 benchmark pairs (skipped without the shared data).

Floors sit a little below what was measured (2026 run; measured value in each comment), so a
regression shows while small changes in library versions do not. Run with `-s` to print the table.
No MiniLM here: the SBERT and fusion rows of the report come from precomputed embeddings.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from meddevkg_core.baselines import (
    Bm25Scorer,
    CompanyScorer,
    FusionScorer,
    ScorerRun,
    TfidfScorer,
    run_scorer,
    top_k,
)
from meddevkg_core.companies import company_match_table
from meddevkg_core.company_resolver import CompanyResolver
from meddevkg_core.curves import pairs_for_recall
from meddevkg_core.evaluation import ranking_metrics

pytestmark = pytest.mark.real_data


@pytest.fixture(scope="module")
def bench(benchmark_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    devices = pl.read_parquet(benchmark_dir / "devices.parquet")
    patents = pl.read_parquet(benchmark_dir / "patents.parquet")
    gold = pl.read_parquet(benchmark_dir / "gold_links.parquet")
    return devices, patents, gold


@pytest.fixture(scope="module")
def runs(bench: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]) -> dict[str, ScorerRun]:
    devices, patents, gold = bench
    dids, pids = devices["fda_id"].to_list(), patents["pat_id"].to_list()
    dtexts, ptexts = devices["text"].to_list(), patents["text"].to_list()
    matches = company_match_table(devices, patents, CompanyResolver.default())
    tfidf, company = TfidfScorer.fit(dtexts, ptexts), CompanyScorer.from_matches(matches, dids, pids)
    scorers = {
        "tfidf": tfidf,
        "bm25": Bm25Scorer.fit(dtexts, ptexts),
        "company": company,
        "rrf_tfidf_company": FusionScorer((tfidf, company)),
    }
    out = {name: run_scorer(s, dids, pids, gold) for name, s in scorers.items()}
    for name, run in out.items():
        ops = pairs_for_recall(run.curve)
        print(name, {k: round(v, 3) for k, v in run.metrics.items()}, {k: v for k, v in ops.items() if "share" in k})
    return out


def test_every_pair_is_scored_and_the_top_k_is_complete(runs: dict[str, ScorerRun],
                                                        bench: tuple[pl.DataFrame, ...]) -> None:
    devices, patents, gold = bench
    assert devices.height == 434 and patents.height == 2185
    for run in runs.values():
        assert run.top.height == 434 * 500
        assert run.curve["pairs_kept"].max() == 434 * 2185
        assert run.gold_ranks.height == gold.unique().height


def test_tfidf_floor(runs: dict[str, ScorerRun]) -> None:
    m = runs["tfidf"].metrics
    assert m["R@10"] >= 0.13  # 0.155
    assert m["R@100"] >= 0.44  # 0.472
    assert m["R@500"] >= 0.80  # 0.840
    assert m["MRR"] >= 0.25  # 0.281


def test_bm25_floor(runs: dict[str, ScorerRun]) -> None:
    m = runs["bm25"].metrics
    assert m["R@10"] >= 0.13  # 0.162
    assert m["R@100"] >= 0.40  # 0.434
    assert m["R@500"] >= 0.80  # 0.838


def test_company_only_floor_and_its_volume(runs: dict[str, ScorerRun]) -> None:
    run = runs["company"]
    assert run.metrics["R@100"] >= 0.72  # 0.765, with ties in pat_id order
    assert run.metrics["R@500"] >= 0.92  # 0.946
    ops = pairs_for_recall(run.curve, (0.90,))
    assert ops["share@R90"] is not None and ops["share@R90"] <= 0.06  # 0.0485: 46,029 same-company pairs


def test_fusion_beats_its_members_on_mrr_and_volume(runs: dict[str, ScorerRun]) -> None:
    fused = runs["rrf_tfidf_company"]
    assert fused.metrics["R@10"] >= 0.24  # 0.275
    assert fused.metrics["R@100"] >= 0.75  # 0.793
    assert fused.metrics["MRR"] >= 0.40  # 0.428
    assert fused.metrics["MRR"] > max(runs["tfidf"].metrics["MRR"], runs["company"].metrics["MRR"])
    share95 = pairs_for_recall(fused.curve, (0.95,))["share@R95"]
    assert share95 is not None and share95 < pairs_for_recall(runs["tfidf"].curve, (0.95,))["share@R95"]


def test_one_pass_metrics_equal_evaluation_on_the_full_ranking(bench: tuple[pl.DataFrame, ...],
                                                               runs: dict[str, ScorerRun]) -> None:
    devices, patents, gold = bench
    tfidf = TfidfScorer.fit(devices["text"].to_list(), patents["text"].to_list())
    full = top_k(tfidf, devices["fda_id"].to_list(), patents["pat_id"].to_list(), k=patents.height)
    assert ranking_metrics(full, gold) == pytest.approx(runs["tfidf"].metrics)
