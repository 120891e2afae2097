"""The stored-table checks count in DuckDB: duplicates, null keys and vectors, scoped to the run."""

import dagster as dg
import duckdb
import polars as pl
from dagster_duckdb import DuckDBResource

from meddevkg_dagster.checks import CHECKS, MIN_POOL_RECALL, recall_on_gold


def _check(name: str) -> dg.AssetChecksDefinition:
    return next(c for c in CHECKS if any(k.name == name for k in c.check_keys))


def _run(name: str, db) -> dg.AssetCheckResult:
    return _check(name)(dg.build_asset_check_context(), warehouse=DuckDBResource(database=str(db)))


def _warehouse(tmp_path, tables: dict[str, str]):
    """A store with the given `meddevkg` tables, each from a VALUES query."""
    db = tmp_path / "w.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("create schema meddevkg")
        for name, query in tables.items():
            con.execute(f"create table meddevkg.{name} as select * from {query}")
    return db


def test_duplicate_and_null_keys_fail_the_check(tmp_path):
    db = _warehouse(tmp_path, {"candidate_pool": "(values ('P1', 'A'), ('P1', 'B'), ('P1', 'B'), ('P2', null)) "
                                                  "t(fda_id, pat_id)"})
    result = _run("candidate_pool_keys_unique", db)
    assert not result.passed
    assert result.metadata["rows_checked"].value == 4 and result.metadata["scope"].value == "whole table"
    assert result.metadata["duplicate_keys"].value == 1 and result.metadata["null_keys"].value == 1


def test_vectors_of_two_dimensions_or_null_fail_and_a_clean_table_passes(tmp_path):
    db = _warehouse(tmp_path, {
        "device_embeddings": "(values ('P1', [0.1, 0.2]::float[]), ('P2', [0.3]::float[]), ('P3', null)) "
                             "t(doc_id, embedding)",
        "patent_embeddings": "(values ('1', [0.1, 0.2]::float[]), ('2', [0.3, 0.4]::float[])) t(doc_id, embedding)"})
    bad, good = _run("device_embeddings_complete", db), _run("patent_embeddings_complete", db)
    assert not bad.passed and bad.metadata["null_vectors"].value == 1 and bad.metadata["dimensions"].value == "[1, 2]"
    assert good.passed and good.metadata["dimensions"].value == "[2]" and good.metadata["rows_checked"].value == 2


def test_a_table_never_written_has_nothing_to_fail(tmp_path):
    result = _run("reranked_links_keys_unique", tmp_path / "empty.duckdb")
    assert result.passed and result.metadata["rows_checked"].value == 0


def test_zero_length_vectors_fail_the_check(tmp_path):
    db = _warehouse(tmp_path, {"device_embeddings": "(values ('P1', []::float[]), ('P2', []::float[])) "
                                                      "t(doc_id, embedding)"})
    result = _run("device_embeddings_complete", db)
    assert not result.passed and result.metadata["dimensions"].value == "[0]"


def test_pool_recall_passes_from_the_minimum_and_without_gold():
    def recall(pool_recall):
        row = {"pool_recall": pool_recall, "link_recall": None, "link_share_of_pairs": 0.01}
        return recall_on_gold(pl.DataFrame([row], schema_overrides={"pool_recall": pl.Float64}))
    assert recall(MIN_POOL_RECALL).passed and not recall(MIN_POOL_RECALL - 0.01).passed
    assert recall(None).passed  # a corpus without gold has nothing to fall short of
