"""The three entity match tiers of MedDevOnto, scored for all pairs at once.

Tier S: same normalised string (60 x w of the term's category); Tier A: same concept
(50 x w of the concept's category); Tier B: concepts that differ but share a parent, or are
parent and child (flat 20). S_entity is the best single match (METHOD.md §2.5). Each tier is
an incidence matrix per distinct point value, so a block of devices against every patent is a
handful of sparse products instead of a Python loop over pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from scipy import sparse

from meddevkg_core.config import UNIFORM_ENTITY_POINTS, CandidateConfig
from meddevkg_core.gc_pause import gc_paused
from meddevkg_core.ontology import _LONG_SINGLE_WORD, CATEGORY_WEIGHTS, Ontology

if TYPE_CHECKING:
    from polars._typing import PolarsDataType


@dataclass(frozen=True, slots=True)
class MatchKey:
    tier: str  # "S", "A" or "B"
    key: str  # normalised term, concept id, or parent concept id
    points: float
    label: str  # evidence text, e.g. "TierS:stent(DEVICE_TYPE,w=1.0)"
    core: bool  # a Tier-S anchor match of weight 1.0 (the paper's TierS_Core rescue)

    def __hash__(self) -> int:  # consistent with ==, cheaper than hashing all five fields
        return hash((self.tier, self.key))


_G = ["points", "core", "tier"]
"""A key group: keys of one tier with the same points and core flag share an incidence matrix."""

_KEY_SCHEMA = {"tier": pl.String, "key": pl.String, "points": pl.Float64, "core": pl.Boolean,
               "category": pl.String, "weight": pl.Float64}


class DocKeys:
    """Per document: the match keys it carries, and B-tier keys with the concepts under them.

    Held as tables (one row per distinct key, per document and key, per document, parent and
    concept), so a corpus of 698K patents is indexed without a Python object per document or
    key; `keys` (document -> set of MatchKey) and `family` (document -> parent -> concepts) are
    built from them on first use, with one MatchKey object per distinct key.
    """

    def __init__(self, table: pl.DataFrame, index: pl.DataFrame, family_rows: pl.DataFrame):
        self.table = table  # row k: tier, key, points, core, category, weight
        self.index = index  # doc_id, k (Int32; unique pairs)
        self.family_rows = family_rows  # doc_id, parent, concept_id (unique rows)

    @cached_property
    def objects(self) -> list[MatchKey]:
        t = self.table
        with gc_paused():
            return [MatchKey(tier, key, points, f"Tier{tier}:{key}({category},w={weight})", core)
                    for tier, key, points, core, category, weight in zip(
                        t["tier"].to_list(), t["key"].to_list(), t["points"].to_list(), t["core"].to_list(),
                        t["category"].to_list(), t["weight"].to_list(), strict=True)]

    @cached_property
    def keys(self) -> dict[str, set[MatchKey]]:
        grouped = self.index.group_by("doc_id").agg("k")
        get = self.objects.__getitem__
        with gc_paused():
            return {doc_id: set(map(get, ks)) for doc_id, ks in zip(grouped["doc_id"].to_list(),
                                                                    grouped["k"].to_list(), strict=True)}

    @cached_property
    def family(self) -> dict[str, dict[str, set[str]]]:
        grouped = self.family_rows.group_by("doc_id", "parent").agg("concept_id")
        family: dict[str, dict[str, set[str]]] = {}
        with gc_paused():
            for doc_id, parent, members in zip(grouped["doc_id"].to_list(), grouped["parent"].to_list(),
                                               grouped["concept_id"].to_list(), strict=True):
                family.setdefault(doc_id, {})[parent] = set(members)
        return family

    @cached_property
    def family_groups(self) -> pl.DataFrame:
        """doc_id, parent, the number of concepts under it, and its concept when that is the only one."""
        return (self.family_rows.group_by("doc_id", "parent")
                .agg(pl.len().alias("n"), pl.col("concept_id").first().alias("single")))


def doc_keys(mentions: pl.DataFrame, ontology: Ontology, cfg: CandidateConfig) -> DocKeys:
    """Index each document's mentions as S/A keys and B families (parent -> concepts under it)."""
    with gc_paused():
        return _doc_keys(mentions, ontology, cfg)


def tier_b_points(cfg: CandidateConfig) -> float:
    """A Tier-B match's points: the uniform weighting's for every tier, else the configured ones. The
    score and its evidence both read them here, so a pair is explained by the match that scored it."""
    return UNIFORM_ENTITY_POINTS.get(cfg.entity_weighting, cfg.tier_b_points)


def _doc_keys(mentions: pl.DataFrame, ontology: Ontology, cfg: CandidateConfig) -> DocKeys:
    # One row per distinct norm and concept, shared by every document that holds it; the document
    # -> keys grouping is done by polars, and Tier-S categories column-wise for plain norms without
    # an anchor word (most of them), so Python touches only the norms the ontology must decide.
    uniform = UNIFORM_ENTITY_POINTS.get(cfg.entity_weighting)

    def family_of(concept: str) -> list[str]:
        parents = set(ontology.parents(concept))
        if cfg.tier_b_parent_child:
            parents.add(concept)
        return sorted(parents)

    m = mentions.select(pl.col("doc_id").cast(pl.String), pl.col("norm").cast(pl.String),
                        pl.col("concept_id").cast(pl.String))
    # grouped by norm (one hash pass): the distinct norms, and the documents holding each
    by_norm = (m.filter(pl.col("norm").is_not_null() & (pl.col("norm") != ""))
               .group_by("norm").agg(pl.col("doc_id").unique()))
    with_concept = (m.filter(pl.col("concept_id").is_not_null() & (pl.col("concept_id") != ""))
                    .select("doc_id", "concept_id").unique())
    s_table = _s_keys(by_norm["norm"], ontology, cfg, uniform)
    concepts = with_concept["concept_id"].unique().to_list()
    a_weights = [ontology.weight(c) for c in concepts]
    a_table = pl.DataFrame({"tier": ["A"] * len(concepts), "key": concepts,
                            "points": [uniform or cfg.tier_a_points * w for w in a_weights],
                            "core": [False] * len(concepts), "category": [ontology.category(c) for c in concepts],
                            "weight": a_weights}, schema=_KEY_SCHEMA)
    table = pl.concat([s_table, a_table])
    n_s = s_table.height
    index = pl.concat([
        by_norm.select(pl.int_range(n_s, dtype=pl.Int32).alias("k"), "doc_id").explode("doc_id", empty_as_null=True)
        .select("doc_id", "k"),
        with_concept.join(pl.DataFrame({"concept_id": a_table["key"],
                                        "k": np.arange(n_s, n_s + a_table.height, dtype=np.int32)}),
                          on="concept_id").select("doc_id", "k"),
    ])
    parents = pl.DataFrame({"concept_id": concepts, "parent": [family_of(c) for c in concepts]},
                           schema={"concept_id": pl.String, "parent": pl.List(pl.String)}).explode("parent")
    family_rows = (with_concept.join(parents.drop_nulls("parent"), on="concept_id")
                   .select("doc_id", "parent", "concept_id"))
    return DocKeys(table, index, family_rows)


def _s_keys(norms: pl.Series, ontology: Ontology, cfg: CandidateConfig, uniform: float | None) -> pl.DataFrame:
    """One Tier-S key row per distinct norm, as `ontology.tier_s_category` gives it, column-wise for
    the usual case: a norm of lower-case ASCII words separated by single spaces is its own
    `normalize_term`, and when none of its words occurs in any anchor phrase no anchor can match, so
    the answer is the no-anchor rule (OTHER_LONG / OTHER). That holds for most free-text norms; at
    698K patents (millions of distinct norms) it saves minutes. The ontology decides the rest."""
    anchor_words = sorted({w for t in ontology.anchor_terms() for w in t.split()})
    frame = pl.DataFrame({"key": norms}, schema={"key": pl.String})
    frame = frame.with_columns(pl.col("key").str.contains(r"^[a-z0-9]+(?: [a-z0-9]+)*$").alias("_short"))
    frame = frame.with_columns(pl.when("_short").then(
        pl.col("key").str.split(" ").list.eval(pl.element().is_in(anchor_words)).list.any().not_()
    ).otherwise(False).alias("_short"))
    # a plain norm is ASCII: several words, or one word of >= _LONG_SINGLE_WORD bytes
    frame = frame.with_columns((pl.col("key").str.contains(" ", literal=True)
                                | (pl.col("key").str.len_bytes() >= _LONG_SINGLE_WORD)).alias("_long"))
    rest = np.flatnonzero(~frame["_short"].to_numpy())

    def row(category: str, weight: float) -> tuple:
        return uniform or cfg.tier_s_points * weight, weight >= 1.0, category, weight  # only an anchor gives w 1.0

    long_row, other_row = row("OTHER_LONG", CATEGORY_WEIGHTS["OTHER_LONG"]), row("OTHER", CATEGORY_WEIGHTS["OTHER"])
    decided = [row(*ontology.tier_s_category(n)) for n in frame["key"].gather(rest).to_list()]
    def pick(i: int, dtype: PolarsDataType) -> pl.Expr:
        return pl.when("_long").then(pl.lit(long_row[i], dtype)).otherwise(pl.lit(other_row[i], dtype))

    out = frame.select(pl.lit("S", pl.String).alias("tier"), "key", pick(0, pl.Float64).alias("points"),
                       pick(1, pl.Boolean).alias("core"), pick(2, pl.String).alias("category"),
                       pick(3, pl.Float64).alias("weight"))
    if len(rest):  # rows in input order: the ontology's answers where the shortcut does not apply
        out = out.with_columns(out[name].scatter(rest, pl.Series([d[i] for d in decided], dtype=out.schema[name]))
                               for i, name in enumerate(("points", "core", "category", "weight")))
    # polars types cast's mapping keys as a union, and a key type is invariant: no dict[str, ...] fits
    # (pola-rs/polars#14468)
    return out.cast(_KEY_SCHEMA)  # type: ignore[arg-type]


@dataclass(frozen=True)
class EntityScores:
    """S_entity for a block of devices x all patents, as dense arrays."""

    score: np.ndarray  # float32, best single match
    core: np.ndarray  # bool, a Tier-S anchor match of weight 1.0
    tier_s: np.ndarray  # bool, any Tier-S match (the paper's has_tiers flag)
    matches: np.ndarray  # int16, number of distinct shared S/A keys plus B families


@dataclass(frozen=True)
class ExplainCodes:
    """`EntityMatcher.explain_block` as codes: pair i has entity_tier `tiers[code[i]]`, entity_detail
    `details[code[i]]` and shared_terms `shared[shared_code[i]]`."""

    code: np.ndarray  # int64, one per pair
    tiers: pl.Series  # String, a few distinct values
    details: pl.Series
    shared_code: np.ndarray  # int64, one per pair
    shared: pl.Series


class EntityMatcher:
    """Scores entity overlap between device rows and all patents, block by block."""

    def __init__(self, device_keys: DocKeys, patent_keys: DocKeys, patent_ids: list[str], cfg: CandidateConfig):
        with gc_paused():
            self._build(device_keys, patent_keys, patent_ids, cfg)

    def _build(self, device_keys: DocKeys, patent_keys: DocKeys, patent_ids: list[str], cfg: CandidateConfig) -> None:
        self._cfg = cfg
        # The patents' DocKeys is not kept (its tables are about 0.6 GB at 698K patents): explain and
        # shared_terms read the patent matrices, as explain_block does.
        self._device_keys = device_keys
        self._patent_ids = patent_ids
        # The vocabulary of a group: its patent keys in table order, then the device keys no patent
        # holds. (A column order changes no score: the products count shared keys.)
        self._groups = sorted(set(device_keys.table.select(_G).unique().iter_rows())
                              | set(patent_keys.table.select(_G).unique().iter_rows()))
        group_ids = pl.DataFrame([(*g, i) for i, g in enumerate(self._groups)],
                                 schema={"points": pl.Float64, "core": pl.Boolean, "tier": pl.String, "_g": pl.Int64},
                                 orient="row")
        p_group = (patent_keys.table.select(_G).join(group_ids, on=_G, how="left", maintain_order="left")["_g"]
                   .to_numpy().astype(np.int64))
        sizes = np.bincount(p_group, minlength=len(self._groups)).astype(np.int64)
        p_col = np.empty(len(p_group), np.int64)
        order = np.argsort(p_group, kind="stable")
        p_col[order] = np.arange(len(order)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        self._slots: dict[int, tuple[np.ndarray, np.ndarray]] = {id(patent_keys): (p_group, p_col)}
        if device_keys is not patent_keys:
            dev = (device_keys.table.select(*_G, "key").with_row_index("_k")
                   .join(group_ids, on=_G, how="left")
                   .join(patent_keys.table.select(*_G, "key").with_columns(pl.Series("_p", p_col)),
                         on=[*_G, "key"], how="left").sort("_k"))
            d_group = dev["_g"].to_numpy().astype(np.int64)
            d_col = dev["_p"].fill_null(-1).to_numpy().astype(np.int64)
            for i in np.flatnonzero(d_col < 0).tolist():  # device keys no patent holds: new columns
                d_col[i] = sizes[d_group[i]]
                sizes[d_group[i]] += 1
            self._slots[id(device_keys)] = (d_group, d_col)
        self._sizes = sizes.tolist()
        # (points, core, tier, key) -> column of every device key (explain_block looks them up)
        d_group, d_col = self._slots[id(device_keys)]
        t = device_keys.table
        self._column = dict(zip(zip(t["points"].to_list(), t["core"].to_list(), t["tier"].to_list(),
                                    t["key"].to_list(), strict=True), d_col.tolist(), strict=True))
        groups = pl.concat([dk.family_groups for dk in (device_keys, patent_keys)])
        parents = groups["parent"].unique().sort().to_list()
        self._family_vocab = {p: i for i, p in enumerate(parents)}
        singles = (groups.filter(pl.col("n") == 1).select("parent", "single").unique().sort("parent", "single"))
        self._single_vocab = {pc: i for i, pc in enumerate(singles.iter_rows())}
        self._family_cols = pl.DataFrame({"parent": parents, "_fcol": np.arange(len(parents), dtype=np.int64)},
                                         schema={"parent": pl.String, "_fcol": pl.Int64})
        self._single_cols = singles.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("_scol"))
        # Stored transposed (keys x patents, CSR): a block product then needs no per-block
        # conversion of the whole patent matrix, and a key's patents are one sorted row.
        self._patent_mats_t = self._matrices(patent_ids, patent_keys, transposed=True)
        for m in self._patent_mats_t.values():
            m.sort_indices()
        if device_keys is not patent_keys:  # build-only state of the patent side (blocks read device keys)
            del self._slots[id(patent_keys)]
            patent_keys.__dict__.pop("family_groups", None)  # a cache, rebuilt if ever asked for again

    def _matrices(self, ids: list[str], dk: DocKeys, transposed: bool = False) -> dict[object, sparse.csr_matrix]:
        """One incidence matrix (documents x vocabulary) per key group, plus "family" and "single";
        vocabulary x documents when `transposed`."""
        names: list[object] = [*self._groups, "family", "single"]
        sizes = [*self._sizes, len(self._family_vocab), len(self._single_vocab)]
        n = len(ids)
        rows_of = pl.DataFrame({"doc_id": pl.Series(ids, dtype=pl.String), "_row": np.arange(n, dtype=np.int64)})
        # S/A keys: (document row, key) by a join, (group, column) of each key precomputed
        keyed = dk.index.join(rows_of, on="doc_id")
        slot_g, slot_c = self._slots[id(dk)]
        k = keyed["k"].to_numpy()
        key_rows, groups, cols = keyed["_row"].to_numpy(), slot_g[k], slot_c[k]
        # B families: every (document, parent), and the single-concept ones again under "single"
        fams = dk.family_groups.join(rows_of, on="doc_id").join(self._family_cols, on="parent")
        single = fams.filter(pl.col("n") == 1).join(self._single_cols, on=["parent", "single"])
        rows = np.concatenate([key_rows, fams["_row"].to_numpy(), single["_row"].to_numpy()])
        groups = np.concatenate([groups, np.full(fams.height, len(self._groups)),
                                 np.full(single.height, len(self._groups) + 1)]).astype(np.int64)
        cols = np.concatenate([cols, fams["_fcol"].to_numpy(), single["_scol"].to_numpy()])
        order = np.argsort(groups, kind="stable")
        bounds = np.searchsorted(groups[order], np.arange(len(names) + 1))
        out = {}
        for i, name in enumerate(names):
            take = order[bounds[i]:bounds[i + 1]]
            r, c = (cols[take], rows[take]) if transposed else (rows[take], cols[take])
            shape = (sizes[i], n) if transposed else (n, sizes[i])
            out[name] = sparse.csr_matrix((np.ones(len(take), np.float32), (r, c)), shape=shape)
        return out

    def score_block(self, device_ids: list[str]) -> EntityScores:
        """Dense arrays for the block, filled from the sparse products (only shared keys are touched,
        so the work and the temporaries follow the matches, not the block's pair count)."""
        n_d, n_p = len(device_ids), len(self._patent_ids)
        dev = self._matrices(device_ids, self._device_keys)
        score = np.zeros((n_d, n_p), np.float32)
        core = np.zeros((n_d, n_p), bool)
        tier_s = np.zeros((n_d, n_p), bool)
        matches = np.zeros((n_d, n_p), np.int32)
        for g in self._groups:
            rows, cols, shared = _entries(dev[g] @ self._patent_mats_t[g])
            matches[rows, cols] += shared.astype(np.int32)
            hit = shared > 0
            rows, cols = rows[hit], cols[hit]
            score[rows, cols] = np.maximum(score[rows, cols], np.float32(g[0]))
            if g[1]:
                core[rows, cols] = True
            if g[2] == "S":
                tier_s[rows, cols] = True
        families = dev["family"] @ self._patent_mats_t["family"]
        degenerate = dev["single"] @ self._patent_mats_t["single"]
        rows, cols, diff = _entries(families - degenerate)
        keep = diff > 0
        rows, cols = rows[keep], cols[keep]
        score[rows, cols] = np.maximum(score[rows, cols], np.float32(tier_b_points(self._cfg)))
        matches[rows, cols] += 1
        return EntityScores(score, core, tier_s, np.minimum(matches, np.iinfo(np.int16).max).astype(np.int16))

    def explain(self, fda_id: str, pat_id: str) -> tuple[str, str]:
        """The best single match of a pair as (tier, evidence text); ("none", "") without one.

        Read from the patent matrices, as `explain_block` (so for the patents of `patent_ids`; the
        patents' own key tables are not kept after construction)."""
        col = self._patent_column.get(pat_id)
        if col is None:
            return "none", ""
        tier, detail, _ = self.explain_block([fda_id], np.zeros(1, np.int64), np.array([col], np.int64))
        return tier[0], detail[0]

    def shared_terms(self, fda_id: str, pat_id: str) -> list[str]:
        col = self._patent_column.get(pat_id)
        if col is None:
            return []
        shared = []
        for k in self._device_keys.keys.get(fda_id, ()):
            column = self._column.get((k.points, k.core, k.tier, k.key))
            group = (k.points, k.core, k.tier)
            if k.tier == "S" and column is not None and len(_positions(np.array([col], np.int64),
                                                                       self._patents_with(group, column))):
                shared.append(k.key)
        return sorted(shared)

    @cached_property
    def _patent_column(self) -> dict[str, int]:
        return {p: i for i, p in enumerate(self._patent_ids)}

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
        codes = self.explain_codes(device_ids, rows, cols)
        return (codes.tiers.gather(codes.code).alias("entity_tier"),
                codes.details.gather(codes.code).alias("entity_detail"),
                codes.shared.gather(codes.shared_code).alias("shared_terms"))

    def explain_codes(self, device_ids: list[str], rows: np.ndarray, cols: np.ndarray) -> ExplainCodes:
        """`explain_block` as codes into a few distinct strings (what Stage 2 keeps per pool row:
        4 bytes a pair and column instead of a 16-byte string view)."""
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
                column = self._column.get((k.points, k.core, k.tier, k.key))
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
        use_b = (parent >= 0) & ((best < 0) | (tier_b_points(cfg) > np.nan_to_num(points, nan=-np.inf)))
        n_keys = len(keys)
        code = np.where(use_b, n_keys + parent, np.where(best >= 0, best, n_keys + len(parents)))
        tiers = pl.Series([k.tier for k in keys] + ["B"] * len(parents) + ["none"], dtype=pl.String)
        details = pl.Series([k.label for k in keys] + [f"TierB:via_{q}" for q in parents] + [""], dtype=pl.String)
        inverse = np.empty(n, np.int64)
        inverse[order] = np.arange(n)
        code = code[inverse]
        # shared_terms(): the shared Tier-S keys of each pair, sorted, joined by "|"
        # as codes into the distinct joined strings, so every pair's value is a view into one small
        # buffer (a scatter of the joined strings kept a copy of the text per pair: 11 bytes a pool row)
        values: list[str] = [""]
        shared_code = np.zeros(n, np.int64)
        if s_pos:
            term = pl.Series([k.key for k in keys], dtype=pl.String).gather(np.concatenate(s_term))
            joined = (pl.DataFrame({"pos": order[np.concatenate(s_pos)], "term": term}).sort("pos", "term")
                      .group_by("pos", maintain_order=True).agg(pl.col("term").str.join("|")))
            distinct = joined["term"].unique(maintain_order=True)
            shared_code[joined["pos"].to_numpy()] = joined.select("term").join(
                distinct.to_frame().with_row_index("_code", offset=1), on="term", how="left",
                maintain_order="left")["_code"].to_numpy()
            values += distinct.to_list()  # rebuilt from Python: a buffer of the distinct strings only
        return ExplainCodes(code, tiers, details, shared_code, pl.Series("shared_terms", values, dtype=pl.String))


def _entries(product: sparse.spmatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, column, value) of every stored entry of a sparse product, no position twice."""
    m = product.tocsr()
    m.sum_duplicates()
    rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    return rows, m.indices.astype(np.int64), m.data


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
