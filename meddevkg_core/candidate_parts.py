"""The admitted pairs of each Stage-2 block, kept compact until the pool is made of them.

A block's pairs are kept as numpy arrays and codes (about 50 bytes a pair instead of 143 as a
frame), so the blocks scored so far cost a third of the pool they make; `CandidateParts.to_frame()`
makes the pool one column at a time (candidates.collect_candidates fills the parts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

import numpy as np
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.c_heap import release_free_heap
from meddevkg_core.device_activity import GRANTED_AFTER_LAST_DECISION

_NUMERIC = {"sim": pl.Float32, "score_company": pl.Int16, "score_vector": pl.Int16, "score_entity": pl.Float32,
            "score_total": pl.Float32, "entity_matches": pl.Int16, "tier_s_match": pl.Boolean,
            "company_via_deal": pl.Boolean, "sim_z_device": pl.Float32, "sim_z_patent": pl.Float32,
            "lexical": pl.Float32, "dossier_lexical": pl.Float32, "sibling_sim_margin": pl.Float32,
            "sibling_lexical_margin": pl.Float32, "company_device_count": pl.Int16,
            GRANTED_AFTER_LAST_DECISION: pl.Float32}
"""The pool columns kept per block as numpy arrays of their own dtype (the others are codes)."""


@dataclass
class BlockPart:
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


class CandidateParts:
    """What `collect_candidates` keeps of every block; `to_frame()` makes the pool (once: it empties
    the parts as it goes)."""

    def __init__(self, entries: list[BlockPart | list[tuple[str, pl.DataFrame]]], patents: pl.Series,
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
            if isinstance(e, BlockPart):
                starts = np.cumsum(e.counts) - e.counts
                segments += [(d, i, int(s), int(n)) for d, s, n in zip(e.device_ids, starts.tolist(),
                                                                       e.counts.tolist(), strict=True) if n]
        if not (_all_block_parts(entries) and len({d for d, *_ in segments}) == len(segments)):
            # a device asked for twice, or a pair listed twice in company_matches: as before
            return self._by_frames(entries)
        segments.sort(key=lambda seg: seg[0])
        return self._direct(entries, segments)

    def _direct(self, entries: list[BlockPart], segments: list[tuple[str, int, int, int]]) -> pl.DataFrame:
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

    def _by_frames(self, entries: list[BlockPart | list[tuple[str, pl.DataFrame]]]) -> pl.DataFrame:
        parts: dict[str, list[pl.DataFrame]] = {}
        unsorted: set[str] = set()  # devices whose rows still need sorting by patent
        for i, e in enumerate(entries):
            if isinstance(e, BlockPart):
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


def _all_block_parts(entries: list[BlockPart | list[tuple[str, pl.DataFrame]]]) -> TypeGuard[list[BlockPart]]:
    """No block kept as frames (a pair listed twice in company_matches): a TypeGuard, so mypy knows."""
    return all(isinstance(e, BlockPart) for e in entries)


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
