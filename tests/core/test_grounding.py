"""Quote-then-Verify: a quoted span found in its text exactly, case-insensitively or fuzzily, or refused."""

from meddevkg_core.grounding import ground_span


def test_ground_span_exact_prefers_the_expected_offset():
    text = "stent, then a second stent"
    assert ground_span("stent", text) == ground_span("stent", text, expected_start=0)
    g = ground_span("stent", text, expected_start=21)
    assert (g.kind, g.start, g.end, g.score) == ("exact", 21, 26, 1.0)
    assert ground_span("stent", text, expected_start=3).start == 0  # a wrong hint falls back to search


def test_ground_span_case_insensitive():
    text = "Delivered over a GUIDEWIRE into the artery."
    g = ground_span("guidewire", text)
    assert g.kind == "case_insensitive" and text[g.start:g.end] == "GUIDEWIRE"


def test_ground_span_fuzzy_finds_the_best_window():
    text = "The system has a bi-directional steerable catheter with four electrodes."
    g = ground_span("bidirectional steerable cathetr", text)  # a hyphen and a letter missing
    assert g.kind == "fuzzy" and 0.85 <= g.score < 1.0
    assert text[g.start:g.end] == "bi-directional steerable catheter"  # a window longer than the span


def test_ground_span_rejects_what_is_not_in_the_text():
    text = "A balloon catheter for angioplasty."
    assert ground_span("left atrial appendage occluder", text) is None
    assert ground_span("baloon catheter", text, min_similarity=0.99) is None
    assert ground_span("", text) is None and ground_span("   ", text) is None
    assert ground_span("stent", "") is None
