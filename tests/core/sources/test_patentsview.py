"""PatentsView: bulk g_ tables read as released (streamed, quarantined, de-duplicated), the paper's
patent filter, and the PatentSearch API client against a real local server with injected faults."""

from __future__ import annotations

import io
import json
import logging
import zipfile
from datetime import date
from pathlib import Path

import polars as pl
import pytest
from pydantic import SecretStr

from meddevkg_core import schemas
from meddevkg_core.http_client import RetryPolicy, SourceAuthError, SourceError
from meddevkg_core.sources.patentsview import (
    PatentFilter,
    PatentParts,
    assemble_patents,
    is_patent_id,
    read_patent_filter,
)
from meddevkg_core.sources.patentsview_api import (
    API_KEY_ENV,
    PatentSearchConfig,
    fetch_patents_granted,
    granted_between_query,
    open_client,
    patents_from_records,
)
from meddevkg_core.sources.patentsview_bulk import BulkFormatError, build_patent_table, iter_tsv_batches

# --------------------------------------------------------------------------- release-format writers

G_PATENT = ("patent_id", "patent_type", "patent_date", "patent_title", "wipo_kind", "num_claims", "withdrawn",
            "filename")
G_ABSTRACT = ("patent_id", "patent_abstract")
G_ASSIGNEE = ("patent_id", "assignee_sequence", "assignee_id", "disambig_assignee_individual_name_first",
              "disambig_assignee_individual_name_last", "disambig_assignee_organization", "assignee_type",
              "location_id")
G_CPC = ("patent_id", "cpc_sequence", "cpc_section", "cpc_class", "cpc_subclass", "cpc_group", "cpc_type")
G_APPLICATION = ("application_id", "patent_id", "patent_application_type", "filing_date", "series_code",
                 "rule_47_flag")

Row = tuple[str | int, ...] | bytes


def _line(row: Row) -> bytes:
    """QUOTE_NONNUMERIC as PatentsView writes it: text in double quotes (quotes doubled), numbers bare;
    a bytes row is written verbatim (for broken rows)."""
    if isinstance(row, bytes):
        return row
    cells = [str(v) if isinstance(v, int) else '"' + v.replace('"', '""') + '"' for v in row]
    return ("\t".join(cells) + "\n").encode()


def write_table(directory: Path, table: str, header: tuple[str, ...], rows: list[Row]) -> Path:
    path = directory / f"{table}.tsv.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{table}.tsv", b"".join([_line(header), *map(_line, rows)]))
    return path


def _patent(pid: str, title: str, day: str = "2019-01-01", kind: str = "utility", withdrawn: int = 0) -> Row:
    return (pid, kind, day, title, "B2", 20, withdrawn, "ipg190101.xml")


def _cpc(pid: str, seq: int, group: str, kind: str = "inventional") -> Row:
    return (pid, seq, group[0], group[:3], group[:4], group, kind)


def _org(pid: str, seq: int, name: str, kind: int = 2) -> Row:
    return (pid, seq, f"a-{pid}-{seq}", "", "", name, kind, "loc1")


def _person(pid: str, seq: int, first: str, last: str, kind: int = 4) -> Row:
    return (pid, seq, f"a-{pid}-{seq}", first, last, "", kind, "loc2")


def _application(pid: str, day: str) -> Row:
    return (f"15{pid[-6:]}", pid, "utility", day, "15", 0)


@pytest.fixture
def bulk_dir(tmp_path: Path) -> Path:
    return write_bulk_dir(tmp_path)


def write_bulk_dir(tmp_path: Path) -> Path:
    """Fourteen patents that exercise every rule, quarantine reason and the release quoting."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    write_table(tmp_path, "g_patent", G_PATENT, [
        _patent("10000001", "Transcatheter heart valve"),
        _patent("10000002", "Method of electroplating a stent", "2019-02-05"),
        _patent("10000003", "Method of electroplating a turbine blade"),
        _patent("D900000", "Heart valve holder", kind="design"),
        _patent("RE49000", 'Catheter with "soft"\ttip\nand hub', "2020-03-03", kind="reissue"),
        _patent("10000006", "Surgical instrument tray"),
        _patent("10000007", "Blood pressure sensor"),
        _patent("10000008", "Stent graft", withdrawn=1),
        _patent("10000009", "Aortic stent", day="2019-13-45"),
        b'"10000010"\t"utility"\t"2019-01-01"\t"Too few columns"\n',
        b'"10000011"\t"utility"\t"2019-01-01"\t"Valve \xff\xfe broken"\t"B2"\t9\t0\t"ipg.xml"\n',
        b'""\t"utility"\t"2019-01-01"\t"No id"\t"B2"\t9\t0\t"ipg.xml"\n',
        _patent("10000001", "A later duplicate of 10000001"),
        _patent("10000014", "Pacemaker lead", "2015-06-02"),
    ])
    write_table(tmp_path, "g_patent_abstract", G_ABSTRACT, [
        ("10000001", "A valve delivered by catheter."),
        ("10000002", "Plating a stent."),
        ("RE49000", "A catheter."),
        ("10000014", "A lead."),
        ("10000001", "A later duplicate abstract."),
        b'"10000002"\t"bad \xc3\x28 bytes"\n',
    ])
    write_table(tmp_path, "g_assignee_disambiguated", G_ASSIGNEE, [
        _org("10000001", 0, "Edwards Lifesciences Corporation"),
        _org("10000001", 2, "Edwards Lifesciences LLC", 3),
        _person("10000001", 1, "Ann", "Inventor"),
        _org("10000002", 0, "Medtronic, Inc."),
        _org("10000003", 0, "Turbine Corp"),
        _org("D900000", 0, "Design Corp"),
        _org("RE49000", 0, "Boston Scientific Scimed, Inc.", 2),
        _org("RE49000", 1, "Boston Scientific Scimed, Inc.", 2),
        _org("10000006", 0, "Tray Corp"),
        _person("10000007", 0, "Bob", "Solo"),
        _org("10000008", 0, "Withdrawn Corp"),
        _org("10000014", 0, "St. Jude Medical, LLC", 2),
        _org("10000001", 0, "Duplicate sequence Corp"),
        ("10000014", 1, "x", "", "", "Bad type Corp", "two", "loc"),
    ])
    write_table(tmp_path, "g_cpc_current", G_CPC, [
        _cpc("10000001", 1, "A61F2/2418"),
        _cpc("10000001", 0, "A61F2/24"),
        _cpc("10000001", 2, "B29C45/00", "additional"),
        _cpc("10000002", 0, "C25D5/10"),
        _cpc("10000003", 0, "C25D5/10"),
        _cpc("D900000", 0, "A61F2/24"),
        _cpc("RE49000", 0, "A61M25/0043"),
        _cpc("RE49000", 1, "A61M25/0043", "additional"),
        _cpc("10000006", 0, "A61B50/30"),
        _cpc("10000007", 0, "A61B5/0205"),
        _cpc("10000008", 0, "A61F2/07"),
        _cpc("10000009", 0, "A61F2/82"),
        _cpc("10000011", 0, "A61F2/24"),
        _cpc("10000014", 0, "A61N1/05"),
        _cpc("10000014", 1, "A61B5/283"),
        b'"10000001"\t3\t"A"\t"A61"\t"A61F"\t"A61F2/\xe9"\t"additional"\n',
        _cpc("10000014", 1, "A61B5/00"),
    ])
    write_table(tmp_path, "g_application", G_APPLICATION, [
        _application("10000001", "2017-03-01"),
        _application("10000002", "2017-02-30"),
        _application("RE49000", "2018-07-09"),
        _application("10000014", "2013-01-15"),
        _application("10000001", "2016-01-01"),
    ])
    return tmp_path


EXPECTED = pl.DataFrame([
    {"pat_id": "10000001", "title": "Transcatheter heart valve",
     "text": "Transcatheter heart valve A valve delivered by catheter.",
     "assignee": "Edwards Lifesciences Corporation; Edwards Lifesciences LLC", "grant_date": date(2019, 1, 1),
     "filing_date": date(2017, 3, 1), "cpc_codes": ["A61F2/24", "A61F2/2418", "B29C45/00"]},
    {"pat_id": "10000002", "title": "Method of electroplating a stent",
     "text": "Method of electroplating a stent Plating a stent.", "assignee": "Medtronic, Inc.",
     "grant_date": date(2019, 2, 5), "filing_date": None, "cpc_codes": ["C25D5/10"]},
    {"pat_id": "10000014", "title": "Pacemaker lead", "text": "Pacemaker lead A lead.",
     "assignee": "St. Jude Medical, LLC", "grant_date": date(2015, 6, 2), "filing_date": date(2013, 1, 15),
     "cpc_codes": ["A61N1/05", "A61B5/283"]},
    {"pat_id": "RE49000", "title": 'Catheter with "soft"\ttip\nand hub',
     "text": 'Catheter with "soft"\ttip\nand hub A catheter.', "assignee": "Boston Scientific Scimed, Inc.",
     "grant_date": date(2020, 3, 3), "filing_date": date(2018, 7, 9), "cpc_codes": ["A61M25/0043"]},
], schema=schemas.PATENTS)


# --------------------------------------------------------------------------- bulk files


def test_bulk_build_joins_filters_and_formats_like_the_corpus(bulk_dir):
    patents, rejected, stats = build_patent_table(bulk_dir)
    assert patents.schema == schemas.PATENTS and rejected.schema == schemas.REJECTED_RECORDS
    assert patents.to_dicts() == EXPECTED.to_dicts()
    assert dict(stats.filtered_out) == {"patent_type": 1, "manufacturing_title": 1, "cpc": 1, "assignee_type": 1,
                                        "withdrawn": 1}
    assert stats.patents == 4 and stats.rows_read["g_patent"] == 14
    assert stats.as_metadata()["patents"] == 4


def test_malformed_rows_are_quarantined_with_a_reason_naming_the_record(bulk_dir):
    rejected = build_patent_table(bulk_dir).rejected
    reasons = rejected["reason"].to_list()

    def one(fragment: str) -> str:
        hits = [r for r in reasons if fragment in r]
        assert len(hits) == 1, (fragment, reasons)
        return hits[0]

    assert one("wrong column count").startswith("g_patent line 12 (patent_id 10000010)")  # RE49000 spans 6-7
    assert one("non-UTF-8 bytes in column patent_title").startswith("g_patent line 13 (patent_id 10000011)")
    assert one("missing patent_id").startswith("g_patent line 14:")
    assert one("bad patent_date").startswith("g_patent line 11 (patent_id 10000009)")
    assert one("g_patent line 15").endswith("(patent_id 10000001): duplicate of line 2 (key '10000001')")
    assert one("non-UTF-8 bytes in column patent_abstract").startswith("g_patent_abstract line 7 (patent_id 10000002)")
    assert one("bad filing_date").startswith("g_application line 3 (patent_id 10000002)")
    assert one("bad assignee_sequence or assignee_type").startswith("g_assignee_disambiguated line 15")
    assert one("non-UTF-8 bytes in column cpc_group").startswith("g_cpc_current line 17 (patent_id 10000001)")
    duplicates = [r for r in reasons if "duplicate" in r]
    assert len(duplicates) == 5  # g_patent, abstract, assignee sequence, cpc sequence, application
    assert set(rejected["source"]) == {f"patentsview_bulk:{t}" for t in (
        "g_patent", "g_patent_abstract", "g_assignee_disambiguated", "g_cpc_current", "g_application")}
    broken = rejected.filter(pl.col("record_key") == "g_patent:13:10000011")["record"].item()
    assert "Valve \ufffd\ufffd broken" in broken  # the payload survives, undecodable bytes made visible


def test_streaming_in_small_batches_gives_the_identical_result(bulk_dir):
    batches = list(iter_tsv_batches(bulk_dir / "g_cpc_current.tsv.zip", "g_cpc_current", batch_size=3))
    assert len(batches) == 6 and all(len(b.rows) + len(b.rejected) <= 3 for b in batches)
    frames = pl.concat([b.to_frame() for b in batches])
    whole = next(iter_tsv_batches(bulk_dir / "g_cpc_current.tsv.zip", "g_cpc_current")).to_frame()
    assert frames.equals(whole) and whole.height == 16
    reference = build_patent_table(bulk_dir)
    for size in (1, 2, 5):
        patents, rejected, _ = build_patent_table(bulk_dir, batch_size=size)
        assert patents.equals(reference.patents) and rejected.equals(reference.rejected)


def test_grant_year_range(bulk_dir):
    patents, _, stats = build_patent_table(bulk_dir, grant_years=(2016, 2020))
    assert patents["pat_id"].to_list() == ["10000001", "10000002", "RE49000"]
    assert stats.filtered_out["grant_year"] == 1


def test_unfiltered_build_keeps_every_sound_patent(bulk_dir):
    patents, _, _ = build_patent_table(bulk_dir, patent_filter=PatentFilter(exclude_withdrawn=False))
    assert patents["pat_id"].to_list() == ["10000001", "10000002", "10000003", "10000006", "10000007", "10000008",
                                           "10000014", "D900000", "RE49000"]
    assert patents.filter(pl.col("pat_id") == "10000001")["assignee"].item() == (
        "Edwards Lifesciences Corporation; Ann Inventor; Edwards Lifesciences LLC")


def test_pre_2024_g_patent_with_the_abstract_column(tmp_path):
    write_table(tmp_path, "g_patent", (*G_PATENT[:4], "patent_abstract", *G_PATENT[4:]),
                [("7654321", "utility", "2010-05-04", "Stent", "A stent.", "B2", 3, 0, "ipg100504.xml")])
    write_table(tmp_path, "g_assignee_disambiguated", G_ASSIGNEE, [_org("7654321", 0, "Cordis Corporation")])
    write_table(tmp_path, "g_cpc_current", G_CPC, [_cpc("7654321", 0, "A61F2/915")])
    write_table(tmp_path, "g_application", G_APPLICATION, [_application("7654321", "2008-01-02")])
    patents = build_patent_table(tmp_path).patents
    assert patents.select("pat_id", "text", "assignee").row(0) == ("7654321", "Stent A stent.", "Cordis Corporation")


def test_the_cpc_rule_is_decided_on_the_symbols_kept(tmp_path):
    """Pass 1 sees every CPC row; a duplicate (patent, sequence) row is dropped later, so a patent
    whose only cardiovascular symbol sits in such a row must not be admitted."""
    write_table(tmp_path, "g_patent", G_PATENT, [_patent("9000001", "Fastener")])
    write_table(tmp_path, "g_patent_abstract", G_ABSTRACT, [("9000001", "A fastener.")])
    write_table(tmp_path, "g_assignee_disambiguated", G_ASSIGNEE, [_org("9000001", 0, "Fastener Corp")])
    write_table(tmp_path, "g_cpc_current", G_CPC, [_cpc("9000001", 0, "F16B5/02"), _cpc("9000001", 0, "A61F2/24")])
    write_table(tmp_path, "g_application", G_APPLICATION, [_application("9000001", "2018-01-01")])
    patents, rejected, stats = build_patent_table(tmp_path)
    assert patents.height == 0 and stats.filtered_out == {"cpc": 1}
    assert "duplicate of line 2" in rejected["reason"].item()


def test_unusable_files_fail_with_a_clear_error(bulk_dir, tmp_path):
    (bulk_dir / "g_application.tsv.zip").unlink()
    with pytest.raises(BulkFormatError, match="g_application.tsv.zip not found"):
        build_patent_table(bulk_dir)
    write_table(tmp_path, "g_cpc_current", ("patent_id", "cpc_sequence", "cpc_subclass"), [("1", 0, "A61F")])
    with pytest.raises(BulkFormatError, match="no column.*cpc_group"):
        next(iter_tsv_batches(tmp_path / "g_cpc_current.tsv.zip", "g_cpc_current", required=("cpc_group",)))
    (tmp_path / "g_patent.tsv.zip").write_bytes(b"not a zip")
    with pytest.raises(BulkFormatError, match="not a zip"):
        next(iter_tsv_batches(tmp_path / "g_patent.tsv.zip", "g_patent"))


def test_a_damaged_zip_member_fails_naming_the_file(bulk_dir):
    # it stopped the build with a bare zlib.error naming no file
    data = (bulk_dir / "g_patent.tsv.zip").read_bytes()
    at = data.index(b"g_patent.tsv") + len("g_patent.tsv") + 5
    (bulk_dir / "g_patent.tsv.zip").write_bytes(data[:at] + bytes([data[at] ^ 0xFF, data[at + 1] ^ 0xFF])
                                                + data[at + 2:])
    with pytest.raises(BulkFormatError, match=r"g_patent.tsv.zip: g_patent.tsv is damaged"):
        build_patent_table(bulk_dir)


# --------------------------------------------------------------------------- the filter


def test_paper_filter_is_the_method_lists():
    f = PatentFilter.paper()
    assert f.patent_types == {"utility", "reissue"}
    assert f.assignee_types == {2, 3, *range(6, 16)}
    assert f.cpc_prefixes == ("A61F2", "A61M25", "A61B5", "A61B6", "A61B8", "A61B17", "A61B34", "A61L27", "A61L31")
    assert f.manufacturing_cpc_prefixes == ("B23P15", "B21D53", "C25D5", "C23C14", "C22C38")
    assert len(f.title_keywords) == 24 and f.exclude_withdrawn


@pytest.mark.parametrize(("codes", "title", "reason"), [
    (["A61F2/2418"], "Anything", None),
    (["A61B5/0205", "G06F3/01"], "Anything", None),
    (["A61B50/30"], "Heart tray", "cpc"),  # A61B5 is a main group, not a string prefix
    (["A61B17/12022"], "Occluder", None),
    (["A61M2025/0001"], "Catheter", "cpc"),  # indexing code A61M2025 is not A61M25
    (["C22C38/44"], "Cobalt alloy for a Coronary STENT", None),
    (["C22C38/44"], "Stainless steel for razors", "manufacturing_title"),
    (["C22C38/44", "A61L31/022"], "Stainless steel for razors", None),
    (["A 61 F 2/24"], "Valve", None),
    ([], "Heart valve", "cpc"),
])
def test_cpc_and_title_rules(codes, title, reason):
    f = PatentFilter.paper()
    assert f.reject_reason(patent_type="utility", withdrawn=False, title=title, cpc_codes=codes,
                           assignee_types=[2]) == reason


@pytest.mark.parametrize(("patent_type", "withdrawn", "assignee_types", "reason"), [
    ("utility", False, [2], None), ("Reissue", False, [3], None), ("design", False, [2], "patent_type"),
    ("plant", False, [2], "patent_type"), ("utility", True, [2], "withdrawn"),
    ("utility", False, [4, 5], "assignee_type"), ("utility", False, [4, 12], None),
    ("utility", False, [], "assignee_type"), ("utility", False, [None], "assignee_type"),
])
def test_type_withdrawn_and_assignee_rules(patent_type, withdrawn, assignee_types, reason):
    assert PatentFilter.paper().reject_reason(patent_type=patent_type, withdrawn=withdrawn, title="Stent",
                                              cpc_codes=["A61F2/82"], assignee_types=assignee_types) == reason


def test_filter_file_rejects_unknown_rules_and_an_absent_rule_restricts_nothing():
    with pytest.raises(ValueError, match="unknown rule 'cpc'"):
        read_patent_filter(b"rule,value,source\ncpc,A61F2,x\n")
    only_types = read_patent_filter(b"rule,value,source\npatent_type,Utility,x\n")
    assert only_types.patent_types == {"utility"} and only_types.cpc_prefixes is None
    assert only_types.reject_reason(patent_type="utility", withdrawn=False, title="Anything", cpc_codes=[],
                                    assignee_types=[]) is None


# --------------------------------------------------------------------------- PatentSearch API

KEY = "pv-s3cr3t-key"
FAST = RetryPolicy(timeout=0.5, max_retries=6, backoff_base=0.0, backoff_max=0.0)


def _record(pid: str, title: str, *, day: str = "2024-01-02", kind: str = "utility", codes: tuple[str, ...] = (
        "A61F2/2418",), assignees: tuple[tuple[int, str | int, str], ...] = ((0, "2", "Abbott Cardiovascular"),),
            filing: str | None = "2022-05-06", abstract: str = "An abstract.") -> dict:
    """A patent record as PatentSearch returns it: nested groups are lists of objects."""
    return {"patent_id": pid, "patent_type": kind, "patent_title": title, "patent_abstract": abstract,
            "patent_date": day, "application": [{"filing_date": filing}],
            "assignees": [{"assignee_sequence": s, "assignee_type": t, "assignee_organization": n,
                           "assignee_individual_name_first": None, "assignee_individual_name_last": None}
                          for s, t, n in assignees],
            "cpc_current": [{"cpc_sequence": i, "cpc_group_id": c} for i, c in enumerate(codes)]}


RECORDS = [
    _record("11000001", "Mitral clip", assignees=((1, "3", "Abbott GmbH"), (0, 2, "Abbott Cardiovascular"))),
    _record("11000002", "Engine valve", codes=("F01L3/00",)),
    _record("11000003", "Alloy for stents", codes=("C22C38/44", "B21D53/00")),
    _record("11000004", "Turbine alloy", codes=("C22C38/44",)),
    _record("11000005", "Coronary stent", filing="2022-02-30"),
    _record("11000006", "Personal catheter", assignees=((0, "4", ""),)),
    {"patent_id": "", "patent_title": "No id", "patent_date": "2024-01-02"},
    _record("11000008", "Pacing lead", day="01/02/2024"),
    _record("RE50001", "Reissued occluder", kind="reissue", codes=("A61B17/12122",)),
]


def _serve(fake_source, records: list[dict]) -> list[dict]:
    """PatentSearch's /patent/ endpoint: q/f/s/o from a POST body or GET params, cursor paging on
    patent_id via o.after, the key checked on every request. Returns the requests as it reads them."""
    ordered = sorted(records, key=lambda r: str(r["patent_id"]))
    seen: list[dict] = []

    def handler(path, query, headers, body):
        if headers.get("x-api-key") != KEY:
            return 403, {"detail": f"Invalid API key {headers.get('x-api-key')}"}
        request = json.loads(body) if body else {k: json.loads(v[0]) for k, v in query.items()}
        seen.append(request)
        assert request["s"] == [{"patent_id": "asc"}] and "patent_id" in request["f"]
        options = request["o"]
        rows = [r for r in ordered if "after" not in options or str(r["patent_id"]) > options["after"]]
        if options.get("exclude_withdrawn", True):  # the API's default
            rows = [r for r in rows if not r.get("withdrawn")]
        page = rows[: options["size"]]
        return 200, {"error": False, "count": len(page), "total_hits": len(ordered), "patents": page}

    fake_source.route("/api/v1/patent/", handler)
    return seen


def _config(fake_source, **values) -> PatentSearchConfig:
    values = {"base_url": fake_source.url + "/api/v1", "api_key": SecretStr(KEY), "page_size": 2, "policy": FAST,
              **values}
    return PatentSearchConfig(**values)


def _fetch(fake_source, config: PatentSearchConfig, **kw):
    with open_client(config, **kw) as client:
        return fetch_patents_granted(client, config, date(2024, 1, 1), date(2024, 1, 7))


def test_api_pages_filters_and_converts_to_the_patents_schema(fake_source):
    _serve(fake_source, RECORDS)
    patents, rejected, stats = _fetch(fake_source, _config(fake_source))
    assert patents.schema == schemas.PATENTS
    assert patents["pat_id"].to_list() == ["11000001", "11000003", "11000005", "RE50001"]
    first = patents.row(0, named=True)
    assert first["assignee"] == "Abbott Cardiovascular; Abbott GmbH" and first["text"] == "Mitral clip An abstract."
    assert first["grant_date"] == date(2024, 1, 2) and first["filing_date"] == date(2022, 5, 6)
    assert patents.filter(pl.col("pat_id") == "11000005")["filing_date"].item() is None
    assert dict(stats.filtered_out) == {"cpc": 1, "manufacturing_title": 1, "assignee_type": 1}
    assert sorted(r.split(": ", 1)[1].split(" (")[0] for r in rejected["reason"]) == [
        "bad filing_date", "bad patent_date", "missing patent_id"]
    assert stats.requests == 5  # 9 records, 2 a page: the fifth page is short
    methods = {m for m, *_ in fake_source.requests}
    assert methods == {"POST"}


def test_the_filter_decides_whether_withdrawn_patents_are_fetched(fake_source):
    withdrawn = {**_record("11000009", "Withdrawn stent"), "withdrawn": True}
    seen = _serve(fake_source, [*RECORDS, withdrawn])
    config, keep_withdrawn = _config(fake_source), PatentFilter.paper().model_copy(update={"exclude_withdrawn": False})
    with open_client(config) as client:
        kept = fetch_patents_granted(client, config, date(2024, 1, 1), date(2024, 1, 7), patent_filter=keep_withdrawn)
    assert "11000009" in kept.patents["pat_id"].to_list()
    assert "11000009" not in _fetch(fake_source, config).patents["pat_id"].to_list()
    assert seen[-1]["o"]["exclude_withdrawn"] is True  # said, not left to the API's default


def test_every_faulty_run_ends_with_the_clean_table(fake_source):
    _serve(fake_source, RECORDS)
    clean = _fetch(fake_source, _config(fake_source))
    for faults in ([429], [500, 503], ["timeout"], ["truncated"], [429, "truncated", 500, "timeout", "reset"]):
        fake_source.inject("/api/v1/patent", *faults)
        faulty = _fetch(fake_source, _config(fake_source))
        assert faulty.patents.equals(clean.patents) and faulty.rejected.equals(clean.rejected), faults
        assert faulty.stats.requests == clean.stats.requests + len(faults)


def test_get_requests_give_the_same_table(fake_source):
    _serve(fake_source, RECORDS)
    post = _fetch(fake_source, _config(fake_source))
    get = _fetch(fake_source, _config(fake_source, method="GET"))
    assert get.patents.equals(post.patents)
    assert fake_source.requests[-1][0] == "GET"


def test_retries_run_out_with_a_source_error(fake_source):
    _serve(fake_source, RECORDS)
    fake_source.inject("/api/v1/patent", *([500] * 3))
    config = _config(fake_source, policy=FAST.model_copy(update={"max_retries": 2}))
    with pytest.raises(SourceError, match="3 attempt"):
        _fetch(fake_source, config)


@pytest.mark.parametrize("status", [401, 403])
def test_refused_key_names_the_variable_and_never_the_key(fake_source, status):
    fake_source.route("/api/v1/patent/", lambda path, q, h, b: (status, {"detail": f"bad key {h.get('x-api-key')}"}))
    with pytest.raises(SourceAuthError) as err:
        _fetch(fake_source, _config(fake_source))
    assert API_KEY_ENV in str(err.value) and KEY not in str(err.value) and str(status) in str(err.value)


def test_missing_key_fails_before_any_request(fake_source):
    config = PatentSearchConfig.from_env({}, base_url=fake_source.url + "/api/v1")
    with pytest.raises(SourceAuthError, match=API_KEY_ENV):
        open_client(config)
    assert fake_source.requests == []
    assert PatentSearchConfig.from_env({API_KEY_ENV: KEY}).api_key.get_secret_value() == KEY
    assert KEY not in repr(PatentSearchConfig.from_env({API_KEY_ENV: KEY}))


def test_a_key_from_a_file_loses_its_newline_and_never_reaches_a_debug_log(fake_source, caplog):
    # Kubernetes secrets made --from-file end in a newline; the Dagster resource passes the key as read.
    _serve(fake_source, RECORDS)
    caplog.set_level(logging.DEBUG)
    table = _fetch(fake_source, _config(fake_source, api_key=SecretStr(KEY + "\n")))
    assert table.patents.height and fake_source.requests[-1][3]["x-api-key"] == KEY
    assert KEY not in caplog.text
    assert PatentSearchConfig(api_key=SecretStr(" \n")).api_key is None


def test_rate_limit_is_45_requests_a_minute(fake_source):
    _serve(fake_source, RECORDS)
    assert PatentSearchConfig().policy.requests_per_minute == 45
    waits: list[float] = []
    _fetch(fake_source, _config(fake_source, policy=FAST.model_copy(update={"requests_per_minute": 45})),
           sleep=waits.append)
    # five requests, four waits; the fake sleep does not move the clock, so the waits add up
    steps = [b - a for a, b in zip([0.0, *waits], waits, strict=False)]
    assert len(waits) == 4 and steps == pytest.approx([60 / 45] * 4, abs=0.25)


def test_an_error_body_and_a_stuck_cursor_are_source_errors(fake_source):
    fake_source.route("/api/v1/patent/", lambda *a: (200, {"error": True, "count": 0, "patents": []}))
    with pytest.raises(SourceError, match="reported an error"):
        _fetch(fake_source, _config(fake_source))
    same = {"error": False, "count": 2, "total_hits": 9, "patents": RECORDS[:2]}
    fake_source.route("/api/v1/patent/", lambda *a: (200, same))
    with pytest.raises(SourceError, match="cursor did not advance"):
        _fetch(fake_source, _config(fake_source))


def test_duplicate_records_across_pages_keep_the_first():
    pages = [[_record("11000001", "Mitral clip")], [_record("11000001", "Changed title"), "not an object"]]
    patents, rejected, stats = patents_from_records(pages)
    assert patents["title"].to_list() == ["Mitral clip"] and stats.duplicates == 1
    assert rejected["reason"].to_list() == ["patent 11000001: duplicate patent_id (the first record is kept)",
                                            "page 2 record 2: not a JSON object"]


def test_a_field_that_is_not_text_is_quarantined_not_read_as_its_repr():
    records = [{**_record("11000001", "Mitral clip"), "patent_title": ["Mitral clip"]},
               {**_record("11000002", "Occluder"), "cpc_current": [{"cpc_sequence": 0, "cpc_group_id": {"id": "A61B"}},
                                                                   {"cpc_sequence": 1, "cpc_group_id": "A61F2/24"}]},
               _record("11000003", "Stent", assignees=((0, True, "Abbott"),)),
               _record("11000004", "Valve", assignees=((0, "2", ["Abbott"]),))]
    patents, rejected, _ = patents_from_records([records], PatentFilter())
    assert patents.select("pat_id", "title", "assignee", "cpc_codes").rows() == [
        ("11000002", "Occluder", "Abbott Cardiovascular", ["A61F2/24"]), ("11000003", "Stent", None, ["A61F2/2418"]),
        ("11000004", "Valve", None, ["A61F2/2418"])]
    assert rejected["reason"].to_list() == [
        "patent 11000001: bad patent_title (a list, not text)", "patent 11000002: bad cpc_group_id (a dict, not text)",
        "patent 11000003: bad assignee_sequence or assignee_type (a bool, not a code: True)",
        "patent 11000004: bad assignee name (a list, not text)"]


def test_nested_entries_that_are_not_objects_are_quarantined_and_the_patent_kept():
    abbott = {"assignee_sequence": 1, "assignee_type": 2, "assignee_organization": "Abbott"}
    record = {**_record("11000001", "Stent"), "application": "2022-05-06", "cpc_current": "A61F2/24",
              "assignees": ["Abbott", None, abbott]}
    patents, rejected, _ = patents_from_records([[record]], PatentFilter())
    assert patents.select("pat_id", "assignee", "filing_date", "cpc_codes").rows() == [
        ("11000001", "Abbott", None, [])]
    assert rejected["reason"].to_list() == ["patent 11000001: application is a str, not a list of objects",
                                            "patent 11000001: assignees entry is a str, not a JSON object",
                                            "patent 11000001: cpc_current is a str, not a list of objects"]


def test_a_lone_surrogate_quarantines_the_record_instead_of_failing_the_table():
    # json.loads turns a "\ud800" escape into a lone surrogate, which no UTF-8 frame can hold
    records = [_record("11000001", "Stent \ud800"), _record("11000002", "Valve", assignees=((0, "2", "Ab\udcbf"),))]
    patents, rejected, _ = patents_from_records([records], PatentFilter())
    assert patents.select("pat_id", "assignee").rows() == [("11000002", None)]
    assert rejected["reason"].to_list() == ["patent 11000001: bad patent_title (not valid Unicode: a lone surrogate)",
                                            "patent 11000002: bad assignee name (not valid Unicode: a lone surrogate)"]
    patents.write_parquet(io.BytesIO())
    rejected.write_parquet(io.BytesIO())


def test_a_withdrawn_flag_is_read_as_a_code_not_by_truthiness():
    flags = {"11000001": "0", "11000002": 0, "11000003": True, "11000004": "1", "11000005": "no", "11000006": None}
    records = [{**_record(pid, "Stent"), "withdrawn": flag} for pid, flag in flags.items()]
    patents, rejected, stats = patents_from_records([records], PatentFilter())
    assert patents["pat_id"].to_list() == ["11000001", "11000002", "11000006"]
    assert dict(stats.filtered_out) == {"withdrawn": 2}
    assert rejected["reason"].to_list() == [
        "patent 11000005: bad withdrawn flag (could not convert string to float: 'no')"]


def test_query_restricts_dates_and_types():
    query = granted_between_query(date(2024, 1, 1), date(2024, 1, 7), PatentFilter.paper())
    assert query == {"_and": [{"_gte": {"patent_date": "2024-01-01"}}, {"_lte": {"patent_date": "2024-01-07"}},
                              {"_or": [{"patent_type": "reissue"}, {"patent_type": "utility"}]}]}


def test_bulk_and_api_build_the_same_row(bulk_dir):
    record = _record("10000001", "Transcatheter heart valve", day="2019-01-01", filing="2017-03-01",
                     codes=("A61F2/24", "A61F2/2418", "B29C45/00"), abstract="A valve delivered by catheter.",
                     assignees=((0, 2, "Edwards Lifesciences Corporation"), (2, 3, "Edwards Lifesciences LLC"),
                                (1, 4, "")))
    from_api = patents_from_records([[record]]).patents
    from_bulk = build_patent_table(bulk_dir).patents.filter(pl.col("pat_id") == "10000001")
    assert from_api.equals(from_bulk)


def test_a_patent_without_any_text_is_quarantined():
    patents, rejected = assemble_patents([PatentParts("1", " ", date(2020, 1, 1))], "test")
    assert patents.height == 0 and rejected[0]["reason"] == "patent 1: no title and no abstract"


def test_a_patent_whose_title_and_abstract_are_invisible_characters_only_is_quarantined():
    parts = [PatentParts("1", "\u200b", date(2020, 1, 1), abstract="\ufeff\u2060"),
             PatentParts("2", "\u200c", date(2020, 1, 1), abstract="A stent\u200d.")]
    patents, rejected = assemble_patents(parts, "test")
    assert patents.select("pat_id", "text").rows() == [("2", "\u200c A stent\u200d.")]
    assert [r["reason"] for r in rejected] == ["patent 1: no title and no abstract"]


def test_a_padded_or_country_prefixed_number_is_no_patentsview_id():
    # both passed as patents of their own, joined to none of the real patent's rows
    assert all(map(is_patent_id, ["7654321", "10000000", "D900000", "RE49000", "PP30000", "H2000", "T999001"]))
    assert not any(map(is_patent_id, ["07000002", "US7000003", "D0900000", "0", "7000003B2", ""]))
