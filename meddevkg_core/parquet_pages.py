"""A Parquet file's page headers, checked before polars reads it: polars aborts the whole process on
a data page header counting fewer than no values, with no exception to catch.

polars (1.44) takes a data page's count of values for an unsigned size: on a negative count it asks
for an impossible amount of memory, and Rust aborts the process on the failed allocation (SIGABRT),
so a CLI run or a Dagster run worker died naming no file. One damaged byte does it: the count is a
zigzag varint, whose first byte's low bit is its sign. The footer says where each column chunk
starts, and a header (Thrift compact protocol) opens each page of a chunk; reading them reads some
bytes a page, not the pages: 3 ms for the 3.7 MB of FDA PMA records (polars reads them in 25 ms).
pyarrow cannot do it: reading the file with it first took longer than polars' own read, and its
footer's column chunks abort the process themselves on some damaged footers polars refuses with an
error (an uncaught C++ exception). So this reads the footer too. A footer or a header it cannot
parse is left to polars, which refuses it with an error.
"""

from __future__ import annotations

import mmap
from pathlib import Path

_COUNTS = {5: {1: "num_values"}, 7: {1: "num_values"}, 8: {1: "num_values", 2: "num_nulls", 3: "num_rows"}}
"""The counts a page header (PageHeader) gives, by field id: in its data_page_header, its
dictionary_page_header and its data_page_header_v2. polars aborts on a data page's num_values below
zero; it reads some of the others silently, a damaged file all the same."""
_MAX_DEPTH = 16  # a footer's structs and lists nest some 8 deep (a column's statistics, a schema's logical type)


class DamagedParquet(ValueError):
    """A Parquet file with a page header polars would abort the process on."""


class _Unparsable(Exception):
    """Bytes that are not what the Thrift compact protocol writes: left to polars."""


def check_page_headers(path: Path) -> None:
    """Raise DamagedParquet naming the column, row group and byte of a page header with a count below
    zero."""
    with path.open("rb") as handle:
        if path.stat().st_size < 12:  # "PAR1", the footer's length, "PAR1": polars refuses it
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for group, column, at, end in _column_chunks(data):
                while 0 <= at < min(end, len(data)):
                    try:
                        header, body = _struct(data, at, 0)
                    except (_Unparsable, IndexError):
                        break
                    if negative := _negative_count(header):
                        raise DamagedParquet(f"column {column!r}, row group {group}: the page header at byte {at} "
                                             f"gives {negative} (a damaged file, on which polars may abort the "
                                             "process)")
                    size = header.get(3)  # compressed_page_size: the page's bytes after its header
                    if not isinstance(size, int) or size < 0:
                        break
                    at = body + size


def _column_chunks(data: mmap.mmap) -> list[tuple[int, str, int, int]]:
    """(row group, column, first byte, end) of each column chunk the footer (FileMetaData) lists; it
    starts at its dictionary page when it has one, as polars reads it. None of them when the footer
    cannot be parsed."""
    length = int.from_bytes(data[-8:-4], "little")
    if data[-4:] != b"PAR1" or length > len(data) - 12:
        return []
    try:
        footer, _ = _struct(data, len(data) - 8 - length, 0)
    except (_Unparsable, IndexError):
        return []
    chunks = []
    for group, row_group in enumerate(_structs(footer.get(4))):  # row_groups
        for chunk in _structs(row_group.get(1)):  # columns
            meta = chunk.get(3)  # meta_data
            if not isinstance(meta, dict):
                continue
            path = meta.get(3)  # path_in_schema
            name = ".".join(p.decode("utf-8", "replace") for p in path if isinstance(p, bytes)) if isinstance(
                path, list) else "?"
            first, size = meta.get(11, meta.get(9)), meta.get(7)  # dictionary_page_offset, data_page_offset
            if isinstance(first, int) and isinstance(size, int):
                chunks.append((group, name, first, first + size))
    return chunks


def _structs(values: object) -> list[dict[int, object]]:
    return [value for value in values if isinstance(value, dict)] if isinstance(values, list) else []


def _negative_count(header: dict[int, object]) -> str:
    """The first count below zero a page header gives (_COUNTS) as "<name> <count>", or ""."""
    for part, names in _COUNTS.items():
        if isinstance(counts := header.get(part), dict):
            for field, name in names.items():
                if isinstance(count := counts.get(field), int) and count < 0:
                    return f"{name} {count}"
    return ""


def _varint(data: mmap.mmap, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value, at, shift = value | (byte & 0x7F) << shift, at + 1, shift + 7
        if not byte & 0x80:
            return value, at
        if shift > 63:
            raise _Unparsable


def _integer(data: mmap.mmap, at: int) -> tuple[int, int]:
    """A Thrift compact i16, i32 or i64: a zigzag varint."""
    value, at = _varint(data, at)
    return value >> 1 ^ -(value & 1), at


def _struct(data: mmap.mmap, at: int, depth: int) -> tuple[dict[int, object], int]:
    """A Thrift compact struct at `at`: its fields by id, and where it ends."""
    if depth > _MAX_DEPTH:
        raise _Unparsable
    fields: dict[int, object] = {}
    field = 0
    while head := data[at]:  # a zero byte ends the struct
        at += 1
        if head >> 4:
            field += head >> 4
        else:
            field, at = _integer(data, at)
        fields[field], at = _value(data, at, head & 0x0F, depth)
    return fields, at + 1


def _value(data: mmap.mmap, at: int, kind: int, depth: int) -> tuple[object, int]:
    """A Thrift compact value of type `kind` at `at`: an integer, bytes, a struct or a list (None for a
    boolean or a double, which the walk needs not)."""
    if kind in (1, 2):  # a boolean field's value is its type
        return None, at
    if kind == 3:
        return data[at], at + 1
    if kind in (4, 5, 6):
        return _integer(data, at)
    if kind == 7:
        return None, at + 8
    if kind == 8:
        size, at = _varint(data, at)
        if at + size > len(data):
            raise _Unparsable
        return data[at:at + size], at + size
    if kind in (9, 10):
        return _list(data, at, depth + 1)
    if kind == 12:
        return _struct(data, at, depth + 1)
    raise _Unparsable  # a map, or no type: Parquet's metadata holds none


def _list(data: mmap.mmap, at: int, depth: int) -> tuple[list[object], int]:
    """A Thrift compact list (or set) at `at`: its values, and where it ends."""
    if depth > _MAX_DEPTH:
        raise _Unparsable
    size, element = data[at] >> 4, data[at] & 0x0F
    at += 1
    if size == 15:
        size, at = _varint(data, at)
    if element in (1, 2):  # a list's booleans are a byte each
        if at + size > len(data):
            raise _Unparsable
        return [None] * size, at + size
    values = []
    for _ in range(size):
        if at >= len(data):  # a damaged size: a list of doubles would count on without reading
            raise _Unparsable
        value, at = _value(data, at, element, depth)
        values.append(value)
    return values, at
