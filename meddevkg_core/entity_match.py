"""The three entity match tiers of MedDevOnto, scored for all pairs at once.

Tier S: same normalised string (60 x w of the term's category); Tier A: same concept
(50 x w of the concept's category); Tier B: concepts that differ but share a parent, or are
parent and child (flat 20). S_entity is the best single match (METHOD.md §2.5). Each tier is
an incidence matrix per distinct point value, so a block of devices against every patent is a
handful of sparse products instead of a Python loop over pairs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter

import numpy as np
import polars as pl
from scipy import sparse

from meddevkg_core.config import UNIFORM_ENTITY_POINTS, CandidateConfig
from meddevkg_core.gc_pause import gc_paused
from meddevkg_core.ontology import _LONG_SINGLE_WORD, CATEGORY_WEIGHTS, Ontology


@dataclass(frozen=True, slots=True)
class MatchKey:
    tier: str  # "S", "A" or "B"
    key: str  # normalised term, concept id, or parent concept id
    points: float
    label: str  # evidence text, e.g. "TierS:stent(DEVICE_TYPE,w=1.0)"
    core: bool  # a Tier-S anchor match of weight 1.0 (the paper's TierS_Core rescue)

    def __hash__(self) -> int:  # consistent with ==, cheaper than hashing all five fields
        return hash((self.tier, self.key))


@dataclass(frozen=True)
class DocKeys:
    """Per document: the match keys it carries, and B-tier keys with the concepts under them."""

    keys: dict[str, set[MatchKey]]
    family: dict[str, dict[str, set[str]]]




def doc_keys(mentions: pl.DataFrame, ontology: Ontology, cfg: CandidateConfig) -> DocKeys:
    """Index each document's mentions as S/A keys and B families (parent -> concepts under it)."""
    with gc_paused():
        return _doc_keys(mentions, ontology, cfg)


def _doc_keys(mentions: pl.DataFrame, ontology: Ontology, cfg: CandidateConfig) -> DocKeys:
    # One MatchKey object per distinct norm and concept, shared by every document that holds it;
    # the document -> keys grouping is done by polars, so Python touches each distinct norm once
    # and each document once (at 698K patents: ~11M mention rows, a few million distinct norms).
    uniform = UNIFORM_ENTITY_POINTS.get(cfg.entity_weighting)
    tier_s_category = _TierSCategory(ontology)

    def s_key(norm: str) -> MatchKey:
        category, weight = tier_s_category(norm)
        is_core = weight >= 1.0  # only an anchor phrase gives a Tier-S weight of 1.0
        return MatchKey("S", norm, uniform or cfg.tier_s_points * weight, f"TierS:{norm}({category},w={weight})",
                        is_core)

    def a_key(concept: str) -> MatchKey:
        weight = ontology.weight(concept)
        return MatchKey("A", concept, uniform or cfg.tier_a_points * weight,
                        f"TierA:{concept}({ontology.category(concept)},w={weight})", False)

    def family_of(concept: str) -> list[str]:
        parents = set(ontology.parents(concept))
        if cfg.tier_b_parent_child:
            parents.add(concept)
        return sorted(parents)

    m = mentions.select(pl.col("doc_id").cast(pl.String), pl.col("norm").cast(pl.String),
                        pl.col("concept_id").cast(pl.String))
    with_norm = m.filter(pl.col("norm").is_not_null() & (pl.col("norm") != "")).select("doc_id", "norm").unique()
    with_concept = (m.filter(pl.col("concept_id").is_not_null() & (pl.col("concept_id") != ""))
                    .select("doc_id", "concept_id").unique())
    norms = with_norm["norm"].unique().to_list()
    concepts = with_concept["concept_id"].unique().to_list()
    objects = [s_key(n) for n in norms] + [a_key(c) for c in concepts]
    index = pl.concat([
        with_norm.join(pl.DataFrame({"norm": norms, "_k": np.arange(len(norms), dtype=np.int64)},
                                    schema={"norm": pl.String, "_k": pl.Int64}), on="norm").select("doc_id", "_k"),
        with_concept.join(pl.DataFrame({"concept_id": concepts,
                                        "_k": np.arange(len(norms), len(objects), dtype=np.int64)},
                                       schema={"concept_id": pl.String, "_k": pl.Int64}), on="concept_id")
        .select("doc_id", "_k"),
    ]).group_by("doc_id").agg("_k")
    get = objects.__getitem__
    keys = {doc_id: set(map(get, ks)) for doc_id, ks in zip(index["doc_id"].to_list(), index["_k"].to_list(),
                                                            strict=True)}
    parents = pl.DataFrame({"concept_id": concepts, "parent": [family_of(c) for c in concepts]},
                           schema={"concept_id": pl.String, "parent": pl.List(pl.String)}).explode("parent")
    grouped = (with_concept.join(parents.drop_nulls("parent"), on="concept_id")
               .group_by("doc_id", "parent").agg("concept_id"))
    family: dict[str, dict[str, set[str]]] = {}
    for doc_id, parent, members in zip(grouped["doc_id"].to_list(), grouped["parent"].to_list(),
                                       grouped["concept_id"].to_list(), strict=True):
        family.setdefault(doc_id, {})[parent] = set(members)
    return DocKeys(keys, family)


_PLAIN = re.compile(r"[a-z0-9]+(?: [a-z0-9]+)*")


class _TierSCategory:
    """`ontology.tier_s_category`, with a shortcut for the usual case, same answers.

    A norm of lower-case ASCII words separated by single spaces is its own `normalize_term`, and
    when none of its words occurs in any anchor phrase no anchor can match, so the answer is the
    no-anchor rule (OTHER_LONG / OTHER). That holds for most free-text norms; at 698K patents
    (millions of distinct norms) it saves minutes. Anything else goes to the ontology.
    """

    def __init__(self, ontology: Ontology):
        self._ontology = ontology
        self._anchor_words = frozenset(w for t in ontology.anchor_terms() for w in t.split())

    def __call__(self, norm: str) -> tuple[str, float]:
        if _PLAIN.fullmatch(norm):
            words = norm.split(" ")
            if self._anchor_words.isdisjoint(words):
                category = "OTHER_LONG" if len(words) > 1 or len(words[0]) >= _LONG_SINGLE_WORD else "OTHER"
                return category, CATEGORY_WEIGHTS[category]
        return self._ontology.tier_s_category(norm)


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
        with gc_paused():
            self._build(device_keys, patent_keys, patent_ids, cfg)

    def _build(self, device_keys: DocKeys, patent_keys: DocKeys, patent_ids: list[str], cfg: CandidateConfig) -> None:
        self._cfg = cfg
        self._device_keys = device_keys
        self._patent_keys = patent_keys
        self._patent_ids = patent_ids
        groups: dict[tuple[float, bool, str], set[tuple[str, str]]] = defaultdict(set)
        for k in _distinct_keys(device_keys, patent_keys):
            groups[(k.points, k.core, k.tier)].add((k.tier, k.key))
        self._groups = sorted(groups)
        # within a group the tier is fixed, so sorting (tier, key) is sorting by key (cheaper)
        self._vocab = {g: {tk: i for i, tk in enumerate(sorted(groups[g], key=itemgetter(1)))} for g in self._groups}
        self._family_vocab = {p: i for i, p in enumerate(sorted(
            {p for d in (*device_keys.family.values(), *patent_keys.family.values()) for p in d}))}
        self._single_vocab = {pc: i for i, pc in enumerate(sorted(
            {(p, next(iter(cs))) for d in (*device_keys.family.values(), *patent_keys.family.values())
             for p, cs in d.items() if len(cs) == 1}))}
        # Stored transposed (keys x patents, CSR): a block product then needs no per-block
        # conversion of the whole patent matrix, and a key's patents are one sorted row.
        self._patent_mats_t = {g: m.T.tocsr() for g, m in self._matrices(patent_ids, patent_keys).items()}
        for m in self._patent_mats_t.values():
            m.sort_indices()

    def _matrices(self, ids: list[str], dk: DocKeys) -> dict[object, sparse.csr_matrix]:
        """One incidence matrix (documents x vocabulary) per key group, plus "family" and "single"."""
        names: list[object] = [*self._groups, "family", "single"]
        sizes = [*(len(self._vocab[g]) for g in self._groups), len(self._family_vocab), len(self._single_vocab)]
        group_of = {g: i for i, g in enumerate(names)}
        n = len(ids)
        # S/A keys: flattened with C-level iteration; (group, column) computed once per key object
        key_sets = [dk.keys.get(doc_id, ()) for doc_id in ids]
        flat = list(chain.from_iterable(key_sets))
        distinct = {id(k): k for k in flat}
        position = {key_id: i for i, key_id in enumerate(distinct)}
        slots = np.array([(group_of[g], self._vocab[g][(k.tier, k.key)])
                          for k in distinct.values() for g in [(k.points, k.core, k.tier)]],
                         dtype=np.int64).reshape(-1, 2)
        which = np.fromiter(map(position.__getitem__, map(id, flat)), np.int64, len(flat))
        key_rows = np.repeat(np.arange(n, dtype=np.int64), np.fromiter(map(len, key_sets), np.int64, n))
        groups, cols = slots[which, 0], slots[which, 1]
        # B families: every (document, parent), and the single-concept ones again under "single"
        fams = [dk.family.get(doc_id, {}) for doc_id in ids]
        fam_rows = np.repeat(np.arange(n, dtype=np.int64), np.fromiter(map(len, fams), np.int64, n))
        fam_cols = np.fromiter(map(self._family_vocab.__getitem__, chain.from_iterable(fams)), np.int64,
                               len(fam_rows))
        singles = [(r, self._single_vocab[(parent, next(iter(cs)))])
                   for r, fam in enumerate(fams) for parent, cs in fam.items() if len(cs) == 1]
        single = np.array(singles, dtype=np.int64).reshape(-1, 2)
        rows = np.concatenate([key_rows, fam_rows, single[:, 0]])
        groups = np.concatenate([groups, np.full(len(fam_rows), group_of["family"]),
                                 np.full(len(single), group_of["single"])]).astype(np.int64)
        cols = np.concatenate([cols, fam_cols, single[:, 1]])
        order = np.argsort(groups, kind="stable")
        bounds = np.searchsorted(groups[order], np.arange(len(names) + 1))
        out = {}
        for i, name in enumerate(names):
            take = order[bounds[i]:bounds[i + 1]]
            out[name] = sparse.csr_matrix((np.ones(len(take), np.float32), (rows[take], cols[take])),
                                          shape=(n, sizes[i]))
        return out

    def score_block(self, device_ids: list[str]) -> EntityScores:
        n_d, n_p = len(device_ids), len(self._patent_ids)
        dev = self._matrices(device_ids, self._device_keys)
        score = np.zeros((n_d, n_p), np.float32)
        core = np.zeros((n_d, n_p), bool)
        tier_s = np.zeros((n_d, n_p), bool)
        matches = np.zeros((n_d, n_p), np.int32)
        for g in self._groups:
            shared = (dev[g] @ self._patent_mats_t[g]).toarray()
            hit = shared > 0
            np.maximum(score, np.where(hit, np.float32(g[0]), 0), out=score)
            if g[1]:
                core |= hit
            if g[2] == "S":
                tier_s |= hit
            matches += shared.astype(np.int32)
        families = (dev["family"] @ self._patent_mats_t["family"]).toarray()
        degenerate = (dev["single"] @ self._patent_mats_t["single"]).toarray()
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

    def _patents_with(self, group: object, column: int) -> np.ndarray:
        m = self._patent_mats_t[group]
        return m.indices[m.indptr[column]:m.indptr[column + 1]]

    def explain_block(self, device_ids: list[str], rows: np.ndarray, cols: np.ndarray
                      ) -> tuple[pl.Series, pl.Series, pl.Series]:
        """`explain` and `shared_terms` ("|"-joined) for many pairs at once, with identical results.

        Pairs are (device_ids[rows[i]], patent column cols[i]), columns in the order of the
        `patent_ids` given at construction. Per device, each of its keys is looked up in the sorted
        list of patents holding it (a row of the transposed patent matrix), so the work is that of
        the block's sparse products, not a Python call per pair.
        """
        n = len(rows)
        cfg = self._cfg
        rows = np.asarray(rows, np.int64)
        cols = np.asarray(cols, np.int64)
        order = np.lexsort((cols, rows))
        rows_s, cols_s = rows[order], cols[order]
        bounds = np.searchsorted(rows_s, np.arange(len(device_ids) + 1))
        best = np.full(n, -1, np.int64)  # index into `keys` of the best shared key, by position in `order`
        parent = np.full(n, -1, np.int64)  # index into `parents` of the first qualifying shared parent
        keys: list[MatchKey] = []
        key_index: dict[MatchKey, int] = {}
        parents: list[str] = []
        parent_index: dict[str, int] = {}
        s_pos: list[np.ndarray] = []
        s_term: list[np.ndarray] = []
        for r, fda_id in enumerate(device_ids):
            lo, hi = bounds[r], bounds[r + 1]
            if lo == hi:
                continue
            targets = cols_s[lo:hi]
            mine = sorted(self._device_keys.keys.get(fda_id, ()), key=lambda k: (-k.points, k.tier, k.key))
            for k in mine:
                g = (k.points, k.core, k.tier)
                column = self._vocab.get(g, {}).get((k.tier, k.key)) if g in self._patent_mats_t else None
                if column is None:
                    continue
                hit = _positions(targets, self._patents_with(g, column))
                if not len(hit):
                    continue
                if k not in key_index:
                    key_index[k] = len(keys)
                    keys.append(k)
                fresh = hit[best[lo + hit] < 0]
                best[lo + fresh] = key_index[k]
                if k.tier == "S":
                    s_pos.append(lo + hit)
                    s_term.append(np.full(len(hit), key_index[k], np.int64))
            family = self._device_keys.family.get(fda_id, {})
            for q in sorted(family):
                column = self._family_vocab.get(q)
                if column is None:
                    continue
                hit = _positions(targets, self._patents_with("family", column))
                concepts = family[q]
                if len(hit) and len(concepts) == 1:  # |d[q] | p[q]| < 2 only when both are the same single concept
                    single = self._single_vocab.get((q, next(iter(concepts))))
                    if single is not None:
                        same = _positions(targets[hit], self._patents_with("single", single))
                        hit = np.delete(hit, same)
                if not len(hit):
                    continue
                fresh = hit[parent[lo + hit] < 0]
                if len(fresh):
                    if q not in parent_index:
                        parent_index[q] = len(parents)
                        parents.append(q)
                    parent[lo + fresh] = parent_index[q]
        # explain(): Tier B when a parent qualifies and beats the best S/A key (or there is none)
        points = np.array([k.points for k in keys] + [np.nan])[best]  # best == -1 -> nan
        use_b = (parent >= 0) & ((best < 0) | (cfg.tier_b_points > np.nan_to_num(points, nan=-np.inf)))
        n_keys = len(keys)
        code = np.where(use_b, n_keys + parent, np.where(best >= 0, best, n_keys + len(parents)))
        tiers = pl.Series([k.tier for k in keys] + ["B"] * len(parents) + ["none"], dtype=pl.String)
        details = pl.Series([k.label for k in keys] + [f"TierB:via_{q}" for q in parents] + [""], dtype=pl.String)
        inverse = np.empty(n, np.int64)
        inverse[order] = np.arange(n)
        code = code[inverse]
        # shared_terms(): the shared Tier-S keys of each pair, sorted, joined by "|"
        shared = pl.Series("term", [""], dtype=pl.String).gather(np.zeros(n, np.int64))
        if s_pos:
            term = pl.Series([k.key for k in keys], dtype=pl.String).gather(np.concatenate(s_term))
            joined = (pl.DataFrame({"pos": order[np.concatenate(s_pos)], "term": term}).sort("pos", "term")
                      .group_by("pos", maintain_order=True).agg(pl.col("term").str.join("|")))
            shared = shared.scatter(joined["pos"].to_numpy(), joined["term"])
        return (tiers.gather(code).alias("entity_tier"), details.gather(code).alias("entity_detail"),
                shared.alias("shared_terms"))


def _distinct_keys(*docs: DocKeys) -> list[MatchKey]:
    """Every distinct key of the documents (by object first: doc_keys shares one object per key)."""
    by_id = {id(k): k for dk in docs for keys in dk.keys.values() for k in keys}
    return list(set(by_id.values()))


def _positions(targets: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Positions i of the sorted unique `targets` with targets[i] in the sorted unique `members`."""
    if not len(targets) or not len(members):
        return np.zeros(0, np.int64)
    if len(members) < len(targets):
        at = np.searchsorted(targets, members)
        ok = at < len(targets)
        at, members = at[ok], members[ok]
        return at[targets[at] == members].astype(np.int64)
    at = np.minimum(np.searchsorted(members, targets), len(members) - 1)
    return np.flatnonzero(members[at] == targets)


def _shared_family(d: dict[str, set[str]], p: dict[str, set[str]]) -> str | None:
    for parent in sorted(set(d) & set(p)):
        if len(d[parent] | p[parent]) >= 2:
            return parent
    return None
