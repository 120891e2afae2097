"""The product-line names in a device's label, for telling one product line of a company from another.

A PMA label starts with the product code's generic name and the trade name ("SYSTEM, ENDOVASCULAR
GRAFT, AORTIC ANEURYSM TREATMENT ENDOLOGIX POWERLINK SYSTEM. POWERLINK SYSTEM ... ARE INDICATED FOR");
the indications follow the first full stop. The trade name's words are rare across a catalogue
(POWERLINK, OVATION, NAVISTAR, LIFEPAK), the generic name's are shared by every device of the code.

Why it matters: a company marks a product line's generations with the same patents, and its other
lines with other patents. On the benchmark, of the gold devices' pool pairs whose patent is gold for
another device, 39 of the 124 whose two devices share a label-head word held by at most five of the
434 devices are gold, and 14 of the 3,814 whose devices share none (Endologix's Powerlink and
Ovation share no gold patent; the NAVISTAR catheters and the LIFEPAK defibrillators share most of
theirs). Embeddings miss this: the two endografts' labels are as alike as the two catheters'.
How rare is rare enough is left to the reranker: the words come with their inverse document
frequency over the catalogue (word_idf), not a cut-off.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping

_WORD = re.compile(r"[A-Z0-9]+")


def label_head(text: str) -> str:
    """The label up to its first full stop: the generic and the trade name, without the indications."""
    end = text.find(". ")
    return text if end < 0 else text[:end]


def head_words(text: str) -> frozenset[str]:
    """The distinct words of the label's head, upper case, hyphens closed up (NAVI-STAR = NAVISTAR);
    words shorter than three characters and bare numbers are left out."""
    words = _WORD.findall(label_head(text).upper().replace("-", ""))
    return frozenset(w for w in words if len(w) >= 3 and not w.isdigit())


def head_words_of(texts: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    """head_words per device, from (fda_id, label text) rows."""
    return {fda_id: head_words(text) for fda_id, text in texts}


def word_idf(words: Mapping[str, frozenset[str]]) -> dict[str, float]:
    """ln(devices / devices holding the word) over the catalogue `words` (head_words per device):
    high for a trade name, low for a generic name's words."""
    count = Counter(w for device_words in words.values() for w in device_words)
    return {w: math.log(len(words) / n) for w, n in count.items()}
