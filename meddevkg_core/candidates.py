"""Stage 2: multi-signal candidate generation, block by block over devices.

S = S_company (0/20) + S_vector (discretised cosine) + S_entity (best tier match); a pair is
admitted when S reaches the threshold or a rescue rule fires (METHOD.md §3). The pair table is
never materialised: each block of devices is scored against every patent and filtered at once.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Protocol, TypeGuard

import numpy as np
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.config import Admission, CandidateConfig
from meddevkg_core.device_activity import GRANTED_AFTER_LAST_DECISION
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


def admission(scores: BlockScores, cfg: CandidateConfig) -> tuple[np.ndarray, list[Admission]]:
    """Admission reason per pair as small ints (0 = not admitted), in the order of precedence.

    Each rule's mask is made only when it is applied (last rule first, so earlier rules win) and
    dropped at once: one block-sized bool temporary at a time instead of one per rule."""
    total = scores.total
    reason = np.zeros(total.shape, np.int8)
    rules: list[tuple[Admission, Callable[[], np.ndarray]]] = [
        (Admission.THRESHOLD, lambda: total >= cfg.admission_threshold)]
    if cfg.rescue_vector_points is not None:
        rules.append((Admission.RESCUE_VECTOR, lambda: scores.vector >= cfg.rescue_vector_points))
    if cfg.rescue_anchor:
        rules.append((Admission.RESCUE_ANCHOR, lambda: scores.entity_core))
    if cfg.same_company_min_score is not None:
        rules.append((Admission.SAME_COMPANY, lambda: (scores.company > 0) & (total >= cfg.same_company_min_score)))
    for code, (_, mask) in reversed(list(enumerate(rules, 1))):
        reason[mask()] = code
    return reason, [r for r, _ in rules]


def block_frame(scores: BlockScores, patent_ids: list[str], rows: np.ndarray, cols: np.ndarray,
                reason: np.ndarray, names: list[Admission]) -> pl.DataFrame:
    """The selected pairs of a block as rows with every score component (admitted_by null if not)."""
    codes = reason[rows, cols]
    labels = _labels(names)
    return pl.DataFrame({
        "fda_id": pl.Series(scores.device_ids, dtype=pl.String).gather(rows),
        "pat_id": pl.Series(patent_ids, dtype=pl.String).gather(cols),
        **score_columns(scores, rows, cols),
        "admitted_by": labels.gather(codes.astype(np.int64)),
    })


def score_columns(scores: BlockScores, rows: np.ndarray, cols: np.ndarray) -> dict[str, np.ndarray]:
    """Every score component of the selected pairs, in the pool's column order."""
    z_device, z_patent = scores.z_at(rows, cols)
    return {
        "sim": scores.sim[rows, cols],
        "score_company": scores.company[rows, cols].astype(np.int16),
        "score_vector": scores.vector[rows, cols].astype(np.int16),
        "score_entity": scores.entity[rows, cols],
        "score_total": scores.total_at(rows, cols),
        "entity_matches": scores.entity_matches[rows, cols],
        "tier_s_match": scores.entity_tier_s[rows, cols],
        "company_via_deal": scores.company_via_deal[rows, cols],
        "sim_z_device": z_device,
        "sim_z_patent": z_patent,
        "lexical": scores.lexical[rows, cols],
        "dossier_lexical": scores.dossier[rows, cols],
        **scores.sibling_features_at(rows, cols),
        GRANTED_AFTER_LAST_DECISION: scores.granted_after_at(rows, cols),
    }


def generate_candidates(inputs: Stage2Inputs, cfg: CandidateConfig, device_ids: list[str] | None = None,
                        progress: Progress = no_progress) -> pl.DataFrame:
    """The Stage-2 pool: admitted pairs with every score component and the admission reason."""
    return collect_candidates(inputs, cfg, device_ids, progress).to_frame()


def collect_candidates(inputs: Stage2Inputs, cfg: CandidateConfig, device_ids: list[str] | None = None,
                       progress: Progress = no_progress) -> CandidateParts:
    """Score every block and keep its admitted pairs in compact form (`CandidateParts`); its
    `to_frame()` is the pool of `generate_candidates`. The parts hold no reference to `inputs`, so
    a caller that drops the inputs (vectors, entity index, TF-IDF) before `to_frame()` builds the
    pool without them in memory."""
    paths, company = _path_codes(inputs.company_matches)
    rank = _patent_rank(inputs.patent_ids)
    patents = pl.Series("pat_id", inputs.patent_ids, dtype=pl.String)
    entries: list[_BlockPart | list[tuple[str, pl.DataFrame]]] = []
    names: list[Admission] = []
    for scores in score_blocks(inputs, cfg, device_ids, progress):
        block = scores.device_ids
        part, names = _block_part(scores, inputs.entities, cfg, rank)
        del scores  # the block's dense arrays go before the next block is scored
        if part is None:
            continue
        block_ids = pl.Series("fda_id", block, dtype=pl.String)
        matches = (company.filter(pl.col("fda_id").is_in(block_ids.implode()))
                   .with_columns(pl.col("fda_id", "pat_id").cast(pl.String)))
        keys = pl.DataFrame([part.fda_ids(), patents.gather(part.columns["pat"])])
        path = keys.join(matches, on=["fda_id", "pat_id"], how="left", maintain_order="left")
        del keys
        if path.height != len(part.columns["pat"]):
            # a pair listed twice in company_matches: one row per listing, as before (kept as frames,
            # cut by device and sorted by patent when the pool is made)
            frame = part.frame(patents, _labels(names))
            frame = schemas.conform(frame.join(matches.with_columns(paths.gather(matches["_path"]).alias(
                "company_path")), on=["fda_id", "pat_id"], how="left"), schemas.CANDIDATES)
            entries.append([(fda_id, piece) for (fda_id,), piece in
                            frame.partition_by("fda_id", as_dict=True).items()])
            continue
        part.columns["path"] = path["_path"].cast(pl.Int64).fill_null(-1).to_numpy().astype(np.int32)
        entries.append(part)
        del path, matches
    return CandidateParts(entries, patents, paths, _labels(names))


def _labels(names: list[Admission]) -> pl.Series:
    return pl.Series([None] + [n.value for n in names], dtype=pl.String)


_NUMERIC = {"sim": pl.Float32, "score_company": pl.Int16, "score_vector": pl.Int16, "score_entity": pl.Float32,
            "score_total": pl.Float32, "entity_matches": pl.Int16, "tier_s_match": pl.Boolean,
            "company_via_deal": pl.Boolean, "sim_z_device": pl.Float32, "sim_z_patent": pl.Float32,
            "lexical": pl.Float32, "dossier_lexical": pl.Float32, "sibling_sim_margin": pl.Float32,
            "sibling_lexical_margin": pl.Float32, "company_device_count": pl.Int16,
            GRANTED_AFTER_LAST_DECISION: pl.Float32}
"""The pool columns kept per block as numpy arrays of their own dtype (the others are codes)."""


@dataclass
class _BlockPart:
    """The admitted pairs of one block, ordered by block row and then pat_id: the numeric columns
    as numpy arrays, every string column as codes (`pat`: patent column; `entity`: into `tiers` and
    `details`; `shared`: into `shared`; `reason`: into the admission labels; `path`: into the
    company paths, -1 for none). About 50 bytes a pair instead of 143 as a frame (seven 16-byte
    string views), so the blocks scored so far cost a third of the pool they make."""

    device_ids: list[str]  # the block's devices (rows)
    counts: np.ndarray  # rows of each block row
    columns: dict[str, np.ndarray]
    tiers: pl.Series
    details: pl.Series
    shared: pl.Series

    def fda_ids(self) -> pl.Series:
        """The device id of every row."""
        return pl.Series("fda_id", self.device_ids, dtype=pl.String).gather(
            np.repeat(np.arange(len(self.device_ids)), self.counts))

    def frame(self, patents: pl.Series, labels: pl.Series, paths: pl.Series | None = None) -> pl.DataFrame:
        """The block's rows as a frame (company_path only when `paths` is given)."""
        c = self.columns
        out = pl.DataFrame([
            self.fda_ids(),
            patents.gather(c["pat"]).alias("pat_id"),
            *[pl.Series(name, c[name], dtype=dtype) for name, dtype in _NUMERIC.items()],
            labels.gather(c["reason"]).alias("admitted_by"),
            self.tiers.gather(c["entity"]).alias("entity_tier"),
            self.details.gather(c["entity"]).alias("entity_detail"),
            self.shared.gather(c["shared"]).alias("shared_terms"),
        ])
        if paths is not None:
            out = out.with_columns(_with_null(paths).gather(c["path"] + 1).alias("company_path"))
        return out


def _with_null(values: pl.Series) -> pl.Series:
    """`values` after a leading null (code -1 + 1 = 0 gathers a null)."""
    return pl.concat([pl.Series([None], dtype=pl.String), values.cast(pl.String)])


def _block_part(scores: BlockScores, entities: EntityMatcher, cfg: CandidateConfig, rank: np.ndarray | None
                ) -> tuple[_BlockPart | None, list[Admission]]:
    """The admitted pairs of a block (None when there are none), ordered by block row and then
    pat_id, every value as `block_frame` and `explain_block` give it."""
    reason, names = admission(scores, cfg)
    r, c = np.nonzero(reason)  # by block row, then column
    if not len(r):
        return None, names
    if rank is not None:
        order = np.lexsort((rank[c], r))
        r, c = r[order], c[order]
    columns = {**score_columns(scores, r, c), "reason": reason[r, c], "pat": c.astype(np.int32)}
    del reason
    codes = entities.explain_codes(scores.device_ids, r, c)
    columns["entity"] = codes.code.astype(np.int32)
    columns["shared"] = codes.shared_code.astype(np.int32)
    return _BlockPart(scores.device_ids, np.bincount(r, minlength=len(scores.device_ids)), columns, codes.tiers,
                      codes.details, codes.shared), names


class CandidateParts:
    """What `collect_candidates` keeps of every block; `to_frame()` makes the pool (once: it empties
    the parts as it goes)."""

    def __init__(self, entries: list[_BlockPart | list[tuple[str, pl.DataFrame]]], patents: pl.Series,
                 paths: pl.Series, labels: pl.Series):
        self._entries = entries
        self._patents = patents
        self._paths = paths
        self._labels = labels

    def to_frame(self) -> pl.DataFrame:
        """The pool: rows by device id, then pat_id; one chunk per column."""
        entries, self._entries = self._entries, []
        if not entries:
            return schemas.empty(schemas.CANDIDATES)
        # one segment (entry, first row, rows) per device with rows, in device id order
        segments = []
        for i, e in enumerate(entries):
            if isinstance(e, _BlockPart):
                starts = np.cumsum(e.counts) - e.counts
                segments += [(d, i, int(s), int(n)) for d, s, n in zip(e.device_ids, starts.tolist(),
                                                                       e.counts.tolist(), strict=True) if n]
        if not (_all_block_parts(entries) and len({d for d, *_ in segments}) == len(segments)):
            # a device asked for twice, or a pair listed twice in company_matches: as before
            return self._by_frames(entries)
        segments.sort(key=lambda seg: seg[0])
        return self._direct(entries, segments)

    def _direct(self, entries: list[_BlockPart], segments: list[tuple[str, int, int, int]]) -> pl.DataFrame:
        """Each column straight from the blocks' arrays, one column at a time (the blocks' arrays of
        a column are dropped as soon as it is made), so the pool plus what is left of the parts is
        all that is held."""

        def take(name: str, offsets: list[int] | None = None) -> np.ndarray:
            parts = [entries[i].columns[name][s:s + n] + (offsets[i] if offsets else 0) for _, i, s, n in segments]
            out = np.concatenate(parts)
            del parts
            for e in entries:
                del e.columns[name]
            return out

        def offsets(field: str) -> tuple[list[int], pl.Series]:
            values = [getattr(e, field) for e in entries]
            return np.cumsum([0] + [len(v) for v in values[:-1]]).tolist(), pl.concat(values, rechunk=True)

        counts = np.array([n for *_, n in segments], np.int64)
        cols: dict[str, pl.Series] = {}
        cols["fda_id"] = pl.Series([d for d, *_ in segments], dtype=pl.String).gather(
            np.repeat(np.arange(len(segments), dtype=np.uint32), counts))
        cols["pat_id"] = self._patents.gather(take("pat"))
        for name, dtype in _NUMERIC.items():
            cols[name] = pl.Series(name, take(name), dtype=dtype)
        cols["admitted_by"] = self._labels.gather(take("reason"))
        off, tiers = offsets("tiers")
        entity = take("entity", off)
        cols["entity_tier"] = tiers.gather(entity)
        _, details = offsets("details")
        cols["entity_detail"] = details.gather(entity)
        del entity
        off, shared = offsets("shared")
        cols["shared_terms"] = shared.gather(take("shared", off))
        cols["company_path"] = _with_null(self._paths).gather(take("path") + 1)
        entries.clear()
        release_free_heap()  # the blocks' arrays (a few MB each, so on the C heap) are all free now
        return schemas.conform(pl.DataFrame([s.alias(name) for name, s in cols.items()]), schemas.CANDIDATES)

    def _by_frames(self, entries: list[_BlockPart | list[tuple[str, pl.DataFrame]]]) -> pl.DataFrame:
        parts: dict[str, list[pl.DataFrame]] = {}
        unsorted: set[str] = set()  # devices whose rows still need sorting by patent
        for i, e in enumerate(entries):
            if isinstance(e, _BlockPart):
                frame = schemas.conform(e.frame(self._patents, self._labels, self._paths),
                                        schemas.CANDIDATES)
                start = 0
                for fda_id, n in zip(e.device_ids, e.counts.tolist(), strict=True):
                    if n:
                        parts.setdefault(fda_id, []).append(frame.slice(start, n))  # a device asked twice keeps both
                        start += n
            else:
                for fda_id, piece in e:
                    parts.setdefault(fda_id, []).append(piece)
                    unsorted.add(fda_id)
            entries[i] = None  # type: ignore[call-overload]
        pieces = [_by_patent(parts.pop(d)) if d in unsorted or len(parts[d]) > 1 else parts.pop(d)[0]
                  for d in sorted(parts)]
        return _one_chunk(pieces)  # empties `pieces` column by column


def _all_block_parts(entries: list[_BlockPart | list[tuple[str, pl.DataFrame]]]) -> TypeGuard[list[_BlockPart]]:
    """No block kept as frames (a pair listed twice in company_matches): a TypeGuard, so mypy knows."""
    return all(isinstance(e, _BlockPart) for e in entries)


def release_free_heap() -> bool:
    """Return the C heap's free pages to the OS (glibc `malloc_trim`; False where there is none).

    numpy arrays of a few MB (each block's admitted pairs) are served from the heap, not mapped on
    their own, and the heap keeps their pages resident once they are freed (about 0.5 GB after
    Stage 2 at 200K patents, measured), which the next stage would carry. No value changes."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _path_codes(company_matches: pl.DataFrame) -> tuple[pl.Series, pl.DataFrame]:
    """The distinct company paths (a String series in one small buffer), and the matches as fda_id,
    pat_id and `_path`, a code into them (null where the path is). The pool's company_path is then
    views into that buffer, not a copy of the text per block or per row."""
    path = company_matches["company_path"]
    distinct = path.drop_nulls().unique(maintain_order=True)
    codes = path.to_frame("company_path").join(distinct.to_frame("company_path").with_row_index("_path"),
                                               on="company_path", how="left", maintain_order="left")["_path"]
    paths = pl.Series("company_path", distinct.cast(pl.String).to_list(), dtype=pl.String)
    return paths, company_matches.select("fda_id", "pat_id", codes.alias("_path"))


def _patent_rank(patent_ids: list[str]) -> np.ndarray | None:
    """Position of each patent column in pat_id order (the pool's order within a device); None
    when the columns are in that order already."""
    order = pl.Series(patent_ids, dtype=pl.String).arg_sort().to_numpy()
    if np.array_equal(order, np.arange(len(order))):
        return None
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank


def _one_chunk(pieces: list[pl.DataFrame]) -> pl.DataFrame:
    """The pieces stacked into one chunk per column, column by column: a pool-sized rechunk at once
    would hold two copies of the pool; this holds the pieces plus one column (the pieces are dropped
    from `pieces` in place as their columns are copied). One chunk per column also keeps a later
    `with_columns` from realigning (copying) the whole pool."""
    columns = []
    for name in pieces[0].columns:
        columns.append(pl.concat([p.get_column(name) for p in pieces], rechunk=True))
        for i, p in enumerate(pieces):
            pieces[i] = p.drop(name)
    pieces.clear()
    return pl.DataFrame(columns)


def _by_patent(parts: list[pl.DataFrame]) -> pl.DataFrame:
    return (parts[0] if len(parts) == 1 else pl.concat(parts)).sort("pat_id")


def reasons_string(row: dict) -> str:
    """The paper's edge explanation `Score=S [Vec:v(cos); Ent:e | Det:...]` (display only)."""
    text = (f"Score={row['score_total']:.1f} [Vec:{row['score_vector']}({row['sim']:.2f}); "
            f"Ent:{row['score_entity']:.1f} | Det:{row['entity_detail'] or ''}]")
    if row["admitted_by"] == Admission.RESCUE_VECTOR:
        text += ";Rescue:HighVec"
    elif row["admitted_by"] == Admission.RESCUE_ANCHOR:
        text += ";Rescue:TierS_Core"
    return text
