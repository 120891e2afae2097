"""A mention's phrase mapped to a MedDevOnto concept, and typed COMPONENT or MECHANISM (METHOD.md §2.2).

Both extractors, spaCy (entities.py) and the LLM (llm_extraction.py), map a normalised phrase
the same way, in two tiers (exact, then head noun), and type the mention by one rule.

Entity type rule: a mention mapped to a PROCESS, ALGORITHM or INDICATION concept is a MECHANISM;
one mapped to any other concept (devices, sensors, substances, generic hardware, anatomy) is a
COMPONENT. An unmapped phrase is a MECHANISM when its head noun is a nominalised action or
condition (-tion, -sion, -sis, -ance, -ence, -ogy, -therapy, -plasty, -ectomy, -otomy, -graphy,
-metry) and a COMPONENT otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from meddevkg_core.ontology import Ontology, normalize_term

COMPONENT = "COMPONENT"
MECHANISM = "MECHANISM"
MECHANISM_CATEGORIES = frozenset({"PROCESS", "ALGORITHM", "INDICATION"})
CONTAINER_HEADS = frozenset(
    "system device assembly apparatus kit unit module mechanism arrangement structure".split()
)
"""Heads that only wrap what precedes them: "catheter system" is mapped as "catheter"."""
_MECHANISM_SUFFIXES = ("tion", "sion", "sis", "ance", "ence", "ogy", "therapy", "plasty", "ectomy",
                       "otomy", "graphy", "metry")


@dataclass(frozen=True)
class ConceptMatch:
    norm: str
    concept_id: str | None
    map_tier: str  # exact / head_noun / none


def map_phrase(norm: str, ontology: Ontology | MemoOntology, head: str | None = None) -> ConceptMatch:
    """Map a normalised phrase to a concept (METHOD §2.2): exact; else head noun, tried as the
    longest known word suffix (which covers "the last two tokens" and the head itself, so
    "bi-directional steerable catheter" -> catheter), then the phrase without a container head
    ("stent graft system" -> stent graft), then the syntactic head lemma."""
    if (cid := ontology.lookup(norm)) is not None:
        return ConceptMatch(norm, cid, "exact")
    words = norm.split()
    stems = [words, words[:-1]] if len(words) > 1 and words[-1] in CONTAINER_HEADS else [words]
    for stem in stems:
        for k in range(len(words) - 1, 0, -1):  # all proper suffixes of words; all of the stem
            if (cid := ontology.lookup(" ".join(stem[-k:]))) is not None:
                return ConceptMatch(norm, cid, "head_noun")
    if head and head != (words[-1] if words else None) and (cid := ontology.lookup(head)) is not None:
        return ConceptMatch(norm, cid, "head_noun")
    return ConceptMatch(norm, None, "none")


def entity_type(concept_id: str | None, head: str, ontology: Ontology | MemoOntology) -> str:
    """COMPONENT or MECHANISM by the rule in the module docstring."""
    if concept_id is not None:
        return MECHANISM if ontology.category(concept_id) in MECHANISM_CATEGORIES else COMPONENT
    return MECHANISM if head.endswith(_MECHANISM_SUFFIXES) else COMPONENT


class MemoOntology:
    """The `lookup` and `category` of an ontology, remembered for one extraction call (the
    mapping of each new phrase looks up several of its suffixes, each normalised again)."""

    def __init__(self, ontology: Ontology) -> None:
        self._ontology = ontology
        self._lookup: dict[str, str | None] = {}
        self._category: dict[str, str] = {}
        self._norm: dict[str, str] = {}

    def lookup(self, term: str) -> str | None:
        try:
            return self._lookup[term]
        except KeyError:
            cid = self._lookup[term] = self._ontology.lookup(term)
            return cid

    def category(self, concept_id: str) -> str:
        try:
            return self._category[concept_id]
        except KeyError:
            cat = self._category[concept_id] = self._ontology.category(concept_id)
            return cat

    def normalize(self, s: str) -> str:
        """`normalize_term`, remembered."""
        try:
            return self._norm[s]
        except KeyError:
            n = self._norm[s] = normalize_term(s)
            return n
