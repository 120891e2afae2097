"""Segments, their tagged words (read in the light of the stop word before them) and base noun phrases."""

import pytest

from meddevkg_core.entities import load_spacy_pipeline
from meddevkg_core.phrases import Tokens, base_noun_phrases, segment_key, segments, words_of
from meddevkg_core.segment_tagger import tag_segments


@pytest.fixture(scope="module")
def nlp():
    return load_spacy_pipeline()


def _segments(nlp, text):
    toks = Tokens.of(nlp.tokenizer(text))
    return toks, segments(toks)


def test_segments_cut_at_stop_words_punctuation_and_numbers_but_not_inner_hyphens(nlp):
    toks, spans = _segments(nlp, "The drug-eluting stent, with 2 struts and a pre- and post-dilation balloon.")
    assert [" ".join(segment_key(toks, a, b)) for a, b in spans] == [
        "drug - eluting stent", "struts", "pre-", "post - dilation balloon"]


def _phrases(nlp, text):
    toks, spans = _segments(nlp, text)
    tags = tag_segments(sorted({segment_key(toks, a, b) for a, b in spans}), nlp)
    words = words_of(toks, spans, tags)
    return [(" ".join(w.text for w in p), h.text) for a, b in spans
            for p, h in base_noun_phrases([words[i] for i in range(a, b)])]


def test_base_noun_phrases_end_on_their_head(nlp):
    phrases = _phrases(nlp, "A balloon catheter comprising expandable struts is coupled to a drug-eluting stent.")
    assert ("balloon catheter", "catheter") in phrases
    assert ("expandable struts", "struts") in phrases
    assert ("drug - eluting stent", "stent") in phrases
    assert not any(p.startswith("comprising") for p, _ in phrases)


def test_cue_words_restore_the_reading_context_gives(nlp):
    toks, spans = _segments(nlp, "Sensing may lead to ablation. The lead is implanted.")
    tags = tag_segments(sorted({segment_key(toks, a, b) for a, b in spans}), nlp)
    words = words_of(toks, spans, tags)
    leads = [w for w in words.values() if w.lower_ == "lead"]
    assert [w.pos_ for w in leads] == ["VERB", "NOUN"]
