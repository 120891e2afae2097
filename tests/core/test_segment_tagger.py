"""Each distinct segment tagged once, as nlp.pipe tags it packed between ";" gaps: the layer-level
tagger, its near-tie re-checks, the background queue, POS and plural lemmas."""

import pytest

from meddevkg_core.entities import load_spacy_pipeline
from meddevkg_core.phrases import Tokens, segment_key, segments
from meddevkg_core.segment_tagger import SegmentQueue, SegmentTagger, _tag_packed, plural_lemmas, tag_segments


@pytest.fixture(scope="module")
def nlp():
    return load_spacy_pipeline()


def _distinct_segments(nlp, texts):
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


def test_segment_tagger_gives_the_tags_of_the_packed_docs(nlp):
    """The layer-level tagger (distinct words and windows, only the rows tags depend on) agrees
    with nlp.pipe on packed Docs, whatever is tagged with it and in whichever order."""
    keys = _distinct_segments(nlp, SENTENCES)
    keys += [("Sensing",), ("comprises",), ("x",), ("stent", "stent", "stent", "stent", "stent", "stent")]
    tagger = SegmentTagger.of(nlp)
    assert tagger is not None
    reference = _tag_packed(keys, nlp, 1, 200)
    assert tagger.tag(keys) == reference
    assert tagger.tag(keys[::-1]) == reference
    assert tagger.tag(keys[:3]) == {k: reference[k] for k in keys[:3]}
    assert tagger.run(tagger.prepare(keys), chunk=2).tolist() == tagger.run(tagger.prepare(keys)).tolist()


def test_near_ties_are_tagged_again_with_the_pipelines_arithmetic(nlp, monkeypatch):
    """Whether no word, some, every word or only near ties go back through the pipeline's own
    layers (thinc and BLIS), the tags are those of nlp.pipe on packed Docs."""
    import meddevkg_core.segment_tagger as segment_tagger

    keys = _distinct_segments(nlp, SENTENCES)
    reference = _tag_packed(keys, nlp, 1, 200)
    for margin in (0.0, segment_tagger.TIE_MARGIN, 0.3, 1e9):  # 0.3: a few of the words
        monkeypatch.setattr(segment_tagger, "TIE_MARGIN", margin)
        assert SegmentTagger.of(nlp).tag(keys) == reference


def test_segment_queue_tags_in_background_threads_like_at_once(nlp):
    keys = _distinct_segments(nlp, SENTENCES)
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

    keys = _distinct_segments(nlp, SENTENCES)
    keys += [("Stents",), ("stents",), ("media",), ("catheters", "catheters")]
    reference = with_pos_and_lemmas(_tag_packed(keys, nlp, 1, 200), nlp)
    for n_threads in (1, 2):
        queue = SegmentQueue(nlp, n_threads=n_threads)
        try:
            for s in range(0, len(keys), 7):
                queue.submit(keys[s:s + 7])
            assert queue.tags() == reference
        finally:
            queue.close()


def test_fast_layers_match_the_pipelines_layers(nlp):
    """Each encoder layer in numpy (pieces laid out contiguously, first-layer products per word)
    gives thinc's outputs up to the order of the sums."""
    import numpy as np

    from meddevkg_core.segment_tagger import _FastBlock

    tagger = SegmentTagger.of(nlp)
    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, tagger.width)).astype("float32")
    left, mid, right = (rng.integers(0, 50, 400) for _ in range(3))
    X = np.concatenate([table[left], table[mid], table[right]], axis=1)
    for block, fast in zip(tagger.blocks, tagger.fast_blocks, strict=True):
        assert isinstance(fast, _FastBlock)
        expected = block.predict(X)
        assert np.abs(fast.windows(table, left, mid, right) - expected).max() < 1e-4  # products per row
        assert np.abs(fast.windows(table, left[:30], mid[:30], right[:30]) - expected[:30]).max() < 1e-4  # windows


def test_plural_lemmas_are_the_lemmatizers(nlp):
    from spacy.tokens import Doc

    words = ["stents", "catheters", "electrodes", "media", "leaves", "boxes", "analyses", "x-rays", "mice", "data"]
    doc = nlp.get_pipe("lemmatizer")(Doc(nlp.vocab, words=words, pos=["NOUN"] * len(words), tags=["NNS"] * len(words)))
    assert plural_lemmas(words, nlp) == {t.text: t.lemma_.lower() for t in doc}


def test_a_pipeline_without_the_expected_tagger_is_not_layer_tagged():
    import spacy

    assert SegmentTagger.of(spacy.blank("en")) is None
