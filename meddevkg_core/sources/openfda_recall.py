"""openFDA device recalls (`device/recall`): fetch recall records by PMA number or recall number.

A recall names the recalled product's premarket submissions in `pma_numbers` (a list, e.g.
`["P130021"]`, sometimes with a supplement: `P130021/S034`) and `k_numbers`; its `openfda` block
is joined by product code (DATA_SOURCES.md §1.1), so `openfda.pma_number` lists every PMA of the
code: it is only a fallback when the record names neither PMA nor 510(k) numbers (a 510(k) recall
concerns no PMA device), and `recall_pma_source` says when it was used. The recall number is `product_res_number`
(`Z-0313-2007`). Retries, 429 / Retry-After, truncated bodies, the rate limit and 401/403 naming
MEDDEVKG_OPENFDA_API_KEY are JsonClient's; the key travels as the `api_key` query parameter, as
for device/pma; 404 NOT_FOUND is openFDA's "no matches" and yields no records.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from meddevkg_core.http_client import SourceError
from meddevkg_core.sources.openfda import MAX_LIMIT, OpenFDAConfig, OpenFDAEndpoint
from meddevkg_core.sources.pma_records import not_an_object

RECALL_PATH = "/device/recall.json"
URL_ENV = "MEDDEVKG_OPENFDA_URL"
_PMA = re.compile(r"^\s*((?:BP|[PNDH])\d{4,7})(?:\s*/?\s*S\d+)?\s*$", re.IGNORECASE)
_RECALL_NUMBER = re.compile(r"^Z-\d{4}-\d{2,4}$")


def recall_config_from_env(**overrides: Any) -> OpenFDAConfig:
    """OpenFDAConfig.from_env plus the endpoint from MEDDEVKG_OPENFDA_URL when it is set."""
    url = os.environ.get(URL_ENV, "").strip()
    return OpenFDAConfig.from_env(**({"base_url": url} if url else {}), **overrides)


def pma_number_of(value: object) -> str | None:
    """The base PMA number of `P130021`, `P130021/S034` or `p130021 s034`; None if it is not one."""
    if not isinstance(value, str):
        return None
    match = _PMA.match(value)
    return match.group(1).upper() if match else None


def _as_list(value: object) -> list[object]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def recall_pma_source(record: dict[str, Any]) -> tuple[list[str], str | None]:
    """The PMA numbers of a recall record, in order, without repeats, and where they come from:
    "recall" (its `pma_numbers`), "product_code" (the openfda block: every PMA of the product code,
    when the record names no PMA and no 510(k) number), or None when there are none. A value of
    `pma_numbers` that is no PMA number ("P13002l") is kept as written, so that it is reported as
    unknown instead of being replaced by every PMA of the product code."""
    named = [v.strip() if isinstance(v, str) else str(v) for v in _as_list(record.get("pma_numbers"))
             if v is not None and str(v).strip()]
    if named:
        return list(dict.fromkeys(pma_number_of(v) or v for v in named)), "recall"
    if any(isinstance(k, str) and k.strip() for k in _as_list(record.get("k_numbers"))):
        return [], None
    openfda = record.get("openfda")
    if not isinstance(openfda, dict):
        openfda = {}
    numbers = [n for v in _as_list(openfda.get("pma_number")) if (n := pma_number_of(v))]
    return list(dict.fromkeys(numbers)), "product_code" if numbers else None


def recall_pma_numbers(record: dict[str, Any]) -> list[str]:
    """The PMA numbers a recall record names (`recall_pma_source` without the source)."""
    return recall_pma_source(record)[0]


def recall_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The fields an analyst reads first, flat, with the PMA numbers parsed and where they come from."""
    keys = ("product_res_number", "event_date_initiated", "recall_status", "recalling_firm", "product_code",
            "root_cause_description", "reason_for_recall", "product_description", "k_numbers")
    numbers, source = recall_pma_source(record)
    return {**{k: record.get(k) for k in keys}, "pma_numbers": numbers, "pma_numbers_from": source}


def pma_search(number: str) -> str:
    base = pma_number_of(number)
    if base is None:
        raise ValueError(f"not a PMA number: {number!r}")
    return f"pma_numbers:{base}"


def recall_number_search(number: str) -> str:
    number = number.strip().upper()
    if not _RECALL_NUMBER.match(number):
        raise ValueError(f"not a recall number (Z-NNNN-YYYY): {number!r}")
    return f'product_res_number:"{number}"'


class OpenFDARecallClient(OpenFDAEndpoint):
    """device/recall searches over JsonClient, paged with `skip` (a PMA has at most a few hundred recalls)."""

    endpoint = "device/recall"
    path = RECALL_PATH
    rejected: list[dict[str, str]]
    """The records of the searches so far that were no JSON object (schemas.REJECTED_RECORDS rows)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.rejected = []
        super().__init__(*args, **kwargs)

    def _config_from_env(self) -> OpenFDAConfig:
        return recall_config_from_env()

    def by_pma_number(self, number: str) -> list[dict[str, Any]]:
        """Every recall naming this PMA (any supplement) in `pma_numbers`."""
        return self.search(pma_search(number))

    def by_recall_number(self, number: str) -> list[dict[str, Any]]:
        """The recall record(s) of one recall number (usually one)."""
        return self.search(recall_number_search(number))

    def by_pma_numbers(self, numbers: Iterable[str]) -> list[dict[str, Any]]:
        """Recalls of several PMAs, each record once (a recall may name several)."""
        seen: dict[str, dict[str, Any]] = {}
        for number in dict.fromkeys(numbers):
            for record in self.by_pma_number(number):
                seen.setdefault(str(record.get("cfres_id") or record.get("product_res_number")), record)
        return list(seen.values())

    def search(self, search: str) -> list[dict[str, Any]]:
        """All records of one openFDA search, [] on 404; raises SourceError on a malformed answer. A
        record that is no JSON object is kept in `rejected`, numbered by its place in the search."""
        limit = min(self.config.page_size, MAX_LIMIT)
        records: list[dict[str, Any]] = []
        received, total = 0, None
        while total is None or received < total:
            params: dict[str, Any] = {"search": search, "limit": limit}
            if received:
                if received > self.config.max_skip:
                    raise SourceError(f"openFDA recall search {search!r} has {total} matches, beyond skip paging")
                params["skip"] = received
            if self.config.api_key is not None:
                params["api_key"] = self.config.api_key.get_secret_value()
            body = self._client.get_json(self.url, params, not_found_ok=True)
            if body is None:
                break
            try:
                page, total = body["results"], body["meta"]["results"]["total"]
            except (KeyError, TypeError) as exc:
                raise SourceError(f"openFDA recall answered without results/meta.results.total ({exc})") from exc
            if not isinstance(page, list) or not isinstance(total, int):
                raise SourceError("openFDA recall answered with a malformed results list or total")
            if not page:
                break
            for index, record in enumerate(page, received):
                if isinstance(record, dict):
                    records.append(record)
                else:
                    self.rejected.append(not_an_object(f"openfda device/recall {search}", index, record))
            received += len(page)
        return records
