"""Candidate noun phrases at corpus speed: texts cut into segments, each segment's base noun phrases.

Running spaCy's neural tagger and parser over every abstract costs ~70 documents/s on two
cores, and 698K patents would take hours. Noun phrases never cross a stop word, punctuation or
a number, so a text is cut there with the tokenizer alone (~18K documents/s) into short
segments. Segments repeat heavily across a corpus ("distal end", "elongate shaft"), so only
the distinct ones go through the tagger (segment_tagger.py). Inside a tagged segment a base noun
phrase is the longest run of adjectives, nouns and pre-nominal participles that ends on a noun;
its head is that last noun (English base noun phrases are head-final), which is what the
parser's noun-chunk root gives for them.

Tagged without the words around it, a one-word segment can lose its reading: after a modal,
an auxiliary or "to" its first word is read as a verb ("may lead to"), after a determiner as
a noun ("the lead"). Other readings of a lone word stay unreliable ("electrode" as an adverb,
"valve" as a verb), so entities.py does not ask a lone dictionary word for a noun tag.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from spacy.tokens import Doc

    from meddevkg_core.segment_tagger import Tags

NOMINAL = frozenset({"NOUN", "PROPN"})
PRE_NOMINAL = frozenset({"ADJ", "NOUN", "PROPN"})
PARTICIPLES = frozenset({"VBN", "VBG"})
VERBAL_CONTEXT = frozenset(
    "to may might can could will would shall should must do does did cannot".split()
)
NOMINAL_CONTEXT = frozenset("a an the said each every this that these those its their".split())
CLAUSE_PARTICIPLES = frozenset(
    """comprising having including containing defining forming extending providing allowing enabling
    permitting receiving surrounding carrying holding supporting incorporating employing utilizing
    utilising consisting""".split()
)
"""Participles that open a clause ("a stent comprising struts"), never a pre-nominal modifier."""


class Word(NamedTuple):
    """One token of a document with the tags its segment received."""

    i: int
    idx: int
    text: str
    lower_: str
    pos_: str
    tag_: str
    lemma_: str
    is_stop: bool


@dataclass(frozen=True)
class Tokens:
    """The attributes of a tokenizer-only doc that extraction reads, pulled out once per doc."""

    text: list[str]
    lower: list[str]
    idx: list[int]
    is_stop: list[bool]
    breaks: list[bool]

    @classmethod
    def of(cls, doc: Doc, lexemes: dict | None = None) -> Tokens:
        """`lexemes` caches per-lexeme attributes across the docs of one call (orth id -> entry)."""
        from spacy.attrs import IDX, ORTH, SPACY

        lex = {} if lexemes is None else lexemes
        arr = doc.to_array([ORTH, IDX, SPACY])
        orths = arr[:, 0].tolist()
        entries = list(map(lex.get, orths))
        if None in entries:
            for i in [i for i, entry in enumerate(entries) if entry is None]:
                entry = lex.get(orths[i])
                entries[i] = entry if entry is not None else lex.setdefault(orths[i],
                                                                            _lexeme_entry(doc.vocab[orths[i]]))
        if not entries:
            return cls([], [], [], [], [])
        text, lower, stop, brk, hyphens = map(list, zip(*entries, strict=True))
        if True in hyphens:  # a hyphen breaks unless inside a word ("drug-eluting")
            spaces = arr[:, 2].tolist()
            for i in [i for i, hyphen in enumerate(hyphens) if hyphen]:
                brk[i] = bool(spaces[i]) or i == 0 or bool(spaces[i - 1])
        return cls(text, lower, arr[:, 1].tolist(), stop, brk)


def _lexeme_entry(lex) -> tuple[str, str, bool, bool, bool]:
    """(text, lower, is_stop, breaks, is a hyphen) of a lexeme: a stop word, a space, punctuation
    or a letter-free token breaks a segment, a hyphen only between spaces (decided per token)."""
    t = lex.orth_
    if lex.is_space or lex.is_stop:
        kind = 1
    elif lex.is_punct:
        kind = 2 if t == "-" else 1
    else:
        kind = 0 if any(c.isalpha() for c in t) else 1
    return t, lex.lower_, bool(lex.is_stop), kind == 1, kind == 2


def segments(toks: Tokens) -> list[tuple[int, int]]:
    """Token ranges [start, end) between stop words, punctuation and letter-free tokens."""
    out, brk, n, i = [], toks.breaks, len(toks.breaks), 0
    while i < n:
        if brk[i]:
            i += 1
            continue
        j = i
        while j < n and not brk[j]:
            j += 1
        end = j
        while end > i and toks.text[end - 1] == "-":  # a dangling hyphen ("pre- and post-") is no word
            end -= 1
        if end > i:
            out.append((i, end))
        i = j
    return out


def segment_key(toks: Tokens, start: int, end: int) -> tuple[str, ...]:
    return tuple(toks.text[start:end])


def words_of(toks: Tokens, spans: Iterable[tuple[int, int]], tags: dict[tuple[str, ...], Tags]) -> dict[int, Word]:
    """Tagged words of a document by token index (segment_words of each span)."""
    return {w.i: w for start, end in spans for w in segment_words(toks, start, end, tags)}


def segment_words(toks: Tokens, start: int, end: int, tags: dict[tuple[str, ...], Tags]) -> list[Word]:
    """Tagged words of the segment [start, end), its first word read in the light of the stop
    word before it (verbal or nominal cue)."""
    text, lower, idx, stop = toks.text, toks.lower, toks.idx, toks.is_stop
    words = [Word(i, idx[i], text[i], lower[i], pos, tag, lemma, stop[i])
             for i, (pos, tag, lemma) in enumerate(tags[segment_key(toks, start, end)], start)]
    cue, first = (lower[start - 1] if start > 0 else ""), words[0]
    if cue in VERBAL_CONTEXT and first.pos_ in NOMINAL:
        words[0] = first._replace(pos_="VERB", tag_="VB")
    elif cue in NOMINAL_CONTEXT and first.pos_ == "VERB" and end - start == 1:
        words[0] = first._replace(pos_="NOUN", tag_="NN")
    return words


def base_noun_phrases(words: Sequence[Word]) -> Iterator[tuple[list[Word], Word]]:
    """(phrase words, head) for each base noun phrase of one tagged segment.

    A run grows over adjectives, nouns, hyphens and participles; a participle after a noun ends
    the run ("catheter having a lumen") unless a hyphen joins it ("drug-eluting"). The phrase is
    the run up to its last noun, which is its head.
    """
    run: list[Word] = []
    last = -1  # index in `run` of its last noun

    def close() -> Iterator[tuple[list[Word], Word]]:
        phrase = run[:last + 1]
        while phrase and phrase[0].tag_ == "HYPH":
            phrase = phrase[1:]
        if phrase:
            yield phrase, phrase[-1]

    for w in words:
        pos = w.pos_
        participle = pos in ("VERB", "AUX") and w.tag_ in PARTICIPLES and w.lower_ not in CLAUSE_PARTICIPLES
        if pos in PRE_NOMINAL or w.tag_ == "HYPH" or (participle and (last < 0 or run[-1].tag_ == "HYPH")):
            if pos in NOMINAL:
                last = len(run)
            run.append(w)
            continue
        if last >= 0:
            yield from close()
        run, last = [], -1
    if last >= 0:
        yield from close()
