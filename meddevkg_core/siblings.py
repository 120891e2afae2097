"""How much better a patent fits a device than the device's sibling products fit it.

A company files many patents and sells many devices. Most of a gold device's wrong top-ranked
patents are its own company's IP for another product (on the benchmark, 84% of the non-gold pairs
in the gold devices' top 10 are same-company patents), which the pair's own scores cannot tell
apart: the patent is about a stent, and so is the device. What tells them apart is the other
products. For a pair (d, p), the siblings are the catalogue's devices other than d that are
company-matched to p, and the features are d's cosine and TF-IDF score to p minus the best
sibling's (missing when p's company has no other device). A patent that another product of its
company fits better is probably that product's. With them, `company_device_count`: how many devices
are company-matched to p.

The index holds, per patent, the best and second-best score over its company-matched devices and
which device is best, so a pair's "best other" is one lookup. It uses no labels. It is built over
the whole device catalogue (every device the Stage-2 inputs hold), so a device's margins depend
on which devices the platform knows, not on which ones a run scores together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

SIBLING_FEATURES = ("sibling_sim_margin", "sibling_lexical_margin", "company_device_count")


class CellScorer(Protocol):
    """Scores some devices against some patents (e.g. TF-IDF cosine) through `cell_scorer()`, as a
    (patents x devices) array."""

    def cell_scorer(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray]: ...


CELLS_PER_STEP = 1 << 22
"""At most this many (patent, device) scores are held at once while the index is built."""


@dataclass
class TopTwo:
    """Per patent: the best score over its company-matched devices, which device row has it
    (-1: none), and the second best (-inf: fewer than two). Ties go to the lower device row."""

    best_row: np.ndarray
    best: np.ndarray
    second: np.ndarray

    @staticmethod
    def empty(n_patents: int) -> TopTwo:
        return TopTwo(np.full(n_patents, -1, np.int64), np.full(n_patents, -np.inf, np.float32),
                      np.full(n_patents, -np.inf, np.float32))

    def add(self, cols: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
        """Fold in `values` (len(cols) x len(rows)): devices `rows` at the distinct patent columns `cols`."""
        at = np.arange(len(cols))
        pick = values.argmax(axis=1)  # the first of equal maxima: rows come ascending
        best, best_row = values[at, pick].astype(np.float32), rows[pick]
        if values.shape[1] > 1:
            rest = values.astype(np.float32, copy=True)
            rest[at, pick] = -np.inf
            second = rest.max(axis=1)
        else:
            second = np.full(len(cols), -np.inf, np.float32)
        old, old_row, old_second = self.best[cols], self.best_row[cols], self.second[cols]
        wins = (best > old) | ((best == old) & (best_row < old_row))
        self.best[cols] = np.where(wins, best, old)
        self.best_row[cols] = np.where(wins, best_row, old_row)
        self.second[cols] = np.where(wins, np.maximum(old, second), np.maximum(old_second, best))

    def others_best(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """For each (device row, patent column): the best score of another device (-inf: none)."""
        return np.where(self.best_row[cols] == rows, self.second[cols], self.best[cols])


@dataclass(frozen=True)
class SiblingIndex:
    """TopTwo of the cosine and of the lexical score (None without texts), rows as in the inputs,
    and how many devices are company-matched to each patent (`company_device_count`: a patent of a
    company with many products is less likely any one product's)."""

    sim: TopTwo
    lexical: TopTwo | None
    device_count: np.ndarray

    @staticmethod
    def build(device_vectors: np.ndarray, patent_vectors: np.ndarray, lexical: CellScorer | None,
              company_rows: np.ndarray, company_cols: np.ndarray) -> SiblingIndex:
        """From the company-matched cells. A company's devices mostly match the same patents, so
        devices with the same patent set are scored together: each such set's patent vectors and
        TF-IDF rows are read once for all its devices, in steps of at most CELLS_PER_STEP scores."""
        n = len(patent_vectors)
        sim, lex = TopTwo.empty(n), TopTwo.empty(n) if lexical is not None else None
        score_words = lexical.cell_scorer() if lexical is not None else None
        cells = _distinct(company_rows, company_cols, n)
        for cols, rows in _devices_by_patent_set(*cells):
            step = max(1, CELLS_PER_STEP // len(rows))
            for start in range(0, len(cols), step):
                part = cols[start:start + step]
                sim.add(part, rows, np.clip(patent_vectors[part] @ device_vectors[rows].T, -1.0, 1.0))
                if lex is not None:
                    assert score_words is not None  # both are made when there is a lexical scorer
                    lex.add(part, rows, score_words(rows, part))
        return SiblingIndex(sim, lex, np.bincount(cells[1], minlength=n).astype(np.int16))

    def features(self, rows: np.ndarray, cols: np.ndarray, sim: np.ndarray,
                 lexical: np.ndarray) -> dict[str, np.ndarray]:
        """SIBLING_FEATURES by name for the pairs (device rows, patent columns) with these own scores."""
        return dict(zip(SIBLING_FEATURES, (*self.margins(rows, cols, sim, lexical), self.device_count[cols]),
                        strict=True))

    def margins(self, rows: np.ndarray, cols: np.ndarray, sim: np.ndarray,
                lexical: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """SIBLING_FEATURES of the pairs (device rows, patent columns) whose own scores are given;
        NaN where the patent's company has no other device (or, for the lexical one, no texts)."""
        sim_margin = _margin(sim, self.sim.others_best(rows, cols))
        if self.lexical is None:
            return sim_margin, np.full(len(rows), np.nan, np.float32)
        return sim_margin, _margin(lexical, self.lexical.others_best(rows, cols))


def _devices_by_patent_set(rows: np.ndarray, cols: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(patent columns, device rows ascending) for each distinct set of columns a device matches."""
    bounds = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1], True]) if len(rows) else np.array([0])
    groups: dict[bytes, tuple[np.ndarray, list[int]]] = {}
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        part = cols[lo:hi]
        groups.setdefault(part.tobytes(), (part, []))[1].append(int(rows[lo]))
    return [(part, np.array(members, np.int64)) for part, members in groups.values()]


def _distinct(rows: np.ndarray, cols: np.ndarray, n_patents: int) -> tuple[np.ndarray, np.ndarray]:
    """The cells once each (a pair listed twice in company_matches is one sibling), by row then column."""
    keys = np.sort(rows.astype(np.int64) * max(n_patents, 1) + cols.astype(np.int64))
    keys = keys[np.r_[True, keys[1:] != keys[:-1]]] if len(keys) else keys
    return keys // max(n_patents, 1), keys % max(n_patents, 1)


def _margin(own: np.ndarray, others: np.ndarray) -> np.ndarray:
    out = own.astype(np.float32) - others
    out[~np.isfinite(others)] = np.nan
    return out.astype(np.float32)
