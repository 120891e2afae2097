"""The corpus directory format: the one schema every source produces and every run consumes.

A corpus directory holds `devices`, `patents` and optionally `gold_links` and `labeled_pairs`,
each as Parquet, CSV or JSON Lines. Rows that violate the schema are quarantined with their
reason (never dropped silently) and the rest of the run goes on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import polars as pl

from meddevkg_core import schemas
from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import InputFile, read_fingerprinted
from meddevkg_core.raw_files import read_raw
from meddevkg_core.text_repair import repair_texts
from meddevkg_core.unstorable_text import blank

SUFFIXES = (".parquet", ".csv", ".jsonl", ".ndjson")

COMPANY_ALIASES = pl.Schema({"alias": pl.String, "canonical": pl.String, "source": pl.String})
"""A corpus's (or the shipped) company name variants: `alias` is the company `canonical` (company_tables.py)."""

_ALIASES = {
    "devices": {"company": "applicant", "sponsor": "applicant", "id": "fda_id", "pma_number": "fda_id"},
    "patents": {"patent_id": "pat_id", "company": "assignee", "patent_title": "title",
                "patent_abstract": "abstract", "patent_date": "grant_date", "cpc": "cpc_codes"},
    "gold_links": {"patent_id": "pat_id"},
    "labeled_pairs": {"patent_id": "pat_id"},
    "aliases": {}, "acquisitions": {}, "alliances": {},
}
_KEYS = {"devices": ("fda_id",), "patents": ("pat_id",), "gold_links": ("fda_id", "pat_id"),
         "labeled_pairs": ("fda_id", "pat_id"), "aliases": ("alias",),
         "acquisitions": ("acquirer", "acquired", "close_date"), "alliances": ("company_a", "company_b", "start_date")}
_REQUIRED_TEXT = {"devices": ("fda_id", "text"), "patents": ("pat_id", "text"),
                  "gold_links": ("fda_id", "pat_id"), "labeled_pairs": ("fda_id", "pat_id", "label"),
                  "aliases": ("alias", "canonical"), "acquisitions": ("acquirer", "acquired", "close_date"),
                  "alliances": ("company_a", "company_b", "start_date")}
_SCHEMAS = {"devices": schemas.DEVICES, "patents": schemas.PATENTS, "gold_links": schemas.GOLD_LINKS,
            "labeled_pairs": schemas.LABELED_PAIRS, "aliases": COMPANY_ALIASES,
            "acquisitions": schemas.ACQUISITIONS, "alliances": schemas.ALLIANCES}
COMPANY_TABLES = ("aliases", "acquisitions", "alliances")
"""A corpus directory's optional company tables, added to the shipped ones (company_tables.py)."""


@dataclass(frozen=True)
class TableRead:
    valid: pl.DataFrame
    rejected: pl.DataFrame


@dataclass(frozen=True)
class Corpus:
    devices: pl.DataFrame
    patents: pl.DataFrame
    gold_links: pl.DataFrame
    labeled_pairs: pl.DataFrame
    rejected: pl.DataFrame
    root: Path | None = None
    supplements: pl.DataFrame | None = None
    """The devices' PMA supplements (schemas.SUPPLEMENTS; dossier) when FDA records were given;
    None when no records were read (the dossier score is then missing, not zero)."""
    text_repairs: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.TEXT_REPAIRS))
    """The device texts whose lost "the"s were put back (text_repair); empty when the devices'
    texts showed no such damage."""
    inputs: Mapping[str, InputFile] = field(default_factory=dict)
    """The files read, by table (and `fda_pma`, the supplements' records: dossier.with_supplements),
    with their bytes' digest (lineage): a run's report says which content it read, not only where."""

    @property
    def has_gold(self) -> bool:
        return self.gold_links.height > 0


def find_table(root: Path, name: str) -> Path | None:
    """The file holding table `name` in a corpus directory, or None when it is absent."""
    found = [root / f"{name}{suffix}" for suffix in SUFFIXES if (root / f"{name}{suffix}").is_file()]
    if len(found) > 1:
        raise CorpusError(f"{root}: table {name!r} is given twice ({', '.join(p.name for p in found)})")
    return found[0] if found else None


def required_table(root: Path, name: str) -> Path:
    """The file holding table `name`; a CorpusError names the directory when there is none."""
    path = find_table(root, name)
    if path is None:
        raise CorpusError(f"{root}: no {name} table (expected {name}.parquet, .csv or .jsonl)")
    return path


def _normalise_columns(raw: pl.DataFrame, table: str, source: str) -> pl.DataFrame:
    aliases = _ALIASES[table]
    renames = {c: aliases[c.lower()] for c in raw.columns
               if c.lower() in aliases and aliases[c.lower()] not in raw.columns}
    if clash := [t for t, count in Counter(renames.values()).items() if count > 1]:  # "id" and "pma_number"
        named = ", ".join(repr(c) for c, t in renames.items() if t == clash[0])
        raise CorpusError(f"{source}: table {table!r} has columns {named}, each a name for {clash[0]!r}: keep one")
    df = raw.rename(renames)
    if table == "patents" and "text" not in df.columns and "title" in df.columns:
        parts = [pl.col("title").fill_null("")]
        if "abstract" in df.columns:
            parts.append(pl.col("abstract").fill_null(""))
        df = df.with_columns(pl.concat_str(parts, separator=" ").str.strip_chars().alias("text"))
    if table == "devices" and "text" not in df.columns and {"generic_name", "trade_name"} & set(df.columns):
        parts = [pl.col(c).fill_null("") for c in ("generic_name", "trade_name") if c in df.columns]
        df = df.with_columns(pl.concat_str(parts, separator=" ").str.strip_chars().alias("text"))
    return df


def _reasons(df: pl.DataFrame, table: str, source: str) -> pl.Expr:
    """The first rule a row breaks, or null for a valid row."""
    for col in _REQUIRED_TEXT[table]:
        if col not in df.columns:
            columns = ", ".join(c for c in df.columns if not c.startswith("__"))
            raise CorpusError(f"{source}: table {table!r} has no column {col!r} (columns: {columns})")
    checks: list[tuple[pl.Expr, str]] = []
    for col, dtype in _SCHEMAS[table].items():
        if col in df.columns and dtype == pl.Date:
            text = pl.col(col).str.strip_chars()  # as _cast reads it: " 2010-05-01 " is a date
            bad = text.is_not_null() & (text != "") & text.str.to_date("%Y-%m-%d", strict=False).is_null()
            checks.append((bad, f"unparseable {col} (want YYYY-MM-DD)"))
    if table == "labeled_pairs":
        checks.append((label_value("label").is_null(), "label is not 0 or 1"))
    return first_broken_rule(df, _REQUIRED_TEXT[table], checks)


LABELS = {"0": 0, "1": 1, "0.0": 0, "1.0": 1, "false": 0, "true": 1}
"""A pair's label as it may be written (labeled_pairs, a `pairs-cv` pair file), in any case and with
spaces around it: a number, or a Parquet boolean column or JSON true/false, which are read as text."""


def label_value(col: str) -> pl.Expr:
    """A label column as 0 or 1 (Int8), null where it is written in none of the LABELS forms."""
    return (pl.col(col).str.strip_chars().str.to_lowercase()
            .replace_strict(LABELS, default=None, return_dtype=pl.Int8).alias(col))


def first_broken_rule(df: pl.DataFrame, required: Sequence[str], checks: Sequence[tuple[pl.Expr, str]]) -> pl.Expr:
    """The first rule a raw row breaks, or null: the reader's parse error, a `required` value missing
    (null, or blank: unstorable_text.blank), then `checks` in order (each a condition that breaks it,
    and its reason)."""
    rules = [(blank(c), pl.lit(f"missing {c}")) for c in required]
    rules += [(cond, pl.lit(text)) for cond, text in checks]
    if "__parse_error__" in df.columns:
        rules.insert(0, (pl.col("__parse_error__").is_not_null(), pl.col("__parse_error__")))
    reason = pl.lit(None, dtype=pl.String)
    for cond, message in reversed(rules):
        reason = pl.when(cond).then(message).otherwise(reason)
    return reason


def key_text(col: str) -> pl.Expr:
    """An id as it is compared and kept: surrounding whitespace is no part of it ("P000018 " is P000018),
    and a device id is a PMA number, upper-cased as FDA's records, openFDA and --device read it
    ("p000018" is P000018). A patent id keeps its case: PatentsView rejects a lower-case one as malformed."""
    text = pl.col(col).str.strip_chars()
    return text.str.to_uppercase() if col == "fda_id" else text


def mark_duplicates(df: pl.DataFrame, keys: Sequence[str], message: str) -> pl.DataFrame:
    """`__reason__` = message + the first row's `__row__` for each later valid row of a key (trimmed,
    so an id written with a stray space cannot pass as another record)."""
    first = pl.when(pl.col("__reason__").is_null()).then(pl.col("__row__")).min().over(
        [key_text(k) for k in keys])
    return df.with_columns(
        pl.when(pl.col("__reason__").is_null() & (pl.col("__row__") != first))
        .then(pl.concat_str([pl.lit(message), first.cast(pl.String)]))
        .otherwise(pl.col("__reason__")).alias("__reason__"))


def _cast(df: pl.DataFrame, table: str) -> pl.DataFrame:
    out = []
    for col, dtype in _SCHEMAS[table].items():
        if col not in df.columns:
            out.append(pl.lit(None, dtype=dtype).alias(col))
        elif dtype == pl.Date:
            out.append(pl.col(col).str.strip_chars().str.to_date("%Y-%m-%d", strict=False).alias(col))
        elif dtype == pl.List(pl.String):
            out.append(pl.col(col).str.split(" ").list.eval(pl.element().filter(pl.element() != "")).alias(col))
        elif col == "label":
            out.append(label_value(col))
        elif col == "fda_id":
            out.append(key_text(col))
        else:
            out.append(pl.col(col).str.strip_chars().alias(col))
    return df.select(out)


def validate_table(raw: pl.DataFrame, table: str, source: str) -> TableRead:
    """Split raw text rows into schema-conforming rows and quarantined rows with their reason.

    Duplicate keys keep the first occurrence (file order, deterministic); later copies are
    quarantined as duplicates.
    """
    schema = _SCHEMAS[table]
    if raw.width == 0:
        return TableRead(schemas.empty(schema), schemas.empty(schemas.REJECTED_RECORDS))
    df = _normalise_columns(raw, table, source).with_row_index("__row__")
    keys = _KEYS[table]
    df = mark_duplicates(df.with_columns(_reasons(df, table, source).alias("__reason__")), keys,
                         "duplicate key of row ")
    key = pl.concat_str([pl.lit(f"{table}#"), pl.col("__row__").cast(pl.String), pl.lit(":"),
                         pl.coalesce([pl.col(k) for k in keys if k in df.columns] + [pl.lit("")])])
    valid = _cast(df.filter(pl.col("__reason__").is_null()), table)
    return TableRead(schemas.conform(valid, schema), rejected_rows(df, raw.columns, source, key))


def rejected_rows(df: pl.DataFrame, columns: Sequence[str], source: str, key: pl.Expr) -> pl.DataFrame:
    """The rows with a `__reason__` as schemas.REJECTED_RECORDS, each record as read from the file's
    `columns` and, when the reader could not split it, as written (`__raw__`)."""
    bad = df.filter(pl.col("__reason__").is_not_null())
    if not bad.height:
        return schemas.empty(schemas.REJECTED_RECORDS)
    payload = [c for c in columns if not c.startswith("__") and c in bad.columns]
    record = pl.struct(payload + ["__raw__"] * ("__raw__" in bad.columns)).struct.json_encode()
    return schemas.conform(bad.select(pl.lit(source).alias("source"), key.alias("record_key"),
                                      pl.col("__reason__").alias("reason"), record.alias("record")),
                           schemas.REJECTED_RECORDS)


def read_table(path: Path, table: str) -> TableRead:
    return validate_table(read_raw(path), table, source=str(path.name))


def read_fingerprinted_table(path: Path, table: str) -> tuple[TableRead, InputFile]:
    """`read_table`, and the fingerprint of the bytes it read (lineage), for a run's report."""
    return read_fingerprinted(path, partial(read_table, table=table))


def read_corpus(root: str | Path) -> Corpus:
    """Read and validate a corpus directory; devices and patents are required.

    `Corpus.root` is absolute, so what a run records of it (report.json, summary.json) leads back to
    the corpus from any directory."""
    if not Path(root).is_dir():
        raise CorpusError(f"corpus directory {root} does not exist")
    root = Path(root).resolve()
    reads: dict[str, TableRead] = {}
    inputs: dict[str, InputFile] = {}
    for table in ("devices", "patents", "gold_links", "labeled_pairs"):
        path = required_table(root, table) if table in ("devices", "patents") else find_table(root, table)
        if path is None:
            reads[table] = TableRead(schemas.empty(_SCHEMAS[table]), schemas.empty(schemas.REJECTED_RECORDS))
        else:
            reads[table], inputs[table] = read_fingerprinted_table(path, table)
    devices, repairs = repair_texts(reads["devices"].valid)
    patents = reads["patents"].valid
    gold = _known_pairs(reads["gold_links"].valid, devices, patents, "gold_links")
    labeled = _known_pairs(reads["labeled_pairs"].valid, devices, patents, "labeled_pairs")
    rejected = [r.rejected for r in reads.values()] + [gold.rejected, labeled.rejected]
    return Corpus(devices=devices, patents=patents, gold_links=gold.valid, labeled_pairs=labeled.valid,
                  rejected=pl.concat(rejected), root=root, text_repairs=repairs, inputs=inputs)


def _known_pairs(pairs: pl.DataFrame, devices: pl.DataFrame, patents: pl.DataFrame, table: str) -> TableRead:
    """Pairs whose ids are in the corpus; the others cannot be scored and are quarantined."""
    known_device = pl.col("fda_id").is_in(devices["fda_id"].implode())
    known_patent = pl.col("pat_id").is_in(patents["pat_id"].implode())
    unknown = pairs.filter(~(known_device & known_patent)).with_columns(
        pl.when(~known_device).then(pl.lit("fda_id not among valid devices"))
        .otherwise(pl.lit("pat_id not among valid patents")).alias("reason"))
    rejected = unknown.select(
        pl.lit(table).alias("source"),
        pl.concat_str([pl.lit(f"{table}:"), pl.col("fda_id"), pl.lit("|"), pl.col("pat_id")]).alias("record_key"),
        "reason",
        pl.struct([c for c in pairs.columns]).struct.json_encode().alias("record"),
    )
    return TableRead(pairs.filter(known_device & known_patent), schemas.conform(rejected, schemas.REJECTED_RECORDS))


def write_corpus(corpus: Corpus, root: str | Path) -> Path:
    """Write a corpus directory in the canonical Parquet form (what every source produces)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for name in ("devices", "patents", "gold_links", "labeled_pairs"):
        getattr(corpus, name).write_parquet(root / f"{name}.parquet")
    return root
