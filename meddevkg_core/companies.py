"""The device x patent company match table, and the company dictionary of a corpus's raw names.

Which (device, patent) pairs have companies that match (company_resolver: aliases, dated deals,
alliances), with the kind and evidence path of each, computed at corpus scale: every distinct
name is resolved once and patents are joined by company id.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from meddevkg_core import schemas
from meddevkg_core.applications import grant_years
from meddevkg_core.company_resolver import KIND_RANK, CompanyResolver
from meddevkg_core.device_activity import LAST_DECISION_DATE

COMPANY_MATCHES = pl.Schema(
    {"fda_id": pl.String, "pat_id": pl.String, "match_kind": pl.String, "company_path": pl.String}
)


def build_company_dictionary(raw_names: Iterable[str | None], resolver: CompanyResolver) -> pl.DataFrame:
    """One row per distinct non-null raw name (sorted), conforming to schemas.COMPANY_DICTIONARY."""
    names = sorted({n for n in raw_names if isinstance(n, str)})
    rows = [resolver.resolve_detail(n) for n in names]
    df = pl.DataFrame(
        {
            "raw_name": names,
            "normalized_name": [r.normalized for r in rows],
            "company_id": [r.company_id for r in rows],
            "method": [r.method for r in rows],
            "score": [r.score for r in rows],
        },
        schema=schemas.COMPANY_DICTIONARY,
    )
    return schemas.conform(df, schemas.COMPANY_DICTIONARY)


def _resolved_names(names: pl.Series, resolver: CompanyResolver) -> pl.DataFrame:
    """Resolve each distinct string once (700K patents share a few thousand assignee strings)."""
    distinct = names.drop_nulls().unique().sort().to_list()
    return pl.DataFrame(
        {"name": distinct, "company_id": [resolver.resolve(n) for n in distinct]},
        schema={"name": pl.String, "company_id": pl.String},
    ).drop_nulls("company_id")


def _assignee_ids(names: pl.Series, resolver: CompanyResolver, known: list[str]) -> pl.DataFrame:
    """(name, company_id) for every company of each distinct assignee string (several per string)."""
    distinct = names.drop_nulls().unique().sort().to_list()
    rows = [(n, cid) for n in distinct for cid in resolver.assignee_companies(n, known)]
    return pl.DataFrame(rows, schema={"name": pl.String, "company_id": pl.String}, orient="row")


def company_match_table(devices: pl.DataFrame, patents: pl.DataFrame, resolver: CompanyResolver) -> pl.DataFrame:
    """Only the (device, patent) pairs whose companies match, with kind and evidence path.

    `devices`: fda_id, applicant, decision_date (several rows per fda_id = several names for the
    device's holder, e.g. benchmark applicant and raw FDA sponsor; the best match wins), and
    optionally last_decision_date (device_activity.with_last_decision): a deal then counts for a
    device still decided on after it (`Reach.holds`).
    `patents`: pat_id, assignee (several names '; ' or '|' separated or run together, see
    `CompanyResolver.assignee_companies`; a patent matches if any of its companies does), and
    optionally grant_date; without it a US patent number gives the grant year, which a former
    owner's patent window needs (`Reach.covers`).
    Patents are grouped by company id first, so the work is proportional to the matches.
    """
    def optional_date(name: str) -> pl.Expr:
        return (pl.col(name).cast(pl.Date) if name in devices.columns else pl.lit(None, pl.Date)).alias(name)

    dev = devices.select(pl.col("fda_id").cast(pl.String), pl.col("applicant").cast(pl.String),
                         optional_date("decision_date"), optional_date(LAST_DECISION_DATE))
    pat = patents.select(pl.col("pat_id").cast(pl.String), pl.col("assignee").cast(pl.String))
    dev = dev.join(_resolved_names(dev["applicant"], resolver), left_on="applicant", right_on="name")
    pat = (
        pat.join(_assignee_ids(pat["assignee"], resolver, dev["company_id"].unique().to_list()),
                 left_on="assignee", right_on="name", maintain_order="left_right")
        .select("pat_id", pl.col("company_id").alias("target"))
        .unique(maintain_order=True)
        .with_row_index("pat_order")
    )
    reach = _reach_frame(dev["company_id"].unique().to_list(), resolver)
    best = ["rank", "steps", "company_path"]
    on_market_until = pl.max_horizontal("decision_date", LAST_DECISION_DATE)  # as Reach.holds
    holds = dev.join(reach, on="company_id").filter(
        pl.col("decision_date").is_null()
        | (
            (pl.col("valid_from").is_null() | (on_market_until >= pl.col("valid_from")))
            & (pl.col("valid_until").is_null() | (pl.col("decision_date") < pl.col("valid_until")))
        )
    )
    windowed = pl.col("patent_from").is_not_null() | pl.col("patent_until").is_not_null()
    # Best evidence per (device, target company) on the small side, before touching patents.
    device_targets = (
        holds.filter(~windowed)
        .sort("fda_id", "target", *best)
        .unique(["fda_id", "target"], keep="first", maintain_order=True)
        .select("fda_id", "target", "match_kind", *best)
        .with_row_index("dev_order")
    )
    # Only a patent with several companies can yield one pair twice; settle those separately.
    shared = pat["pat_id"].is_duplicated()
    single = device_targets.join(pat.filter(~shared), on="target", maintain_order="left_right")
    multi = (
        device_targets.join(pat.filter(shared), on="target")
        .sort("fda_id", "pat_id", *best)
        .unique(["fda_id", "pat_id"], keep="first", maintain_order=True)
        .sort("dev_order", "pat_order")
    )
    pairs = pl.concat([single, multi])
    in_window = _windowed_pairs(holds.filter(windowed), pat, patents)
    if in_window.height:  # a former owner's patents of the years it held the line; best evidence wins
        pairs = (
            pl.concat([pairs.select("fda_id", "pat_id", "match_kind", *best, "pat_order"), in_window])
            .with_row_index("_order")
            .sort("fda_id", "pat_id", *best)
            .unique(["fda_id", "pat_id"], keep="first", maintain_order=True)
            .sort("_order")
        )
    return schemas.conform(pairs, COMPANY_MATCHES)


def _windowed_pairs(targets: pl.DataFrame, pat: pl.DataFrame, patents: pl.DataFrame) -> pl.DataFrame:
    """(device, patent) pairs of reaches with a patent window, for the patents granted inside it."""
    columns = ["fda_id", "pat_id", "match_kind", "rank", "steps", "company_path", "pat_order"]
    if not targets.height:
        return pl.DataFrame(schema={c: pat.schema.get(c) or targets.schema[c] for c in columns})
    granted = grant_dates(patents)
    hits = targets.join(pat, on="target").join(granted, on="pat_id", how="left")
    date_ok = ((pl.col("patent_from").is_null() | (pl.col("grant_date") >= pl.col("patent_from")))
               & (pl.col("patent_until").is_null() | (pl.col("grant_date") < pl.col("patent_until"))))
    year_ok = ((pl.col("patent_from").is_null() | (pl.col("grant_year") >= pl.col("patent_from").dt.year()))
               & (pl.col("patent_until").is_null() | (pl.col("grant_year") <= pl.col("patent_until").dt.year())))
    covered = pl.when(pl.col("grant_date").is_not_null()).then(date_ok).otherwise(year_ok).fill_null(False)
    return hits.filter(covered).select(columns)


def grant_dates(patents: pl.DataFrame) -> pl.DataFrame:
    """pat_id, grant_date (when given), grant_year (of the date, else of the US patent number); as Reach.covers."""
    ids = patents.select(pl.col("pat_id").cast(pl.String),
                         (pl.col("grant_date").cast(pl.Date, strict=False) if "grant_date" in patents.columns
                          else pl.lit(None, pl.Date)).alias("grant_date")).unique("pat_id", keep="first")
    return ids.with_columns(pl.coalesce(pl.col("grant_date").dt.year().cast(pl.Int32),
                                        grant_years(ids["pat_id"])).alias("grant_year"))


def _reach_frame(company_ids: list[str], resolver: CompanyResolver) -> pl.DataFrame:
    rows = [
        (cid, r.target, r.kind, KIND_RANK[r.kind], r.steps, r.path, r.valid_from, r.valid_until,
         r.patent_from, r.patent_until)
        for cid in sorted(company_ids)
        for r in resolver.reach(cid)
    ]
    return pl.DataFrame(
        rows,
        schema={
            "company_id": pl.String,
            "target": pl.String,
            "match_kind": pl.String,
            "rank": pl.Int8,
            "steps": pl.Int32,
            "company_path": pl.String,
            "valid_from": pl.Date,
            "valid_until": pl.Date,
            "patent_from": pl.Date,
            "patent_until": pl.Date,
        },
        orient="row",
    )
