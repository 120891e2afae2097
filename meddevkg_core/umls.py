"""UMLS Metathesaurus RRF files (MRCONSO, MRSTY, MRREL) read into MedDevOnto tables.

The files are streamed through polars (a real MRCONSO is ~2 GB, MRREL larger): each line is
read as one string, split once, and only the fields used here are kept. A line with the wrong
field count, bytes that are not UTF-8, a NUL byte, a malformed id or (with `max_srl`) an SRL that
is no number is quarantined with its file and line number (or, `strict`, raises naming them);
nothing else is dropped without a filter that says why. A file may be packed with gzip or zlib, as
polars unpacks it; one packed with zstd is refused (Python cannot unpack it to find its NUL lines).

Direction (DATA_SOURCES.md §3.1, verified): REL describes CUI2 relative to CUI1, so
`X|..|PAR|Y` makes Y a parent of X and `X|..|CHD|Y` makes Y a child of X.
"""

from __future__ import annotations

import gzip
import mmap
import os
import zlib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import polars as pl

from meddevkg_core import schemas
from meddevkg_core.errors import one_line
from meddevkg_core.lineage import read_fingerprinted
from meddevkg_core.ontology import CATEGORY_WEIGHTS, category_for_tui
from meddevkg_core.terminologies import (
    DEFAULT_UMLS_TUIS,
    Terminology,
    TerminologyError,
    break_cycles,
    categorised,
    quarantine,
    with_norms,
)

if TYPE_CHECKING:
    from polars.expr.whenthen import ChainedThen, Then

MRCONSO = ("CUI", "LAT", "TS", "LUI", "STT", "SUI", "ISPREF", "AUI", "SAUI", "SCUI", "SDUI", "SAB", "TTY", "CODE",
           "STR", "SRL", "SUPPRESS", "CVF")
MRSTY = ("CUI", "TUI", "STN", "STY", "ATUI", "CVF")
MRREL = ("CUI1", "AUI1", "STYPE1", "REL", "CUI2", "AUI2", "STYPE2", "RELA", "RUI", "SRUI", "SAB", "SL", "RG", "DIR",
         "SUPPRESS", "CVF")

_CUI = (r"^C[0-9]{7}$", "a CUI (C and 7 digits)")  # [0-9]: polars' \d also matches "０" or "٣"
_TUI = (r"^T[0-9]{3}$", "a TUI (T and 3 digits)")
_TEXT = (r"\S", "a non-blank string")
_SRL = (r"^[0-9]{1,9}$", "a number (up to 9 digits)")  # 9 digits: the Int32 it is compared as holds them
_CHUNK = 1 << 24  # bytes read (or unpacked) at a time to find the lines holding a NUL


def read_umls(umls_dir: str | Path, *, tuis: Collection[str] = DEFAULT_UMLS_TUIS,
              languages: Sequence[str] = ("ENG",), sabs: Collection[str] | None = None,
              rel_sabs: Collection[str] | None = None, max_srl: int | None = None,
              keep_suppressible: bool = False, strict: bool = False) -> Terminology:
    """The concepts of the given semantic types, their strings and their PAR/CHD parents.

    `umls_dir` is the release's META directory (or the release directory holding META/).
    Kept atoms: LAT in `languages`, SUPPRESS = N unless `keep_suppressible`, SAB in `sabs` and
    SRL <= `max_srl` where given. Parent links come from MRREL PAR/CHD rows (SAB in `rel_sabs`
    where given, unsuppressed) between two kept concepts. Each file is hashed once its read is done
    (lineage.read_fingerprinted): `inputs` names umls_mrsty, umls_mrconso and umls_mrrel.
    """
    root = Path(umls_dir)
    if not (root / "MRCONSO.RRF").is_file() and (root / "META" / "MRCONSO.RRF").is_file():
        root = root / "META"
    (types, sty_bad), sty_file = read_fingerprinted(
        root / "MRSTY.RRF", lambda path: _semantic_types(path, set(tuis), strict))
    (atoms, conso_bad), conso_file = read_fingerprinted(
        root / "MRCONSO.RRF", lambda path: _atoms(path, types, languages, sabs, max_srl, keep_suppressible, strict))
    concepts, terms, empty_terms = _concepts(atoms, types, languages)
    (parents, rel_bad), rel_file = read_fingerprinted(
        root / "MRREL.RRF", lambda path: _hierarchy(path, concepts["concept_id"], rel_sabs, keep_suppressible, strict))
    return Terminology("UMLS", concepts, terms, parents, pl.concat([sty_bad, conso_bad, empty_terms, rel_bad]),
                       {"umls_mrsty": sty_file, "umls_mrconso": conso_file, "umls_mrrel": rel_file})


_NUL = "NUL byte (0x00)"


def _lines(path: Path, nul_lines: list[int] | None = None) -> pl.LazyFrame:
    """`line` (1-based) and `raw` text; NUL never occurs in RRF, so it is the separator: each line is one field.

    Read lossily, so that a line with bytes that are not UTF-8 (they read as U+FFFD) can be named
    and quarantined by `scan_rrf` rather than fail the whole file. A file that does hold NUL is read
    ragged, its NUL lines (`_nul_lines`) given back their first NUL and the text up to a second one,
    so that `scan_rrf` names them too rather than polars failing the file on "more fields". A caller
    that knows them already passes `nul_lines`: the scan unpacks a packed file to find them."""
    if nul_lines is None:
        nul_lines = _nul_lines(path)
    schema = {"raw": pl.String, "after_nul": pl.String} if nul_lines else {"raw": pl.String}
    lf = (pl.scan_csv(path, has_header=False, separator="\x00", quote_char=None, schema=schema,
                      encoding="utf8-lossy", raise_if_empty=False, truncate_ragged_lines=bool(nul_lines))
          .with_row_index("line", offset=1))
    raw = pl.col("raw").fill_null("")
    if nul_lines:  # a join, not is_in: see _flag_known
        nul = pl.LazyFrame({"line": nul_lines, "nul": True}, schema={"line": pl.get_index_type(), "nul": pl.Boolean})
        lf = lf.join(nul, on="line", how="left").with_columns(
            pl.when(pl.col("nul")).then(pl.concat_str([raw, pl.lit("\x00"), pl.col("after_nul").fill_null("")]))
            .otherwise(raw).alias("raw")).drop("after_nul", "nul")
    return lf.with_columns(raw.str.strip_suffix("\r"))


def _nul_lines(path: Path) -> list[int]:
    """The lines (1-based) holding a NUL byte, found in the bytes (polars would split them, and take
    an empty field after a NUL for a missing one): one memchr over the mapped file when there is none.
    A file packed as polars unpacks it (gzip, zlib) is scanned unpacked, a chunk at a time; one packed
    with zstd, which Python cannot unpack, is refused."""
    try:
        with path.open("rb") as fh:
            packing = _packing(fh.read(4))
            if packing == "zstd":
                raise TerminologyError(f"{path}: cannot be read: it is packed with zstd, which this reader cannot "
                                       "scan; unpack it (zstd -d)")
            if packing is None and not _holds_nul(fh):
                return []
            fh.seek(0)
            return _lines_holding_nul(_unpacked(fh, packing) if packing else iter(lambda: fh.read(_CHUNK), b""))
    except OSError as exc:
        raise TerminologyError(f"{path}: cannot be read: {exc}") from exc


def _packing(head: bytes) -> str | None:
    """The packing polars unpacks a file of (its magic bytes, as polars tells them), or None."""
    if len(head) < 4:
        return None
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head[0] == 0x78 and head[1] in (0x01, 0x5E, 0x9C, 0xDA):
        return "zlib"
    return "zstd" if head == b"\x28\xb5\x2f\xfd" else None


def _holds_nul(fh: BinaryIO) -> bool:
    if os.fstat(fh.fileno()).st_size == 0:  # mmap refuses an empty file
        return False
    with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return mm.find(b"\x00") >= 0


def _unpacked(fh: BinaryIO, packing: str) -> Iterator[bytes]:
    """A gzip or zlib file's unpacked bytes, up to _CHUNK at a time (a real MRCONSO is 2 GB). Where
    the data is damaged the scan stops: polars refuses the file when it reads it (collect_rrf)."""
    try:
        if packing == "gzip":
            with gzip.GzipFile(fileobj=fh) as unpacking:
                yield from iter(lambda: unpacking.read(_CHUNK), b"")
            return
        unpacker = zlib.decompressobj()
        while not unpacker.eof and (packed := unpacker.unconsumed_tail or fh.read(_CHUNK)):
            yield unpacker.decompress(packed, _CHUNK)
    except (OSError, EOFError, zlib.error):
        return


def _lines_holding_nul(chunks: Iterable[bytes]) -> list[int]:
    """The lines (1-based) of a file given in chunks that hold a NUL byte, each line once."""
    found: list[int] = []
    line, in_found = 1, False  # in_found: the rest of a line already found
    for chunk in chunks:
        at = 0
        while at < len(chunk):
            if in_found:
                if (end := chunk.find(b"\n", at)) < 0:
                    break
                line, at, in_found = line + 1, end + 1, False
            elif (nul := chunk.find(b"\x00", at)) < 0:
                line += chunk.count(b"\n", at)
                break
            else:
                line += chunk.count(b"\n", at, nul)
                found.append(line)
                at, in_found = nul + 1, True
    return found


def scan_rrf(path: Path, columns: Sequence[str], keep: Sequence[str],
             checks: Mapping[str, tuple[str, str]], prefilter: pl.Expr | None = None) -> pl.LazyFrame:
    """The lines of an RRF file as `line` and the `keep` fields, plus `reason` (null when well formed).

    RRF has no quoting and ends every field with '|', so a line is well formed when it holds
    exactly len(columns) pipes and ends with one, and holds neither NUL nor U+FFFD (the mark of bytes
    that were not UTF-8, or of text damaged so before the release). The raw text is not carried
    along (see `owned`).
    """
    if not path.is_file():
        raise TerminologyError(f"{path}: no such file")
    raw = pl.col("raw")
    lf = _lines(path)
    if prefilter is not None:
        lf = lf.filter(prefilter)
    pipes = raw.str.count_matches("|", literal=True)
    lf = lf.with_columns(raw.str.split("|").alias("_fields")).with_columns(
        pl.col("_fields").list.get(columns.index(c), null_on_oob=True).alias(c) for c in keep)
    # NUL first: a line read ragged past a second NUL has lost the rest of its '|'
    reason: Then | ChainedThen = pl.when(raw.str.contains("\x00", literal=True)).then(pl.lit(_NUL))
    reason = reason.when(~((pipes == len(columns)) & raw.str.ends_with("|"))).then(
        pl.format("expected {} fields each ending in '|', found {} '|'", pl.lit(len(columns)), pipes))
    reason = reason.when(raw.str.contains("\ufffd", literal=True)).then(pl.lit("non-UTF-8 bytes (read as U+FFFD)"))
    for col, (pattern, what) in checks.items():
        reason = reason.when(~pl.col(col).str.contains(pattern)).then(
            pl.format("{} '{}' is not {}", pl.lit(col), pl.col(col), pl.lit(what)))
    return lf.with_columns(reason.otherwise(pl.lit(None, dtype=pl.String)).alias("reason")).drop("_fields", "raw")


def owned(col: str) -> pl.Expr:
    """A copy of a string column. A polars string is a view into the buffer it was read in, so
    keeping 1% of MRCONSO's rows uncopied would keep most of the file's buffers in memory."""
    return pl.concat_str([pl.col(col), pl.lit("")]).alias(col)


def collect_rrf(lf: pl.LazyFrame, path: Path, wanted: pl.Expr, out: Sequence[pl.Expr],
                strict: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Run the scan once: `out` of the well-formed lines passing `wanted`; the malformed lines quarantined.
    A file polars cannot read is a TerminologyError naming it, in one line (polars' may run to many)."""
    try:
        df = (lf.filter(pl.col("reason").is_not_null() | wanted).select("line", "reason", *out)
              .collect(engine="streaming"))
    except (pl.exceptions.PolarsError, OSError) as exc:  # OSError: a broken gzip, which polars would unpack
        raise TerminologyError(f"{path}: cannot be read: {one_line(exc)}") from exc
    bad = df.filter(pl.col("reason").is_not_null()).select("line", "reason").sort("line")
    if strict and bad.height:
        raise TerminologyError(f"{path}: line {bad['line'][0]}: {bad['reason'][0]}")
    if bad.height:  # a second pass for the text of the (few) malformed lines
        nul_lines = bad.filter(pl.col("reason") == _NUL)["line"].to_list()  # NUL is the first reason checked
        text = _lines(path, nul_lines).filter(pl.col("line").is_in(bad["line"].implode())).select(
            "line", pl.col("raw").str.slice(0, 500).alias("record")).collect(engine="streaming")
        bad = bad.join(text, on="line", how="left").sort("line")
    rejected = quarantine(bad.select(pl.format("{}:{}", pl.lit(path.name), "line").alias("record_key"),
                                     "reason", *(["record"] if "record" in bad.columns else [])), path.name)
    return df.filter(pl.col("reason").is_null()).drop("reason"), rejected


def _flag_known(lf: pl.LazyFrame, col: str, ids: pl.Series) -> pl.LazyFrame:
    """Add `<col>_known`: whether `col` is among `ids`. A streaming left join, because
    `is_in(<imploded Series>)` made polars hold the whole scan in memory (measured on polars 1.44)."""
    known = pl.LazyFrame({col: ids.unique(), f"{col}_known": True})
    return lf.join(known, on=col, how="left").with_columns(pl.col(f"{col}_known").fill_null(False))


def _semantic_types(path: Path, tuis: set[str], strict: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """CUI -> the one TUI kept: the relevant type whose category comes first in CATEGORY_WEIGHTS
    (DEVICE_TYPE, PROCESS, ...), then the smallest TUI; so a T074+T073 concept is a device."""
    lf = scan_rrf(path, MRSTY, ("CUI", "TUI"), {"CUI": _CUI, "TUI": _TUI})
    df, rejected = collect_rrf(lf, path, pl.col("TUI").is_in(list(tuis)), [owned("CUI"), owned("TUI")], strict)
    order = list(CATEGORY_WEIGHTS)
    rank = {t: order.index(category_for_tui(t)[0]) for t in tuis}
    types = (df.with_columns(pl.col("TUI").replace_strict(rank, return_dtype=pl.Int32).alias("rank"))
             .sort("CUI", "rank", "TUI").unique("CUI", keep="first", maintain_order=True).select("CUI", "TUI"))
    return types, rejected


def _atoms(path: Path, types: pl.DataFrame, languages: Sequence[str], sabs: Collection[str] | None,
           max_srl: int | None, keep_suppressible: bool, strict: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    keep = ("CUI", "LAT", "TS", "STT", "ISPREF", "SAB", "STR", "SRL", "SUPPRESS")
    checks = {"CUI": _CUI, "STR": _TEXT} | ({"SRL": _SRL} if max_srl is not None else {})  # SRL: used only then
    lf = _flag_known(scan_rrf(path, MRCONSO, keep, checks), "CUI", types["CUI"])
    wanted = pl.col("LAT").is_in(list(languages)) & pl.col("CUI_known")
    if not keep_suppressible:
        wanted &= pl.col("SUPPRESS") == "N"
    if sabs is not None:
        wanted &= pl.col("SAB").is_in(list(sabs))
    if max_srl is not None:
        wanted &= pl.col("SRL").cast(pl.Int32, strict=False) <= max_srl
    preferred = (pl.col("TS") == "P") & (pl.col("STT") == "PF") & (pl.col("ISPREF") == "Y")
    out = [owned("CUI"), owned("LAT"), owned("SAB"), owned("STR"), (~preferred).alias("not_pref")]
    return collect_rrf(lf, path, wanted, out, strict)


def _concepts(atoms: pl.DataFrame, types: pl.DataFrame,
              languages: Sequence[str]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Preferred name = the atom with TS=P, STT=PF, ISPREF=Y (first language first), else the first atom."""
    sources = atoms.group_by("CUI").agg(
        pl.format("UMLS MRCONSO ({})", pl.col("SAB").unique().sort().str.join(", ")).alias("source"))
    # One row per (CUI, string) before normalising: the same string comes from many sources.
    atoms = (atoms.with_columns(pl.col("LAT").replace_strict({lat: i for i, lat in enumerate(languages)},
                                                              return_dtype=pl.Int32).alias("lang"))
             .sort("CUI", "lang", "not_pref", "line").unique(["CUI", "STR"], keep="first", maintain_order=True)
             .select("CUI", "STR", "line"))
    atoms = with_norms(atoms, "STR")
    empty = atoms.filter(pl.col("term_norm") == "")
    atoms = atoms.filter(pl.col("term_norm") != "")
    named = atoms.unique("CUI", keep="first", maintain_order=True).select(
        "CUI", pl.col("STR").alias("preferred_name")).join(sources, on="CUI")
    concepts = categorised(named.join(types, on="CUI").sort("CUI").select(
        pl.col("CUI").alias("concept_id"), "preferred_name", pl.col("TUI").alias("tui"), "source"))
    terms = schemas.conform(atoms.unique(["CUI", "term_norm"], keep="first", maintain_order=True).select(
        pl.col("STR").alias("term"), "term_norm", pl.col("CUI").alias("concept_id")), schemas.CONCEPT_TERMS)
    rejected = quarantine(empty.select(pl.format("MRCONSO.RRF:{}", "line").alias("record_key"),
                                       pl.lit("string normalises to nothing").alias("reason"),
                                       pl.col("STR").alias("record")), "MRCONSO.RRF")
    return concepts, terms, rejected


def _hierarchy(path: Path, cuis: pl.Series, rel_sabs: Collection[str] | None, keep_suppressible: bool,
               strict: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Child -> parent links from PAR/CHD rows; a link asserted by more sources wins a cycle."""
    # Only PAR/CHD lines are split and checked: MRREL is the largest file and the rest is unused.
    raw = pl.col("raw")
    hierarchical = raw.str.contains("|PAR|", literal=True) | raw.str.contains("|CHD|", literal=True)
    lf = scan_rrf(path, MRREL, ("CUI1", "REL", "CUI2", "SAB", "SUPPRESS"), {"CUI1": _CUI, "CUI2": _CUI}, hierarchical)
    lf = _flag_known(_flag_known(lf, "CUI1", cuis), "CUI2", cuis)
    wanted = pl.col("REL").is_in(["PAR", "CHD"]) & pl.col("CUI1_known") & pl.col("CUI2_known")
    if not keep_suppressible:
        wanted &= pl.col("SUPPRESS") == "N"
    if rel_sabs is not None:
        wanted &= pl.col("SAB").is_in(list(rel_sabs))
    rows, rejected = collect_rrf(lf, path, wanted, [owned("CUI1"), owned("REL"), owned("CUI2"), owned("SAB")], strict)
    par = pl.col("REL") == "PAR"
    edges = (rows.select(pl.when(par).then("CUI1").otherwise("CUI2").alias("concept_id"),
                         pl.when(par).then("CUI2").otherwise("CUI1").alias("parent_id"), "SAB")
             .filter(pl.col("concept_id") != pl.col("parent_id"))
             .group_by("concept_id", "parent_id").agg(pl.col("SAB").n_unique().alias("sources"))
             .sort(["sources", "concept_id", "parent_id"], descending=[True, False, False]))
    kept, cyclic = break_cycles(edges)
    cycle_rejects = quarantine(cyclic.select(
        pl.format("{} -> {}", "concept_id", "parent_id").alias("record_key"),
        pl.format("parent link closes a cycle (asserted by {} source(s); links with more sources kept)",
                  "sources").alias("reason"),
        pl.struct("concept_id", "parent_id", "sources").struct.json_encode().alias("record")), path.name)
    parents = schemas.conform(kept.sort("concept_id", "parent_id"), schemas.CONCEPT_PARENTS)
    return parents, pl.concat([rejected, cycle_rejects])
