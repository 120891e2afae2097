"""Text checks every reader shares: text that no UTF-8 file or table can hold, and text that is blank.

Surrogates: Python keeps them in a str while reading. Readers decode with 'surrogateescape' so that a
record with bad bytes, not the whole file, is quarantined; a JSON "\\ud800" escape also decodes to a
surrogate. Both are found here, once.

Blank: whitespace, and the characters that show nothing but are no whitespace to str.strip or to
polars' strip_chars, so that a text or id made of them alone passed as given.
"""

import re

import polars as pl

UNDECODABLE = re.compile("[\udc80-\udcff]")
"""Bytes that were not UTF-8, as the 'surrogateescape' error handler keeps them."""

LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""Any surrogate (UNDECODABLE's range included): a JSON "\\ud800" escape decodes to one."""

INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff"
"""ZERO WIDTH SPACE, ZERO WIDTH NON-JOINER and JOINER, WORD JOINER, ZERO WIDTH NO-BREAK SPACE (the BOM)."""

BLANK = re.compile(f"[\\s{INVISIBLE}]*")
"""A whole text with nothing to read (Python's and polars' regex both read \\s as Unicode whitespace)."""


def is_blank(text: str | None) -> bool:
    """None, or text of whitespace and INVISIBLE characters alone."""
    return text is None or BLANK.fullmatch(text) is not None


def blank(col: str) -> pl.Expr:
    """`is_blank` of a text column, for polars: true where the value is null or blank."""
    return pl.col(col).is_null() | pl.col(col).str.contains(f"^{BLANK.pattern}$")
