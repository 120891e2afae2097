"""MeSH descriptors (descYYYY.xml, NLM) read into MedDevOnto tables; licence-free, unlike UMLS.

Descriptors are streamed with `iterparse` and cleared once read (the file is ~300 MB). Only
descriptors under the configured tree branches are kept; each gets the TUI of its branch.
The hierarchy comes from tree numbers (DATA_SOURCES.md §3.4): the parent of `C14.280.067` is
whichever descriptor holds `C14.280`, and a descriptor with several tree numbers has the union
of their parents. Concept ids are `MESH:<DescriptorUI>`.
"""

from __future__ import annotations

import gzip
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import polars as pl

from meddevkg_core import schemas
from meddevkg_core.lineage import read_fingerprinted
from meddevkg_core.terminologies import (
    DEFAULT_MESH_BRANCHES,
    Terminology,
    TerminologyError,
    break_cycles,
    categorised,
    quarantine,
    with_norms,
)

PREFIX = "MESH:"
_UI = re.compile(r"D[0-9]{6,9}")  # [0-9]: \d also matches "０" or "٣"
_TREE = re.compile(r"[A-Z][0-9]{2}(\.[0-9]{3})*")


@dataclass(frozen=True)
class Descriptor:
    ui: str
    name: str
    trees: tuple[str, ...]
    terms: tuple[str, ...]


def read_mesh(path: str | Path, *, branches: Mapping[str, str] = DEFAULT_MESH_BRANCHES,
              strict: bool = False) -> Terminology:
    """Descriptors under `branches` (tree prefix -> TUI, first match wins) with entry terms and tree parents.

    A record without a UI or name, or with a malformed UI, is quarantined (strict: raises);
    malformed XML always raises, naming the file, line and column. The file is hashed once it is
    read (lineage.read_fingerprinted): `inputs` names it mesh_descriptors.
    """
    terminology, found = read_fingerprinted(path, partial(_read, branches=branches, strict=strict))
    return replace(terminology, inputs={"mesh_descriptors": found})


def _read(path: Path, branches: Mapping[str, str], strict: bool) -> Terminology:
    kept: dict[str, tuple[Descriptor, str, tuple[str, ...]]] = {}
    bad: list[dict[str, str]] = []
    for number, record in _records(path):
        problem, desc = _parse(record)
        if problem is None and desc.ui in kept:
            problem = f"duplicate DescriptorUI {desc.ui}"
        if problem is not None:
            if strict:
                raise TerminologyError(f"{path}: DescriptorRecord #{number}: {problem}")
            bad.append({"record_key": f"{path.name}#{number}:{desc.ui}", "reason": problem,
                        "record": json.dumps({"ui": desc.ui, "name": desc.name, "trees": list(desc.trees)})})
            continue
        tui, trees = _branch(desc.trees, branches)
        if tui is not None:
            kept[desc.ui] = (desc, tui, trees)
    bad_schema = {"record_key": pl.String, "reason": pl.String, "record": pl.String}
    rejected = quarantine(pl.DataFrame(bad, schema=bad_schema), path.name)
    return _tables(kept, path.name, rejected)


def _records(path: Path) -> Iterator[tuple[int, ET.Element]]:
    """Each DescriptorRecord element, numbered from 1; cleared after the caller has read it."""
    if not path.is_file():
        raise TerminologyError(f"{path}: no such file")
    opener = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    number = 0
    with opener as fh:
        try:
            for _, elem in ET.iterparse(fh, events=("end",)):
                if elem.tag == "DescriptorRecord":
                    number += 1
                    yield number, elem
                    elem.clear()
        except ET.ParseError as exc:
            line, column = exc.position
            raise TerminologyError(f"{path}: line {line}, column {column}: malformed XML ({exc})") from exc
        except (OSError, EOFError) as exc:
            raise TerminologyError(f"{path}: cannot be read: {exc}") from exc
    if number == 0:
        raise TerminologyError(f"{path}: no DescriptorRecord elements (is this a MeSH descriptor file?)")


def _parse(record: ET.Element) -> tuple[str | None, Descriptor]:
    """Direct-child paths only: nested DescriptorReferredTo elements carry their own DescriptorUI."""
    ui = (record.findtext("DescriptorUI") or "").strip()
    name = (record.findtext("DescriptorName/String") or "").strip()
    trees = tuple((t.text or "").strip() for t in record.findall("TreeNumberList/TreeNumber"))
    terms = tuple((s.text or "").strip() for s in record.findall("ConceptList/Concept/TermList/Term/String"))
    desc = Descriptor(ui, name, trees, tuple(t for t in terms if t))
    if not ui:
        return "missing DescriptorUI", desc
    if not _UI.fullmatch(ui):
        return f"DescriptorUI '{ui}' is not D and 6-9 digits", desc
    if not name:
        return "missing DescriptorName/String", desc
    malformed = [t for t in trees if not _TREE.fullmatch(t)]
    if malformed:
        return f"malformed TreeNumber {malformed[0]!r}", desc
    return None, desc


def _branch(trees: tuple[str, ...], branches: Mapping[str, str]) -> tuple[str | None, tuple[str, ...]]:
    """The TUI of the first listed branch any tree number falls under, and the tree numbers in any branch."""
    def under(tree: str, prefix: str) -> bool:
        return tree == prefix or tree.startswith(prefix + ".")

    tui = next((t for prefix, t in branches.items() if any(under(tree, prefix) for tree in trees)), None)
    return tui, tuple(tree for tree in trees if any(under(tree, prefix) for prefix in branches))


def _tables(kept: Mapping[str, tuple[Descriptor, str, tuple[str, ...]]], file: str,
            rejected: pl.DataFrame) -> Terminology:
    holder = {tree: ui for ui, (_, _, trees) in kept.items() for tree in trees}
    concepts, terms, links = [], [], []
    for ui, (desc, tui, trees) in kept.items():
        cid = PREFIX + ui
        concepts.append({"concept_id": cid, "preferred_name": desc.name, "tui": tui,
                         "source": f"MeSH {file} ({', '.join(trees)})"})
        terms += [{"term": term, "concept_id": cid} for term in (desc.name, *desc.terms)]
        for tree in trees:
            parent = holder.get(tree.rpartition(".")[0]) if "." in tree else None
            if parent is not None and parent != ui:
                links.append({"concept_id": cid, "parent_id": PREFIX + parent})
    concept_df = categorised(pl.DataFrame(concepts, schema={"concept_id": pl.String, "preferred_name": pl.String,
                                                            "tui": pl.String, "source": pl.String}))
    term_df = with_norms(pl.DataFrame(terms, schema={"term": pl.String, "concept_id": pl.String}), "term")
    empty = term_df.filter(pl.col("term_norm") == "")
    term_df = schemas.conform(term_df.filter(pl.col("term_norm") != "").unique(
        ["concept_id", "term_norm"], keep="first", maintain_order=True), schemas.CONCEPT_TERMS)
    parents = pl.DataFrame(links, schema=schemas.CONCEPT_PARENTS).unique(maintain_order=True).sort(
        "concept_id", "parent_id")
    parents, cyclic = break_cycles(parents)
    extra = [quarantine(empty.select(pl.col("concept_id").alias("record_key"),
                                     pl.lit("entry term normalises to nothing").alias("reason"),
                                     pl.col("term").alias("record")), file),
             quarantine(cyclic.select(
                 pl.format("{} -> {}", "concept_id", "parent_id").alias("record_key"),
                 pl.lit("parent link closes a cycle").alias("reason"),
                 pl.struct("concept_id", "parent_id").struct.json_encode().alias("record")), file)]
    return Terminology("MeSH", concept_df, term_df, parents, pl.concat([rejected, *extra]))
