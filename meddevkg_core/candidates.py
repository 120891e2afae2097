"""Stage 2: the candidate pool, the pairs admitted from each block of scores (block_scores.py).

A pair is admitted when S = S_company + S_vector + S_entity reaches the threshold or a rescue rule
fires (METHOD.md §3). Each block's admitted pairs are kept compact (candidate_parts.py) until every
block is scored, then made into the pool.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.block_scores import BlockScores, Stage2Inputs, score_blocks
from meddevkg_core.candidate_parts import BlockPart, CandidateParts
from meddevkg_core.config import Admission, CandidateConfig
from meddevkg_core.device_activity import GRANTED_AFTER_LAST_DECISION
from meddevkg_core.entity_match import EntityMatcher
from meddevkg_core.progress import Progress, no_progress


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
    entries: list[BlockPart | list[tuple[str, pl.DataFrame]]] = []
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


def _block_part(scores: BlockScores, entities: EntityMatcher, cfg: CandidateConfig, rank: np.ndarray | None
                ) -> tuple[BlockPart | None, list[Admission]]:
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
    return BlockPart(scores.device_ids, np.bincount(r, minlength=len(scores.device_ids)), columns, codes.tiers,
                     codes.details, codes.shared), names


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

