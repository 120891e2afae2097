"""The distinct segments of a corpus tagged once each, fast: POS, fine tag and lemma per word.

The segments phrases.py cuts texts into repeat heavily across a corpus ("distal end", "elongate
shaft"), so only the distinct ones go through the tagger, packed many to a Doc with a gap wider
than the tagger's receptive field between them (packed_tagging.py gives their fine tags, by the
tagger's own layers run directly where the model allows it).

Only the tagger runs: POS comes from the model's own tag-to-POS table (its attribute ruler's
single-tag rules) and lemmas only for plural nouns, the one place they are used (noun_lemmas.py).
SegmentQueue runs the tagger's layers in background threads while the caller tokenizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from meddevkg_core.noun_lemmas import plural_lemmas
from meddevkg_core.packed_tagging import PreparedSegments, SegmentTagger, tag_packed

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from spacy.language import Language

SEGMENTS_PER_DOC = 200
PLURAL_TAGS = frozenset({"NNS", "NNPS"})
"""Penn tags of plural nouns: the only words whose lemma is looked up."""

Tags = tuple[tuple[str, str, str], ...]
"""(pos, tag, lemma) per word of a segment."""


def pos_table(nlp: Language) -> dict[str, str]:
    """Fine tag -> coarse POS, as the model's attribute ruler maps a bare tag."""
    table: dict[str, str] = {}
    if "attribute_ruler" in nlp.pipe_names:
        ruler: Any = nlp.get_pipe("attribute_ruler")  # spaCy types a component as a bare callable
        for rule in ruler.patterns:
            pattern = rule["patterns"][0]
            if len(pattern) == 1 and set(pattern[0]) == {"TAG"} and "POS" in rule["attrs"]:
                table[pattern[0]["TAG"]] = rule["attrs"]["POS"]
    return table


def tag_segments(keys: Sequence[tuple[str, ...]], nlp: Language, n_process: int = 1,
                 per_doc: int = SEGMENTS_PER_DOC) -> dict[tuple[str, ...], Tags]:
    """POS tags (and plural-noun lemmas) of every distinct segment, each tagged once as if packed
    `per_doc` to a Doc between ";" gaps. `n_process > 1` runs the layers in a background thread."""
    queue = SegmentQueue(nlp, n_threads=n_process, per_doc=per_doc)
    try:
        queue.submit(keys)
        return queue.tags()
    finally:
        queue.close()


def with_pos_and_lemmas(raw: dict[tuple[str, ...], tuple[str, ...]], nlp: Language,
                        to_pos: dict[str, str] | None = None) -> dict[tuple[str, ...], Tags]:
    """Fine tags per segment -> (pos, tag, lemma) per word."""
    to_pos = pos_table(nlp) if to_pos is None else to_pos
    plurals = sorted({w.lower() for key, tags in raw.items() for w, t in zip(key, tags, strict=True)
                      if t in PLURAL_TAGS})
    lemmas = plural_lemmas(plurals, nlp)
    return {key: tuple((to_pos.get(t, "X"), t, lemmas.get(w.lower(), w.lower()) if t in PLURAL_TAGS else w.lower())
                       for w, t in zip(key, tags, strict=True))
            for key, tags in raw.items()}


class SegmentQueue:
    """Segments submitted batch by batch and tagged once each: in one background thread when
    `n_threads > 1` (so the caller tokenizes and builds mentions meanwhile), else when their tags
    are asked for.

    Only the model arithmetic runs in the background (thinc and numpy; BLIS's matrix products
    release the GIL), one batch after another, so one thread at a time calls BLIS; what writes to
    spaCy's vocab (new Docs, lemmas) stays in the calling thread. Two threads is what two cores
    can use: more would only share the one BLIS-bound thread's work.
    """

    def __init__(self, nlp: Language, n_threads: int = 1, per_doc: int = SEGMENTS_PER_DOC) -> None:
        self.nlp, self.per_doc = nlp, per_doc
        self.tagger = SegmentTagger.of(nlp)
        self.to_pos = pos_table(nlp)
        self._done: dict[tuple[str, ...], Tags] = {}
        self._lemmas: dict[str, str] = {}  # plural noun (lower-cased) -> its lemma
        # (batch, keys, job, future)
        self._pending: list[
            tuple[int, Sequence[tuple[str, ...]], PreparedSegments | None, Future[np.ndarray] | None]] = []
        self._submitted = 0
        self._pool: ThreadPoolExecutor | None = None
        if n_threads > 1 and self.tagger is not None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="segment-tagger")

    def submit(self, keys: Sequence[tuple[str, ...]]) -> int:
        """Queue `keys` (distinct, not submitted before); returns the batch's number for `tags`."""
        self._submitted += 1
        if keys:
            job, future = None, None
            if self.tagger is not None:
                job = self.tagger.prepare(keys)
                if self._pool is not None:
                    future = self._pool.submit(self.tagger.run, job)
            self._pending.append((self._submitted, keys, job, future))
        return self._submitted

    def tags(self, through: int | None = None) -> dict[tuple[str, ...], Tags]:
        """Tags of every segment of batches up to number `through` (default: all submitted so far),
        waiting for the background threads; the dict grows with later calls."""
        limit = self._submitted if through is None else through
        ready = [p for p in self._pending if p[0] <= limit]
        if not ready:
            return self._done
        self._pending = [p for p in self._pending if p[0] > limit]
        if self.tagger is None:
            raw = tag_packed([k for _, batch, *_ in ready for k in batch], self.nlp, 1, self.per_doc)
            self._done.update(with_pos_and_lemmas(raw, self.nlp, self.to_pos))
            return self._done
        for _, keys, job, future in ready:  # in the order they were prepared
            assert job is not None  # `submit` prepares a job whenever there is a tagger
            guesses = future.result() if future is not None else self.tagger.run(job)
            self._done.update(self._tags_of(keys, job, guesses))
        return self._done

    def _tags_of(self, keys: Sequence[tuple[str, ...]], job: PreparedSegments,
                 guesses: np.ndarray) -> dict[tuple[str, ...], Tags]:
        """`with_pos_and_lemmas` of the job's fine tags, each distinct (word, tag) worked out once
        and each plural's lemma once per queue."""
        assert self.tagger is not None  # jobs exist only when there is a tagger
        labels = self.tagger.labels
        n_labels = len(labels)
        pairs, inverse = np.unique(job.ids * n_labels + guesses, return_inverse=True)
        vocab, lemmas, to_pos = job.vocab, self._lemmas, self.to_pos
        tagged = [(vocab[code // n_labels], labels[code % n_labels]) for code in pairs.tolist()]
        plurals = sorted({w.lower() for w, t in tagged if t in PLURAL_TAGS} - lemmas.keys())
        if plurals:
            found = plural_lemmas(plurals, self.nlp)
            lemmas.update((w, found.get(w, w)) for w in plurals)
        triples = []
        for w, t in tagged:
            lower = w.lower()
            triples.append((to_pos.get(t, "X"), t, lemmas[lower] if t in PLURAL_TAGS else lower))
        per_word = list(map(triples.__getitem__, inverse.reshape(-1).tolist()))
        out: dict[tuple[str, ...], Tags] = {}
        i = 0
        for key in keys:
            j = i + len(key)
            out[key] = tuple(per_word[i:j])
            i = j
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
