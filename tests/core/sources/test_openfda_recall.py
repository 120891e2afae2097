"""openFDA device/recall against a real local server: searches, paging, faults, 404, the key, PMA parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import SecretStr

from meddevkg_core.http_client import SourceAuthError
from meddevkg_core.sources.openfda import API_KEY_ENV, OpenFDAConfig
from meddevkg_core.sources.openfda_recall import (
    URL_ENV,
    OpenFDARecallClient,
    pma_number_of,
    pma_search,
    recall_config_from_env,
    recall_number_search,
    recall_pma_numbers,
    recall_pma_source,
    recall_summary,
)

PATH = "/device/recall.json"


def _recall(n: int, pma: list[str], **fields: Any) -> dict[str, Any]:
    """A record shaped like openFDA's device/recall (fields per open.fda.gov's device recall reference)."""
    return {"cfres_id": str(180000 + n), "product_res_number": f"Z-{n:04d}-2021", "event_date_initiated": "2021-03-01",
            "event_date_posted": "2021-04-01", "recall_status": "Terminated", "res_event_number": str(87000 + n),
            "product_code": "NIQ", "k_numbers": [], "pma_numbers": pma, "recalling_firm": "Helix Vascular, Inc.",
            "product_description": f"Aurora Sirolimus-Eluting Coronary Stent System, lot {n}",
            "reason_for_recall": "Balloon may fail to deflate.", "root_cause_description": "Device Design",
            "openfda": {"device_name": "Coronary Drug-Eluting Stent", "device_class": "3",
                        "pma_number": ["P909001", "P909002"]}, **fields}


RECALLS = [_recall(i, ["P909001"] if i % 2 else ["P909001/S012", "P909004"]) for i in range(1, 8)] + [
    _recall(50, ["P909002"])]


def _serve(records: list[dict[str, Any]]):
    """device/recall.json: `pma_numbers:X` and `product_res_number:"Z"` searches, skip/limit paging, 404."""

    def handler(path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes):
        field, _, value = query["search"][0].partition(":")
        value = value.strip('"')
        if field == "pma_numbers":
            hits = [r for r in records if any(p.split("/")[0] == value for p in r["pma_numbers"])]
        elif field == "product_res_number":
            hits = [r for r in records if r["product_res_number"] == value]
        else:
            return 400, {"error": {"code": "BAD_REQUEST"}}
        if not hits:
            return 404, {"error": {"code": "NOT_FOUND", "message": "No matches found!"}}
        limit, skip = int(query["limit"][0]), int(query.get("skip", ["0"])[0])
        return 200, {"meta": {"disclaimer": "Do not rely on openFDA to make decisions regarding medical care.",
                              "last_updated": "2026-08-15",
                              "results": {"skip": skip, "limit": limit, "total": len(hits)}},
                     "results": hits[skip:skip + limit]}

    return handler


def _config(url: str, **kw: Any) -> OpenFDAConfig:
    fast = {"page_size": 3, "timeout": 0.5, "max_retries": 4, "backoff_base": 0.0, "backoff_max": 0.0,
            "requests_per_minute": None}
    return OpenFDAConfig(base_url=url, **(fast | kw))


def test_recalls_of_a_pma_are_paged_with_skip_and_match_supplements(fake_source):
    fake_source.route(PATH, _serve(RECALLS))
    with OpenFDARecallClient(_config(fake_source.url)) as client:
        records = client.by_pma_number("p909001")
    assert [r["product_res_number"] for r in records] == [f"Z-{i:04d}-2021" for i in range(1, 8)]
    queries = [q for _, _, q, _ in fake_source.requests]
    assert [q["search"][0] for q in queries] == ["pma_numbers:P909001"] * 3
    assert [q.get("skip", ["-"])[0] for q in queries] == ["-", "3", "6"]


def test_a_429_and_a_truncated_body_are_retried_to_the_same_records(fake_source):
    fake_source.route(PATH, _serve(RECALLS))
    with OpenFDARecallClient(_config(fake_source.url)) as client:
        clean = client.by_pma_number("P909001")
    fake_source.requests.clear()
    fake_source.inject(PATH, 429, "truncated", 503)
    with OpenFDARecallClient(_config(fake_source.url)) as client:
        faulty = client.by_pma_number("P909001")
        assert client.stats.retries == 3
    assert faulty == clean and not fake_source.faults[PATH]


def test_a_recall_number_is_found_and_its_pma_numbers_parsed(fake_source):
    fake_source.route(PATH, _serve(RECALLS))
    with OpenFDARecallClient(_config(fake_source.url)) as client:
        (record,) = client.by_recall_number(" z-0002-2021 ")
        assert client.by_recall_number("Z-9999-2021") == []  # openFDA's 404 = no such recall
        both = client.by_pma_numbers(["P909004", "P909001"])
    assert fake_source.requests[0][2]["search"] == ['product_res_number:"Z-0002-2021"']
    assert recall_pma_numbers(record) == ["P909001", "P909004"]  # the supplement is cut, order kept
    assert recall_summary(record)["root_cause_description"] == "Device Design"
    assert len(both) == 7 and len({r["cfres_id"] for r in both}) == 7  # a recall naming both comes once


def test_pma_numbers_fall_back_to_the_openfda_block_only_when_the_record_names_none():
    assert recall_pma_numbers(_recall(1, [])) == ["P909001", "P909002"]
    assert recall_pma_source(_recall(1, [])) == (["P909001", "P909002"], "product_code")
    assert recall_summary(_recall(1, ["P909004/S002"]))["pma_numbers_from"] == "recall"
    k510 = recall_summary(_recall(1, [], k_numbers=["K123456"]))  # a 510(k) recall concerns no PMA of its code
    assert (k510["pma_numbers"], k510["pma_numbers_from"], k510["k_numbers"]) == ([], None, ["K123456"])
    assert recall_pma_numbers({"pma_numbers": "P909003"}) == ["P909003"]
    assert recall_pma_numbers({"pma_numbers": None, "openfda": {}}) == []
    assert recall_pma_numbers(_recall(1, [" ", None])) == ["P909001", "P909002"]  # names none


def test_a_pma_number_that_cannot_be_read_is_kept_as_written_not_replaced_by_the_product_codes():
    assert recall_pma_source(_recall(1, ["P90900l"])) == (["P90900l"], "recall")
    assert recall_pma_source(_recall(1, ["P909001/S012", " P909001, P909004 "])) == (
        ["P909001", "P909001, P909004"], "recall")
    assert [pma_number_of(v) for v in ("P130021", "p130021/s034", "N16837", "H990014", "K123456", 5)] == [
        "P130021", "P130021", "N16837", "H990014", None, None]
    for bad in (lambda: pma_search("K123456"), lambda: recall_number_search("Z-1 OR x")):
        with pytest.raises(ValueError):
            bad()


def test_the_key_is_the_api_key_parameter_and_a_refusal_names_the_variable(fake_source, monkeypatch):
    key = "s3cr3t-recall-key"

    def refuse(path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes):
        return 403, {"error": {"code": "API_KEY_INVALID", "message": f"bad key {query['api_key'][0]}"}}

    fake_source.route(PATH, refuse)
    with OpenFDARecallClient(_config(fake_source.url, api_key=SecretStr(key))) as client:
        with pytest.raises(SourceAuthError) as err:
            client.by_pma_number("P909001")
        assert API_KEY_ENV in str(err.value) and key not in str(err.value) and key not in repr(client)
    assert fake_source.requests[0][2]["api_key"] == [key]
    monkeypatch.setenv(API_KEY_ENV, key)
    monkeypatch.setenv(URL_ENV, fake_source.url)
    config = recall_config_from_env()
    assert config.base_url == fake_source.url and config.api_key.get_secret_value() == key
    assert key not in json.dumps(config.model_dump(mode="json"))


def test_a_record_that_is_not_an_object_is_set_aside_with_its_index_and_reason(fake_source):
    good = _recall(1, ["P909001"])
    fake_source.route(PATH, lambda *_: (200, {"meta": {"results": {"total": 3}}, "results": ["oops", good, [5]]}))
    with OpenFDARecallClient(_config(fake_source.url)) as client:
        assert client.by_recall_number("Z-0001-2021") == [good]
    source = 'openfda device/recall product_res_number:"Z-0001-2021"'
    assert client.rejected == [
        {"source": source, "record_key": f"{source}#0:?", "reason": "record is a str, not a JSON object",
         "record": '"oops"'},
        {"source": source, "record_key": f"{source}#2:?", "reason": "record is a list, not a JSON object",
         "record": "[5]"}]
