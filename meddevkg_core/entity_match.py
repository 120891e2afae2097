"""The three entity match tiers of MedDevOnto, scored for all pairs at once.

Tier S: same normalised string (60 x w of the term's category); Tier A: same concept
(50 x w of the concept's category); Tier B: concepts that differ but share a parent, or are
parent and child (flat 20). S_entity is the best single match (METHOD.md §2.5). Each tier is
an incidence matrix per distinct point value, so a block of devices against every patent is a
handful of sparse products instead of a Python loop over pairs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import sparse

from meddevkg_core.config import UNIFORM_ENTITY_POINTS, CandidateConfig
from meddevkg_core.ontology import Ontology


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
        if parent and (best is None or self._cfg.tier_b_points > best[0]):
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
