"""Each distinct segment tagged once, as nlp.pipe tags it packed between ";" gaps: the background
queue, POS and plural lemmas."""

import pytest

from meddevkg_core.entities import load_spacy_pipeline
from meddevkg_core.packed_tagging import tag_packed
from meddevkg_core.phrases import Tokens, segment_key, segments
from meddevkg_core.segment_tagger import SegmentQueue, tag_segments


@pytest.fixture(scope="module")
def nlp():
    return load_spacy_pipeline()


def distinct_segments(nlp, texts):
    keys = set()
    for text in texts:
        toks = Tokens.of(nlp.tokenizer(text))
        keys |= {segment_key(toks, a, b) for a, b in segments(toks)}
    return sorted(keys)


def test_a_segment_is_tagged_the_same_whatever_is_tagged_with_it(nlp):
    key = ("steerable", "ablation", "catheter")
    alone = tag_segments([key], nlp)[key]
    crowded = tag_segments([("comprises",), key, ("Sensing", "may", "lead")] * 3, nlp)[key]
    assert alone == crowded
    assert [pos for pos, _, _ in alone][-1] == "NOUN"


def test_plural_heads_get_their_lemma(nlp):
    tags = tag_segments([("electrodes",), ("drug", "-", "eluting", "stents")], nlp)
    assert tags[("electrodes",)][0][2] == "electrode"
    assert tags[("drug", "-", "eluting", "stents")][-1][2] == "stent"


SENTENCES = [
    "A drug-eluting stent is advanced by a bi-directional steerable catheter to treat coronary artery disease.",
    "Sensing may lead to ablation. The lead is implanted in the right ventricle via the superior vena cava.",
    "An implantable cardioverter defibrillator (ICD) has two electrodes, a pulse generator and a pacing lead.",
    "The distal end of the elongate shaft comprises a radiopaque marker band and an inflatable balloon.",
]


def test_segment_queue_tags_in_background_threads_like_at_once(nlp):
    keys = distinct_segments(nlp, SENTENCES)
    queue = SegmentQueue(nlp, n_threads=2)
    try:
        first = queue.submit(keys[:5])
        queue.submit([])
        queue.submit(keys[5:])
        early = dict(queue.tags(through=first))
        assert set(early) == set(keys[:5])
        assert queue.tags() == tag_segments(keys, nlp)
    finally:
        queue.close()


def test_segment_queue_tags_are_the_packed_docs_tags_with_pos_and_lemmas(nlp):
    """The queue works out POS and plural lemmas per distinct (word, tag) and per batch; the same
    as with_pos_and_lemmas over nlp.pipe's tags of the packed Docs, in one thread or two."""
    from meddevkg_core.segment_tagger import with_pos_and_lemmas

    keys = distinct_segments(nlp, SENTENCES)
    keys += [("Stents",), ("stents",), ("media",), ("catheters", "catheters")]
    reference = with_pos_and_lemmas(tag_packed(keys, nlp, 1, 200), nlp)
    for n_threads in (1, 2):
        queue = SegmentQueue(nlp, n_threads=n_threads)
        try:
            for s in range(0, len(keys), 7):
                queue.submit(keys[s:s + 7])
            assert queue.tags() == reference
        finally:
            queue.close()
