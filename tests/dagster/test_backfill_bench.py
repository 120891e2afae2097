"""`meddevkg bench-backfill`: one Dagster run over every device vs the core doing the same work."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from meddevkg_core.demo import demo_corpus_dir

REPO = Path(__file__).resolve().parents[2]


def _digests(files: dict[str, Path]) -> dict[str, dict]:
    return {name: {"path": str(path.resolve()), "size": path.stat().st_size,
                   "sha256": hashlib.sha256(path.read_bytes()).hexdigest()} for name, path in files.items()}


def test_bench_backfill_times_one_run_against_the_core_and_both_produce_the_same_links(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDDEVKG_", "DAGSTER_"))}
    env["MEDDEVKG_EMBEDDING_MODEL"] = "hashing"
    home = tmp_path / "home"
    proc = subprocess.run([sys.executable, "-m", "meddevkg_dagster.cli", "bench-backfill", "--corpus",
                           str(demo_corpus_dir()), "--runs", "1", "--home", str(home), "--patent-copies", "2"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["devices"] == 29 and report["dagster_runs_per_backfill"] == 1 and report["runs"] == 1
    assert report["home"] == str(home) and report["home_removed"] is False
    assert report["dagster_median_s"] > 0 and report["core_median_s"] > 0
    assert report["event_log"] == "BatchingSqliteEventLogStorage" and report["event_batch_size"] > 0
    assert report["ratio"] == pytest.approx(report["dagster_median_s"] / report["core_median_s"], rel=0.05)
    assert report["dagster_cpu_median_s"] > 0 and report["core_cpu_median_s"] > 0
    assert report["cpu_ratio"] == pytest.approx(report["dagster_cpu_median_s"] / report["core_cpu_median_s"], rel=0.05)
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        stored = con.sql("select count(*) from meddevkg.reranked_links").fetchone()[0]
        copies = con.sql("select count(*) from meddevkg.reranked_links where pat_id like '%~1'").fetchone()[0]
        patents = con.sql("select count(*), count(distinct pat_id) from meddevkg.patents").fetchone()
    assert report["links"] == stored > 0  # the core did the same work the backfill stored
    assert report["patent_copies"] == 2 and report["patents"] == patents[0] == patents[1]
    assert 0 < copies < stored  # the devices were linked against both copies of the patents
    # the corpus files read (its tables and its own company table), with their bytes' digest (lineage)
    demo = demo_corpus_dir()
    assert report["inputs"] == _digests({"devices": demo / "devices.jsonl", "patents": demo / "patents.csv",
                                         "gold_links": demo / "gold_links.csv",
                                         "labeled_pairs": demo / "labeled_pairs.csv",
                                         "acquisitions": demo / "acquisitions.csv"})


def _with_fda_records(harness, tmp_path) -> tuple[list[str], Path]:
    """Every demo device registered, and MEDDEVKG_FDA_PMA set to a small records file: supplements of the
    first device, and a 2018 one of Sealpoint's, after Meridian bought PulseWave (a company match by deal)."""
    from meddevkg_core.corpus import read_corpus
    from meddevkg_dagster.resources import CorpusResource

    keys = read_corpus(harness.corpus).devices["fda_id"].sort().to_list()
    harness.register(keys)
    fda = tmp_path / "pma.parquet"
    pl.DataFrame({"submission_number": [keys[0], f"{keys[0]}/S001", "P909020/S001"],
                  "date_decision": ["2020-01-01", "2021-01-01", "2018-05-01"],
                  "device": ["X", "NEW MODEL", "SEALPOINT"],
                  "approval_order_statement": ["original", "A new shaft.", "A change to the anchor supplier."]}
                 ).write_parquet(fda)
    harness.resources["corpus"] = CorpusResource(path=str(harness.corpus), fda_pma_path=str(fda))
    return keys, fda


def _core_as_stored(harness, resources):
    """The core side's work on the harness's store, after checking its pool and links are the stored ones."""
    from meddevkg_dagster.backfill_bench import core_device_links

    tables = {t: harness.table(t) for t in
              ("patents", "patent_embeddings", "patent_entities", "meddevonto", "reranker_model")}
    core = core_device_links(tables, resources)
    pair = ["fda_id", "pat_id"]
    assert_frame_equal(core.pool.sort(pair), harness.table("candidate_pool").sort(pair), check_dtypes=False)
    assert_frame_equal(core.links.sort(pair), harness.table("reranked_links").sort(pair), check_dtypes=False)
    return core


def test_the_fda_records_a_dagster_run_read_are_taken_from_its_source_asset(harness, tmp_path):
    # MEDDEVKG_FDA_PMA is read by the Dagster side's pma_documents: its run names the file's bytes
    from meddevkg_dagster.backfill_bench import source_inputs

    keys, fda = _with_fda_records(harness, tmp_path)
    result = harness.materialize(dg.AssetSelection.assets("pma_documents").required_multi_asset_neighbors(),
                                 partition_range=(keys[0], keys[-1]))
    assert result.success
    assert source_inputs(result) == _digests({"devices": harness.corpus / "devices.jsonl", "fda_pma": fda})


def test_the_release_files_the_stored_ontology_was_merged_from_are_taken_from_its_asset(harness):
    # the core side links with the stored meddevonto: the UMLS / MeSH files it was merged from are the run's too
    from meddevkg_dagster.backfill_bench import ontology_inputs
    from meddevkg_dagster.jobs import ONTOLOGY_ASSETS
    from meddevkg_dagster.resources import TerminologiesResource

    assert ontology_inputs(harness.instance) == {}  # not materialised yet
    assert harness.materialize(ONTOLOGY_ASSETS).success
    assert ontology_inputs(harness.instance) == {}  # neither release set: the shipped ontology, no file
    umls, mesh = REPO / "tests" / "fixtures" / "umls", REPO / "tests" / "fixtures" / "mesh" / "desc_sample.xml"
    harness.resources["terminologies"] = TerminologiesResource(umls_dir=str(umls), mesh_xml=str(mesh))
    assert harness.materialize(ONTOLOGY_ASSETS).success
    assert ontology_inputs(harness.instance) == _digests({"umls_mrsty": umls / "MRSTY.RRF",
                                                          "umls_mrconso": umls / "MRCONSO.RRF",
                                                          "umls_mrrel": umls / "MRREL.RRF", "mesh_descriptors": mesh})


def test_with_fda_records_the_core_side_makes_the_pool_and_links_the_dagster_run_stored(harness, tmp_path):
    # The supplements make the dossier score and extend a device's deal window: both sides read them
    from meddevkg_core.lineage import inputs_json

    keys, fda = _with_fda_records(harness, tmp_path)
    assert harness.materialize(partition_range=(keys[0], keys[-1])).success
    core = _core_as_stored(harness, harness.resources)
    demo = harness.corpus  # the files it read, the FDA records among them
    assert inputs_json(core.inputs) == _digests({"devices": demo / "devices.jsonl", "patents": demo / "patents.csv",
                                                 "gold_links": demo / "gold_links.csv",
                                                 "labeled_pairs": demo / "labeled_pairs.csv",
                                                 "acquisitions": demo / "acquisitions.csv", "fda_pma": fda})


def test_a_core_side_that_made_other_links_than_the_run_stored_is_an_error(harness, monkeypatch):
    # A future change to an asset the core side does not follow: the ratio would compare unlike work.
    # Other pairs (one link fewer), or the same pairs with other scores (another model or feature on one side)
    from meddevkg_core.corpus import read_corpus
    from meddevkg_dagster import backfill_bench
    from meddevkg_dagster.checks import CHECKS
    from meddevkg_dagster.jobs import device_links_job
    from tests.dagster.conftest import ASSETS

    keys = read_corpus(harness.corpus).devices["fda_id"].sort().to_list()
    harness.register(keys)
    assert harness.materialize(partition_range=(keys[0], keys[-1])).success
    made = backfill_bench.core_device_links
    monkeypatch.setattr(backfill_bench, "core_device_links",  # one link fewer than the assets make
                        lambda tables, resources: (core := made(tables, resources))._replace(links=core.links[1:]))
    job = dg.Definitions(assets=ASSETS, asset_checks=CHECKS, jobs=[device_links_job],
                         resources=harness.resources).resolve_job_def("device_links_job")
    stored = harness.table("reranked_links").height
    with pytest.raises(RuntimeError, match=rf"^bench-backfill: the core side made {stored - 1} links, the Dagster "
                                           rf"run stored {stored}: the two sides did different work"):
        backfill_bench.time_backfill(harness.instance, job, harness.resources, harness.db, runs=1, patent_copies=1)

    shifted: list[pl.DataFrame] = []  # the links the core side made, each probability 0.01 higher

    def higher(tables, resources):
        core = made(tables, resources)
        shifted.append(core.links.with_columns(pl.col("probability") + 0.01))
        return core._replace(links=shifted[-1])

    monkeypatch.setattr(backfill_bench, "core_device_links", higher)
    with pytest.raises(RuntimeError, match=rf"^bench-backfill: reranked_links\.probability differs on {stored} of "
                                           rf"{stored} pairs, e\.g\. ") as raised:
        backfill_bench.time_backfill(harness.instance, job, harness.resources, harness.db, runs=1, patent_copies=1)
    links = harness.table("reranked_links")
    core, run = (frame.sort("fda_id", "pat_id").row(0, named=True) for frame in (shifted[-1], links))
    assert str(raised.value) == (
        f"bench-backfill: reranked_links.probability differs on {stored} of {stored} pairs, e.g. ({run['fda_id']}, "
        f"{run['pat_id']}): core side {core['probability']:.7g}, Dagster run {run['probability']:.7g}: the two "
        f"sides did different work, the ratio would mislead")
    assert backfill_bench.different_work("links", shifted[-1], links) is None  # the same pairs: the old check passed


def test_the_core_side_s_pairs_are_compared_with_the_stored_ones_not_only_counted():
    from meddevkg_dagster.backfill_bench import different_work

    stored = pl.DataFrame({"fda_id": ["P1", "P1"], "pat_id": ["A", "B"], "decision": [True, False]})
    assert different_work("links", stored.reverse(), stored) is None
    assert different_work("links", stored[:1].with_columns(pat_id=pl.lit("C")), stored) == (
        "bench-backfill: the core side made 1 links, the Dagster run stored 2 (1 of its pairs not among them): "
        "the two sides did different work, the ratio would mislead")
    swapped = stored.with_columns(pat_id=pl.Series(["A", "C"]))
    assert "made 2 pool pairs, the Dagster run stored 2 (1 of its pairs not among them)" in different_work(
        "pool pairs", swapped, stored)


def test_the_core_side_s_values_are_compared_with_the_stored_ones_column_by_column():
    # exact for integers, strings and booleans; floats within float32 rounding; NaN and null equal themselves
    from meddevkg_dagster.backfill_bench import different_values

    stored = pl.DataFrame({"fda_id": ["P1", "P1", "P2"], "pat_id": ["A", "B", "A"],
                           "probability": [0.5, float("nan"), None], "rank": [1, 2, 1], "verdict": ["x", None, "y"]},
                          schema_overrides={"probability": pl.Float32, "rank": pl.Int32})
    assert different_values("reranked_links", stored.reverse(), stored) is None
    assert different_values("reranked_links", stored.with_columns(pl.col("probability") * (1 + 1e-6)), stored) is None
    assert different_values("reranked_links", stored.with_columns(pl.col("probability") + 1e-3), stored) == (
        "bench-backfill: reranked_links.probability differs on 1 of 3 pairs, e.g. (P1, A): core side 0.501, "
        "Dagster run 0.5: the two sides did different work, the ratio would mislead")
    assert "probability differs on 1 of 3 pairs, e.g. (P2, A): core side 0.25, Dagster run null" in different_values(
        "reranked_links", stored.with_columns(probability=pl.Series([0.5, float("nan"), 0.25], dtype=pl.Float32)),
        stored)
    assert "rank differs on 2 of 3 pairs, e.g. (P1, A): core side 2, Dagster run 1" in different_values(
        "reranked_links", stored.with_columns(rank=pl.Series([2, 3, 1], dtype=pl.Int32)), stored)
    assert "verdict differs on 1 of 3 pairs, e.g. (P1, B): core side 'x', Dagster run null" in different_values(
        "reranked_links", stored.with_columns(verdict=pl.Series(["x", "x", "y"])), stored)
    # a column one side lacks is not skipped: the sides' tables must be the same tables
    assert different_values("reranked_links", stored.drop("rank").with_columns(extra=pl.lit(1)), stored) == (
        "bench-backfill: reranked_links's columns differ: core side only ['extra'], Dagster run only ['rank']: "
        "the two sides did different work, the ratio would mislead")


def test_replicating_the_patent_tables_copies_every_row_under_new_ids():
    from meddevkg_dagster.backfill_bench import replicate_patent_tables

    con = duckdb.connect()
    con.execute("create schema meddevkg")
    con.execute("create table meddevkg.patents as select * from (values ('1', 'a'), ('2', 'b')) t(pat_id, title)")
    con.execute("create table meddevkg.patent_embeddings as "
                "select * from (values ('1', [0.5]), ('2', [1.0])) t(doc_id, embedding)")
    con.execute("create table meddevkg.patent_entities as "
                "select * from (values ('1', 'stent'), ('1', 'valve')) t(doc_id, norm)")
    assert replicate_patent_tables(con, 3) == 6
    assert sorted(r[0] for r in con.sql("select pat_id from meddevkg.patents").fetchall()) == [
        "1", "1~1", "1~2", "2", "2~1", "2~2"]
    assert con.sql("select count(*) from meddevkg.patent_entities where doc_id = '1~2'").fetchone()[0] == 2
    assert con.sql("select embedding from meddevkg.patent_embeddings where doc_id = '2~1'").fetchone()[0] == [1.0]
    with pytest.raises(ValueError, match="at least 1"):
        replicate_patent_tables(con, 0)


def test_bench_backfill_refuses_fewer_than_one_patent_copy_before_any_work(tmp_path, monkeypatch):
    from meddevkg_dagster.backfill_bench import run_backfill_bench

    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="at least 1"):
        run_backfill_bench(demo_corpus_dir(), runs=1, patent_copies=0)
    assert not any(tmp_path.iterdir())


def test_bench_backfill_refuses_fewer_than_one_run_before_any_work(tmp_path, monkeypatch):
    # it materialised the corpus, then failed on the core side's result it never made (NameError)
    from meddevkg_dagster.backfill_bench import run_backfill_bench

    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="^runs must be at least 1, got 0$"):
        run_backfill_bench(demo_corpus_dir(), runs=0)
    assert not any(tmp_path.iterdir())


def test_bench_backfill_refuses_openfda_devices_before_any_work(tmp_path, monkeypatch):
    # The Dagster side would fetch the devices from openFDA, the core side reads the corpus's
    from meddevkg_core.errors import InputError
    from meddevkg_dagster.backfill_bench import run_backfill_bench

    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path))
    monkeypatch.setenv("MEDDEVKG_DEVICE_SOURCE", "openfda")
    monkeypatch.setenv("MEDDEVKG_OPENFDA_URL", "http://127.0.0.1:9")  # never the real openFDA, whatever happens
    with pytest.raises(InputError, match=r"^bench-backfill: MEDDEVKG_DEVICE_SOURCE=openfda: .*corpus"):
        run_backfill_bench(demo_corpus_dir(), runs=1)
    assert not any(tmp_path.iterdir())


def test_a_benchmark_home_nobody_asked_for_is_removed_even_when_the_run_fails(tmp_path, monkeypatch):
    from meddevkg_dagster.cli import backfill_home

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # re-read TMPDIR
    with backfill_home(None) as home:
        assert home.parent == tmp_path and home.name.startswith("meddevkg-backfill-")
        (home / "warehouse.duckdb").write_bytes(b"x")
    assert not any(tmp_path.iterdir())
    with pytest.raises(RuntimeError), backfill_home(None) as home:
        (home / "warehouse.duckdb").write_bytes(b"x")
        raise RuntimeError("the run failed")
    assert not any(tmp_path.iterdir())


def test_a_benchmark_home_given_on_the_command_line_is_kept(tmp_path):
    from meddevkg_dagster.cli import backfill_home

    with backfill_home(str(tmp_path / "kept")) as home:
        home.mkdir()
        (home / "warehouse.duckdb").write_bytes(b"x")
    assert (tmp_path / "kept" / "warehouse.duckdb").is_file()


def test_the_core_side_extracts_device_mentions_with_the_configured_extractor(harness, llm):
    # MEDDEVKG_ENTITY_EXTRACTOR=llm: device_entities asks the LLM, and so does the core side
    from meddevkg_core.corpus import read_corpus
    from meddevkg_dagster.jobs import DEVICE_ASSETS
    from meddevkg_dagster.resources import build_resources

    keys = read_corpus(harness.corpus).devices["fda_id"].sort().to_list()
    harness.register(keys)
    assert harness.materialize(partition_range=(keys[0], keys[-1])).success  # spaCy: the patents and reranker
    harness.resources["entity_extractor"] = build_resources()["entity_extractor"]
    assert harness.materialize(DEVICE_ASSETS, partition_range=(keys[0], keys[-1])).success  # device_links_job
    assert set(harness.table("device_entities")["norm"]) <= {"stent", "balloon", "catheter", "electrode", "pacemaker"}
    needed = {k: harness.resources[k] for k in
              ("corpus", "sources", "entity_extractor", "embedding_model", "pipeline_config", "cross_encoder")}
    with dg.build_resources(needed) as resolved:  # the LLM settings are EnvVars, resolved as the bench does
        _core_as_stored(harness, {k: getattr(resolved, k) for k in needed})
