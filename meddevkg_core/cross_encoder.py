"""Cross-encoder relevance score of a (device, patent) pair, the `ai_score` feature (METHOD.md §4.1).

Fixes the paper's train/serve skew (§9): every caller builds its pairs through `pair_texts`, so
training and inference truncate to the same `max_chars` (device first, patent second). Scores
from both backends are probabilities, sigmoid(logit) in [0, 1]; XGBoost is invariant to that
monotone map, but one scale makes thresholds and logs comparable across backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, get_args, runtime_checkable

import numpy as np
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.config import CrossEncoderBackend, CrossEncoderConfig
from meddevkg_core.embeddings import force_offline, resolve_device
from meddevkg_core.errors import ModelNotFoundError

BACKENDS: tuple[str, ...] = get_args(CrossEncoderBackend)
MAX_TOKENS = 512


class ModelUnavailableOfflineError(ModelNotFoundError):
    """The configured model is neither a local directory nor in the local Hugging Face cache."""


@runtime_checkable
class PairScorer(Protocol):
    """Scores (device text, patent text) pairs; higher = more likely linked."""

    @property
    def model_id(self) -> str: ...

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray: ...


@dataclass(frozen=True)
class SentenceTransformersScorer:
    """sentence-transformers CrossEncoder, loaded with a sigmoid activation (probabilities)."""

    model: Any
    model_id: str
    batch_size: int = 32

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        scores = self.model.predict(
            [tuple(p) for p in pairs], batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return np.asarray(scores, dtype=np.float32).reshape(-1)


@dataclass(frozen=True)
class FlagRerankerScorer:
    """FlagEmbedding FlagReranker. Its raw output is a logit; we ask for normalize=True (sigmoid)."""

    model: Any
    model_id: str
    batch_size: int = 32

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        if not pairs:  # FlagReranker indexes pairs[0] and would raise on an empty list
            return np.zeros(0, dtype=np.float32)
        scores = self.model.compute_score(
            [(d, p) for d, p in pairs], batch_size=self.batch_size, max_length=MAX_TOKENS, normalize=True
        )
        return np.asarray(scores, dtype=np.float32).reshape(-1)


def resolve_local_model(name_or_path: str, cache_dir: str | Path | None = None) -> Path:
    """A local directory for `name_or_path`, or a clear error: nothing is downloaded at run time."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name_or_path, cache_dir=cache_dir, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError) as exc:
        raise ModelUnavailableOfflineError(
            f"cross-encoder model {name_or_path!r} is not available offline: it is not a local "
            "directory and not in the local Hugging Face cache, and downloads are disabled. "
            "Copy the model to this machine (e.g. `hf download <repo> --local-dir DIR` where "
            "there is network access) and name that directory as the cross-encoder."
        ) from exc


def load_cross_encoder(cfg: CrossEncoderConfig, device: str = "auto") -> PairScorer | None:
    """Load the configured cross-encoder from disk, or None when cfg.model is None.

    With None the `ai_score` feature is missing (null); XGBoost treats it as NaN and the caller
    should report that in its metadata.
    """
    if cfg.backend not in BACKENDS:
        raise ValueError(f"unknown cross-encoder backend {cfg.backend!r}; expected one of {BACKENDS}")
    if cfg.model is None:
        return None
    force_offline()
    local = str(resolve_local_model(cfg.model))
    dev = resolve_device(device)
    if cfg.backend == "sentence-transformers":
        import torch
        from sentence_transformers import CrossEncoder

        model = CrossEncoder(
            local, device=dev, max_length=MAX_TOKENS, local_files_only=True, activation_fn=torch.nn.Sigmoid()
        )
        _require_single_label(model.num_labels, cfg.model)
        return SentenceTransformersScorer(model=model, model_id=cfg.model, batch_size=cfg.batch_size)
    from FlagEmbedding import FlagReranker

    reranker = FlagReranker(local, use_fp16=(dev == "cuda"), devices=dev, batch_size=cfg.batch_size)
    _require_single_label(reranker.model.config.num_labels, cfg.model)
    return FlagRerankerScorer(model=reranker, model_id=cfg.model, batch_size=cfg.batch_size)


def _require_single_label(num_labels: int, name: str) -> None:
    if num_labels != 1:
        raise ValueError(f"cross-encoder {name!r} has {num_labels} output labels; a reranker with 1 is required")


def truncate(text: str, max_chars: int) -> str:
    """Character truncation, the one rule used for training and inference alike."""
    return text[:max_chars]


def pair_texts(
    candidates: pl.DataFrame, devices: pl.DataFrame, patents: pl.DataFrame, max_chars: int
) -> list[tuple[str, str]]:
    """(device text, patent text) per candidate row, in row order, both cut to `max_chars`."""
    if max_chars <= 0:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    dev_text = dict(zip(devices["fda_id"].to_list(), devices["text"].to_list(), strict=True))
    pat_text = dict(zip(patents["pat_id"].to_list(), patents["text"].to_list(), strict=True))
    fda_ids = candidates["fda_id"].to_list()
    pat_ids = candidates["pat_id"].to_list()
    missing_dev = sorted({f for f in fda_ids if not dev_text.get(f)})
    missing_pat = sorted({p for p in pat_ids if not pat_text.get(p)})
    if missing_dev or missing_pat:
        raise ValueError(
            f"candidates without text: devices {missing_dev[:10]} ({len(missing_dev)}), "
            f"patents {missing_pat[:10]} ({len(missing_pat)})"
        )
    return [
        (truncate(dev_text[f], max_chars), truncate(pat_text[p], max_chars))
        for f, p in zip(fda_ids, pat_ids, strict=True)
    ]


def score_candidate_pairs(
    candidates: pl.DataFrame,
    devices: pl.DataFrame,
    patents: pl.DataFrame,
    scorer: PairScorer | None,
    max_chars: int = 1024,
    batch_size: int = 32,
) -> pl.DataFrame:
    """schemas.CROSS_ENCODER_SCORES, one row per candidate pair in the candidates' order; no rows
    without a scorer.

    Readers left-join the scores (rerank.feature_frame), so an unscored pair's ai_score is null,
    a missing value to XGBoost, without storing a null for every pool pair (millions at corpus scale).
    """
    keys = candidates.select("fda_id", "pat_id")
    if scorer is None or candidates.height == 0:
        return schemas.conform(keys.clear(), schemas.CROSS_ENCODER_SCORES)
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    pairs = pair_texts(candidates, devices, patents, max_chars)
    # Score in length-sorted chunks (less padding per forward pass), then restore row order.
    order = np.argsort([len(d) + len(p) for d, p in pairs], kind="stable")
    scores = np.empty(len(pairs), dtype=np.float32)
    for start in range(0, len(pairs), batch_size):
        idx = order[start : start + batch_size]
        chunk = np.asarray(scorer.score([pairs[i] for i in idx]), dtype=np.float32).reshape(-1)
        if chunk.shape != (len(idx),):
            raise ValueError(f"scorer {scorer.model_id} returned {chunk.shape[0]} scores for {len(idx)} pairs")
        scores[idx] = chunk
    return schemas.conform(
        keys.with_columns(ai_score=pl.Series(scores, dtype=pl.Float32)), schemas.CROSS_ENCODER_SCORES
    )
