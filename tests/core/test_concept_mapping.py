"""Mapping a phrase to a MedDevOnto concept: exact, then head noun."""

import pytest

from meddevkg_core.concept_mapping import map_phrase
from meddevkg_core.ontology import load_meddevonto


@pytest.fixture(scope="module")
def onto():
    return load_meddevonto()


def test_map_phrase_tiers(onto):
    assert map_phrase("drug eluting stent", onto).map_tier == "exact"
    steerable = map_phrase("bi directional steerable catheter", onto, head="catheter")
    assert (steerable.concept_id, steerable.map_tier) == ("C0085590", "head_noun")
    assert map_phrase("self expanding stent graft", onto).concept_id == onto.lookup("stent graft")  # last two words
    assert map_phrase("stent graft system", onto).concept_id == onto.lookup("stent graft")  # container head
    none = map_phrase("tissue pad", onto, head="pad")
    assert (none.concept_id, none.map_tier) == (None, "none")
