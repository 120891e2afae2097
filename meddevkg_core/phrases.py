"""Candidate noun phrases at corpus speed: each distinct phrase is tagged once, not each document.

Running spaCy's neural tagger and parser over every abstract costs ~70 documents/s on two
cores, and 698K patents would take hours. Noun phrases never cross a stop word, punctuation or
a number, so a text is cut there with the tokenizer alone (~18K documents/s) into short
segments. Segments repeat heavily across a corpus ("distal end", "elongate shaft"), so only
the distinct ones go through the tagger, packed many to a Doc with a gap wider than the
tagger's receptive field between them. Inside a tagged segment a base noun phrase is the longest run of adjectives,
nouns and pre-nominal participles that ends on a noun; its head is that last noun (English
base noun phrases are head-final), which is what the parser's noun-chunk root gives for them.

Only the tagger runs: POS comes from the model's own tag-to-POS table (its attribute ruler's
single-tag rules) and lemmas only for plural nouns, the one place they are used.

Tagged without the words around it, a one-word segment can lose its reading: after a modal,
an auxiliary or "to" its first word is read as a verb ("may lead to"), after a determiner as
a noun ("the lead").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.tokens import Doc

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
SEGMENTS_PER_DOC = 200
_GAP = (";",) * 4
"""Between packed segments: as wide as the tagger's receptive field (4 window-1 CNN layers), so a
segment's tags never depend on its neighbours, and a device tagged alone or in a backfill of all
devices gets the same mentions. Semicolons tag isolated fragments best: nouns, acronyms and
participles as in running text."""
_TAG_PIPES_OFF = ("parser", "ner", "senter")


@dataclass(frozen=True)
class Word:
    """One token of a document with the tags its segment received."""

    i: int
    idx: int
    text: str
    lower_: str
    pos_: str
    tag_: str
    lemma_: str
    is_stop: bool


Tags = tuple[tuple[str, str, str], ...]
"""(pos, tag, lemma) per word of a segment."""


@dataclass(frozen=True)
class Tokens:
    """The attributes of a tokenizer-only doc that extraction reads, pulled out once per doc."""

    text: list[str]
    lower: list[str]
    idx: list[int]
    is_stop: list[bool]
    breaks: list[bool]

    @classmethod
    def of(cls, doc: Doc) -> Tokens:
        text, lower, idx, stop, brk = [], [], [], [], []
        prev_ws = True
        for tok in doc:
            t, ws = tok.text, tok.whitespace_
            text.append(t)
            lower.append(tok.lower_)
            idx.append(tok.idx)
            stop.append(tok.is_stop)
            if tok.is_space or tok.is_stop:
                b = True
            elif tok.is_punct:  # a hyphen inside a word ("drug-eluting") does not break
                b = not (t == "-" and not ws and not prev_ws)
            else:
                b = not any(c.isalpha() for c in t)
            brk.append(b)
            prev_ws = bool(ws)
        return cls(text, lower, idx, stop, brk)


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


def pos_table(nlp: Language) -> dict[str, str]:
    """Fine tag -> coarse POS, as the model's attribute ruler maps a bare tag."""
    table: dict[str, str] = {}
    if "attribute_ruler" in nlp.pipe_names:
        for rule in nlp.get_pipe("attribute_ruler").patterns:
            pattern = rule["patterns"][0]
            if len(pattern) == 1 and set(pattern[0]) == {"TAG"} and "POS" in rule["attrs"]:
                table[pattern[0]["TAG"]] = rule["attrs"]["POS"]
    return table


def tag_segments(keys: Sequence[tuple[str, ...]], nlp: Language, n_process: int = 1,
                 per_doc: int = SEGMENTS_PER_DOC) -> dict[tuple[str, ...], Tags]:
    """POS tags (and plural-noun lemmas) of every distinct segment, tagged once, `per_doc` to a Doc."""
    from spacy.tokens import Doc

    def packed() -> Iterator[Doc]:
        for s in range(0, len(keys), per_doc):
            words: list[str] = list(_GAP)
            for key in keys[s:s + per_doc]:
                words.extend(key)
                words.extend(_GAP)
            yield Doc(nlp.vocab, words=words)

    to_pos = pos_table(nlp)
    off = [p for p in nlp.pipe_names if p not in ("tok2vec", "tagger")]
    raw: dict[tuple[str, ...], tuple[str, ...]] = {}
    chunks = (keys[s:s + per_doc] for s in range(0, len(keys), per_doc))
    for batch, doc in zip(chunks, nlp.pipe(packed(), batch_size=8, disable=off, n_process=n_process), strict=True):
        tags = [t.tag_ for t in doc]
        pos = len(_GAP)
        for key in batch:
            raw[key] = tuple(tags[pos:pos + len(key)])
            pos += len(key) + len(_GAP)
    plurals = sorted({w.lower() for key, tags in raw.items() for w, t in zip(key, tags, strict=True)
                      if t in ("NNS", "NNPS")})
    lemmas = plural_lemmas(plurals, nlp)
    return {key: tuple((to_pos.get(t, "X"), t, lemmas.get(w.lower(), w.lower()) if t in ("NNS", "NNPS") else w.lower())
                       for w, t in zip(key, tags, strict=True))
            for key, tags in raw.items()}


def plural_lemmas(words: Sequence[str], nlp: Language) -> dict[str, str]:
    """Singular forms of plural nouns through the model's rule lemmatizer, all in one Doc."""
    if not words or "lemmatizer" not in nlp.pipe_names:
        return {}
    from spacy.tokens import Doc

    doc = Doc(nlp.vocab, words=list(words), pos=["NOUN"] * len(words), tags=["NNS"] * len(words))
    doc = nlp.get_pipe("lemmatizer")(doc)
    return {t.text: t.lemma_.lower() for t in doc}


def words_of(toks: Tokens, spans: Iterable[tuple[int, int]], tags: dict[tuple[str, ...], Tags]) -> dict[int, Word]:
    """Tagged words of a document by token index, the first word of a segment read in the light
    of the stop word before it (verbal or nominal cue)."""
    out: dict[int, Word] = {}
    for start, end in spans:
        cue = toks.lower[start - 1] if start > 0 else ""
        for i, (pos, tag, lemma) in enumerate(tags[segment_key(toks, start, end)], start):
            if i == start and cue in VERBAL_CONTEXT and pos in NOMINAL:
                pos, tag = "VERB", "VB"
            elif i == start and cue in NOMINAL_CONTEXT and pos == "VERB" and end - start == 1:
                pos, tag = "NOUN", "NN"
            out[i] = Word(i, toks.idx[i], toks.text[i], toks.lower[i], pos, tag, lemma, toks.is_stop[i])
    return out


def base_noun_phrases(words: Sequence[Word]) -> Iterator[tuple[list[Word], Word]]:
    """(phrase words, head) for each base noun phrase of one tagged segment.

    A run grows over adjectives, nouns, hyphens and participles; a participle after a noun ends
    the run ("catheter having a lumen") unless a hyphen joins it ("drug-eluting"). The phrase is
    the run up to its last noun, which is its head.
    """
    run: list[Word] = []

    def close() -> Iterator[tuple[list[Word], Word]]:
        last = max((k for k, w in enumerate(run) if w.pos_ in NOMINAL), default=None)
        if last is not None:
            phrase = run[:last + 1]
            while phrase and phrase[0].tag_ == "HYPH":
                phrase = phrase[1:]
            if phrase:
                yield phrase, phrase[-1]

    for w in words:
        joined = bool(run) and run[-1].tag_ == "HYPH"
        participle = w.pos_ in ("VERB", "AUX") and w.tag_ in PARTICIPLES and w.lower_ not in CLAUSE_PARTICIPLES
        if w.pos_ in PRE_NOMINAL or w.tag_ == "HYPH" or (participle and (joined or not any(
                r.pos_ in NOMINAL for r in run))):
            run.append(w)
            continue
        yield from close()
        run = []
    yield from close()
