"""Stage 3's last step: each device's top pairs re-ordered by a text similarity learned on the gold.

The reranker is a classifier over pair features, trained to separate gold pairs from the whole
pool; the patents it ranks first for a device are mostly the right company's, and among those the
text decides. Out-of-fold on the benchmark (three reranker seeds), its first gold patent sat at a
mean reciprocal rank of 0.49, and reciprocal-rank fusion of its top 30 with the plain MiniLM
cosine already raised that to 0.56.

The adapter is a linear map W of the sentence embeddings (initialised to the identity), trained on
gold devices with a listwise softmax loss: each gold patent against the device's most similar
non-gold pool patents (its hard negatives, chosen by the raw cosine, so without any model in the
loop). Several seeds are averaged. It is cheap (seconds on a CPU, no re-encoding) and trained
inside the same device-grouped folds as the reranker, so a gold device is re-ordered by an adapter
that never saw it.

Fusion: a device's `top_k` pairs by probability are re-ordered by reciprocal-rank fusion,
1 / (rrf_k + probability rank) + 1 / (rrf_k + adapted-similarity rank); every pair below them keeps
its probability order. Link decisions do not change (probability over the cut-off): only the order
of a device's pairs does, which is what R@K, MRR and a reviewer reading a device's links see.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from meddevkg_core.config import TextAdapterConfig
from meddevkg_core.device_names import head_words_of
from meddevkg_core.embeddings import embedding_matrix, l2_normalise

if TYPE_CHECKING:
    from meddevkg_core.block_scores import Stage2Inputs


@dataclass(frozen=True)
class Vectors:
    """Device and patent embeddings by id (rows of `embedding_matrix`), and what the reranker
    compares devices by besides: the words of their label heads (device_names.head_words)."""

    device_ids: Sequence[str]
    device_vectors: np.ndarray
    patent_ids: Sequence[str]
    patent_vectors: np.ndarray
    device_words: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @staticmethod
    def of(device_embeddings: pl.DataFrame, patent_embeddings: pl.DataFrame,
           devices: pl.DataFrame | None = None) -> Vectors:
        """From embedding tables (doc_id, vector), as the embedding assets store them, and the
        devices' label texts (fda_id, text) when given."""
        device_ids, device_vectors = embedding_matrix(device_embeddings)
        patent_ids, patent_vectors = embedding_matrix(patent_embeddings)
        words = head_words_of(devices.select("fda_id", "text").iter_rows()) if devices is not None else {}
        return Vectors(device_ids, device_vectors, patent_ids, patent_vectors, words)

    @staticmethod
    def of_inputs(inputs: Stage2Inputs) -> Vectors:
        """The vectors Stage 2 scored with."""
        return Vectors(inputs.device_ids, inputs.device_vectors, inputs.patent_ids, inputs.patent_vectors,
                       inputs.device_words)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_device_row", {d: i for i, d in enumerate(self.device_ids)})
        object.__setattr__(self, "_patent_row", {p: i for i, p in enumerate(self.patent_ids)})

    def with_patents(self, patent_embeddings: pl.DataFrame) -> Vectors:
        """The same devices with these patents' vectors instead."""
        patent_ids, patent_vectors = embedding_matrix(patent_embeddings)
        return Vectors(self.device_ids, self.device_vectors, patent_ids, patent_vectors, self.device_words)

    def devices(self, ids: Sequence[str]) -> np.ndarray:
        return self.device_vectors[[self._device_row[d] for d in ids]]  # type: ignore[attr-defined]

    def patents(self, ids: Sequence[str]) -> np.ndarray:
        return self.patent_vectors[[self._patent_row[p] for p in ids]]  # type: ignore[attr-defined]

    def has_device(self, fda_id: str) -> bool:
        return fda_id in self._device_row  # type: ignore[attr-defined]

    def has_patent(self, pat_id: str) -> bool:
        return pat_id in self._patent_row  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TextAdapter:
    """`ensemble` linear maps; the similarity of a pair is the mean cosine of its mapped vectors."""

    matrices: np.ndarray  # (ensemble, dim, dim) float32

    def similarity(self, device_vectors: np.ndarray, patent_vectors: np.ndarray) -> np.ndarray:
        """Row i: device_vectors[i] against patent_vectors[i]."""
        out = np.zeros(len(device_vectors), np.float64)
        for w in self.matrices:
            out += np.einsum("ij,ij->i", l2_normalise(device_vectors @ w), l2_normalise(patent_vectors @ w))
        return (out / len(self.matrices)).astype(np.float32)

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.save(buffer, self.matrices.astype(np.float32), allow_pickle=False)
        return buffer.getvalue()

    @staticmethod
    def from_bytes(data: bytes) -> TextAdapter:
        return TextAdapter(np.load(io.BytesIO(data), allow_pickle=False))


def training_groups(labeled: pl.DataFrame, gold: pl.DataFrame, vectors: Vectors,
                    n_negatives: int) -> list[tuple[str, str, list[str]]]:
    """(device, gold patent, hard negatives) for every gold pair with vectors.

    Hard negatives: the device's `n_negatives` non-gold pool pairs of highest raw cosine (`sim`).
    """
    pool = labeled.filter(pl.col("in_pool") if "in_pool" in labeled.columns else pl.lit(True))
    negatives = (pool.filter(pl.col("label") == 0)
                 .sort(["fda_id", "sim", "pat_id"], descending=[False, True, False])
                 .group_by("fda_id", maintain_order=True).head(n_negatives)
                 .group_by("fda_id", maintain_order=True).agg(pl.col("pat_id")))
    by_device = dict(negatives.iter_rows())
    pairs = gold.sort("fda_id", "pat_id").select("fda_id", "pat_id").iter_rows()
    return [(d, p, by_device.get(d, [])) for d, p in pairs if vectors.has_device(d) and vectors.has_patent(p)]


def fit_text_adapter(groups: list[tuple[str, str, list[str]]], vectors: Vectors,
                     cfg: TextAdapterConfig) -> TextAdapter | None:
    """Train `cfg.ensemble` maps (seeds cfg.seed, +1000, ...); None without a training group."""
    if not groups:
        return None
    import torch

    dim = vectors.device_vectors.shape[1]
    device = torch.from_numpy(vectors.devices([d for d, _, _ in groups]).astype(np.float32))
    candidates = [torch.from_numpy(vectors.patents([p, *negs]).astype(np.float32)) for _, p, negs in groups]
    target = torch.zeros(1, dtype=torch.long)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny steps: one thread is faster, and the result does not depend on the host
    try:
        matrices = []
        for member in range(cfg.ensemble):
            generator = torch.Generator().manual_seed(cfg.seed + 1000 * member)
            w = torch.nn.Parameter(torch.eye(dim))
            optimiser = torch.optim.Adam([w], lr=cfg.learning_rate)
            for _ in range(cfg.epochs):
                for i in torch.randperm(len(groups), generator=generator).tolist():
                    d = torch.nn.functional.normalize(device[i] @ w, dim=0)
                    p = torch.nn.functional.normalize(candidates[i] @ w, dim=1)
                    loss = torch.nn.functional.cross_entropy((p @ d / cfg.temperature)[None], target)
                    optimiser.zero_grad()
                    loss.backward()
                    optimiser.step()
            matrices.append(w.detach().numpy().copy())
    finally:
        torch.set_num_threads(threads)
    return TextAdapter(np.stack(matrices).astype(np.float32))


def fused_scores(probability: np.ndarray, text_similarity: Callable[[np.ndarray], np.ndarray],
                 cfg: TextAdapterConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One device's ranking score for each of its pairs (see the module docstring).

    `probability` is in the pairs' tie-break order; `text_similarity(rows)` gives the adapted
    similarity of those rows. The top k get 1 + (k + 1 - fused place) / (k + 1), above every
    probability, fused ties going to the higher probability; the rest keep their probability.
    Returns (score, rows of the top k, their similarity).
    """
    n = len(probability)
    order = np.lexsort((np.arange(n), -probability.astype(np.float64)))
    top = order[:min(cfg.top_k, n)]
    score = probability.astype(np.float64).copy()
    if len(top) == 0:
        return score, top, np.zeros(0, np.float32)
    sims = np.asarray(text_similarity(top), np.float32)
    places = np.arange(1, len(top) + 1)
    text_rank = np.empty(len(top), np.int64)
    text_rank[np.lexsort((places, -sims.astype(np.float64)))] = places
    fused = 1.0 / (cfg.rrf_k + places) + 1.0 / (cfg.rrf_k + text_rank)
    final = np.empty(len(top), np.int64)
    final[np.lexsort((places, -fused))] = places
    score[top] = 1.0 + (len(top) + 1 - final) / (len(top) + 1)
    return score, top, sims


def similarity_of(adapter: TextAdapter, vectors: Vectors, fda_id: str,
                pat_ids: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Adapted similarity of one device's rows; NaN (ranked last) for a patent without a vector."""
    def of(rows: np.ndarray) -> np.ndarray:
        pats = pat_ids[rows].tolist()
        known = np.array([vectors.has_patent(p) for p in pats], bool)
        out = np.full(len(pats), np.nan, np.float32)
        if known.any():
            kept = [p for p, k in zip(pats, known, strict=True) if k]
            out[known] = adapter.similarity(vectors.devices([fda_id] * len(kept)), vectors.patents(kept))
        return out
    return of


def ranked_patents(scored: pl.DataFrame, cfg: TextAdapterConfig) -> pl.Series:
    """The patents whose vectors `device_ranks` reads: each device's `top_k` pairs by probability,
    and any pair tied with its k-th, so the set never depends on the tie-break (sorted ids).

    A caller that holds no patent vectors reads just these: at most top_k per device, where the
    corpus's are a GB at 698K patents."""
    if not cfg.enabled or scored.height == 0:
        return pl.Series("pat_id", [], pl.String)
    kth = pl.col("probability").top_k(cfg.top_k).min().over("fda_id")
    return scored.filter(pl.col("probability") >= kth)["pat_id"].unique().sort()


def device_ranks(scored: pl.DataFrame, adapter_for: Callable[[str], TextAdapter | None],
                 vectors: Vectors | None, cfg: TextAdapterConfig) -> tuple[np.ndarray, np.ndarray]:
    """`rank` within each device (1 = first) and `text_sim` (NaN where none) for each row of `scored`.

    `scored` holds pairs with a `probability`, sorted by pair. `text_sim` is the adapted similarity
    of a device's top-k pairs (NaN below them, or when the device has no adapter or vector); those
    pairs are fused as `fused_scores` does, ties in probability broken by patent id.
    """
    n = scored.height
    rank = np.zeros(n, np.int32)
    text_sim = np.full(n, np.nan, np.float32)
    probability = scored["probability"].to_numpy().astype(np.float64)
    pat_ids = scored["pat_id"].to_numpy()
    fda_ids = scored["fda_id"]
    runs = scored.select(pl.col("fda_id").rle().struct.field("len")).to_series().to_numpy()
    starts = np.cumsum(runs) - runs  # of no pairs, none (an empty pool)
    for start, length in zip(starts.tolist(), runs.tolist(), strict=True):
        rows = slice(start, start + length)
        fda_id = fda_ids[start]
        if (cfg.enabled and vectors is not None and (adapter := adapter_for(fda_id)) is not None
                and vectors.has_device(fda_id)):
            score, top, sims = fused_scores(probability[rows], similarity_of(adapter, vectors, fda_id, pat_ids[rows]),
                                            cfg)
            text_sim[start + top] = sims
        else:
            score = probability[rows]
        order = np.lexsort((np.arange(length), -score))
        rank[start + order] = np.arange(1, length + 1, dtype=np.int32)
    return rank, text_sim
