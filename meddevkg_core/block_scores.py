"""Stage 2's scores: every score component of every device x patent pair, a block of devices at a time.

S = S_company (0/20) + S_vector (discretised cosine) + S_entity (best tier match), with the cosine's
z-scores, the lexical and dossier scores and the sibling features beside it (METHOD.md §3). The pair
table is never materialised: each block of devices is scored against every patent, and its pairs are
admitted (candidates.py) before the next block is scored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np
import polars as pl

from meddevkg_core.config import CandidateConfig
from meddevkg_core.entity_match import EntityMatcher
from meddevkg_core.progress import Progress, no_progress
from meddevkg_core.siblings import SiblingIndex


class LexicalScorer(Protocol):
    """Scores device rows against every patent by words (e.g. TF-IDF cosine), rows as in Stage2Inputs."""

    def score_block(self, device_rows: list[int]) -> np.ndarray: ...

    def cell_scorer(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray]: ...


@dataclass(frozen=True)
class Stage2Inputs:
    """Everything Stage 2 reads, aligned by row: vectors are L2-normalised float32 rows."""

    device_ids: list[str]
    device_vectors: np.ndarray
    patent_ids: list[str]
    patent_vectors: np.ndarray
    company_matches: pl.DataFrame  # fda_id, pat_id, match_kind, company_path (matching pairs only)
    entities: EntityMatcher
    lexical: LexicalScorer | None = None
    dossier: LexicalScorer | None = None
    """The lexical scorer over the devices' dossiers (dossier), when their supplements are known."""
    device_words: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The words of each device's label head (device_names), when the texts are known: Stage 3
    compares product lines by them."""
    last_decision_year: np.ndarray | None = None
    """Per device row, the year of its latest FDA decision (device_activity; NaN unknown), when
    its supplements are known; with `grant_year`, the pool's granted_after_last_decision."""
    grant_year: np.ndarray | None = None
    """Per patent column, its grant year (NaN unknown)."""

    @cached_property
    def patent_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of each patent's cosine over all devices, exact, without the pair matrix."""
        return _moments(self.patent_vectors, self.device_vectors)

    @cached_property
    def company_cells(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Company matches as (device row, patent column, via a deal), ordered by device row.

        Rows keep their table order within a device, so a pair listed twice is written in the same
        order as before. A null match_kind counts as "same", as before. Pairs naming an unknown
        device or patent are left out (before, an unknown patent raised a KeyError).
        """
        cm = self.company_matches  # ids may also be Categorical (a compact table), compared as strings
        rows = pl.DataFrame({"fda_id": self.device_ids, "_row": np.arange(len(self.device_ids), dtype=np.int32)},
                            schema={"fda_id": pl.String, "_row": pl.Int32})
        cols = pl.DataFrame({"pat_id": self.patent_ids, "_col": np.arange(len(self.patent_ids), dtype=np.int32)},
                            schema={"pat_id": pl.String, "_col": pl.Int32})
        cells = (cm.select(pl.col("fda_id").cast(pl.String), pl.col("pat_id").cast(pl.String),
                           (pl.col("match_kind") != "same").alias("_deal"))
                 .with_row_index("_order")
                 .join(rows, on="fda_id", how="inner").join(cols, on="pat_id", how="inner")
                 .sort("_row", "_order"))
        return cells["_row"].to_numpy(), cells["_col"].to_numpy(), cells["_deal"].fill_null(False).to_numpy()

    @cached_property
    def siblings(self) -> SiblingIndex:
        """Each patent's best-fitting company-matched devices (siblings), over every device here."""
        rows, cols, _ = self.company_cells
        return SiblingIndex.build(self.device_vectors, self.patent_vectors, self.lexical, rows, cols)

    @cached_property
    def device_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of each device's cosine over all patents (E[x.y], E[(x.y)^2] = x'Cx)."""
        return _moments(self.device_vectors, self.patent_vectors)


def _moments(rows: np.ndarray, others: np.ndarray, chunk: int = 65_536) -> tuple[np.ndarray, np.ndarray]:
    """E[x.y] and E[(x.y)^2] = x'Cx per row, through BLAS in row chunks (no pair matrix, O(d^2) extra).

    (A three-operand einsum here ran a naive O(rows x d^2) loop: minutes at 698K patents.)
    """
    n = max(len(others), 1)
    mean = rows @ others.mean(axis=0)
    cov = (others.T @ others) / n
    second = np.empty(len(rows), mean.dtype)
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        second[start:start + chunk] = np.einsum("ij,ij->i", part @ cov, part)
    return mean.astype(np.float32), np.sqrt(np.maximum(second - mean**2, 1e-12)).astype(np.float32)


def vector_points(sim: np.ndarray, cfg: CandidateConfig) -> np.ndarray:
    """Discretise cosine into bins, applied to the unrounded value (rows are devices).

    In device_quantile mode a bin's cut-off is that quantile of the device's own cosines over
    all patents, so the points mean "among this device's most similar patents" whatever the
    encoder's cosine scale is.
    """
    points = np.zeros(sim.shape, np.int16)
    if cfg.vector_mode == "absolute":
        for b in sorted(cfg.vector_bins, key=lambda b: b.min_cosine):
            points[sim >= b.min_cosine] = b.points
        return points
    bins = sorted(cfg.vector_quantile_bins, key=lambda b: b.min_quantile)
    cuts = np.quantile(sim, [b.min_quantile for b in bins], axis=1)
    for q, cut in zip(bins, cuts, strict=True):
        points[sim >= cut[:, None]] = q.points
    return points


@dataclass(frozen=True)
class BlockScores:
    """Every score component for a block of devices x all patents (dense, bounded by the block).

    The cosine z-scores are not stored: they are `sim` standardised by per-device and per-patent
    moments, so `z_at` gives them for the selected pairs only (the same float32 arithmetic as the
    dense `sim_z_device` / `sim_z_patent`, which are still there for callers that want every pair).
    """

    device_ids: list[str]
    sim: np.ndarray
    company: np.ndarray  # float32 points
    vector: np.ndarray  # int16 points (total = company + vector + entity is float32, the same sums)
    entity: np.ndarray
    entity_core: np.ndarray
    entity_tier_s: np.ndarray
    entity_matches: np.ndarray
    company_via_deal: np.ndarray
    lexical: np.ndarray
    dossier: np.ndarray
    device_mean: np.ndarray  # (devices of the block,) float32: each device's cosine mean over all patents
    device_std: np.ndarray
    patent_mean: np.ndarray  # (patents,) float32: each patent's cosine mean over all devices
    patent_std: np.ndarray
    rows: np.ndarray  # (devices of the block,) their rows in the inputs
    siblings: SiblingIndex
    last_decision_year: np.ndarray | None = None  # (devices of the block,) float32, NaN unknown
    grant_year: np.ndarray | None = None  # (patents,) float32, NaN unknown

    @property
    def total(self) -> np.ndarray:
        return self.company + self.vector + self.entity

    @property
    def sim_z_device(self) -> np.ndarray:
        return (self.sim - self.device_mean[:, None]) / self.device_std[:, None]

    @property
    def sim_z_patent(self) -> np.ndarray:
        return (self.sim - self.patent_mean) / self.patent_std

    def total_at(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """`total[rows, cols]` without the dense sum (the same float32 additions, in the same order)."""
        return self.company[rows, cols] + self.vector[rows, cols] + self.entity[rows, cols]

    def z_at(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`sim_z_device[rows, cols]` and `sim_z_patent[rows, cols]`, element for element."""
        sim = self.sim[rows, cols]
        return ((sim - self.device_mean[rows]) / self.device_std[rows],
                (sim - self.patent_mean[cols]) / self.patent_std[cols])

    def granted_after_at(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Grant year minus the device's latest decision year of the selected pairs (NaN unknown)."""
        if self.last_decision_year is None or self.grant_year is None:
            return np.full(len(rows), np.nan, np.float32)
        return self.grant_year[cols] - self.last_decision_year[rows]

    def sibling_features_at(self, rows: np.ndarray, cols: np.ndarray) -> dict[str, np.ndarray]:
        """SIBLING_FEATURES (siblings) of the selected pairs, by name."""
        return self.siblings.features(self.rows[rows], cols, self.sim[rows, cols], self.lexical[rows, cols])


MAX_BLOCK_PAIRS = 1 << 24
"""At most this many pairs per block (about 1 GB of score arrays): at 698K patents a block holds
24 devices whatever `device_block_size` says, so memory stays bounded as the corpus grows."""


def max_devices_per_block(cfg: CandidateConfig, n_patents: int, max_pairs: int | None = None) -> int:
    """Devices per block: `cfg.device_block_size`, fewer when a block would exceed `max_pairs` pairs
    (default MAX_BLOCK_PAIRS)."""
    budget = MAX_BLOCK_PAIRS if max_pairs is None else max_pairs
    return max(1, min(cfg.device_block_size, budget // max(n_patents, 1)))


def score_blocks(inputs: Stage2Inputs, cfg: CandidateConfig, device_ids: list[str] | None = None,
                 progress: Progress = no_progress, max_pairs: int | None = None) -> Iterator[BlockScores]:
    """Yield score matrices for consecutive device blocks (memory bounded by the block's pair count).

    Blocks are independent (every score of a pair depends on that pair and corpus-wide moments
    only), so the block size changes no result beyond BLAS rounding of the cosine (~1e-7).
    """
    wanted = inputs.device_ids if device_ids is None else device_ids
    size = max_devices_per_block(cfg, len(inputs.patent_ids), max_pairs)
    row_of = {d: i for i, d in enumerate(inputs.device_ids)}
    c_rows, c_cols, c_deal = inputs.company_cells
    p_mean, p_std = inputs.patent_moments
    d_mean, d_std = inputs.device_moments
    siblings = inputs.siblings
    for start in range(0, len(wanted), size):
        block = wanted[start:start + size]
        rows_all = [row_of[d] for d in block]
        # the scorers with the largest temporaries first, while little else of the block is alive
        shape = (len(block), len(inputs.patent_ids))
        lexical, dossier = (np.asarray(scorer.score_block(rows_all), np.float32) if scorer is not None
                            else np.full(shape, np.nan, np.float32) for scorer in (inputs.lexical, inputs.dossier))
        ent = inputs.entities.score_block(block)
        sim = inputs.device_vectors[rows_all] @ inputs.patent_vectors.T
        np.clip(sim, -1.0, 1.0, out=sim)
        sim = sim.astype(np.float32, copy=False)
        comp = np.zeros(sim.shape, np.float32)
        via_deal = np.zeros(sim.shape, bool)
        for i, row in enumerate(rows_all):
            lo, hi = np.searchsorted(c_rows, [row, row + 1])
            if hi > lo:
                comp[i, c_cols[lo:hi]] = cfg.company_points
                via_deal[i, c_cols[lo:hi]] = c_deal[lo:hi]
        scores = BlockScores(block, sim, comp, vector_points(sim, cfg), ent.score, ent.core,
                             ent.tier_s, ent.matches, via_deal, lexical, dossier, d_mean[rows_all], d_std[rows_all],
                             p_mean, p_std, np.asarray(rows_all, np.int64), siblings,
                             None if inputs.last_decision_year is None else inputs.last_decision_year[rows_all],
                             inputs.grant_year)
        # drop this generator's own references before yielding, so the caller's `del` frees the block
        # before the next one is scored (otherwise two blocks of dense arrays are alive at once)
        del sim, comp, via_deal, ent, lexical, dossier
        yield scores
        del scores
        progress(start + len(block), len(wanted))
