"""Reranker features derived from a pair's ids and from its device's Stage-2 pool, nothing else.

They read only the frame they are given, so they are the same wherever Stage 3 runs: the whole
pool, one Dagster device partition of it, every pair of a block of devices (the benchmark's
ranking) or stored training pairs. The pool features need one thing of such a frame: it holds all
pool rows (admitted_by not null) of each device it holds.

Years: a device is marked with the patents that protect it, and those are mostly granted within a
few years either side of its approval; the same company's patents from twenty years earlier or
later usually belong to another product generation.
- the PMA (P) or HDE (H) number starts with the two-digit year the application was filed
  (P040002: 2004); other device ids (old N-numbers) have no year (null, a missing feature);
- a US utility patent's number gives its grant year (numbers rise with the issue date).

Pool: where the pair stands among its device's pool pairs, and among its same-company ones. The
corpus-wide z-score of the cosine is set by the unrelated bulk of patents; among a device's own
candidates (hundreds of same-company patents for a large company) the spread is another one.
The share of the pool whose best entity match scores the same as the pair's tells a generic match
from a specific one: a catheter device's term "catheter" is shared with most of a catheter maker's
patents, an atherectomy head's with few.
"""

from __future__ import annotations

import polars as pl

from meddevkg_core.applications import grant_years

YEAR_FEATURES = ("grant_year", "device_year", "year_gap")
POOL_FEATURES = ("pool_size", "sim_z_pool", "lexical_z_pool", "sim_z_company", "lexical_z_company",
                 "entity_pool_share")


def device_year(fda_id: pl.Expr) -> pl.Expr:
    """Filing year of a PMA/HDE number (two digits: 76-99 -> 19xx, else 20xx); null otherwise."""
    yy = fda_id.str.strip_chars().str.to_uppercase().str.extract(r"^[PH](\d{2})\d{4}", 1).cast(pl.Int32)
    return pl.when(yy >= 76).then(yy + 1900).otherwise(yy + 2000).cast(pl.Float32)


def grant_year(pat_id: pl.Series) -> pl.Series:
    """Grant year of each US utility patent number (`applications.grant_years`), as Float32."""
    return grant_years(pat_id).cast(pl.Float32)


def with_year_features(pairs: pl.DataFrame) -> pl.DataFrame:
    """`pairs` with YEAR_FEATURES (computed once per distinct patent id: pools reach 16M pairs)."""
    if all(c in pairs.columns for c in YEAR_FEATURES):
        return pairs
    patents = pairs.select(pl.col("pat_id").unique())
    patents = patents.with_columns(grant_year(patents["pat_id"]))
    out = (pairs.drop([c for c in YEAR_FEATURES if c in pairs.columns])
           .join(patents, on="pat_id", how="left", maintain_order="left")
           .with_columns(device_year(pl.col("fda_id")).alias("device_year")))
    return out.with_columns((pl.col("grant_year") - pl.col("device_year")).alias("year_gap"))



def with_pool_features(pairs: pl.DataFrame) -> pl.DataFrame:
    """`pairs` with POOL_FEATURES, from each device's pool rows (admitted_by not null) in `pairs`."""
    pool = pl.col("admitted_by").is_not_null()
    company = pool & (pl.col("score_company") > 0)

    def z(column: str, among: pl.Expr, name: str) -> pl.Expr:
        x = pl.col(column).cast(pl.Float64)
        mean, std = x.filter(among).mean().over("fda_id"), x.filter(among).std().over("fda_id")
        return ((x - mean) / pl.when(std > 0).then(std)).cast(pl.Float32).alias(name)

    out = pairs.with_columns(pool.sum().over("fda_id").cast(pl.Float32).alias("pool_size"),
                             z("sim", pool, "sim_z_pool"), z("lexical", pool, "lexical_z_pool"),
                             z("sim", company, "sim_z_company"), z("lexical", company, "lexical_z_company"))
    same_entity_score = pool.sum().over("fda_id", "score_entity").cast(pl.Float32)
    share = same_entity_score / pl.when(pl.col("pool_size") > 0).then(pl.col("pool_size"))  # no pool: null
    return out.with_columns(share.alias("entity_pool_share"))


def with_derived_features(pairs: pl.DataFrame) -> pl.DataFrame:
    """`pairs` with YEAR_FEATURES and POOL_FEATURES (columns already there are kept as they are)."""
    out = with_year_features(pairs)
    return out if all(c in out.columns for c in POOL_FEATURES) else with_pool_features(out)
