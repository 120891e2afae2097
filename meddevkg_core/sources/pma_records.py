"""FDA PMA records -> the corpus devices table: one validation, one text recipe, whatever the source.

openFDA API pages, the openFDA bulk file and the fdadata copy of FDA's `pma.zip` all end here, so a
device reads the same whichever source delivered it (DATA_SOURCES.md §1):

- A device is an *original* approval: `supplement_number == ""` (§1.6; `supplement_type` is also
  empty on 1,885 old supplements, so it must not be used). Supplements are kept apart, as the
  device's later changes (schemas.SUPPLEMENTS, read by `dossier`); one that names no valid PMA
  number or date is quarantined like an original.
- Text, as the paper builds it (METHOD.md §0 "device name + ' ' + text_snippet"; checked against
  the benchmark's 434 texts): the generic name with each word's first letter upper-cased (never
  lower-casing, so acronyms survive), then the approval-order statement without its "Approval for
  the" boilerplate. The trade name is added when the statement does not already contain it.
  Cleaning: FDA's lost trademark signs (`\\x1a`, "(TM)", "(R)", "®", "™") are dropped and
  whitespace collapsed. The paper's text deletes every "THE", even inside words ("PROSTHESIS" ->
  "PROS SIS", "THEIR" -> "IR"); that corruption is *not* reproduced.
- Malformed records (not an object, no or bad pma_number, unparseable decision_date, a field that
  is not text, bytes that are not UTF-8) are quarantined with a reason naming the record.
- Duplicate originals, and duplicate supplements (same PMA and supplement number), keep the latest
  decision_date, ties broken by the lexicographically greatest canonical record JSON, so the result
  does not depend on input order. Identical copies (paging overlap) are only counted; conflicting
  copies are quarantined as superseded.
- A PMA records file (fdadata's copy of pma.zip, or a table in openFDA names) is validated the same
  way, its rows read as the API's records (`frame_records`); a CSV record it could not read (the
  wrong number of fields, bytes that are not UTF-8) is quarantined with its line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Any, NamedTuple

import polars as pl

from meddevkg_core import schemas
from meddevkg_core.unstorable_text import LONE_SURROGATE, UNDECODABLE, is_blank

PMA = pl.Schema(
    {
        "pma_number": pl.String,
        "supplement_number": pl.String,
        "applicant": pl.String,
        "generic_name": pl.String,
        "trade_name": pl.String,
        "product_code": pl.String,
        "advisory_committee": pl.String,
        "decision_date": pl.Date,
        "decision_code": pl.String,
        "ao_statement": pl.String,
    }
)
"""One PMA record in openFDA field names (the canonical form the device selection reads)."""

_FIELDS = tuple(PMA.names())  # every field is read as text first; decision_date is parsed after
_FDADATA_NAMES = {"sponsor": "applicant", "device": "trade_name", "panel_code": "advisory_committee",
                  "date_decision": "decision_date", "approval_order_statement": "ao_statement"}
_PMA_NUMBER = re.compile(r"^[A-Z]{1,2}\d{4,7}$")  # P140031, N16837 (DATA_SOURCES §1.4)
_DATE_FORMATS = ("%Y-%m-%d", "%Y%m%d", "%m/%d/%Y")  # openFDA, openFDA's other endpoints, raw pma.txt
_TRADEMARKS = re.compile(r"\x1a|®|™|\((?:TM|R)\)|\{TM\}", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_BOILERPLATE = re.compile(r"^\s*approval\s+(?:application\s+\(pma\)\s+)?for\s+(?:the\s+)?", re.IGNORECASE)
_WORD_START = re.compile(r"(^|[\s\-(/])([a-z])")
MAX_RECORD_CHARS = 4000  # a quarantined payload is cut here so one bad record cannot bloat the table


class PmaDevices(NamedTuple):
    devices: pl.DataFrame  # schemas.DEVICES, one row per original PMA number
    rejected: pl.DataFrame  # schemas.REJECTED_RECORDS
    counts: dict[str, int]  # records, supplements, originals, duplicates, superseded, rejected, devices
    originals: pl.DataFrame  # PMA schema, the kept originals (input to the device selection)
    supplements: pl.DataFrame  # schemas.SUPPLEMENTS, one row per (PMA number, supplement number)


def clean_text(value: str | None) -> str:
    """Drop FDA's trademark debris and control characters; collapse whitespace."""
    if not value:
        return ""
    return " ".join(_CONTROL.sub(" ", _TRADEMARKS.sub("", value)).split())


def device_name(generic_name: str | None) -> str:
    """'replacement Heart-valve' -> 'Replacement Heart-Valve'; 'non-CRT' keeps its capitals."""
    name = clean_text(generic_name)
    return _WORD_START.sub(lambda m: m.group(1) + m.group(2).upper(), name)


def device_text(generic_name: str | None, trade_name: str | None, ao_statement: str | None) -> str:
    """Name, trade name (when the statement lacks it) and the statement without its boilerplate."""
    name = device_name(generic_name)
    statement = _BOILERPLATE.sub("", clean_text(ao_statement))
    trade = clean_text(trade_name)
    if trade and (trade.lower() in statement.lower() or trade.lower() in name.lower()):
        trade = ""
    return " ".join(part for part in (name, trade, statement) if part)


def parse_decision_date(value: str) -> date | None:
    """YYYY-MM-DD, YYYYMMDD or MM/DD/YYYY -> date; None when the value fits none of them."""
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(value, fmt).date()
        except ValueError:
            continue
    return None


def _field(record: dict[str, Any], name: str) -> tuple[str, str | None]:
    """(text value, problem or None) for one field; missing and null read as '' like openFDA."""
    value = record.get(name)
    if value is None:
        return "", None
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return "", f"non-UTF-8 bytes in {name}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return "", f"{name} is a {type(value).__name__}, not text"
    if UNDECODABLE.search(value):
        return "", f"non-UTF-8 bytes in {name}"
    if LONE_SURROGATE.search(value):  # a JSON "\ud800" escape: no UTF-8 table can hold it
        return "", f"{name} is not valid Unicode (a lone surrogate)"
    return value, None


def _canonical(record: object) -> str:
    """The record as sorted-key ASCII JSON: equal records give equal strings, whatever the key order."""
    try:
        return json.dumps(record, sort_keys=True, ensure_ascii=True, default=repr)
    except (TypeError, ValueError):
        return repr(record)


def _payload(record: object) -> str:
    return _canonical(record)[:MAX_RECORD_CHARS]


def _reject(source: str, index: int, key: str, reason: str, record: object) -> dict[str, str]:
    return {"source": source, "record_key": f"{source}#{index}:{key or '?'}", "reason": reason,
            "record": _payload(record)}


def not_an_object(source: str, index: int, record: object) -> dict[str, str]:
    """The quarantine row (schemas.REJECTED_RECORDS) of record #index of an openFDA answer that is no JSON object."""
    return _reject(source, index, "", f"record is a {type(record).__name__}, not a JSON object", record)


_Held = tuple[tuple[date, str], int, dict[str, Any], object]  # (rank, position, row, record)


def pma_records_to_devices(records: Iterable[object], source: str = "openfda device/pma", *,
                           row_numbers: Sequence[int] | None = None, devices_need_text: bool = True) -> PmaDevices:
    """Validate raw PMA records (dicts in openFDA field names) into devices, quarantine and counts.

    `row_numbers`: each record's row in the file it was read from, for the quarantine's keys (default:
    its position in `records`). `devices_need_text=False` keeps an original without any text: a
    reader of the records' dates and supplements (the dossiers) needs no device text from it."""
    counts = dict.fromkeys(("records", "supplements", "originals", "duplicates", "superseded", "rejected",
                            "devices"), 0)
    rejected: list[dict[str, str]] = []
    best: dict[str, _Held] = {}
    best_supplements: dict[tuple[str, str], _Held] = {}

    def keep_latest(held: dict[Any, _Held], key: Any, candidate: _Held, pma: str, what: str) -> None:
        """The latest decision_date, then the greatest record JSON, of the records sharing a key."""
        kept = held.get(key)
        if kept is None:
            held[key] = candidate
        elif candidate[0][1] == kept[0][1]:
            counts["duplicates"] += 1  # the same record twice (paging overlap): nothing lost
        else:
            keep, drop = (kept, candidate) if kept[0] > candidate[0] else (candidate, kept)
            held[key] = keep
            counts["superseded"] += 1
            rejected.append(_reject(source, drop[1], pma, f"duplicate {what}: superseded by record #{keep[1]} "
                                    "(kept: latest decision_date, then greatest record JSON)", drop[3]))

    for position, record in enumerate(records):
        index = row_numbers[position] if row_numbers is not None else position
        counts["records"] += 1
        if not isinstance(record, dict):
            rejected.append(not_an_object(source, index, record))
            continue
        values, problems = {}, []
        for name in _FIELDS:
            values[name], problem = _field(record, name)
            if problem:
                problems.append(problem)
        supplement = values["supplement_number"].strip().upper()
        pma = values["pma_number"].strip().upper()
        if not pma:
            problems.insert(0, "missing pma_number")
        elif not _PMA_NUMBER.match(pma):
            problems.insert(0, f"pma_number {pma[:40]!r} is not a PMA number")
        raw_date = values["decision_date"].strip()
        decided = parse_decision_date(raw_date) if raw_date else None
        if raw_date and decided is None:
            problems.append(f"unparseable decision_date {raw_date[:40]!r} (want YYYY-MM-DD or YYYYMMDD)")
        if record.get("__parse_error__"):  # a file's record read_raw could not read: its fields are not what was meant
            problems = [record["__parse_error__"]]
        if supplement:
            counts["supplements"] += 1
            if problems:
                rejected.append(_reject(source, index, pma, f"supplement {supplement[:20]}: " + "; ".join(problems),
                                        record))
            else:
                row = supplement_row(pma, supplement, decided, values["trade_name"], values["ao_statement"])
                keep_latest(best_supplements, (pma, supplement), ((decided or date.min, _canonical(record)), index,
                                                                  row, record),
                            pma, f"supplement {supplement} of {pma}")
            continue
        row = {**values, "pma_number": pma, "supplement_number": None, "decision_date": decided}
        if devices_need_text and not problems and is_blank(device_text(row["generic_name"], row["trade_name"],
                                                                        row["ao_statement"])):
            problems.append("no generic_name, trade_name or ao_statement: nothing to read")
        if problems:
            rejected.append(_reject(source, index, pma, "; ".join(problems), record))
            continue
        counts["originals"] += 1
        keep_latest(best, pma, ((decided or date.min, _canonical(record)), index, row, record), pma,
                    f"original of {pma}")
    originals = pl.DataFrame([best[k][2] for k in sorted(best)], schema=PMA) if best else schemas.empty(PMA)
    devices = devices_from_pma(originals)
    supplements = (pl.DataFrame([best_supplements[k][2] for k in sorted(best_supplements)], schema=schemas.SUPPLEMENTS)
                   if best_supplements else schemas.empty(schemas.SUPPLEMENTS))
    counts["rejected"], counts["devices"] = len(rejected), devices.height
    rejected_frame = (pl.DataFrame(rejected, schema=schemas.REJECTED_RECORDS) if rejected
                      else schemas.empty(schemas.REJECTED_RECORDS))
    return PmaDevices(devices, rejected_frame, counts, originals, supplements)


def supplement_row(pma: str, supplement: str, decided: date | None, trade_name: str | None,
                   ao_statement: str | None) -> dict[str, Any]:
    """One SUPPLEMENTS row: the statement cleaned like a device's, without its "Approval for" opening."""
    return {"fda_id": pma, "supplement_number": supplement, "decision_date": decided,
            "trade_name": clean_text(trade_name) or None,
            "statement": _BOILERPLATE.sub("", clean_text(ao_statement)) or None}


def devices_from_pma(originals: pl.DataFrame) -> pl.DataFrame:
    """PMA-schema originals -> schemas.DEVICES rows (fda_id = PMA number), text by `device_text`."""
    rows = originals.select("pma_number", "applicant", "trade_name", "generic_name", "product_code",
                            "decision_date", "ao_statement").to_dicts()
    out = [{
        "fda_id": r["pma_number"],
        "applicant": clean_text(r["applicant"]) or None,
        "trade_name": clean_text(r["trade_name"]) or None,
        "generic_name": clean_text(r["generic_name"]) or None,
        "product_code": (r["product_code"] or "").strip().upper() or None,
        "decision_date": r["decision_date"],
        "text": device_text(r["generic_name"], r["trade_name"], r["ao_statement"]),
    } for r in rows]
    return pl.DataFrame(out, schema=schemas.DEVICES) if out else schemas.empty(schemas.DEVICES)


def openfda_named(frame: pl.DataFrame) -> pl.DataFrame:
    """An fdadata_pma frame or openFDA-named frame with openFDA's names, values as written.

    fdadata names (sponsor, device, panel_code, date_decision, approval_order_statement) are mapped
    to openFDA's; `pma_number`/`supplement_number` are derived from `submission_number` when absent.
    """
    df = frame.rename({old: new for old, new in _FDADATA_NAMES.items()
                       if old in frame.columns and new not in frame.columns})
    # a Parquet column may be of numbers, or of nulls only: read as text, pma_records_to_devices validates
    number = pl.col("submission_number").cast(pl.String)
    if "pma_number" not in df.columns:
        df = df.with_columns(number.str.split("/").list.first().alias("pma_number"))
    if "supplement_number" not in df.columns and "submission_number" in df.columns:
        # all after the first "/": "P100001/S001/X" is no copy of S001 (it would supersede or be superseded)
        df = df.with_columns(number.str.splitn("/", 2).struct.field("field_1").alias("supplement_number"))
    elif "supplement_number" not in df.columns:  # only the flag: any non-empty marker means supplement
        df = df.with_columns(pl.when(pl.col("is_original")).then(None).otherwise(pl.lit("supplement"))
                             .alias("supplement_number"))
    return df


def pma_number_in(fda_ids: Sequence[str]) -> pl.Expr:
    """The rows of an `openfda_named` frame that are records of these devices (PMA numbers)."""
    return pl.col("pma_number").cast(pl.String).str.strip_chars().str.to_uppercase().is_in(
        pl.Series(list(fda_ids), dtype=pl.String).implode())


def frame_records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """The rows of an `openfda_named` frame as raw records for `pma_records_to_devices`, a typed
    date as its ISO text (as the API sends it), and a record the file reader could not read with its
    `__parse_error__` and `__raw__` (raw_files.read_raw). A decision date of another type is left as
    written: cast to a date, the number 20100105 was a day 20 million days after 1970."""
    if "decision_date" in frame.columns and isinstance(frame.schema["decision_date"], pl.Date | pl.Datetime):
        frame = frame.with_columns(pl.col("decision_date").cast(pl.Date).cast(pl.String))
    return frame.select(c for c in (*_FIELDS, "__parse_error__", "__raw__") if c in frame.columns).to_dicts()


def canonical_pma(frame: pl.DataFrame) -> pl.DataFrame:
    """An fdadata_pma frame or openFDA-named frame -> PMA schema (originals have a null supplement),
    named by `openfda_named`; dates that fit no format are null here: `pma_records_to_devices`
    validates."""
    df = openfda_named(frame).with_columns(
        pl.col("pma_number").cast(pl.String).str.strip_chars().str.to_uppercase(),
        pl.col("supplement_number").cast(pl.String).str.strip_chars().replace("", None),
    )
    if "decision_date" in df.columns and not isinstance(df.schema["decision_date"], pl.Date | pl.Datetime):
        text = pl.col("decision_date").cast(pl.String, strict=False)  # the number 20100105 is no day count
        df = df.with_columns(pl.coalesce(text.str.to_date(fmt, strict=False) for fmt in _DATE_FORMATS)
                             .alias("decision_date"))
    return schemas.conform(df, PMA)
