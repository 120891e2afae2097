"""Leak-free retrieval baselines scored over EVERY device x patent pair (METHOD.md §5.3, §9.18).

The paper's Step 7 ranked a 50K subset with the gold patents first in index order, left the
Company baseline's ties to numpy's argsort (so the contiguous gold block floated up), and capped
nothing else. Here a baseline is a `Scorer` over the whole corpus, fit only on patent texts (no
query or gold information), and every ranking breaks ties by pat_id ascending, the same rule as
`evaluation.gold_ranks`, so an order among equal scores is fixed in advance and never chosen by
the gold. Scores come block by block, so recall-vs-volume curves (`curves.py`) can sweep all pairs
without holding the full matrix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol, runtime_checkable

import bm25s
import numpy as np
import polars as pl
from scipy import sparse
from scipy.stats import rankdata
from sklearn.feature_extraction.text import TfidfVectorizer

from meddevkg_core.curves import recall_volume_curve
from meddevkg_core.embeddings import l2_normalise
from meddevkg_core.evaluation import rank_metrics
from meddevkg_core.patent_order import TOP_K, PatentOrder, finite

GOLD_RANKS = pl.Schema({"fda_id": pl.String, "pat_id": pl.String, "rank": pl.Int64})
"""Exact rank of each gold pair among all patents (null when the pair is not in the corpus)."""

RRF_K = 60.0


@runtime_checkable
class Scorer(Protocol):
    """Scores device rows against all patents; columns follow the corpus' patent order."""

    @property
    def n_patents(self) -> int: ...

    def score_block(self, device_rows: list[int]) -> np.ndarray: ...


# --------------------------------------------------------------------------- scorers


@dataclass(frozen=True)
class TfidfScorer:
    """TF-IDF cosine; the vocabulary and IDF come from the patents only, never from the queries."""

    devices: sparse.csr_matrix
    patents: sparse.csr_matrix

    @classmethod
    def fit(cls, device_texts: Sequence[str], patent_texts: Sequence[str], max_features: int | None = None
            ) -> TfidfScorer:
        return cls.fit_views([device_texts], patent_texts, max_features)[0]

    @classmethod
    def fit_views(cls, device_views: Sequence[Sequence[str]], patent_texts: Sequence[str],
                  max_features: int | None = None) -> list[TfidfScorer]:
        """One scorer per view of the devices (e.g. their text, their dossier), all sharing one
        fit on the patents and its patent matrix."""
        vec = TfidfVectorizer(stop_words="english", sublinear_tf=True, lowercase=True, max_features=max_features)
        patents = vec.fit_transform(list(patent_texts)).tocsr()
        return [cls(devices=vec.transform(list(texts)).tocsr(), patents=patents) for texts in device_views]

    @property
    def n_patents(self) -> int:
        return int(self.patents.shape[0])

    @cached_property
    def _patents_by_term(self) -> sparse.csr_matrix:
        """patents.T as CSR, built once: `@ patents.T` would convert the whole matrix on every block."""
        return self.patents.T.tocsr()

    def score_block(self, device_rows: list[int]) -> np.ndarray:
        return np.asarray((self.devices[device_rows] @ self._patents_by_term).toarray(), dtype=np.float64)

    def cell_scorer(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """Scores of (device rows, patent columns) as a (patents x devices) array, `score_block`'s
        values there. It holds the patents row-major while the caller keeps it: a copy only when
        they are stored column-major (synthetic_corpus), where taking rows would scan every entry."""
        patents, devices = self.patents.tocsr(), self.devices

        def score(device_rows: np.ndarray, patent_cols: np.ndarray) -> np.ndarray:
            return np.asarray((patents[patent_cols] @ devices[device_rows].T).toarray(), np.float64)
        return score


@dataclass(frozen=True)
class Bm25Scorer:
    """BM25 (bm25s, Lucene variant) with each device text as a query against the patent index.

    Tokens: bm25s' scikit-learn-style regex, lower case, English stop words (the paper split on
    whitespace, §9.18). Repeated query terms count repeatedly, as in bm25s' own retrieval.
    """

    retriever: bm25s.BM25
    queries: tuple[tuple[int, ...], ...]

    @classmethod
    def fit(cls, device_texts: Sequence[str], patent_texts: Sequence[str], k1: float = 1.5, b: float = 0.75,
            method: str = "lucene") -> Bm25Scorer:
        retriever = bm25s.BM25(k1=k1, b=b, method=method)
        retriever.index(_bm25_tokens(patent_texts), show_progress=False)
        queries = tuple(tuple(retriever.get_tokens_ids([t for t in q if t])) for q in _bm25_tokens(device_texts))
        return cls(retriever=retriever, queries=queries)

    @property
    def n_patents(self) -> int:
        return int(self.retriever.scores["num_docs"])

    def score_block(self, device_rows: list[int]) -> np.ndarray:
        out = np.zeros((len(device_rows), self.n_patents), dtype=np.float32)
        for i, row in enumerate(device_rows):
            if self.queries[row]:  # a query with no indexed term scores 0 everywhere
                out[i] = self.retriever.get_scores_from_ids(list(self.queries[row]))
        return out


def _bm25_tokens(texts: Sequence[str]) -> list[list[str]]:
    return bm25s.tokenize(list(texts), lower=True, stopwords="en", return_ids=False, show_progress=False)


@dataclass(frozen=True)
class CosineScorer:
    """Embedding cosine (e.g. SBERT); rows are re-normalised so unnormalised inputs stay cosines."""

    devices: np.ndarray
    patents: np.ndarray

    @classmethod
    def of(cls, device_vectors: np.ndarray, patent_vectors: np.ndarray) -> CosineScorer:
        d, p = l2_normalise(device_vectors), l2_normalise(patent_vectors)
        if d.shape[1] != p.shape[1]:
            raise ValueError(f"device dimension {d.shape[1]} != patent dimension {p.shape[1]}")
        return cls(devices=d, patents=p)

    @property
    def n_patents(self) -> int:
        return int(self.patents.shape[0])

    def score_block(self, device_rows: list[int]) -> np.ndarray:
        return self.devices[device_rows] @ self.patents.T


@dataclass(frozen=True)
class CompanyScorer:
    """1 for pairs in a company match table, else 0: the company-only baseline, ties left to pat_id."""

    matches: sparse.csr_matrix

    @classmethod
    def from_matches(cls, matches: pl.DataFrame, device_ids: Sequence[str], patent_ids: Sequence[str]
                     ) -> CompanyScorer:
        rows, cols = _pair_positions(matches, device_ids, patent_ids)
        data = np.ones(len(rows), dtype=np.float32)
        m = sparse.csr_matrix((data, (rows, cols)), shape=(len(device_ids), len(patent_ids)))
        m.data[:] = 1.0  # duplicate pairs (several match paths) still score 1
        return cls(matches=m)

    @property
    def n_patents(self) -> int:
        return int(self.matches.shape[1])

    def score_block(self, device_rows: list[int]) -> np.ndarray:
        return self.matches[device_rows].toarray()


@dataclass(frozen=True)
class FusionScorer:
    """Reciprocal-rank fusion over full per-device rankings.

    Tied scores share their average rank, so fusion never inherits an arbitrary tie order (the
    company scorer is mostly ties); the result depends only on the member scores.
    """

    scorers: tuple[Scorer, ...]
    k: float = RRF_K
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not self.scorers:
            raise ValueError("fusion needs at least one scorer")
        if len({s.n_patents for s in self.scorers}) != 1:
            raise ValueError("fused scorers disagree on the number of patents")
        if self.weights is not None and len(self.weights) != len(self.scorers):
            raise ValueError("one weight per scorer")

    @property
    def n_patents(self) -> int:
        return self.scorers[0].n_patents

    def score_block(self, device_rows: list[int]) -> np.ndarray:
        weights = self.weights or (1.0,) * len(self.scorers)
        out = np.zeros((len(device_rows), self.n_patents), dtype=np.float64)
        for scorer, weight in zip(self.scorers, weights, strict=True):
            scores = finite(np.asarray(scorer.score_block(device_rows), dtype=np.float64))
            out += weight / (self.k + rankdata(-scores, method="average", axis=1))
        return out


# --------------------------------------------------------------------------- scoring all pairs


def all_pair_scores_iter(scorer: Scorer, device_ids: Sequence[str], block: int = 64
                         ) -> Iterator[tuple[list[str], np.ndarray]]:
    """(device ids, n_block x n_patents scores) for consecutive device blocks: all pairs, bounded memory."""
    if block < 1:
        raise ValueError("block must be >= 1")
    ids = list(device_ids)
    for start in range(0, len(ids), block):
        rows = list(range(start, min(start + block, len(ids))))
        matrix = np.asarray(scorer.score_block(rows))
        if matrix.shape != (len(rows), scorer.n_patents):
            raise ValueError(f"scorer returned {matrix.shape}, expected {(len(rows), scorer.n_patents)}")
        yield ids[start : start + len(rows)], matrix


def top_k(scorer: Scorer, device_ids: Sequence[str], patent_ids: Sequence[str], k: int = 500, block: int = 64
          ) -> pl.DataFrame:
    """Per-device top-k as TOP_K (rank 1 = best; ties by pat_id ascending)."""
    _check_patents(scorer, patent_ids)
    order = PatentOrder.of(patent_ids)
    frames = [order.top_k_frame(ids, m, k) for ids, m in all_pair_scores_iter(scorer, device_ids, block)]
    return pl.concat(frames) if frames else pl.DataFrame(schema=TOP_K)


def exact_gold_ranks(scorer: Scorer, device_ids: Sequence[str], patent_ids: Sequence[str], gold: pl.DataFrame,
                     block: int = 64) -> pl.DataFrame:
    """Rank of every gold pair among ALL patents of its device (not capped at k), as GOLD_RANKS."""
    _check_patents(scorer, patent_ids)
    order = PatentOrder.of(patent_ids)
    ranks = _GoldRanker.of(gold, device_ids, patent_ids, order)
    for ids, m in all_pair_scores_iter(scorer, device_ids, block):
        ranks.update(ids, m)
    return ranks.frame()


@dataclass(frozen=True)
class ScorerRun:
    top: pl.DataFrame
    gold_ranks: pl.DataFrame
    curve: pl.DataFrame
    metrics: dict[str, float]


def run_scorer(scorer: Scorer, device_ids: Sequence[str], patent_ids: Sequence[str], gold: pl.DataFrame,
               k: int = 500, block: int = 64, points: int = 200, ks: tuple[int, ...] = (10, 50, 100, 500)
               ) -> ScorerRun:
    """Top-k, exact gold ranks, metrics and the recall-volume curve from ONE pass over all pairs."""
    return run_scorer_reordered(scorer, None, device_ids, patent_ids, gold, k, block, points, ks)[0]


def run_scorer_reordered(scorer: Scorer, reorder: Callable[[list[str], np.ndarray], np.ndarray] | None,
                         device_ids: Sequence[str], patent_ids: Sequence[str], gold: pl.DataFrame,
                         k: int = 500, block: int = 64, points: int = 200,
                         ks: tuple[int, ...] = (10, 50, 100, 500)) -> tuple[ScorerRun, ScorerRun | None]:
    """`run_scorer`, and with `reorder` (device ids, block scores) -> block scores, a second run from
    the same pass: each device's reordered top-k, gold ranks and metrics, with the first run's curve
    (a per-device order says nothing about a cut-off across devices)."""
    _check_patents(scorer, patent_ids)
    order = PatentOrder.of(patent_ids)
    rankers = [_GoldRanker.of(gold, device_ids, patent_ids, order) for _ in range(1 if reorder is None else 2)]
    frames: list[list[pl.DataFrame]] = [[] for _ in rankers]

    def blocks() -> Iterator[tuple[list[str], np.ndarray]]:
        for ids, m in all_pair_scores_iter(scorer, device_ids, block):
            views = [m] if reorder is None else [m, np.asarray(reorder(ids, m))]
            for view, ranker, tops in zip(views, rankers, frames, strict=True):
                tops.append(order.top_k_frame(ids, view, k))
                ranker.update(ids, view)
            yield ids, m

    curve = recall_volume_curve(blocks(), gold, device_ids, patent_ids, points=points)
    runs = []
    for ranker, tops in zip(rankers, frames, strict=True):
        ranks = ranker.frame()
        top = pl.concat(tops) if tops else pl.DataFrame(schema=TOP_K)
        runs.append(ScorerRun(top=top, gold_ranks=ranks, curve=curve, metrics=rank_metrics(ranks, ks)))
    return runs[0], (runs[1] if reorder is not None else None)


# --------------------------------------------------------------------------- internals


def _check_patents(scorer: Scorer, patent_ids: Sequence[str]) -> None:
    if scorer.n_patents != len(patent_ids):
        raise ValueError(f"scorer has {scorer.n_patents} patents, {len(patent_ids)} patent ids given")
    if len(set(patent_ids)) != len(patent_ids):
        raise ValueError("patent ids must be unique")


def _pair_positions(pairs: pl.DataFrame, device_ids: Sequence[str], patent_ids: Sequence[str]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of each (fda_id, pat_id) pair in the corpus; pairs outside it are dropped."""
    index = pairs.select("fda_id", "pat_id").unique().join(
        pl.DataFrame({"fda_id": list(device_ids), "row": np.arange(len(device_ids))},
                     schema={"fda_id": pl.String, "row": pl.Int64}), on="fda_id").join(
        pl.DataFrame({"pat_id": list(patent_ids), "col": np.arange(len(patent_ids))},
                     schema={"pat_id": pl.String, "col": pl.Int64}), on="pat_id")
    return index["row"].to_numpy(), index["col"].to_numpy()


@dataclass
class _GoldRanker:
    """Exact gold ranks: 1 + #higher scores + #equal scores with a smaller pat_id."""

    gold: pl.DataFrame  # fda_id, pat_id: every distinct gold pair, in corpus or not
    order: PatentOrder
    col_of: dict[str, int]
    cols_by_device: dict[str, list[int]]
    found: dict[tuple[str, int], int]

    @classmethod
    def of(cls, gold: pl.DataFrame, device_ids: Sequence[str], patent_ids: Sequence[str], order: PatentOrder
           ) -> _GoldRanker:
        col_of = {p: j for j, p in enumerate(patent_ids)}
        known = set(device_ids)
        pairs = gold.select(pl.col("fda_id").cast(pl.String), pl.col("pat_id").cast(pl.String)).unique(
            maintain_order=True)
        by_device: dict[str, list[int]] = {}
        for fda_id, pat_id in pairs.iter_rows():
            if fda_id in known and pat_id in col_of:
                by_device.setdefault(fda_id, []).append(col_of[pat_id])
        return cls(gold=pairs, order=order, col_of=col_of, cols_by_device=by_device, found={})

    def update(self, device_ids: list[str], matrix: np.ndarray) -> None:
        for i, fda_id in enumerate(device_ids):
            cols = self.cols_by_device.get(fda_id)
            if not cols:
                continue
            row = finite(np.asarray(matrix[i], dtype=np.float64))
            for col in cols:
                s, pos = row[col], self.order.position[col]
                tied_before = np.count_nonzero((row == s) & (self.order.position < pos))
                self.found[(fda_id, col)] = 1 + int(np.count_nonzero(row > s)) + int(tied_before)

    def frame(self) -> pl.DataFrame:
        ranks = [self.found.get((f, self.col_of.get(p, -1))) for f, p in self.gold.iter_rows()]
        return self.gold.with_columns(pl.Series("rank", ranks, dtype=pl.Int64)).select(
            [pl.col(c).cast(t) for c, t in GOLD_RANKS.items()])
