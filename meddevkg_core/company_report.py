"""Company-resolution figures for a corpus and the raw FDA sponsor names (`meddevkg company-report`).

Three questions (METHOD.md §3.1, §7; issue 5):

1. Sponsor resolution. Joined by PMA number, does the raw FDA sponsor ("St. Jude Medical, Cardiac
   Rhythm Management Divisi") resolve to the same company as the corpus applicant ("ABBOTT")? The
   benchmark and FDA file a device under today's owner, so "same company" is the same id or one
   acquisition lineage (either bought the other); a former owner does not count.
2. Cross-company gold. Of the gold pairs whose assignee string differs from the applicant string,
   how many are a company match, in two views:
   - `stage2`: what Stage 2 scores, `company_match_table(corpus.devices, corpus.patents)`; the
     benchmark corpus has no decision dates, so the date rules do not bind there;
   - `dated`: the applicant plus the raw FDA sponsor as names of the device's holder, and the
     device's time on the market from FDA's records (its original approval to its latest
     decision), so the dated rules (an acquired company counts only for devices still on the
     market at the close) apply.
   Every pair the dated view misses is listed with its device date, whether Stage 2 recovers it,
   and the reason. A third view, `ownership_only`, is Stage 2 without the "former_owner" and
   "partner" relations (`CompanyResolver.ownership_only`): what those two add.
3. Extra pairs. How many device x patent pairs a company match adds over plain name equality
   (normalised applicant == normalised assignee), over all pairs.

Pure functions on frames; `main_company_report` does the reading for the CLI, and records the files
read (`inputs`: the corpus tables, its company tables and the FDA records, each with its SHA-256).
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import polars as pl

from meddevkg_core.atomic_files import replaced_file
from meddevkg_core.companies import company_match_table, grant_dates
from meddevkg_core.company_names import normalize_company, split_assignees
from meddevkg_core.company_resolver import CompanyResolver
from meddevkg_core.device_activity import LAST_DECISION_DATE, with_last_decision
from meddevkg_core.lineage import inputs_json, read_fingerprinted
from meddevkg_core.report import percent

SAME_COMPANY_KINDS = frozenset({"same", "acquired", "acquirer"})
_MAX_LISTED = 200


# --------------------------------------------------------------------------- FDA sponsors


def pma_number(col: str | pl.Expr) -> pl.Expr:
    """'P140031/S085', ' p140031 ' -> 'P140031' (the benchmark fda_id is the original's PMA number)."""
    expr = pl.col(col) if isinstance(col, str) else col
    return expr.cast(pl.String).str.strip_chars().str.to_uppercase().str.split("/").list.first()


def fda_sponsors(fda_pma: pl.DataFrame) -> pl.DataFrame:
    """One row per PMA number: raw `sponsor` and `decision_date` of the original approval.

    Input: fdadata_pma columns (`pma_number` or `submission_number`, `sponsor`, `date_decision`,
    optionally `is_original` / `supplement_number`). A PMA with no original row (fdadata has 270)
    keeps the sponsor of its latest record and no date: a supplement's date is not the approval's.
    """
    if "pma_number" in fda_pma.columns:
        key = pma_number("pma_number")
    else:
        key = pma_number("submission_number")
    if "is_original" in fda_pma.columns:
        original = pl.col("is_original").fill_null(False)
    elif "supplement_number" in fda_pma.columns:
        original = pl.col("supplement_number").is_null() | (pl.col("supplement_number").str.strip_chars() == "")
    else:
        original = ~pl.col("submission_number").str.contains("/")
    df = fda_pma.select(
        key.alias("fda_id"),
        pl.col("sponsor").cast(pl.String).str.strip_chars().alias("sponsor"),
        pl.col("date_decision").cast(pl.Date).alias("decision_date"),
        original.alias("_original"),
    ).filter(pl.col("fda_id").is_not_null() & (pl.col("fda_id") != ""))
    firsts = (
        df.filter(pl.col("_original"))
        .sort("fda_id", "decision_date", nulls_last=True)
        .unique("fda_id", keep="first", maintain_order=True)
        .select("fda_id", "sponsor", "decision_date")
    )
    rest = (
        df.join(firsts, on="fda_id", how="anti")
        .sort("fda_id", "decision_date", nulls_last=False)
        .unique("fda_id", keep="last", maintain_order=True)
        .select("fda_id", "sponsor", pl.lit(None, pl.Date).alias("decision_date"))
    )
    return pl.concat([firsts, rest]).sort("fda_id")


def fda_decisions(fda_pma: pl.DataFrame) -> pl.DataFrame:
    """fda_id, decision_date: every dated FDA decision (original or supplement) of each PMA number."""
    key = pma_number("pma_number" if "pma_number" in fda_pma.columns else "submission_number")
    return (fda_pma.select(key.alias("fda_id"), pl.col("date_decision").cast(pl.Date).alias("decision_date"))
            .drop_nulls())


def _devices_with_fda(devices: pl.DataFrame, sponsors: pl.DataFrame) -> pl.DataFrame:
    """fda_id, applicant, sponsor, decision_date (FDA original's, else the corpus's), one row each."""
    corpus_date = (pl.col("decision_date").cast(pl.Date) if "decision_date" in devices.columns
                   else pl.lit(None, pl.Date)).alias("corpus_date")
    dev = devices.select(pl.col("fda_id").cast(pl.String), pl.col("applicant").cast(pl.String), corpus_date)
    return (
        dev.with_columns(pma_number("fda_id").alias("_pma"))
        .join(sponsors.rename({"fda_id": "_pma"}), on="_pma", how="left")
        .select("fda_id", "applicant", "sponsor",
                pl.coalesce("decision_date", "corpus_date").alias("decision_date"))
    )


# --------------------------------------------------------------------------- figures


def sponsor_resolution(devices: pl.DataFrame, sponsors: pl.DataFrame, resolver: CompanyResolver) -> dict[str, Any]:
    """Share of devices (with a raw FDA sponsor) whose sponsor is the applicant's company today."""
    joined = _devices_with_fda(devices, sponsors)
    with_sponsor = joined.filter(pl.col("sponsor").is_not_null() & (pl.col("sponsor") != ""))
    same_id = same_company = 0
    misses: list[dict[str, Any]] = []
    for fda_id, applicant, sponsor, _ in with_sponsor.iter_rows():
        a_id, s_id = resolver.resolve(applicant), resolver.resolve(sponsor)
        rel = resolver.company_relation(applicant, None, sponsor)
        same_id += a_id is not None and a_id == s_id
        if rel is not None and rel.kind in SAME_COMPANY_KINDS:
            same_company += 1
        else:
            misses.append({"fda_id": fda_id, "sponsor": sponsor, "applicant": applicant,
                           "sponsor_id": s_id, "applicant_id": a_id})
    n = with_sponsor.height
    return {
        "n_devices": joined.height,
        "n_with_sponsor": n,
        "n_without_sponsor": joined.height - n,
        "same_id": same_id,
        "same_company": same_company,
        "same_id_share": same_id / n if n else None,
        "share": same_company / n if n else None,
        "misses": misses,
    }


def _device_names(joined: pl.DataFrame, with_sponsor: bool) -> pl.DataFrame:
    """Rows of (fda_id, applicant, decision_date): the corpus applicant, optionally the raw sponsor."""
    frames = [joined.select("fda_id", "applicant", "decision_date")]
    if with_sponsor:
        frames.append(joined.filter(pl.col("sponsor").is_not_null())
                      .select("fda_id", pl.col("sponsor").alias("applicant"), "decision_date"))
    return pl.concat(frames)


def exact_name_pairs(devices: pl.DataFrame, patents: pl.DataFrame) -> pl.DataFrame:
    """(fda_id, pat_id) where the normalised applicant equals a normalised assignee (plain equality)."""
    def keys(names: pl.Series, split: bool) -> pl.DataFrame:
        rows: list[tuple[str, str]] = []
        for raw in names.cast(pl.String).drop_nulls().unique().to_list():
            normalised = (normalize_company(part) for part in (split_assignees(raw) if split else [raw]))
            rows += [(raw, key) for key in dict.fromkeys(normalised) if key]
        return pl.DataFrame(rows, schema={"raw": pl.String, "key": pl.String}, orient="row")

    dev = devices.select(pl.col("fda_id").cast(pl.String), pl.col("applicant").cast(pl.String))
    dev = dev.join(keys(dev["applicant"], split=False), left_on="applicant", right_on="raw").select("fda_id", "key")
    pat = patents.select(pl.col("pat_id").cast(pl.String), pl.col("assignee").cast(pl.String))
    pat = pat.join(keys(pat["assignee"], split=True), left_on="assignee", right_on="raw").select("pat_id", "key")
    return dev.join(pat, on="key").select("fda_id", "pat_id").unique().sort("fda_id", "pat_id")


def extra_pairs(devices: pl.DataFrame, patents: pl.DataFrame, matches: pl.DataFrame) -> dict[str, Any]:
    """Company-match pairs over all device x patent pairs versus plain name equality."""
    exact = exact_name_pairs(devices, patents)
    pairs = matches.select("fda_id", "pat_id", "match_kind").unique(["fda_id", "pat_id"])
    extra = pairs.join(exact, on=["fda_id", "pat_id"], how="anti")
    by_kind = dict(extra.group_by("match_kind").len().sort("match_kind").iter_rows())
    return {
        "all_pairs": devices["fda_id"].n_unique() * patents["pat_id"].n_unique(),
        "exact_name_pairs": exact.height,
        "company_pairs": pairs.height,
        "extra_pairs": extra.height,
        "extra_by_kind": by_kind,
        "exact_pairs_lost": exact.join(pairs, on=["fda_id", "pat_id"], how="anti").height,
    }


def cross_company_gold(
    devices: pl.DataFrame,
    patents: pl.DataFrame,
    gold: pl.DataFrame,
    sponsors: pl.DataFrame,
    resolver: CompanyResolver,
    decisions: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """Gold pairs whose assignee string differs from the applicant's: recovered as company matches?

    `decisions` (fda_decisions): with them, the dated view's deals count while a device was on
    the market, up to its latest FDA decision (company_resolver.Reach.holds); without, on its approval day.

    Returns per view (`stage2`, `dated`, `ownership_only` = Stage 2 without former owners and
    alliances) the counts and extra-pair figures, plus the pairs the dated view misses (each with
    what the undated Stage-2 view says and why).
    """
    joined = _devices_with_fda(devices, sponsors)
    stage2 = company_match_table(devices, patents, resolver)
    named = with_last_decision(_device_names(joined, with_sponsor=True), decisions)
    dated = company_match_table(named, patents, resolver)
    owned = company_match_table(devices, patents, resolver.ownership_only())
    g = (
        gold.select(pl.col("fda_id").cast(pl.String), pl.col("pat_id").cast(pl.String)).unique()
        .join(joined, on="fda_id", how="inner")
        .join(patents.select(pl.col("pat_id").cast(pl.String), pl.col("assignee").cast(pl.String)),
              on="pat_id", how="inner")
    )
    differs = pl.col("applicant").str.strip_chars().str.to_uppercase() != pl.col(
        "assignee").str.strip_chars().str.to_uppercase()
    cross = g.filter(differs | pl.col("assignee").is_null() | pl.col("applicant").is_null())

    def hits(table: pl.DataFrame, frame: pl.DataFrame) -> pl.DataFrame:
        return frame.join(table, on=["fda_id", "pat_id"], how="inner")

    out: dict[str, Any] = {"n_gold": g.height, "n_cross": cross.height}
    for name, table in (("stage2", stage2), ("dated", dated), ("ownership_only", owned)):
        found_all, found_cross = hits(table, g), hits(table, cross)
        out[name] = {
            "gold_recovered": found_all.height,
            "gold_share": found_all.height / g.height if g.height else None,
            "cross_recovered": found_cross.height,
            "cross_share": found_cross.height / cross.height if cross.height else None,
            "cross_by_path": [
                {"applicant": a, "assignee": s, "match_kind": k, "company_path": p, "n": n}
                for a, s, k, p, n in found_cross.group_by("applicant", "assignee", "match_kind", "company_path")
                .len().sort("len", "applicant", "assignee", "match_kind", "company_path",
                            descending=[True, False, False, False, False], nulls_last=True).iter_rows()
            ],
            "cross_by_kind": dict(sorted(found_cross.group_by("match_kind").len().iter_rows())),
        }
    out["stage2"].update(extra_pairs(devices, patents, stage2))
    out["dated"].update(extra_pairs(devices, patents, dated))
    out["ownership_only"].update(extra_pairs(devices, patents, owned))

    s2 = cross.join(stage2.select("fda_id", "pat_id", pl.col("company_path").alias("stage2_path")),
                    on=["fda_id", "pat_id"], how="left")
    missed = (s2.join(dated.select("fda_id", "pat_id"), on=["fda_id", "pat_id"], how="anti")
              .join(grant_dates(patents), on="pat_id", how="left")
              .join(_last_decisions(named), on="fda_id", how="left")
              .sort("applicant", "assignee", "fda_id", "pat_id"))
    out["unrecovered"] = [
        {
            "fda_id": fda_id, "pat_id": pat_id, "applicant": applicant, "assignee": assignee,
            "sponsor": sponsor, "decision_date": when.isoformat() if when else None,
            "last_decision_date": last.isoformat() if last else None,
            "stage2_path": s2_path,
            "reason": _reason(resolver, applicant, sponsor, assignee, granted_on or granted_in, when, s2_path, last),
        }
        for fda_id, applicant, sponsor, when, last, pat_id, assignee, s2_path, granted_on, granted_in in missed.select(
            "fda_id", "applicant", "sponsor", "decision_date", LAST_DECISION_DATE, "pat_id", "assignee",
            "stage2_path", "grant_date", "grant_year").iter_rows()
    ]
    return out


def _last_decisions(named: pl.DataFrame) -> pl.DataFrame:
    """fda_id, last_decision_date (null without one) of the dated view's devices, one row each."""
    column = (pl.col(LAST_DECISION_DATE) if LAST_DECISION_DATE in named.columns
              else pl.lit(None, pl.Date).alias(LAST_DECISION_DATE))
    return named.select("fda_id", column).group_by("fda_id").agg(pl.col(LAST_DECISION_DATE).max())


def _reason(
    resolver: CompanyResolver,
    applicant: str | None,
    sponsor: str | None,
    assignee: str | None,
    granted: date | int | None,
    when: date | None,
    stage2_path: str | None,
    last: date | None = None,
) -> str:
    """Why the dated view has no company match for this pair (computed, never hand-written)."""
    targets = resolver.assignee_companies(assignee)
    if not targets:
        return "assignee resolves to no company"

    found = [m for name in (applicant, sponsor) if name
             for t in targets if (m := resolver.company_relation(name, None, t, granted)) is not None]
    if found:
        path = min(found, key=lambda m: (m.kind != "same", m.path.count("("))).path
        on_market, why = f"approved {when.isoformat() if when else '(date unknown)'}", "approved earlier"
        if last is not None and last != when:
            on_market, why = f"{on_market} and last decided {last.isoformat()}", "no longer changed by then"
        return f"device {on_market} before the path {path} holds (a device filed under today's owner but {why})"
    if stage2_path:
        return f"recovered only without dates: {stage2_path}"
    names = " / ".join(dict.fromkeys(n for n in (resolver.resolve(applicant), resolver.resolve(sponsor)) if n))
    return f"no ownership or alliance relation between {names} and {' + '.join(targets)} in the company tables"


def company_report(
    devices: pl.DataFrame,
    patents: pl.DataFrame,
    gold: pl.DataFrame,
    fda_pma: pl.DataFrame,
    resolver: CompanyResolver,
) -> dict[str, Any]:
    """Every figure of `meddevkg company-report` as one JSON-ready dict."""
    sponsors = fda_sponsors(fda_pma)
    sponsor = sponsor_resolution(devices, sponsors, resolver)
    gold_part = cross_company_gold(devices, patents, gold, sponsors, resolver, fda_decisions(fda_pma))
    s2, dt, own = gold_part["stage2"], gold_part["dated"], gold_part["ownership_only"]
    return {
        "sponsor_resolution_share": sponsor["share"],
        "sponsor_same_id_share": sponsor["same_id_share"],
        "n_devices": sponsor["n_devices"],
        "n_devices_with_sponsor": sponsor["n_with_sponsor"],
        "n_sponsor_misses": len(sponsor["misses"]),
        "n_gold_pairs": gold_part["n_gold"],
        "cross_company_gold_pairs": gold_part["n_cross"],
        "cross_company_gold_recovered": s2["cross_recovered"],
        "cross_company_gold_recovered_share": s2["cross_share"],
        "cross_company_gold_recovered_dated": dt["cross_recovered"],
        "cross_company_gold_recovered_share_dated": dt["cross_share"],
        "gold_recovered_share": s2["gold_share"],
        "gold_recovered_share_dated": dt["gold_share"],
        "all_pairs": s2["all_pairs"],
        "exact_name_pairs": s2["exact_name_pairs"],
        "extra_company_pairs": s2["extra_pairs"],
        "extra_company_pairs_dated": dt["extra_pairs"],
        "cross_company_gold_recovered_by_kind": s2["cross_by_kind"],
        "cross_company_gold_recovered_share_ownership_only": own["cross_share"],
        "extra_company_pairs_ownership_only": own["extra_pairs"],
        "detail": {"sponsor": sponsor, "gold": gold_part},
    }


# --------------------------------------------------------------------------- output


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its lists: the one-line JSON summary."""
    return {k: v for k, v in report.items() if k != "detail"}


def format_company_report(report: dict[str, Any]) -> str:
    """A readable summary with the lists, then the headline figures as one JSON line."""
    sp, gd = report["detail"]["sponsor"], report["detail"]["gold"]
    s2, dt, own = gd["stage2"], gd["dated"], gd["ownership_only"]
    lines = [
        "company report",
        f"  sponsor resolution        {percent(sp['share'])} ({sp['same_company']}/{sp['n_with_sponsor']} devices "
        f"with a raw FDA sponsor resolve to the applicant's company: same id {sp['same_id']}, acquisition lineage "
        f"{sp['same_company'] - sp['same_id']}); {sp['n_without_sponsor']} device(s) without an FDA record",
        f"  cross-company gold        {gd['n_cross']} of {gd['n_gold']} gold pairs have assignee != applicant",
        f"    Stage 2 (corpus names, corpus dates)   recovered {s2['cross_recovered']} = "
        f"{percent(s2['cross_share'])}; all gold {percent(s2['gold_share'])}",
        f"    dated (+ raw sponsor, FDA dates)       recovered {dt['cross_recovered']} = "
        f"{percent(dt['cross_share'])}; all gold {percent(dt['gold_share'])}",
        f"      by relation {s2['cross_by_kind']}",
        f"    ownership only (no former owners, no alliances) recovered {own['cross_recovered']} = "
        f"{percent(own['cross_share'])}; extra pairs {own['extra_pairs']} (Stage 2: {s2['extra_pairs']})",
        f"  pairs                     {s2['all_pairs']} device x patent; plain name equality {s2['exact_name_pairs']}",
        f"    Stage 2 company matches {s2['company_pairs']}, extra {s2['extra_pairs']} {s2['extra_by_kind']}, "
        f"exact pairs lost {s2['exact_pairs_lost']}",
        f"    dated company matches   {dt['company_pairs']}, extra {dt['extra_pairs']} {dt['extra_by_kind']}, "
        f"exact pairs lost {dt['exact_pairs_lost']}",
        "",
        f"sponsors not resolving to the applicant's company ({len(sp['misses'])}):",
    ]
    lines += [f"  {m['fda_id']}  sponsor {m['sponsor']!r} -> {m['sponsor_id']}  |  applicant {m['applicant']!r} -> "
              f"{m['applicant_id']}" for m in sp["misses"][:_MAX_LISTED]]
    lines += ["", "cross-company gold recovered (Stage 2 view):"]
    lines += [f"  {r['n']:>3}  {r['applicant']} / {r['assignee']}: {r['match_kind']} {r['company_path']}"
              for r in s2["cross_by_path"]]
    lines += ["", f"cross-company gold not recovered by the dated view ({len(gd['unrecovered'])}):"]
    lines += [f"  {u['fda_id']} {u['pat_id']}  {u['applicant']} / {u['assignee']}  approved {u['decision_date']}  "
              f"Stage 2: {'yes' if u['stage2_path'] else 'no'}  - {u['reason']}"
              for u in gd["unrecovered"][:_MAX_LISTED]]
    rejected = report["detail"].get("fda_pma_rejected", [])
    if rejected:
        lines += ["", f"FDA records rejected, not counted ({len(rejected)}):"]
        lines += [f"  {r['record_key']}  {r['reason']}" for r in rejected[:_MAX_LISTED]]
    lines += ["", json.dumps(headline(report), default=str)]
    return "\n".join(lines)


def main_company_report(
    corpus_dir: str | Path, fda_pma_path: str | Path, out: str | Path | None = None, former_owners: bool = True
) -> dict[str, Any]:
    """Read a corpus directory and fdadata_pma.parquet, compute the report, optionally write it as JSON.
    The report records the files read, with their bytes' digest (`inputs`, as a benchmark's report.json)."""
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.dossier import read_pma_file, readable_pma_rows

    corpus = read_corpus(corpus_dir)
    wanted = ["pma_number", "submission_number", "sponsor", "date_decision", "is_original", "supplement_number"]
    records, fda_file = read_fingerprinted(fda_pma_path, read_pma_file)
    fda = readable_pma_rows(records, Path(fda_pma_path).name)
    resolver = CompanyResolver.for_corpus(corpus_dir, former_owners=former_owners)
    report = company_report(corpus.devices, corpus.patents, corpus.gold_links,
                            fda.valid.select(c for c in wanted if c in fda.valid.columns), resolver)
    report["fda_pma_rejected"] = fda.rejected.height  # records it could not read, not counted
    report["detail"]["fda_pma_rejected"] = fda.rejected.select("record_key", "reason").to_dicts()
    report["inputs"] = inputs_json({**corpus.inputs, **resolver.inputs, "fda_pma": fda_file})
    if out is not None:
        with replaced_file(out) as tmp:
            tmp.write_text(json.dumps(report, indent=2, default=str))
    return report
