"""The paper's cardiovascular device selection over FDA PMA originals, and how it compares to the 434.

METHOD.md §0: an original passes if its generic or trade name contains one of 24 keywords
(case-insensitive substring) or its product code is on the paper's list; 29 non-cardiovascular
entries were then removed by hand. The rules live as data in `meddevkg_core/data/selection/`
(README there says where each entry comes from). Two parts of the paper cannot be recovered: the
code list is printed with an ellipsis (22 codes shown), and the 29 removed ids are unpublished, so
the exclusion list approximates the orthopaedic, dental and ophthalmology removals by committee.
`compare_selection` measures the result against the benchmark and gives a reason for every miss.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from datetime import date
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import BaseModel

from meddevkg_core.atomic_files import replaced_file
from meddevkg_core.corpus import required_table, validate_table
from meddevkg_core.dossier import read_pma_file, readable_pma_rows
from meddevkg_core.lineage import inputs_json, read_fingerprinted
from meddevkg_core.raw_files import read_parquet, read_raw, reading
from meddevkg_core.sources.pma_records import canonical_pma, devices_from_pma

CARDIOVASCULAR = "CV"
_MAX_LISTED = 200


class Exclusion(BaseModel, frozen=True):
    kind: Literal["advisory_committee", "product_code", "pma_number"]
    value: str
    category: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.value} ({self.category})"


class SelectionRules(BaseModel, frozen=True):
    """Keywords, product codes and exclusions; `advisory_committees` and the cut-off are opt-in extras."""

    keywords: tuple[str, ...]
    product_codes: frozenset[str]
    exclusions: tuple[Exclusion, ...] = ()
    advisory_committees: frozenset[str] = frozenset()  # not the paper's: also select whole committees
    decided_on_or_before: date | None = None  # not the paper's: a data snapshot date


def _read_csv(name: str) -> list[dict[str, str]]:
    text = (resources.files("meddevkg_core") / "data" / "selection" / name).read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))


@cache
def paper_rules() -> SelectionRules:
    """The rules as published (METHOD.md §0), read from the packaged CSV files."""
    return SelectionRules(
        keywords=tuple(r["keyword"].strip().lower() for r in _read_csv("keywords.csv")),
        product_codes=frozenset(r["product_code"].strip().upper() for r in _read_csv("product_codes.csv")),
        exclusions=tuple(Exclusion(kind=r["kind"], value=r["value"].strip().upper(), category=r["category"])
                         for r in _read_csv("exclusions.csv")),
    )


def annotate_originals(pma: pl.DataFrame, rules: SelectionRules | None = None) -> pl.DataFrame:
    """Every original (one per PMA number) with why it is or is not selected.

    Input: an fdadata_pma or openFDA-named PMA table (see `canonical_pma`). Added columns:
    `keyword` (first keyword found), `on_code_list`, `in_committee`, `matched` (any of the three),
    `excluded_by`, `after_cutoff`, `selected`. Duplicate originals keep the latest decision_date,
    then the greatest trade name.
    """
    rules = rules or paper_rules()
    originals = (canonical_pma(pma).filter(pl.col("supplement_number").is_null() & pl.col("pma_number").is_not_null())
                 .sort("pma_number", "decision_date", "trade_name", nulls_last=False)
                 .unique("pma_number", keep="last", maintain_order=True))
    pattern = "(" + "|".join(re.escape(k) for k in rules.keywords) + ")" if rules.keywords else "(?!)"
    names = pl.concat_str([pl.col("generic_name").fill_null(""), pl.col("trade_name").fill_null("")],
                          separator=" | ").str.to_lowercase()
    excluded_by = pl.lit(None, pl.String)
    for rule in reversed(rules.exclusions):
        hit = pl.col(rule.kind).str.strip_chars().str.to_uppercase() == rule.value
        excluded_by = pl.when(hit.fill_null(False)).then(pl.lit(rule.label)).otherwise(excluded_by)
    cutoff = (pl.col("decision_date") > rules.decided_on_or_before).fill_null(False) \
        if rules.decided_on_or_before else pl.lit(False)
    df = originals.with_columns(
        names.str.extract(pattern, 1).alias("keyword"),
        pl.col("product_code").str.strip_chars().str.to_uppercase().is_in(sorted(rules.product_codes))
        .fill_null(False).alias("on_code_list"),
        pl.col("advisory_committee").str.strip_chars().str.to_uppercase().is_in(sorted(rules.advisory_committees))
        .fill_null(False).alias("in_committee"),
        excluded_by.alias("excluded_by"),
        cutoff.alias("after_cutoff"),
    )
    df = df.with_columns((pl.col("keyword").is_not_null() | pl.col("on_code_list") | pl.col("in_committee"))
                         .alias("matched"))
    return df.with_columns((pl.col("matched") & pl.col("excluded_by").is_null() & ~pl.col("after_cutoff"))
                           .alias("selected"))


def select_originals(pma: pl.DataFrame, rules: SelectionRules | None = None) -> pl.DataFrame:
    """The selected originals (PMA columns plus the annotation), sorted by PMA number."""
    return annotate_originals(pma, rules).filter(pl.col("selected")).sort("pma_number")


def benchmark_snapshot(pma: pl.DataFrame, benchmark_ids: list[str]) -> date | None:
    """Latest approval date among benchmark devices: when the paper's FDA data was taken.

    Originals dated after their own first supplement are skipped as unreliable (fdadata has four,
    e.g. P130030 "decided" 2026-03-10 with supplements from 2014).
    """
    canon = canonical_pma(pma)
    first_supplement = (canon.filter(pl.col("supplement_number").is_not_null()).group_by("pma_number")
                        .agg(pl.col("decision_date").min().alias("_first")))
    dated = (canon.filter(pl.col("supplement_number").is_null() & pl.col("pma_number").is_in(benchmark_ids))
             .join(first_supplement, on="pma_number", how="left")
             .filter(pl.col("_first").is_null() | (pl.col("decision_date") <= pl.col("_first"))))
    return dated["decision_date"].max()  # type: ignore[return-value]


def _row_note(row: dict[str, Any], codes: dict[str, dict[str, Any]]) -> str:
    code = row.get("product_code") or "-"
    info = codes.get(code, {})
    foiclass = f" [{info.get('review_panel')}: {info.get('device_type_name')}]" if info else ""
    return (f"{row.get('decision_date')} committee {row.get('advisory_committee') or '-'} code {code}{foiclass} "
            f"{row.get('decision_code') or ''} | {row.get('generic_name') or ''} | {row.get('trade_name') or ''}")


def _only_selection_reason(row: dict[str, Any], snapshot: date | None) -> str:
    if snapshot is not None and row["decision_date"] is not None and row["decision_date"] > snapshot:
        return "approved after the benchmark snapshot"
    if (row.get("advisory_committee") or "") != CARDIOVASCULAR:
        return "outside the cardiovascular committee (likely one of the paper's unpublished hand removals)"
    return "cardiovascular, approved before the snapshot, yet not in the benchmark (unexplained)"


def _only_benchmark_reason(fda_id: str, row: dict[str, Any] | None, known: set[str]) -> str:
    if fda_id not in known:
        return "not in the FDA records"
    if row is None:
        return "no original row in the FDA records (supplements only)"
    if row["excluded_by"] is not None:
        return f"excluded: {row['excluded_by']}"
    if row["after_cutoff"]:
        return "approved after the decided_on_or_before cut-off"
    return "no keyword in its names and its product code is not on the list"


def compare_selection(fda_pma: pl.DataFrame, product_codes: pl.DataFrame, benchmark_devices: pl.DataFrame,
                      rules: SelectionRules | None = None) -> dict[str, Any]:
    """Selected originals vs the benchmark devices: counts, overlap and a reason for every miss.

    `product_codes` (fdadata_product_codes / foiclass) only annotates the notes with each code's
    review panel and device name.
    """
    rules = rules or paper_rules()
    annotated = annotate_originals(fda_pma, rules)
    canon = canonical_pma(fda_pma)
    known = set(canon["pma_number"].drop_nulls().to_list())
    bench = sorted(set(benchmark_devices["fda_id"].cast(pl.String).str.strip_chars().str.to_uppercase().to_list()))
    by_id = {r["pma_number"]: r for r in annotated.to_dicts()}
    selected = sorted(annotated.filter(pl.col("selected"))["pma_number"].to_list())
    codes = {r["product_code"]: r for r in product_codes.to_dicts()} if "product_code" in product_codes.columns else {}
    snapshot = benchmark_snapshot(fda_pma, bench)
    bench_set, selected_set = set(bench), set(selected)
    only_sel = [{"fda_id": i, "reason": _only_selection_reason(by_id[i], snapshot), "note": _row_note(by_id[i], codes)}
                for i in selected if i not in bench_set]
    only_bench = [{"fda_id": i, "reason": _only_benchmark_reason(i, by_id.get(i), known),
                   "note": _row_note(by_id[i], codes) if i in by_id else ""} for i in bench if i not in selected_set]
    chosen = annotated.filter(pl.col("selected"))
    kw, code, committee = chosen["keyword"].is_not_null(), chosen["on_code_list"], chosen["in_committee"]
    plus_cv = rules.model_copy(update={"advisory_committees": frozenset({CARDIOVASCULAR})})
    with_cv = annotate_originals(fda_pma, plus_cv)
    cv_ids = set(with_cv.filter(pl.col("selected"))["pma_number"].to_list())
    return {
        "fda_records": fda_pma.height,
        "fda_originals": annotated.height,
        "fda_pma_numbers_without_original": len(known) - annotated.height,
        "selected": len(selected),
        "benchmark": len(bench),
        "overlap": len(selected_set & bench_set),
        "only_selection": len(only_sel),
        "only_benchmark": len(only_bench),
        "only_selection_reasons": dict(Counter(r["reason"] for r in only_sel).most_common()),
        "only_benchmark_reasons": dict(Counter(r["reason"] for r in only_bench).most_common()),
        "benchmark_snapshot": snapshot.isoformat() if snapshot else None,
        "selected_by": {"keyword_only": int((kw & ~code).sum()), "product_code_only": int((code & ~kw).sum()),
                        "keyword_and_product_code": int((kw & code).sum()),
                        "committee_only": int((committee & ~kw & ~code).sum())},
        "excluded": dict(Counter(annotated.filter(pl.col("matched"))["excluded_by"].drop_nulls().to_list())
                         .most_common()),
        "variant_with_cv_committee": {"selected": len(cv_ids), "overlap": len(cv_ids & bench_set)},
        "rules": {"keywords": len(rules.keywords), "product_codes": len(rules.product_codes),
                  "exclusions": len(rules.exclusions), "advisory_committees": sorted(rules.advisory_committees),
                  "decided_on_or_before": rules.decided_on_or_before.isoformat() if rules.decided_on_or_before
                  else None},
        "detail": {"only_selection": only_sel, "only_benchmark": only_bench},
    }


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its lists: the one-line JSON summary."""
    return {k: v for k, v in report.items() if k != "detail"}


def format_selection_report(report: dict[str, Any]) -> str:
    """A readable summary with every miss and its reason, then the headline as one JSON line."""
    variant = report["variant_with_cv_committee"]
    lines = [
        "device selection (METHOD.md §0: keywords or product code, minus exclusions; originals only)",
        f"  FDA records           {report['fda_records']} rows, {report['fda_originals']} originals, "
        f"{report['fda_pma_numbers_without_original']} PMA numbers with supplements only",
        f"  selected              {report['selected']} originals {report['selected_by']}",
        f"  excluded              {report['excluded']}",
        f"  benchmark             {report['benchmark']} devices; overlap {report['overlap']}; "
        f"only selected {report['only_selection']}; only benchmark {report['only_benchmark']}",
        f"  benchmark snapshot    {report['benchmark_snapshot']} (latest approval among benchmark devices)",
        f"  + committee CV        would select {variant['selected']}, overlap {variant['overlap']}",
        "",
        "only in the selection, by reason:",
    ]
    lines += [f"  {n:>4}  {reason}" for reason, n in report["only_selection_reasons"].items()]
    lines += ["", "only in the benchmark, by reason:"]
    lines += [f"  {n:>4}  {reason}" for reason, n in report["only_benchmark_reasons"].items()]
    for what, rows in (("FDA records", "fda_pma_rejected"), ("benchmark rows", "benchmark_rejected")):
        rejected = report["detail"].get(rows, [])
        if rejected:
            lines += ["", f"{what} rejected, not counted ({len(rejected)}):"]
            lines += [f"  {r['record_key']}  {r['reason']}" for r in rejected[:_MAX_LISTED]]
    for side in ("only_selection", "only_benchmark"):
        rows = report["detail"][side]
        lines += ["", f"{side.replace('_', ' ')} ({len(rows)}):"]
        lines += [f"  {r['fda_id']:<8} {r['reason']}  -  {r['note']}" for r in rows[:_MAX_LISTED]]
    lines += ["", json.dumps(headline(report), default=str)]
    return "\n".join(lines)


def main_select_devices(fda_pma_path: str | Path, product_codes_path: str | Path, benchmark_dir: str | Path,
                        out_path: str | Path | None = None) -> dict[str, Any]:
    """Read fdadata_pma / fdadata_product_codes / the devices table of `benchmark_dir` and compare; with
    `out_path`, also write the selected originals as a corpus devices table (Parquet, schemas.DEVICES).
    Benchmark rows the corpus reader rejects (a blank or repeated id, no text, a bad date: what a
    benchmark run would not count either) are not counted: the report lists them under
    `benchmark_rejected`, as the FDA records it cannot read under `fda_pma_rejected`. A CorpusError
    names an input that cannot be read or is not what it should be. The report records the files read
    (`inputs`: path, size, SHA-256, as a benchmark's report.json); the devices table carries its FDA
    file's as Parquet key-value metadata (`inputs`, JSON), which the corpus reader leaves aside."""
    records, fda_file = read_fingerprinted(fda_pma_path, read_pma_file)
    fda = readable_pma_rows(records, Path(fda_pma_path).name)
    with reading(product_codes_path, " as FDA product codes"):
        product_codes, codes_file = read_fingerprinted(product_codes_path, read_parquet)
    devices_path = required_table(Path(benchmark_dir), "devices")
    # the corpus's rules, so a blank or repeated id is reported as the benchmark run would reject it
    raw, benchmark_file = read_fingerprinted(devices_path, read_raw)
    benchmark = validate_table(raw, "devices", source=str(devices_path))
    report = compare_selection(fda.valid, product_codes, benchmark.valid)
    for rows, rejected in (("fda_pma_rejected", fda.rejected), ("benchmark_rejected", benchmark.rejected)):
        report[rows] = rejected.height
        report["detail"][rows] = rejected.select("record_key", "reason").to_dicts()
    report["inputs"] = inputs_json({"fda_pma": fda_file, "product_codes": codes_file,
                                    "benchmark_devices": benchmark_file})
    if out_path is not None:
        path = Path(out_path)
        devices = devices_from_pma(select_originals(fda.valid))
        # the rows come from the FDA records alone (the code list and the benchmark only compare)
        lineage = {"inputs": json.dumps(inputs_json({"fda_pma": fda_file}))}
        with replaced_file(path) as tmp:
            devices.write_parquet(tmp, metadata=lineage)
        report["devices_written"] = {"path": str(path), "rows": devices.height}
    return report
