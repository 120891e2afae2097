from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.config import CrossEncoderConfig
from meddevkg_core.cross_encoder import (
    FlagRerankerScorer,
    ModelUnavailableOfflineError,
    PairScorer,
    SentenceTransformersScorer,
    load_cross_encoder,
    pair_texts,
    resolve_local_model,
    score_candidate_pairs,
)
from meddevkg_core.rerank import feature_frame

PAIRS = [
    ("the coronary stent", "a balloon catheter with stent"),
    ("dental implant", "a valve"),
    ("lead", "the catheter lead with a coronary stent"),
]


@pytest.mark.parametrize(
    ("backend", "cls"), [("sentence-transformers", SentenceTransformersScorer), ("flagembedding", FlagRerankerScorer)]
)
def test_load_tiny_bert_through_real_backend(tiny_bert: Path, backend: str, cls: type) -> None:
    scorer = load_cross_encoder(CrossEncoderConfig(model=str(tiny_bert), backend=backend), device="cpu")
    assert isinstance(scorer, cls) and isinstance(scorer, PairScorer)
    assert scorer.model_id == str(tiny_bert)
    scores = scorer.score(PAIRS)
    assert scores.shape == (3,) and scores.dtype == np.float32
    assert np.all((scores > 0.0) & (scores < 1.0))  # sigmoid probabilities, not logits
    np.testing.assert_array_equal(scorer.score(PAIRS), scores)
    np.testing.assert_allclose(scorer.score(PAIRS[1:2]), scores[1:2], atol=1e-5)  # no batch effects
    assert scorer.score([]).shape == (0,)


def test_backends_agree_on_the_same_checkpoint(tiny_bert: Path) -> None:
    st = load_cross_encoder(CrossEncoderConfig(model=str(tiny_bert)), device="cpu")
    fe = load_cross_encoder(CrossEncoderConfig(model=str(tiny_bert), backend="flagembedding"), device="cpu")
    assert st is not None and fe is not None
    np.testing.assert_allclose(st.score(PAIRS), fe.score(PAIRS), atol=1e-5)


def test_load_cross_encoder_without_model_or_with_bad_backend() -> None:
    assert load_cross_encoder(CrossEncoderConfig(model=None)) is None
    with pytest.raises(ValueError, match="backend"):
        load_cross_encoder(CrossEncoderConfig(model="x", backend="onnx"))


def test_uncached_hub_name_fails_clearly_offline(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailableOfflineError, match=r"not available offline.*local"):
        load_cross_encoder(CrossEncoderConfig(model="BAAI/bge-reranker-v2-m3"), device="cpu")
    with pytest.raises(ModelUnavailableOfflineError, match="not available offline"):
        resolve_local_model(str(tmp_path / "no_such_dir"))


def test_hub_name_resolves_from_local_cache(tmp_path: Path) -> None:
    snapshot = tmp_path / "models--org--reranker" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--org--reranker" / "refs").mkdir()
    (tmp_path / "models--org--reranker" / "refs" / "main").write_text("abc123")
    assert resolve_local_model("org/reranker", cache_dir=tmp_path) == snapshot


# --- score_candidate_pairs ------------------------------------------------------------------


@dataclass
class RecordingScorer:
    """Fake scorer: the score is the patent text length, so alignment is easy to check."""

    model_id: str = "fake"
    seen: list[tuple[str, str]] = field(default_factory=list)
    calls: int = 0

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        self.calls += 1
        self.seen.extend(pairs)
        return np.array([len(p) for _, p in pairs], dtype=np.float32)


DEVICES = pl.DataFrame({"fda_id": ["P1", "P2"], "text": ["D" * 50, "short device"]})
PATENTS = pl.DataFrame({"pat_id": ["A", "B", "C"], "text": ["a" * 3000, "b" * 7, "c" * 20]})
CANDIDATES = schemas.conform(
    pl.DataFrame({"fda_id": ["P1", "P2", "P1", "P2"], "pat_id": ["A", "B", "C", "A"], "sim": [0.9, 0.8, 0.7, 0.6]}),
    schemas.CANDIDATES,
)


def test_without_scorer_no_pair_is_scored_and_features_read_a_missing_score() -> None:
    out = score_candidate_pairs(CANDIDATES, DEVICES, PATENTS, None)
    assert out.schema == schemas.CROSS_ENCODER_SCORES and out.height == 0
    features = feature_frame(CANDIDATES, out)
    assert features.height == CANDIDATES.height and features["ai_score"].null_count() == CANDIDATES.height


def test_score_candidate_pairs_aligns_with_rows_and_truncates() -> None:
    scorer = RecordingScorer()
    out = score_candidate_pairs(CANDIDATES, DEVICES, PATENTS, scorer, max_chars=10, batch_size=3)
    assert out.schema == schemas.CROSS_ENCODER_SCORES
    assert out.select("fda_id", "pat_id").equals(CANDIDATES.select("fda_id", "pat_id"))
    assert out["ai_score"].to_list() == [10.0, 7.0, 10.0, 10.0]
    assert scorer.calls == 2
    assert all(len(d) <= 10 and len(p) <= 10 for d, p in scorer.seen)
    assert ("D" * 10, "a" * 10) in scorer.seen and ("short devi", "b" * 7) in scorer.seen


def test_pair_texts_is_the_shared_truncation_rule() -> None:
    pairs = pair_texts(CANDIDATES, DEVICES, PATENTS, max_chars=1024)
    assert pairs[0] == ("D" * 50, "a" * 1024)  # device first, patent second
    assert pairs[1] == ("short device", "b" * 7)


def test_score_candidate_pairs_empty_and_errors() -> None:
    empty = score_candidate_pairs(schemas.empty(schemas.CANDIDATES), DEVICES, PATENTS, RecordingScorer())
    assert empty.schema == schemas.CROSS_ENCODER_SCORES and empty.height == 0
    orphan = pl.DataFrame({"fda_id": ["P9"], "pat_id": ["A"]})
    with pytest.raises(ValueError, match="P9"):
        score_candidate_pairs(orphan, DEVICES, PATENTS, RecordingScorer())

    class Short(RecordingScorer):
        def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
            return np.zeros(1, dtype=np.float32)

    with pytest.raises(ValueError, match="scores for"):
        score_candidate_pairs(CANDIDATES, DEVICES, PATENTS, Short())
