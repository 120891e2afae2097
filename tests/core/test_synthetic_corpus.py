"""The synthetic corpus of the scale benchmark: the real benchmark's shape, the same corpus for a seed."""

from __future__ import annotations

import numpy as np
import polars as pl

from meddevkg_core.ontology import load_meddevonto
from meddevkg_core.synthetic_corpus import SyntheticCorpus, synthetic_corpus

ONTO = load_meddevonto()


def test_synthetic_corpus_has_the_benchmark_shape(corpus: SyntheticCorpus) -> None:
    assert len(corpus.patent_ids) == 3_000 and len(corpus.device_ids) == 20
    assert corpus.patent_vectors.shape == (3_000, 384) and corpus.patent_vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(corpus.patent_vectors, axis=1), 1.0, atol=1e-5)
    stats = corpus.stats()
    assert 12 <= stats["mentions_per_patent"] <= 20
    assert 0.1 <= stats["patent_concept_share"] <= 0.25
    known = set(ONTO.concepts["concept_id"].to_list())
    assert set(corpus.patent_mentions["concept_id"].drop_nulls().to_list()) <= known
    assert corpus.patent_mentions.select("doc_id", "norm").is_unique().all()
    sizes = corpus.company_matches.join(
        pl.DataFrame({"fda_id": corpus.device_ids}), on="fda_id").group_by("fda_id").len()["len"]
    assert sizes.max() > 5 * max(sizes.min(), 1)  # a few large assignees
    assert corpus.lexical is not None and corpus.lexical.n_patents == 3_000
    again = synthetic_corpus(3_000, 20, seed=0)  # seeded: the same corpus every time
    np.testing.assert_array_equal(again.patent_vectors, corpus.patent_vectors)
    assert again.patent_mentions.equals(corpus.patent_mentions)
