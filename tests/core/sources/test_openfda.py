"""openFDA device/pma against a real local server speaking openFDA's JSON: paging, faults, quarantine.

Every faulty run must end with the same devices table as the clean run: no duplicates, every bad
record in `rejected` with a reason naming it, supplements counted and never rejected.
"""

from __future__ import annotations

import json
import logging
import random
import zipfile
from datetime import date
from typing import Any

import httpx
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from pydantic import SecretStr

from meddevkg_core import schemas
from meddevkg_core.errors import InputError
from meddevkg_core.http_client import SourceAuthError, SourceError
from meddevkg_core.sources.openfda import (
    API_KEY_ENV,
    OpenFDAClient,
    OpenFDAConfig,
    advisory_committee_search,
    all_of,
    decision_date_search,
    pma_numbers_searches,
    pma_records_to_devices,
    read_pma_bulk,
)
from meddevkg_core.sources.pma_records import device_text

PATH = "/device/pma.json"
LATIN1 = "@@LATIN1@@"  # replaced on the wire by a lone 0xE9 byte: FDA's source file is Latin-1


def _record(pma: str, supplement: str = "", decided: str = "2024-08-28", **fields: Any) -> dict[str, Any]:
    return {"pma_number": pma, "supplement_number": supplement, "applicant": "Renata Medical, Inc.",
            "generic_name": "Aortic stent", "trade_name": f"Minima Stent System {pma}", "product_code": "PNF",
            "advisory_committee": "CV", "advisory_committee_description": "Cardiovascular",
            "supplement_type": "30-Day Notice" if supplement else "", "decision_date": decided,
            "decision_code": "APPR", "ao_statement": f"Approval for the Minima Stent System {pma}. It is indicated "
            "for use in the treatment of pulmonary artery stenoses.",
            "openfda": {"device_name": "Stent, Aortic", "device_class": "3"}, **fields}


def _records() -> list[Any]:
    good = [_record(f"P24{i:04d}") for i in range(12)]
    supplements = [_record("P240000", f"S{i:03d}", "2025-01-02") for i in range(1, 6)]
    bad = [
        _record(""),  # no pma_number
        _record("P249001", decided="28/08/2024"),  # unparseable date
        _record("P249002", trade_name=f"CAF{LATIN1} STENT"),  # non-UTF-8 byte
        ["not", "a", "record"],  # not a JSON object
        _record("P249003", generic_name=["a", "list"]),  # a field that is not text
    ]
    duplicates = [_record("P240003"), _record("P240004", decided="2020-01-01", trade_name="older copy")]
    return good[:6] + bad[:3] + supplements + good[6:] + bad[3:] + duplicates


BAD_KEYS = {"#6:?": "missing pma_number", "#7:P249001": "unparseable decision_date",
            "#8:P249002": "non-UTF-8 bytes in trade_name", "#20:?": "not a JSON object",
            "#21:P249003": "generic_name is a list, not text", "#23:P240004": "duplicate original of P240004"}


def _envelope(results: list[Any], skip: int, limit: int, total: int) -> bytes:
    body = {"meta": {"disclaimer": "Do not rely on openFDA to make decisions regarding medical care.",
                     "terms": "https://open.fda.gov/terms/", "license": "https://open.fda.gov/license/",
                     "last_updated": "2026-08-15", "results": {"skip": skip, "limit": limit, "total": total}},
            "results": results}
    return json.dumps(body).encode().replace(LATIN1.encode(), b"\xe9")


def _serve(records: list[Any]):
    """A device/pma.json handler: skip/limit paging over `records`, 404 NOT_FOUND when nothing matches."""

    def handler(path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes):
        if query.get("search", [""])[0] == "pma_number:P000000":
            return 404, {"error": {"code": "NOT_FOUND", "message": "No matches found!"}}
        limit, skip = int(query["limit"][0]), int(query.get("skip", ["0"])[0])
        assert limit <= 1000 and skip <= 25_000
        return 200, _envelope(records[skip:skip + limit], skip, limit, len(records))

    return handler


def _config(url: str, **kw: Any) -> OpenFDAConfig:
    fast = {"page_size": 5, "timeout": 0.5, "max_retries": 5, "backoff_base": 0.0, "backoff_max": 0.0,
            "requests_per_minute": None}
    return OpenFDAConfig(base_url=url, **(fast | kw))


def _run(fake_source, search: str = "advisory_committee:CV"):
    with OpenFDAClient(_config(fake_source.url)) as client:
        result = pma_records_to_devices(client.search_pma(search))
        return result, client


def test_clean_run_pages_with_skip_and_quarantines_every_bad_record(fake_source):
    fake_source.route(PATH, _serve(_records()))
    result, client = _run(fake_source)
    skips = [q.get("skip", ["-"])[0] for _, path, q, _ in fake_source.requests]
    assert skips == ["-", "5", "10", "15", "20"]  # the first page goes without skip, as search_after requires
    assert {q["limit"][0] for _, _, q, _ in fake_source.requests} == {"5"}
    assert client.last_search.mode == "skip" and client.last_search.received == client.last_search.total == 24
    devices, rejected, counts = result.devices, result.rejected, result.counts
    assert devices.schema == schemas.DEVICES and rejected.schema == schemas.REJECTED_RECORDS
    assert devices["fda_id"].to_list() == [f"P24{i:04d}" for i in range(12)]
    assert devices["fda_id"].is_unique().all()
    assert devices.filter(pl.col("fda_id") == "P240004")["decision_date"].item() == date(2024, 8, 28)
    reasons = dict(zip(rejected["record_key"].str.replace("^openfda device/pma", ""), rejected["reason"], strict=True))
    assert set(reasons) == set(BAD_KEYS)
    for key, expected in BAD_KEYS.items():
        assert expected in reasons[key], (key, reasons[key])
    assert counts == {"records": 24, "supplements": 5, "originals": 14, "duplicates": 1, "superseded": 1,
                      "rejected": 6, "devices": 12}
    assert counts["records"] == counts["supplements"] + counts["originals"] + counts["rejected"] - 1


def test_faults_on_every_page_end_in_the_clean_table(fake_source):
    records = _records()
    fake_source.route(PATH, _serve(records))
    clean, _ = _run(fake_source)
    fake_source.requests.clear()
    serve = _serve(records)
    faults = iter([(429, 500), ("timeout",), ("truncated", 503), ("reset",), (502, "truncated")])

    def flaky(path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes):
        fake_source.inject(PATH, *next(faults, ()))  # faults land on the requests after this page
        return serve(path, query, headers, body)

    fake_source.inject(PATH, 500, "truncated")
    fake_source.route(PATH, flaky)
    faulty, client = _run(fake_source)
    assert client.stats.retries == 10 and not fake_source.faults[PATH]  # every fault was met and retried
    assert_frame_equal(faulty.devices, clean.devices)
    assert_frame_equal(faulty.rejected, clean.rejected)
    assert faulty.counts == clean.counts


def test_404_not_found_means_no_results(fake_source):
    fake_source.route(PATH, _serve(_records()))
    with OpenFDAClient(_config(fake_source.url)) as client:
        assert list(client.search_pma("pma_number:P000000")) == []
        assert client.last_search.mode == "empty" and client.stats.retries == 0


@pytest.mark.parametrize("status", [401, 403])
def test_refused_key_names_the_variable_never_the_key(fake_source, caplog, status):
    def refuse(path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes):
        return status, {"error": {"code": "API_KEY_INVALID", "message": f"bad key {query['api_key'][0]}"}}

    fake_source.route(PATH, refuse)
    caplog.set_level(logging.DEBUG)
    key = "s3cr3t-0penfda-key"
    with OpenFDAClient(_config(fake_source.url, api_key=SecretStr(key))) as client:
        with pytest.raises(SourceAuthError) as err:
            list(client.search_pma("advisory_committee:CV"))
        assert API_KEY_ENV in str(err.value) and key not in str(err.value)
        assert key not in repr(client) and key not in repr(client.config) and key not in caplog.text
    assert fake_source.requests[0][2]["api_key"] == [key]  # sent as the api_key query parameter


def test_no_key_configured_sends_no_api_key(fake_source, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    fake_source.route(PATH, _serve(_records()[:3]))
    config = OpenFDAConfig.from_env(base_url=fake_source.url, requests_per_minute=None)
    with OpenFDAClient(config) as client:
        assert len(list(client.search_pma("advisory_committee:CV"))) == 3
    assert "api_key" not in fake_source.requests[0][2]
    monkeypatch.setenv(API_KEY_ENV, "k3y")
    assert OpenFDAConfig.from_env().api_key.get_secret_value() == "k3y"


def test_search_helpers_reach_the_server_intact(fake_source):
    year = decision_date_search(date(2024, 1, 1), date(2024, 12, 31))
    search = all_of(advisory_committee_search(["cv", "OR"]), year)
    assert search == "(advisory_committee:(CV OR OR)) AND (decision_date:[20240101 TO 20241231])"
    fake_source.route(PATH, _serve([]))
    with OpenFDAClient(_config(fake_source.url)) as client:
        assert list(client.search_pma(search)) == []
    assert fake_source.requests[0][2]["search"] == [search]
    assert pma_numbers_searches(["p140031", "P240003", "P140031"], per_query=1) == ["pma_number:P140031",
                                                                                    "pma_number:P240003"]
    assert pma_numbers_searches(["N16837", "P240003"]) == ["pma_number:(N16837 OR P240003)"]
    for bad in (lambda: pma_numbers_searches(["P1 OR x"]), lambda: advisory_committee_search(["CVX"]),
                lambda: decision_date_search(date(2025, 1, 1), date(2024, 1, 1))):
        with pytest.raises(ValueError):
            bad()


def _link_transport(records: list[dict[str, Any]], page: int, seen: list[httpx.URL],
                    with_link: bool = True) -> httpx.MockTransport:
    """openFDA beyond the skip ceiling: a search_after cursor in the Link header (the fake server cannot
    send headers, so this one case uses httpx's in-process transport)."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        params = request.url.params
        assert "skip" not in params or params["skip"] == "0"  # never skip together with a cursor
        start = int(params.get("search_after", "0=0").split("=")[1])
        body = _envelope(records[start:start + page], 0, page, len(records))
        headers = {}
        if with_link and start + page < len(records):
            nxt = request.url.copy_merge_params({"skip": "0", "search_after": f"0={start + page}",
                                                 "api_key": "leaked"}).copy_with(host="elsewhere.example")
            headers["Link"] = f'<{nxt}>; rel="next"'
        return httpx.Response(200, content=body, headers=headers)

    return httpx.MockTransport(handler)


def test_beyond_the_skip_ceiling_follows_the_link_header():
    records = [_record(f"P23{i:04d}") for i in range(11)]
    config = _config("https://api.fda.gov", max_skip=4, page_size=3, api_key=SecretStr("mine"))
    seen: list[httpx.URL] = []
    with OpenFDAClient(config, transport=_link_transport(records, 3, seen)) as client:
        got = list(client.search_pma("advisory_committee:CV"))
        assert client.last_search.mode == "search_after" and client.last_search.pages == 4
    assert [r["pma_number"] for r in got] == [r["pma_number"] for r in records]
    assert {u.host for u in seen} == {"api.fda.gov"} and {u.params["api_key"] for u in seen} == {"mine"}
    with OpenFDAClient(config, transport=_link_transport(records, 3, [], with_link=False)) as client:
        with pytest.raises(SourceError, match="skip ceiling"):
            list(client.search_pma("advisory_committee:CV"))


def test_bulk_zip_gives_the_same_devices_as_the_api(fake_source, tmp_path):
    records = _records()
    fake_source.route(PATH, _serve(records))
    api, _ = _run(fake_source)
    path = tmp_path / "device-pma-0001-of-0001.json.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("device-pma-0001-of-0001.json", _envelope(records, 0, len(records), len(records)))
    bulk = pma_records_to_devices(read_pma_bulk(path))
    assert_frame_equal(bulk.devices, api.devices)
    assert bulk.counts == api.counts and "non-UTF-8 bytes in trade_name" in " ".join(bulk.rejected["reason"])
    broken = tmp_path / "broken.json.zip"
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("device-pma-0001-of-0001.json", b'{"meta": {}, "results": [{"pma_number": "P1')
    with pytest.raises(ValueError, match="not valid JSON"):
        list(read_pma_bulk(broken))


def test_a_broken_bulk_zip_is_an_input_error_naming_the_member(tmp_path):
    path = tmp_path / "device-pma-0001-of-0001.json.zip"
    body = json.dumps({"results": [_record(f"P24{i:04d}") for i in range(300)]})
    for content, problem in ((body, None), ("[" * 100_000, "JSON nested too deeply")):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(path.stem, content)
        if problem is None:  # a download cut short: the member's data no longer inflates
            data = bytearray(path.read_bytes())
            data[100:140] = bytes(40)
            path.write_bytes(bytes(data))
        with pytest.raises(InputError, match=rf"json\.zip!device-pma-0001-of-0001\.json: {problem or 'damaged'}"):
            list(read_pma_bulk(path))


def test_a_bulk_zip_member_opening_with_a_byte_order_mark_is_read(tmp_path):
    # json.loads refused it ("Unexpected UTF-8 BOM"): "not valid JSON ...; re-download the file"
    path = tmp_path / "device-pma-0001-of-0001.json.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(path.stem, b"\xef\xbb\xbf" + json.dumps({"results": [_record("P240001")]}).encode())
    assert [r["pma_number"] for r in read_pma_bulk(path)] == ["P240001"]


def test_bulk_zip_without_an_object_as_meta_is_still_read(tmp_path):
    path = tmp_path / "device-pma-0001-of-0001.json.zip"
    for meta in (["v1"], "2026-08-15", {"results": [1]}):
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(path.stem, json.dumps({"meta": meta, "results": [_record("P240001")]}))
        assert [r["pma_number"] for r in read_pma_bulk(path)] == ["P240001"]


def test_duplicates_resolve_the_same_whatever_the_order():
    records = [_record("P100001", decided="2010-01-01", trade_name="A"), _record("P100001", decided="2012-05-05"),
               _record("P100001", decided="2012-05-05", trade_name="Z"), _record("P100002")]
    outcomes = set()
    for seed in range(6):
        shuffled = records[:]
        random.Random(seed).shuffle(shuffled)
        result = pma_records_to_devices(shuffled)
        assert result.devices.height == 2 and result.rejected.height == 2 and result.counts["superseded"] == 2
        outcomes.add(result.devices.write_json())
    assert len(outcomes) == 1
    kept = pma_records_to_devices(records).devices.row(0, named=True)
    assert kept["decision_date"] == date(2012, 5, 5) and kept["trade_name"] == "Z"


def test_conflicting_supplement_copies_are_quarantined_whatever_the_order():
    records = [_record("P100001", "S001", "2012-05-05", trade_name="A"), _record("P100001", "S001", "2012-05-05"),
               _record("P100001", "S001", "2010-01-01", trade_name="Z"), _record("P100001", "S002")]
    outcomes = set()
    for seed in range(6):
        shuffled = records[:]
        random.Random(seed).shuffle(shuffled)
        result = pma_records_to_devices([*shuffled, records[1]])  # and a copy of the one kept: only counted
        assert result.supplements.height == 2 and result.counts["superseded"] == 2 and result.counts["duplicates"] == 1
        assert set(result.rejected["reason"].str.extract(r"^(duplicate supplement S001 of P100001): ")) == {
            "duplicate supplement S001 of P100001"}
        outcomes.add(result.supplements.write_json())
    assert len(outcomes) == 1
    kept = pma_records_to_devices(records).supplements.row(0, named=True)
    assert kept["decision_date"] == date(2012, 5, 5) and kept["trade_name"] == "Minima Stent System P100001"


def test_device_text_follows_the_paper_without_its_the_deletion():
    text = device_text("replacement Heart-valve", "EDWARDS PRIMA PLUS STENTLESS BIOPROSTHESIS MODEL 2500P",
                       "APPROVAL FOR THE EDWARDS PRIMA(TM) PLUS STENTLESS BIOPROSTHESIS MODEL 2500P, SIZES 21, 23 "
                       "MM.  THE DEVICE IS INDICATED FOR PATIENTS WHO REQUIRE REPLACEMENT OF THEIR\tNATIVE VALVE\x1a.")
    assert text == ("Replacement Heart-Valve EDWARDS PRIMA PLUS STENTLESS BIOPROSTHESIS MODEL 2500P, SIZES 21, 23 MM. "
                    "THE DEVICE IS INDICATED FOR PATIENTS WHO REQUIRE REPLACEMENT OF THEIR NATIVE VALVE.")
    assert device_text("Implantable pulse generator, pacemaker (non-CRT)", "PULSAR", "") == \
        "Implantable Pulse Generator, Pacemaker (Non-CRT) PULSAR"
    assert device_text("STENT, RENAL", None, None) == "STENT, RENAL"


def test_supplements_are_kept_apart_and_a_bad_one_is_quarantined():
    adhesive = "Approval for a new distal tip adhesive."
    records = [_record("P240000"),
               _record("P240000", "S001", "2025-01-02", ao_statement=adhesive, trade_name="Minima(TM) Stent"),
               _record("P240000", "S001", "2025-01-02", ao_statement=adhesive, trade_name="Minima(TM) Stent"),
               _record("P240000", "S002", "2026-02-03", ao_statement="Change in the sterilization process."),
               _record("P24X", "S003"), _record("P240000", "S004", decided="31/12/2025")]
    result = pma_records_to_devices(records)
    assert result.devices.height == 1 and result.counts["supplements"] == 5
    assert result.supplements.schema == schemas.SUPPLEMENTS
    assert result.supplements.rows() == [
        ("P240000", "S001", date(2025, 1, 2), "Minima Stent", "a new distal tip adhesive."),
        ("P240000", "S002", date(2026, 2, 3), "Minima Stent System P240000", "Change in the sterilization process.")]
    reasons = result.rejected["reason"].to_list()
    assert "supplement S003: pma_number 'P24X' is not a PMA number" in reasons
    assert any(r.startswith("supplement S004: unparseable decision_date '31/12/2025'") for r in reasons)


def test_a_lone_surrogate_from_a_json_escape_quarantines_the_record():
    records = json.loads(json.dumps([_record("P240000"), _record("P240001")]).replace(
        "Minima Stent System P240001", "Minima \\ud800 Stent"))  # what an API answer's "\ud800" decodes to
    result = pma_records_to_devices(records)
    assert result.devices["fda_id"].to_list() == ["P240000"]
    assert any("trade_name is not valid Unicode (a lone surrogate)" in r for r in result.rejected["reason"])


def test_a_record_whose_text_is_invisible_characters_only_quarantines_as_nothing_to_read():
    # a generic name of a zero-width space passed as the device's whole text
    records = [_record("P240000", generic_name="\u200b", trade_name="\ufeff", ao_statement="\u200c \u2060\u200d"),
               _record("P240001", generic_name="Aortic\u200bstent", trade_name=None, ao_statement=None)]
    result = pma_records_to_devices(records)
    assert result.devices.select("fda_id", "text").rows() == [("P240001", "Aortic\u200bstent")]
    assert result.rejected["reason"].to_list() == ["no generic_name, trade_name or ao_statement: nothing to read"]


def test_conflicting_copies_of_a_supplement_resolve_the_same_whatever_the_order():
    records = [_record("P240000", "S001", "2025-01-02", ao_statement="Approval for the first text."),
               _record("P240000", "S001", "2025-03-04", ao_statement="Approval for the later text."),
               _record("P240000", "S001", "2025-03-04", ao_statement="Approval for another later text.")]
    outcomes = set()
    for seed in range(6):
        shuffled = records[:]
        random.Random(seed).shuffle(shuffled)
        outcomes.add(pma_records_to_devices(shuffled).supplements.write_json())
    assert len(outcomes) == 1
    kept = pma_records_to_devices(records).supplements.row(0, named=True)
    assert kept["decision_date"] == date(2025, 3, 4)  # the latest decision wins


def test_a_key_from_a_file_loses_its_newline_however_it_is_configured():
    # Kubernetes secrets made --from-file end in a newline; the Dagster resource passes the key as read.
    assert OpenFDAConfig(api_key=SecretStr("k3y\n")).api_key.get_secret_value() == "k3y"
    assert OpenFDAConfig(api_key=SecretStr(" \n")).api_key is None
