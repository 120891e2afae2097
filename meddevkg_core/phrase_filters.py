"""Which free noun phrases become mentions, and under which norm (METHOD.md §6's anti-super-node list).

A base noun phrase (phrases.py) is a mention only when it names something device-specific: its
leading boilerplate ("said", "distal") is trimmed, it keeps at most five words (cut from the left,
so its head stays), and a phrase whose head is generic ("device", "system", "portion") with no
real modifier is refused, so that no node of the graph is linked to everything. A kept phrase is
mapped (concept_mapping.py) with a plural head read as its lemma ("stents" -> "stent"). These are
rules about the words of the domain, not about extraction: the spaCy extractor (entities.py)
applies them once per distinct phrase.
"""

from __future__ import annotations

from collections.abc import Callable

from meddevkg_core.concept_mapping import COMPONENT, ConceptMatch, MemoOntology, entity_type, map_phrase
from meddevkg_core.ontology import Ontology, normalize_term
from meddevkg_core.phrases import NOMINAL, Word
from meddevkg_core.segment_tagger import PLURAL_TAGS

MAX_PHRASE_WORDS = 5
GENERIC_NOUNS = frozenset(
    """
    device system kit tool apparatus unit method
    processor memory server database computer network
    plurality portion part member element component assembly mechanism embodiment invention
    disclosure means step use example thereof herein configuration arrangement structure body
    end side surface region area section edge tip center centre axis plane angle top bottom
    front rear interior exterior inside outside position location direction orientation distance
    length width height thickness diameter size shape number type form kind variety set pair
    group series combination time period amount level degree rate range value result output input
    parameter characteristic feature property aspect condition state mode function operation
    action effect response change movement motion rotation contact force order respect
    accordance addition relation connection communication interest purpose manner way need
    problem solution advantage benefit application technique approach design version model
    information data signal image light object material substance fluid patient user subject
    physician operator clinician individual person process procedure treatment therapy
    delivery place site point source
    """.split()
)
"""Head nouns that name nothing device-specific on their own: METHOD §6's anti-super-node list
(device, system, kit, tool, apparatus, unit, method; processor, memory, server, database,
computer, network) plus patent boilerplate and abstract nouns. A phrase with such a head is kept
only when a real modifier makes it specific ("control unit", "pressure signal")."""
STOP_MODIFIERS = frozenset(
    """
    novel improved new present said such first second third fourth various certain other same
    respective each any all further additional conventional exemplary particular single given
    desired plurality multiple several many some both either another more most least
    corresponding associated related suitable typical known prior existing above below following
    preceding aforementioned distal proximal longitudinal lateral transverse radial axial inner
    outer upper lower front rear open closed opposite central leading trailing free top bottom
    """.split()
)
"""Leading modifiers stripped from a noun phrase, and that do not make a generic head specific."""
_STRIP_POS = frozenset({"DET", "PRON", "NUM", "PUNCT", "CCONJ", "PART", "ADP", "SYM"})


def trim_phrase(phrase: list[Word], normalize: Callable[[str], str] = normalize_term) -> list[Word] | None:
    """Drop leading boilerplate modifiers ("said", "distal"); keep at most 5 words, cut from the
    left so the head stays."""
    tokens = _strip_left(phrase)
    while len(tokens) > 1 and len(normalize(" ".join(t.text for t in tokens)).split()) > MAX_PHRASE_WORDS:
        tokens = _strip_left(tokens[1:])
    if not tokens or tokens[-1].pos_ not in NOMINAL:
        return None
    if not any(c.isalpha() for t in tokens for c in t.text):
        return None
    return tokens


def _strip_left(toks: list[Word]) -> list[Word]:
    while toks and (toks[0].pos_ in _STRIP_POS or toks[0].is_stop or toks[0].lower_ in STOP_MODIFIERS
                    or toks[0].tag_ == "HYPH"):
        toks = toks[1:]
    return toks


def map_phrase_words(tokens: list[Word], head: Word, surface_text: str, ontology: Ontology | MemoOntology,
                      normalize: Callable[[str], str] = normalize_term) -> tuple[ConceptMatch | None, str]:
    """The concept match and entity type of a trimmed phrase, or (None, COMPONENT) for one too vague to
    be a mention: a generic head (by its lemma or its written word: "devices", "data") with nothing but
    boilerplate before it, or of a single character. A plural ending in s is mapped as its lemma ("stents" ->
    "stent"), since the ontology lists terms in the singular, yet a term listed only in the plural still
    matches exactly; the type is read from the lemma, so "ablations" is a MECHANISM like "ablation"."""
    words = normalize(surface_text).split()
    lemma = normalize(head.lemma_) or head.lower_
    modifiers = tokens[:-1]
    if (lemma in GENERIC_NOUNS or (words and words[-1] in GENERIC_NOUNS) or len("".join(words)) < 2) and all(
        t.is_stop or t.lower_ in STOP_MODIFIERS or t.pos_ in _STRIP_POS or t.tag_ == "HYPH" for t in modifiers
    ):
        return None, COMPONENT
    surface = " ".join(words)
    norm = surface
    if head.tag_ in PLURAL_TAGS and head.lower_.endswith("s") and lemma:
        norm = " ".join([*words[:-1], *lemma.split()])  # "drug-eluting stents" -> "drug eluting stent"
    match = map_phrase(norm, ontology, lemma)
    if match.map_tier != "exact" and norm != surface and (cid := ontology.lookup(surface)) is not None:
        match = ConceptMatch(surface, cid, "exact")  # a term listed in plural form ("bone screws")
    return match, entity_type(match.concept_id, lemma, ontology)
