"""Device texts that lost every "the", restored before anything reads them.

The benchmark's device texts were made from FDA approval order statements with every "the"
replaced by a space, inside words too: CATHETER became "CA TER", THERAPY " RAPY", ENDOPROSTHESIS
"ENDOPROS SIS", THERMOCOOL " RMOCOOL" (in 1 of the 322 device texts of 30 words or more the word
"the" is left; in FDA's own statements, in 957 of 964). The embeddings, the entity extraction
(catheter is an anchor term) and the lexical scores then see fragments. The repair puts a "the"
back where FDA's own text says a word was: two fragments joined by one space whose join with
"the" is a word FDA writes, unless both fragments are at least as common as that word themselves;
and a fragment of 4 letters or more that is no word of FDA's but is one with "the" in front
(`the_words.csv` holds exactly the words these rules can restore; scripts/build_the_words.py).
Short stop words ("these", "then") stay lost: they carry nothing here. On the benchmark's patents,
damaged the same way, the repair restores 74% of the words holding a "the" with 1 wrong word in
2,588 (tests/real_data/test_text_repair_real).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

import polars as pl

from meddevkg_core import schemas

MIN_PREFIX_FRAGMENT = 4
"""A shorter fragment ("se", "on", "ta") is too often a word or an abbreviation of its own."""
MIN_LONG_TEXT_WORDS = 30
MIN_LONG_TEXTS = 20
MAX_SHARE_WITH_THE = 0.05
"""A corpus's device texts have lost their "the"s when, among at least MIN_LONG_TEXTS texts of
MIN_LONG_TEXT_WORDS words or more, fewer than this share hold the word "the"."""

_TOKEN = re.compile(r"[A-Za-z]+|[^A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]+")
_THE = re.compile(r"\bthe\b", re.IGNORECASE)


@cache
def the_words() -> dict[tuple[str, str], str]:
    """The packaged words, keyed by the (head, tail) fragments a lost "the" leaves of them."""
    data = resources.files("meddevkg_core").joinpath("data", "text_repair", "the_words.csv").read_bytes()
    table = pl.read_csv(data, schema_overrides={"head": pl.String, "tail": pl.String}).fill_null("")
    return {(head, tail): word for word, head, tail in table.select("word", "head", "tail").iter_rows()}


def lost_the(texts: list[str]) -> bool:
    """Whether these texts show the damage: long English texts without the word "the"."""
    long = [t for t in texts if len(_WORD.findall(t)) >= MIN_LONG_TEXT_WORDS]
    if len(long) < MIN_LONG_TEXTS:
        return False
    return sum(1 for t in long if _THE.search(t)) < MAX_SHARE_WITH_THE * len(long)


def _the(*neighbours: str) -> str:
    letters = "".join(neighbours)
    return "THE" if letters.isupper() else "the"


def restore_the(text: str) -> tuple[str, list[str]]:
    """`text` with the lost "the"s put back, and the words restored (in order)."""
    table = the_words()
    parts = _TOKEN.findall(text)
    out: list[str] = []
    restored: list[str] = []
    i = 0
    while i < len(parts):
        part = parts[i]
        if part[0].isalpha():
            if i + 2 < len(parts) and parts[i + 1] == " " and parts[i + 2][0].isalpha():
                tail = parts[i + 2]
                word = table.get((part.lower(), tail.lower()))
                if word is not None:
                    out.append(part + _the(part[-1], tail[0]) + tail)
                    restored.append(word)
                    i += 3
                    continue
            word = table.get(("", part.lower()))
            if word is not None and len(part) >= MIN_PREFIX_FRAGMENT:
                out.append(_the(part) + part)
                restored.append(word)
                i += 1
                continue
        out.append(part)
        i += 1
    return "".join(out), restored


def repair_texts(frame: pl.DataFrame, text_column: str = "text") -> tuple[pl.DataFrame, pl.DataFrame]:
    """`frame` (devices or device-patent pairs, keyed by fda_id) with its texts restored, and one row
    per repaired device (schemas.TEXT_REPAIRS). A column without the damage (`lost_the`) is left as it is."""
    if frame.height == 0 or not lost_the(frame[text_column].drop_nulls().to_list()):
        return frame, schemas.empty(schemas.TEXT_REPAIRS)
    # a pairs file repeats each device's text on every pair: restore each distinct text once
    restored = {text: restore_the(text) for text in frame[text_column].drop_nulls().unique().to_list()}
    repaired = frame.with_columns(pl.col(text_column).replace_strict(
        {text: fixed for text, (fixed, _) in restored.items()}, default=None, return_dtype=pl.String))
    rows = []
    devices = frame.select("fda_id", text_column).unique("fda_id", keep="first", maintain_order=True)
    for key, text in devices.iter_rows():
        words = restored[text][1] if text is not None else []
        if words:
            rows.append((key, len(words), ", ".join(words)))
    return repaired, pl.DataFrame(rows, schema=schemas.TEXT_REPAIRS, orient="row")


def repair_counts(repairs: pl.DataFrame) -> dict[str, int]:
    """For a run's summary: how many device texts were repaired and how many words restored."""
    return {"devices": repairs.height, "words": int(repairs["restored_words"].sum())}
