"""Patents are partitioned by grant year: a new year of grants is extracted and encoded alone."""

from __future__ import annotations

import shutil
from datetime import datetime

import dagster as dg
import polars as pl
import pytest

from meddevkg_core.corpus import read_corpus
from meddevkg_core.demo import demo_corpus_dir
from tests.core.sources.test_patentsview import write_bulk_dir
from tests.dagster.conftest import Harness

NEW_YEAR = "2024"


@pytest.fixture
def corpus_without_last_year(tmp_path):
    """The demo corpus as it stood before its last grant year arrived (that year's rows set aside)."""
    root = tmp_path / "corpus"
    shutil.copytree(demo_corpus_dir(), root)
    lines = (root / "patents.csv").read_text().splitlines(keepends=True)
    full = root / "patents.full.csv"
    full.write_text("".join(lines))
    frame = pl.read_csv(full, infer_schema=False)
    held = set(frame.filter(pl.col("grant_date").str.starts_with(NEW_YEAR))["pat_id"].to_list())
    assert held, "the demo corpus should have grants in the held-out year"
    # Keep the file byte-for-byte apart from the held-out rows (quoting, malformed rows and all).
    kept = [lines[0]] + [ln for ln in lines[1:] if ln.split(",", 1)[0] not in held]
    (root / "patents.csv").write_text("".join(kept))
    return root, full, held


def _partitions(result, asset: str) -> set[str]:
    return {e.partition for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset}


def test_adding_a_grant_year_extracts_and_encodes_only_that_year(tmp_path, corpus_without_last_year):
    root, full, held = corpus_without_last_year
    (tmp_path / "run").mkdir()
    harness = Harness(tmp_path / "run", root)
    devices = read_corpus(root).devices["fda_id"].sort().to_list()
    harness.register(devices)
    years_before = harness.instance.get_dynamic_partitions("patent_years")
    assert NEW_YEAR not in years_before and "undated" in years_before
    assert harness.materialize(partition_range=(devices[0], devices[-1])).success
    embeddings_before = harness.table("patent_embeddings")
    entities_before = harness.table("patent_entities")
    assert not set(embeddings_before["doc_id"].to_list()) & held

    shutil.copy(full, root / "patents.csv")  # the new year's grants arrive
    harness.register(devices)  # registers the new year only
    assert set(harness.instance.get_dynamic_partitions("patent_years")) - set(years_before) == {NEW_YEAR}
    run = harness.materialize_patent_years([NEW_YEAR])
    assert run.success
    for asset in ("patents", "patent_entities", "patent_embeddings"):
        assert _partitions(run, asset) == {NEW_YEAR}, asset
    rows = {e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata["dagster/row_count"].value
            for e in run.get_asset_materialization_events()}
    assert rows["patent_embeddings"] == rows["patents"] == len(held)  # only the new year was encoded

    embeddings_after = harness.table("patent_embeddings")
    old = embeddings_after.filter(pl.col("patent_year") != NEW_YEAR).sort("doc_id")
    assert old.equals(embeddings_before.sort("doc_id"))  # earlier years untouched
    assert set(embeddings_after.filter(pl.col("patent_year") == NEW_YEAR)["doc_id"].to_list()) == held
    assert harness.table("patent_entities").filter(pl.col("patent_year") != NEW_YEAR).height == entities_before.height

    relink = harness.materialize(dg.AssetSelection.assets("candidate_pool"), partition_range=(devices[0], devices[-1]))
    assert relink.success
    pool = harness.table("candidate_pool")
    assert set(pool["pat_id"].to_list()) & held  # devices now see the new grants


def test_a_run_over_all_years_stores_every_patent_once_under_its_year(harness):
    keys = read_corpus(harness.corpus).devices["fda_id"].sort().to_list()
    harness.register(keys)
    assert harness.materialize_patent_years().success
    patents, embeddings = harness.table("patents"), harness.table("patent_embeddings")
    corpus = read_corpus(harness.corpus).patents
    assert patents.height == corpus.height == patents["pat_id"].n_unique()
    years = patents.select("pat_id", pl.col("grant_date").dt.year().cast(pl.String).alias("y"))
    joined = embeddings.join(years, left_on="doc_id", right_on="pat_id")
    assert joined.height == corpus.height and (joined["patent_year"] == joined["y"]).all()


def test_weekly_refresh_reads_the_current_year_and_a_success_relinks_every_device():
    from meddevkg_dagster.schedules import relink_after_patent_refresh, weekly_patents_refresh

    with dg.instance_for_test() as instance:
        [run] = weekly_patents_refresh(dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2026, 11, 23, 4)))
        assert run.run_key == "patents-2026-11-23"
        tags = run.tags
        assert tags["dagster/asset_partition_range_start"] == tags["dagster/asset_partition_range_end"] == "2026"
        assert instance.get_dynamic_partitions("patent_years") == ["2026"]
        [january] = weekly_patents_refresh(dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2027, 1, 4, 4)))
        assert (january.tags["dagster/asset_partition_range_start"],
                january.tags["dagster/asset_partition_range_end"]) == ("2026", "2027")
        assert instance.get_dynamic_partitions("patent_years") == ["2026", "2027"]

        # A corpus registered later puts its keys between the two years of next January's refresh:
        # one range from 2027 to 2028 would re-extract and re-encode them, so each year is a run.
        instance.add_dynamic_partitions("patent_years", ["2019", "undated"])
        split = weekly_patents_refresh(dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2028, 1, 3, 4)))
        assert [(r.run_key, r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
                for r in split] == [("patents-2028-01-03-2027", "2027", "2027"),
                                    ("patents-2028-01-03-2028", "2028", "2028")]

        finished = dg.DagsterRun(job_name="patents_job", run_id="r1", status=dg.DagsterRunStatus.SUCCESS)
        event = dg.DagsterEvent(event_type_value="PIPELINE_SUCCESS", job_name="patents_job")

        def tick():
            return relink_after_patent_refresh(dg.build_run_status_sensor_context(
                sensor_name="relink_after_patent_refresh", dagster_instance=instance, dagster_run=finished,
                dagster_event=event))

        assert isinstance(tick(), dg.SkipReason)  # no devices yet
        instance.add_dynamic_partitions("pma_devices", ["P100045", "P260001"])
        relink = tick()
    assert relink.run_key == "relink-r1"
    assert (relink.tags["dagster/asset_partition_range_start"], relink.tags["dagster/asset_partition_range_end"]) == (
        "P100045", "P260001")


def test_a_year_from_patentsview_bulk_files_builds_that_years_grants_only(harness, tmp_path):
    from meddevkg_dagster.resources import SourcesResource

    bulk_dir = write_bulk_dir(tmp_path / "bulk")
    harness.resources["sources"] = SourcesResource(patent_source="patentsview_bulk",
                                                   patentsview_bulk_dir=str(bulk_dir))
    harness.instance.add_dynamic_partitions("patent_years", ["2015"])
    result = harness.materialize(dg.AssetSelection.assets("patents", "patent_quarantine"), partition_key="2015")
    assert result.success
    assert harness.table("patents")["pat_id"].to_list() == ["10000014"]
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.path == ["patents"]]
    metadata = event.materialization.metadata
    assert metadata["read"].value == 1  # the other years' grants are left out while the files stream by


@pytest.mark.parametrize("since", ["2024/01/01", "01-01-2024", " "])
def test_a_malformed_patents_granted_since_fails_naming_the_variable(harness, since):
    from meddevkg_dagster.resources import SourcesResource

    harness.resources["sources"] = SourcesResource(patent_source="patentsview_api", patents_granted_since=since)
    harness.instance.add_dynamic_partitions("patent_years", ["2024"])
    result = harness.materialize(dg.AssetSelection.assets("patents", "patent_quarantine"), partition_key="2024")
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "MEDDEVKG_PATENTS_GRANTED_SINCE" in failure.event_specific_data.error.message
