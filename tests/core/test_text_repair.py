"""Restoring the "the"s the benchmark's device texts lost (text_repair)."""

from __future__ import annotations

import polars as pl

from meddevkg_core.text_repair import lost_the, repair_counts, repair_texts, restore_the


def test_fragments_of_one_word_are_joined_in_the_case_of_their_letters():
    text, words = restore_the("DIAGNOSTIC/ABLATION CA TERS, Cardiac Ca ter and Endopros sis")
    assert text == "DIAGNOSTIC/ABLATION CATHETERS, Cardiac Catheter and Endoprosthesis"
    assert words == ["catheters", "catheter", "endoprosthesis"]


def test_a_word_that_began_with_the_gets_it_back():
    text, words = restore_the("NAVISTAR RMOCOOL CATHETER for resynchronization rapy")
    assert text == "NAVISTAR THERMOCOOL CATHETER for resynchronization therapy"
    assert words == ["thermocool", "therapy"]


def test_short_fragments_and_words_of_their_own_are_left_alone():
    # "SE" (these), "ON" (theon) and "TA" (theta) are too short to tell from a word or an abbreviation
    assert restore_the("WHICH INCLUDE SE MODELS ON TA") == ("WHICH INCLUDE SE MODELS ON TA", [])
    # "an m" could be "anthem", but both fragments are commoner than that word: two words
    assert restore_the("length of an m") == ("length of an m", [])
    # a fragment is a whole token, never part of one
    assert restore_the("XRAPY CATERS") == ("XRAPY CATERS", [])


def test_intact_text_is_not_changed():
    text = "A catheter with a thermal sensor; the other prosthesis and their therapy."
    assert restore_the(text) == (text, [])


def test_damage_is_detected_only_where_long_texts_lack_the_word_the():
    long_without = ["word " * 40] * 25
    long_with = ["word " * 40 + "the end"] * 25
    assert lost_the(long_without)
    assert not lost_the(long_with)
    assert not lost_the(["word " * 40] * 5)  # too few long texts to tell
    assert not lost_the(["CA TER"] * 100)  # short texts say nothing


def test_repair_texts_records_each_repaired_text_and_leaves_intact_frames_as_they_are():
    devices = pl.DataFrame({"fda_id": [f"P{i:06d}" for i in range(30)],
                            "text": ["Approval for CA TER system " + "word " * 40] * 29 + [None]})
    repaired, repairs = repair_texts(devices)
    assert repaired["text"][0].startswith("Approval for CATHETER system")
    assert repaired["text"][29] is None
    assert repairs.height == 29 and repairs["words"][0] == "catheter"
    assert repair_counts(repairs) == {"devices": 29, "words": 29}

    intact = devices.with_columns(pl.col("text").str.replace("word", "the word"))
    same, none = repair_texts(intact)
    assert same.equals(intact) and none.height == 0
    assert repair_counts(none) == {"devices": 0, "words": 0}
