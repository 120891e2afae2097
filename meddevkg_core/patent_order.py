"""Each device's best patents, ties broken by pat_id ascending: one rule for every ranking.

The baselines, the benchmark's rankings and the company contest's top pairs all order a block of
device x patent scores; the same rule (the rule of `evaluation.gold_ranks`) fixes the order among
equal scores in advance, so it is never chosen by the gold, and the links and the rankings agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl

TOP_K = pl.Schema({"fda_id": pl.String, "pat_id": pl.String, "score": pl.Float64, "rank": pl.Int32})
"""Per-device top-k: rank 1 = best, ties broken by pat_id ascending."""


def finite(m: np.ndarray) -> np.ndarray:
    """NaN ranks last: a missing score must never look like a hit."""
    return np.where(np.isnan(m), -np.inf, m)


@dataclass(frozen=True)
class PatentOrder:
    """Columns permuted into pat_id-ascending order, so a stable sort on -score breaks ties by pat_id."""

    perm: np.ndarray
    sorted_ids: np.ndarray
    position: np.ndarray  # position[col] = place of column col in pat_id order

    @classmethod
    def of(cls, patent_ids: Iterable[str]) -> PatentOrder:
        ids = np.asarray(list(patent_ids), dtype=object)
        perm = np.argsort(ids.astype(str), kind="stable")
        position = np.empty(len(perm), dtype=np.int64)
        position[perm] = np.arange(len(perm))
        return cls(perm=perm, sorted_ids=ids[perm], position=position)

    def top_k_columns(self, matrix: np.ndarray, k: int) -> np.ndarray:
        """Each row's min(k, columns) best columns (indices of `matrix`), best first, ties to the
        lower pat_id, NaN last."""
        m = self._permuted(matrix)
        return self.perm[self._top_k(m, min(k, m.shape[1]))]

    def top_k_frame(self, device_ids: list[str], matrix: np.ndarray, k: int) -> pl.DataFrame:
        m = self._permuted(matrix)
        kk = min(k, m.shape[1])
        if kk <= 0 or not device_ids:
            return pl.DataFrame(schema=TOP_K)
        cols = self._top_k(m, kk)
        return pl.DataFrame(
            {
                "fda_id": np.repeat(np.asarray(device_ids, dtype=object), kk),
                "pat_id": self.sorted_ids[cols.ravel()],
                "score": np.take_along_axis(m, cols, axis=1).ravel(),
                "rank": np.tile(np.arange(1, kk + 1, dtype=np.int32), len(device_ids)),
            },
            schema=TOP_K,
        )

    def _permuted(self, matrix: np.ndarray) -> np.ndarray:
        return finite(np.asarray(matrix, dtype=np.float64)[:, self.perm])

    @staticmethod
    def _top_k(m: np.ndarray, kk: int) -> np.ndarray:
        """Columns of `m` (already in pat_id order) of each row's kk highest scores, best first."""
        n = m.shape[1]
        cols = np.empty((m.shape[0], max(kk, 0)), dtype=np.int64)
        if kk <= 0:
            return cols
        kth = np.partition(m, n - kk, axis=1)[:, n - kk]
        for i, row in enumerate(m):
            cand = np.flatnonzero(row >= kth[i])  # ascending column = ascending pat_id
            cols[i] = cand[np.argsort(-row[cand], kind="stable")][:kk]
        return cols
