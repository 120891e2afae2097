from datetime import date

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.patent_years import (
    UNDATED,
    current_year_keys,
    grant_year_bounds,
    in_years,
    parse_year_keys,
    quarantine_year_keys,
    with_year_key,
    year_keys,
    year_span,
)


def _patents() -> pl.DataFrame:
    return schemas.conform(pl.DataFrame({
        "pat_id": ["1", "2", "3"],
        "grant_date": [date(2019, 5, 7), None, date(2024, 1, 2)],
    }), schemas.PATENTS)


def test_keys_are_grant_years_plus_undated():
    assert year_keys(_patents()) == ["2019", "2024", UNDATED]
    assert year_keys(schemas.empty(schemas.PATENTS)) == [UNDATED]
    assert in_years(_patents(), ["2024", UNDATED])["pat_id"].to_list() == ["2", "3"]
    assert in_years(_patents(), [])["pat_id"].to_list() == ["1", "2", "3"]


def test_rows_take_their_patents_year_in_order_and_unknown_ids_go_undated():
    rows = pl.DataFrame({"doc_id": ["3", "9", "1", "3"]})
    assert with_year_key(rows, _patents(), "doc_id")["patent_year"].to_list() == ["2024", UNDATED, "2019", "2024"]
    rejected = pl.DataFrame({"source": ["s"] * 3, "record_key": ["g_assignee:4:1", "g_patent:7:", "x:2"],
                             "reason": ["r"] * 3, "record": [""] * 3})
    # the key's last part names the patent: "1" (2019), none, "2" (no grant date)
    assert quarantine_year_keys(rejected, _patents())["patent_year"].to_list() == ["2019", UNDATED, UNDATED]


def test_year_span_clips_to_the_source_window():
    assert year_span(["2019", "2020"], date(2019, 3, 1), date(2026, 11, 23)) == (date(2019, 3, 1), date(2020, 12, 31))
    assert year_span(["2026"], date(2000, 1, 1), date(2026, 11, 23)) == (date(2026, 1, 1), date(2026, 11, 23))
    assert year_span([UNDATED], date(2000, 1, 1), date(2026, 1, 1)) is None
    assert year_span(["1990"], date(2000, 1, 1), date(2026, 1, 1)) is None


def test_grant_year_bounds_span_the_keys_and_undated_means_everything():
    assert grant_year_bounds(["2026"]) == (2026, 2026) and grant_year_bounds(["2027", "2019"]) == (2019, 2027)
    assert grant_year_bounds([]) is None and grant_year_bounds(["2020", UNDATED]) is None


def test_the_weekly_refresh_covers_last_year_in_the_first_week_of_january():
    assert current_year_keys(date(2026, 11, 23)) == ["2026"]
    assert current_year_keys(date(2027, 1, 4)) == ["2026", "2027"]
    assert current_year_keys(date(2027, 1, 8)) == ["2027"]


def test_year_keys_are_parsed_from_single_years_spans_and_undated():
    assert parse_year_keys("2019") == ["2019"] and parse_year_keys("2019-2021, undated") == ["2019", "2020", "2021",
                                                                                              UNDATED]
    for bad in ("19", "2021-2019", "last year", "2019-"):
        with pytest.raises(ValueError, match="grant years"):
            parse_year_keys(bad)
