"""Stage 2 exactly as it was before issue 7's scale work: the oracle of test_candidates and test_entity_match.

A frozen copy of meddevkg_core/entity_match.py and meddevkg_core/candidates.py (commit 71a2bb0),
kept verbatim so the optimised implementation can be checked pair by pair against it. Do not edit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np
import polars as pl
from scipy import sparse

from meddevkg_core import schemas
from meddevkg_core.config import UNIFORM_ENTITY_POINTS, Admission, CandidateConfig
from meddevkg_core.ontology import Ontology
from meddevkg_core.progress import Progress, no_progress

# --- entity_match.py ---

@dataclass(frozen=True)
class MatchKey:
    tier: str  # "S", "A" or "B"
    key: str  # normalised term, concept id, or parent concept id
    points: float
    label: str  # evidence text, e.g. "TierS:stent(DEVICE_TYPE,w=1.0)"
    core: bool  # a Tier-S anchor match of weight 1.0 (the paper's TierS_Core rescue)


@dataclass(frozen=True)
class DocKeys:
    """Per document: the match keys it carries, and B-tier keys with the concepts under them."""

    keys: dict[str, set[MatchKey]]
    family: dict[str, dict[str, set[str]]]


def doc_keys(mentions: pl.DataFrame, ontology: Ontology, cfg: CandidateConfig) -> DocKeys:
    """Index each document's mentions as S/A keys and B families (parent -> concepts under it)."""
    keys: dict[str, set[MatchKey]] = defaultdict(set)
    family: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    uniform = UNIFORM_ENTITY_POINTS.get(cfg.entity_weighting)
    for doc_id, norm, concept in mentions.select("doc_id", "norm", "concept_id").unique().iter_rows():
        if norm:
            category, weight = ontology.tier_s_category(norm)
            is_core = weight >= 1.0  # only an anchor phrase gives a Tier-S weight of 1.0
            keys[doc_id].add(MatchKey("S", norm, uniform or cfg.tier_s_points * weight,
                                      f"TierS:{norm}({category},w={weight})", is_core))
        if concept:
            weight = ontology.weight(concept)
            keys[doc_id].add(MatchKey("A", concept, uniform or cfg.tier_a_points * weight,
                                      f"TierA:{concept}({ontology.category(concept)},w={weight})", False))
            parents = set(ontology.parents(concept))
            if cfg.tier_b_parent_child:
                parents.add(concept)
            for parent in parents:
                family[doc_id][parent].add(concept)
    return DocKeys(dict(keys), {d: dict(f) for d, f in family.items()})


@dataclass(frozen=True)
class EntityScores:
    """S_entity for a block of devices x all patents, as dense arrays."""

    score: np.ndarray  # float32, best single match
    core: np.ndarray  # bool, a Tier-S anchor match of weight 1.0
    tier_s: np.ndarray  # bool, any Tier-S match (the paper's has_tiers flag)
    matches: np.ndarray  # int16, number of distinct shared S/A keys plus B families


class EntityMatcher:
    """Scores entity overlap between device rows and all patents, block by block."""

    def __init__(self, device_keys: DocKeys, patent_keys: DocKeys, patent_ids: list[str], cfg: CandidateConfig):
        self._cfg = cfg
        self._device_keys = device_keys
        self._patent_keys = patent_keys
        self._patent_ids = patent_ids
        groups: dict[tuple[float, bool, str], set[tuple[str, str]]] = defaultdict(set)
        for doc in (*device_keys.keys.values(), *patent_keys.keys.values()):
            for k in doc:
                groups[(k.points, k.core, k.tier)].add((k.tier, k.key))
        self._groups = sorted(groups)
        self._vocab = {g: {tk: i for i, tk in enumerate(sorted(groups[g]))} for g in self._groups}
        self._family_vocab = {p: i for i, p in enumerate(sorted(
            {p for d in (*device_keys.family.values(), *patent_keys.family.values()) for p in d}))}
        self._single_vocab = {pc: i for i, pc in enumerate(sorted(
            {(p, next(iter(cs))) for d in (*device_keys.family.values(), *patent_keys.family.values())
             for p, cs in d.items() if len(cs) == 1}))}
        self._patent_mats = self._matrices(patent_ids, patent_keys)

    def _matrices(self, ids: list[str], dk: DocKeys) -> dict[object, sparse.csr_matrix]:
        rows: dict[object, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for r, doc_id in enumerate(ids):
            for k in dk.keys.get(doc_id, ()):
                g = (k.points, k.core, k.tier)
                rows[g][0].append(r)
                rows[g][1].append(self._vocab[g][(k.tier, k.key)])
            for parent, concepts in dk.family.get(doc_id, {}).items():
                rows["family"][0].append(r)
                rows["family"][1].append(self._family_vocab[parent])
                if len(concepts) == 1:
                    rows["single"][0].append(r)
                    rows["single"][1].append(self._single_vocab[(parent, next(iter(concepts)))])
        sizes = {**{g: len(self._vocab[g]) for g in self._groups},
                 "family": len(self._family_vocab), "single": len(self._single_vocab)}
        return {g: sparse.csr_matrix((np.ones(len(r), np.float32), (r, c)), shape=(len(ids), sizes[g]))
                for g, (r, c) in ((g, rows[g]) for g in sizes)}

    def score_block(self, device_ids: list[str]) -> EntityScores:
        n_d, n_p = len(device_ids), len(self._patent_ids)
        dev = self._matrices(device_ids, self._device_keys)
        score = np.zeros((n_d, n_p), np.float32)
        core = np.zeros((n_d, n_p), bool)
        tier_s = np.zeros((n_d, n_p), bool)
        matches = np.zeros((n_d, n_p), np.int32)
        for g in self._groups:
            shared = (dev[g] @ self._patent_mats[g].T).toarray()
            hit = shared > 0
            np.maximum(score, np.where(hit, np.float32(g[0]), 0), out=score)
            if g[1]:
                core |= hit
            if g[2] == "S":
                tier_s |= hit
            matches += shared.astype(np.int32)
        families = (dev["family"] @ self._patent_mats["family"].T).toarray()
        degenerate = (dev["single"] @ self._patent_mats["single"].T).toarray()
        tier_b = (families - degenerate) > 0
        b_points = UNIFORM_ENTITY_POINTS.get(self._cfg.entity_weighting, self._cfg.tier_b_points)
        np.maximum(score, np.where(tier_b, np.float32(b_points), 0), out=score)
        matches += tier_b
        return EntityScores(score, core, tier_s, np.minimum(matches, np.iinfo(np.int16).max).astype(np.int16))

    def explain(self, fda_id: str, pat_id: str) -> tuple[str, str]:
        """The best single match of a pair as (tier, evidence text); ("none", "") without one."""
        d = self._device_keys.keys.get(fda_id, set())
        p = self._patent_keys.keys.get(pat_id, set())
        shared = sorted((k for k in d & p), key=lambda k: (-k.points, k.tier, k.key))
        best = (shared[0].points, shared[0].tier, shared[0].label) if shared else None
        parent = _shared_family(self._device_keys.family.get(fda_id, {}), self._patent_keys.family.get(pat_id, {}))
        # as the score: Tier B has the uniform weighting's points (mended with entity_match.tier_b_points)
        b_points = UNIFORM_ENTITY_POINTS.get(self._cfg.entity_weighting, self._cfg.tier_b_points)
        if parent and (best is None or b_points > best[0]):
            return "B", f"TierB:via_{parent}"
        return (best[1], best[2]) if best else ("none", "")

    def shared_terms(self, fda_id: str, pat_id: str) -> list[str]:
        d = self._device_keys.keys.get(fda_id, set())
        p = self._patent_keys.keys.get(pat_id, set())
        return sorted(k.key for k in d & p if k.tier == "S")


def _shared_family(d: dict[str, set[str]], p: dict[str, set[str]]) -> str | None:
    for parent in sorted(set(d) & set(p)):
        if len(d[parent] | p[parent]) >= 2:
            return parent
    return None

# --- candidates.py ---

class LexicalScorer(Protocol):
    """Scores device rows against every patent by words (e.g. TF-IDF cosine), rows as in Stage2Inputs."""

    def score_block(self, device_rows: list[int]) -> np.ndarray: ...


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

    @cached_property
    def patent_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of each patent's cosine over all devices, exact, without the pair matrix."""
        return _moments(self.patent_vectors, self.device_vectors)

    @cached_property
    def device_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of each device's cosine over all patents (E[x.y], E[(x.y)^2] = x'Cx)."""
        return _moments(self.device_vectors, self.patent_vectors)


def _moments(rows: np.ndarray, others: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = max(len(others), 1)
    mean = rows @ others.mean(axis=0)
    second = np.einsum("ij,jk,ik->i", rows, (others.T @ others) / n, rows)
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
    for b, cut in zip(bins, cuts, strict=True):
        points[sim >= cut[:, None]] = b.points
    return points


@dataclass(frozen=True)
class BlockScores:
    """Every score component for a block of devices x all patents (dense, bounded by the block)."""

    device_ids: list[str]
    sim: np.ndarray
    company: np.ndarray
    vector: np.ndarray
    entity: np.ndarray
    entity_core: np.ndarray
    entity_tier_s: np.ndarray
    entity_matches: np.ndarray
    company_via_deal: np.ndarray
    sim_z_device: np.ndarray
    sim_z_patent: np.ndarray
    lexical: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.company + self.vector + self.entity


def score_blocks(inputs: Stage2Inputs, cfg: CandidateConfig, device_ids: list[str] | None = None,
                 progress: Progress = no_progress) -> Iterator[BlockScores]:
    """Yield score matrices for consecutive device blocks (memory bounded by the block size)."""
    wanted = inputs.device_ids if device_ids is None else device_ids
    row_of = {d: i for i, d in enumerate(inputs.device_ids)}
    pat_col = {p: j for j, p in enumerate(inputs.patent_ids)}
    company = inputs.company_matches.select("fda_id", "pat_id", "match_kind")
    p_mean, p_std = inputs.patent_moments
    d_mean, d_std = inputs.device_moments
    for start in range(0, len(wanted), cfg.device_block_size):
        block = wanted[start:start + cfg.device_block_size]
        rows_all = [row_of[d] for d in block]
        vecs = inputs.device_vectors[rows_all]
        sim = np.clip(vecs @ inputs.patent_vectors.T, -1.0, 1.0).astype(np.float32)
        comp = np.zeros(sim.shape, np.float32)
        via_deal = np.zeros(sim.shape, bool)
        pairs = company.filter(pl.col("fda_id").is_in(block))
        if pairs.height:
            block_row = {d: i for i, d in enumerate(block)}
            rows = np.fromiter((block_row[d] for d in pairs["fda_id"]), np.int64, pairs.height)
            cols = np.fromiter((pat_col[p] for p in pairs["pat_id"]), np.int64, pairs.height)
            comp[rows, cols] = cfg.company_points
            via_deal[rows, cols] = (pairs["match_kind"] != "same").to_numpy()
        ent = inputs.entities.score_block(block)
        lexical = (np.asarray(inputs.lexical.score_block(rows_all), np.float32) if inputs.lexical is not None
                   else np.full(sim.shape, np.nan, np.float32))
        yield BlockScores(block, sim, comp, vector_points(sim, cfg).astype(np.float32), ent.score, ent.core,
                          ent.tier_s, ent.matches, via_deal,
                          (sim - d_mean[rows_all, None]) / d_std[rows_all, None], (sim - p_mean) / p_std, lexical)
        progress(start + len(block), len(wanted))


def admission(scores: BlockScores, cfg: CandidateConfig) -> tuple[np.ndarray, list[Admission]]:
    """Admission reason per pair as small ints (0 = not admitted), in the order of precedence."""
    total = scores.total
    reason = np.zeros(total.shape, np.int8)
    rules: list[tuple[Admission, np.ndarray]] = [(Admission.THRESHOLD, total >= cfg.admission_threshold)]
    if cfg.rescue_vector_points is not None:
        rules.append((Admission.RESCUE_VECTOR, scores.vector >= cfg.rescue_vector_points))
    if cfg.rescue_anchor:
        rules.append((Admission.RESCUE_ANCHOR, scores.entity_core))
    if cfg.same_company_min_score is not None:
        rules.append((Admission.SAME_COMPANY, (scores.company > 0) & (total >= cfg.same_company_min_score)))
    for code, (_, mask) in reversed(list(enumerate(rules, 1))):
        reason[mask] = code
    return reason, [r for r, _ in rules]


def block_frame(scores: BlockScores, patent_ids: list[str], rows: np.ndarray, cols: np.ndarray,
                reason: np.ndarray, names: list[Admission]) -> pl.DataFrame:
    """The selected pairs of a block as rows with every score component (admitted_by null if not)."""
    codes = reason[rows, cols]
    labels = np.array([None] + [n.value for n in names], dtype=object)
    return pl.DataFrame({
        "fda_id": pl.Series(scores.device_ids, dtype=pl.String).gather(rows),
        "pat_id": pl.Series(patent_ids, dtype=pl.String).gather(cols),
        "sim": scores.sim[rows, cols],
        "score_company": scores.company[rows, cols].astype(np.int16),
        "score_vector": scores.vector[rows, cols].astype(np.int16),
        "score_entity": scores.entity[rows, cols],
        "score_total": scores.total[rows, cols],
        "entity_matches": scores.entity_matches[rows, cols],
        "tier_s_match": scores.entity_tier_s[rows, cols],
        "company_via_deal": scores.company_via_deal[rows, cols],
        "sim_z_device": scores.sim_z_device[rows, cols],
        "sim_z_patent": scores.sim_z_patent[rows, cols],
        "lexical": scores.lexical[rows, cols],
        "admitted_by": pl.Series(labels[codes].tolist(), dtype=pl.String),
    })


def generate_candidates(inputs: Stage2Inputs, cfg: CandidateConfig, device_ids: list[str] | None = None,
                        progress: Progress = no_progress) -> pl.DataFrame:
    """The Stage-2 pool: admitted pairs with every score component and the admission reason."""
    frames = []
    for scores in score_blocks(inputs, cfg, device_ids, progress):
        reason, names = admission(scores, cfg)
        r, c = np.nonzero(reason)
        if len(r):
            frames.append(block_frame(scores, inputs.patent_ids, r, c, reason, names))
    if not frames:
        return schemas.empty(schemas.CANDIDATES)
    pool = pl.concat(frames)
    pool = pool.join(inputs.company_matches.select("fda_id", "pat_id", "company_path"),
                     on=["fda_id", "pat_id"], how="left")
    keys = pool.select("fda_id", "pat_id").rows()
    explained = [inputs.entities.explain(f, p) for f, p in keys]
    pool = pool.with_columns(
        pl.Series("entity_tier", [t for t, _ in explained], pl.String),
        pl.Series("entity_detail", [d for _, d in explained], pl.String),
        pl.Series("shared_terms", ["|".join(inputs.entities.shared_terms(f, p)) for f, p in keys], pl.String),
    )
    return schemas.conform(pool, schemas.CANDIDATES).sort("fda_id", "pat_id")


def reasons_string(row: dict) -> str:
    """The paper's edge explanation `Score=S [Vec:v(cos); Ent:e | Det:...]` (display only)."""
    text = (f"Score={row['score_total']:.1f} [Vec:{row['score_vector']}({row['sim']:.2f}); "
            f"Ent:{row['score_entity']:.1f} | Det:{row['entity_detail'] or ''}]")
    if row["admitted_by"] == Admission.RESCUE_VECTOR:
        text += ";Rescue:HighVec"
    elif row["admitted_by"] == Admission.RESCUE_ANCHOR:
        text += ";Rescue:TierS_Core"
    return text
