import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pytest

from meddevkg_core.errors import InputError
from meddevkg_core.schemas import fingerprint
from meddevkg_dagster.cli import ensure_store_schema, main, ui_command, ui_hint


def test_a_store_from_other_schemas_is_rebuilt_and_a_current_one_kept(tmp_path, capsys):
    db = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("create schema meddevkg; create table meddevkg.candidate_pool (fda_id varchar)")
    ensure_store_schema(db)
    assert "rebuilding" in capsys.readouterr().out
    with duckdb.connect(str(db)) as con:
        tables = "select count(*) from information_schema.tables where table_schema='meddevkg'"
        assert con.execute(tables).fetchone()[0] == 0
        assert con.execute("select schema_fingerprint from meddevkg_meta.store").fetchone()[0] == fingerprint()
        con.execute("create schema meddevkg; create table meddevkg.kept (x int)")
    ensure_store_schema(db)
    with duckdb.connect(str(db)) as con:
        assert con.execute("select count(*) from meddevkg.kept").fetchone()[0] == 0  # still there


def test_benchmark_refuses_a_corpus_without_gold(tmp_path):
    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,stent\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    try:
        main(["benchmark", "--corpus", str(tmp_path), "--out", str(tmp_path / "out")])
    except SystemExit as exc:
        assert "no gold_links" in str(exc)
    else:
        raise AssertionError("expected a clear refusal")


def test_a_corpus_whose_gold_was_lost_to_rejected_rows_says_why(tmp_path):
    (tmp_path / "devices.csv").write_text("fda_id,text,decision_date\nP1,stent,2015-03-02 00:00:00\n"
                                          "P2,valve,03/02/2015\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n2,valve\n")
    (tmp_path / "gold_links.csv").write_text("fda_id,pat_id\nP1,1\nP2,2\n")
    with pytest.raises(SystemExit) as refusal:
        main(["run", "--corpus", str(tmp_path), "--out", str(tmp_path / "out")])
    assert str(refusal.value).endswith(
        "The corpus reader rejected 4 row(s): 2 in devices.csv: unparseable decision_date (want YYYY-MM-DD); "
        "2 in gold_links: fda_id not among valid devices")


def _corpus_with_gold_for_one_device(root: Path) -> Path:
    (root / "devices.csv").write_text("fda_id,text\nP1,stent\nP2,valve\n")
    (root / "patents.csv").write_text("pat_id,text\n1,stent\n2,valve\n")
    (root / "gold_links.csv").write_text("fda_id,pat_id\nP1,1\nP9,2\n")  # P9: unknown, rejected
    return root


REFUSAL = "gold links for only 1 device; Stage 3 learns from gold links"


@pytest.mark.parametrize("command", ["run", "benchmark"])
def test_gold_for_a_single_device_is_refused_before_any_encoding(tmp_path, monkeypatch, command):
    import meddevkg_dagster.cli.pipeline_setup as pipeline_setup

    def no_models(*args):
        raise AssertionError("models were loaded: the refusal came too late")

    corpus = _corpus_with_gold_for_one_device(tmp_path)
    monkeypatch.setattr(pipeline_setup, "load_models", no_models)
    with pytest.raises(SystemExit, match=REFUSAL):
        main([command, "--corpus", str(corpus), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_demo_refuses_such_a_corpus_before_any_run(tmp_path):
    """In its own process: the definitions read MEDDEVKG_CORPUS when they are imported."""
    corpus = _corpus_with_gold_for_one_device(tmp_path)
    env = {**os.environ, "MEDDEVKG_CORPUS": str(corpus), "MEDDEVKG_HOME": str(tmp_path / "home")}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run([sys.executable, "-m", "meddevkg_dagster.cli", "demo"], env=env, capture_output=True,
                          text=True)
    assert done.returncode == 1 and REFUSAL in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "home" / "warehouse.duckdb").exists()


@pytest.mark.parametrize(("setting", "reason"), [
    ("MEDDEVKG_DEVICE", "its resources: MEDDEVKG_DEVICE='x' (the embedding_model resource's device): expected one "
                        "of auto, cpu, cuda"),
    ("MEDDEVKG_UMLS_MAX_SRL", "step meddevonto: MEDDEVKG_UMLS_MAX_SRL='x': expected a whole number")])
def test_a_demo_run_that_fails_ends_in_one_line_naming_the_job_where_and_why(tmp_path, setting, reason):
    # the run's own exception (a resource's or a step's) escaped the command as a traceback ending it
    env = {**os.environ, setting: "x", "MEDDEVKG_HOME": str(tmp_path / "home")}
    env.pop("DAGSTER_HOME", None)
    env.pop("MEDDEVKG_CORPUS", None)
    done = subprocess.run([sys.executable, "-m", "meddevkg_dagster.cli", "demo"], env=env, capture_output=True,
                          text=True)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("the patents_job run failed at ") and reason in last, \
        done.stderr[-3000:]


def _benchmark_without_running(tmp_path, monkeypatch, devices: str, gold: str):
    """A corpus in tmp_path and `meddevkg benchmark` with models and run stubbed: returns the
    command's first arguments and the list of (corpus, ablations) the run was called with."""
    import meddevkg_core.benchmark
    import meddevkg_dagster.cli.pipeline_setup as pipeline_setup

    (tmp_path / "devices.csv").write_text(devices)
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    (tmp_path / "gold_links.csv").write_text(gold)
    calls = []
    monkeypatch.setattr(pipeline_setup, "load_models", lambda *args: None)
    monkeypatch.setattr(meddevkg_core.benchmark, "run_benchmark",
                        lambda corpus, models, config, out, ablations=True, config_file=None: calls.append(
                            (corpus, ablations, config_file)) or SimpleNamespace(report={"ranking": {}}))
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("# report")
    return ["benchmark", "--corpus", str(tmp_path), "--out", str(out)], calls


def test_benchmark_no_ablations_reaches_the_run(tmp_path, monkeypatch):
    base, calls = _benchmark_without_running(tmp_path, monkeypatch, "fda_id,text\nP1,stent\nP2,valve\n",
                                             "fda_id,pat_id\nP1,1\nP2,1\n")
    for extra in ([], ["--no-ablations"]):
        main([*base, *extra])
    assert [ablations for _, ablations, _ in calls] == [True, False]


def test_benchmark_hands_the_config_files_fingerprint_to_the_report(tmp_path, monkeypatch):
    from meddevkg_core.lineage import fingerprint as file_fingerprint

    base, calls = _benchmark_without_running(tmp_path, monkeypatch, "fda_id,text\nP1,stent\nP2,valve\n",
                                             "fda_id,pat_id\nP1,1\nP2,1\n")
    (tmp_path / "seed_7.json").write_text('{"rerank": {"seed": 7}}')
    main(base)
    main([*base, "--config", str(tmp_path / "seed_7.json")])
    assert [config_file for _, _, config_file in calls] == [None, file_fingerprint(tmp_path / "seed_7.json")]
    assert calls[0][0].inputs.keys() == {"devices", "patents", "gold_links"}  # the corpus's, read once


def test_a_benchmark_into_an_out_another_run_holds_is_refused_at_its_start(tmp_path, monkeypatch, capsys, other_run):
    import meddevkg_dagster.cli.pipeline_setup as pipeline_setup

    base, calls = _benchmark_without_running(tmp_path, monkeypatch, "fda_id,text\nP1,stent\nP2,valve\n",
                                             "fda_id,pat_id\nP1,1\nP2,1\n")
    loaded = []
    monkeypatch.setattr(pipeline_setup, "load_models", lambda *args: loaded.append(args))
    out = Path(base[-1])
    first = other_run(out, "claimed")  # a benchmark into it, still ranking: nothing written yet
    assert main(base) == 1
    assert capsys.readouterr().err == (f"{out}: another run (pid {first.pid}) is writing its outputs here; "
                                       "wait for it to end, or write them elsewhere\n")
    assert loaded == [] and calls == []  # refused before the models are loaded
    first.communicate("\n", timeout=60)
    assert first.returncode == 0


def test_a_command_holds_its_out_from_its_start_to_its_end(tmp_path, monkeypatch):
    import threading

    import meddevkg_core.benchmark
    from meddevkg_core.atomic_files import check_writable_directory

    base, _ = _benchmark_without_running(tmp_path, monkeypatch, "fda_id,text\nP1,stent\nP2,valve\n",
                                         "fda_id,pat_id\nP1,1\nP2,1\n")
    out = Path(base[-1])
    seen = []

    def another_run_starts() -> None:  # a thread: its own lock, as another process's
        try:
            check_writable_directory(out)
            seen.append("not refused")
        except InputError as exc:
            seen.append(str(exc))

    def ranking(corpus, models, config, out, ablations=True, config_file=None):
        starting = threading.Thread(target=another_run_starts)
        starting.start()
        starting.join()
        return SimpleNamespace(report={"ranking": {}})
    monkeypatch.setattr(meddevkg_core.benchmark, "run_benchmark", ranking)
    assert main(base) == 0
    assert seen == [f"{out}: another run (pid {os.getpid()}) is writing its outputs here; "
                    "wait for it to end, or write them elsewhere"]
    check_writable_directory(out)  # released at its end


def _fda_records(path: Path) -> Path:
    """FDA PMA records with fdadata's columns: P100045's original (2014) and a supplement (2024)."""
    import polars as pl

    pl.DataFrame({"submission_number": ["P100045", "P100045/S001"], "pma_number": ["P100045", "P100045"],
                  "supplement_number": [None, "S001"], "is_original": [True, False],
                  "date_decision": ["2014-05-28", "2024-09-30"], "approval_order_statement": ["", "new model"]}
                 ).with_columns(pl.col("date_decision").str.to_date()).write_parquet(path)
    return path


def test_benchmark_fda_approval_dates_date_the_devices_from_the_fda_records(tmp_path, monkeypatch):
    import polars as pl

    from meddevkg_core.benchmark import dated_devices

    base, calls = _benchmark_without_running(tmp_path, monkeypatch, "fda_id,text\nP100045,sensor\nP999999,stent\n",
                                             "fda_id,pat_id\nP100045,1\nP999999,1\n")
    fda = _fda_records(tmp_path / "pma.parquet")
    main([*base, "--fda-pma", str(fda)])
    main([*base, "--fda-pma", str(fda), "--fda-approval-dates"])
    undated, dated = (corpus.devices.sort("fda_id")["decision_date"].cast(pl.String).to_list()
                      for corpus, _, _ in calls)
    assert undated == [None, None] and dated == ["2014-05-28", None]  # the approval, not the supplement
    assert dated_devices(calls[1][0].devices) == 1
    with pytest.raises(SystemExit, match="--fda-approval-dates reads the approvals from --fda-pma"):
        main([*base, "--fda-approval-dates"])


def test_compare_runs_reads_benchmark_directories_and_names_a_missing_or_damaged_ranking(
        tmp_path, capsys, damaged_parquet, aborting_parquet):
    import polars as pl

    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,stent\nP2,valve\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n2,valve\n")
    (tmp_path / "gold_links.csv").write_text("fda_id,pat_id\nP1,1\nP2,2\n")
    for name, order in (("a", ["2", "1"]), ("b", ["1", "2"])):
        (tmp_path / name).mkdir()
        pl.DataFrame({"fda_id": ["P1", "P1", "P2", "P2"], "pat_id": order + ["2", "1"],
                      "rank": [1, 2, 1, 2]}).write_parquet(tmp_path / name / "rankings.parquet")
    out = tmp_path / "paired.parquet"
    assert main(["compare-runs", "--corpus", str(tmp_path), "--a", str(tmp_path / "a"), "--b", str(tmp_path / "b"),
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "micro R@10: a 1.000, b 1.000" in printed and "P1  " in printed  # P1's gold moved from 2 to 1
    assert pl.read_parquet(out).filter(pl.col("fda_id") == "P1")["rr_diff"].to_list() == [0.5]
    try:
        main(["compare-runs", "--corpus", str(tmp_path), "--a", str(tmp_path), "--b", str(tmp_path / "b")])
    except SystemExit as exc:
        assert "rankings.parquet not found" in str(exc)
    else:
        raise AssertionError("expected a clear refusal")
    damaged = damaged_parquet(tmp_path / "b" / "rankings.parquet")  # polars panicked: a traceback naming no file
    assert main(["compare-runs", "--corpus", str(tmp_path), "--a", str(tmp_path / "a"),
                 "--b", str(tmp_path / "b")]) == 1
    assert capsys.readouterr().err.startswith(f"{damaged}: cannot be read: polars panicked on it (a damaged file?): ")
    aborting_parquet(damaged)  # polars aborted the process: no error, no file named
    assert main(["compare-runs", "--corpus", str(tmp_path), "--a", str(tmp_path / "a"),
                 "--b", str(tmp_path / "b")]) == 1
    assert capsys.readouterr().err.startswith(f"{damaged}: cannot be read: column 'fda_id', row group 0: the page "
                                              "header at byte ")


def _runs_with_inputs(tmp_path: Path, changed: str | None) -> list[str]:
    """A corpus in tmp_path and two benchmark directories a and b with their rankings and report.json's
    inputs; b's `changed` table read other bytes than a's. Returns compare-runs' arguments."""
    import polars as pl

    from meddevkg_core.lineage import fingerprint as file_fingerprint

    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,stent\nP2,valve\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n2,valve\n")
    (tmp_path / "gold_links.csv").write_text("fda_id,pat_id\nP1,1\nP2,2\n")
    inputs = {name: file_fingerprint(tmp_path / f"{name}.csv").model_dump()
              for name in ("devices", "patents", "gold_links")}
    for name, order in (("a", ["2", "1"]), ("b", ["1", "2"])):
        (tmp_path / name).mkdir()
        pl.DataFrame({"fda_id": ["P1", "P1", "P2", "P2"], "pat_id": order + ["2", "1"],
                      "rank": [1, 2, 1, 2]}).write_parquet(tmp_path / name / "rankings.parquet")
        config = {"path": f"/tmp/{name}.json", "size": 1, "sha256": name * 64}  # a variant's own settings
        read = inputs | {changed: {**inputs[changed], "sha256": "0" * 64}} if name == "b" and changed else inputs
        (tmp_path / name / "report.json").write_text(json.dumps({"inputs": read | {"config": config}}))
    return ["compare-runs", "--corpus", str(tmp_path), "--a", str(tmp_path / "a"), "--b", str(tmp_path / "b")]


def test_compare_runs_refuses_runs_that_read_different_inputs_unless_told_to_compare_them(tmp_path, capsys):
    argv = _runs_with_inputs(tmp_path, "devices")
    with pytest.raises(SystemExit) as refusal:
        main(argv)
    assert str(refusal.value) == (
        "cannot compare: the runs read different inputs: devices (side a's and side b's differ); a device-by-device "
        "comparison of runs on different data is not one of variants (--allow-different-inputs compares them anyway)")
    assert main([*argv, "--allow-different-inputs"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "WARNING: the runs read different inputs: devices (side a's and side b's differ)"
    assert printed[1] == "2 gold devices; side a: 1 run(s), side b: 1"
    assert json.loads(printed[-1])["inputs"] == {"differing": {"devices": "side a's and side b's differ"},
                                                 "unknown": []}


def test_compare_runs_on_the_same_inputs_says_nothing_of_them_and_old_runs_get_a_note(tmp_path, capsys):
    argv = _runs_with_inputs(tmp_path, None)  # the configs differ: that is the variant
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("2 gold devices; side a: 1 run(s), side b: 1\n")
    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,stent\nP2,valve\nP3,pump\n")  # since the runs
    with pytest.raises(SystemExit, match=r"inputs: devices \(the runs' and --corpus's differ\)"):
        main(argv)
    (tmp_path / "a" / "report.json").write_text('{"corpus": {"path": "/c"}}')  # written before inputs were
    (tmp_path / "b" / "report.json").unlink()
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith(
        f"note: inputs unknown for 2 run(s), written before report.json recorded them ({tmp_path / 'a'}, "
        f"{tmp_path / 'b'}): not checked to have read the same data\n2 gold devices")


def test_compare_runs_reads_a_run_killed_while_moving_its_outputs_in_once_they_are_moved_in(tmp_path, capsys):
    import polars as pl

    from meddevkg_core.atomic_files import COMPLETE, STAGE

    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,stent\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n2,valve\n")
    (tmp_path / "gold_links.csv").write_text("fda_id,pat_id\nP1,1\n")
    for where, order in (("a", ["2", "1"]), ("b", ["2", "1"]), (f"b/{STAGE}", ["1", "2"])):
        (tmp_path / where).mkdir()
        pl.DataFrame({"fda_id": ["P1", "P1"], "pat_id": order, "rank": [1, 2]}).write_parquet(
            tmp_path / where / "rankings.parquet")
    (tmp_path / "b" / STAGE / COMPLETE).touch()  # b's second run, killed before its renames
    assert main(["compare-runs", "--corpus", str(tmp_path), "--a", str(tmp_path / "a"),
                 "--b", str(tmp_path / "b")]) == 0
    assert "P1    1  0.500 -> 1.000" in capsys.readouterr().out  # b's second run: gold patent 1 first
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["rankings.parquet"]


def test_the_ui_command_opens_this_runs_corpus_and_store_from_any_directory(tmp_path, monkeypatch):
    for folder in ("corpus", "elsewhere", "models/reranker"):
        (tmp_path / folder).mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.chdir(tmp_path)
    for name, value in {"MEDDEVKG_CORPUS": "corpus", "MEDDEVKG_HOME": "state", "MEDDEVKG_OPENFDA_API_KEY": "s3cret",
                        "MEDDEVKG_PIPELINE_CONFIG": '{"rerank": {"seed": 7}}',
                        "MEDDEVKG_CROSS_ENCODER": "models/reranker", "MEDDEVKG_EMBEDDING_MODEL": "all-MiniLM-L6-v2",
                        "DAGSTER_HOME": str(tmp_path / "state" / "dagster_home")}.items():
        monkeypatch.setenv(name, value)
    line = ui_command(os.environ)
    assert "s3cret" not in line and line.endswith("(with MEDDEVKG_OPENFDA_API_KEY exported)")
    words = shlex.split(line.split("  (with ")[0])
    settings = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))
    command = [w for w in words if not re.match(r"^[A-Z_]+=", w)]
    assert Path(command[0]).is_file() and command[1:3] == ["dev", "-w"] and Path(command[3]).is_file()
    assert settings["MEDDEVKG_PIPELINE_CONFIG"] == '{"rerank": {"seed": 7}}'
    assert settings["MEDDEVKG_CROSS_ENCODER"] == str(tmp_path / "models" / "reranker")  # a local model: absolute
    assert settings["MEDDEVKG_EMBEDDING_MODEL"] == "all-MiniLM-L6-v2"  # a packaged model's name stays a name
    probe = ("import dagster as dg\nfrom meddevkg_dagster.definitions import defs\n"
             "value = lambda x: x.get_value() if isinstance(x, dg.EnvVar) else x\n"
             "print(value(defs.resources['corpus'].path)); print(value(defs.resources['io_manager'].database))\n"
             "print(value(defs.resources['pipeline_config'].config_json))")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path)), **settings}
    out = subprocess.run([sys.executable, "-c", probe], cwd=elsewhere, env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == [str(tmp_path / "corpus"), str(tmp_path / "state" / "warehouse.duckdb"), '{"rerank": {"seed": 7}}']


def test_an_installed_package_opens_the_ui_by_module_and_a_local_instance_gets_dagster_dev(tmp_path, monkeypatch):
    import meddevkg_dagster.cli.dagster_instance as dagster_instance

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))  # no dagster.yaml: Dagster's local SQLite defaults
    assert " dev -w " in ui_hint(os.environ)
    # pip install, no checkout
    monkeypatch.setattr(dagster_instance, "_WORKSPACE", tmp_path / "site-packages" / "workspace.yaml")
    assert ui_command(os.environ).endswith(" dev -m meddevkg_dagster.definitions")


def test_trajectory_on_a_run_dates_the_device_from_fda_records_with_or_without_its_corpus(tmp_path, monkeypatch,
                                                                                          capsys):
    import json

    import polars as pl

    monkeypatch.delenv("MEDDEVKG_CORPUS", raising=False)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "devices.csv").write_text("fda_id,text\nP100045,sensor\nP2,stent\n")
    (corpus / "patents.csv").write_text("pat_id,text\n8157760,sensor\n5480423,stent\n")
    fda = _fda_records(tmp_path / "pma.parquet")
    for name, summary in {"with_corpus": {"corpus": {"path": str(corpus)}}, "alone": {}}.items():
        run = tmp_path / name
        run.mkdir()
        links = pl.DataFrame({"fda_id": ["P100045", "P100045", "P2"], "pat_id": ["8157760", "5480423", "5480423"],
                              "probability": [0.9, 0.6, 0.8], "decision": [True, True, True]})
        links.write_parquet(run / "links.parquet")
        (run / "summary.json").write_text(json.dumps(summary))
        assert main(["trajectory", "--device", "P100045", "--links", str(run)]) == 0
        out = capsys.readouterr().out
        assert "FDA approval year: unknown" in out and "--fda-pma fdadata_pma.parquet reads FDA's" in out
        assert (f"(corpus {corpus})" in out) == (name == "with_corpus")
        assert main(["trajectory", "--device", "P100045", "--links", str(run), "--fda-pma", str(fda)]) == 0
        out = capsys.readouterr().out
        assert "FDA approval year: 2014" in out and "reads FDA's" not in out  # the approval, not the supplement


def test_ma_discovery_dates_the_device_against_the_deals(tmp_path, capsys):
    import polars as pl

    corpus, run = tmp_path / "corpus", tmp_path / "run"
    corpus.mkdir()
    run.mkdir()
    (corpus / "devices.csv").write_text("fda_id,applicant,decision_date,text\nP1,ACME,2012-05-01,stent\nP2,ACME,,x\n")
    (corpus / "patents.csv").write_text("pat_id,text\n8157760,stent\n5480423,stent\n")
    pl.DataFrame({"fda_id": ["P1", "P1", "P2"], "pat_id": ["8157760", "5480423", "8157760"],
                  "probability": [0.9, 0.6, 0.5], "decision": [True, True, True]}).write_parquet(run / "links.parquet")
    pl.DataFrame({"fda_id": ["P1", "P1", "P2"], "pat_id": ["8157760", "5480423", "8157760"],
                  "company_path": ["ACME <- WIDGETCO (2010-01-04)", "ACME -> BIGCO (2015-06-30)",
                                   "ACME -> BIGCO (2015-06-30)"]}).write_parquet(run / "candidates.parquet")
    assert main(["ma-discovery", "--device", "P1", "--links", str(run), "--corpus", str(corpus)]) == 0
    out = capsys.readouterr().out
    assert "FDA approval of P1: 2012-05-01" in out
    assert "1 of these links come through a deal that closed after that approval" in out  # BIGCO, 2015
    assert main(["ma-discovery", "--device", "P2", "--links", str(run), "--corpus", str(corpus)]) == 0
    out = capsys.readouterr().out
    assert "FDA approval of P2: unknown" in out and "closed after" not in out


def test_ma_discovery_lists_paths_with_the_same_count_in_one_order(tmp_path, capsys):
    import polars as pl

    corpus, run = tmp_path / "corpus", tmp_path / "run"
    corpus.mkdir()
    run.mkdir()
    (corpus / "devices.csv").write_text("fda_id,applicant,text\nP1,ACME,stent\n")
    pats = [str(8157760 + i) for i in range(25)]
    (corpus / "patents.csv").write_text("pat_id,text\n" + "".join(f"{p},stent\n" for p in pats))
    pl.DataFrame({"fda_id": ["P1"] * 25, "pat_id": pats, "probability": [0.9] * 25,
                  "decision": [True] * 25}).write_parquet(run / "links.parquet")
    paths = [f"ACME <- WIDGETCO {i:02d} (2010-01-04)" for i in range(25)]
    pl.DataFrame({"fda_id": ["P1"] * 25, "pat_id": pats, "company_path": paths}).write_parquet(
        run / "candidates.parquet")
    for _ in range(3):  # polars' group_by returns its groups in a new order on each call
        assert main(["ma-discovery", "--device", "P1", "--links", str(run), "--corpus", str(corpus),
                     "--limit", "50"]) == 0
        by_path = capsys.readouterr().out.split("by acquisition path")[1]
        assert [p for p in paths if p in by_path] == paths
        assert sorted(paths, key=by_path.index) == paths


def test_an_unreadable_report_beside_the_links_ends_the_command_with_its_name(tmp_path, capsys):
    import polars as pl

    pl.DataFrame({"fda_id": ["P1"], "pat_id": ["8157760"], "probability": [0.9], "decision": [True]}
                 ).write_parquet(tmp_path / "links.parquet")
    (tmp_path / "report.json").write_text("{truncated")
    assert main(["trajectory", "--device", "P1", "--links", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith(f"{tmp_path}/report.json: not a run or benchmark report (")


def test_output_cut_short_by_a_closed_pipe_stops_quietly_with_sigpipes_code(tmp_path):
    import polars as pl

    run = tmp_path / "run"
    run.mkdir()
    pl.DataFrame({"fda_id": ["P1"], "pat_id": ["8157760"], "probability": [0.9], "decision": [True]}
                 ).write_parquet(run / "links.parquet")
    env = {k: v for k, v in os.environ.items() if k != "MEDDEVKG_CORPUS"}
    proc = subprocess.Popen([sys.executable, "-m", "meddevkg_dagster.cli", "trajectory", "--device", "P1",
                             "--links", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # like `| head` exiting before the command writes
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and "Traceback" not in err and "Exception ignored" not in err, err


def test_materialising_a_corpus_the_loaded_definitions_do_not_hold_is_refused(tmp_path, monkeypatch):
    import dagster as dg

    from meddevkg_dagster.cli import materialize_corpus
    from meddevkg_dagster.definitions import defs

    built = defs.resources["corpus"]
    if isinstance(built.path, dg.EnvVar):  # built with MEDDEVKG_CORPUS set: pin it as a string, as without it
        monkeypatch.setitem(defs.resources, "corpus", built.model_copy(update={"path": built.path.get_value()}))
    corpus = _corpus_with_gold_for_one_device(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("MEDDEVKG_CORPUS", str(tmp_path))  # restored afterwards; materialize_corpus sets it
    with pytest.raises(RuntimeError, match="built for the corpus .*: materialise it in a new process"):
        materialize_corpus(corpus)


def test_materialising_after_the_definitions_corpus_variable_was_unset_names_it(tmp_path, monkeypatch):
    import dagster as dg

    from meddevkg_dagster.cli import materialize_corpus
    from meddevkg_dagster.definitions import defs

    built = defs.resources["corpus"]  # as built with MEDDEVKG_CORPUS set, which is unset since
    monkeypatch.setitem(defs.resources, "corpus", built.model_copy(update={"path": dg.EnvVar("MEDDEVKG_CORPUS")}))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.delenv("MEDDEVKG_CORPUS", raising=False)
    with pytest.raises(RuntimeError, match="MEDDEVKG_CORPUS was set when .* definitions were built and is not now"):
        materialize_corpus()


def test_the_pipeline_config_comes_from_a_file_or_the_environment_and_a_misplaced_key_is_refused(
        tmp_path, monkeypatch):
    import dagster as dg

    import meddevkg_core.benchmark
    import meddevkg_dagster.cli.pipeline_setup as pipeline_setup
    from meddevkg_dagster.resources import PipelineConfigResource

    base, _ = _benchmark_without_running(tmp_path, monkeypatch, "fda_id,text\nP1,stent\nP2,valve\n",
                                         "fda_id,pat_id\nP1,1\nP2,1\n")
    seen = []
    monkeypatch.setattr(pipeline_setup, "load_models",
                        lambda corpus_dir, cross_encoder, *rest: seen.append(cross_encoder))
    monkeypatch.setattr(meddevkg_core.benchmark, "run_benchmark",
                        lambda corpus, models, config, out, ablations=True, config_file=None:
                        seen.append(config) or SimpleNamespace(report={"ranking": {}}))
    monkeypatch.setenv("MEDDEVKG_PIPELINE_CONFIG", '{"candidates": {"vector_mode": "absolute"}}')  # Dagster's too
    main(base)
    assert seen[-1].candidates.vector_mode == "absolute"
    file = tmp_path / "config.json"
    file.write_text('{"candidates": {"admission_threshold": 80}}')
    main([*base, "--config", str(file), "--cross-encoder", "/models/bge", "--cross-encoder-backend", "flagembedding"])
    ce, config = seen[-2:]
    assert config.candidates.admission_threshold == 80 and config.candidates.vector_mode == "device_quantile"
    assert ce == config.cross_encoder and (ce.model, ce.backend) == ("/models/bge", "flagembedding")  # and the report

    misplaced = '{"vector_mode": "absolute"}'  # belongs under "candidates": it used to fall back to the defaults
    monkeypatch.setenv("MEDDEVKG_PIPELINE_CONFIG", misplaced)
    with pytest.raises(SystemExit, match="MEDDEVKG_PIPELINE_CONFIG is not a valid pipeline configuration"):
        main(base)
    with pytest.raises(dg.Failure, match="vector_mode"):
        PipelineConfigResource(config_json=misplaced).config()
    with pytest.raises(dg.Failure, match="under Dagster it is MEDDEVKG_CROSS_ENCODER"):  # not ignored
        PipelineConfigResource(config_json=config.model_dump_json()).config()


def test_run_and_benchmark_merge_the_licensed_releases_the_environment_names(tmp_path, monkeypatch):
    import meddevkg_core.embeddings
    import meddevkg_core.entities
    import meddevkg_dagster.cli.pipeline_setup as pipeline_setup
    from meddevkg_core.config import CrossEncoderConfig

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    monkeypatch.setattr(meddevkg_core.embeddings, "load_embedding_model", lambda *args, **kw: None)
    monkeypatch.setattr(meddevkg_core.entities, "load_spacy_pipeline", lambda: None)
    monkeypatch.setenv("MEDDEVKG_UMLS_DIR", str(fixtures / "umls"))
    models = pipeline_setup.load_models(tmp_path, CrossEncoderConfig(), "cpu", None)
    assert models.ontology.lookup("open-irrigated RF catheter") == "C9900003"  # the same ontology as the asset
    assert "C9900005" in models.ontology_rejected["record_key"].to_list()  # run writes it to rejected_records
    assert "Drug-eluting coronary stent" in set(models.ontology.terms["term"])  # a SNOMED CT (SRL 9) atom
    monkeypatch.setenv("MEDDEVKG_UMLS_MAX_SRL", "0")  # the SNOMED CT (SRL 9) atoms dropped, as the asset does
    monkeypatch.setenv("MEDDEVKG_TERMINOLOGIES_STRICT", "true")  # the fixture's MRREL cycle is no malformed line
    models = pipeline_setup.load_models(tmp_path, CrossEncoderConfig(), "cpu", None)
    assert "Drug-eluting coronary stent" not in set(models.ontology.terms["term"])
    monkeypatch.setenv("MEDDEVKG_UMLS_MAX_SRL", "nine")
    with pytest.raises(SystemExit, match="MEDDEVKG_UMLS_MAX_SRL='nine'"):
        pipeline_setup.load_models(tmp_path, CrossEncoderConfig(), "cpu", None)
    monkeypatch.setenv("MEDDEVKG_UMLS_MAX_SRL", "0")
    monkeypatch.setenv("MEDDEVKG_TERMINOLOGIES_STRICT", "maybe")
    with pytest.raises(SystemExit, match="MEDDEVKG_TERMINOLOGIES_STRICT='maybe'"):
        pipeline_setup.load_models(tmp_path, CrossEncoderConfig(), "cpu", None)
    monkeypatch.delenv("MEDDEVKG_TERMINOLOGIES_STRICT")
    monkeypatch.setenv("MEDDEVKG_UMLS_DIR", str(tmp_path / "missing"))
    with pytest.raises(SystemExit, match="MEDDEVKG_UMLS_DIR="):
        pipeline_setup.load_models(tmp_path, CrossEncoderConfig(), "cpu", None)


def test_run_and_benchmark_record_the_release_files_they_merged_beside_the_corpus_s(tmp_path, monkeypatch):
    import meddevkg_core.embeddings
    import meddevkg_core.entities
    import meddevkg_dagster.cli.pipeline_setup as pipeline_setup
    from meddevkg_core.config import CrossEncoderConfig
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.demo import demo_corpus_dir
    from meddevkg_core.lineage import fingerprint as file_fingerprint
    from meddevkg_core.pipeline import run_inputs

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    umls, mesh = shutil.copytree(fixtures / "umls", tmp_path / "umls"), tmp_path / "desc2025.xml"
    shutil.copy(fixtures / "mesh" / "desc_sample.xml", mesh)
    monkeypatch.setattr(meddevkg_core.embeddings, "load_embedding_model", lambda *args, **kw: None)
    monkeypatch.setattr(meddevkg_core.entities, "load_spacy_pipeline", lambda: None)
    corpus = read_corpus(demo_corpus_dir())
    read = run_inputs(corpus, pipeline_setup.load_models(demo_corpus_dir(), CrossEncoderConfig(), "cpu", None), None)
    assert read.keys() == {"devices", "patents", "gold_links", "labeled_pairs", "acquisitions"}  # none set: as before
    monkeypatch.setenv("MEDDEVKG_UMLS_DIR", str(umls))
    monkeypatch.setenv("MEDDEVKG_MESH_XML", str(mesh))
    models = pipeline_setup.load_models(demo_corpus_dir(), CrossEncoderConfig(), "cpu", None)
    # what run's summary.json and benchmark's report.json record: the corpus's files, then the releases'
    assert run_inputs(corpus, models, None) == {
        **read, "umls_mrsty": file_fingerprint(umls / "MRSTY.RRF"),
        "umls_mrconso": file_fingerprint(umls / "MRCONSO.RRF"), "umls_mrrel": file_fingerprint(umls / "MRREL.RRF"),
        "mesh_descriptors": file_fingerprint(mesh)}


def test_run_with_the_hashing_encoder_writes_its_tables_and_a_wrong_model_path_is_named(tmp_path, capsys,
                                                                                         monkeypatch):
    import polars as pl

    from meddevkg_core.demo import demo_corpus_dir

    corpus = tmp_path / "corpus"  # the demo, with a deal missing its acquired company
    shutil.copytree(demo_corpus_dir(), corpus)
    with (corpus / "acquisitions.csv").open("a") as fh:
        fh.write("ZETA MEDICAL,,2016-01-01,memo\n")
    # `hashing` is documented for MEDDEVKG_EMBEDDING_MODEL; `run` took it for a model directory.
    out, config = tmp_path / "out", tmp_path / "seed_7.json"
    config.write_text('{"rerank": {"seed": 7}}')
    mesh = Path(__file__).resolve().parents[1] / "fixtures" / "mesh" / "desc_sample.xml"
    monkeypatch.setenv("MEDDEVKG_MESH_XML", str(mesh))  # a MeSH release merged under the shipped ontology
    assert main(["run", "--corpus", str(corpus), "--out", str(out), "--embedding-model", "hashing",
                 "--config", str(config)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluation"]["n_links"] > 0 and summary["config"]["candidates"]["vector_mode"] == "device_quantile"
    # every file the run read, with its bytes' digest: the corpus tables, its company table, the config, MeSH's
    assert summary["inputs"].keys() == {"devices", "patents", "gold_links", "labeled_pairs", "acquisitions", "config",
                                        "mesh_descriptors"}
    assert summary["inputs"]["mesh_descriptors"]["sha256"] == hashlib.sha256(mesh.read_bytes()).hexdigest()
    assert summary["inputs"]["acquisitions"] == {"path": str(corpus / "acquisitions.csv"),
                                                 "size": (corpus / "acquisitions.csv").stat().st_size,
                                                 "sha256": hashlib.sha256((corpus / "acquisitions.csv").read_bytes())
                                                 .hexdigest()}
    assert summary["inputs"]["config"]["path"] == str(config) and summary["config"]["rerank"]["seed"] == 7
    assert "companies: 1 row(s) of the corpus's company tables quarantined" in capsys.readouterr().out
    rejected = pl.read_parquet(out / "rejected_records.parquet").filter(pl.col("source") == "acquisitions.csv")
    assert rejected.select("record_key", "reason").rows() == [("acquisitions#1:ZETA MEDICAL", "missing acquired")]
    with pytest.raises(SystemExit, match="MEDDEVKG_EMBEDDING_MODEL: embedding model directory not found"):
        main(["run", "--corpus", str(demo_corpus_dir()), "--out", str(out), "--embedding-model", str(tmp_path / "x")])


def test_partitions_are_added_from_the_command_line_with_the_runs_that_materialise_them(tmp_path, monkeypatch,
                                                                                        capsys):
    import dagster as dg

    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # the CLI's instance: $MEDDEVKG_HOME/dagster_home
    assert main(["partitions", "--add-years", "2024,undated", "--add-devices", "p100045"]) == 0
    assert main(["partitions", "--add-years", "2023-2025"]) == 0  # 2024 is there: 2023 and 2025 are new
    out = capsys.readouterr().out
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert instance.get_dynamic_partitions("patent_years") == ["2024", "undated", "2023", "2025"]
        assert instance.get_dynamic_partitions("pma_devices") == ["P100045"]
    commands = [shlex.split(line) for line in out.splitlines() if " job execute " in line]
    ranges = [json.loads(c[c.index("--tags") + 1]) for c in commands]
    # 2023-2025 is not one range in the instance's order (undated sits inside it): 2024, then 2023-2025 after it
    assert [(r["dagster/asset_partition_range_start"], r["dagster/asset_partition_range_end"]) for r in ranges] == [
        ("2024", "undated"), ("P100045", "P100045"), ("2024", "2024"), ("2023", "2025")]
    assert all(f"DAGSTER_HOME={tmp_path / 'dagster_home'}" in c for c in commands)
    with pytest.raises(SystemExit, match="--add-years: grant years '2025-2019'"):
        main(["partitions", "--add-years", "2025-2019"])
    assert main(["partitions", "--delete-years", "undated", "--delete-devices", "p100045"]) == 0  # no store yet
    assert "warehouse.duckdb: no store at this path" in capsys.readouterr().out
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert instance.get_dynamic_partitions("patent_years") == ["2024", "2023", "2025"]
        assert instance.get_dynamic_partitions("pma_devices") == []
    with pytest.raises(SystemExit, match="--delete-years: grant years"):
        main(["partitions", "--delete-years", "1999-1990"])
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        instance.add_dynamic_partitions("pma_devices", ["p100046"])  # as a store before upper-cased ids holds it
    assert main(["partitions", "--delete-devices", "p100046"]) == 0
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert instance.get_dynamic_partitions("pma_devices") == []


def test_the_clis_instance_gets_the_projects_dagster_yaml_and_one_it_has_is_kept(tmp_path, monkeypatch):
    """`dagster dev` on the CLI's runs reads the checkout's instance settings (run queue, pools, event log)."""
    project_yaml = Path(__file__).resolve().parents[2] / "dagster.yaml"
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert main(["partitions"]) == 0
    assert (home / "dagster.yaml").read_text() == project_yaml.read_text()
    own = "telemetry:\n  enabled: false\n"
    (home / "dagster.yaml").write_text(own)
    assert main(["partitions"]) == 0
    assert (home / "dagster.yaml").read_text() == own

def test_the_embedding_backend_setting_reaches_run_and_benchmark_and_pairs_cv_has_no_idle_cache_option(
        tmp_path, monkeypatch):
    import meddevkg_dagster.cli.pipeline_setup as pipeline_setup

    base, _ = _benchmark_without_running(tmp_path, monkeypatch, "fda_id,text\nP1,stent\nP2,valve\n",
                                         "fda_id,pat_id\nP1,1\nP2,1\n")
    loaded = []
    monkeypatch.setattr(pipeline_setup, "load_models", lambda *args: loaded.append(args))
    monkeypatch.setenv("MEDDEVKG_EMBEDDING_BACKEND", "onnx-int8")  # as the Dagster resource reads it
    main(base)
    main([*base, "--embedding-backend", "torch-int8"])
    assert [args[5] for args in loaded] == ["onnx-int8", "torch-int8"]  # load_models's embedding_backend
    with pytest.raises(SystemExit) as usage:  # pairs-cv encodes once per run and keeps no cache
        main(["pairs-cv", "--pairs", "x.parquet", "--out", str(tmp_path), "--embedding-cache", str(tmp_path)])
    assert usage.value.code == 2  # argparse's "unrecognized arguments"


def test_removing_partitions_deletes_their_rows_in_one_go_and_what_the_ui_left(harness, monkeypatch, capsys):
    # Dagster deletes a dynamic partition's key only: its rows stayed in the store, and readers of
    # whole tables (other devices' rival pools) went on using them.
    import dagster as dg

    from meddevkg_core.corpus import read_corpus
    from meddevkg_dagster.cli import remove_partitions
    from meddevkg_dagster.definitions import defs
    from meddevkg_dagster.jobs import DEVICE_ASSETS, PATENT_ASSETS
    from meddevkg_dagster.partitions import patent_years, pma_devices, stored_partition_tables

    graph = defs.resolve_asset_graph()
    device_tables = stored_partition_tables(graph, pma_devices)
    assert set(device_tables) == {k.path[-1] for k in DEVICE_ASSETS.resolve(graph)}
    assert set(stored_partition_tables(graph, patent_years)) == {k.path[-1] for k in PATENT_ASSETS.resolve(graph)}
    first, kept, gone = read_corpus(harness.corpus).devices["fda_id"].sort().head(3).to_list()
    harness.register([first, kept, gone])
    sources = dg.AssetSelection.assets("pma_documents", "pma_quarantine", "pma_supplements")
    assert harness.materialize(sources, partition_range=(first, gone)).success
    harness.instance.delete_dynamic_partition("pma_devices", gone)  # as the UI does: its row stays
    monkeypatch.setenv("DAGSTER_HOME", str(harness.db.parent))
    deleted = remove_partitions(harness.instance, pma_devices, [first, gone], harness.db)
    assert deleted["pma_documents"] == 2 and deleted["pma_quarantine"] == 0
    assert harness.table("pma_documents")["fda_id"].to_list() == [kept]
    assert harness.instance.get_dynamic_partitions("pma_devices") == [kept]
    out = capsys.readouterr().out
    assert f"removed 1 partition(s) and 2 row(s) from 1 table(s); not partitions here (rows only): {gone}" in out
    assert "-j meddevkg_job" in out


def _two_gold_devices(root: Path) -> Path:
    root.mkdir()
    (root / "devices.csv").write_text("fda_id,text\nP100045,sensor\nP2,stent\n")
    (root / "patents.csv").write_text("pat_id,text\n8157760,sensor\n5480423,stent\n")
    (root / "gold_links.csv").write_text("fda_id,pat_id\nP100045,8157760\nP2,5480423\n")
    return root


def test_an_unusable_input_ends_the_command_with_one_line_naming_it(tmp_path, monkeypatch, capsys):
    import polars as pl

    import meddevkg_core.corpus

    monkeypatch.delenv("MEDDEVKG_CORPUS", raising=False)
    corpus = _two_gold_devices(tmp_path / "corpus")
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    (truncated / "devices.parquet").write_bytes(b"PAR1 cut short")
    (truncated / "patents.csv").write_text("pat_id,text\n1,stent\n")
    unclosed = tmp_path / "unclosed"  # polars' message ran over the field's lines, then advice on its API
    unclosed.mkdir()
    (unclosed / "devices.csv").write_text('fda_id,text\nP1,"stent\nP2,valve\n')
    (unclosed / "patents.csv").write_text("pat_id,text\n1,stent\n")
    damaged = shutil.copytree(corpus, tmp_path / "damaged")  # a release whose SHA256SUMS lists other bytes
    (damaged / "SHA256SUMS").write_text(f"{hashlib.sha256(b'the release').hexdigest()}  devices.csv\n")
    codes = tmp_path / "codes.parquet"
    pl.DataFrame({"product_code": ["NVZ"], "review_panel": ["Cardiovascular"]}).write_parquet(codes)
    run = tmp_path / "run"
    run.mkdir()
    pl.DataFrame({"fda_id": ["P2"], "pat_id": ["5480423"], "probability": [0.8], "decision": [True]}
                 ).write_parquet(run / "links.parquet")
    missing, out = str(tmp_path / "missing.parquet"), str(tmp_path / "out")
    cases = {
        ("run", "--corpus", str(tmp_path / "nowhere"), "--out", out): f"corpus directory {tmp_path}/nowhere does not",
        ("run", "--corpus", str(truncated), "--out", out): f"{truncated}/devices.parquet: cannot be read: ",
        ("run", "--corpus", str(unclosed), "--out", out):
            f"{unclosed}/devices.csv: cannot be read: line 2, column 'text': field '\"stent\\nP2,valve\\n' is not "
            "properly escaped (its quote is never closed)\n",
        ("benchmark", "--corpus", str(damaged), "--out", out): f"{damaged}/devices.csv: its SHA-256 ",
        ("run", "--corpus", str(corpus), "--out", out, "--fda-pma", missing): f"{missing}: cannot be read as PMA",
        ("select-devices", "--fda-pma", str(codes), "--product-codes", str(codes), "--benchmark", str(corpus)):
            f"{codes}: not PMA records",
        ("company-report", "--corpus", str(corpus), "--fda-pma", missing): f"{missing}: cannot be read as PMA",
        ("trajectory", "--device", "P2", "--links", str(run), "--fda-pma", missing): f"{missing}: cannot be read",
        ("ma-discovery", "--device", "P2", "--links", str(run), "--corpus", str(tmp_path / "nowhere")):
            f"corpus directory {tmp_path}/nowhere does not exist",
    }
    for argv, message in cases.items():
        assert main(list(argv)) == 1, argv
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1, (argv, err)
    assert not Path(out).exists()

    def unreadable(root):
        raise PermissionError(13, "Permission denied", f"{root}/devices.csv")

    monkeypatch.setattr(meddevkg_core.corpus, "read_corpus", unreadable)
    assert main(["run", "--corpus", str(corpus), "--out", out]) == 1
    assert capsys.readouterr().err == f"{corpus}/devices.csv: Permission denied\n"

    def disk_full(root):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(meddevkg_core.corpus, "read_corpus", disk_full)
    with pytest.raises(OSError, match="No space left"):  # not an input's fault: it keeps its traceback
        main(["run", "--corpus", str(corpus), "--out", out])

    def bug(root):
        raise ValueError("a fault in the code")

    monkeypatch.setattr(meddevkg_core.corpus, "read_corpus", bug)
    with pytest.raises(ValueError, match="a fault in the code"):  # keeps its traceback
        main(["run", "--corpus", str(corpus), "--out", out])


def test_a_bad_config_is_refused_before_the_corpus_and_the_fda_records_are_read(tmp_path, monkeypatch):
    # it was parsed only after read_corpus and with_supplements, so a typo failed after their work
    import meddevkg_core.corpus
    import meddevkg_core.dossier

    monkeypatch.setattr(meddevkg_core.corpus, "read_corpus", lambda *a: pytest.fail("read before the config"))
    monkeypatch.setattr(meddevkg_core.dossier, "with_supplements", lambda *a, **k: pytest.fail("read before"))
    config = tmp_path / "config.json"
    config.write_text('{"vector_mode": "absolute"}')  # belongs under "candidates"
    out = str(tmp_path / "out")
    for command in (["run", "--corpus", str(tmp_path), "--out", out],
                    ["benchmark", "--corpus", str(tmp_path), "--out", out, "--fda-pma", str(tmp_path / "pma.json")]):
        with pytest.raises(SystemExit, match=f"{config} is not a valid pipeline configuration"):
            main([*command, "--config", str(config)])


def test_a_config_file_that_cannot_be_read_is_named(tmp_path, monkeypatch):
    import meddevkg_dagster.cli.pipeline_setup as pipeline_setup

    corpus = _two_gold_devices(tmp_path / "corpus")
    monkeypatch.setattr(pipeline_setup, "load_models",
                        lambda *args: pytest.fail("the config is read before the models"))
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"candidates": {"note": "caf\xe9"}}')
    for config in (tmp_path / "missing.json", latin):
        with pytest.raises(SystemExit, match=f"--config {config}: cannot be read"):
            main(["run", "--corpus", str(corpus), "--out", str(tmp_path / "out"), "--config", str(config)])


def test_an_out_that_cannot_be_written_is_named_before_the_models_are_loaded(tmp_path, monkeypatch, capsys):
    # a file in the way ended in a FileExistsError traceback, and only once the run was over
    import meddevkg_dagster.cli.pipeline_setup as pipeline_setup

    corpus = _two_gold_devices(tmp_path / "corpus")
    monkeypatch.setattr(pipeline_setup, "load_models", lambda *args: pytest.fail("the models were loaded"))
    taken = tmp_path / "taken"
    taken.write_text("a file")
    for command in (["run", "--corpus", str(corpus)], ["benchmark", "--corpus", str(corpus)],
                    ["pairs-cv", "--pairs", str(tmp_path / "pairs.csv"), "--hashing"]):
        assert main([*command, "--out", str(taken)]) == 1, command
        assert capsys.readouterr().err == f"{taken}: cannot be written to ({taken} is not a directory)\n", command


def test_a_command_failing_after_the_check_of_its_out_leaves_no_out_behind(tmp_path, monkeypatch, capsys):
    # the check made --out and its parents, so a command failing later left empty directories behind
    corpus = _two_gold_devices(tmp_path / "corpus")
    monkeypatch.setenv("MEDDEVKG_UMLS_MAX_SRL", "x")  # refused when the models are loaded, after the check
    out = str(tmp_path / "new" / "out")
    for command in (["run", "--corpus", str(corpus)], ["benchmark", "--corpus", str(corpus)]):
        with pytest.raises(SystemExit, match="MEDDEVKG_UMLS_MAX_SRL='x'"):
            main([*command, "--out", out])
    assert main(["pairs-cv", "--pairs", str(tmp_path / "pairs.csv"), "--hashing", "--out", out]) == 1
    assert f"{tmp_path}/pairs.csv" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["corpus"]


def test_a_model_setting_outside_its_options_choices_is_refused_naming_it_before_any_work(tmp_path, monkeypatch):
    # argparse holds only a command-line value to an option's choices, not its default from the variable:
    # MEDDEVKG_DEVICE=gpu ended `run` in a traceback once the corpus was read; --device took any word
    import meddevkg_core.corpus
    import meddevkg_core.pair_cv
    from meddevkg_core import cross_encoder
    from meddevkg_dagster.cli import CROSS_ENCODER_BACKENDS

    class Read(Exception):
        """The command went on to read its input: the settings passed."""

    def read(*args):
        raise Read(args)

    monkeypatch.setattr(meddevkg_core.corpus, "read_corpus", read)
    monkeypatch.setattr(meddevkg_core.pair_cv, "load_pairs", read)
    out = str(tmp_path / "out")
    commands = (["run", "--corpus", str(tmp_path), "--out", out],
                ["benchmark", "--corpus", str(tmp_path), "--out", out],
                ["pairs-cv", "--pairs", str(tmp_path / "pairs.csv"), "--out", out])
    settings = {"MEDDEVKG_DEVICE": ("gpu", "auto, cpu, cuda"),
                "MEDDEVKG_EMBEDDING_BACKEND": ("onnx", "torch-fp32, torch-int8, onnx-fp32, onnx-int8"),
                "MEDDEVKG_CROSS_ENCODER_BACKEND": ("bge", "sentence-transformers, flagembedding")}
    for variable, (value, choices) in settings.items():
        monkeypatch.setenv(variable, value)
        for command in commands:
            with pytest.raises(SystemExit, match=re.escape(f"{variable}='{value}': expected one of {choices}")):
                main(command)
        monkeypatch.delenv(variable)
    for command in commands:
        with pytest.raises(SystemExit) as usage:
            main([*command, "--device", "gpu"])
        assert usage.value.code == 2, command  # argparse's "invalid choice", as for the backends
    assert CROSS_ENCODER_BACKENDS == cross_encoder.BACKENDS  # the CLI's copy, kept for its start-up time
    monkeypatch.setenv("MEDDEVKG_DEVICE", "")  # empty is unset, as for the other settings
    for command in commands:
        with pytest.raises(Read):
            main(command)


def test_a_model_an_option_names_that_is_not_here_ends_the_command_naming_the_option(tmp_path):
    # the cross-encoder's error, and pairs-cv's for an embedding model, were tracebacks; run named only the latter
    corpus = _two_gold_devices(tmp_path / "corpus")
    pairs = tmp_path / "pairs.csv"
    # two device groups (--folds 2), two positives and a negative: else the file is refused before a model loads
    pairs.write_text("fda_id,pat_id,device_text,patent_text,label\n"
                     "P1,1,stent,stent,1\nP1,3,stent,coil,0\nP2,2,valve,valve,1\n")
    missing, out = str(tmp_path / "no-model"), str(tmp_path / "out")
    cross_encoder = f"--cross-encoder / MEDDEVKG_CROSS_ENCODER: cross-encoder model '{missing}' is not available"
    embedding = f"--embedding-model / MEDDEVKG_EMBEDDING_MODEL: embedding model directory not found: {missing}"
    cases = {
        ("run", "--corpus", str(corpus), "--embedding-model", "hashing", "--cross-encoder", missing): cross_encoder,
        ("pairs-cv", "--pairs", str(pairs), "--folds", "2", "--hashing", "--cross-encoder", missing): cross_encoder,
        ("pairs-cv", "--pairs", str(pairs), "--folds", "2", "--embedding-model", missing): embedding,
    }
    for argv, message in cases.items():
        with pytest.raises(SystemExit, match=re.escape(message)):
            main([*argv, "--out", out])


@pytest.mark.parametrize("command", ["recall-rootcause", "ma-discovery", "trajectory"])
def test_the_help_of_corpus_names_the_reports_it_is_read_from(command, capsys):
    # it named report.json alone, and a `run` directory (summary.json) was read as well, the newer of the two
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("--corpus CORPUS with --links: the corpus directory (default: the one named by the newer of its "
            "report.json and summary.json, else $MEDDEVKG_CORPUS)") in help_text


def test_a_config_naming_an_unknown_cross_encoder_backend_is_refused_before_the_corpus_is_read(tmp_path, monkeypatch):
    # the configuration took any word there and the command ended in a traceback once the models were loaded
    import meddevkg_core.corpus

    monkeypatch.setattr(meddevkg_core.corpus, "read_corpus", lambda *a: pytest.fail("read before the config"))
    config = tmp_path / "config.json"
    config.write_text('{"cross_encoder": {"model": "/models/bge", "backend": "bge"}}')
    with pytest.raises(SystemExit, match=f"(?s){config} is not a valid pipeline configuration.*cross_encoder.backend"):
        main(["run", "--corpus", str(tmp_path), "--out", str(tmp_path / "out"), "--config", str(config)])


@pytest.mark.parametrize(("command", "option", "default"), [
    ("pairs-cv", "--folds", "5"), ("pairs-cv", "--seed", "42"), ("bench-extract", "--runs", "3"),
    ("bench-extract", "--seed", "42"), ("bench-scale", "--patents", "698191"), ("bench-scale", "--devices", "434"),
    ("bench-scale", "--runs", "1"), ("bench-scale", "--seed", "0"), ("bench-embed", "--texts", "500"),
    ("bench-embed", "--runs", "3"), ("bench-backfill", "--runs", "3"), ("bench-embed", "--batch-size", "32"),
    ("bench-extract", "--n-process", "[1, 2]"), ("bench-extract", "--random-pairs", "20"),
    ("bench-backfill", "--patent-copies", "1"), ("recall-rootcause", "--limit", "20"),
    ("ma-discovery", "--min-probability", "0.0")])
def test_the_counts_seeds_and_limits_of_the_commands_say_what_they_are_and_their_default(command, option, default,
                                                                                        capsys):
    # --folds, --seed, --texts, --patents and some --runs were listed with no help at all; --batch-size,
    # --n-process, --random-pairs, --patent-copies, --limit and --min-probability without their default
    with pytest.raises(SystemExit):
        main([command, "--help"])
    options = " ".join(capsys.readouterr().out.split("options:", 1)[1].split())
    metavar = option[2:].upper().replace("-", "_")
    after = re.split(rf"{option} {metavar} (?:\[{metavar} \.\.\.\] )?", options, maxsplit=1)[1]
    described = re.split(r" --?[a-z][a-z-]* [A-Z_]{2,} ", after, maxsplit=1)[0]
    assert re.match(rf"\w.* \(.*default {re.escape(default)}(?!\w)[^)]*\)", described), described


_COUNT_OPTIONS = [  # (command and its required options, option, smallest value, the function the command runs)
    (["recall-rootcause", "--device", "P1"], "--limit", 1, "recall_rootcause_command"),
    (["ma-discovery", "--device", "P1"], "--limit", 1, "ma_discovery_command"),
    (["trajectory", "--device", "P1"], "--limit", 1, "trajectory_command"),
    (["pairs-cv", "--pairs", "pairs.csv", "--out", "{out}"], "--folds", 2, "pairs_cv_command"),
    (["bench-extract", "--corpus", "corpus"], "--runs", 1, "bench_extract_command"),
    (["bench-extract", "--corpus", "corpus"], "--n-process", 1, "bench_extract_command"),
    (["bench-extract", "--corpus", "corpus"], "--random-pairs", 1, "bench_extract_command"),
    (["bench-scale"], "--patents", 1, "bench_scale_command"),
    (["bench-scale"], "--devices", "MIN_GOLD_DEVICES", "bench_scale_command"),
    (["bench-scale"], "--runs", 1, "bench_scale_command"),
    (["bench-embed", "--corpus", "corpus"], "--texts", 1, "bench_embed_command"),
    (["bench-embed", "--corpus", "corpus"], "--runs", 1, "bench_embed_command"),
    (["bench-embed", "--corpus", "corpus"], "--batch-size", 1, "bench_embed_command"),
    (["bench-backfill", "--corpus", "corpus", "--home", "{out}"], "--runs", 1, "bench_backfill_command"),
    (["bench-backfill", "--corpus", "corpus", "--home", "{out}"], "--patent-copies", 1, "bench_backfill_command"),
    # seeds: numpy's generators take none below 0 (a traceback, in bench-extract after the whole extraction)
    (["pairs-cv", "--pairs", "pairs.csv", "--out", "{out}"], "--seed", 0, "pairs_cv_command"),
    (["bench-extract", "--corpus", "corpus"], "--seed", 0, "bench_extract_command"),
    (["bench-scale"], "--seed", 0, "bench_scale_command"),
]


@pytest.mark.parametrize(("argv", "option", "smallest", "command"), _COUNT_OPTIONS,
                         ids=[f"{argv[0]} {option}" for argv, option, _, _ in _COUNT_OPTIONS])
def test_a_count_below_its_smallest_value_is_refused_in_one_usage_line_before_any_work(
        tmp_path, monkeypatch, capsys, argv, option, smallest, command):
    # `bench-backfill --patent-copies 0` ended in a ValueError's traceback, `--runs 0` in one after the corpus was
    # materialised; `bench-scale --runs 0` after the synthetic corpus was made; `bench-embed --texts 0`,
    # `--batch-size 0` and `bench-extract --random-pairs -1` in tracebacks; `pairs-cv --folds 1` once the models
    # were loaded; `--runs 0` and `--n-process 0` ran once or with 1 unsaid, `--limit -1` printed all rows but one
    from meddevkg_core.fold_models import MIN_GOLD_DEVICES
    from meddevkg_dagster.cli import command_line

    smallest = MIN_GOLD_DEVICES if smallest == "MIN_GOLD_DEVICES" else smallest
    ran: list[object] = []
    monkeypatch.setattr(command_line, command, lambda args: ran.append(args) or 0)
    out = tmp_path / "out"
    argv = [a.format(out=out) for a in argv]
    for bad in sorted({smallest - 1, -1}):
        with pytest.raises(SystemExit) as usage:
            main([*argv, option, str(bad)])
        assert usage.value.code == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1] == f"meddevkg {argv[0]}: error: argument {option}: must be at least {smallest}, " \
                                       f"got {bad}", err
    with pytest.raises(SystemExit) as usage:  # not a number: argparse's own line, as before
        main([*argv, option, "two"])
    assert usage.value.code == 2 and capsys.readouterr().err.endswith(f"argument {option}: invalid int value: 'two'\n")
    assert not ran and not any(tmp_path.iterdir())  # refused before the command started: nothing written
    assert main([*argv, option, str(smallest)]) == 0  # the smallest value itself reaches the command, as an int
    assert getattr(ran[0], option[2:].replace("-", "_")) in (smallest, [smallest])


def test_bench_scale_too_small_to_train_stage3_ends_in_one_line_naming_the_sizes(capsys):
    # `bench-scale --patents 20 --devices 3`, sizes argparse allows, ended in a traceback from the reranker's
    # training: each device's Stage-2 pool was its synthetic gold and nothing else
    with pytest.raises(SystemExit) as refusal:
        main(["bench-scale", "--patents", "20", "--devices", "3"])
    line = str(refusal.value)
    assert line.startswith("--patents / --devices: synthetic corpus of 20 patents x 3 devices (seed 0; a Stage-2 "
                           "pool of 3 pairs, 3 synthetic gold links): cannot train the reranker's full model: ")
    assert "\n" not in line and not capsys.readouterr().out  # no report printed


_APP_COMMANDS = [("recall-rootcause", "recall_rootcause_command"), ("ma-discovery", "ma_discovery_command"),
                 ("trajectory", "trajectory_command")]


@pytest.mark.parametrize("bad", ["-0.1", "1.5", "nan"])
@pytest.mark.parametrize(("app", "command"), _APP_COMMANDS)
def test_a_min_probability_outside_0_and_1_is_refused_in_one_usage_line(monkeypatch, capsys, app, command, bad):
    # --min-probability took any float: 1.5 kept no link and -0.1 or nan every link, with nothing said
    from meddevkg_dagster.cli import command_line

    ran: list[object] = []
    monkeypatch.setattr(command_line, command, lambda args: ran.append(args) or 0)
    with pytest.raises(SystemExit) as usage:
        main([app, "--device", "P1", "--min-probability", bad])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"meddevkg {app}: error: argument --min-probability: must be a probability " \
                                   f"between 0 and 1, got {float(bad)}", err
    assert not ran


@pytest.mark.parametrize(("app", "command"), _APP_COMMANDS)
def test_a_min_probability_of_0_or_1_reaches_the_command(monkeypatch, capsys, app, command):
    from meddevkg_dagster.cli import command_line

    ran: list[argparse.Namespace] = []
    monkeypatch.setattr(command_line, command, lambda args: ran.append(args) or 0)
    for value in ("0", "1"):
        assert main([app, "--device", "P1", "--min-probability", value]) == 0
    assert [args.min_probability for args in ran] == [0.0, 1.0]
    with pytest.raises(SystemExit) as usage:  # not a number: argparse's own line, as before
        main([app, "--device", "P1", "--min-probability", "high"])
    assert usage.value.code == 2
    assert capsys.readouterr().err.endswith("argument --min-probability: invalid float value: 'high'\n")


FAST_RERANK = '{"rerank": {"n_estimators": 10, "folds": 2, "bagging": 1}}'
"""A Stage 3 that trains in a second: these tests are about Stage 1."""


def _llm_corpus(root: Path) -> list[str]:
    """Six devices and twelve patents whose texts hold fake_llm.TERMS, with gold for every device, and the
    options of a run of it in seconds."""
    root.mkdir()
    (root / "devices.csv").write_text(
        "fda_id,text\nP1,A drug-eluting coronary stent system on a balloon catheter.\n"
        "P2,An implantable pacemaker with a pacing electrode.\nP3,A balloon catheter for angioplasty.\n"
        "P4,A pacemaker lead with a steroid electrode.\nP5,A self-expanding stent for the iliac artery.\n"
        "P6,An ablation catheter with an irrigated electrode.\n")
    (root / "patents.csv").write_text(
        "pat_id,text\n1,A stent with a drug coating delivered by a balloon catheter.\n2,A pacemaker with an "
        "electrode lead.\n3,A balloon catheter with a tapered tip.\n4,A dental implant.\n5,An electrode for cardiac "
        "pacing.\n6,A nitinol stent.\n7,A catheter handle.\n8,A hip prosthesis.\n9,A pacemaker battery.\n"
        "10,A catheter with an ablation electrode.\n11,A contact lens.\n12,A stent graft for aneurysm.\n")
    (root / "gold_links.csv").write_text("fda_id,pat_id\nP1,1\nP2,2\nP3,3\nP4,5\nP5,6\nP6,10\n")
    config = root.parent / "fast.json"
    config.write_text(FAST_RERANK)
    return ["--corpus", str(root), "--embedding-model", "hashing", "--config", str(config)]


def test_run_with_the_llm_extractor_takes_its_mentions_from_the_replies_and_records_it(tmp_path, llm, monkeypatch,
                                                                                        capsys):
    # `run` and `benchmark` extracted with spaCy whatever MEDDEVKG_ENTITY_EXTRACTOR said: the LLM was Dagster's only
    import polars as pl

    from tests.fake_llm import KEY, MODEL, TERMS

    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MEDDEVKG_ENTITY_EXTRACTOR")  # the option chooses it
    base, out = _llm_corpus(tmp_path / "corpus"), tmp_path / "out"
    assert main(["run", *base, "--out", str(out), "--entity-extractor", "llm"]) == 0
    printed = capsys.readouterr()
    assert len(llm.requests) == 6 + 12  # one per document
    devices, patents = (pl.read_parquet(out / f"{d}_mentions.parquet") for d in ("device", "patent"))
    assert set(devices["doc_id"]) == {f"P{i}" for i in range(1, 7)} and patents.height > 0
    assert set(devices["norm"]) | set(patents["norm"]) <= set(TERMS)  # the replies' names, not spaCy's phrases
    entities = pl.read_parquet(out / "rejected_records.parquet").filter(pl.col("source") == "entities")
    assert entities.height == 18 and set(entities["reason"]) == {"span not found in text"}  # one per document
    summary = json.loads((out / "summary.json").read_text())
    device, patent = summary["entity_extraction"]["device"], summary["entity_extraction"]["patent"]
    assert (device["extractor"], device["llm_model"], device["llm_documents"], device["llm_requests"],
            device["llm_rejected_entities"], patent["llm_requests"]) == ("llm", MODEL, 6, 6, 6, 12)
    assert "[device_entities]: 6/6 documents (100%)" in printed.out
    assert f"entity extraction: device LLM `{MODEL}` (6 documents, 6 requests, 0 from the cache" in printed.out
    assert KEY not in printed.out + printed.err
    assert not [p.name for p in out.iterdir() if KEY.encode() in p.read_bytes()]

    monkeypatch.setenv("MEDDEVKG_ENTITY_EXTRACTOR", "llm")  # the option's default: a re-run asks nothing
    assert main(["run", *base, "--out", str(out)]) == 0
    assert len(llm.requests) == 18
    device = json.loads((out / "summary.json").read_text())["entity_extraction"]["device"]
    assert (device["llm_requests"], device["llm_cache_hits"]) == (0, 6)
    assert pl.read_parquet(out / "device_mentions.parquet").equals(devices)
    capsys.readouterr()

    assert main(["run", *base, "--out", str(out), "--entity-extractor", "spacy"]) == 0  # the option wins
    assert len(llm.requests) == 18
    assert json.loads((out / "summary.json").read_text())["entity_extraction"] == {
        "device": {"extractor": "spacy"}, "patent": {"extractor": "spacy"}}
    assert "entity extraction:" not in capsys.readouterr().out


@pytest.mark.parametrize("command", ["run", "benchmark", "bench-extract"])
@pytest.mark.parametrize("fault", ["no endpoint", "refused key"])
def test_an_llm_endpoint_that_answers_nothing_ends_the_command_in_one_line_writing_nothing(tmp_path, llm, monkeypatch,
                                                                                           command, fault):
    from tests.fake_llm import KEY

    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path / "home"))
    if fault == "no endpoint":
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        monkeypatch.setenv("MEDDEVKG_LLM_BASE_URL", f"http://127.0.0.1:{port}/v1")
    else:
        llm.inject("/v1/chat/completions", 401)
    out = tmp_path / "new" / "out"
    corpus = _llm_corpus(tmp_path / "corpus")
    with pytest.raises(SystemExit) as failure:
        main([command, *corpus[:2]] if command == "bench-extract" else [command, *corpus, "--out", str(out)])
    message = str(failure.value)
    if fault == "no endpoint":  # five devices in a row failed, as the Dagster step would have
        assert re.fullmatch(r"LLMUnavailableError: 5 documents in a row failed; last: .*127\.0\.0\.1.*", message)
    else:
        assert message.startswith("LLMAuthError: LLM endpoint ") and "(HTTP 401); set MEDDEVKG_LLM_API_KEY" in message
    assert "\n" not in message and KEY not in message
    assert not out.parent.exists()


def test_an_unknown_extractor_or_an_llm_without_its_endpoint_is_refused_before_any_file_is_read(tmp_path, monkeypatch,
                                                                                                capsys):
    import meddevkg_core.corpus
    from meddevkg_core import llm_extraction
    from meddevkg_dagster.cli import ENTITY_EXTRACTOR_ENV, ENTITY_EXTRACTORS

    monkeypatch.setattr(meddevkg_core.corpus, "read_corpus", lambda *a: pytest.fail("the corpus was read"))
    for name in ("MEDDEVKG_LLM_BASE_URL", "MEDDEVKG_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEDDEVKG_LLM_API_KEY", "sk-secret")
    for command in ("run", "benchmark", "bench-extract"):
        out = ["--out", str(tmp_path / "out")] if command != "bench-extract" else []  # it writes no files
        argv = [command, "--corpus", str(tmp_path), *out]
        monkeypatch.setenv("MEDDEVKG_ENTITY_EXTRACTOR", "gpt")
        with pytest.raises(SystemExit, match=re.escape(
                "MEDDEVKG_ENTITY_EXTRACTOR='gpt': expected one of spacy, llm (the default of --entity-extractor)")):
            main(argv)
        with pytest.raises(SystemExit) as usage:
            main([*argv, "--entity-extractor", "gpt"])
        assert usage.value.code == 2  # argparse's "invalid choice"
        capsys.readouterr()
        monkeypatch.setenv("MEDDEVKG_ENTITY_EXTRACTOR", "llm")
        assert main(argv) == 1
        assert capsys.readouterr().err == ("LLM extraction needs MEDDEVKG_LLM_BASE_URL and MEDDEVKG_LLM_MODEL to "
                                           "be set\n")
        monkeypatch.setenv("MEDDEVKG_LLM_BASE_URL", "http://127.0.0.1:9/v1")
        monkeypatch.setenv("MEDDEVKG_LLM_MODEL", "m")
        monkeypatch.setenv("MEDDEVKG_LLM_TIMEOUT", "soon")
        assert main([*argv, "--entity-extractor", "llm"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("MEDDEVKG_LLM_TIMEOUT: ") and err.count("\n") == 1 and "sk-secret" not in err
        for name in ("MEDDEVKG_LLM_BASE_URL", "MEDDEVKG_LLM_MODEL", "MEDDEVKG_LLM_TIMEOUT"):
            monkeypatch.delenv(name)
    assert (ENTITY_EXTRACTOR_ENV, ENTITY_EXTRACTORS) == (llm_extraction.ENTITY_EXTRACTOR_ENV,
                                                         llm_extraction.ENTITY_EXTRACTORS)


def test_benchmark_with_the_llm_extractor_reports_it(tmp_path, llm, monkeypatch, capsys):
    import polars as pl

    from tests.fake_llm import KEY, MODEL

    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path / "home"))
    out = tmp_path / "out"
    assert main(["benchmark", *_llm_corpus(tmp_path / "corpus"), "--out", str(out), "--no-ablations"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (report["entity_extraction"]["patent"]["llm_model"], report["entity_extraction"]["patent"]["llm_requests"],
            report["corpus"]["rejected_rows"]) == (MODEL, 12, 18)  # a hallucinated span per document
    rejected = pl.read_parquet(out / "rejected_records.parquet")  # as `run` writes them: they were only counted
    assert rejected.height == 18 and set(rejected["source"]) == {"entities"}
    printed = capsys.readouterr().out
    assert printed.strip().splitlines()[-1] == (f"wrote {out}: candidates.parquet, links.parquet, rankings.parquet, "
                                                "rejected_records.parquet, report.json, report.md, plots/")
    assert f"Entities: device LLM `{MODEL}` (6 documents, 6 requests, 0 from the cache, 0 failed, 6 of " in (
        out / "report.md").read_text()
    assert KEY not in printed and not [p for p in out.rglob("*.*") if KEY.encode() in p.read_bytes()]



def test_bench_extract_with_the_llm_extractor_measures_its_mentions_and_names_it(tmp_path, llm, monkeypatch, capsys):
    # bench-extract measured spaCy only, whatever --entity-extractor run and benchmark took: the LLM could not be
    # compared with it on the same figures
    from tests.fake_llm import KEY, MODEL, TERMS

    monkeypatch.delenv("MEDDEVKG_ENTITY_EXTRACTOR")  # the option chooses it
    argv = ["bench-extract", *_llm_corpus(tmp_path / "corpus")[:2], "--random-pairs", "3"]
    assert main([*argv, "--entity-extractor", "llm"]) == 0
    printed = capsys.readouterr()
    lines = printed.out.strip().splitlines()
    r = json.loads(lines[-1])
    assert len(llm.requests) == 6 + 12  # one per document: no warm-up, and one timed run (a second reads the memo)
    assert {domain: (f["extractor"], f["llm_model"], f["llm_documents"], f["llm_requests"], f["llm_cache_hits"])
            for domain, f in r["entity_extraction"].items()} == {"device": ("llm", MODEL, 6, 6, 0),
                                                                 "patent": ("llm", MODEL, 12, 12, 0)}
    assert (r["n_patents"], r["n_devices"], r["timing_runs"], r["n_rejected_patents"]) == (12, 6, 1, 12)
    assert r["docs_per_second"] > 0 and r["patent_extraction_seconds"] > 0 and r["device_docs_per_second"] > 0
    assert (r["docs_per_second_n_process"], r["docs_per_second_by_n_process"],
            r["patent_extraction_seconds_by_n_process"]) == (None, None, None)  # spaCy's processes: not applicable
    assert r["n_distinct_norms"] == len(TERMS) and r["coverage_distinct_mapped"] == 1.0  # the replies' names
    assert sum(r["coverage"].values()) == pytest.approx(1)
    assert (r["n_gold_pairs"], r["n_random_pairs"], r["gold_tier_match_share"]) == (6, 18, 1.0)
    assert r["random_tier_match_share"] < 1.0 and r["gold_weighted_overlap_mean"] > r["random_weighted_overlap_mean"]
    assert f"extractor                 device LLM `{MODEL}` (6 documents, 6 requests, 0 from the cache" in printed.out
    assert "n_process n/a" in printed.out and "target >= 400" not in printed.out
    assert KEY not in printed.out + printed.err
    # an endpoint may take an hour over a corpus: the timed runs say how far they are, on stderr
    assert "[device_entities]: 6/6 documents (100%)" in printed.err
    assert "[patent_entities]: 12/12 documents (100%)" in printed.err

    assert main([*argv, "--entity-extractor", "llm"]) == 0  # the same replies, from the cache: not the endpoint's rate
    printed = capsys.readouterr()
    again = json.loads(printed.out.strip().splitlines()[-1])
    assert len(llm.requests) == 18 and again["entity_extraction"]["patent"]["llm_cache_hits"] == 12
    assert "all 18 documents answered from the reply cache: not the endpoint's throughput" in printed.out
    timing = {"docs_per_second", "patent_extraction_seconds", "device_docs_per_second", "device_extraction_seconds",
              "entity_extraction"}
    assert {k: v for k, v in again.items() if k not in timing} == {k: v for k, v in r.items() if k not in timing}

    monkeypatch.setenv("MEDDEVKG_ENTITY_EXTRACTOR", "llm")
    assert main([*argv, "--entity-extractor", "spacy", "--runs", "1", "--n-process", "1"]) == 0  # the option wins
    spacy = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(llm.requests) == 18 and "entity_extraction" not in spacy  # spaCy's report as it always was
    assert spacy["docs_per_second_by_n_process"].keys() == {"1"}


ONE_CLASS_FOLD = '{"rerank": {"n_estimators": 10, "folds": 2, "bagging": 1, "outside_pool_negative_rate": 0}}'
"""Without out-of-pool negatives, the pool's pairs are the training pairs."""
ONE_CLASS_REFUSAL = (
    "cannot train the reranker's fold 2 of 2 (held out: P1, P3, P5): its training pairs, of 3 devices (P2, P4, P6), "
    "are 3 gold links and no other pair, and XGBoost learns from both; give the corpus patents that are not gold "
    "links of these devices (more patents than gold links), or more gold devices")


def _gold_for_every_pool_pair_but_p1s(root: Path) -> list[str]:
    """_llm_corpus with gold naming every Stage-2 pool pair of P2, P4 and P6 (P1 has one that is not gold)."""
    base = _llm_corpus(root)
    (root / "gold_links.csv").write_text("fda_id,pat_id\nP1,1\nP2,2\nP3,1\nP4,2\nP5,12\nP6,10\n")
    (root.parent / "fast.json").write_text(ONE_CLASS_FOLD)
    return base


@pytest.mark.parametrize("command", ["run", "benchmark"])
def test_a_fold_whose_training_pairs_are_all_gold_ends_the_command_in_one_line_writing_nothing(tmp_path, command):
    # the fold holding out P1, P3 and P5 ended in a traceback: "Invalid classes inferred from unique values of y"
    base = _gold_for_every_pool_pair_but_p1s(tmp_path / "corpus")
    out = tmp_path / "new" / "out"
    with pytest.raises(SystemExit) as refusal:
        main([command, *base, "--out", str(out)])
    assert str(refusal.value) == f"{tmp_path / 'corpus'}: {ONE_CLASS_REFUSAL}"
    assert not out.parent.exists()


def test_the_reranker_model_step_fails_with_the_same_line(tmp_path):
    import dagster as dg

    from meddevkg_core.corpus import read_corpus
    from meddevkg_dagster.cli import run_failure
    from meddevkg_dagster.resources import PipelineConfigResource
    from tests.dagster.conftest import Harness

    _gold_for_every_pool_pair_but_p1s(tmp_path / "corpus")
    harness = Harness(tmp_path, tmp_path / "corpus")
    harness.resources["pipeline_config"] = PipelineConfigResource(config_json=ONE_CLASS_FOLD)
    keys = read_corpus(harness.corpus).devices["fda_id"].sort().to_list()
    harness.register(keys)
    result = harness.materialize(partition_range=(keys[0], keys[-1])).results[-1]
    failed = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert [e.step_key for e in failed] == ["reranker_model"]
    assert failed[0].step_failure_data.user_failure_data.description == ONE_CLASS_REFUSAL  # a dg.Failure
    assert run_failure(result.all_events) == f"step reranker_model: {ONE_CLASS_REFUSAL}"
