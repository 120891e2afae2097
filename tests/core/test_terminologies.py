"""UMLS RRF and MeSH XML readers, and their merge under the shipped MedDevOnto (fixtures: tests/fixtures)."""

from __future__ import annotations

import gzip
import re
import shutil
import zlib
from pathlib import Path

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core import umls as umls_reader
from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import fingerprint
from meddevkg_core.mesh import read_mesh
from meddevkg_core.ontology import Ontology, load_meddevonto
from meddevkg_core.terminologies import (
    UMLS_OPTION_SETTINGS,
    Terminology,
    TerminologyConfig,
    TerminologyError,
    break_cycles,
    load_ontology,
    merge_terminologies,
)
from meddevkg_core.umls import read_umls

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
UMLS_DIR = FIXTURES / "umls"
MESH_XML = FIXTURES / "mesh" / "desc_sample.xml"


@pytest.fixture(scope="module")
def umls() -> Terminology:
    return read_umls(UMLS_DIR)


@pytest.fixture(scope="module")
def mesh() -> Terminology:
    return read_mesh(MESH_XML)


@pytest.fixture(scope="module")
def merged():
    return load_ontology(TerminologyConfig(umls_dir=UMLS_DIR, mesh_xml=MESH_XML))


def _links(t: Terminology | Ontology) -> set[tuple[str, str]]:
    frame = t.hierarchy if isinstance(t, Ontology) else t.parents
    return set(frame.iter_rows())


def _copy_umls(tmp_path: Path) -> Path:
    target = tmp_path / "umls"
    shutil.copytree(UMLS_DIR, target)
    return target


# ------------------------------------------------------------------ UMLS


def test_umls_tables_have_the_shipped_ontology_schemas(umls):
    shipped = load_meddevonto()
    assert umls.concepts.schema == shipped.concepts.schema == schemas.CONCEPTS
    assert umls.terms.schema == shipped.terms.schema == schemas.CONCEPT_TERMS
    assert umls.parents.schema == shipped.hierarchy.schema == schemas.CONCEPT_PARENTS
    assert umls.rejected.schema == schemas.REJECTED_RECORDS


def test_umls_keeps_english_unsuppressed_atoms_of_relevant_types(umls):
    assert set(umls.concepts["concept_id"]) == {
        "C0038257", "C0085590", "C0004238", "C0003811",
        "C9900001", "C9900002", "C9900003", "C9900004", "C9900005", "C9900007"}  # not Heart (T023)
    terms = set(umls.terms["term"])
    assert {"Stents", "Stent, device", "Auricular Fibrillation", "LAAO"} <= terms
    assert not terms & {"Endoprothèses", "Fibrilación atrial"}  # FRE, SPA
    assert not terms & {"Stent, NOS", "Irrigated catheter, ablation [obsolete]"}  # SUPPRESS O, Y
    assert umls.terms.filter(pl.col("concept_id") == "C0018787").height == 0


def test_umls_preferred_name_type_and_category(umls):
    rows = {r["concept_id"]: r for r in umls.concepts.iter_rows(named=True)}
    assert rows["C0038257"]["preferred_name"] == "Stent"  # TS=P, STT=PF, ISPREF=Y, not the MSH "Stents"
    assert rows["C9900003"]["tui"] == "T074"  # T074 beats T073 Manufactured Object
    assert (rows["C9900005"]["category"], rows["C9900005"]["weight"]) == ("SUBSTANCE", 0.5)
    assert (rows["C0004238"]["category"], rows["C9900007"]["category"]) == ("INDICATION", "PROCESS")
    assert not umls.concepts["is_anchor"].any()
    assert rows["C0038257"]["source"] == "UMLS MRCONSO (MSH, MTH, SNOMEDCT_US)"


def test_mrrel_par_and_chd_direction(umls):
    # C9900001|..|PAR|C0038257: CUI2 is the parent. C9900001|..|CHD|C9900002: CUI2 is the child.
    assert _links(umls) == {
        ("C9900001", "C0038257"),  # coronary stent -> stent
        ("C9900002", "C9900001"),  # drug-eluting coronary stent -> coronary stent
        ("C9900003", "C0085590"),  # irrigated ablation catheter -> catheter
        ("C0004238", "C0003811"),  # atrial fibrillation -> arrhythmia
    }  # no RO/RB, no suppressed PAR (it would put coronary stent over catheter), no self-loop


def test_mrrel_cycle_is_broken_against_the_link_with_fewer_sources(umls):
    assert umls.rejected.height == 1
    row = umls.rejected.row(0, named=True)
    assert (row["source"], row["record_key"]) == ("MRREL.RRF", "C0038257 -> C9900002")
    assert "cycle" in row["reason"]


def test_umls_options(tmp_path):
    devices_only = read_umls(UMLS_DIR, tuis={"T074"})
    assert "C0004238" not in set(devices_only.concepts["concept_id"])
    assert ("C0004238", "C0003811") not in _links(devices_only)

    srl0 = read_umls(UMLS_DIR, max_srl=0)  # drops the SNOMED CT (SRL 9) atoms
    names = dict(srl0.concepts.select("concept_id", "preferred_name").iter_rows())
    assert names["C9900001"] == "Coronary artery stent"  # falls back to the remaining atom
    assert names["C9900002"] == "Drug eluting stent"

    msh_links = read_umls(UMLS_DIR, rel_sabs={"MSH"})
    assert _links(msh_links) == {("C9900001", "C0038257"), ("C0004238", "C0003811")}

    loose = read_umls(UMLS_DIR, keep_suppressible=True)
    assert "Stent, NOS" in set(loose.terms["term"])
    assert ("C0085590", "C9900001") in _links(loose)

    french = read_umls(UMLS_DIR, languages=("FRE",))
    assert set(french.terms["term"]) == {"Endoprothèses"}


def test_terminology_alone_builds_an_ontology(umls):
    onto = umls.to_ontology()
    assert onto.lookup("stent device") == onto.lookup("STENTS") == "C0038257"
    assert onto.ancestors("C9900002") == {"C9900001", "C0038257"}


def test_release_directory_with_meta_and_crlf_lines(tmp_path):
    meta = tmp_path / "2025AA" / "META"
    meta.mkdir(parents=True)
    for name in ("MRCONSO.RRF", "MRSTY.RRF", "MRREL.RRF"):
        (meta / name).write_bytes((UMLS_DIR / name).read_bytes().replace(b"\n", b"\r\n"))
    t = read_umls(tmp_path / "2025AA")
    assert t.concepts.equals(read_umls(UMLS_DIR).concepts)


def test_malformed_rrf_lines_are_quarantined_with_file_and_line(tmp_path):
    root = _copy_umls(tmp_path)
    with (root / "MRCONSO.RRF").open("a", encoding="utf-8") as fh:
        fh.write("C0030163|ENG|P|L0030163|PF|S0069\n")  # truncated: line 27
        fh.write("\n")  # blank: line 28
        fh.write("0030163|ENG|P|L0030163|PF|S0069580|Y|A0116213||||MTH|PN|NOCODE|Pacemaker|0|N|256|\n")
    t = read_umls(root)
    bad = t.rejected.filter(pl.col("source") == "MRCONSO.RRF")
    assert bad["record_key"].to_list() == ["MRCONSO.RRF:27", "MRCONSO.RRF:28", "MRCONSO.RRF:29"]
    assert bad["reason"][0] == "expected 18 fields each ending in '|', found 5 '|'"
    assert bad["reason"][2] == "CUI '0030163' is not a CUI (C and 7 digits)"
    assert bad["record"][0].startswith("C0030163|ENG|P")
    assert t.concepts.height == read_umls(UMLS_DIR).concepts.height  # the good lines still load


def test_ids_with_digits_that_are_not_ascii_are_quarantined(tmp_path):
    root = _copy_umls(tmp_path)
    with (root / "MRSTY.RRF").open("a", encoding="utf-8") as fh:  # line 13: a fullwidth zero
        fh.write("C\uff10030163|T074|A1.3.1.1|Medical Device|AT1||\n")
    with (root / "MRCONSO.RRF").open("a", encoding="utf-8") as fh:  # line 27
        fh.write("C\uff10030163|ENG|P|L9|PF|S9|Y|A9||||MTH|PN|NOCODE|Pacemaker|0|N|256|\n")
    t = read_umls(root)
    bad = t.rejected.filter(pl.col("source") != "MRREL.RRF")
    assert bad["record_key"].to_list() == ["MRSTY.RRF:13", "MRCONSO.RRF:27"]
    assert bad["reason"][0] == "CUI 'C\uff10030163' is not a CUI (C and 7 digits)"
    assert t.concepts.equals(read_umls(UMLS_DIR).concepts)


def test_rrf_lines_with_bytes_that_are_not_utf8_are_quarantined_not_replaced(tmp_path):
    root = _copy_umls(tmp_path)
    with (root / "MRCONSO.RRF").open("ab") as fh:  # a Latin-1 e: line 27
        fh.write(b"C0038257|ENG|S|L9|PF|S9|Y|A9||||MTH|SY|NOCODE|Endoproth\xe8se|0|N|256|\n")
    t = read_umls(root)
    bad = t.rejected.filter(pl.col("source") == "MRCONSO.RRF")
    assert bad.select("record_key", "reason").rows() == [("MRCONSO.RRF:27", "non-UTF-8 bytes (read as U+FFFD)")]
    assert not t.terms["term"].str.contains("\ufffd").any()  # the replaced term is not in the ontology
    assert t.terms.equals(read_umls(UMLS_DIR).terms)
    with pytest.raises(TerminologyError, match=r"MRCONSO\.RRF: line 27: non-UTF-8 bytes"):
        read_umls(root, strict=True)


@pytest.mark.parametrize(("name", "line"), [
    ("MRSTY.RRF", b"C0018787|T0\x0074|A1.3.1.1|Medical Device|AT9||"),
    ("MRCONSO.RRF", b"C0038257|ENG|S|L9|PF|S9|Y|A9||||MTH|SY|NOCODE|Sten\x00t|0|N|256|"),
    ("MRREL.RRF", b"C9900004|A9|AUI|PAR|C0038257|A9|AUI||R9||MS\x00H|MSH|||N||"),
], ids=("MRSTY", "MRCONSO", "MRREL"))
def test_rrf_line_holding_a_nul_byte_is_quarantined_naming_file_and_line(tmp_path, name, line):
    root = _copy_umls(tmp_path)
    first, *rest = (root / name).read_bytes().splitlines(keepends=True)
    (root / name).write_bytes(b"".join([first, line + b"\n", *rest]))  # line 2
    t, shipped = read_umls(root), read_umls(UMLS_DIR)
    bad = t.rejected.filter(pl.col("record_key").str.starts_with(name))
    assert bad.rows() == [(name, f"{name}:2", "NUL byte (0x00)", line.decode())]
    assert (t.concepts.equals(shipped.concepts) and t.terms.equals(shipped.terms)
            and t.parents.equals(shipped.parents))
    with pytest.raises(TerminologyError, match=rf"{re.escape(name)}: line 2: NUL byte \(0x00\)$"):
        read_umls(root, strict=True)


def test_nul_bytes_anywhere_in_a_line_are_found_and_the_lines_after_keep_their_numbers(tmp_path):
    root = _copy_umls(tmp_path)
    atom = b"C0038257|ENG|S|L9|PF|S9|Y|A9||||MTH|SY|NOCODE|"
    with (root / "MRCONSO.RRF").open("ab") as fh:
        fh.write(atom + b"Stent, coated|0|N|256|\x00\n")  # 27: after a whole record
        fh.write(atom + b"Stent, bare\x00\x00metal|0|N|256|\n")  # 28: two in a row
        fh.write(atom + b"Stent, woven\x000|N|256|\n")  # 29: in place of a '|'
        fh.write(b"C0030163|ENG|P|L0030163|PF|S0069\n")  # 30: truncated
    t = read_umls(root)
    bad = t.rejected.filter(pl.col("source") == "MRCONSO.RRF")
    assert bad["record_key"].to_list() == [f"MRCONSO.RRF:{n}" for n in (27, 28, 29, 30)]
    assert bad["reason"].to_list() == ["NUL byte (0x00)"] * 3 + ["expected 18 fields each ending in '|', found 5 '|'"]
    assert t.terms.equals(read_umls(UMLS_DIR).terms)


@pytest.mark.parametrize("pack", [gzip.compress, zlib.compress], ids=["gzip", "zlib"])
def test_a_packed_rrf_file_is_scanned_for_nul_bytes_unpacked(tmp_path, monkeypatch, pack):
    # polars unpacks a gzip or zlib file, but the NUL scan read the packed bytes (a gzip header holds
    # NULs): valid lines were quarantined as "NUL byte". A tiny chunk puts lines across chunk ends
    monkeypatch.setattr("meddevkg_core.umls._CHUNK", 7)
    root, shipped = _copy_umls(tmp_path), read_umls(UMLS_DIR)
    for name in ("MRSTY.RRF", "MRCONSO.RRF", "MRREL.RRF"):
        (root / name).write_bytes(pack((root / name).read_bytes()))
    t = read_umls(root)
    assert t.rejected.equals(shipped.rejected)
    assert t.concepts.equals(shipped.concepts) and t.terms.equals(shipped.terms) and t.parents.equals(shipped.parents)
    first, *rest = (UMLS_DIR / "MRCONSO.RRF").read_bytes().splitlines(keepends=True)
    atom = b"C0038257|ENG|S|L9|PF|S9|Y|A9||||MTH|SY|NOCODE|"
    nul_lines = [atom + b"Sten\x00t|0|N|256|\n", atom + b"Stent, bare\x00\x00metal|0|N|256|\x00\n"]
    (root / "MRCONSO.RRF").write_bytes(pack(b"".join([first, *nul_lines, *rest])))  # lines 2 and 3
    bad = read_umls(root).rejected.filter(pl.col("source") == "MRCONSO.RRF")
    assert bad.select("record_key", "reason").rows() == [("MRCONSO.RRF:2", "NUL byte (0x00)"),
                                                         ("MRCONSO.RRF:3", "NUL byte (0x00)")]


def test_a_zstd_packed_rrf_file_is_refused_naming_it_and_saying_to_unpack_it(tmp_path):
    # polars unpacks zstd too, which Python 3.11 cannot stream to scan it for NUL bytes
    root = _copy_umls(tmp_path)
    data = (root / "MRSTY.RRF").read_bytes()
    stored = bytes([0xA0]) + len(data).to_bytes(4, "little") + ((len(data) << 3) | 1).to_bytes(3, "little")
    (root / "MRSTY.RRF").write_bytes(b"\x28\xb5\x2f\xfd" + stored + data)  # one frame, one stored block
    with pytest.raises(TerminologyError) as refused:
        read_umls(root)
    assert str(refused.value) == (f"{root / 'MRSTY.RRF'}: cannot be read: it is packed with zstd, which this reader "
                                  "cannot scan; unpack it (zstd -d)")


def test_srl_that_is_no_number_is_quarantined_when_max_srl_filters_by_it(tmp_path):
    root = _copy_umls(tmp_path)
    atom = b"C0038257|ENG|S|L9|PF|S9|Y|A9||||MTH|SY|NOCODE|"
    with (root / "MRCONSO.RRF").open("ab") as fh:
        fh.write(atom + b"Stent, coated|x|N|256|\n")  # 27
        fh.write(atom + b"Stent, bare||N|256|\n")  # 28: empty
        fh.write(atom + b"Stent, woven|99999999999|N|256|\n")  # 29: no Int32
    t = read_umls(root, max_srl=0)
    bad = t.rejected.filter(pl.col("source") == "MRCONSO.RRF")
    assert bad.select("record_key", "reason").rows() == [
        ("MRCONSO.RRF:27", "SRL 'x' is not a number (up to 9 digits)"),
        ("MRCONSO.RRF:28", "SRL '' is not a number (up to 9 digits)"),
        ("MRCONSO.RRF:29", "SRL '99999999999' is not a number (up to 9 digits)")]
    assert t.terms.equals(read_umls(UMLS_DIR, max_srl=0).terms)
    with pytest.raises(TerminologyError, match=r"MRCONSO\.RRF: line 27: SRL 'x' is not a number"):
        read_umls(root, max_srl=0, strict=True)
    assert read_umls(root).rejected.height == read_umls(UMLS_DIR).rejected.height  # SRL unused: not checked


def test_strict_mode_raises_naming_file_and_line(tmp_path):
    root = _copy_umls(tmp_path)
    with (root / "MRSTY.RRF").open("a", encoding="utf-8") as fh:
        fh.write("C0030163|T074|A1.3.1.1|Medical Device\n")
    with pytest.raises(TerminologyError, match=r"MRSTY\.RRF: line 13: expected 6 fields"):
        read_umls(root, strict=True)


def test_an_rrf_file_polars_cannot_read_is_an_error_naming_it_in_one_line(tmp_path):
    # polars reads a file that starts as gzip does as gzip: one cut short raised its bare OSError
    # ("unexpected end of file"), a traceback naming no file
    root = _copy_umls(tmp_path)
    packed = gzip.compress((root / "MRSTY.RRF").read_bytes())
    (root / "MRSTY.RRF").write_bytes(packed[:len(packed) // 2])
    with pytest.raises(TerminologyError) as refused:
        read_umls(root)
    assert str(refused.value) == f"{root / 'MRSTY.RRF'}: cannot be read: unexpected end of file"


def test_missing_rrf_file_is_a_clear_error(tmp_path):
    root = _copy_umls(tmp_path)
    (root / "MRREL.RRF").unlink()
    with pytest.raises(TerminologyError, match=r"MRREL\.RRF: no such file"):
        read_umls(root)


def test_umls_records_each_rrf_file_it_read_with_its_bytes_digest(tmp_path):
    meta = tmp_path / "2025AA" / "META"  # the release directory: the files are found, and named, under META
    shutil.copytree(UMLS_DIR, meta)
    t = read_umls(tmp_path / "2025AA")
    assert t.inputs == {name: fingerprint(meta / file) for name, file in (
        ("umls_mrsty", "MRSTY.RRF"), ("umls_mrconso", "MRCONSO.RRF"), ("umls_mrrel", "MRREL.RRF"))}
    with (meta / "MRCONSO.RRF").open("a") as fh:  # another release: another digest, of that file only
        fh.write("C9900009|ENG|P|L9|PF|S9|Y|A9||||MTH|PT|X|Extra device|0|N||\n")
    again = read_umls(meta)
    assert again.inputs["umls_mrconso"] != t.inputs["umls_mrconso"]
    assert {k: v for k, v in again.inputs.items() if k != "umls_mrconso"} == {
        k: v for k, v in t.inputs.items() if k != "umls_mrconso"}


def test_an_rrf_file_rewritten_while_it_is_read_is_refused_not_recorded(tmp_path, monkeypatch):
    root = _copy_umls(tmp_path)
    real = umls_reader._atoms

    def rewritten_meanwhile(path, *args):
        read = real(path, *args)
        path.write_bytes(path.read_bytes() + b"C9900009|ENG|P|L9|PF|S9|Y|A9||||MTH|PT|X|Extra device|0|N||\n")
        return read

    monkeypatch.setattr(umls_reader, "_atoms", rewritten_meanwhile)
    with pytest.raises(CorpusError, match=r"MRCONSO\.RRF: changed while it was read"):
        read_umls(root)


# ------------------------------------------------------------------ MeSH


def test_mesh_descriptors_of_the_configured_branches(mesh):
    assert mesh.concepts.schema == schemas.CONCEPTS and mesh.terms.schema == schemas.CONCEPT_TERMS
    rows = {r["concept_id"]: r for r in mesh.concepts.iter_rows(named=True)}
    assert set(rows) == {"MESH:D015607", "MESH:D054855", "MESH:D001145", "MESH:D001281", "MESH:D017115"}
    assert (rows["MESH:D015607"]["tui"], rows["MESH:D015607"]["category"]) == ("T074", "DEVICE_TYPE")  # E07
    assert (rows["MESH:D001281"]["tui"], rows["MESH:D001281"]["category"]) == ("T047", "INDICATION")  # C14
    assert (rows["MESH:D017115"]["tui"], rows["MESH:D017115"]["category"]) == ("T061", "PROCESS")  # E04
    assert rows["MESH:D001281"]["source"] == "MeSH desc_sample.xml (C14.280.067.198)"  # C23 tree not kept
    stents = set(mesh.terms.filter(pl.col("concept_id") == "MESH:D015607")["term"])
    assert stents == {"Stents", "Stent"}  # the nested DescriptorReferredTo is not read as a record
    assert mesh.rejected.height == 0


def test_mesh_parents_come_from_tree_numbers(mesh):
    assert _links(mesh) == {("MESH:D054855", "MESH:D015607"), ("MESH:D001281", "MESH:D001145")}


def test_mesh_records_the_descriptor_file_it_read_with_its_bytes_digest(tmp_path):
    packed = tmp_path / "desc_sample.xml.gz"
    packed.write_bytes(gzip.compress(MESH_XML.read_bytes()))
    assert read_mesh(MESH_XML).inputs == {"mesh_descriptors": fingerprint(MESH_XML)}
    assert read_mesh(packed).inputs == {"mesh_descriptors": fingerprint(packed)}  # the bytes read, packed


def test_mesh_first_listed_branch_wins_and_gzip_is_read(tmp_path):
    t = read_mesh(MESH_XML, branches={"C23": "T046", "C14": "T047"})
    tuis = dict(t.concepts.select("concept_id", "tui").iter_rows())
    assert tuis == {"MESH:D001281": "T046", "MESH:D001145": "T047"}
    packed = tmp_path / "desc_sample.gz"
    packed.write_bytes(gzip.compress(MESH_XML.read_bytes()))
    assert read_mesh(packed).concepts.drop("source").equals(read_mesh(MESH_XML).concepts.drop("source"))


def test_mesh_bad_records_are_quarantined_or_raise(tmp_path):
    text = MESH_XML.read_text(encoding="utf-8")
    broken = tmp_path / "desc_bad.xml"
    broken.write_text(text.replace("<DescriptorUI>D001281</DescriptorUI>", "<DescriptorUI>D015607</DescriptorUI>")
                      .replace("<TreeNumber>E04.035.177</TreeNumber>", "<TreeNumber>E04..177</TreeNumber>"),
                      encoding="utf-8")
    t = read_mesh(broken)
    assert t.rejected["reason"].to_list() == ["duplicate DescriptorUI D015607", "malformed TreeNumber 'E04..177'"]
    assert t.rejected["record_key"].to_list() == ["desc_bad.xml#4:D015607", "desc_bad.xml#6:D017115"]
    with pytest.raises(TerminologyError, match=r"desc_bad\.xml: DescriptorRecord #4: duplicate"):
        read_mesh(broken, strict=True)


def test_mesh_ids_with_digits_that_are_not_ascii_are_quarantined(tmp_path):
    odd = tmp_path / "desc_digits.xml"
    text = MESH_XML.read_text(encoding="utf-8")
    text = text.replace("<DescriptorUI>D054855</DescriptorUI>", "<DescriptorUI>D\uff10054855</DescriptorUI>")
    odd.write_text(text.replace("<TreeNumber>E04.035.177</TreeNumber>",
                                "<TreeNumber>E04.035.\u0661\u0667\u0667</TreeNumber>"), encoding="utf-8")
    t = read_mesh(odd)
    assert t.rejected["reason"].to_list() == ["DescriptorUI 'D\uff10054855' is not D and 6-9 digits",
                                              "malformed TreeNumber 'E04.035.\u0661\u0667\u0667'"]


def test_truncated_mesh_xml_names_file_and_line(tmp_path):
    truncated = tmp_path / "desc_cut.xml"
    lines = MESH_XML.read_text(encoding="utf-8").splitlines(keepends=True)
    truncated.write_text("".join(lines[:100]), encoding="utf-8")
    with pytest.raises(TerminologyError, match=r"desc_cut\.xml: line \d+, column \d+: malformed XML"):
        read_mesh(truncated)


# ------------------------------------------------------------------ merge


def test_no_configured_release_is_the_shipped_ontology():
    result = load_ontology()
    assert result.ontology is load_meddevonto()
    assert result.aliases.height == 0 and result.rejected.height == 0


def test_the_merged_ontology_records_every_release_file_read_and_none_unconfigured(tmp_path):
    root, mesh_xml = _copy_umls(tmp_path), Path(shutil.copy(MESH_XML, tmp_path / "desc2025.xml"))
    merged = load_ontology(TerminologyConfig(umls_dir=root, mesh_xml=mesh_xml))
    assert merged.inputs == {**read_umls(root).inputs, "mesh_descriptors": fingerprint(mesh_xml)}
    assert list(merged.inputs) == ["umls_mrsty", "umls_mrconso", "umls_mrrel", "mesh_descriptors"]
    assert load_ontology(TerminologyConfig(mesh_xml=mesh_xml)).inputs == {"mesh_descriptors": fingerprint(mesh_xml)}
    assert load_ontology().inputs == {}  # the shipped ontology alone: no file of a release read


def test_merge_keeps_every_shipped_lookup_and_concept(merged):
    shipped = load_meddevonto()
    onto = merged.ontology
    for term in shipped.terms["term"].to_list():
        assert onto.lookup(term) == shipped.lookup(term), term
    for row in shipped.concepts.iter_rows(named=True):
        info = onto.concept(row["concept_id"])
        assert (info.preferred_name, info.category, info.weight, info.is_anchor) == (
            row["preferred_name"], row["category"], row["weight"], row["is_anchor"])
        assert info.source.startswith(row["source"])
    assert _links(shipped) <= _links(onto)
    assert onto.concepts.schema == schemas.CONCEPTS


def test_merged_ontology_resolves_terms_from_both_releases(merged):
    onto = merged.ontology
    assert onto.lookup("stents") == onto.lookup("stent device") == "C0038257"  # UMLS synonyms, same CUI
    assert onto.lookup("auricular fibrillation") == "C0004238"
    assert onto.lookup("coronary artery stent") == onto.lookup("coronary stent") == "MDO:0017"
    assert onto.lookup("drug eluting stents") == "MDO:0018"  # MeSH entry term via the folded descriptor
    assert onto.lookup("cardiac arrhythmias") == "C0003811"
    new = onto.lookup("open-irrigated RF catheter")
    assert new == "C9900003" and onto.parents(new) == {"C0085590"} and onto.category(new) == "DEVICE_TYPE"
    assert onto.concept("MDO:0017").source.endswith("; + UMLS C9900001")


def test_folded_concepts_inherit_the_shipped_category_and_anchor(merged):
    aliases = {(r["terminology"], r["loaded_id"]): (r["concept_id"], r["rule"])
               for r in merged.aliases.iter_rows(named=True)}
    assert aliases[("UMLS", "C0038257")] == ("C0038257", "same id")
    assert aliases[("UMLS", "C9900004")] == ("MDO:0006", "preferred name is its term")
    assert aliases[("UMLS", "C9900002")] == ("MDO:0018", "has its preferred name as a synonym")
    assert aliases[("MeSH", "MESH:D015607")] == ("C0038257", "preferred name is its term")  # "stents" via UMLS
    onto = merged.ontology
    assert onto.lookup("electrodes") == "MDO:0006"
    assert onto.is_anchor_term("electrodes") and onto.tier_s_category("electrodes") == ("SENSOR", 0.8)


def test_a_concept_that_would_steal_a_shipped_term_is_quarantined(merged):
    onto = merged.ontology
    assert onto.lookup("lead") == "MDO:0010" and onto.lookup("plumbum") is None
    conflict = merged.rejected.filter(pl.col("source") == "UMLS merge").row(0, named=True)
    assert conflict["record_key"] == "C9900005"
    assert conflict["reason"] == (
        "preferred name 'lead' already names MDO:0010 (DEVICE_TYPE); this concept is SUBSTANCE")
    assert merged.rejected.filter(pl.col("source") == "MRREL.RRF").height == 1  # the readers' quarantine is kept


def _small_base() -> Ontology:
    concepts = pl.DataFrame([
        {"concept_id": "MDO:0001", "preferred_name": "stent", "tui": "T074", "category": "DEVICE_TYPE",
         "weight": 1.0, "is_anchor": True, "source": "test"},
        {"concept_id": "MDO:0002", "preferred_name": "arrhythmia", "tui": "T047", "category": "INDICATION",
         "weight": 1.0, "is_anchor": False, "source": "test"},
    ], schema=schemas.CONCEPTS)
    return Ontology.from_frames(concepts, pl.DataFrame(schema={"term": pl.String, "concept_id": pl.String}),
                                pl.DataFrame(schema=schemas.CONCEPT_PARENTS))


def test_mesh_alone_under_a_small_base_adds_new_concepts_with_tree_parents(mesh):
    result = merge_terminologies(_small_base(), mesh)
    onto = result.ontology
    assert onto.lookup("stents") == "MDO:0001"  # folded: its entry term "Stent" is the base's name
    assert onto.concept("MDO:0001").is_anchor
    des = onto.lookup("drug-eluting stents")
    assert des == "MESH:D054855" and onto.parents(des) == {"MDO:0001"}
    assert onto.lookup("atrial fibrillation") == "MESH:D001281"
    assert onto.parents("MESH:D001281") == {"MDO:0002"}


def test_merge_is_independent_of_row_order(umls, mesh):
    forward = merge_terminologies(load_meddevonto(), umls, mesh)
    shuffled = [Terminology(t.name, t.concepts.reverse(), t.terms.reverse(), t.parents.reverse(), t.rejected)
                for t in (umls, mesh)]
    backward = merge_terminologies(load_meddevonto(), *shuffled)
    assert forward.aliases.sort("loaded_id").equals(backward.aliases.sort("loaded_id"))
    for term in pl.concat([umls.terms, mesh.terms])["term"].to_list():
        assert forward.ontology.lookup(term) == backward.ontology.lookup(term), term
    assert _links(forward.ontology) == _links(backward.ontology)


def test_merge_drops_loaded_links_that_close_a_cycle_with_shipped_ones():
    concepts = pl.DataFrame(
        [(cid, name, "T074", "DEVICE_TYPE", 1.0, False, src) for cid, name, src in (
            ("MDO:0001", "stent", "test"), ("MDO:0003", "coated stent", "test"),
            ("X1", "stents", "x"), ("X2", "coated stents", "x"), ("X3", "stent strut", "x"))],
        schema=schemas.CONCEPTS, orient="row")
    base = Ontology.from_frames(concepts.head(2), pl.DataFrame(schema={"term": pl.String, "concept_id": pl.String}),
                                pl.DataFrame([("MDO:0003", "MDO:0001")], schema=schemas.CONCEPT_PARENTS, orient="row"))
    loaded = Terminology(
        "X", concepts.tail(3),
        pl.DataFrame([("stent", "stent", "X1"), ("coated stent", "coated stent", "X2")],
                     schema=schemas.CONCEPT_TERMS, orient="row"),  # X1, X2 fold into the base concepts
        pl.DataFrame([("X1", "X2"), ("X3", "X1")], schema=schemas.CONCEPT_PARENTS, orient="row"),
    )
    result = merge_terminologies(base, loaded)
    assert _links(result.ontology) == {("MDO:0003", "MDO:0001"), ("X3", "MDO:0001")}
    assert result.rejected["record_key"].to_list() == ["MDO:0001 -> MDO:0003"]


def test_break_cycles_keeps_earlier_links():
    edges = pl.DataFrame([("a", "b"), ("b", "c"), ("c", "a"), ("d", "a"), ("e", "e2")],
                         schema=schemas.CONCEPT_PARENTS, orient="row")
    kept, dropped = break_cycles(edges)
    assert kept.rows() == [("a", "b"), ("b", "c"), ("d", "a"), ("e", "e2")]
    assert dropped.rows() == [("c", "a")]


def test_config_from_environment():
    cfg = TerminologyConfig.from_env({"MEDDEVKG_UMLS_DIR": "/data/umls/2025AA", "MEDDEVKG_MESH_XML": ""})
    assert cfg.umls_dir == Path("/data/umls/2025AA") and cfg.mesh_xml is None
    assert "T074" in cfg.umls_tuis and "T073" in cfg.umls_tuis and "T023" not in cfg.umls_tuis
    assert TerminologyConfig.from_env({}, strict=True).strict


def test_umls_reading_options_from_the_environment():
    cfg = TerminologyConfig.from_env({
        "MEDDEVKG_UMLS_DIR": str(UMLS_DIR), "MEDDEVKG_UMLS_LANGUAGES": "ENG, FRE", "MEDDEVKG_UMLS_SABS": "MSH,NCI",
        "MEDDEVKG_UMLS_REL_SABS": "MSH", "MEDDEVKG_UMLS_MAX_SRL": " 0 ", "MEDDEVKG_UMLS_TUIS": "T074,T061"})
    assert (cfg.umls_languages, cfg.umls_sabs, cfg.umls_rel_sabs, cfg.umls_max_srl, cfg.umls_tuis) == (
        ("ENG", "FRE"), ("MSH", "NCI"), ("MSH",), 0, frozenset({"T074", "T061"}))  # the languages' order is kept
    assert load_ontology(TerminologyConfig.from_env({"MEDDEVKG_UMLS_DIR": str(UMLS_DIR),
                                                     "MEDDEVKG_UMLS_MAX_SRL": "0"})).ontology.terms.equals(
        load_ontology(TerminologyConfig(umls_dir=UMLS_DIR, umls_max_srl=0)).ontology.terms)
    unset = TerminologyConfig.from_env({name: "" for name in UMLS_OPTION_SETTINGS.values()})
    assert unset == TerminologyConfig()  # empty counts as unset: the reader's defaults


@pytest.mark.parametrize(("name", "value", "reason"), [
    ("MEDDEVKG_UMLS_MAX_SRL", "x", "expected a whole number"),
    ("MEDDEVKG_UMLS_MAX_SRL", "-1", "expected a whole number"),
    ("MEDDEVKG_UMLS_LANGUAGES", "eng", "'eng' is not a UMLS language"),
    ("MEDDEVKG_UMLS_SABS", "MSH,,NCI", "'' is not a UMLS source abbreviation"),
    ("MEDDEVKG_UMLS_REL_SABS", "MSH NCI", "'MSH NCI' is not a UMLS source abbreviation"),
    ("MEDDEVKG_UMLS_TUIS", "T74", "'T74' is not a UMLS semantic type"),
])
def test_a_bad_umls_reading_option_is_an_error_naming_the_setting(name, value, reason):
    with pytest.raises(ValueError, match=rf"^{name}={value!r}: {reason}"):
        TerminologyConfig.from_env({name: value})
