"""The text adapter: what it learns, how it fuses, how it is stored."""

import numpy as np
import polars as pl
import pytest

from meddevkg_core.config import CompanyContestConfig, RerankConfig, TextAdapterConfig
from meddevkg_core.fold_models import FoldModels
from meddevkg_core.rerank import RerankerModel
from meddevkg_core.reranked_links import with_ranks
from meddevkg_core.text_adapter import TextAdapter, Vectors, device_ranks, fit_text_adapter, fused_scores

CFG = TextAdapterConfig(enabled=True, top_k=3)


def test_fusion_reorders_the_top_k_and_keeps_the_rest_in_probability_order():
    probability = np.array([0.9, 0.8, 0.7, 0.1, 0.2])
    sims = {0: 0.0, 1: 0.0, 2: 1.0}  # only the top 3 by probability (rows 0, 1, 2) are asked for
    score, top, got = fused_scores(probability, lambda rows: np.array([sims[int(r)] for r in rows]), CFG)
    assert top.tolist() == [0, 1, 2] and got.tolist() == [0.0, 0.0, 1.0]
    # text ranks: row 2 first, then rows 0 and 1 (tie: the higher probability first);
    # RRF: row 0 = 1/61 + 1/62, row 2 = 1/63 + 1/61, row 1 = 1/62 + 1/63
    assert np.argsort(-score, kind="stable").tolist() == [0, 2, 1, 4, 3]
    assert score[3] == pytest.approx(0.1) and score[4] == pytest.approx(0.2)
    assert score[top].min() > 1.0 >= score[[3, 4]].max()


def test_a_similarity_that_agrees_with_the_probability_changes_nothing():
    probability = np.array([0.5, 0.9, 0.7, 0.6])
    score, _, _ = fused_scores(probability, lambda rows: probability[rows], TextAdapterConfig(top_k=10))
    assert np.argsort(-score).tolist() == np.argsort(-probability).tolist()


def _synthetic(n_devices: int, rng: np.random.Generator) -> tuple[Vectors, list[tuple[str, str, list[str]]]]:
    """Raw cosine prefers the negatives (they share a loud nuisance direction with their device);
    the gold patent shares a quiet signal direction. A linear map can swap the two."""
    dim, devices, patents, groups = 8, {}, {}, []
    for i in range(n_devices):
        k = int(rng.integers(0, 4))
        signal, nuisance = np.eye(dim)[k], np.eye(dim)[4 + rng.integers(0, 4)]
        devices[f"D{i}"] = 0.3 * signal + 1.0 * nuisance + 0.05 * rng.normal(size=dim)
        patents[f"G{i}"] = 0.3 * signal + 0.2 * nuisance + 0.05 * rng.normal(size=dim)
        negatives = []
        for j in range(4):
            other = np.eye(dim)[(k + 1 + j % 3) % 4]  # another signal direction
            patents[f"N{i}_{j}"] = 1.0 * nuisance + 0.3 * other + 0.05 * rng.normal(size=dim)
            negatives.append(f"N{i}_{j}")
        groups.append((f"D{i}", f"G{i}", negatives))
    vectors = Vectors(list(devices), np.array(list(devices.values()), np.float32),
                      list(patents), np.array(list(patents.values()), np.float32))
    return vectors, groups


def _hits(adapter_or_none, vectors, groups) -> float:
    hits = 0
    for d, g, negatives in groups:
        pats = [g, *negatives]
        dev = vectors.devices([d] * len(pats))
        if adapter_or_none is None:
            raw = (dev / np.linalg.norm(dev, axis=1, keepdims=True) * vectors.patents(pats)
                   / np.linalg.norm(vectors.patents(pats), axis=1, keepdims=True)).sum(1)
        else:
            raw = adapter_or_none.similarity(dev, vectors.patents(pats))
        hits += int(np.argmax(raw) == 0)
    return hits / len(groups)


def test_the_adapter_learns_what_the_gold_says_and_generalises_to_new_devices():
    rng = np.random.default_rng(0)
    train_vectors, train_groups = _synthetic(40, rng)
    test_vectors, test_groups = _synthetic(20, rng)
    cfg = TextAdapterConfig(epochs=20, ensemble=2, learning_rate=1e-2)
    adapter = fit_text_adapter(train_groups, train_vectors, cfg)
    assert _hits(None, test_vectors, test_groups) < 0.2
    assert _hits(adapter, test_vectors, test_groups) > 0.8
    again = fit_text_adapter(train_groups, train_vectors, cfg)  # seeded: the same maps every time
    assert np.array_equal(adapter.matrices, again.matrices) and adapter.matrices.shape == (2, 8, 8)
    assert np.array_equal(TextAdapter.from_bytes(adapter.to_bytes()).matrices, adapter.matrices)
    assert fit_text_adapter([], train_vectors, cfg) is None


def _model() -> RerankerModel:
    return RerankerModel(booster_json="{}", threshold=0.5, n_train_pairs=1, n_train_devices=1, has_ai_score=False)


def test_fold_models_store_their_adapters_and_read_old_tables():
    adapter = TextAdapter(np.stack([np.eye(4, dtype=np.float32)]))
    models = FoldModels(_model(), ((("A",), _model()), (("B",), _model())), adapter, (None, adapter))
    back = FoldModels.from_frame(models.to_frame())
    assert back.adapter_for("A") is None and back.adapter_for("Z") is not None
    assert np.array_equal(back.adapter_for("B").matrices, adapter.matrices)
    old = FoldModels.from_frame(models.to_frame().drop("text_adapter"))  # a table stored before adapters
    assert old.full_adapter is None and old.fold_adapters == (None, None)


def test_device_ranks_without_an_adapter_follow_the_probability_with_ties_by_patent():
    scored = pl.DataFrame({"fda_id": ["A", "A", "A", "B", "B"], "pat_id": ["p1", "p2", "p3", "p1", "p2"],
                           "probability": [0.2, 0.5, 0.5, 0.1, 0.3]})
    rank, text_sim = device_ranks(scored, lambda _: None, None, CFG)
    assert rank.tolist() == [3, 1, 2, 2, 1] and np.isnan(text_sim).all()



def test_device_ranks_of_no_pairs_are_empty():
    """An empty pool (an ablation on a tiny corpus) ended the benchmark in a zip() traceback."""
    scored = pl.DataFrame(schema={"fda_id": pl.String, "pat_id": pl.String, "probability": pl.Float64})
    rank, text_sim = device_ranks(scored, lambda _: None, None, CFG)
    assert rank.shape == (0,) and text_sim.shape == (0,)

def test_with_ranks_uses_each_devices_own_adapter_and_marks_its_top_pairs():
    vectors = Vectors(["A"], np.array([[1.0, 0.0]], np.float32), ["p1", "p2", "p3", "p4"],
                      np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5], [1.0, 0.1]], np.float32))
    identity = TextAdapter(np.stack([np.eye(2, dtype=np.float32)]))
    models = FoldModels(_model(), (), identity, ())
    scored = pl.DataFrame({"fda_id": ["A"] * 4, "pat_id": ["p4", "p3", "p2", "p1"],  # any row order
                           "probability": [0.1, 0.7, 0.8, 0.9]})
    out = with_ranks(scored, models, vectors, RerankConfig(text_adapter=CFG))
    assert out["pat_id"].to_list() == ["p1", "p2", "p3", "p4"]
    # top 3 by probability: p1 (cos 0), p2 (cos 1), p3 (cos 0.71): p2 1/62+1/61 > p1 1/61+1/63 > p3 1/63+1/62
    assert out["rank"].to_list() == [2, 1, 3, 4]
    assert out["text_sim"].is_null().to_list() == [False, False, False, True]
    off = with_ranks(scored, models, vectors, RerankConfig(text_adapter=CFG.model_copy(update={"enabled": False}),
                                                           company_contest=CompanyContestConfig(enabled=False)))
    assert off["rank"].to_list() == [1, 2, 3, 4] and off["text_sim"].is_null().all()
