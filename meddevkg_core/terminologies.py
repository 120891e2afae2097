"""Licensed terminologies (UMLS, MeSH) as MedDevOnto tables, merged under the shipped ontology.

The readers (`umls.read_umls`, `mesh.read_mesh`) return a `Terminology`: the three ontology
tables in the declared schemas, so `Ontology.from_frames` accepts them as they are, plus every
input record they quarantined and the files they read (lineage: a result made with one release can
be told from one made with another). `merge_terminologies` lays them under the shipped MedDevOnto,
which keeps priority, and `load_ontology` is the one entry the pipeline calls.

Merge rules (shipped first, then each terminology in the order given):
- a loaded concept with the id of a concept already there is that concept (its row is dropped,
  its terms and parent links attach to the existing id);
- it is folded into an existing concept B of the same TUI category when its preferred name is a
  term of B, else when one of its terms is B's preferred name (MeSH headings are plural,
  "Stents", while their entry terms hold the singular, "Stent"). Folded concepts take B's
  category, weight and anchor flag, which is how anchors reach the licensed concepts;
- a loaded concept whose preferred name already names a concept of another category would
  steal that term (Ontology prefers the concept a term is the preferred name of), so it is
  quarantined;
- a loaded term whose normalised form is already taken keeps its earlier owner;
- loaded parent links that would close a cycle are quarantined (earlier links win).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
from pydantic import BaseModel

from meddevkg_core import schemas
from meddevkg_core.errors import InputError
from meddevkg_core.lineage import InputFile
from meddevkg_core.ontology import CATEGORY_WEIGHTS, Ontology, category_for_tui, load_meddevonto, normalize_term

ENV_UMLS_DIR = "MEDDEVKG_UMLS_DIR"
ENV_MESH_XML = "MEDDEVKG_MESH_XML"
ENV_STRICT = "MEDDEVKG_TERMINOLOGIES_STRICT"
"""A yes/no setting, read where the other flags are (meddevkg_dagster.resources.env_flag)."""

UMLS_OPTION_SETTINGS: Mapping[str, str] = {
    "umls_languages": "MEDDEVKG_UMLS_LANGUAGES", "umls_sabs": "MEDDEVKG_UMLS_SABS",
    "umls_rel_sabs": "MEDDEVKG_UMLS_REL_SABS", "umls_max_srl": "MEDDEVKG_UMLS_MAX_SRL",
    "umls_tuis": "MEDDEVKG_UMLS_TUIS"}
"""TerminologyConfig's UMLS reading options set as text (the environment, the Dagster resource): field -> setting."""

_SAB = (re.compile(r"[A-Z0-9][A-Z0-9_.-]*"), "a UMLS source abbreviation (SAB, e.g. MSH or SNOMEDCT_US)")
_UMLS_CODES: Mapping[str, tuple[re.Pattern[str], str]] = {
    "umls_languages": (re.compile(r"[A-Z]{3}"), "a UMLS language (LAT: three capitals, e.g. ENG)"),
    "umls_sabs": _SAB, "umls_rel_sabs": _SAB,
    "umls_tuis": (re.compile(r"T[0-9]{3}"), "a UMLS semantic type (TUI, e.g. T074)"),
}

DEFAULT_UMLS_TUIS: frozenset[str] = frozenset(
    tui for tui in (f"T{n:03d}" for n in range(1, 205)) if category_for_tui(tui)[0] != "OTHER"
) | {"T073", "T075", "T203"}
"""Every TUI `category_for_tui` gives a category (so the table there stays the one source), plus
the other device types of DATA_SOURCES §3.2: Manufactured Object, Research Device, Drug Delivery Device."""

DEFAULT_MESH_BRANCHES: Mapping[str, str] = {"E07": "T074", "C14": "T047", "E04": "T061"}
"""MeSH tree prefix -> the TUI its descriptors get (Equipment and Supplies, Cardiovascular
Diseases, Surgical Procedures). The first listed prefix a descriptor falls under wins."""

ALIASES = pl.Schema({"terminology": pl.String, "loaded_id": pl.String, "concept_id": pl.String, "rule": pl.String})


class TerminologyError(InputError):
    """A terminology file is missing or unreadable, or (strict mode) holds a malformed record."""


@dataclass(frozen=True)
class Terminology:
    """A terminology read into the ontology tables (schemas.CONCEPTS / CONCEPT_TERMS / CONCEPT_PARENTS)."""

    name: str
    concepts: pl.DataFrame
    terms: pl.DataFrame
    parents: pl.DataFrame
    rejected: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.REJECTED_RECORDS))
    inputs: Mapping[str, InputFile] = field(default_factory=dict)
    """The release's files read, by name (umls_mrconso, mesh_descriptors, ...), with their bytes' digest."""

    def to_ontology(self) -> Ontology:
        """The terminology alone (no anchors: those come from the shipped ontology in a merge)."""
        return Ontology.from_frames(self.concepts, self.terms, self.parents)


@dataclass(frozen=True)
class MergedOntology:
    ontology: Ontology
    aliases: pl.DataFrame
    """Loaded concepts that became an existing concept (ALIASES: which, into what, by which rule)."""
    rejected: pl.DataFrame
    """Quarantined input records and merge conflicts (schemas.REJECTED_RECORDS)."""
    inputs: Mapping[str, InputFile] = field(default_factory=dict)
    """Every terminology's files read, in the order read (none for the shipped ontology alone)."""


class TerminologyConfig(BaseModel, frozen=True):
    """Which licensed releases to read and how; the default (no paths) is the shipped ontology alone."""

    umls_dir: Path | None = None
    mesh_xml: Path | None = None
    umls_tuis: frozenset[str] = DEFAULT_UMLS_TUIS
    umls_languages: tuple[str, ...] = ("ENG",)
    umls_sabs: tuple[str, ...] | None = None
    umls_rel_sabs: tuple[str, ...] | None = None
    umls_max_srl: int | None = None
    mesh_branches: dict[str, str] = dict(DEFAULT_MESH_BRANCHES)
    strict: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> TerminologyConfig:
        """Paths from MEDDEVKG_UMLS_DIR and MEDDEVKG_MESH_XML, the UMLS reading options from their
        UMLS_OPTION_SETTINGS, where set (empty counts as unset); `strict` is the caller's to pass."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {"umls_dir": env.get(ENV_UMLS_DIR) or None,
                                     "mesh_xml": env.get(ENV_MESH_XML) or None}
        options = umls_options({option: env.get(name) for option, name in UMLS_OPTION_SETTINGS.items()})
        return cls.model_validate({**values, **options, **overrides})

    def require_paths(self) -> TerminologyConfig:
        """Itself, once every configured release exists (the error names its setting)."""
        for name, path in ((ENV_UMLS_DIR, self.umls_dir), (ENV_MESH_XML, self.mesh_xml)):
            if path is not None and not path.exists():
                raise FileNotFoundError(f"{name}={str(path)!r}: no such file or directory")
        return self


def umls_options(settings: Mapping[str, str | None]) -> dict[str, object]:
    """TerminologyConfig's UMLS reading options from their text, keyed by field (UMLS_OPTION_SETTINGS):
    comma-separated codes (the languages in order of preference) or the highest SRL as a whole number.
    Unset or empty is the reader's default; a malformed value is a ValueError naming its setting, as
    a code the release never has (e.g. "eng") would silently keep nothing."""
    options: dict[str, object] = {}
    for option, raw in settings.items():
        text = raw.strip() if raw else ""
        if not text:
            continue
        name = UMLS_OPTION_SETTINGS[option]
        if option == "umls_max_srl":
            if not re.fullmatch(r"[0-9]{1,9}", text):
                raise ValueError(f"{name}={raw!r}: expected a whole number, the highest source restriction "
                                 "level kept (UMLS's are 0-4 and 9; 0 = sources free of additional restrictions)")
            options[option] = int(text)
            continue
        pattern, what = _UMLS_CODES[option]
        codes = tuple(dict.fromkeys(code.strip() for code in text.split(",")))
        if (bad := next((code for code in codes if not pattern.fullmatch(code)), None)) is not None:
            raise ValueError(f"{name}={raw!r}: {bad!r} is not {what}; expected a comma-separated list")
        options[option] = frozenset(codes) if option == "umls_tuis" else codes
    return options


def load_ontology(config: TerminologyConfig | None = None, base: Ontology | None = None) -> MergedOntology:
    """The shipped MedDevOnto (or `base`) merged with whatever UMLS / MeSH release `config` names."""
    from meddevkg_core.mesh import read_mesh  # the readers import this module, so import them late
    from meddevkg_core.umls import read_umls

    config = config or TerminologyConfig()
    loaded = []
    if config.umls_dir is not None:
        loaded.append(read_umls(config.umls_dir, tuis=config.umls_tuis, languages=config.umls_languages,
                                sabs=config.umls_sabs, rel_sabs=config.umls_rel_sabs,
                                max_srl=config.umls_max_srl, strict=config.strict))
    if config.mesh_xml is not None:
        loaded.append(read_mesh(config.mesh_xml, branches=config.mesh_branches, strict=config.strict))
    return merge_terminologies(base or load_meddevonto(), *loaded)


# ------------------------------------------------------------------ helpers the readers share


def categorised(df: pl.DataFrame) -> pl.DataFrame:
    """concept_id, preferred_name, tui, source -> schemas.CONCEPTS, category and weight from the TUI."""
    category = tui_category(df, "category")
    return schemas.conform(df.with_columns(
        category,
        category.replace_strict(dict(CATEGORY_WEIGHTS), return_dtype=pl.Float64).alias("weight"),
        pl.lit(False).alias("is_anchor"),
    ), schemas.CONCEPTS)


def tui_category(df: pl.DataFrame, alias: str) -> pl.Expr:
    """`category_for_tui` of df's `tui` column, evaluated once per distinct TUI."""
    cats = {t: category_for_tui(t)[0] for t in df["tui"].drop_nulls().unique().to_list()}
    return pl.col("tui").replace_strict(cats, default="OTHER", return_dtype=pl.String).fill_null("OTHER").alias(alias)


def with_norms(df: pl.DataFrame, column: str, alias: str = "term_norm") -> pl.DataFrame:
    """Add `normalize_term(column)`, computed once per distinct string (UMLS repeats strings a lot)."""
    distinct = df.select(pl.col(column).unique().drop_nulls())
    norms = distinct.with_columns(pl.col(column).map_elements(normalize_term, return_dtype=pl.String).alias(alias))
    return df.join(norms, on=column, how="left", maintain_order="left")


def quarantine(df: pl.DataFrame, source: str) -> pl.DataFrame:
    """record_key, reason, record -> schemas.REJECTED_RECORDS under `source`."""
    return schemas.conform(df.with_columns(pl.lit(source).alias("source")), schemas.REJECTED_RECORDS)


def break_cycles(edges: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split parent links (in priority order) into an acyclic kept set and the links that closed a cycle.

    Real hierarchies merged at concept level have cycles (two sources disagree on which of two
    concepts is broader), which `Ontology` rejects. Only links inside a strongly connected
    component can close one, so only those are replayed one by one, first come first kept.
    """
    rows = list(edges.select("concept_id", "parent_id").iter_rows())
    graph: dict[str, list[str]] = {}
    for child, parent in rows:
        graph.setdefault(child, []).append(parent)
    component = _cyclic_components(graph)
    kept_graph: dict[str, set[str]] = {}
    keep: list[bool] = []
    for child, parent in rows:
        scc = component.get(child)
        closes = scc is not None and scc == component.get(parent) and _reaches(kept_graph, parent, child)
        keep.append(not closes)
        if scc is not None and not closes:
            kept_graph.setdefault(child, set()).add(parent)
    mask = pl.Series(keep, dtype=pl.Boolean)
    return edges.filter(mask), edges.filter(~mask)


def _reaches(graph: Mapping[str, set[str]], start: str, goal: str) -> bool:
    seen, stack = {start}, [start]
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        for nxt in graph.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def _cyclic_components(graph: Mapping[str, list[str]]) -> dict[str, int]:
    """Node -> id of its strongly connected component, for components of 2+ nodes (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    component: dict[str, int] = {}
    for root in graph:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(graph.get(root, ())))]
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        component.update(dict.fromkeys(members, len(component)))
    return component


# ------------------------------------------------------------------ merge


def merge_terminologies(base: Ontology, *loaded: Terminology) -> MergedOntology:
    """`base` with each terminology laid under it in turn (rules in the module docstring)."""
    if not loaded:
        return MergedOntology(base, schemas.empty(ALIASES), schemas.empty(schemas.REJECTED_RECORDS))
    concepts, terms, parents = base.concepts, base.terms.select(schemas.CONCEPT_TERMS.names()), base.hierarchy
    aliases, rejected = [], []
    for t in loaded:
        concepts, terms, parents, alias, conflicts = _merge_one(concepts, terms, parents, t)
        aliases.append(alias)
        rejected += [t.rejected, conflicts]
    parents, cyclic = break_cycles(parents.unique(maintain_order=True))
    rejected.append(quarantine(cyclic.select(
        pl.format("{} -> {}", "concept_id", "parent_id").alias("record_key"),
        pl.lit("parent link closes a cycle with links of higher priority").alias("reason"),
        pl.struct("concept_id", "parent_id").struct.json_encode().alias("record")), "merge"))
    return MergedOntology(Ontology.from_frames(concepts, terms, parents), pl.concat(aliases), pl.concat(rejected),
                          {name: found for t in loaded for name, found in t.inputs.items()})


def _merge_one(concepts: pl.DataFrame, terms: pl.DataFrame, parents: pl.DataFrame,
               t: Terminology) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    base = with_norms(concepts.select("concept_id", "preferred_name", "tui"), "preferred_name", "pref_norm")
    base = base.with_columns(tui_category(base, "base_cat")).select("concept_id", "pref_norm", "base_cat")
    # Who owns a normalised term now: the concept it is the preferred name of, else the smallest id
    # (the rule Ontology applies, so the owner found here is the one lookups return).
    owners = (terms.join(base, on="concept_id").with_columns((pl.col("pref_norm") != pl.col("term_norm")).alias("np"))
              .sort("term_norm", "np", "concept_id").unique("term_norm", keep="first", maintain_order=True)
              .select("term_norm", pl.col("concept_id").alias("owner"), pl.col("base_cat").alias("owner_cat")))
    new = with_norms(t.concepts, "preferred_name", "pref_norm")
    new = new.with_columns(tui_category(new, "cat"))
    by_synonym = (t.terms.join(base, left_on="term_norm", right_on="pref_norm")
                  .join(new.select("concept_id", "cat"), on="concept_id").filter(pl.col("base_cat") == pl.col("cat"))
                  .group_by("concept_id").agg(pl.col("concept_id_right").min().alias("by_synonym")))
    new = (new.join(owners, left_on="pref_norm", right_on="term_norm", how="left", maintain_order="left")
           .join(by_synonym, on="concept_id", how="left", maintain_order="left")
           .with_columns(pl.col("concept_id").is_in(concepts["concept_id"].implode()).alias("same_id"),
                         (pl.col("owner_cat") == pl.col("cat")).fill_null(False).alias("owner_ok")))
    target = (pl.when("same_id").then(pl.col("concept_id")).when("owner_ok").then(pl.col("owner"))
              .otherwise(pl.col("by_synonym")))
    rule = (pl.when("same_id").then(pl.lit("same id")).when("owner_ok").then(pl.lit("preferred name is its term"))
            .when(pl.col("by_synonym").is_not_null()).then(pl.lit("has its preferred name as a synonym")))
    new = new.with_columns(target.alias("target"), rule.alias("rule"))
    folded = new.filter(pl.col("target").is_not_null())
    clash = new.filter(pl.col("target").is_null() & pl.col("owner").is_not_null())
    fresh = new.filter(pl.col("target").is_null() & pl.col("owner").is_null())

    id_map = pl.concat([folded.select("concept_id", "target"),
                        fresh.select("concept_id", pl.col("concept_id").alias("target"))])
    new_terms = (t.terms.join(id_map, on="concept_id", maintain_order="left")
                 .join(terms.select("term_norm"), on="term_norm", how="anti")
                 .select("term", "term_norm", pl.col("target").alias("concept_id"))
                 .unique(["term_norm", "concept_id"], keep="first", maintain_order=True))
    new_parents = (t.parents.join(id_map, on="concept_id").join(id_map, left_on="parent_id", right_on="concept_id")
                   .select(pl.col("target").alias("concept_id"), pl.col("target_right").alias("parent_id"))
                   .filter(pl.col("concept_id") != pl.col("parent_id"))
                   .join(parents, on=["concept_id", "parent_id"], how="anti")
                   .unique(maintain_order=True).sort("concept_id", "parent_id"))
    provenance = (folded.group_by("target").agg(pl.col("concept_id").sort().head(5).str.join(", ").alias("ids"),
                                                 pl.len().alias("n"))
                  .select(pl.col("target").alias("concept_id"), pl.concat_str(
                      pl.lit(f"{t.name} "), "ids",
                      pl.when(pl.col("n") > 5).then(pl.format(" and {} more", pl.col("n") - 5)).otherwise(pl.lit("")),
                  ).alias("merged")))
    concepts = pl.concat([
        concepts.join(provenance, on="concept_id", how="left", maintain_order="left").with_columns(
            pl.when(pl.col("merged").is_null()).then(pl.col("source"))
            .otherwise(pl.format("{}; + {}", pl.col("source").fill_null(""), "merged")).alias("source"),
        ).drop("merged"),
        schemas.conform(fresh, schemas.CONCEPTS),
    ])
    alias = schemas.conform(folded.select(pl.lit(t.name).alias("terminology"), pl.col("concept_id").alias("loaded_id"),
                                          pl.col("target").alias("concept_id"), "rule"), ALIASES)
    conflicts = quarantine(clash.select(
        pl.col("concept_id").alias("record_key"),
        pl.format("preferred name '{}' already names {} ({}); this concept is {}",
                  "pref_norm", "owner", "owner_cat", "cat").alias("reason"),
        pl.struct(schemas.CONCEPTS.names()).struct.json_encode().alias("record")), f"{t.name} merge")
    return concepts, pl.concat([terms, new_terms]), pl.concat([parents, new_parents]), alias, conflicts
