"""Company-name normalisation: a raw company name as the benchmark's canonical string (METHOD.md §3.1).

Every company table and every match compares these strings, so "St. Jude Medical, Inc." and
"ST JUDE MEDICAL" are one name before aliases and deals relate it to others (company_resolver).
"""

from __future__ import annotations

import re
import unicodedata

from cleanco import basename

# Legal forms cleanco leaves behind once punctuation is gone, or never knew (KK, the "& Co." rest).
LEGAL_TAIL = frozenset(
    "INC INCORPORATED CORP CORPORATION CO COMPANY LLC LLP LP LTD LIMITED GMBH AG SA SAS NV BV PLC "
    "KG SRL SPA AB APS AS OY PTY PTE ULC SE HOLDING HOLDINGS AND".split()
)
LEGAL_TAIL_PAIRS = (("KABUSHIKI", "KAISHA"), ("S", "A"), ("N", "V"), ("B", "V"), ("L", "P"))
_ABBREVIATIONS = {"INTERNATIONAL": "INTL", "TECHNOLOGIES": "TECH", "TECHNOLOGY": "TECH"}
_DBA = re.compile(r"(?<![A-Z0-9])(?:D\s*/\s*B\s*/\s*A|D\.\s*B\.\s*A\.?|DBA)(?![A-Z0-9])", re.IGNORECASE)
_DIVISION_OF = re.compile(r"^(.+?)\s+(?:A\s+)?(?:DIV|DIVISION)(?:\s+OF)?\s+(.+)$")
_TRAILING_DIV = re.compile(r"\s+(?:A\s+)?DIV(?:ISION|ISIO|ISI|IS|I)?(?:\s+OF)?$")


def normalize_company(raw: str | None) -> str | None:
    """The benchmark-style canonical string: upper case, ASCII, no punctuation, & -> AND, no legal form.

    A "d/b/a" name wins over the legal name and "X, Div. of Y" becomes Y, because the benchmark
    files devices under the trading name and the parent.
    """
    if not isinstance(raw, str):
        return None
    text = unicodedata.normalize("NFKD", raw).encode("ascii", "ignore").decode("ascii")
    parts = _DBA.split(text)
    text = parts[-1] if parts[-1].strip() else parts[0]
    try:
        text = basename(text) or text
    except Exception:  # cleanco chokes on some garbage; the rules below still apply
        pass
    text = text.upper().replace("&", " AND ")
    text = re.sub(r"[^A-Z0-9]+", " ", text).strip()
    if m := _DIVISION_OF.match(text):
        text = m.group(2)
    text = _TRAILING_DIV.sub("", text)
    tokens = [_ABBREVIATIONS.get(t, t) for t in text.split()]
    tokens = _strip_legal_tail(tokens)
    if tokens[:1] == ["THE"]:
        tokens = tokens[1:]
    if len(tokens) == 1 and tokens[0] in LEGAL_TAIL:
        return None
    return " ".join(tokens) or None


def _strip_legal_tail(tokens: list[str]) -> list[str]:
    """Drop trailing legal-form tokens, keeping at least one word of the name."""
    changed = True
    while changed and len(tokens) > 1:
        changed = False
        for pair in LEGAL_TAIL_PAIRS:
            if len(tokens) > len(pair) and tuple(tokens[-len(pair):]) == pair:
                tokens, changed = tokens[: -len(pair)], True
        if len(tokens) > 1 and tokens[-1] in LEGAL_TAIL:
            tokens, changed = tokens[:-1], True
    return tokens


def split_assignees(raw: str | None) -> list[str]:
    """Several assignees joined by '; ' or '|' (PATENTS contract); empty parts dropped."""
    if not isinstance(raw, str):
        return []
    return [part.strip() for part in re.split(r"[;|]", raw) if part.strip()]
