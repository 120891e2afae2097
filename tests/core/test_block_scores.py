"""Stage 2's scores: the vector points, the cosine's exact moments, every pair of every block scored."""

import numpy as np

from meddevkg_core import block_scores
from meddevkg_core.block_scores import max_devices_per_block, score_blocks, vector_points
from meddevkg_core.config import CandidateConfig
from meddevkg_core.synthetic_corpus import SyntheticCorpus
from tests.core.test_candidates import toy_inputs


def test_quantile_and_absolute_vector_bins():
    sim = np.linspace(0, 1, 101, dtype=np.float32)[None, :]
    quant = vector_points(sim, CandidateConfig())
    assert quant[0, -1] == 65 and quant[0, 0] == 0
    assert (quant[0] == 65).sum() == 2  # top 1% of 101 values (ties at the cut included)
    absolute = vector_points(np.array([[0.8804, 0.8776, 0.82, 0.75, 0.70, 0.69]], np.float32),
                             CandidateConfig(vector_mode="absolute"))
    assert absolute.tolist() == [[65, 45, 45, 30, 15, 0]]  # bins on the unrounded cosine


def test_cosine_z_scores_use_exact_moments_without_the_pair_matrix():
    inputs = toy_inputs(CandidateConfig())
    full = inputs.device_vectors @ inputs.patent_vectors.T
    p_mean, p_std = inputs.patent_moments
    d_mean, d_std = inputs.device_moments
    np.testing.assert_allclose(p_mean, full.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(p_std, full.std(axis=0), atol=1e-5)
    np.testing.assert_allclose(d_mean, full.mean(axis=1), atol=1e-5)
    np.testing.assert_allclose(d_std, full.std(axis=1), atol=1e-5)


def test_block_scores_cover_every_pair():
    cfg = CandidateConfig(device_block_size=2)
    blocks = list(score_blocks(toy_inputs(cfg), cfg))
    assert sum(len(b.device_ids) for b in blocks) == 5
    assert all(b.total.shape == (len(b.device_ids), 7) for b in blocks)


def test_pair_budget_bounds_the_block() -> None:
    cfg = CandidateConfig(device_block_size=64)
    assert max_devices_per_block(cfg, 2_185) == 64
    assert max_devices_per_block(cfg, 698_191) == (1 << 24) // 698_191 == 24
    assert max_devices_per_block(cfg, 50_000_000) == 1


def test_moments_match_float64(corpus: SyntheticCorpus) -> None:
    exact = corpus.patent_vectors.astype(np.float64) @ corpus.device_vectors.T.astype(np.float64)
    mean, std = block_scores._moments(corpus.patent_vectors, corpus.device_vectors, chunk=1_000)
    np.testing.assert_allclose(mean, exact.mean(axis=1), atol=1e-6)
    np.testing.assert_allclose(std, exact.std(axis=1), atol=1e-6)
