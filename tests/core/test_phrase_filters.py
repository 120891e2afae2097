"""Which free noun phrases become mentions: each rule of phrase_filters on hand-tagged words, without spaCy."""

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.concept_mapping import COMPONENT, MECHANISM, ConceptMatch
from meddevkg_core.ontology import Ontology
from meddevkg_core.phrase_filters import map_phrase_words, trim_phrase
from meddevkg_core.phrases import Word

POS = {"NN": "NOUN", "NNS": "NOUN", "NNP": "PROPN", "JJ": "ADJ", "VBG": "VERB", "CD": "NUM", "HYPH": "PUNCT"}
"""Fine tag -> POS, as the small English pipeline's attribute ruler maps them (segment_tagger.pos_table)."""
STOP_WORDS = frozenset({"whole"})
"""The spaCy stop words these tests use."""

ONTO = Ontology.from_frames(
    pl.DataFrame([("C1", "stent", "DEVICE_TYPE"), ("C2", "drug eluting stent", "DEVICE_TYPE"),
                  ("C3", "bone screws", "DEVICE_TYPE")],
                 schema=["concept_id", "preferred_name", "category"], orient="row").with_columns(
        tui=pl.lit("T074"), weight=pl.lit(1.0), is_anchor=pl.lit(False), source=pl.lit("test")),
    pl.DataFrame(schema={"term": pl.String, "concept_id": pl.String}),
    pl.DataFrame(schema=schemas.CONCEPT_PARENTS),
)
"""Three concepts, one of them listed only in the plural."""


def tagged(spec: str) -> list[Word]:
    """Words as segment_words gives them, from "text/TAG" or "text/TAG/lemma" items: the POS from the
    tag, the lemma the word itself unless given (only plural nouns get one), a hyphen joined to its
    neighbours in the text."""
    words: list[Word] = []
    end = 0
    for i, item in enumerate(spec.split()):
        text, tag, *lemma = item.split("/")
        gap = 0 if not words or "HYPH" in (tag, words[-1].tag_) else 1
        words.append(Word(i, end + gap, text, text.lower(), POS[tag], tag, lemma[0] if lemma else text.lower(),
                          text.lower() in STOP_WORDS))
        end += gap + len(text)
    return words


def surface(words: list[Word]) -> str:
    """The text the words were cut from."""
    text = ""
    for w in words:
        text = text.ljust(w.idx) + w.text
    return text


def trimmed(spec: str) -> str | None:
    """The text trim_phrase keeps of a phrase."""
    words = trim_phrase(tagged(spec))
    return None if words is None else surface(words).lstrip()


def mapped(spec: str):
    """map_phrase_words of a trimmed phrase, whose head is its last word (as entities.py calls it)."""
    words = tagged(spec)
    return map_phrase_words(words, words[-1], surface(words), ONTO)


def test_the_helpers_rebuild_the_text():
    assert surface(tagged("said/JJ drug/NN -/HYPH eluting/VBG stent/NN")) == "said drug-eluting stent"


# ------------------------------------------------------------------ trim_phrase


def test_leading_boilerplate_is_trimmed_and_the_head_kept():
    assert trimmed("said/JJ distal/JJ balloon/NN catheter/NN") == "balloon catheter"
    assert trimmed("balloon/NN catheter/NN") == "balloon catheter"


BOILERPLATE = {
    "stop modifier": "distal/JJ",
    "stop word": "whole/JJ",
    "number": "2/CD",
    "hyphen whatever its POS": "-/HYPH",
}
"""A word of each kind trimmed from the left and that does not make a generic head specific."""


def _boilerplate(kind: str) -> list[Word]:
    words = tagged(BOILERPLATE[kind] + " portion/NN")
    if kind == "hyphen whatever its POS":  # X: a model whose attribute ruler has no rule for HYPH
        words[0] = words[0]._replace(pos_="X")
    return words


@pytest.mark.parametrize("kind", BOILERPLATE)
def test_each_kind_of_boilerplate_is_trimmed(kind):
    assert [w.text for w in trim_phrase(_boilerplate(kind)) or []] == ["portion"]


def test_only_leading_boilerplate_is_trimmed():
    assert trimmed("catheter/NN distal/JJ end/NN") == "catheter distal end"


def test_at_most_five_words_cut_from_the_left():
    assert trimmed("rapid/JJ exchange/NN percutaneous/JJ transluminal/JJ coronary/JJ angioplasty/NN catheter/NN") \
        == "percutaneous transluminal coronary angioplasty catheter"


def test_the_words_counted_are_the_normalised_ones():
    """"self-expanding drug-eluting stent" is seven tokens but five words: kept whole."""
    assert trimmed("self/NN -/HYPH expanding/VBG drug/NN -/HYPH eluting/VBG stent/NN") \
        == "self-expanding drug-eluting stent"


def test_boilerplate_bared_by_the_cut_is_trimmed_too():
    assert trimmed("coronary/JJ proximal/JJ balloon/NN dilatation/NN catheter/NN shaft/NN") \
        == "balloon dilatation catheter shaft"


def test_a_phrase_not_ending_on_a_noun_or_all_boilerplate_is_refused():
    assert trimmed("said/JJ expandable/JJ") is None
    assert trimmed("said/JJ distal/JJ") is None
    assert trimmed("Medtronic/NNP") == "Medtronic"  # a proper noun is a noun


def test_a_phrase_without_a_letter_is_refused():
    assert trimmed("1.5/NN") is None
    assert trimmed("3D/NN") == "3D"


# ------------------------------------------------------------------ map_phrase_words


@pytest.mark.parametrize("generic", ["device/NN", "portion/NN", "devices/NNS/device", "data/NNS/datum"])
def test_a_generic_head_alone_is_no_mention(generic):
    """Generic by its lemma ("devices") or by its written word (whose lemma "datum" is not listed)."""
    assert mapped(generic) == (None, COMPONENT)


@pytest.mark.parametrize("kind", BOILERPLATE)
def test_boilerplate_does_not_make_a_generic_head_specific(kind):
    words = _boilerplate(kind)
    assert map_phrase_words(words, words[-1], surface(words), ONTO) == (None, COMPONENT)


def test_a_real_modifier_makes_a_generic_head_specific():
    assert mapped("control/NN unit/NN") == (ConceptMatch("control unit", None, "none"), COMPONENT)


def test_a_phrase_of_one_letter_is_no_mention():
    assert mapped("x/NN") == (None, COMPONENT)


def test_a_plural_head_is_mapped_as_its_lemma():
    match, _ = mapped("drug/NN -/HYPH eluting/VBG stents/NNS/stent")
    assert match == ConceptMatch("drug eluting stent", "C2", "exact")


def test_only_a_plural_ending_in_s_is_read_as_its_lemma():
    assert mapped("contrast/NN media/NNS/medium")[0] == ConceptMatch("contrast media", None, "none")


def test_a_term_listed_only_in_the_plural_still_matches_exactly():
    assert mapped("bone/NN screws/NNS/screw")[0] == ConceptMatch("bone screws", "C3", "exact")


def test_the_entity_type_is_read_from_the_lemma():
    """An unmapped "-tion" head is a MECHANISM, in the plural too."""
    assert mapped("tissue/NN ablations/NNS/ablation")[1] == MECHANISM
    assert mapped("stent/NN struts/NNS/strut")[1] == COMPONENT
