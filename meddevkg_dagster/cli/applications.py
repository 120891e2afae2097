"""The paper's applications on a finished run: `recall-rootcause`, `ma-discovery`, `trajectory`, and `views`,
the app_* DuckDB views over the store.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from meddevkg_dagster.cli.dagster_instance import default_db

if TYPE_CHECKING:
    from meddevkg_core.app_store import AppTables


def _app_tables(args: argparse.Namespace):
    """The run to answer on: a run/benchmark directory (--links) or the DuckDB store (--db, default)."""
    from meddevkg_core.app_store import from_duckdb, from_output_dir

    try:
        tables = from_output_dir(args.links, args.corpus) if args.links else from_duckdb(args.db or default_db())
    except FileNotFoundError as exc:
        raise SystemExit(str(exc)) from exc
    from dataclasses import replace

    if getattr(args, "fda_pma", None):
        from meddevkg_core.app_store import with_fda_decision_dates

        devices = tables.devices if tables.devices is not None else tables.links.select("fda_id").unique()
        tables = replace(tables, devices=with_fda_decision_dates(devices, args.fda_pma))
    if args.min_probability > 0:
        tables = replace(tables, links=tables.links.filter(pl.col("probability") >= args.min_probability))
    print(f"source: {tables.source}")
    if "rank" not in tables.links.columns:
        print("note: these links have no rank (written before links had one): patents are listed by probability")
    return tables


def _show(title: str, df: pl.DataFrame, limit: int) -> None:
    print(f"\n{title} ({df.height} rows{', first ' + str(limit) if df.height > limit else ''})")
    if df.height:  # a corpus without titles or dates would print columns of nulls
        df = df.select([c for c in df.columns if df[c].null_count() < df.height])
    with pl.Config(tbl_rows=limit, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200, fmt_table_cell_list_len=6):
        print(df.head(limit))


def recall_rootcause_command(args: argparse.Namespace) -> int:
    from meddevkg_core.applications import recall_root_cause

    tables = _app_tables(args)
    if args.device:
        causes = [recall_root_cause(tables.links, fda_id=args.device, devices=tables.devices, patents=tables.patents)]
    else:
        from meddevkg_core.http_client import SourceError
        from meddevkg_core.sources.openfda_recall import OpenFDARecallClient

        try:
            with OpenFDARecallClient() as client:
                records = client.by_recall_number(args.recall_number)
        except (SourceError, ValueError) as exc:
            raise SystemExit(str(exc)) from exc  # the message names the source
        for bad in client.rejected:
            print(f"openFDA record {bad['record_key']} set aside: {bad['reason']}")
        if not records:
            raise SystemExit(f"openFDA has no device recall {args.recall_number}")
        causes = [recall_root_cause(tables.links, recall=r, devices=tables.devices, patents=tables.patents)
                  for r in records]
    for cause in causes:
        if cause.recall:
            print("\nrecall " + "; ".join(f"{k}={v}" for k, v in cause.recall.items() if v not in (None, "", [])))
            if cause.recall["pma_numbers_from"] == "product_code":
                print(f"note: the recall names no PMA or 510(k) number; these PMA numbers come from its product "
                      f"code {cause.recall['product_code']} (openFDA's openfda block: every PMA of the code), not "
                      "from the recall")
        if cause.unknown:
            print(f"not in this link set: {', '.join(cause.unknown)}")
        if cause.recall and not cause.recall["pma_numbers"]:
            print("the recall names no PMA number" + (" (a 510(k) recall: k_numbers)" if cause.recall["k_numbers"]
                                                      else "") + ": nothing to trace")
            continue
        if not cause.fda_ids:
            print("no device of this link set is named: nothing to trace")
            continue
        _show(f"patents linked to {', '.join(cause.fda_ids)}", cause.patents, args.limit)
        _show("other devices sharing those patents (by number shared)", cause.shared_devices, args.limit)
    return 0 if any(c.fda_ids for c in causes) else 1


def _unknown_device(tables: AppTables, fda_id: str) -> bool:
    """Say so when the device is not in the link set or its corpus, as recall-rootcause does."""
    from meddevkg_core.applications import known_devices

    if fda_id in known_devices(tables.links, tables.devices):
        return False
    print(f"not in this link set: {fda_id}")
    return True


def ma_discovery_command(args: argparse.Namespace) -> int:
    from meddevkg_core.applications import acquired_patents, approval_date

    tables = _app_tables(args)
    if _unknown_device(tables, args.device):
        return 1
    out = acquired_patents(tables.links, tables.company_paths, args.device)
    if tables.company_paths.height == 0:
        print("note: this source has no company paths (candidates table), so no acquisition can be shown")
    approved = approval_date(tables.devices, args.device)
    print(f"FDA approval of {args.device}: {approved or 'unknown (the devices table has no date for it)'}")
    if approved and (later := out.filter(pl.col("latest_close_date") > approved).height):
        print(f"note: {later} of these links come through a deal that closed after that approval")
    _show(f"patents linked to {args.device} through an acquisition", out.drop("deal_dates", "fda_id"), args.limit)
    if out.height:
        by = (out.group_by("company_path", "latest_close_date").len("n_patents")
              .sort("n_patents", "company_path", descending=[True, False]))  # group_by's order changes per call
        _show("by acquisition path", by, args.limit)
    return 0


def trajectory_command(args: argparse.Namespace) -> int:
    from meddevkg_core.applications import plot_trajectory, trajectory

    tables = _app_tables(args)
    if _unknown_device(tables, args.device):
        return 1
    traj = trajectory(tables.links, tables.patents, args.device, tables.devices)
    print(f"{traj.patents.height} linked patents; FDA approval year: {traj.decision_year or 'unknown'}")
    for note in traj.notes:
        print(f"note: {note}")
    if traj.decision_year is None and not args.fda_pma:
        print("note: the devices table has no approval date for it; --fda-pma fdadata_pma.parquet reads FDA's")
    _show("linked patents per year", traj.counts, traj.counts.height)  # a year per row: printed whole
    _show("linked patents", traj.patents, args.limit)
    if args.png:
        print(f"wrote {plot_trajectory(traj, args.png)}")
    return 0


def views_command(args: argparse.Namespace) -> int:
    import duckdb

    from meddevkg_core.app_store import create_application_views

    db = Path(args.db or default_db())
    if not db.is_file():
        raise SystemExit(f"{db}: no DuckDB store (run `meddevkg demo` first)")
    with duckdb.connect(str(db)) as con:
        counts = create_application_views(con)
    for name, n in counts.items():
        print(f"meddevkg.{name}: {n} rows")
    query = (f"import duckdb; duckdb.connect({json.dumps(str(db))}, read_only=True)"
             '.sql("select * from meddevkg.app_shared_patents limit 10").show()')
    print(f"query them with: {shlex.quote(sys.executable)} -c {shlex.quote(query)}")  # no duckdb CLI is installed
    return 0
