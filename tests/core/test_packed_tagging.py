"""The tagger's own layers run directly give the fine tags nlp.pipe gives the segments packed between
";" gaps: the layer-level tagger, its near-tie re-checks, its numpy layers."""

import pytest

from meddevkg_core.entities import load_spacy_pipeline
from meddevkg_core.packed_tagging import SegmentTagger, tag_packed
from tests.core.test_segment_tagger import SENTENCES, distinct_segments


@pytest.fixture(scope="module")
def nlp():
    return load_spacy_pipeline()


def test_segment_tagger_gives_the_tags_of_the_packed_docs(nlp):
    """The layer-level tagger (distinct words and windows, only the rows tags depend on) agrees
    with nlp.pipe on packed Docs, whatever is tagged with it and in whichever order."""
    keys = distinct_segments(nlp, SENTENCES)
    keys += [("Sensing",), ("comprises",), ("x",), ("stent", "stent", "stent", "stent", "stent", "stent")]
    tagger = SegmentTagger.of(nlp)
    assert tagger is not None
    reference = tag_packed(keys, nlp, 1, 200)
    assert tagger.tag(keys) == reference
    assert tagger.tag(keys[::-1]) == reference
    assert tagger.tag(keys[:3]) == {k: reference[k] for k in keys[:3]}
    assert tagger.run(tagger.prepare(keys), chunk=2).tolist() == tagger.run(tagger.prepare(keys)).tolist()


def test_near_ties_are_tagged_again_with_the_pipelines_arithmetic(nlp, monkeypatch):
    """Whether no word, some, every word or only near ties go back through the pipeline's own
    layers (thinc and BLIS), the tags are those of nlp.pipe on packed Docs."""
    import meddevkg_core.packed_tagging as packed_tagging

    keys = distinct_segments(nlp, SENTENCES)
    reference = tag_packed(keys, nlp, 1, 200)
    for margin in (0.0, packed_tagging.TIE_MARGIN, 0.3, 1e9):  # 0.3: a few of the words
        monkeypatch.setattr(packed_tagging, "TIE_MARGIN", margin)
        assert SegmentTagger.of(nlp).tag(keys) == reference


def test_fast_layers_match_the_pipelines_layers(nlp):
    """Each encoder layer in numpy (pieces laid out contiguously, first-layer products per word)
    gives thinc's outputs up to the order of the sums."""
    import numpy as np

    from meddevkg_core.packed_tagging import _FastBlock

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


def test_a_pipeline_without_the_expected_tagger_is_not_layer_tagged():
    import spacy

    assert SegmentTagger.of(spacy.blank("en")) is None
