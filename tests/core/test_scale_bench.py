"""The full-corpus scale benchmark, and the Stage-2 scale fixes checked against the old implementation."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import polars as pl
import pytest

from meddevkg_core import block_scores, candidate_parts, candidates, scale_bench, schemas
from meddevkg_core.baselines import TfidfScorer
from meddevkg_core.block_scores import Stage2Inputs, max_devices_per_block
from meddevkg_core.candidates import generate_candidates
from meddevkg_core.config import CandidateConfig, PipelineConfig, RerankConfig
from meddevkg_core.entity_match import EntityMatcher, _s_keys, doc_keys
from meddevkg_core.fold_models import apply_fold_models, fit_fold_models
from meddevkg_core.links_table import links_frame
from meddevkg_core.ontology import load_meddevonto
from meddevkg_core.rerank import feature_frame
from meddevkg_core.reranked_links import decide
from meddevkg_core.synthetic_corpus import SyntheticCorpus, synthetic_corpus, synthetic_gold
from tests.core import _stage2_before as before

ONTO = load_meddevonto()
FLOATS = ["sim", "sim_z_device", "sim_z_patent", "lexical", "sibling_sim_margin"]


@pytest.fixture(scope="module")
def corpus() -> SyntheticCorpus:
    return synthetic_corpus(3_000, 20, seed=0)


def _inputs(corpus: SyntheticCorpus, cfg: CandidateConfig, company: pl.DataFrame | None = None
            ) -> Stage2Inputs:
    matcher = EntityMatcher(doc_keys(corpus.device_mentions, ONTO, cfg), doc_keys(corpus.patent_mentions, ONTO, cfg),
                            corpus.patent_ids, cfg)
    return Stage2Inputs(corpus.device_ids, corpus.device_vectors, corpus.patent_ids, corpus.patent_vectors,
                        corpus.company_matches if company is None else company, matcher, corpus.lexical)


def _before_dossiers(new: pl.DataFrame) -> pl.DataFrame:
    """`new` as the implementation before dossiers, siblings and decision years wrote it: without a
    dossier scorer or decision years those columns are NaN (like `lexical` without one), and the old
    frames hold the columns they did not have as null (schemas.conform). The sibling margins are
    checked in test_siblings."""
    assert new["dossier_lexical"].is_nan().all() and new["granted_after_last_decision"].is_nan().all()
    return new.with_columns(pl.lit(None, schemas.CANDIDATES[c]).alias(c) for c in (
        "dossier_lexical", "sibling_sim_margin", "sibling_lexical_margin", "company_device_count",
        "granted_after_last_decision"))


def _assert_same_pool(a: pl.DataFrame, b: pl.DataFrame, atol: float = 0.0) -> None:
    assert a.height == b.height and a.schema == b.schema
    assert a.drop(FLOATS).equals(b.drop(FLOATS))
    for col in FLOATS:
        np.testing.assert_allclose(a[col].to_numpy(), b[col].to_numpy(), rtol=0, atol=atol, equal_nan=True)


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
    assert scale_bench.pool_digest(generate_candidates(_inputs(corpus, cfg.candidates), cfg.candidates)) == \
        result["pool_digest"]


def test_one_block_equals_many_blocks(corpus: SyntheticCorpus, monkeypatch: pytest.MonkeyPatch) -> None:
    one = CandidateConfig(device_block_size=20)
    pool = generate_candidates(_inputs(corpus, one), one)
    assert pool.height > 0
    for size in (1, 3, 7):
        cfg = CandidateConfig(device_block_size=size)
        _assert_same_pool(pool, generate_candidates(_inputs(corpus, cfg), cfg), atol=1e-5)  # BLAS rounding
    monkeypatch.setattr(block_scores, "MAX_BLOCK_PAIRS", 2 * 3_000)  # the pair budget splits blocks too
    assert max_devices_per_block(one, 3_000) == 2
    _assert_same_pool(pool, generate_candidates(_inputs(corpus, one), one), atol=1e-5)


def test_pair_budget_bounds_the_block() -> None:
    cfg = CandidateConfig(device_block_size=64)
    assert max_devices_per_block(cfg, 2_185) == 64
    assert max_devices_per_block(cfg, 698_191) == (1 << 24) // 698_191 == 24
    assert max_devices_per_block(cfg, 50_000_000) == 1


@pytest.mark.parametrize("cfg", [
    CandidateConfig(),
    CandidateConfig(entity_weighting="uniform_low", tier_b_parent_child=False, device_block_size=3),
    CandidateConfig(vector_mode="absolute", device_block_size=7),
])
def test_results_identical_to_the_implementation_before_the_scale_work(corpus: SyntheticCorpus,
                                                                       cfg: CandidateConfig) -> None:
    # company matches listed twice with different kinds: the later row must win, as before (as strings,
    # the pipeline's dtype, which the old implementation was written for)
    strings = corpus.company_matches.with_columns(pl.col("match_kind", "company_path").cast(pl.String))
    company = pl.concat([strings, strings.head(50).with_columns(
        pl.when(pl.col("match_kind") == "same").then(pl.lit("acquired")).otherwise(pl.lit("same"))
        .alias("match_kind"))])
    old_matcher = before.EntityMatcher(before.doc_keys(corpus.device_mentions, ONTO, cfg),
                                       before.doc_keys(corpus.patent_mentions, ONTO, cfg), corpus.patent_ids, cfg)
    old_inputs = before.Stage2Inputs(corpus.device_ids, corpus.device_vectors, corpus.patent_ids,
                                     corpus.patent_vectors, company, old_matcher, corpus.lexical)
    old = before.generate_candidates(old_inputs, cfg)
    new = _before_dossiers(generate_candidates(_inputs(corpus, cfg, company), cfg))
    z = ["sim_z_device", "sim_z_patent"]
    assert old.height > 100 and old.drop(z).equals(new.drop(z))  # every other column bit for bit
    for col in z:  # the moments now go through BLAS instead of a naive einsum: float32 rounding only
        np.testing.assert_allclose(old[col].to_numpy(), new[col].to_numpy(), rtol=1e-5, atol=1e-4)
    # the entity scores of a block, every array
    block = corpus.device_ids[:7]
    a, b = old_matcher.score_block(block), _inputs(corpus, cfg).entities.score_block(block)
    for field in ("score", "core", "tier_s", "matches"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


@pytest.mark.parametrize("cfg", [CandidateConfig(), CandidateConfig(entity_weighting="uniform_mid",
                                                                    tier_b_parent_child=False)])
def test_doc_keys_identical_to_before(corpus: SyntheticCorpus, cfg: CandidateConfig) -> None:
    def plain(dk):
        return ({d: {(k.tier, k.key, k.points, k.label, k.core) for k in ks} for d, ks in dk.keys.items()},
                dk.family)

    for mentions in (corpus.patent_mentions, corpus.device_mentions):
        assert plain(before.doc_keys(mentions, ONTO, cfg)) == plain(doc_keys(mentions, ONTO, cfg))


def test_explain_block_equals_explain_for_every_pair() -> None:
    """explain_block, and explain / shared_terms (now read from the patent matrices), against the
    per-pair implementation before the scale work, which read the patents' key sets."""
    small = synthetic_corpus(400, 12, seed=3, lexical=False)
    for cfg in (CandidateConfig(), CandidateConfig(tier_b_parent_child=False, entity_weighting="uniform_low")):
        dm, pm = small.device_mentions, small.patent_mentions
        matcher = EntityMatcher(doc_keys(dm, ONTO, cfg), doc_keys(pm, ONTO, cfg), small.patent_ids, cfg)
        old = before.EntityMatcher(before.doc_keys(dm, ONTO, cfg), before.doc_keys(pm, ONTO, cfg), small.patent_ids,
                                   cfg)
        rng = np.random.default_rng(0)
        rows, cols = np.nonzero(rng.random((12, 400)) < 0.5)  # any pairs, in or out of a pool
        tier, detail, shared = matcher.explain_block(small.device_ids, rows, cols)
        for i, (r, c) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
            d, p = small.device_ids[r], small.patent_ids[c]
            assert (tier[i], detail[i]) == old.explain(d, p) == matcher.explain(d, p), (d, p)
            assert shared[i] == "|".join(old.shared_terms(d, p)), (d, p)
            assert matcher.shared_terms(d, p) == old.shared_terms(d, p), (d, p)
        assert set(tier.to_list()) >= {"S", "A", "none"}
        assert matcher.explain(small.device_ids[0], "not a patent") == ("none", "")


def test_tier_s_shortcut_gives_the_ontology_answer(corpus: SyntheticCorpus) -> None:
    norms = pl.concat([corpus.patent_mentions["norm"], corpus.device_mentions["norm"]]).unique().to_list()
    norms += ["guidewire", "scaffold", "a", "delivery catheter", "Stent-Graft", "crohn's", "stent  graft", "x_y",
              "électrode", "valve repair", "zzzz qqqq"]
    keys = _s_keys(pl.Series(norms), ONTO, CandidateConfig(), None)
    assert keys["key"].to_list() == norms
    for norm, category, weight in keys.select("key", "category", "weight").iter_rows():
        assert (category, weight) == ONTO.tier_s_category(norm), norm


def test_moments_match_float64(corpus: SyntheticCorpus) -> None:
    exact = corpus.patent_vectors.astype(np.float64) @ corpus.device_vectors.T.astype(np.float64)
    mean, std = block_scores._moments(corpus.patent_vectors, corpus.device_vectors, chunk=1_000)
    np.testing.assert_allclose(mean, exact.mean(axis=1), atol=1e-6)
    np.testing.assert_allclose(std, exact.std(axis=1), atol=1e-6)


def test_one_doc_keys_for_both_sides_scores_as_before() -> None:
    """text_pair_features indexes devices and patents in one DocKeys and passes it twice."""
    small = synthetic_corpus(400, 12, seed=5, lexical=False)
    both = pl.concat([small.device_mentions, small.patent_mentions])
    cfg = CandidateConfig()
    new = EntityMatcher(*[doc_keys(both, ONTO, cfg)] * 2, small.patent_ids, cfg)
    old = before.EntityMatcher(*[before.doc_keys(both, ONTO, cfg)] * 2, small.patent_ids, cfg)
    a, b = old.score_block(small.device_ids), new.score_block(small.device_ids)
    for field in ("score", "core", "tier_s", "matches"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.score.max() > 0
    rows, cols = np.nonzero(a.score > 0)
    tier, detail, shared = new.explain_block(small.device_ids, rows, cols)
    for i, (r, c) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
        assert (tier[i], detail[i]) == old.explain(small.device_ids[r], small.patent_ids[c])
        assert shared[i] == "|".join(old.shared_terms(small.device_ids[r], small.patent_ids[c]))


def test_patents_in_any_order_give_the_pool_as_before(corpus: SyntheticCorpus) -> None:
    """Columns not in pat_id order: each block's rows are ordered by patent id before it is cut."""
    cfg = CandidateConfig(device_block_size=7)
    perm = np.random.default_rng(1).permutation(len(corpus.patent_ids))
    ids = [corpus.patent_ids[i] for i in perm]
    vectors = corpus.patent_vectors[perm]
    lexical = TfidfScorer(devices=corpus.lexical.devices, patents=corpus.lexical.patents.tocsr()[perm])
    strings = corpus.company_matches.with_columns(pl.col("match_kind", "company_path").cast(pl.String))
    dm, pm = corpus.device_mentions, corpus.patent_mentions
    old_matcher = before.EntityMatcher(before.doc_keys(dm, ONTO, cfg), before.doc_keys(pm, ONTO, cfg), ids, cfg)
    old = before.generate_candidates(before.Stage2Inputs(corpus.device_ids, corpus.device_vectors, ids, vectors,
                                                         strings, old_matcher, lexical), cfg)
    matcher = EntityMatcher(doc_keys(dm, ONTO, cfg), doc_keys(pm, ONTO, cfg), ids, cfg)
    new = _before_dossiers(generate_candidates(Stage2Inputs(corpus.device_ids, corpus.device_vectors, ids, vectors,
                                                            corpus.company_matches, matcher, lexical), cfg))
    z = ["sim_z_device", "sim_z_patent"]
    assert old.height > 100 and old.drop(z).equals(new.drop(z))
    for col in z:
        np.testing.assert_allclose(old[col].to_numpy(), new[col].to_numpy(), rtol=1e-5, atol=1e-4)


def test_compact_corpus_tables_give_the_same_pool(corpus: SyntheticCorpus) -> None:
    """Categorical company columns and coded mentions are only a storage form: the pool is that of
    the string tables, in one chunk per column."""
    cfg = CandidateConfig(device_block_size=7)
    strings = corpus.company_matches.with_columns(pl.col("match_kind", "company_path").cast(pl.String))
    assert corpus.patent_mentions.schema == pl.Schema({"doc_id": pl.String, "norm": pl.String,
                                                       "concept_id": pl.String})
    a = generate_candidates(_inputs(corpus, cfg), cfg)
    b = generate_candidates(_inputs(corpus, cfg, strings), cfg)
    assert a.height > 100 and a.equals(b)
    assert set(a.n_chunks("all")) == {1}


def test_stage3_keeps_chunks_aligned_and_links_stream(corpus: SyntheticCorpus) -> None:
    """New Stage-3 columns are cut like the pool's chunks (a misaligned frame is copied whole by the
    next expression); LINKS made slice by slice hash to the whole table's digest."""
    cfg = PipelineConfig()
    pool = generate_candidates(_inputs(corpus, cfg.candidates), cfg.candidates)
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


@pytest.mark.parametrize("twice", [False, True])
def test_devices_in_any_order_or_asked_twice_give_the_pool_as_before(corpus: SyntheticCorpus,
                                                                    twice: bool) -> None:
    """The pool is assembled column by column from the blocks' arrays (devices in id order whatever
    order they are asked in); a device asked for twice goes through the frames, as before."""
    cfg = CandidateConfig(device_block_size=3)
    wanted = [corpus.device_ids[i] for i in np.random.default_rng(2).permutation(len(corpus.device_ids))[:11]]
    if twice:
        wanted += wanted[:2]
    strings = corpus.company_matches.with_columns(pl.col("match_kind", "company_path").cast(pl.String))
    dm, pm = corpus.device_mentions, corpus.patent_mentions
    old_matcher = before.EntityMatcher(before.doc_keys(dm, ONTO, cfg), before.doc_keys(pm, ONTO, cfg),
                                       corpus.patent_ids, cfg)
    old = before.generate_candidates(before.Stage2Inputs(corpus.device_ids, corpus.device_vectors, corpus.patent_ids,
                                                         corpus.patent_vectors, strings, old_matcher, corpus.lexical),
                                     cfg, wanted)
    new = generate_candidates(_inputs(corpus, cfg), cfg, wanted)
    assert old.height > 100 and set(new.n_chunks("all")) == {1}
    new = _before_dossiers(new)
    # a device asked for twice lands in other blocks than in one pass: BLAS rounding of the cosine only
    _assert_same_pool(old, new, atol=1e-4)


def test_pool_from_arrays_equals_pool_from_frames(corpus: SyntheticCorpus) -> None:
    """The two ways CandidateParts makes the pool (columns straight from the blocks' arrays; block
    frames cut by device and stacked, the way before) give the same frame, bit for bit."""
    cfg = CandidateConfig(device_block_size=7)
    inputs = _inputs(corpus, cfg)
    direct = candidates.collect_candidates(inputs, cfg).to_frame()
    again = candidates.collect_candidates(inputs, cfg)
    assert all(isinstance(e, candidate_parts.BlockPart) for e in again._entries)
    assert direct.height > 100 and direct.equals(again._by_frames(again._entries))
    assert direct.schema == pl.Schema(schemas.CANDIDATES) and direct["company_path"].null_count() > 0


def test_bench_stage2_releases_what_it_holds(corpus: SyntheticCorpus) -> None:
    """The bench's Stage 2 drops the inputs (and the corpus) once every block is scored."""
    cfg = CandidateConfig(device_block_size=7)
    held = [_inputs(corpus, cfg), "the corpus"]
    pool = scale_bench._stage2(held, cfg)
    assert held == [] and pool.equals(generate_candidates(_inputs(corpus, cfg), cfg))
