"""MedDevOnto: concepts, their terms and parents, and the category/weight rules of METHOD.md §2.

The ontology is data (CSV files shipped in `meddevkg_core/data/ontology/`); this module only loads,
validates and answers questions about it. Everything is keyed by `normalize_term`, which is also
the Tier-S key of Stage 2, so its behaviour must stay stable.
"""

from __future__ import annotations

import functools
import io
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType

import polars as pl

from meddevkg_core import schemas

CATEGORY_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {
        "DEVICE_TYPE": 1.0,
        "PROCESS": 1.0,
        "ALGORITHM": 1.0,
        "INDICATION": 1.0,
        "SENSOR": 0.8,
        "SUBSTANCE": 0.5,
        "OTHER_LONG": 0.5,
        "OTHER": 0.1,
    }
)
"""Weights the deployed graph used per category (METHOD.md §2.3, "what the graph actually used")."""

_TUI_CATEGORY: Mapping[str, str] = MappingProxyType(
    {
        "T074": "DEVICE_TYPE",
        "T061": "PROCESS",
        "T060": "PROCESS",
        "T058": "PROCESS",
        "T170": "ALGORITHM",
        "T047": "INDICATION",
        "T046": "INDICATION",
        "T191": "INDICATION",
        # Materials and chemicals: the UMLS "Chemical" tree (T103 and below), plus Substance,
        # Biomedical or Dental Material and Clinical Drug.
        **dict.fromkeys(
            ("T103", "T104", "T109", "T114", "T116", "T118", "T119", "T120", "T121", "T122",
             "T123", "T124", "T125", "T126", "T127", "T129", "T130", "T131", "T167", "T168",
             "T192", "T195", "T196", "T197", "T200"),
            "SUBSTANCE",
        ),
    }
)

_LONG_SINGLE_WORD = 8
"""A single word this long counts as "long" for Tier S (METHOD §2.3: guidewire, scaffold)."""

_MARKS = re.compile(r"[\u2122\u2120\u00ae\u00a9]")  # ™ ℠ ® © : NFKD would turn ™ into "TM"
_APOSTROPHES = re.compile(r"['\u2019\u2018`\u00b4]")
_NON_WORD = re.compile(r"[\W_]+")


@functools.lru_cache(maxsize=1 << 18)
def normalize_term(s: str) -> str:
    """The Tier-S key: case-, accent- and punctuation-insensitive, so "Stent-Graft" == "stent graft".

    Lower-cases (casefold), strips accents and trademark signs, drops apostrophes ("Crohn's" ->
    "crohns"), turns every other non-alphanumeric run (hyphens, commas, slashes) into one space.
    Idempotent. Change it only together with every stored Tier-S key.
    """
    s = _MARKS.sub(" ", s)
    s = unicodedata.normalize("NFKD", s)
    s = "".join(ch for ch in s if not unicodedata.combining(ch)).casefold()
    s = _APOSTROPHES.sub("", s)
    return _NON_WORD.sub(" ", s).strip()


def category_for_tui(tui: str | None) -> tuple[str, float]:
    """Tier-A category and weight of a concept from its UMLS semantic type (METHOD §2.3)."""
    category = _TUI_CATEGORY.get((tui or "").strip().upper(), "OTHER")
    return category, CATEGORY_WEIGHTS[category]


@dataclass(frozen=True)
class ConceptInfo:
    concept_id: str
    preferred_name: str
    tui: str | None
    category: str
    weight: float
    is_anchor: bool
    source: str | None


def _frozen(d: dict) -> Mapping:
    return MappingProxyType(d)


@dataclass(frozen=True, eq=False)
class Ontology:
    """A validated MedDevOnto with precomputed lookups. Build it with `Ontology.from_frames`.

    Compared and hashed by identity (DataFrames have no value hash), so it can key a cache.
    """

    concepts: pl.DataFrame
    terms: pl.DataFrame
    hierarchy: pl.DataFrame
    """The parent links (schemas.CONCEPT_PARENTS); named so because `parents(cid)` is the lookup."""
    _info: Mapping[str, ConceptInfo] = field(repr=False)
    _term_concept: Mapping[str, str] = field(repr=False)
    _parents: Mapping[str, frozenset[str]] = field(repr=False)
    _children: Mapping[str, frozenset[str]] = field(repr=False)
    _anchor_terms: Mapping[str, str] = field(repr=False)

    @classmethod
    def from_frames(cls, concepts: pl.DataFrame, terms: pl.DataFrame, parents: pl.DataFrame) -> Ontology:
        """Validate the three tables and index them; raises ValueError naming the offending ids."""
        concepts = schemas.conform(concepts, schemas.CONCEPTS)
        terms = schemas.conform(terms, schemas.CONCEPT_TERMS).with_columns(
            pl.col("term").map_elements(normalize_term, return_dtype=pl.String).alias("term_norm")
        )
        parents = schemas.conform(parents, schemas.CONCEPT_PARENTS).unique(maintain_order=True)
        _validate(concepts, terms, parents)

        info = {
            row["concept_id"]: ConceptInfo(**row) for row in concepts.iter_rows(named=True)
        }
        # Every preferred name is a term too, so `lookup` finds a concept by its own name.
        preferred = concepts.select(
            pl.col("preferred_name").alias("term"),
            pl.col("preferred_name").map_elements(normalize_term, return_dtype=pl.String).alias("term_norm"),
            "concept_id",
        )
        terms = pl.concat([terms, preferred]).unique(["term_norm", "concept_id"], keep="first", maintain_order=True)
        term_concept = _resolve_terms(terms, concepts)

        parent_map: dict[str, set[str]] = {}
        child_map: dict[str, set[str]] = {}
        for cid, pid in parents.iter_rows():
            parent_map.setdefault(cid, set()).add(pid)
            child_map.setdefault(pid, set()).add(cid)
        anchor_ids = {cid for cid, c in info.items() if c.is_anchor}
        anchor_terms = {norm: cid for norm, cid in term_concept.items() if cid in anchor_ids}
        return cls(
            concepts=concepts,
            terms=terms.sort("term_norm", "concept_id"),
            hierarchy=parents,
            _info=_frozen(info),
            _term_concept=_frozen(term_concept),
            _parents=_frozen({k: frozenset(v) for k, v in parent_map.items()}),
            _children=_frozen({k: frozenset(v) for k, v in child_map.items()}),
            _anchor_terms=_frozen(anchor_terms),
        )

    def lookup(self, term: str) -> str | None:
        """The concept a term names (normalised here, so raw strings are fine), or None."""
        return self._term_concept.get(normalize_term(term))

    def concept(self, concept_id: str) -> ConceptInfo:
        return self._info[concept_id]

    def weight(self, concept_id: str) -> float:
        return self._info[concept_id].weight

    def category(self, concept_id: str) -> str:
        return self._info[concept_id].category

    def parents(self, concept_id: str) -> frozenset[str]:
        return self._parents.get(concept_id, frozenset())

    def children(self, concept_id: str) -> frozenset[str]:
        return self._children.get(concept_id, frozenset())

    def ancestors(self, concept_id: str) -> frozenset[str]:
        """All transitive parents (the hierarchy is validated acyclic)."""
        seen: set[str] = set()
        stack = list(self.parents(concept_id))
        while stack:
            pid = stack.pop()
            if pid not in seen:
                seen.add(pid)
                stack.extend(self.parents(pid))
        return frozenset(seen)

    def anchor_terms(self) -> frozenset[str]:
        """Normalised terms (preferred names and synonyms) of the anchor concepts."""
        return frozenset(self._anchor_terms)

    def is_anchor_term(self, norm: str) -> bool:
        return normalize_term(norm) in self._anchor_terms

    def tier_s_category(self, norm: str) -> tuple[str, float]:
        """Category and weight of a Tier-S (identical string) match, METHOD §2.3 inferred rule.

        The anchor phrase ending furthest right in the term decides (longest on a tie): this is
        the head-word rule generalised to multi-word anchors, and reproduces every Tier-S example
        of the deployed graph ("valve repair" -> PROCESS, "valve replacement" and "ablation,
        catheter" -> DEVICE_TYPE, "vascular closure device" -> DEVICE_TYPE, "electrode" ->
        SENSOR). Without an anchor: OTHER_LONG if multi-word or a single word of >= 8
        characters ("guidewire", "scaffold"), else OTHER.
        """
        words = normalize_term(norm).split()
        for end in range(len(words), 0, -1):
            for start in range(end):
                cid = self._anchor_terms.get(" ".join(words[start:end]))
                if cid is not None:
                    anchor = self._info[cid]
                    return anchor.category, anchor.weight
        if len(words) > 1 or (words and len(words[0]) >= _LONG_SINGLE_WORD):
            return "OTHER_LONG", CATEGORY_WEIGHTS["OTHER_LONG"]
        return "OTHER", CATEGORY_WEIGHTS["OTHER"]


def _validate(concepts: pl.DataFrame, terms: pl.DataFrame, parents: pl.DataFrame) -> None:
    def fail(what: str, ids) -> None:
        raise ValueError(f"{what}: {sorted(set(ids))[:20]}")

    if concepts["concept_id"].null_count() or concepts["preferred_name"].null_count():
        fail("concepts without id or preferred_name", concepts.filter(
            pl.col("concept_id").is_null() | pl.col("preferred_name").is_null())["concept_id"].fill_null("<null>"))
    dup = concepts.filter(pl.col("concept_id").is_duplicated())["concept_id"]
    if dup.len():
        fail("duplicate concept ids", dup)
    bad_cat = concepts.filter(~pl.col("category").is_in(list(CATEGORY_WEIGHTS)) | pl.col("category").is_null())
    if bad_cat.height:
        fail("unknown category on concepts", bad_cat["concept_id"])
    bad_weight = concepts.filter(pl.col("weight").is_null() | (pl.col("weight") < 0) | (pl.col("weight") > 1))
    if bad_weight.height:
        fail("weight missing or outside [0, 1] on concepts", bad_weight["concept_id"])
    known = set(concepts["concept_id"].to_list())
    dangling_terms = set(terms["concept_id"].to_list()) - known
    if dangling_terms:
        fail("terms reference unknown concepts", [str(x) for x in dangling_terms])
    empty = terms.filter(pl.col("term_norm").is_null() | (pl.col("term_norm") == ""))
    if empty.height:
        fail("terms that normalise to nothing, for concepts", empty["concept_id"])
    dangling_parents = (set(parents["concept_id"].to_list()) | set(parents["parent_id"].to_list())) - known
    if dangling_parents:
        fail("parents reference unknown concepts", [str(x) for x in dangling_parents])
    self_loops = parents.filter(pl.col("concept_id") == pl.col("parent_id"))["concept_id"]
    if self_loops.len():
        fail("concepts that are their own parent", self_loops)
    cycle = _find_cycle(parents)
    if cycle:
        fail("parent cycle through concepts", cycle)


def _find_cycle(parents: pl.DataFrame) -> list[str]:
    graph: dict[str, list[str]] = {}
    for cid, pid in parents.iter_rows():
        graph.setdefault(cid, []).append(pid)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return path[path.index(nxt):]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return []


def _resolve_terms(terms: pl.DataFrame, concepts: pl.DataFrame) -> dict[str, str]:
    """term_norm -> concept; an ambiguous term goes to the concept it is the preferred name of,
    else to the smallest concept id, so the answer never depends on row order."""
    pref = concepts.select(
        "concept_id",
        pl.col("preferred_name").map_elements(normalize_term, return_dtype=pl.String).alias("pref_norm"),
    )
    ranked = (
        terms.join(pref, on="concept_id", how="left")
        .with_columns((pl.col("pref_norm") != pl.col("term_norm")).alias("not_preferred"))
        .sort("term_norm", "not_preferred", "concept_id")
        .unique("term_norm", keep="first", maintain_order=True)
    )
    return dict(zip(ranked["term_norm"].to_list(), ranked["concept_id"].to_list(), strict=True))


def _read_csv(name: str, schema: pl.Schema) -> pl.DataFrame:
    data = resources.files("meddevkg_core").joinpath("data", "ontology", name).read_bytes()
    return pl.read_csv(io.BytesIO(data), schema=schema)


@functools.cache
def load_meddevonto() -> Ontology:
    """The starter cardiovascular ontology shipped with the package (see data/ontology/README.md)."""
    return Ontology.from_frames(
        _read_csv("concepts.csv", schemas.CONCEPTS),
        _read_csv("terms.csv", pl.Schema({"term": pl.String, "concept_id": pl.String})),
        _read_csv("parents.csv", schemas.CONCEPT_PARENTS),
    )
