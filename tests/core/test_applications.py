"""The three applications on small tables: recall root cause, M&A IP discovery, technology trajectory."""

from __future__ import annotations

import os
from datetime import date

import duckdb
import polars as pl
import pytest

from meddevkg_core import atomic_files
from meddevkg_core.app_store import create_application_views, from_duckdb, from_output_dir
from meddevkg_core.applications import (
    acquired_patents,
    grant_year_from_number,
    parse_company_path,
    plot_trajectory,
    recall_root_cause,
    trajectory,
)

LINKS = pl.DataFrame({
    "fda_id": ["P100001", "P100001", "P100001", "P100002", "P100002", "P100003", "P100003", "P100004",
               "P100001"],
    "pat_id": ["A", "B", "C", "A", "B", "C", "D", "D", "E"],
    "probability": [0.9, 0.8, 0.6, 0.7, 0.5, 0.4, 0.9, 0.9, 0.2],
    "decision": [True, True, True, True, True, True, True, True, False],
    "evidence": ["e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9"],
})
DEVICES = pl.DataFrame({"fda_id": ["P100001", "P100002", "P100003", "P100004"],
                        "trade_name": ["One", "Two", "Three", "Four"],
                        "applicant": ["MEDTRONIC", "X", "Y", "Z"],
                        "decision_date": [date(2012, 5, 1), None, None, None]})
PATENTS = pl.DataFrame({"pat_id": ["A", "B", "C", "D", "E"], "title": ["a", "b", "c", "d", "e"],
                        "assignee": ["EV3"] * 5,
                        "grant_date": [date(2008, 1, 1), date(2010, 6, 1), date(2010, 9, 9), None, None],
                        "filing_date": [date(2005, 1, 1), date(2007, 2, 2), date(2007, 3, 3), None, None]})
PATHS = pl.DataFrame({
    "fda_id": ["P100001", "P100001", "P100001", "P100002"], "pat_id": ["A", "B", "C", "A"],
    "company_path": ["MEDTRONIC <- COVIDIEN (2015-01-26) <- EV3 (2010-07-12)", "MEDTRONIC",
                     "MEDTRONIC -> OLDCO (2001-01-01)", None]})


def test_recall_of_a_device_lists_its_patents_and_the_devices_sharing_them_ranked():
    cause = recall_root_cause(LINKS, fda_id="p100001", devices=DEVICES, patents=PATENTS)
    assert cause.fda_ids == ["P100001"] and cause.unknown == []
    assert cause.patents["pat_id"].to_list() == ["A", "B", "C"]  # E is not a kept link; strongest first
    assert cause.patents["evidence"].to_list() == ["e1", "e2", "e3"] and "title" in cause.patents.columns
    shared = cause.shared_devices
    assert shared["fda_id"].to_list() == ["P100002", "P100003"]  # ...2 shares A and B, ...3 only C, ...4 nothing
    assert shared["n_shared"].to_list() == [2, 1]
    assert shared["shared_pat_ids"].to_list() == [["A", "B"], ["C"]]
    assert shared["trade_name"].to_list() == ["Two", "Three"]


def test_a_devices_patents_follow_their_rank_when_the_links_have_one():
    ranked = LINKS.with_columns(pl.Series("rank", [3, 1, 2, 1, 2, 2, 1, 1, 4], pl.Int32))
    cause = recall_root_cause(ranked, fda_id="P100001", devices=DEVICES, patents=PATENTS)
    assert cause.patents["pat_id"].to_list() == ["B", "C", "A"]  # the text adapter's order, not the probability's
    assert cause.patents["rank"].to_list() == [1, 2, 3]


def test_recall_record_is_traced_through_its_pma_numbers_and_unknown_ones_are_reported():
    record = {"product_res_number": "Z-0001-2020", "pma_numbers": ["P100003/S012", "P999999"],
              "root_cause_description": "Device Design", "openfda": {"pma_number": ["P100001"]}}
    cause = recall_root_cause(LINKS, recall=record, devices=DEVICES)
    assert cause.fda_ids == ["P100003"] and cause.unknown == ["P999999"]
    assert sorted(cause.patents["pat_id"]) == ["C", "D"]
    assert cause.shared_devices["fda_id"].to_list() == ["P100004", "P100001"]  # one patent each: stronger link first
    assert cause.recall["root_cause_description"] == "Device Design"
    with pytest.raises(ValueError):
        recall_root_cause(LINKS)


def test_company_paths_are_parsed_with_relation_and_dates():
    assert parse_company_path("A <- B (2015-01-26) <- C (2010-07-12)") == {
        "device_company": "A", "patent_company": "C", "relation": "acquired",
        "deal_dates": ["2015-01-26", "2010-07-12"]}
    assert parse_company_path("CORDIS -> JOHNSON AND JOHNSON (1996-02-23)")["relation"] == "acquirer"
    assert parse_company_path("A <- B (2015-01-01) -> C (2005-01-01)")["relation"] == "former_owner"
    assert parse_company_path("MEDTRONIC")["relation"] == "same"
    assert parse_company_path("JOHNSON AND JOHNSON ~ STEREOTAXIS (alliance 2002-05-07)") == {
        "device_company": "JOHNSON AND JOHNSON", "patent_company": "STEREOTAXIS", "relation": "partner",
        "deal_dates": ["2002-05-07"]}
    assert parse_company_path("A B ~ C (alliance 2005-01-01 to 2015-01-01)")["patent_company"] == "C"


def test_ma_discovery_keeps_only_links_reached_through_a_dated_acquisition():
    out = acquired_patents(LINKS, PATHS, "P100001")
    assert out["pat_id"].to_list() == ["A", "C"]  # B is the applicant's own patent
    a = out.row(0, named=True)
    assert (a["device_company"], a["patent_company"], a["relation"]) == ("MEDTRONIC", "EV3", "acquired")
    assert a["latest_close_date"] == date(2015, 1, 26) and a["deal_dates"] == [date(2015, 1, 26), date(2010, 7, 12)]
    assert out.row(1, named=True)["relation"] == "acquirer"
    assert acquired_patents(LINKS, PATHS, "P100002").height == 0  # no company path: no acquisition claimed


def test_trajectory_counts_filing_and_grant_years_and_draws_a_png(tmp_path):
    traj = trajectory(LINKS, PATENTS, "P100001", DEVICES)
    assert traj.decision_year == 2012
    counts = {r["year"]: (r["n_filed"], r["n_granted"]) for r in traj.counts.iter_rows(named=True)}
    assert counts == {2005: (1, 0), 2007: (2, 0), 2008: (0, 1), 2010: (0, 2)}
    assert set(traj.patents["grant_year_source"]) == {"grant_date"}
    png = plot_trajectory(traj, tmp_path / "plots" / "P1.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000


def test_a_plot_into_a_new_directory_makes_it_durable_before_the_png_appears(tmp_path, monkeypatch):
    # the plot goes through replaced_file, which fsyncs the directories it makes; one made beforehand escapes that
    synced: list[str] = []
    real_fsync = atomic_files.os.fsync

    def logged_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(atomic_files.os, "fsync", logged_fsync)
    root = tmp_path.resolve()
    plot_trajectory(trajectory(LINKS, PATENTS, "P100001", DEVICES), root / "plots" / "P1.png")
    png_written = next(i for i, path in enumerate(synced) if path.endswith(".tmp"))
    assert str(root) in synced[:png_written]


def test_trajectory_lists_a_years_patents_by_grant_date_then_number_with_their_dates():
    patents = pl.DataFrame({"pat_id": ["10000005", "9990000", "10000001"],  # 2018 crossed ten million
                            "grant_date": [date(2018, 6, 19), date(2018, 5, 1), date(2018, 6, 19)],
                            "filing_date": [date(2016, 1, 4), None, date(2015, 3, 2)]})
    links = pl.DataFrame({"fda_id": ["P9"] * 3, "pat_id": patents["pat_id"], "probability": [0.9, 0.8, 0.7],
                          "decision": [True] * 3})
    dated = trajectory(links, patents, "P9").patents
    assert dated.select("pat_id", "grant_date", "filing_date").rows() == [
        ("9990000", date(2018, 5, 1), None), ("10000001", date(2018, 6, 19), date(2015, 3, 2)),
        ("10000005", date(2018, 6, 19), date(2016, 1, 4))]
    undated = trajectory(links, patents.select("pat_id"), "P9").patents  # years from the numbers
    assert undated["pat_id"].to_list() == ["9990000", "10000001", "10000005"]


def test_grant_year_comes_from_the_patent_number_when_there_is_no_date():
    assert grant_year_from_number("10000000") == 2018  # issued 2018-06-19
    assert grant_year_from_number("US9000000B2") == 2015 and grant_year_from_number("3983368") == 1976
    assert grant_year_from_number("D765432") is None and grant_year_from_number("95002174") is None
    patents = pl.DataFrame({"pat_id": ["8157760", "5480423"]})
    links = pl.DataFrame({"fda_id": ["P9", "P9"], "pat_id": ["8157760", "5480423"], "probability": [0.9, 0.5],
                          "decision": [True, True]})
    traj = trajectory(links, patents, "P9")
    assert traj.counts["year"].to_list() == [1996, 2012] and traj.counts["n_filed"].sum() == 0
    assert set(traj.patents["grant_year_source"]) == {"patent_number"} and traj.notes


def _views_over(con: duckdb.DuckDBPyConnection, links: pl.DataFrame, patents: pl.DataFrame,
                paths: pl.DataFrame = PATHS) -> dict[str, int]:
    """A store holding these links and patents (and the module's devices and paths), with the app_* views.

    A store's links always carry a rank (schemas.LINKS): where these have none, the probability order."""
    con.execute("create schema meddevkg")
    if "rank" not in links.columns:
        links = links.with_columns(
            pl.col("probability").rank("ordinal", descending=True).over("fda_id").cast(pl.Int32).alias("rank"))
    for name, df in {"reranked_links": links.with_columns(pl.lit("probability").alias("verdict")),
                     "pma_documents": DEVICES, "patents": patents, "candidate_pool": paths}.items():
        con.register("df", df)
        con.execute(f"create table meddevkg.{name} as select * from df")
        con.unregister("df")
    return create_application_views(con)


def test_trajectory_view_takes_grant_years_from_patent_numbers_like_the_command():
    ids = ["10165721", "10165720", "\tus8,157,760 ", "US9000000B2", "5480423", "D765432", "95002174", "7000000"]
    patents = pl.DataFrame({"pat_id": ids, "title": list("abcdefgh"), "assignee": ["X"] * 8,
                            "grant_date": [None] * 7 + [date(2003, 2, 1)],
                            "filing_date": [None] * 7 + [date(2001, 5, 5)]},
                           schema_overrides={"grant_date": pl.Date, "filing_date": pl.Date})
    links = pl.DataFrame({"fda_id": ["P1"] * 5 + ["P2"] * 3, "pat_id": ids, "probability": [0.5] * 8,
                          "decision": [True] * 7 + [False], "evidence": ["e"] * 8})
    with duckdb.connect() as con:
        _views_over(con, links, patents)
        rows = con.sql("select fda_id, year, n_filed, n_granted, n_granted_from_number "
                       "from meddevkg.app_trajectory order by fda_id, year").pl()
    assert rows.rows() == [("P1", 1996, 0, 1, 1), ("P1", 2012, 0, 1, 1), ("P1", 2015, 0, 1, 1),
                           ("P1", 2018, 0, 1, 1), ("P1", 2019, 0, 1, 1)]
    for fda_id in ("P1", "P2"):
        command = trajectory(links, patents, fda_id).counts
        view = rows.filter(pl.col("fda_id") == fda_id)
        assert view.select("year", "n_filed", "n_granted").rows() == command.rows()
    dated = links.with_columns(pl.lit(True).alias("decision"))
    with duckdb.connect() as con:
        _views_over(con, dated, patents)
        p2 = con.sql("select year, n_filed, n_granted, n_granted_from_number from meddevkg.app_trajectory "
                     "where fda_id = 'P2' order by year").fetchall()
    assert p2 == [(2001, 1, 0, 0), (2003, 0, 1, 0)]  # a grant date wins over the number (7000000: 2006)


def test_output_directory_and_duckdb_views_answer_like_the_functions(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    LINKS.with_columns(pl.col("probability").cast(pl.Float32)).write_parquet(run / "links.parquet")
    PATHS.write_parquet(run / "candidates.parquet")
    tables = from_output_dir(run)
    assert acquired_patents(tables.links, tables.company_paths, "P100001")["pat_id"].to_list() == ["A", "C"]

    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        counts = _views_over(con, LINKS, PATENTS)
        assert counts["app_device_patents"] == 8
        shared = con.sql("select other_fda_id, n_shared, rank from meddevkg.app_shared_patents "
                         "where fda_id = 'P100001' order by rank, other_fda_id").fetchall()
        assert shared == [("P100002", 2, 1), ("P100003", 1, 2)]
        acquired = con.sql("select pat_id, relation, patent_company, latest_close_date from "
                           "meddevkg.app_acquired_patents order by pat_id").fetchall()
        assert acquired == [("A", "acquired", "EV3", date(2015, 1, 26)), ("C", "acquirer", "OLDCO", date(2001, 1, 1))]
        traj = con.sql("select year, n_filed, n_granted from meddevkg.app_trajectory where fda_id = 'P100001' "
                       "order by year").fetchall()
        assert traj == [(2005, 1, 0), (2007, 2, 0), (2008, 0, 1), (2010, 0, 2)]


def test_the_store_the_output_directory_and_the_views_list_a_devices_patents_by_rank(tmp_path):
    ranked = LINKS.with_columns(pl.Series("rank", [3, 1, 2, 1, 2, 2, 1, 1, 4], pl.Int32))  # not the probability order
    run = tmp_path / "run"
    run.mkdir()
    ranked.write_parquet(run / "links.parquet")
    PATHS.write_parquet(run / "candidates.parquet")
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        _views_over(con, ranked, PATENTS)
        view = con.sql("select pat_id, rank from meddevkg.app_device_patents where fda_id = 'P100001' "
                       "order by rank").fetchall()
        acquired_view = con.sql("select pat_id, rank from meddevkg.app_acquired_patents order by rank").fetchall()
    assert view == [("B", 1), ("C", 2), ("A", 3)]
    assert acquired_view == [("C", 2), ("A", 3)]
    for tables in (from_output_dir(run), from_duckdb(tmp_path / "w.duckdb")):
        cause = recall_root_cause(tables.links, fda_id="P100001", devices=tables.devices, patents=tables.patents)
        assert cause.patents.select("pat_id", "rank").rows() == view
        assert acquired_patents(tables.links, tables.company_paths, "P100001").select("pat_id", "rank").rows() == \
            acquired_view


def test_acquired_patents_view_reads_every_company_path_as_ma_discovery_does(tmp_path):
    paths = pl.DataFrame({
        "fda_id": ["P100001", "P100001", "P100001", "P100002", "P100002", "P100003", "P100003", "P100004"],
        "pat_id": ["A", "B", "C", "A", "B", "C", "D", "D"],
        "company_path": ["MEDTRONIC <- COVIDIEN (2015-01-26) <- EV3 (2010-07-12)", "MEDTRONIC",
                         "MEDTRONIC -> OLDCO (2001-01-01)", "JOHNSON AND JOHNSON ~ STEREOTAXIS (alliance 2002-05-07)",
                         "A B ~ C (alliance 2005-01-01 to 2015-01-01)",
                         "ENDOLOGIX <- TRIVASCULAR (2016-02-03) -> BOSTON SCIENTIFIC (2005-04-18)", None,
                         "STRYKER <- PHYSIO CONTROL (2016-12-31) -> MEDTRONIC (1998-09-30)"]})
    command = acquired_patents(LINKS, paths).sort("fda_id", "pat_id")
    with duckdb.connect() as con:
        _views_over(con, LINKS, PATENTS, paths)
        view = con.sql(f"select {', '.join(command.columns)} from meddevkg.app_acquired_patents "
                       "order by fda_id, pat_id").pl()
    assert command["relation"].to_list() == ["acquired", "acquirer", "partner", "partner", "former_owner",
                                             "former_owner"]
    assert command.filter(pl.col("relation") == "partner").select("patent_company", "latest_close_date").rows() == [
        ("STEREOTAXIS", date(2002, 5, 7)), ("C", date(2005, 1, 1))]
    assert view.rows() == command.rows()


def test_every_view_gives_its_rows_in_one_order(tmp_path):
    """`select *` on a view is what analysts export and diff: the same rows in the same order each time."""
    pat_ids = [str(5000000 + 97_531 * i) for i in range(60)]  # grant years 1996-2011 from the numbers
    patents = pl.DataFrame({"pat_id": pat_ids, "title": pat_ids, "assignee": ["EV3"] * 60,
                            "grant_date": [None] * 60, "filing_date": [None] * 60},
                           schema_overrides={"grant_date": pl.Date, "filing_date": pl.Date})
    pairs = sorted({(f"P1{d:05d}", pat_ids[(d * 7 + 13 * j) % 60]) for d in range(40) for j in range(8)})
    links = pl.DataFrame({"fda_id": [d for d, _ in pairs], "pat_id": [p for _, p in pairs],
                          "probability": [(i % 17) / 17 for i in range(len(pairs))], "decision": [True] * len(pairs),
                          "evidence": ["e"] * len(pairs)})
    paths = pl.DataFrame({"fda_id": [d for d, _ in pairs], "pat_id": [p for _, p in pairs],
                          "company_path": [f"MEDTRONIC <- CO{p} (2015-01-26)" for _, p in pairs]})
    order = {"app_device_patents": "fda_id, rank, pat_id", "app_shared_patents": "fda_id, rank, other_fda_id",
             "app_acquired_patents": "fda_id, rank, pat_id", "app_trajectory": "fda_id, year"}
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        _views_over(con, links, patents, paths)
        for view, keys in order.items():
            expected = con.sql(f"select * from meddevkg.{view} order by {keys}").fetchall()
            assert len(expected) > 40
            for _ in range(5):  # joins and aggregates return their rows in another order on each query
                assert con.sql(f"select * from meddevkg.{view}").fetchall() == expected, view
