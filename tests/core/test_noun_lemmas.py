"""Plural nouns' lemmas are the model's lemmatizer's, without running the pipeline."""

import pytest

from meddevkg_core.entities import load_spacy_pipeline
from meddevkg_core.noun_lemmas import plural_lemmas


@pytest.fixture(scope="module")
def nlp():
    return load_spacy_pipeline()


def test_plural_lemmas_are_the_lemmatizers(nlp):
    from spacy.tokens import Doc

    words = ["stents", "catheters", "electrodes", "media", "leaves", "boxes", "analyses", "x-rays", "mice", "data"]
    doc = nlp.get_pipe("lemmatizer")(Doc(nlp.vocab, words=words, pos=["NOUN"] * len(words), tags=["NNS"] * len(words)))
    assert plural_lemmas(words, nlp) == {t.text: t.lemma_.lower() for t in doc}
