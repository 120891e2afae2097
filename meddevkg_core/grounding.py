"""Quote-then-Verify (METHOD.md §6): a span an extractor quotes, found in its source text or refused.

Both extractors, spaCy (entities.py) and the LLM (llm_extraction.py), keep a mention only where
its span is found in the document: exactly, then case-insensitively, then as a close fuzzy
window. A span that is not found is a hallucination; the extractor rejects it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

MIN_FUZZY_SIMILARITY = 0.85


@dataclass(frozen=True)
class Grounding:
    """Where a quoted span sits in its text, and how it was found (Quote-then-Verify)."""

    kind: str  # exact / case_insensitive / fuzzy
    start: int
    end: int
    score: float


def ground_span(span: str, text: str, *, expected_start: int | None = None,
                min_similarity: float = MIN_FUZZY_SIMILARITY) -> Grounding | None:
    """Verify that `span` is quoted from `text`: exact, then case-insensitive, then fuzzy.

    Fuzzy is the best window of the span's length +-20% by normalised Levenshtein similarity
    (1 - distance / max length) on lower-cased strings, kept if >= `min_similarity` (METHOD §6).
    `expected_start` lets a caller that knows the offset (the spaCy path) confirm it directly.
    Ties go to the earliest window. None means the span is not in the text (a hallucination).
    """
    if not span or not span.strip() or not text:
        return None
    if expected_start is not None and text.startswith(span, expected_start):
        return Grounding("exact", expected_start, expected_start + len(span), 1.0)
    if (i := text.find(span)) >= 0:
        return Grounding("exact", i, i + len(span), 1.0)
    if m := re.search(re.escape(span), text, flags=re.IGNORECASE):
        return Grounding("case_insensitive", m.start(), m.end(), 1.0)
    return _fuzzy_window(span, text, min_similarity)


def _fuzzy_window(span: str, text: str, min_similarity: float) -> Grounding | None:
    needle, hay = span.lower(), text.lower()
    if len(hay) != len(text):  # a few characters change length when lower-cased; keep offsets valid
        hay = text
    n = len(needle)
    lengths = range(max(1, math.floor(n * 0.8)), min(len(hay), math.ceil(n * 1.2)) + 1)
    windows = [(i, length) for i in range(len(hay)) for length in lengths if i + length <= len(hay)]
    if not windows:
        return None
    best = process.extractOne(needle, [hay[i:i + k] for i, k in windows],
                              scorer=Levenshtein.normalized_similarity, score_cutoff=min_similarity)
    if best is None:
        return None
    i, length = windows[best[2]]
    return Grounding("fuzzy", i, i + length, float(best[1]))
