import math

import polars as pl
import pytest

from meddevkg_core.device_names import head_words, head_words_of, label_head, word_idf
from meddevkg_core.text_adapter import Vectors

POWERLINK = ("SYSTEM, ENDOVASCULAR GRAFT, AORTIC ANEURYSM TREATMENT ENDOLOGIX POWERLINK SYSTEM. POWERLINK SYSTEM "
             "IS INDICATED FOR PATIENTS WITH AAA.")


def test_the_head_is_the_label_up_to_its_first_full_stop():
    assert label_head(POWERLINK) == "SYSTEM, ENDOVASCULAR GRAFT, AORTIC ANEURYSM TREATMENT ENDOLOGIX POWERLINK SYSTEM"
    assert label_head("Tissue Graft Of 6mm And Greater") == "Tissue Graft Of 6mm And Greater"
    assert label_head("STENT 2.5 MM. FOR USE IN") == "STENT 2.5 MM"  # a decimal point is no full stop


def test_head_words_close_up_hyphens_and_leave_out_short_words_and_numbers():
    assert head_words("Navi-Star deflectable tip catheter, 7 F, model 252. Indicated") == frozenset(
        {"NAVISTAR", "DEFLECTABLE", "TIP", "CATHETER", "MODEL"})
    assert head_words(POWERLINK) == frozenset({"SYSTEM", "ENDOVASCULAR", "GRAFT", "AORTIC", "ANEURYSM",
                                               "TREATMENT", "ENDOLOGIX", "POWERLINK"})


def test_a_words_idf_is_the_log_of_devices_over_devices_holding_it():
    words = {"A": frozenset({"STENT", "XACT"}), "B": frozenset({"STENT", "OMNILINK"}),
             "C": frozenset({"STENT", "OMNILINK", "ELITE"}), "D": frozenset()}
    assert word_idf(words) == pytest.approx({"STENT": math.log(4 / 3), "OMNILINK": math.log(2), "XACT": math.log(4),
                                             "ELITE": math.log(4)})
    assert word_idf({}) == {}


def test_vectors_carry_the_devices_head_words_when_given_their_texts():
    embeddings = pl.DataFrame({"doc_id": ["P1"], "content_hash": ["h"], "embedding": [[1.0, 0.0]]},
                              schema={"doc_id": pl.String, "content_hash": pl.String,
                                      "embedding": pl.List(pl.Float32)})
    texts = pl.DataFrame({"fda_id": ["P1"], "text": [POWERLINK], "applicant": ["ENDOLOGIX"]})
    vectors = Vectors.of(embeddings, embeddings.clear(), texts)
    assert vectors.device_words == head_words_of([("P1", POWERLINK)])
    assert Vectors.of(embeddings, embeddings.clear()).device_words == {}
    assert vectors.with_patents(embeddings).device_words == vectors.device_words
