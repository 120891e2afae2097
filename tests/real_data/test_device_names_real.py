"""On the benchmark's labels, the rare head words are the product lines' names (device_names)."""

from __future__ import annotations

import pytest

from meddevkg_core.corpus import read_corpus
from meddevkg_core.device_names import head_words_of, word_idf


@pytest.mark.real_data
def test_trade_names_are_rare_head_words_and_tell_product_lines_apart(benchmark_dir):
    words = head_words_of(read_corpus(benchmark_dir).devices.select("fda_id", "text").iter_rows())
    idf = word_idf(words)

    def rarest_shared(a: str, b: str) -> float:
        return max((idf[w] for w in words[a] & words[b]), default=0.0)

    navistar = ("P030031", "P990025", "P040036")  # NAVI-STAR in one label, NAVISTAR in the others
    assert all("NAVISTAR" in words[d] for d in navistar)
    assert all("LIFEPAK" in words[d] for d in ("P160012", "P160026", "P170018"))
    assert idf["NAVISTAR"] > idf["CATHETER"] + 2 and idf["LIFEPAK"] > idf["SYSTEM"] + 2
    # Endologix's Powerlink and Ovation endografts share only the generic name's words
    assert "POWERLINK" in words["P040002"] and "OVATION" in words["P120006"]
    assert rarest_shared("P040002", "P120006") < rarest_shared("P030031", "P990025") - 0.5
