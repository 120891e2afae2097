"""Stage 3's last steps: decisions, each device's ranks, rank_pool over a pool or one device of it."""

import numpy as np
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.candidates import generate_candidates
from meddevkg_core.config import RerankConfig
from meddevkg_core.fold_models import apply_fold_models, fit_fold_models
from meddevkg_core.links_table import links_frame
from meddevkg_core.rerank import feature_frame
from meddevkg_core.reranked_links import decide, rank_pool, with_ranks
from tests.core.test_rerank import synthetic_pool


def test_decide_applies_cut_off_and_immunity_and_explains():
    pool, gold = synthetic_pool(4, 10)
    features = feature_frame(pool, None).with_columns(
        pl.when(pl.col("pat_id") == "1").then(pl.lit("rescue_anchor")).otherwise(pl.col("admitted_by"))
        .alias("admitted_by"))
    scored = features.with_columns(pl.lit(0.5, pl.Float32).alias("probability"),
                                   pl.lit(0.6, pl.Float32).alias("threshold"), pl.lit(True).alias("out_of_fold"))
    links = links_frame(decide(scored, RerankConfig(immunity_tier_s_anchor=True)))
    assert links.schema == schemas.LINKS
    kept = links.filter(pl.col("decision"))
    assert kept["pat_id"].to_list() == ["1"] and kept["immune"].all()
    assert "p=0.500" in kept["evidence"][0] and "admitted=rescue_anchor" in kept["evidence"][0]
    assert links.filter(~pl.col("decision"))["evidence"].is_null().all()  # rejected: signals stay in the pool
    assert not decide(scored, RerankConfig())["decision"].any()  # the anchor immunity is off by default


def test_decide_keeps_a_pair_at_the_cut_off_and_the_similarity_immunity_needs_the_same_company():
    pool, _ = synthetic_pool(1, 4)
    scored = feature_frame(pool.filter(pl.col("fda_id") != "PX"), None).with_columns(
        pl.Series("probability", [0.5, 0.4, 0.4, 0.4], pl.Float32), pl.lit(0.5, pl.Float32).alias("threshold"),
        pl.Series("is_same_company", [0, 1, 0, 1], pl.Int8), pl.Series("sim", [0.1, 0.75, 0.75, 0.7]).cast(
            pool.schema["sim"]))
    decided = decide(scored, RerankConfig(immunity_same_company_min_cosine=0.75))
    assert decided["verdict"].to_list() == ["probability", "immune:same_company_high_sim", "below_threshold",
                                            "below_threshold"]
    assert decided["decision"].to_list() == [True, True, False, False]


def _embeddings(ids, matrix: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame({"doc_id": list(ids), "content_hash": [""] * len(ids),
                         "embedding": pl.Series(matrix.astype(np.float32)).cast(pl.List(pl.Float32))})


def _synthetic_stage3(cfg: RerankConfig):
    """(pool, vectors, fold models) over a small synthetic corpus: 20 devices, 8 of them gold."""
    from meddevkg_core.config import PipelineConfig
    from meddevkg_core.synthetic_corpus import stage2_inputs, synthetic_corpus, synthetic_gold
    from meddevkg_core.text_adapter import Vectors

    corpus = synthetic_corpus(3_000, 20, seed=0)
    inputs = stage2_inputs(corpus, PipelineConfig())
    pool = generate_candidates(inputs, PipelineConfig().candidates)
    gold = synthetic_gold(pool, n_devices=8, seed=0)
    vectors = Vectors.of_inputs(inputs)
    gold_rows = pl.col("fda_id").is_in(gold["fda_id"].unique().implode())
    return pool, vectors, fit_fold_models(feature_frame(pool, None).filter(gold_rows), gold, cfg, vectors)


def test_rank_pool_reads_the_top_pairs_vectors_only_and_ranks_as_with_every_vector():
    from meddevkg_core.config import TextAdapterConfig

    cfg = RerankConfig(n_estimators=20, folds=4, text_adapter=TextAdapterConfig(enabled=True, top_k=5, epochs=2))
    pool, vectors, models = _synthetic_stage3(cfg)
    features = feature_frame(pool, None)
    assert models.full_adapter is not None and len(models.full.known.links) > 0
    expected = links_frame(with_ranks(decide(apply_fold_models(features, models, vectors), cfg), models, vectors,
                                      cfg))
    patents = _embeddings(vectors.patent_ids, vectors.patent_vectors)
    asked: list[pl.Series] = []

    def patent_embeddings_of(pat_ids: pl.Series) -> pl.DataFrame:
        asked.append(pat_ids)
        return patents.filter(pl.col("doc_id").is_in(pat_ids.implode()))

    got = rank_pool(pool, None, models, _embeddings(vectors.device_ids, vectors.device_vectors),
                    patent_embeddings_of, cfg)
    assert got.equals(expected)
    [ids] = asked
    devices = pool["fda_id"].n_unique()
    assert got["text_sim"].is_not_null().sum() == devices * 5
    ranked = set(got.filter(pl.col("text_sim").is_not_null())["pat_id"])
    assert ranked <= set(ids) and ids.len() < pool["pat_id"].n_unique() / 2  # each device's top 5 (and ties)
    off = cfg.model_copy(update={"text_adapter": cfg.text_adapter.model_copy(update={"enabled": False})})
    asked.clear()
    assert rank_pool(pool, None, models, _embeddings(vectors.device_ids, vectors.device_vectors),
                     patent_embeddings_of, off)["text_sim"].is_null().all() and asked == []


def test_the_company_contest_moves_top_pairs_only_and_ranks_one_device_as_the_whole_pool():
    from meddevkg_core.config import CompanyContestConfig
    from meddevkg_core.reranked_links import RivalPool

    cfg = RerankConfig(n_estimators=20, folds=4, company_contest=CompanyContestConfig(top_k=10, weight=1.0))
    pool, vectors, models = _synthetic_stage3(cfg)
    devices = _embeddings(vectors.device_ids, vectors.device_vectors)

    def no_patents(_: pl.Series) -> pl.DataFrame:
        raise AssertionError("the contest reads no patent vector")

    whole = rank_pool(pool, None, models, devices, no_patents, cfg)
    by_probability = rank_pool(pool, None, models, devices, no_patents,
                               cfg.model_copy(update={"company_contest": CompanyContestConfig(enabled=False)}))
    assert whole.drop("rank").equals(by_probability.drop("rank"))  # probabilities and decisions as they were
    moved = whole["rank"] != by_probability["rank"]
    assert moved.any() and (by_probability.filter(moved)["rank"] <= 10).all()  # only the top 10 moved
    held_out = whole.filter(moved & pl.col("out_of_fold"))["fda_id"].unique().sort()
    assert held_out.len()  # a gold device, ranked against rivals scored by its fold model
    for device in (held_out[0], whole.filter(moved & ~pl.col("out_of_fold"))["fda_id"].min()):
        # one device partition: its pool rows, and the other devices' rows as the stored rival pool
        mine = pl.col("fda_id") == device
        rivals = RivalPool(pool.filter(~mine), None, devices.filter(pl.col("doc_id") != device))
        one = rank_pool(pool.filter(mine), None, models, devices.filter(pl.col("doc_id") == device), no_patents, cfg,
                        None, rivals)
        assert one.equals(whole.filter(mine)), device
        alone = rank_pool(pool.filter(mine), None, models, devices.filter(pl.col("doc_id") == device), no_patents,
                          cfg)
        assert not alone["rank"].equals(one["rank"])  # without its rivals the device would be ordered otherwise
