import numpy as np
import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.block_scores import Stage2Inputs
from meddevkg_core.candidates import generate_candidates
from meddevkg_core.config import CandidateConfig, PipelineConfig, RerankConfig
from meddevkg_core.entity_match import EntityMatcher, doc_keys
from meddevkg_core.fold_models import fit_fold_models
from meddevkg_core.ontology import load_meddevonto
from meddevkg_core.rerank import label_pairs, oof_probabilities, recall_threshold, training_sample
from meddevkg_core.training_pairs import outside_pool_pairs, training_pairs

DEVICES = [f"D{i}" for i in range(8)]
PATENTS = [f"p{j:03d}" for j in range(300)]


def _inputs(cfg: CandidateConfig) -> Stage2Inputs:
    rng = np.random.default_rng(1)
    dv = rng.normal(size=(len(DEVICES), 16)).astype(np.float32)
    pv = rng.normal(size=(len(PATENTS), 16)).astype(np.float32)
    dv /= np.linalg.norm(dv, axis=1, keepdims=True)
    pv /= np.linalg.norm(pv, axis=1, keepdims=True)
    none = schemas.empty(schemas.MENTIONS)
    onto = load_meddevonto()
    matcher = EntityMatcher(doc_keys(none, onto, cfg), doc_keys(none, onto, cfg), PATENTS, cfg)
    company = pl.DataFrame({"fda_id": ["D0", "D1"], "pat_id": ["p000", "p001"], "match_kind": ["same", "same"],
                            "company_path": ["ACME", "ACME"]})
    return Stage2Inputs(DEVICES, dv, PATENTS, pv, company, matcher)


def _setup(rate: float):
    config = PipelineConfig(rerank=RerankConfig(outside_pool_negative_rate=rate, folds=3))
    inputs = _inputs(config.candidates)
    pool = generate_candidates(inputs, config.candidates)
    keys = set(pool.select("fda_id", "pat_id").rows())
    # per gold device: one pool pair and one pair Stage 2 missed
    gold_rows = []
    for d in DEVICES[:6]:
        inside = next(p for p in PATENTS if (d, p) in keys)
        outside = next(p for p in reversed(PATENTS) if (d, p) not in keys)
        gold_rows += [(d, inside), (d, outside)]
    gold = pl.DataFrame(gold_rows, schema=["fda_id", "pat_id"], orient="row")
    return config, inputs, pool, gold, keys


def test_outside_sample_holds_every_missed_gold_pair_and_no_pool_pair():
    config, inputs, pool, gold, keys = _setup(0.1)
    out = outside_pool_pairs(inputs, pool, gold, config)
    rows = set(out.select("fda_id", "pat_id").rows())
    assert not rows & keys
    missed = {r for r in gold.rows() if r not in keys}
    assert missed <= rows
    assert set(out["fda_id"]) <= set(gold["fda_id"])
    non_pool = 6 * len(PATENTS) - pool.filter(pl.col("fda_id").is_in(DEVICES[:6])).height
    share = (out.height - len(missed)) / non_pool
    assert 0.05 < share < 0.15  # the seeded hash keeps about the configured share
    again = outside_pool_pairs(inputs, pool, gold, config)
    assert again.equals(out)  # seeded: the same sample every run


def test_training_pairs_contract_and_rate_zero_is_the_paper_population():
    config, inputs, pool, gold, _ = _setup(0.0)
    paper = training_pairs(inputs, pool, None, gold, config)
    assert paper.schema == schemas.TRAINING_PAIRS
    assert paper["in_pool"].all() and set(paper["fda_id"]) <= set(gold["fda_id"])
    config, *_ = _setup(0.2)
    wider = training_pairs(inputs, pool, None, gold, config)
    assert wider.filter(pl.col("in_pool")).equals(paper)
    assert wider.filter(~pl.col("in_pool")).height > 0
    assert wider["ai_score"].is_null().all()


def test_outside_rows_skip_negative_capping_and_the_cutoff_uses_pool_rows_only():
    config, inputs, pool, gold, keys = _setup(0.2)
    rows = training_pairs(inputs, pool, None, gold, config)
    labeled = label_pairs(rows, gold)
    sample = training_sample(labeled, config.rerank)
    assert sample.filter(~pl.col("in_pool")).height == labeled.filter(~pl.col("in_pool")).height
    models = fit_fold_models(rows, gold, config.rerank)
    assert models.full.n_train_pairs == sample.height
    oof = oof_probabilities(labeled, config.rerank, 3)
    in_pool, labels = labeled["in_pool"].to_numpy(), labeled["label"].to_numpy()
    expected = recall_threshold(oof[in_pool], labels[in_pool], config.rerank.target_recall)
    assert models.full.threshold == pytest.approx(expected)
