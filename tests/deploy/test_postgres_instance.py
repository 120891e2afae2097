"""The deployed instance settings (docker/dagster.yaml) against a real PostgreSQL server.

A throwaway server is initialised in a temporary directory and started on 127.0.0.1 (a free port,
password authentication); the demo is materialised through `meddevkg_dagster.cli.materialize_corpus`
in a subprocess whose DAGSTER_HOME holds a copy of docker/dagster.yaml, so the run, its asset
materialisations and the dynamic partitions must land in Postgres, exactly as in docker-compose.yml.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOYED_YAML = REPO / "docker" / "dagster.yaml"
LOCAL_YAML = REPO / "dagster.yaml"
PG_USER = "meddevkg_test"
PG_PASSWORD = "test-only-password"  # a throwaway server that lives for this module only
PG_DB = "dagster"


def _postgres_bin_dir() -> Path | None:
    """The directory with initdb and pg_ctl: PATH first, then the Debian layout (newest version)."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return Path(os.path.realpath(initdb)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    for initdb_path in reversed(candidates):
        bin_dir = Path(initdb_path).parent
        if (bin_dir / "pg_ctl").is_file():
            return bin_dir
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    port: int
    user: str
    password: str
    database: str

    def connect(self):
        import psycopg2

        return psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                                dbname=self.database, connect_timeout=10)

    def env(self) -> dict[str, str]:
        """The variables docker/dagster.yaml reads (docker-compose.yml sets the same names)."""
        return {"DAGSTER_POSTGRES_USER": self.user, "DAGSTER_POSTGRES_PASSWORD": self.password,
                "DAGSTER_POSTGRES_HOST": "127.0.0.1", "DAGSTER_POSTGRES_PORT": str(self.port),
                "DAGSTER_POSTGRES_DB": self.database}


@pytest.fixture(scope="module")
def postgres_server():
    bin_dir = _postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql/*/bin; "
                    "scripts/system_packages.sh installs the Debian package `postgresql`")
    prefix: list[str] = []
    owner = None
    if os.geteuid() == 0:  # initdb refuses to run as root: run the server as the `postgres` system user
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no `postgres` system user to run initdb/pg_ctl as "
                        "(the Debian package `postgresql` creates it)")
        if shutil.which("runuser") is None:
            pytest.skip("running as root without `runuser` to run initdb/pg_ctl as the `postgres` user")
        prefix = ["runuser", "-u", "postgres", "--"]

    # Directly under /tmp (world-traversable), not under pytest's root-only tmp tree, so that the
    # `postgres` user can reach its data and socket directories.
    base = Path(tempfile.mkdtemp(prefix="meddevkg-pg-"))
    data, sockets, log = base / "data", base / "sockets", base / "server.log"
    pwfile = base / "pwfile"
    sockets.mkdir()
    pwfile.write_text(PG_PASSWORD + "\n")
    if owner is not None:
        for path in (base, sockets, pwfile):
            os.chown(path, owner.pw_uid, owner.pw_gid)

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *args], cwd=base, capture_output=True, text=True, timeout=120, check=check)

    started = False
    try:
        init = run(str(bin_dir / "initdb"), "-D", str(data), "-U", PG_USER, f"--pwfile={pwfile}",
                   "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync",
                   check=False)
        assert init.returncode == 0, f"initdb failed:\n{init.stdout}\n{init.stderr}"
        for _attempt in range(3):  # the free port may be taken between choosing and binding it
            port = _free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets} "
                       "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            start = run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60",
                        "start", check=False)
            if start.returncode == 0:
                started = True
                break
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop", check=False)
        server_log = log.read_text() if log.exists() else ""
        assert started, f"pg_ctl start failed:\n{start.stdout}\n{start.stderr}\n{server_log}"

        import psycopg2

        admin = psycopg2.connect(host="127.0.0.1", port=port, user=PG_USER, password=PG_PASSWORD,
                                 dbname="postgres", connect_timeout=10)
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute(f'create database "{PG_DB}"')
        admin.close()
        yield PostgresServer(port=port, user=PG_USER, password=PG_PASSWORD, database=PG_DB)
    finally:
        if started:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop", check=False)
        shutil.rmtree(base, ignore_errors=True)


def _materialise_demo_in_subprocess(server: PostgresServer, root: Path) -> tuple[dict, float]:
    """`materialize_corpus()` in a fresh interpreter: env vars, caches and the instance stay there."""
    dagster_home = root / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(DEPLOYED_YAML, dagster_home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDDEVKG_", "DAGSTER_"))}
    env.update(server.env())
    env.update({"DAGSTER_HOME": str(dagster_home), "MEDDEVKG_HOME": str(root / "meddevkg_home"),
                "MEDDEVKG_EMBEDDING_MODEL": "hashing", "MEDDEVKG_DEVICE": "cpu", "HF_HUB_OFFLINE": "1",
                "DAGSTER_EVENT_BATCH_SIZE": "1000"})  # as docker-compose.yml sets it: batched inserts
    code = ("import json, os; from meddevkg_dagster.cli import materialize_corpus, ui_hint; "
            "print('RESULT ' + json.dumps({**materialize_corpus(), 'ui': ui_hint(os.environ)}))")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, f"materialize_corpus failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n" \
                                 f"{proc.stderr[-8000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"no result line in the output:\n{proc.stdout[-4000:]}"
    return json.loads(lines[-1].removeprefix("RESULT ")), elapsed


def test_demo_materialises_into_postgres(postgres_server: PostgresServer, tmp_path, monkeypatch):
    import dagster as dg
    from dagster._core.run_coordinator import QueuedRunCoordinator
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.demo import demo_corpus_dir
    from meddevkg_core.patent_years import year_keys

    result, elapsed = _materialise_demo_in_subprocess(postgres_server, tmp_path)
    run_id, patents_run_id = result["run_id"], result["patents_run_id"]
    assert "dagster dev" not in result["ui"]  # the deployment's webserver: no second daemon on its instance
    print(f"demo materialised through Postgres in {elapsed:.1f}s (runs {patents_run_id}, {run_id})")
    corpus = read_corpus(demo_corpus_dir())
    devices = set(corpus.devices["fda_id"].to_list())
    years = set(year_keys(corpus.patents))

    # The tables Dagster wrote, read straight from the server: patents_job, then meddevkg_job.
    materialised = {}
    with postgres_server.connect() as con, con.cursor() as cur:
        for run in (patents_run_id, run_id):
            cur.execute("select status from runs where run_id = %s", (run,))
            assert cur.fetchall() == [("SUCCESS",)]
            cur.execute("""select asset_key, count(*) from event_logs
                           where run_id = %s and dagster_event_type = 'ASSET_MATERIALIZATION' group by asset_key""",
                        (run,))
            materialised |= {tuple(json.loads(key)): n for key, n in cur.fetchall()}
            cur.execute("""select count(*) from event_logs
                           where run_id = %s and dagster_event_type in ('RUN_SUCCESS', 'PIPELINE_SUCCESS')""", (run,))
            assert cur.fetchone()[0] == 1
        cur.execute("select partitions_def_name, partition from dynamic_partitions")
        partitions = cur.fetchall()
    assert {p for name, p in partitions if name == "pma_devices"} == devices
    assert {p for name, p in partitions if name == "patent_years"} == years
    for key in [("pma_documents",), ("patents",), ("candidate_pool",), ("reranked_links",), ("link_evaluation",)]:
        assert key in materialised, f"{key} not materialised in Postgres; got {sorted(materialised)}"
    # A partitioned asset records one materialisation per partition (device or grant year), the others one.
    assert materialised[("reranked_links",)] == len(devices)
    assert materialised[("patent_embeddings",)] == len(years)
    assert materialised[("link_evaluation",)] == 1

    # Nothing went to the local SQLite layout.
    assert not (tmp_path / "dagster_home" / "history").exists()
    assert not list((tmp_path / "dagster_home").rglob("*.db"))

    # The same facts through a Dagster instance built from the deployed file.
    for name, value in postgres_server.env().items():
        monkeypatch.setenv(name, value)
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.is_success
        assert set(instance.get_dynamic_partitions("pma_devices")) == devices
        assert instance.get_latest_materialization_event(dg.AssetKey("link_evaluation")).run_id == run_id
        # The run queue enforces the local dagster.yaml's limits.
        local = yaml.safe_load(LOCAL_YAML.read_text())["concurrency"]
        queue = instance.get_concurrency_config().run_queue_config
        assert queue.max_concurrent_runs == local["runs"]["max_concurrent_runs"]
        assert not queue.tag_concurrency_limits and "tag_concurrency_limits" not in local["runs"]
        assert instance.get_concurrency_config().pool_config.default_pool_limit == local["pools"]["default_limit"]
