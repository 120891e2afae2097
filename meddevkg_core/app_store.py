"""Where the applications read from: the Dagster DuckDB store, or a `meddevkg run` / `benchmark` directory.

Both hold the same facts under different names (reranked_links vs links.parquet, candidate_pool
vs candidates.parquet); `AppTables` is the common shape, so applications.py never knows which.
`create_application_views` puts the same applications into the store as DuckDB views for analysts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from meddevkg_core.applications import (
    ARROW_RE,
    DEAL_STEP_RE,
    PARTNER_PATH_RE,
    PATENT_NUMBER_RE,
    number_ranges,
)
from meddevkg_core.atomic_files import finish_interrupted_commit
from meddevkg_core.errors import InputError
from meddevkg_core.raw_files import read_parquet, reading

DEVICE_COLS = ("fda_id", "applicant", "trade_name", "generic_name", "product_code", "decision_date")
PATENT_COLS = ("pat_id", "title", "assignee", "grant_date", "filing_date")
LINK_COLS = ("fda_id", "pat_id", "rank", "probability", "decision", "evidence")
"""`rank` is the device's final order (schemas.LINKS): the applications list a device's patents by it."""
LINK_REQUIRED = ("fda_id", "pat_id", "probability", "decision")  # what every application reads


@dataclass(frozen=True)
class AppTables:
    links: pl.DataFrame  # LINK_COLS
    devices: pl.DataFrame | None
    patents: pl.DataFrame  # at least pat_id: grant years are then estimated from the numbers
    company_paths: pl.DataFrame  # fda_id, pat_id, company_path
    source: str


def _pick(df: pl.DataFrame, cols: tuple[str, ...]) -> pl.DataFrame:
    return df.select([c for c in cols if c in df.columns])


def from_duckdb(db: str | Path, schema: str = "meddevkg") -> AppTables:
    """The tables the assets wrote (reranked_links, pma_documents, patents, candidate_pool)."""
    import duckdb

    if not Path(db).is_file():
        raise FileNotFoundError(f"{db}: no DuckDB store (run `meddevkg demo`, or pass --db or --links)")
    with duckdb.connect(str(db), read_only=True) as con:
        have = {r[0] for r in con.execute("select table_name from information_schema.tables where table_schema = ?",
                                          [schema]).fetchall()}
        if "reranked_links" not in have:
            raise FileNotFoundError(f"{db}: no {schema}.reranked_links table (materialise the assets first)")

        def table(name: str, cols: tuple[str, ...]) -> pl.DataFrame | None:
            return _pick(con.sql(f'select * from {schema}."{name}"').pl(), cols) if name in have else None

        links = table("reranked_links", LINK_COLS)
        devices = table("pma_documents", DEVICE_COLS)
        patents = table("patents", PATENT_COLS)
        paths = table("candidate_pool", ("fda_id", "pat_id", "company_path"))
    assert links is not None
    return AppTables(links, devices, patents if patents is not None else links.select("pat_id").unique(),
                     paths if paths is not None else _no_paths(), f"DuckDB {db}")


def _no_paths() -> pl.DataFrame:
    return pl.DataFrame(schema={"fda_id": pl.String, "pat_id": pl.String, "company_path": pl.String})


def corpus_of(out_dir: Path) -> Path | None:
    """The corpus a benchmark or run directory was made from (report.json, summary.json), else $MEDDEVKG_CORPUS.

    `run` and `benchmark` may have written into the same directory, each leaving the other's report:
    the newer one came with the links.parquet there now."""
    written = [r for r in (out_dir / "report.json", out_dir / "summary.json") if r.is_file()]
    if written:
        report = max(written, key=lambda r: r.stat().st_mtime_ns)
        if path := _reported_corpus_path(report):
            for base in (Path.cwd(), out_dir, out_dir.parent):
                if (base / path).is_dir() and any((base / path).glob("devices.*")):
                    return (base / path).resolve()
    env = os.environ.get("MEDDEVKG_CORPUS")
    return Path(env) if env else None


def _reported_corpus_path(report: Path) -> str | None:
    """`corpus.path` of a report; one that cannot be read as `run` or `benchmark` wrote it is an
    error naming the file, not a traceback (a report without the key predates it: None)."""
    try:
        body = json.loads(report.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"{report}: not a run or benchmark report ({exc}); name the corpus with --corpus") from None
    corpus = body.get("corpus") if isinstance(body, dict) else None
    path = corpus.get("path") if isinstance(corpus, dict) else None
    usable_corpus = corpus is None or isinstance(corpus, dict) and isinstance(path, str | None)
    if not (isinstance(body, dict) and usable_corpus):
        raise InputError(f"{report}: not a run or benchmark report (no corpus path in "
                         f"{json.dumps(body)[:80]}); name the corpus with --corpus")
    return path


def from_output_dir(out_dir: str | Path, corpus_dir: str | Path | None = None) -> AppTables:
    """links.parquet and candidates.parquet (or company_matches.parquet) of a run or benchmark, plus its corpus.

    The outputs of a run killed while moving them in are moved in first: never its links beside the
    previous run's candidates and report (atomic_files.finish_interrupted_commit)."""
    from meddevkg_core.corpus import read_corpus

    out = Path(out_dir)
    finish_interrupted_commit(out)
    if not (out / "links.parquet").is_file():
        raise FileNotFoundError(f"{out}: no links.parquet (a `meddevkg run` or `meddevkg benchmark` output)")
    with reading(out / "links.parquet", error=InputError):
        links = read_parquet(out / "links.parquet")
    if missing := [c for c in LINK_REQUIRED if c not in links.columns]:
        raise InputError(f"{out / 'links.parquet'}: not the links of a run or benchmark (no {', '.join(missing)})")
    links = _pick(links, LINK_COLS)
    paths = _no_paths()
    for name in ("candidates.parquet", "company_matches.parquet"):
        with reading(out / name, error=InputError):
            if (out / name).is_file() and "company_path" in pl.read_parquet_schema(out / name):
                paths = read_parquet(out / name, columns=["fda_id", "pat_id", "company_path"])
                break
    corpus = Path(corpus_dir) if corpus_dir else corpus_of(out)
    devices, patents = None, links.select("pat_id").unique()
    if corpus is not None:
        data = read_corpus(corpus)
        devices, patents = _pick(data.devices, DEVICE_COLS), _pick(data.patents, PATENT_COLS)
        if devices["trade_name"].null_count() == devices.height if "trade_name" in devices.columns else True:
            devices = devices.with_columns(data.devices["text"].str.slice(0, 60).alias("description"))
    return AppTables(links, devices, patents, paths, f"{out}" + (f" (corpus {corpus})" if corpus else ""))


def with_fda_decision_dates(devices: pl.DataFrame | None, fda_pma: str | Path) -> pl.DataFrame | None:
    """Fill missing decision dates from FDA's PMA records (the benchmark's devices carry none): each
    device's original approval, from the records the dossiers keep (dossier.load_pma_records: a
    conflicting copy of an original is quarantined there; `run` and `benchmark` report it)."""
    from meddevkg_core.dossier import load_pma_records, with_approval_dates

    if devices is None:
        return None
    return with_approval_dates(devices, load_pma_records(fda_pma, devices["fda_id"].to_list()).originals)


# --------------------------------------------------------------------------- DuckDB views

VIEWS: dict[str, str] = {
    "app_device_patents": """
        select l.fda_id, d.trade_name, d.applicant, l.pat_id, l.rank, p.title, p.assignee, l.probability, l.verdict,
               l.evidence, p.filing_date, p.grant_date
        from {s}.reranked_links l
        left join {s}.pma_documents d using (fda_id)
        left join {s}.patents p using (pat_id)
        where l.decision
        order by l.fda_id, l.rank, l.pat_id""",
    "app_shared_patents": """
        with kept as (select fda_id, pat_id, probability from {s}.reranked_links where decision)
        select fda_id, other_fda_id, n_shared, shared_pat_ids, other_mean_probability,
               rank() over (partition by fda_id order by n_shared desc) as rank
        from (select a.fda_id, b.fda_id as other_fda_id, count(*) as n_shared,
                     list(a.pat_id order by a.pat_id) as shared_pat_ids, avg(b.probability) as other_mean_probability
              from kept a join kept b on a.pat_id = b.pat_id and a.fda_id <> b.fda_id
              group by a.fda_id, b.fda_id)
        order by fda_id, rank, other_fda_id""",
    "app_acquired_patents": """
        with paths as (
            select l.fda_id, l.pat_id, l.rank, l.probability, c.company_path, l.evidence,
                   regexp_full_match(trim(c.company_path), '{partner}') as is_partner,
                   regexp_extract(trim(c.company_path), '^{partner}$', ['device', 'partner', 'start']) as pact,
                   regexp_extract_all(c.company_path, '{step}', 1) as arrows,
                   regexp_extract_all(c.company_path, '{step}', 2) as companies,
                   regexp_extract_all(c.company_path, '{step}', 3) as closes,
                   trim(regexp_split_to_array(c.company_path, '{arrow}')[1]) as first_company
            from {s}.reranked_links l
            join {s}.candidate_pool c using (fda_id, pat_id)
            where l.decision and c.company_path is not null),
        parsed as (
            select *,
                   case when is_partner then pact.device else first_company end as device_company,
                   case when is_partner then pact.partner when len(arrows) = 0 then first_company
                        else trim(companies[-1]) end as patent_company,
                   case when is_partner then 'partner' when len(arrows) = 0 then 'same'
                        when arrows[1] = '->' then 'acquirer'
                        when list_contains(arrows, '->') then 'former_owner' else 'acquired' end as relation,
                   list_transform(case when is_partner then [pact.start] else closes end, x -> cast(x as date))
                       as deal_dates
            from paths)
        select fda_id, pat_id, rank, probability, relation, device_company, patent_company,
               list_max(deal_dates) as latest_close_date, company_path, deal_dates, evidence
        from parsed
        where len(deal_dates) > 0 and device_company <> patent_company
        order by fda_id, rank, pat_id""",
    "app_trajectory": """
        with kept as (select fda_id, pat_id from {s}.reranked_links where decision),
        linked as (
            select k.fda_id, year(p.filing_date) as filing_year, year(p.grant_date) as dated_year,
                   try_cast(nullif(regexp_extract(regexp_replace(upper(k.pat_id), '^\\s+|\\s+$|,', '', 'g'),
                                                  '{number}', 1), '') as bigint) as number
            from kept k join {s}.patents p using (pat_id)),
        number_years as (select * from (values {number_years}) t(year, first_number, end_number)),
        years as (
            select fda_id, filing_year as year, 1 as filed, 0 as granted, 0 as from_number
            from linked where filing_year is not null
            union all
            select l.fda_id, coalesce(l.dated_year, n.year), 0, 1, (l.dated_year is null)::integer
            from linked l left join number_years n on l.number >= n.first_number and l.number < n.end_number
            where l.dated_year is not null or n.year is not null)
        select fda_id, year, sum(filed)::integer as n_filed, sum(granted)::integer as n_granted,
               sum(from_number)::integer as n_granted_from_number
        from years group by fda_id, year
        order by fda_id, year""",
}
"""The applications as views over the asset tables (acquisition paths come from the candidates'
company_path, which is how the company match was made, dates included; app_acquired_patents reads
them with parse_company_path's regexes, alliances included, so it lists what `ma-discovery` does).
Where a patent has no grant date, app_trajectory takes its grant year from its number, as the
`trajectory` command does (`applications.grant_years`; the benchmark's patents have no dates), and
counts those years in n_granted_from_number. Each view is ordered (by device, then rank, year or the
other device): its joins and aggregates return rows in another order on each query, and analysts diff
what `select *` gives."""


def _view_sql(sql: str, schema: str) -> str:
    number_years = ", ".join(f"({y}, {first}, {end})" for y, first, end in number_ranges())
    return sql.format(s=schema, number=PATENT_NUMBER_RE, number_years=number_years, partner=PARTNER_PATH_RE,
                      step=DEAL_STEP_RE, arrow=ARROW_RE)


def create_application_views(con, schema: str = "meddevkg") -> dict[str, int]:
    """Create (or replace) the app_* views in `schema`; returns each view's row count."""
    counts = {}
    for name, sql in VIEWS.items():
        con.execute(f"create or replace view {schema}.{name} as {_view_sql(sql, schema)}")
        counts[name] = con.execute(f"select count(*) from {schema}.{name}").fetchone()[0]
    return counts
