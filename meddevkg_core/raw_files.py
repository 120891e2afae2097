"""Reading a table file (Parquet, CSV or JSON Lines) into a DataFrame of text, as it was written.

Every reader of a user's file (the corpus, FDA PMA records, a pair file, an LLM entity file) reads it
here, so that one set of rules says what a file may hold. A file that would be read wrongly, not just
have a bad record, is refused whole with a CorpusError naming it and the line or column: one polars
cannot read (a damaged Parquet file, on which polars may panic, too: `reading`; one it would abort
the process on is refused before it reads it: `read_parquet`), a column named as
the reader's own (RESERVED_COLUMNS), a CSV header run on past a carriage return or naming a column
twice, a carriage return alone outside a quoted CSV field, a quote inside a field that does not open
with one or text after a field's closing quote (polars and the csv module would split the records
differently), a CSV field whose quote is never closed (an odd number of quotes: polars read some
such files without error), a Parquet column of nested values or of values with no text. A record
that is only itself unreadable is kept as a row with a `__parse_error__` (and, when it could not be
split into fields, its text in `__raw__`), for the validation to quarantine: a CSV record with more
or fewer fields than the header, an invalid JSON line (a key given twice, nesting deeper than json
reads), a JSON object where a value belongs, bytes that are not UTF-8. A byte order mark opening a
CSV or JSON Lines file is no part of it, for polars and the csv module alike.
"""

from __future__ import annotations

import codecs
import csv
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import polars as pl

from meddevkg_core.errors import CorpusError, InputError, one_line
from meddevkg_core.parquet_pages import DamagedParquet, check_page_headers

_READ_ERRORS = (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError, DamagedParquet)
"""What polars may raise on a file it cannot read. On some damaged Parquet files it panics: its
PanicException is a BaseException, which `except Exception` lets through as a traceback. On others
it aborts the process: `read_parquet` refuses them first (DamagedParquet)."""


def _why_unreadable(exc: BaseException) -> str:
    """Why a file could not be read (one of _READ_ERRORS), in one line; a panic says so, as its own text
    speaks of polars' code, not of the file."""
    if isinstance(exc, pl.exceptions.PanicException):
        return f"polars panicked on it (a damaged file?): {one_line(exc)}"
    return one_line(exc)


@contextmanager
def reading(path: Path | str, what: str = "", error: type[InputError] = CorpusError) -> Iterator[None]:
    """Read `path` in the block (a Parquet file with `read_parquet`): when polars cannot (_READ_ERRORS,
    a damaged file included), `error` names it in one line, "<path>: cannot be read<what>: <why>"."""
    try:
        yield
    except _READ_ERRORS as exc:
        raise error(f"{path}: cannot be read{what}: {_why_unreadable(exc)}") from exc


def read_parquet(path: Path | str, columns: list[str] | None = None) -> pl.DataFrame:
    """A Parquet file as polars reads it, once its page headers are checked (parquet_pages): on a
    damaged one polars aborts the process, leaving nothing to catch. Read it in `reading`."""
    check_page_headers(Path(path))
    return pl.read_parquet(path, columns=columns)


def read_raw(path: Path) -> pl.DataFrame:
    """Read any supported file with every column as text, so validation sees what was written."""
    try:
        if path.suffix == ".parquet":
            df = read_parquet(path)
            refuse_reserved(path, df.columns)
        elif path.suffix == ".csv":
            return _flag_undecodable(_read_csv(path))
        else:
            return _flag_undecodable(_read_jsonl(path))
    except _READ_ERRORS as exc:
        raise CorpusError(f"{path}: cannot be read: {_why_unreadable(exc)}") from exc
    return df.with_columns(_column_text(path, df, name) for name in df.columns)


def _not_escaped(column: str, field: str) -> str:
    shown = repr(field if len(field) <= 40 else field[:40] + "...")
    return f"column {column!r}: field {shown} is not properly escaped"


RESERVED_COLUMNS = ("__row__", "__reason__", "__parse_error__", "__raw__")
"""The columns the readers add to a table as they validate it (a row's number, why it is quarantined)."""


def refuse_reserved(path: Path, columns: Iterable[str], where: str = "") -> None:
    """A CorpusError naming the file when it has a column the readers add: a file's own `__row__` made
    polars refuse the second, and its own `__parse_error__` would quarantine every row it fills."""
    if taken := [c for c in columns if c in RESERVED_COLUMNS]:
        raise CorpusError(f"{path}: {where}column {taken[0]!r} is a name the reader keeps for itself; rename it")


def _column_text(path: Path, df: pl.DataFrame, name: str) -> pl.Series:
    """A Parquet column as text. A column of structs (polars casts {"a": 1, "b": "x"} to '{1,"x"}') or
    nested lists, or of values with no text (bytes that are not UTF-8, durations), refuses the file."""
    dtype = df.schema[name]
    if isinstance(dtype, pl.Struct) or isinstance(dtype, pl.List | pl.Array) and dtype.inner.is_nested():
        raise CorpusError(f"{path}: column {name!r} holds nested data ({dtype}), not one value a row")
    try:
        return df.select(_to_text(name, dtype)).to_series()
    except _READ_ERRORS as exc:  # a date out of the range polars writes as text panics
        raise CorpusError(f"{path}: column {name!r} ({dtype}) cannot be read as text: {_why_unreadable(exc)}") from exc


def _read_csv(path: Path) -> pl.DataFrame:
    """A CSV file as polars reads it, except that a record with more or fewer fields than the header
    (polars stops on the one and pads the other with nulls) becomes a row with a parse error naming
    its line, kept whole in `__raw__`. The csv module counts the fields, only when polars stopped or
    padding is possible: it is several times slower than polars."""
    _refuse_misread_quoting(path)
    try:
        df = pl.read_csv(path, infer_schema=False, encoding="utf8-lossy")
    except pl.exceptions.ComputeError:
        width, records, ragged = _count_fields(path)
        if not ragged:
            raise
        df = pl.read_csv(path, infer_schema=False, encoding="utf8-lossy", truncate_ragged_lines=True)
        _check_header(path, df.columns)
    else:
        _check_header(path, df.columns)
        if df.width < 2 or df[df.columns[-1]].null_count() == 0:
            return df  # a short record ends in a null, a long one stops polars: there are none
        width, records, ragged = _count_fields(path)
        if not ragged:
            return df
    if (width, records) != (df.width, df.height):
        _, line, _, fields = ragged[0]
        raise CorpusError(f"{path}: cannot be read: line {line} has {fields} fields where the header has {width}, "
                          "and the other records do not line up with the rows polars reads")
    errors: list[str | None] = [None] * df.height
    raws: list[str | None] = [None] * df.height
    with _csv_text(path) as handle:
        lines = handle.readlines()  # split as the csv reader splits them, so its line numbers index them
    for index, first, last, fields in ragged:
        errors[index] = f"line {first}: {fields} field{'s' * (fields != 1)} where the header has {width}"
        raws[index] = "".join(lines[first - 1:last]).rstrip("\r\n")
    return df.with_columns(pl.Series("__parse_error__", errors, pl.String), pl.Series("__raw__", raws, pl.String))


def _check_header(path: Path, columns: Sequence[str]) -> None:
    """Refuse a CSV file whose header polars read past a carriage return: polars ends lines at line
    feeds only, so a file with lines ended by CR alone was one header and no rows, read without error.
    Refuse one that names a column twice: polars renames the second `<name>_duplicated_0`, and the
    reader would take the first's values for the column's without a word."""
    refuse_reserved(path, columns)
    if twice := next((c for c in columns if c.strip() and f"{c}_duplicated_0" in columns), None):  # not ",,"
        raise CorpusError(f"{path}: cannot be read: its header names column {twice!r} more than once")
    if broken := next((c for c in columns if "\r" in c), None):
        raise CorpusError(f"{path}: cannot be read: its header runs on past a carriage return ({broken[:40]!r}); "
                          "lines must end in LF or CR LF, not CR alone")


_CSV_TOKEN = re.compile(r'"|,|\r\n|\r|\n')


def _refuse_misread_quoting(path: Path) -> None:
    """Refuse a CSV file that polars and the csv module would split into records differently."""
    data = path.read_bytes()
    _refuse_stray_carriage_return(path, data)
    _refuse_quote_in_unquoted_field(path, data)


def _refuse_stray_carriage_return(path: Path, data: bytes) -> None:
    """Refuse a CSV file with a carriage return alone outside quotes after its header: polars keeps it
    in a field's text, or drops it before a comma, or miscounts the rows around it, and the csv module
    ends a line there. A CR before an LF ends a line; one in a quoted field is the field's text. Only a
    file with a CR not before an LF is tokenised in Python: the search for one runs in C."""
    if not re.search(rb"\r(?!\n|\Z)", data):  # a CR ending the file ends its last line
        return
    text = data.decode("utf-8-sig", errors="replace")  # as _csv_text reads it
    line, quoted, field_start, escaped = 1, False, 0, -1
    for token in _CSV_TOKEN.finditer(text):
        mark, at = token.group(), token.start()
        if mark == '"':
            if at == escaped:  # the second quote of a quoted field's ""
                continue
            if quoted and text.startswith('"', at + 1):
                escaped = at + 1
            elif quoted or at == field_start:  # a quote within a field is text
                quoted = not quoted
        elif quoted:
            line += mark != ","  # a line as the csv module counts them (_count_fields): a CR ends one
        elif mark == ",":
            field_start = at + 1
        elif mark == "\r" and token.end() < len(text):
            if line > 1:  # in the header, _check_header names the line ends of CR alone
                raise CorpusError(f"{path}: cannot be read: line {line} has a carriage return alone (not before "
                                  "a line feed) outside quotes; quote the field that holds it, or end lines in LF or "
                                  "CR LF")
        else:
            line, field_start = line + 1, token.end()


_BESIDE_QUOTE = np.zeros(256, dtype=bool)
_BESIDE_QUOTE[list(b',\r\n"')] = True
"""The bytes a well-placed quote may follow (an opening one, or the second of "") or precede."""
_CHUNK = 1 << 20  # bytes compared at a time: the comparison stays in cache


def _refuse_quote_in_unquoted_field(path: Path, data: bytes) -> None:
    """Refuse a CSV file with a quote inside a field that does not open with one (`3.5" catheter`,
    which RFC 4180 forbids), or with text after a quoted field's closing quote (`"Best" 3" catheter`):
    the csv module reads the quote as text, polars as a quote opening or closing a field when it splits
    the file into records, and then fails on the records after it, blames a later field, or reads
    several records as one. In a well-formed file the quotes alternate: an odd one (1st, 3rd, ...)
    opens a field (after a comma, a line end or the start of the file) or is the second of a "",
    an even one closes the field (before a comma, a line end or the end) or is the first of a "".
    The first quote out of turn is where the file goes wrong, and the file is refused naming its
    field. With every quote in turn, an odd number of them leaves the last field opened never closed:
    polars failed on some such files and read others without error, taking a "" at the file's end for
    the closing quote: P2's text `"valve` and a next line `P3,stent,""` read as one field, P3 lost, or
    a last field of three quotes read as empty.
    numpy finds the quotes: 20 ms for the 28 MB of FDA PMA records as CSV (polars reads them in 220 ms)."""
    if b'"' not in data:
        return
    text = np.frombuffer(data, dtype=np.uint8)
    quotes = np.concatenate([np.flatnonzero(text[at:at + _CHUNK] == ord('"')) + at
                             for at in range(0, text.size, _CHUNK)])
    opening, closing = quotes[0::2], quotes[1::2]
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    misplaced = ~(_BESIDE_QUOTE[text[opening - 1]] | (opening == start))  # [-1] at 0: allowed anyway
    overrun = ~(_BESIDE_QUOTE[text[np.minimum(closing + 1, text.size - 1)]] | (closing == text.size - 1))
    if overrun.any() and (not misplaced.any() or closing[overrun.argmax()] < opening[misplaced.argmax()]):
        quote = int(closing[overrun.argmax()])
        begin, why = int(opening[overrun.argmax()]), "text follows its closing quote"  # the field opens with it
    elif misplaced.any():
        quote = int(opening[misplaced.argmax()])
        begin = max(start, *(data.rfind(end, 0, quote) + 1 for end in (b",", b"\n", b"\r")))
        why = "a quote inside a field that does not open with one; quote the field and double the quote"
    elif quotes.size % 2:  # the last quote opens a field or is the second of a "" in it: nothing closes it
        begin = int(opening[(opening == start) | (text[opening - 1] != ord('"'))][-1])
        quote, why = text.size, "its quote is never closed"  # the field runs on to the file's end
    else:
        return
    line = 1 + data.count(b"\n", 0, begin) + data.count(b"\r", 0, begin) - data.count(b"\r\n", 0, begin)
    ends = [at for at in (data.find(end, quote) for end in (b",", b"\n", b"\r")) if at >= 0]
    field_text = data[begin:min(ends, default=len(data))].decode("utf-8", errors="replace")
    reason = _not_escaped(_column_at(path, text, quotes, begin), field_text)
    raise CorpusError(f"{path}: cannot be read: line {line}, {reason} ({why})")


def _column_at(path: Path, text: np.ndarray, quotes: np.ndarray, begin: int) -> str:
    """The header's name for the field starting at byte `begin`, every quote before it in its place
    (so a line end or comma is outside quotes where an even number of quotes comes before it). A field
    of the header is named by its number: its name is the field itself, or, when its quote is never
    closed, the rest of the file."""
    def outside(at: np.ndarray) -> np.ndarray:
        return at[np.searchsorted(quotes, at) % 2 == 0]

    head = text[:begin]
    ends = outside(np.flatnonzero((head == ord("\n")) | (head == ord("\r"))))
    record = int(ends[-1]) + 1 if ends.size else 0
    index = outside(np.flatnonzero(text[record:begin] == ord(",")) + record).size
    if not ends.size:
        return f"#{index + 1}"
    with _csv_text(path) as handle:
        header = next(csv.reader(handle), [])
    return header[index] if index < len(header) else f"#{index + 1}"


def _count_fields(path: Path) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    """The header's field count, the number of records after it, and (record, first line, last line,
    field count) of each record whose count is not the header's; a blank line is no such record (polars
    reads it as a row of nulls, quarantined for its missing values)."""
    ragged: list[tuple[int, int, int, int]] = []
    with _csv_text(path) as handle:
        reader = csv.reader(handle)
        width = len(next(reader, []))
        records, first = 0, reader.line_num + 1
        for records, fields in enumerate(reader, 1):
            if fields and len(fields) != width:
                ragged.append((records - 1, first, reader.line_num, len(fields)))
            first = reader.line_num + 1
    return width, records, ragged


def _csv_text(path: Path) -> TextIO:
    """A CSV file opened for the csv module, as polars reads it: line ends kept for the csv module to
    split lines at (newline=""), a byte order mark opening it no part of its first field ('utf-8-sig'),
    bytes that are not UTF-8 read as U+FFFD. Any field of it may be read: none is longer than the file."""
    csv.field_size_limit(max(csv.field_size_limit(), path.stat().st_size))
    return path.open(encoding="utf-8-sig", errors="replace", newline="")


def _flag_undecodable(df: pl.DataFrame) -> pl.DataFrame:
    """A CSV or JSON Lines row whose bytes were not UTF-8 (read as U+FFFD) becomes a parse error, so
    it is quarantined rather than kept with the replacement character in an id or a text. A real
    U+FFFD in the file is quarantined too: it marks text that was damaged before."""
    columns = [c for c, dtype in df.schema.items() if dtype == pl.String and not c.startswith("__")]
    if not columns:
        return df
    where = pl.concat_str([pl.when(pl.col(c).str.contains("\ufffd", literal=True)).then(pl.lit(c)) for c in columns],
                          separator=", ", ignore_nulls=True).fill_null("")
    message = pl.when(where != "").then(pl.concat_str([pl.lit("bytes that are not UTF-8 in "), where,
                                                       pl.lit(" (read as U+FFFD)")]))
    earlier = pl.col("__parse_error__") if "__parse_error__" in df.columns else pl.lit(None, pl.String)
    flagged = df.with_columns(pl.coalesce(earlier, message).alias("__parse_error__"))
    return flagged if "__parse_error__" in df.columns or flagged["__parse_error__"].is_not_null().any() else df


def _to_text(name: str, dtype: pl.DataType) -> pl.Expr:
    if isinstance(dtype, pl.List | pl.Array):
        return pl.col(name).cast(pl.List(pl.String)).list.join(" ").alias(name)
    if isinstance(dtype, pl.Datetime):  # pandas writes dates as timestamps: their date is the value
        return pl.col(name).dt.date().cast(pl.String).alias(name)
    return pl.col(name).cast(pl.String).alias(name)


def _read_jsonl(path: Path) -> pl.DataFrame:
    """JSON Lines read line by line: a malformed line becomes a row with a parse error, not a crash.
    A line ends at a line feed (read_text makes CR LF and CR one) and nowhere else: a JSON string may
    hold U+2028, U+2029 or U+0085 as they are, which str.splitlines takes for line ends too. A byte
    order mark opening the file is no part of its first line ('utf-8-sig'), as polars reads a CSV's."""
    rows: list[dict[str, str | None]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8-sig", errors="replace").split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_unrepeated_keys)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than json can read
            rows.append({"__parse_error__": f"line {number}: invalid JSON ({exc})", "__raw__": line[:500]})
            continue
        refuse_reserved(path, record, f"line {number}: ")
        row = {k: (json.dumps(v, ensure_ascii=False) if _nested(v) else _joined(v) if isinstance(v, list)
                   else None if v is None else str(v)) for k, v in record.items()}
        if nested := [k for k, v in record.items() if _nested(v)]:  # a cell holds a value, not a structure
            row["__parse_error__"] = f"line {number}: {nested[0]!r} holds a JSON object or nested array, not a value"
        rows.append(row)
    # every column text, as from the other formats: a key null on every line would otherwise be untyped
    columns = dict.fromkeys((key for row in rows for key in row), pl.String)
    return pl.DataFrame(rows, schema=columns) if rows else pl.DataFrame()


def _joined(values: list[object]) -> str:
    """A JSON array of values as one text, its nulls left out as a Parquet list's are (not "None")."""
    return " ".join(str(v) for v in values if v is not None)


def _nested(value: object) -> bool:
    return isinstance(value, dict) or isinstance(value, list) and any(isinstance(v, dict | list) for v in value)


def _unrepeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refused when it gives a key twice: json.loads would keep the last
    value and drop the other unseen."""
    record = dict(pairs)
    if len(record) < len(pairs):
        repeated = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise ValueError(f"key {repeated!r} given twice")
    return record
