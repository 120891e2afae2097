"""How much better a patent fits a device than the device's sibling products fit it.

A company files many patents and sells many devices. Most of a gold device's wrong top-ranked
patents are its own company's IP for another product (on the benchmark, 84% of the non-gold pairs
in the gold devices' top 10 are same-company patents), which the pair's own scores cannot tell
apart: the patent is about a stent, and so is the device. What tells them apart is the other
products. For a pair (d, p), the siblings are the catalogue's devices other than d that are
company-matched to p, and the features are d's cosine and TF-IDF score to p minus the best
sibling's (missing when p's company has no other device). A patent that another product of its
company fits better is probably that product's.

The index holds, per patent, the best and second-best score over its company-matched devices and
which device is best, so a pair's "best other" is one lookup. It uses no labels. It is built over
the whole device catalogue (every device the Stage-2 inputs hold), so a device's margins depend
on which devices the platform knows, not on which ones a run scores together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

SIBLING_FEATURES = ("sibling_sim_margin", "sibling_lexical_margin")


class CellScorer(Protocol):
    """Scores one device row against some patent columns (e.g. TF-IDF cosine)."""

    def score_cells(self, device_row: int, patent_cols: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class TopTwo:
    """Per patent: the best score over its company-matched devices, which device row has it
    (-1: none), and the second best (-inf: fewer than two)."""

    best_row: np.ndarray
    best: np.ndarray
    second: np.ndarray

    @staticmethod
    def of(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_patents: int) -> TopTwo:
        """From the (device row, patent column, score) cells; ties go to the lower device row."""
        best_row = np.full(n_patents, -1, np.int64)
        best = np.full(n_patents, -np.inf, np.float32)
        second = np.full(n_patents, -np.inf, np.float32)
        if len(cols):
            order = np.lexsort((rows, -values.astype(np.float64), cols))
            rows, cols, values = rows[order], cols[order], values[order]
            first = np.flatnonzero(np.r_[True, cols[1:] != cols[:-1]])
            best_row[cols[first]], best[cols[first]] = rows[first], values[first]
            nxt = first + 1
            has_second = nxt < len(cols)
            has_second[has_second] = cols[nxt[has_second]] == cols[first[has_second]]
            second[cols[first[has_second]]] = values[nxt[has_second]]
        return TopTwo(best_row, best, second)

    def others_best(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """For each (device row, patent column): the best score of another device (-inf: none)."""
        return np.where(self.best_row[cols] == rows, self.second[cols], self.best[cols])


@dataclass(frozen=True)
class SiblingIndex:
    """TopTwo of the cosine and of the lexical score (None without texts), rows as in the inputs."""

    sim: TopTwo
    lexical: TopTwo | None

    @staticmethod
    def build(device_vectors: np.ndarray, patent_vectors: np.ndarray, lexical: CellScorer | None,
              company_rows: np.ndarray, company_cols: np.ndarray) -> SiblingIndex:
        """From the company-matched cells (device rows sorted ascending, as Stage2Inputs.company_cells
        gives them); each cell is scored once, device by device, so memory follows one device's
        company patents, not the pair matrix."""
        rows, cols = _distinct(company_rows, company_cols, len(patent_vectors))
        sims = np.empty(len(rows), np.float32)
        lex = np.empty(len(rows), np.float32) if lexical is not None else None
        bounds = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1], True]) if len(rows) else np.array([0])
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            row, part = int(rows[lo]), cols[lo:hi]
            sims[lo:hi] = np.clip(patent_vectors[part] @ device_vectors[row], -1.0, 1.0)
            if lex is not None:
                lex[lo:hi] = lexical.score_cells(row, part)
        n = len(patent_vectors)
        return SiblingIndex(TopTwo.of(rows, cols, sims, n),
                            TopTwo.of(rows, cols, lex, n) if lex is not None else None)

    def margins(self, rows: np.ndarray, cols: np.ndarray, sim: np.ndarray,
                lexical: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """SIBLING_FEATURES of the pairs (device rows, patent columns) whose own scores are given;
        NaN where the patent's company has no other device (or, for the lexical one, no texts)."""
        sim_margin = _margin(sim, self.sim.others_best(rows, cols))
        if self.lexical is None:
            return sim_margin, np.full(len(rows), np.nan, np.float32)
        return sim_margin, _margin(lexical, self.lexical.others_best(rows, cols))


def _distinct(rows: np.ndarray, cols: np.ndarray, n_patents: int) -> tuple[np.ndarray, np.ndarray]:
    """The cells once each (a pair listed twice in company_matches is one sibling), by row then column."""
    keys = np.unique(rows.astype(np.int64) * max(n_patents, 1) + cols.astype(np.int64))
    return keys // max(n_patents, 1), keys % max(n_patents, 1)


def _margin(own: np.ndarray, others: np.ndarray) -> np.ndarray:
    out = own.astype(np.float32) - others
    out[~np.isfinite(others)] = np.nan
    return out.astype(np.float32)
