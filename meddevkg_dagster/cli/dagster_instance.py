"""`demo` and `partitions`: the commands on the Dagster instance that `dagster dev` shows, and what scripts share
with them: the instance's home, a corpus materialised, partitions registered and removed, and the `dagster`
command lines that show what a run wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from meddevkg_core.home import home_dir
from meddevkg_core.report import percent
from meddevkg_dagster.cli.pipeline_setup import require_trainable_gold

if TYPE_CHECKING:
    from dagster import DagsterEvent


def _prepare_instance_home() -> Path:
    """DAGSTER_HOME for CLI runs, seeded with the project's dagster.yaml so the UI sees the runs."""
    dagster_home = Path(os.environ.get("DAGSTER_HOME", home_dir() / "dagster_home")).resolve()
    dagster_home.mkdir(parents=True, exist_ok=True)
    project_yaml = Path(__file__).resolve().parents[2] / "dagster.yaml"
    if project_yaml.is_file() and not (dagster_home / "dagster.yaml").exists():
        shutil.copy(project_yaml, dagster_home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    return dagster_home


def run_failure(events: Sequence[DagsterEvent]) -> str:
    """Where and why a run failed, in one line: the first failed step (or its resources) and the error's own
    message, without the exception's class or pydantic's frame, as the command's last line (the run's
    exception escaping the command ended it in a traceback)."""
    import dagster as dg

    kinds = (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RESOURCE_INIT_FAILURE)
    failed = next((e for e in events if e.event_type in kinds), None)
    error = getattr(failed.event_specific_data, "error", None) if failed else None
    if failed is None or error is None:
        return "a point the run's events do not name"
    text = error.message.strip()
    if "Value error, " in text:  # a pydantic validation error: the validator's own message
        reason = text.split("Value error, ", 1)[1].split(" [type=", 1)[0]
    else:
        reason = re.sub(r"^[\w.]+: ", "", text.splitlines()[0])
    return f"{'step ' + failed.step_key if failed.step_key else 'its resources'}: {reason}"


def ensure_store_schema(db: Path) -> None:
    """Rebuild a DuckDB store written under other table schemas (older code) before a full run.

    The IO manager replaces partitions with DELETE + INSERT, and refuses a partitioned table whose
    columns changed; a full-graph run rewrites every table, so dropping them first loses nothing.
    """
    import duckdb

    from meddevkg_core.schemas import fingerprint

    db.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(db)) as con:
        con.execute("create schema if not exists meddevkg_meta")
        con.execute("create table if not exists meddevkg_meta.store (schema_fingerprint varchar)")
        stamp = con.execute("select schema_fingerprint from meddevkg_meta.store").fetchone()
        [(tables,)] = con.execute(
            "select count(*) from information_schema.tables where table_schema = 'meddevkg'").fetchall()
        if stamp and stamp[0] == fingerprint():
            return
        if tables:
            print(f"{db} was written by another version of the table schemas: rebuilding its tables")
            con.execute("drop schema if exists meddevkg cascade")
        con.execute("delete from meddevkg_meta.store")
        con.execute("insert into meddevkg_meta.store values (?)", [fingerprint()])


def materialize_corpus(corpus_dir: Path | None = None) -> dict[str, str]:
    """Register the corpus's patent years and devices as partitions, then run `patents_job` over every
    year and `meddevkg_job` over every device (each one run)."""
    import dagster as dg

    if corpus_dir is not None:
        os.environ["MEDDEVKG_CORPUS"] = str(Path(corpus_dir).resolve())
    _prepare_instance_home()
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.patent_years import year_keys
    from meddevkg_dagster.definitions import defs
    from meddevkg_dagster.partitions import PATENT_YEARS, PMA_DEVICES, range_tags
    from meddevkg_dagster.resources import setting_value

    resources = defs.resources
    assert resources is not None  # build_definitions always gives the resources
    corpus_path = setting_value(resources["corpus"].path)
    wanted = os.environ.get("MEDDEVKG_CORPUS")
    if wanted and Path(wanted).resolve() != Path(corpus_path).resolve():  # never run another corpus silently
        raise RuntimeError(f"this process's Dagster definitions were built for the corpus {corpus_path}, not "
                           f"MEDDEVKG_CORPUS={wanted}: materialise it in a new process")
    corpus = read_corpus(corpus_path)
    require_trainable_gold(corpus, corpus_path)
    devices = corpus.devices["fda_id"].sort().to_list()
    instance = dg.DagsterInstance.get()
    years = register_partitions(instance, PATENT_YEARS, year_keys(corpus.patents))
    keys = register_partitions(instance, PMA_DEVICES, devices)
    if not set(keys) <= set(devices):
        raise SystemExit(f"the instance has device partitions the corpus lacks ({len(set(keys) - set(devices))}); "
                         "use a separate MEDDEVKG_HOME per corpus")
    ensure_store_schema(Path(setting_value(resources["io_manager"].database)))
    run_ids = []
    for job, part in (("patents_job", years), ("meddevkg_job", keys)):
        result = defs.resolve_job_def(job).execute_in_process(
            instance=instance, run_config={"loggers": {"console": {"config": {"log_level": "INFO"}}}},
            tags=range_tags(part[0], part[-1]), raise_on_error=False)
        if not result.success:
            raise SystemExit(f"the {job} run failed at {run_failure(result.all_events)} "
                             "(the log above has the details)")
        run_ids.append(result.run_id)
    return {"run_id": run_ids[-1], "patents_run_id": run_ids[0]}


def register_partitions(instance, name: str, wanted: list[str]) -> list[str]:
    """Add the missing keys to a dynamic partitions definition; all its keys, in the instance's order."""
    known = set(instance.get_dynamic_partitions(name))
    if new := [k for k in wanted if k not in known]:
        instance.add_dynamic_partitions(name, new)
    keys = instance.get_dynamic_partitions(name)
    print(f"{name}: registered {len(new)} new partition(s); {len(keys)} in total")
    return keys


def demo_command(_: argparse.Namespace) -> int:
    import duckdb

    run = materialize_corpus()
    db = str(default_db())
    with duckdb.connect(db, read_only=True) as con:
        ev = con.sql("select * from meddevkg.link_evaluation").pl().row(0, named=True)
        top = con.sql("""select l.fda_id, l.pat_id, round(l.probability, 3) as p, l.evidence
                         from meddevkg.reranked_links l where l.decision order by l.probability desc limit 5""").pl()
    print("\nMedDevKG demo")
    rows = [("devices", ev["n_devices"]), ("patents", ev["n_patents"]),
            ("candidates (Stage 2)", ev["pool_size"]), ("links (Stage 3)", ev["n_links"]),
            ("gold pairs / devices", f"{ev['n_gold_pairs']} / {ev['n_gold_devices']}"),
            ("pool recall on gold", percent(ev["pool_recall"])),
            ("link recall on gold (out-of-fold)", percent(ev["link_recall"])),
            ("share of all pairs kept", percent(ev["link_share_of_pairs"])),
            ("DuckDB file", db), ("Dagster run", run["run_id"]),
            ("open the UI", ui_hint(os.environ))]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    print("\nstrongest links:")
    with pl.Config(tbl_rows=5, fmt_str_lengths=90, tbl_width_chars=160):
        print(top)
    return 0


_WORKSPACE = Path(__file__).resolve().parents[2] / "workspace.yaml"
_PATH_SETTINGS = ("MEDDEVKG_CORPUS", "MEDDEVKG_DUCKDB", "MEDDEVKG_EMBEDDING_CACHE", "MEDDEVKG_FDA_PMA",
                  "MEDDEVKG_PATENTSVIEW_BULK_DIR")
_MODEL_SETTINGS = ("MEDDEVKG_EMBEDDING_MODEL", "MEDDEVKG_CROSS_ENCODER")  # names, or paths, comma-separated
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def _absolute(name: str, value: str) -> str:
    if name in _PATH_SETTINGS and value:
        return str(Path(value).resolve())
    if name in _MODEL_SETTINGS:
        return ",".join(str(Path(v).resolve()) if v and Path(v).exists() else v for v in value.split(","))
    return value


def ui_hint(environ: Mapping[str, str]) -> str:
    """Where to see this run: `dagster dev` over a local (SQLite) instance; a deployed instance
    (Postgres, docker/) has its webserver already, and a `dagster dev` on it would start a second daemon."""
    import dagster as dg
    from dagster._core.storage.runs import InMemoryRunStorage, SqliteRunStorage

    with dg.DagsterInstance.get() as instance:
        local = isinstance(instance.run_storage, SqliteRunStorage | InMemoryRunStorage)
    return ui_command(environ) if local else "the deployment's webserver, which shows this run now"


def ui_command(environ: Mapping[str, str]) -> str:
    """`dagster dev` on what this run wrote, from any directory (see `dagster_command`)."""
    # An installed package (not a checkout) has no workspace.yaml beside it: name the module instead.
    target = ["-w", str(_WORKSPACE)] if _WORKSPACE.is_file() else ["-m", "meddevkg_dagster.definitions"]
    return dagster_command(environ, ["dev", *target])


def dagster_command(environ: Mapping[str, str], args: list[str]) -> str:
    """A `dagster` command line with this process's settings: the code location reads its corpus,
    store and models from the MEDDEVKG_* settings and the instance from DAGSTER_HOME, so the command
    carries them (paths made absolute) and works from any directory. A secret's value is never
    printed; its name is, so the user exports it in that shell too."""
    settings = {"MEDDEVKG_HOME": str(home_dir(environ))}
    secrets = []
    for name, value in sorted(environ.items()):
        if not name.startswith("MEDDEVKG_") or name == "MEDDEVKG_HOME":
            continue
        if any(word in name for word in _SECRET_WORDS):
            secrets.append(name)
        else:
            settings[name] = _absolute(name, value)
    settings["DAGSTER_HOME"] = environ["DAGSTER_HOME"]
    dagster = Path(sys.executable).parent / "dagster"
    line = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in settings.items()),
                     shlex.quote(str(dagster if dagster.is_file() else "dagster")), *map(shlex.quote, args)])
    return line + (f"  (with {', '.join(secrets)} exported)" if secrets else "")


def default_db() -> Path:
    """The store the commands use unless --db names one: $MEDDEVKG_DUCKDB, else $MEDDEVKG_HOME/warehouse.duckdb."""
    return Path(os.environ.get("MEDDEVKG_DUCKDB", home_dir() / "warehouse.duckdb"))


def partitions_command(args: argparse.Namespace) -> int:
    """Register device and grant-year partitions on the instance the CLI and `dagster dev` share, and
    print the run that materialises the new ones (a dynamic partition must exist before a run targets it)."""
    import dagster as dg

    from meddevkg_core.patent_years import parse_year_keys
    from meddevkg_dagster.partitions import PATENT_YEARS, PMA_DEVICES, key_ranges, patent_years, pma_devices

    def year_keys_of(option: str) -> list[str]:
        try:
            return parse_year_keys(getattr(args, option)) if getattr(args, option) else []
        except ValueError as exc:
            raise SystemExit(f"--{option.replace('_', '-')}: {exc}") from exc

    years, gone_years = year_keys_of("add_years"), year_keys_of("delete_years")
    devices = list(dict.fromkeys(pma_number(d) for d in args.add_devices or []))
    # as written too: a key registered before corpus ids were upper-cased may be lower-case
    gone_devices = list(dict.fromkeys(k for d in args.delete_devices or [] for k in (pma_number(d), d.strip())))
    print(f"instance: {_prepare_instance_home()}")
    jobs = {PATENT_YEARS: (years, "patents_job"), PMA_DEVICES: (devices, "device_links_job")}
    with dg.DagsterInstance.get() as instance:
        for definition, gone in ((patent_years, gone_years), (pma_devices, gone_devices)):
            if gone:
                remove_partitions(instance, definition, gone, default_db())
        for name, (wanted, job) in jobs.items():
            keys = register_partitions(instance, name, wanted) if wanted else instance.get_dynamic_partitions(name)
            if not wanted:
                print(f"{name}: {len(keys)} partition(s)" + (f", {keys[0]} .. {keys[-1]}" if keys else ""))
            for start, end in key_ranges(wanted, keys):  # one run per stretch of neighbouring keys
                print("  " + _job_command(job, start, end))
    return 0


def remove_partitions(instance, definition, keys: list[str], db: Path) -> dict[str, int]:
    """Delete the keys' rows from every table partitioned by `definition`, in one transaction, then
    the keys themselves: rows first, so a failure leaves partitions that a run can rebuild, never
    rows that no partition names. Keys already gone from the instance only lose their rows."""
    import duckdb

    from meddevkg_dagster.definitions import defs
    from meddevkg_dagster.partitions import PMA_DEVICES, stored_partition_tables
    from meddevkg_dagster.resources import WAREHOUSE_SCHEMA

    tables = stored_partition_tables(defs.resolve_asset_graph(), definition)
    deleted: dict[str, int] = {}
    if db.is_file():
        try:
            with duckdb.connect(str(db)) as con:
                stored = {t for (t,) in con.execute("select table_name from information_schema.tables "
                                                    "where table_schema = ?", [WAREHOUSE_SCHEMA]).fetchall()}
                con.begin()
                for table, expr in tables.items():
                    if table in stored:
                        [(deleted[table],)] = con.execute(  # its one row: the number deleted
                            f'delete from {WAREHOUSE_SCHEMA}."{table}" '
                            f"where list_contains(?::varchar[], cast({expr} as varchar))", [keys]).fetchall()
                con.commit()
        except duckdb.Error as exc:
            raise SystemExit(f"{db}: no row or partition was removed ({exc})") from exc
    else:  # nothing to delete here, but maybe rows in the store the deployment uses
        print(f"{db}: no store at this path (MEDDEVKG_DUCKDB, MEDDEVKG_HOME): only the partition keys are removed")
    registered = set(instance.get_dynamic_partitions(definition.name))
    for key in keys:
        if key in registered:
            instance.delete_dynamic_partition(definition.name, key)
    absent = [k for k in keys if k not in registered]
    print(f"{definition.name}: removed {len(keys) - len(absent)} partition(s) and {sum(deleted.values())} row(s) "
          f"from {sum(1 for n in deleted.values() if n)} table(s)"
          + (f"; not partitions here (rows only): {', '.join(absent)}" if absent else ""))
    for table, n in sorted(deleted.items()):
        if n:
            print(f"  {WAREHOUSE_SCHEMA}.{table}: {n}")
    if devices := instance.get_dynamic_partitions(PMA_DEVICES):  # what read every partition still counts them
        print("  the assets that read every partition (the graph, the reranker, the evaluation, other devices' "
              "pools) still include them until meddevkg_job runs again:")
        print("  " + _job_command("meddevkg_job", devices[0], devices[-1]))
    return deleted


def _job_command(job: str, start: str, end: str) -> str:
    """The `dagster job execute` line that runs `job` over the partition range start..end."""
    from meddevkg_dagster.partitions import range_tags

    return dagster_command(os.environ, ["job", "execute", "-m", "meddevkg_dagster.definitions", "-j", job,
                                        "--tags", json.dumps(range_tags(start, end))])


def pma_number(value: str) -> str:
    """A PMA number as typed (' p130021 ') as the corpus stores device ids ('P130021'), for --device and partitions."""
    return value.strip().upper()
