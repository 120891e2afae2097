"""Asset checks: keys unique and present, embeddings complete, recall on gold."""

import dagster as dg
import polars as pl


MIN_POOL_RECALL = 0.9
"""Below this share of gold pairs in the Stage-2 pool the link set cannot be trusted."""


def _unique_keys(asset: str, keys: list[str]) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=asset, name=f"{asset}_keys_unique", blocking=True,
                    description=f"{', '.join(keys)} present and unique")
    def check(df: pl.DataFrame) -> dg.AssetCheckResult:
        nulls = df.select(pl.any_horizontal(pl.col(k).is_null() for k in keys).sum()).item()
        dupes = df.height - df.unique(keys).height
        return dg.AssetCheckResult(passed=bool(nulls == 0 and dupes == 0),
                                   metadata={"null_keys": int(nulls), "duplicate_keys": int(dupes)})

    check.__name__ = f"{asset}_keys_unique"
    return check


def _embeddings_complete(asset: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=asset, name=f"{asset}_complete", blocking=True,
                    description="no null or empty vectors, one dimension for all")
    def check(df: pl.DataFrame) -> dg.AssetCheckResult:
        lengths = df["embedding"].list.len()
        nulls = int(df["embedding"].is_null().sum())
        dims = lengths.drop_nulls().unique().to_list()
        return dg.AssetCheckResult(passed=nulls == 0 and len(dims) <= 1 and 0 not in dims,
                                   metadata={"null_vectors": nulls, "dimensions": str(dims)})

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
    _unique_keys("pma_documents", ["fda_id"]),
    _unique_keys("patents", ["pat_id"]),
    _unique_keys("candidate_pool", ["fda_id", "pat_id"]),
    _unique_keys("reranked_links", ["fda_id", "pat_id"]),
    _embeddings_complete("device_embeddings"),
    _embeddings_complete("patent_embeddings"),
    recall_on_gold,
]

