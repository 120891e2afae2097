"""A device's dossier: its own approval text plus what its PMA supplements say about it.

A device's record is one sentence: a generic name, a trade name and its indication. The patents
that protect it describe its parts. The supplements approved over the device's life name those
parts: "an alternative supplier for the distal optical fiber component", "a new distal tip
adhesive", "the spine component of the catheter", and the trade names of later models. On the
benchmark, a TF-IDF cosine between a patent and the dossier tells a device's gold patents from
the rest of its pool better than the device text does (issue 6).

Statements that name no part ("post-approval study protocol", "manufacturing execution system")
share few words with patent abstracts; with the vocabulary and IDF taken from the patents alone
(baselines.TfidfScorer), such words hardly count, and a device's score does not depend on which
other devices are scored with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import polars as pl

from meddevkg_core import schemas
from meddevkg_core.corpus import Corpus, TableRead
from meddevkg_core.errors import CorpusError, one_line
from meddevkg_core.lineage import read_fingerprinted
from meddevkg_core.raw_files import read_parquet, read_raw, reading, refuse_reserved
from meddevkg_core.sources.pma_records import (
    PmaDevices,
    frame_records,
    openfda_named,
    pma_number_in,
    pma_records_to_devices,
)


def device_dossiers(devices: pl.DataFrame, supplements: pl.DataFrame) -> dict[str, str]:
    """fda_id -> the device's text, then its supplements' distinct trade names and statements,
    oldest first (a device without supplements keeps its own text)."""
    parts = (supplements.filter(pl.col("fda_id").is_in(devices["fda_id"].implode()))
             .sort("fda_id", "decision_date", "supplement_number", nulls_last=True)
             .group_by("fda_id", maintain_order=True)
             .agg(pl.col("trade_name").drop_nulls().unique(maintain_order=True).alias("names"),
                  pl.col("statement").drop_nulls().unique(maintain_order=True).alias("statements")))
    extra = {fda_id: " ".join([*names, *statements]) for fda_id, names, statements in parts.iter_rows()}
    return {fda_id: " ".join(t for t in (text, extra.get(fda_id, "")) if t)
            for fda_id, text in devices.select("fda_id", "text").iter_rows()}


def supplements_of(supplements: pl.DataFrame, fda_ids: Sequence[str]) -> pl.DataFrame:
    """The SUPPLEMENTS rows of these devices, in key order."""
    wanted = pl.Series(list(fda_ids), dtype=pl.String).implode()
    return schemas.conform(supplements.filter(pl.col("fda_id").is_in(wanted)), schemas.SUPPLEMENTS).sort(
        "fda_id", "supplement_number")


def load_pma_records(path: str | Path, fda_ids: Sequence[str] | None = None) -> PmaDevices:
    """The records of an FDA PMA records file (fdadata_pma.parquet, or a Parquet/CSV table in openFDA
    field names), of these devices only when `fda_ids` is given, validated as openFDA's records are
    (pma_records_to_devices: a bad PMA number or date, conflicting copies), keyed by their row in the file."""
    path = Path(path)
    records = read_pma_file(path)
    try:
        frame = openfda_named(records).with_row_index("__row__")
        if fda_ids is not None:  # chosen before the rows are cleaned one by one: the national file has 55K
            frame = frame.filter(pma_number_in(fda_ids))
    except pl.exceptions.PolarsError as exc:  # a Parquet number column of bytes that are not UTF-8
        raise CorpusError(f"{path}: cannot be read as PMA records: {one_line(exc)}") from exc
    return pma_records_to_devices(frame_records(frame), source=path.name, row_numbers=frame["__row__"].to_list(),
                                  devices_need_text=False)  # its devices come from the corpus, not from here


def load_supplements(path: str | Path, fda_ids: Sequence[str] | None = None) -> TableRead:
    """The supplements of `load_pma_records`, and the records of those devices that failed validation."""
    read = load_pma_records(path, fda_ids)
    return TableRead(read.supplements, read.rejected)


def read_supplements(path: str | Path, fda_ids: Sequence[str] | None = None) -> pl.DataFrame:
    """The valid supplements of `load_supplements`; use it to see what was quarantined."""
    return load_supplements(path, fda_ids).valid


def read_pma_file(path: str | Path) -> pl.DataFrame:
    """An FDA PMA records file as written (fdadata_pma.parquet, or a Parquet/CSV table in openFDA
    field names); a CorpusError names the file when it cannot be read or is not PMA records. A CSV
    record that cannot be read (the wrong number of fields, bytes that are not UTF-8) is a row with its
    `__parse_error__` and `__raw__`, as the corpus reader reads it: `load_pma_records` quarantines it,
    `readable_pma_rows` sets it apart. So is a record whose `is_original` cannot be read, when that flag
    is all that tells originals from supplements (`_read_original_flag`)."""
    path = Path(path)
    with reading(path, " as PMA records"):
        frame = read_parquet(path) if path.suffix == ".parquet" else read_raw(path)
    if path.suffix == ".parquet":  # read_raw refuses them in the other formats, and adds its own
        refuse_reserved(path, frame.columns)
    has_statements = bool({"approval_order_statement", "ao_statement"} & set(frame.columns))
    if not has_statements or not ({"submission_number", "pma_number"} & set(frame.columns)):
        raise CorpusError(f"{path}: not PMA records (no submission_number/pma_number and approval statement columns)")
    if not {"submission_number", "supplement_number"} & set(frame.columns):
        return _read_original_flag(path, frame)
    return frame


def _read_original_flag(path: Path, frame: pl.DataFrame) -> pl.DataFrame:
    """The records' `is_original` as a Boolean, when nothing else tells an original from a supplement:
    in a CSV file it is the text "true" or "false" (either case). A record whose flag is neither is a
    row with a `__parse_error__`, as a record read_raw could not read; a file without the flag is refused."""
    dtype = frame.schema.get("is_original")
    if dtype not in (pl.Boolean, pl.String):
        found = "no is_original column" if dtype is None else f"is_original holds {dtype}"
        raise CorpusError(f"{path}: {found}, and no submission_number or supplement_number column: "
                          "its originals cannot be told from its supplements")
    text = pl.col("is_original").cast(pl.String).str.strip_chars().str.to_lowercase()
    unread = (pl.when(text.is_null()).then(pl.lit("missing is_original"))
              .when(~text.is_in(["true", "false"])).then(pl.format("is_original '{}' is neither true nor false",
                                                                   pl.col("is_original").cast(pl.String))))
    earlier = pl.col("__parse_error__") if "__parse_error__" in frame.columns else pl.lit(None, pl.String)
    return frame.with_columns((text != "false").fill_null(True).alias("is_original"),  # read as an original
                              pl.coalesce(earlier, unread).alias("__parse_error__"))


def readable_pma_rows(frame: pl.DataFrame, source: str) -> TableRead:
    """The rows of a `read_pma_file` frame that could be read, as written, and the records that could
    not, quarantined as `load_pma_records` quarantines them: for the readers of every row of the file."""
    if "__parse_error__" not in frame.columns:
        return TableRead(frame, schemas.empty(schemas.REJECTED_RECORDS))
    unread = pl.col("__parse_error__").is_not_null()
    named = openfda_named(frame).with_row_index("__row__").filter(unread)
    rejected = pma_records_to_devices(frame_records(named), source, row_numbers=named["__row__"].to_list()).rejected
    return TableRead(frame.filter(~unread).drop("__parse_error__", "__raw__", strict=False), rejected)


def with_approval_dates(devices: pl.DataFrame, originals: pl.DataFrame) -> pl.DataFrame:
    """Fill the devices' missing decision dates with their originals' (`load_pma_records(...).originals`)."""
    dates = originals.select("pma_number", pl.col("decision_date").alias("date_decision"))
    base = devices if "decision_date" in devices.columns else devices.with_columns(
        pl.lit(None, pl.Date).alias("decision_date"))
    return (base.join(dates, left_on="fda_id", right_on="pma_number", how="left")
            .with_columns(pl.coalesce(pl.col("decision_date").cast(pl.Date), "date_decision").alias("decision_date"))
            .drop("date_decision"))


def with_supplements(corpus: Corpus, fda_pma: str | Path | None, *, approval_dates: bool = False) -> Corpus:
    """The corpus with its devices' supplements from an FDA PMA records file (unchanged without one);
    the devices' records that fail validation join the corpus's rejected rows, the file's fingerprint
    its inputs (`fda_pma`). `approval_dates` also fills missing decision dates from the same read
    (`with_approval_dates`)."""
    if fda_pma is None:
        return corpus
    read, found = read_fingerprinted(fda_pma, partial(load_pma_records, fda_ids=corpus.devices["fda_id"].to_list()))
    devices = with_approval_dates(corpus.devices, read.originals) if approval_dates else corpus.devices
    return replace(corpus, devices=devices, supplements=read.supplements,
                   rejected=pl.concat([corpus.rejected, read.rejected]), inputs={**corpus.inputs, "fda_pma": found})
