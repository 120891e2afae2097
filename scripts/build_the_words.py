"""Build meddevkg_core/data/text_repair/the_words.csv from FDA's own records.

The benchmark's device texts lost every "the", inside words too (CATHETER -> "CA TER"); the
repair (meddevkg_core/text_repair.py) needs the words that contain "the" and how common the
pieces left on either side are. Both come from text FDA wrote with its "the"s intact: the PMA
records' approval order statements, trade names and generic names, and the product codes' names
and definitions. Deterministic (sorted output), so running it twice gives the same file:

    python scripts/build_the_words.py --fda ../shared/data/fda
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "meddevkg_core" / "data" / "text_repair" / "the_words.csv"
MIN_COUNT = 3
"""A word seen fewer times is as likely a typo or a run-together pair ("ofthe") as a word."""
_WORD = re.compile(r"[A-Za-z]+")
_SOURCES = {"fdadata_pma.parquet": ("approval_order_statement", "device", "generic_name"),
            "fdadata_product_codes.parquet": ("device_type_name", "definition")}


def word_counts(fda_dir: Path) -> Counter[str]:
    """Lower-case word counts over the distinct texts of every source column."""
    counts: Counter[str] = Counter()
    for name, columns in _SOURCES.items():
        frame = pl.read_parquet(fda_dir / name, columns=list(columns))
        for column in columns:
            for text in frame[column].drop_nulls().unique().sort().to_list():
                counts.update(w.lower() for w in _WORD.findall(text))
    return counts


def the_words(counts: Counter[str]) -> pl.DataFrame:
    """Words with exactly one "the" not at their end, with the counts of what is left either side.

    Only words a repair can tell from what is left: a word that began with "the" when the rest is no
    word of its own ("rapy", but not "device" of a run-together "thedevice"), and a word split in two
    unless both fragments are at least as common as the word ("an m" is two words, not "anthem")."""
    rows = []
    for word, count in counts.items():
        if count < MIN_COUNT or word.count("the") != 1 or word.endswith("the"):
            continue
        head, tail = word.split("the")
        head_count, tail_count = (counts.get(head, 0) if head else 0), counts.get(tail, 0)
        if (tail_count > 0) if not head else (min(head_count, tail_count) >= count):
            continue
        rows.append((word, count, head, head_count, tail, tail_count))
    schema = {"word": pl.String, "count": pl.Int64, "head": pl.String, "head_count": pl.Int64,
              "tail": pl.String, "tail_count": pl.Int64}
    return pl.DataFrame(rows, schema=schema, orient="row").sort("word")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fda", type=Path, required=True, help="directory with FDA's PMA and product-code Parquet")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    table = the_words(word_counts(args.fda))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out)
    print(f"wrote {args.out}: {table.height} words")


if __name__ == "__main__":
    main()
