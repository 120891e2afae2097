"""The full-corpus scale benchmark: its run, its report, its digests, and what its stages hold."""

from __future__ import annotations

import hashlib
import json

import polars as pl
import pytest

from meddevkg_core import scale_bench
from meddevkg_core.candidates import generate_candidates
from meddevkg_core.config import CandidateConfig, PipelineConfig, RerankConfig
from meddevkg_core.fold_models import RerankerTrainingError, apply_fold_models, fit_fold_models
from meddevkg_core.links_table import links_frame
from meddevkg_core.rerank import feature_frame
from meddevkg_core.reranked_links import decide
from meddevkg_core.synthetic_corpus import SyntheticCorpus, synthetic_corpus, synthetic_gold
from tests.core.conftest import synthetic_inputs


def test_bench_runs_small_and_reports_every_figure() -> None:
    result = scale_bench.run_scale_bench(3_000, 20, seed=0)
    json.dumps(result)  # one JSON line
    for key in ("stage2_s", "stage2_index_s", "stage3_s", "stage3_train_s", "stage2_pairs_per_s",
                "candidates_kept", "max_rss_mb", "block_size", "effective_block_size", "n_patents", "n_devices"):
        assert result[key] is not None, key
    assert result["pairs"] == 60_000 and 0 < result["candidates_kept"] < 60_000
    assert set(result["peak_rss_mb"]) >= {"stage2_index", "stage2", "stage3", "generate"}
    assert all(v > 0 for v in result["peak_rss_mb"].values())
    assert sum(result["admitted_by"].values()) == result["candidates_kept"]
    text = scale_bench.format_scale_report(result)
    assert "Stage 2" in text and "pairs/s" in text and "3,000 patents" in text
    # the bench's pool is generate_candidates on the same inputs, in one block
    corpus = synthetic_corpus(3_000, 20, seed=0)
    cfg = PipelineConfig()
    assert scale_bench.pool_digest(generate_candidates(synthetic_inputs(corpus, cfg.candidates), cfg.candidates)) == \
        result["pool_digest"]


def test_a_corpus_too_small_to_train_stage3_is_refused_naming_its_sizes() -> None:
    # 20 patents x 3 devices: each device's Stage-2 pool is its synthetic gold and nothing else, so the reranker
    # has no negative to learn from; the error named neither the sizes nor the seed that made such a pool
    with pytest.raises(RerankerTrainingError, match=r"^synthetic corpus of 20 patents x 3 devices \(seed 0; a "
                       r"Stage-2 pool of 3 pairs, 3 synthetic gold links\): cannot train the reranker's full model: "
                       r"its training pairs, of 3 devices \(D00000, D00001, D00002\), are 3 gold links and no other "
                       r"pair"):
        scale_bench.run_scale_bench(20, 3, seed=0)


def test_stage3_keeps_chunks_aligned_and_links_stream(corpus: SyntheticCorpus) -> None:
    """New Stage-3 columns are cut like the pool's chunks (a misaligned frame is copied whole by the
    next expression); LINKS made slice by slice hash to the whole table's digest."""
    cfg = PipelineConfig()
    pool = generate_candidates(synthetic_inputs(corpus, cfg.candidates), cfg.candidates)
    gold = synthetic_gold(pool, n_devices=8, seed=0)
    features = feature_frame(pool, None)
    models = fit_fold_models(features.filter(pl.col("fda_id").is_in(gold["fda_id"].unique().implode())), gold,
                             RerankConfig(n_estimators=10, folds=3))
    expected = apply_fold_models(features, models)
    k = features.height // 3
    chunked = pl.concat([features.slice(0, k), features.slice(k, k), features.slice(2 * k)], rechunk=False)
    scored = apply_fold_models(chunked, models)
    assert set(scored.n_chunks("all")) == {3} and scored.equals(expected)
    decided = decide(expected, cfg.rerank)
    links = links_frame(decided, chunk_rows=1_000)
    assert len(set(links.n_chunks("all"))) == 1 and links.equals(links_frame(decided))
    whole = hashlib.sha256(links.hash_rows(seed=0).to_numpy().tobytes()).hexdigest()[:16]
    assert scale_bench.links_digest(decided) == scale_bench.links_digest(decided, slice_rows=777) == whole


def test_bench_stage2_releases_what_it_holds(corpus: SyntheticCorpus) -> None:
    """The bench's Stage 2 drops the inputs (and the corpus) once every block is scored."""
    cfg = CandidateConfig(device_block_size=7)
    held = [synthetic_inputs(corpus, cfg), "the corpus"]
    pool = scale_bench._stage2(held, cfg)
    assert held == [] and pool.equals(generate_candidates(synthetic_inputs(corpus, cfg), cfg))


def test_the_report_reads_when_a_stage_was_too_fast_to_time() -> None:
    """Stage times are rounded to the millisecond: a stage under half of one has no rate, said so."""
    result = scale_bench.run_scale_bench(300, 20, seed=0)
    result |= {"stage2_s": 0.0, "stage2_pairs_per_s": None, "stage3_s": 0.0, "stage3_pool_rows_per_s": None}
    text = scale_bench.format_scale_report(result)
    assert text.count("too fast to time") == 2
