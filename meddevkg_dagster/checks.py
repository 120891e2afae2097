"""Asset checks: keys unique and present, embeddings complete, recall on gold.

The stored tables are checked where they are stored. Loaded through the IO manager, a check on a
partitioned asset reads every partition, whatever the run wrote: a one-device run would pull the
whole candidate pool into memory (about 30M rows at the paper's 698K patents). Each check is one
SQL aggregate in DuckDB instead, and only its counts leave the database. A key check covers just
the partitions the run wrote when the key holds the partition column (a duplicate can then only
sit inside one partition); otherwise, and for the vectors' one-dimension rule, the whole table.
"""

import dagster as dg
import duckdb
import polars as pl
from dagster_duckdb import DuckDBResource

from meddevkg_dagster.assets import linking, sources
from meddevkg_dagster.lib import partition_keys
from meddevkg_dagster.resources import DUCKDB_POOL, WAREHOUSE_SCHEMA

MIN_POOL_RECALL = 0.9
"""Below this share of gold pairs in the Stage-2 pool the link set cannot be trusted."""
WHOLE_TABLE = "whole table"


def _aggregate(warehouse: DuckDBResource, sql: str, params: list) -> tuple | None:
    """The aggregate's one row; None when the table was never written (every output so far empty)."""
    with warehouse.get_connection() as con:
        try:
            return con.execute(sql, params).fetchone()
        except duckdb.CatalogException:
            return None


def _unique_keys(assets_def: dg.AssetsDefinition, asset: str, keys: list[str]) -> dg.AssetChecksDefinition:
    """Keys present and unique; over the run's partitions when the key holds the partition column."""
    name = f"{asset}_keys_unique"
    expr = assets_def.metadata_by_key[dg.AssetKey(asset)].get("partition_expr")
    scoped_by = expr if expr in keys else None
    cols = ", ".join(keys)
    any_null = " or ".join(f"{k} is null" for k in keys)

    @dg.asset_check(asset=asset, name=name, blocking=True, pool=DUCKDB_POOL,
                    description=f"{cols} present and unique")
    def check(context: dg.AssetCheckExecutionContext, warehouse: DuckDBResource) -> dg.AssetCheckResult:
        partitions = partition_keys(context.op_execution_context) if scoped_by else []
        where = f" where {scoped_by} in (select unnest($1::varchar[]))" if partitions else ""
        scoped = f"with scoped as (select {cols} from {WAREHOUSE_SCHEMA}.{asset}{where}) "
        params = [partitions] if partitions else []
        # Distinct 64-bit hashes first (a third faster on a 4.3M-row pool); only when two keys share
        # one is the exact count of distinct keys needed (a hash collision is not a duplicate).
        sql = (f"{scoped}select count(*), count(*) filter (where {any_null}), "
               f"count(*) - count(distinct hash({cols})) from scoped")
        n, nulls, dupes = _aggregate(warehouse, sql, params) or (0, 0, 0)
        if dupes:
            exact = (f"{scoped}select count(*) - (select count(*) from (select distinct {cols} from scoped)) "
                     "from scoped")
            (dupes,) = _aggregate(warehouse, exact, params) or (0,)
        scope = f"{len(partitions)} partition(s)" if partitions else WHOLE_TABLE
        return dg.AssetCheckResult(passed=nulls == 0 and dupes == 0, metadata={
            "rows_checked": n, "scope": scope, "null_keys": nulls, "duplicate_keys": dupes})

    return check


def _embeddings_complete(asset: str) -> dg.AssetChecksDefinition:
    """Over the whole table: the one-dimension rule has to hold across runs."""
    name = f"{asset}_complete"

    @dg.asset_check(asset=asset, name=name, blocking=True, pool=DUCKDB_POOL,
                    description="no null or empty vectors, one dimension for all")
    def check(warehouse: DuckDBResource) -> dg.AssetCheckResult:
        sql = (f"select count(*), count(*) filter (where embedding is null), "
               f"coalesce(list_sort(array_agg(distinct len(embedding)) filter (where embedding is not null)), []) "
               f"from {WAREHOUSE_SCHEMA}.{asset}")
        n, nulls, dims = _aggregate(warehouse, sql, []) or (0, 0, [])
        return dg.AssetCheckResult(passed=nulls == 0 and len(dims) <= 1 and 0 not in dims, metadata={
            "rows_checked": n, "scope": WHOLE_TABLE, "null_vectors": nulls, "dimensions": str(dims)})

    return check


@dg.asset_check(asset="link_evaluation", name="recall_on_gold",
                description=f"Stage-2 pool keeps at least {MIN_POOL_RECALL:.0%} of gold pairs")
def recall_on_gold(link_evaluation: pl.DataFrame) -> dg.AssetCheckResult:
    row = link_evaluation.row(0, named=True)
    if row["pool_recall"] is None:
        return dg.AssetCheckResult(passed=True, metadata={"note": "corpus has no gold links"})
    return dg.AssetCheckResult(
        passed=row["pool_recall"] >= MIN_POOL_RECALL, severity=dg.AssetCheckSeverity.WARN,
        metadata={"pool_recall": row["pool_recall"], "link_recall": row["link_recall"],
                  "link_share_of_pairs": row["link_share_of_pairs"]})


CHECKS = [
    _unique_keys(sources.pma_documents, "pma_documents", ["fda_id"]),
    _unique_keys(sources.patents, "patents", ["pat_id"]),
    _unique_keys(linking.candidate_pool, "candidate_pool", ["fda_id", "pat_id"]),
    _unique_keys(linking.reranked_links, "reranked_links", ["fda_id", "pat_id"]),
    _embeddings_complete("device_embeddings"),
    _embeddings_complete("patent_embeddings"),
    recall_on_gold,
]
