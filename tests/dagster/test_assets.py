"""The whole asset graph on the demo corpus: materialised, idempotent, backfillable per device."""

import base64
import json
import re
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import polars as pl
import pytest

from meddevkg_core.corpus import read_corpus
from meddevkg_core.lineage import fingerprint
from meddevkg_dagster.definitions import defs
from tests.dagster.conftest import ASSETS, FAST_RERANK


def _all_devices(harness):
    keys = read_corpus(harness.corpus).devices["fda_id"].sort().to_list()
    harness.register(keys)
    return keys


def test_full_graph_materialises_with_checks_and_metadata(harness):
    keys = _all_devices(harness)
    result = harness.materialize(partition_range=(keys[0], keys[-1]))
    assert result.success
    checks = {e.asset_check_key.name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["pma_documents_keys_unique"] and checks["candidate_pool_keys_unique"]
    patents_check = [e for e in result.get_asset_check_evaluations()
                     if e.asset_check_key.name == "patents_keys_unique"]
    # a patent id is not a year: a stale row under another year would only show across partitions
    assert patents_check[0].metadata["scope"].value == "whole table"
    assert checks["device_embeddings_complete"] and checks["patent_embeddings_complete"]

    pool, links = harness.table("candidate_pool"), harness.table("reranked_links")
    assert pool.height > 0 and links.height == pool.height
    ranks = links.group_by("fda_id").agg(pl.col("rank").sort())["rank"].to_list()
    assert all(r == list(range(1, len(r) + 1)) for r in ranks)  # each device's final order
    assert links["text_sim"].is_null().all()  # by default no text adapter: each device's pairs by probability
    assert sorted(pool["fda_id"].unique()) == sorted(set(pool["fda_id"]) & set(keys))
    assert harness.table("rejected_records").height == 3  # the demo's deliberately malformed rows
    ev = harness.table("link_evaluation").row(0, named=True)
    assert ev["n_devices"] == len(keys) and ev["pool_recall"] is not None and ev["link_recall_out_of_fold_only"]
    assert 0 <= ev["R_at_10"] <= 1 and 0 <= ev["macro_R_at_10"] <= 1  # over gold pairs, per gold device
    graph = harness.table("meddevkg")
    assert {"Device", "Patent", "Company", "Concept", "LINKED_TO", "ASSIGNED_TO", "ACQUIRED",
            "PARTNER_OF"} <= set(graph["label"])

    declared = {key.to_user_string(): md["dagster/column_schema"] for a in ASSETS
                for key, md in a.metadata_by_key.items() if "dagster/column_schema" in md}
    assert len(declared) >= 10  # every partitioned table: its columns on the definition, not per partition event
    for name, schema in declared.items():
        with duckdb.connect(str(harness.db), read_only=True) as con:
            stored = [r[0] for r in con.execute(
                "select column_name from information_schema.columns where table_schema = 'meddevkg' "
                "and table_name = ? order by ordinal_position", [name]).fetchall()]
        assert stored == [c.name for c in schema.columns], name  # an empty output's table is created too

    mats = _materialized(result)
    assert "pool_recall" in mats["link_evaluation"]
    for asset, prefix in (("candidate_pool", "admitted_"), ("device_entities", "coverage_"),
                          ("company_dictionary", "method_")):  # counted by group_by, listed in one order
        listed = [k for k in mats[asset] if k.startswith(prefix)]
        assert len(listed) > 1 and listed == sorted(listed), asset
    assert mats["reranker_model"]["text_adapter"].value is False
    corpus = read_corpus(harness.corpus)  # each source asset names the bytes of the file it came from
    for asset, table in (("pma_documents", "devices"), ("patents", "patents"), ("gold_links", "gold_links")):
        assert mats[asset]["inputs"].value == {table: corpus.inputs[table].model_dump()}, asset
    assert mats["reranker_model"]["known_links"].value > 0 and mats["reranker_model"]["known_link_devices"].value > 0
    model = mats["reranker_model"]
    assert model["known_link_named_devices"].value == model["known_link_devices"].value
    assert "not configured" in mats["cross_encoder_scores"]["cross_encoder"].value or \
        "none configured" in mats["cross_encoder_scores"]["cross_encoder"].value


def _materialized(result) -> dict[str, dict]:
    """Each asset's materialisation metadata (the last event per asset)."""
    return {e.event_specific_data.materialization.asset_key.to_user_string():
            e.event_specific_data.materialization.metadata for e in result.get_asset_materialization_events()}


def _inputs_loaded(result, step: str) -> set[str]:
    return {e.event_specific_data.input_name for run in result.results for e in run.all_events
            if e.event_type == dg.DagsterEventType.LOADED_INPUT and e.step_key == step}


def _plots_of(metadata) -> dict[str, bytes]:
    """The files in the directory a link_evaluation materialisation names (`plots_dir`)."""
    return {p.name: p.read_bytes() for p in sorted(Path(metadata["plots_dir"].value).iterdir())}


def _stored_evaluation(harness) -> dict:
    event = harness.instance.get_latest_materialization_event(dg.AssetKey("link_evaluation"))
    return event.asset_materialization.metadata


def test_a_failed_evaluation_leaves_the_plots_its_stored_materialisation_names(harness, tmp_path, monkeypatch):
    """The plots are drawn before the IO manager stores the table: a run failing while drawing them,
    or when its table is stored, leaves the files the stored materialisation names as they were."""
    from meddevkg_dagster.assets import outputs

    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path / "home"))
    plots = tmp_path / "home" / "plots"
    plots.mkdir(parents=True)
    for name in ("recall_volume.png", "rank_distribution.png"):  # drawn before plots had a directory per run
        (plots / name).write_text(f"old layout {name}")
    keys = _all_devices(harness)
    first = harness.materialize(partition_range=(keys[0], keys[-1]))
    assert first.success
    stored = _materialized(first)["link_evaluation"]
    files = _plots_of(stored)
    assert list(files) == ["rank_distribution.png", "recall_volume.png"]
    for name, png in files.items():  # the files are the images the materialisation shows
        assert stored[f"{name.removesuffix('.png')}_plot"].value.endswith(f"({_data_uri(png)})")
    assert [p.name for p in plots.iterdir()] == [first.run_id]  # no store names the old layout's files
    evaluation = dg.AssetSelection.assets("link_evaluation")

    def drawn(text):
        def draw(data, path):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return path
        return draw

    monkeypatch.setattr(outputs, "plot_recall_volume", drawn("a later run's plot"))
    monkeypatch.setattr(outputs, "plot_rank_distribution", drawn("a later run's plot"))
    _storing_fails_for("link_evaluation", monkeypatch)
    assert not harness.materialize(evaluation).success
    assert _plots_of(stored) == files and _stored_evaluation(harness)["plots_dir"] == stored["plots_dir"]

    def fails(*args, **kwargs):
        raise RuntimeError("the second plot could not be drawn")

    monkeypatch.setattr(outputs, "plot_rank_distribution", fails)
    before = sorted(p.name for p in plots.iterdir())
    assert not harness.materialize(evaluation).success
    assert _plots_of(stored) == files and sorted(p.name for p in plots.iterdir()) == before  # nothing half-drawn


def test_plot_directories_are_bounded_sparing_the_stored_one_and_the_old_layout_it_names(tmp_path):
    import os

    from meddevkg_dagster.assets.outputs import PLOT_NAMES, prune_plot_runs

    root = tmp_path / "plots"
    runs = [root / f"run{i}" for i in range(6)]  # run5 the newest, the one writing
    for i, run in enumerate(runs):
        run.mkdir(parents=True)
        (run / PLOT_NAMES[0]).write_text(run.name)
        os.utime(run, (1000 + i, 1000 + i))
    for name in PLOT_NAMES:
        (root / name).write_text("old layout")
    prune_plot_runs(root, {runs[5], root}, keep=3)  # the store names the old layout: it stays
    assert sorted(p.name for p in root.iterdir()) == sorted([*PLOT_NAMES, "run3", "run4", "run5"])
    prune_plot_runs(root, {runs[5], runs[3]}, keep=1)  # the store names run3, older than the one kept
    assert sorted(p.name for p in root.iterdir()) == ["run3", "run5"]


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _storing_fails_for(asset: str, monkeypatch) -> None:
    """The IO manager fails to store `asset` (a full disk), and stores every other output."""
    from meddevkg_dagster.io_manager import PartitionRangePolarsTypeHandler

    store = PartitionRangePolarsTypeHandler.handle_output

    def fails(self, context, table_slice, obj, connection):
        if context.asset_key.to_user_string() == asset:
            raise OSError("disk full")
        return store(self, context, table_slice, obj, connection)

    monkeypatch.setattr(PartitionRangePolarsTypeHandler, "handle_output", fails)


def test_a_source_step_failing_at_its_last_output_runs_no_reader_of_the_first(harness, monkeypatch):
    """pma_documents is stored before pma_supplements fails: the step fails, so no step that reads
    the new devices runs beside the old supplements (two single-output steps would let them)."""
    _storing_fails_for("pma_supplements", monkeypatch)
    keys = _all_devices(harness)
    result = harness.materialize(partition_range=(keys[0], keys[-1]))
    assert not result.success
    device_run = {e.event_specific_data.materialization.asset_key.to_user_string()
                  for e in result.results[-1].get_asset_materialization_events()}
    readers = {k.to_user_string() for k in dg.AssetSelection.assets("pma_documents").downstream(
        include_self=False).resolve(ASSETS)}
    assert {"device_entities", "device_embeddings", "candidate_pool", "reranked_links"} <= readers
    assert device_run & readers == set()
    assert {"pma_documents", "pma_quarantine"} <= device_run  # stored before the failure


def test_a_graph_that_fails_to_be_stored_leaves_the_previous_export(harness, tmp_path, monkeypatch):
    """The export is written from the stored `meddevkg` table: when storing it fails, the previous
    export stays as it was, beside the previous table, and the run fails."""
    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path / "home"))
    export = tmp_path / "home" / "graph_export"
    export.mkdir(parents=True)
    previous = {"nodes.parquet": b"previous nodes", "import.sh": b"previous import.sh"}
    for name, content in previous.items():
        (export / name).write_bytes(content)
    _storing_fails_for("meddevkg", monkeypatch)
    keys = _all_devices(harness)
    result = harness.materialize(partition_range=(keys[0], keys[-1]))
    assert not result.success
    assert {p.name: p.read_bytes() for p in export.iterdir()} == previous
    assert not {"meddevkg", "graph_export"} & set(_materialized(result))


def test_device_steps_read_only_the_patent_data_they_use(harness):
    """Without a cross-encoder no patent text is read; with the text adapters on, the reranker reads
    the vectors of each device's top pairs from the store (rank_pool's test: the same ranks as with
    every vector). The reranker reads the device's own label (the known links' product-line names)."""
    from meddevkg_dagster.resources import PipelineConfigResource

    harness.resources["pipeline_config"] = PipelineConfigResource(
        config_json=json.dumps({"rerank": json.loads(FAST_RERANK)["rerank"] | {"text_adapter": {"enabled": True}}}))
    keys = _all_devices(harness)
    result = harness.materialize(partition_range=(keys[0], keys[-1]))
    assert result.success
    assert _inputs_loaded(result, "cross_encoder_scores") == {"candidate_pool", "pma_documents"}
    assert harness.table("cross_encoder_scores").height == 0
    assert _inputs_loaded(result, "reranked_links") == {"candidate_pool", "cross_encoder_scores", "reranker_model",
                                                        "device_embeddings", "pma_documents"}
    assert harness.table("reranked_links")["text_sim"].is_not_null().any()  # the adapters ordered the top pairs
    assert _materialized(result)["reranker_model"]["text_adapter"].value is True
    graph = defs.resolve_asset_graph()  # lineage kept
    assert dg.AssetKey("patents") in graph.get(dg.AssetKey("cross_encoder_scores")).parent_keys
    assert dg.AssetKey("patent_embeddings") in graph.get(dg.AssetKey("reranked_links")).parent_keys


def test_a_configured_cross_encoder_scores_every_pool_pair(harness, tiny_bert):
    from meddevkg_dagster.resources import CrossEncoderResource

    keys = _all_devices(harness)
    assert harness.materialize(partition_range=(keys[0], keys[-1])).success
    harness.resources["cross_encoder"] = CrossEncoderResource(model=str(tiny_bert), device="cpu")
    result = harness.materialize(selection=dg.AssetSelection.assets("cross_encoder_scores", "reranked_links"),
                                 partition_range=(keys[0], keys[-1]))
    assert result.success
    pool, scores = harness.table("candidate_pool"), harness.table("cross_encoder_scores")
    assert scores.height == pool.height and scores["ai_score"].null_count() == 0
    assert scores.select("fda_id", "pat_id").sort("fda_id", "pat_id").equals(
        pool.select("fda_id", "pat_id").sort("fda_id", "pat_id"))
    assert scores["ai_score"].n_unique() > 1  # pair texts reached the model, not empty strings
    events = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()
              if e.asset_key.path == ["cross_encoder_scores"]]
    assert len(events) == len(keys) and events[0].metadata["cross_encoder"].value == str(tiny_bert)


def test_rematerialising_replaces_rows_instead_of_duplicating(harness):
    keys = _all_devices(harness)
    assert harness.materialize(partition_range=(keys[0], keys[-1])).success
    first = {t: harness.table(t) for t in ("candidate_pool", "reranked_links", "pma_documents")}
    assert harness.materialize(partition_range=(keys[0], keys[-1])).success
    for name, before in first.items():
        after = harness.table(name)
        assert after.sort(after.columns[:2]).equals(before.sort(before.columns[:2])), name


def test_backfilling_one_device_touches_only_its_partition(harness):
    keys = _all_devices(harness)
    assert harness.materialize(partition_range=(keys[0], keys[-1])).success
    before, pool_before = harness.table("reranked_links").sort("fda_id", "pat_id"), harness.table("candidate_pool")
    by_probability = pl.col("probability").rank("ordinal", descending=True).over("fda_id")
    contested = before.filter(pl.col("rank") != by_probability)["fda_id"].unique().sort()
    device = contested[0]  # a device whose order its company's other devices changed (company_contest)
    device_assets = dg.AssetSelection.assets("pma_documents", "pma_quarantine", "pma_supplements", "device_entities",
                                             "device_entity_quarantine", "device_embeddings", "candidate_pool",
                                             "cross_encoder_scores", "reranked_links")
    one = harness.materialize(selection=device_assets, partition_key=device)  # with the assets' checks
    assert one.success
    after = harness.table("reranked_links")
    assert after.height == before.height
    # The run's checks count the partition it wrote, not the whole table.
    checks = {e.asset_check_key.name: e.metadata for e in one.get_asset_check_evaluations()}
    assert checks["reranked_links_keys_unique"]["scope"].value == "1 partition(s)"
    assert checks["pma_documents_keys_unique"]["scope"].value == "1 partition(s)"
    assert checks["device_embeddings_complete"]["scope"].value == "whole table"  # one dimension across runs
    rows = after.filter(pl.col("fda_id") == device).height
    assert checks["reranked_links_keys_unique"]["rows_checked"].value == rows
    assert after.filter(pl.col("fda_id") == device).sort("pat_id").equals(
        before.filter(pl.col("fda_id") == device).sort("pat_id"))
    assert _materialized(one)["reranked_links"]["rival_pool_rows"].value > 0  # read from the store
    # alone in its run, the device is still compared with its company's other devices (siblings)
    pool = harness.table("candidate_pool").filter(pl.col("fda_id") == device).sort("pat_id")
    assert pool["sibling_sim_margin"].is_not_nan().any()
    first = pool_before.filter(pl.col("fda_id") == device).sort("pat_id")
    floats = [c for c, t in pool.schema.items() if t == pl.Float32]
    assert pool.drop(floats).equals(first.drop(floats))
    for col in floats:  # BLAS rounding of a one-device block's cosine only
        np.testing.assert_allclose(pool[col].to_numpy(), first[col].to_numpy(), atol=1e-5, equal_nan=True)


def test_a_partition_the_corpus_lacks_fails_with_its_name(harness):
    harness.register(["P999999"])
    result = harness.materialize(selection=dg.AssetSelection.assets("pma_documents").required_multi_asset_neighbors(),
                                 partition_key="P999999")
    assert not result.success
    failure = [e for e in result.all_events if e.is_step_failure][0]
    assert "P999999" in str(failure.event_specific_data.error)


def test_a_corpus_file_its_release_manifest_does_not_list_fails_the_step_naming_it(harness, tmp_path):
    from meddevkg_dagster.resources import CorpusResource

    corpus = shutil.copytree(harness.corpus, tmp_path / "corpus")
    listed = {f.name: fingerprint(f).sha256 for f in corpus.iterdir() if f.is_file()}
    (corpus / "SHA256SUMS").write_text("".join(f"{digest}  {name}\n" for name, digest in listed.items()))
    harness.resources["corpus"] = CorpusResource(path=str(corpus))
    device = read_corpus(corpus).devices["fda_id"][0]
    harness.register([device])
    documents = dg.AssetSelection.assets("pma_documents").required_multi_asset_neighbors()
    assert harness.materialize(selection=documents, partition_key=device).success

    patents = corpus / next(name for name in listed if name.startswith("patents."))
    patents.write_bytes(patents.read_bytes() + b"\n")
    result = harness.materialize(selection=documents, partition_key=device)
    assert not result.success
    failure = [e for e in result.all_events if e.is_step_failure][0]
    assert f"{patents}: its SHA-256 " in str(failure.event_specific_data.error)
    assert harness.table("pma_documents").height == 1  # the first materialisation's, kept


def test_the_corpus_resource_can_turn_former_owners_off(harness):
    from meddevkg_dagster.resources import CorpusResource

    on = CorpusResource(path=str(harness.corpus)).resolver()
    off = CorpusResource(path=str(harness.corpus), former_owners=False).resolver()
    assert on.former_owners and not off.former_owners
    assert on.company_relation("ENDOLOGIX", None, "BOSTON SCIENTIFIC", 2006).kind == "former_owner"
    assert off.company_relation("ENDOLOGIX", None, "BOSTON SCIENTIFIC", 2006) is None
    assert off.company_relation("STEREOTAXIS", None, "JOHNSON AND JOHNSON").kind == "partner"  # alliances stay


def test_rows_of_the_corpus_company_tables_are_in_rejected_records(harness, tmp_path):
    from meddevkg_dagster.resources import CorpusResource

    corpus = tmp_path / "corpus"
    shutil.copytree(harness.corpus, corpus)
    with (corpus / "acquisitions.csv").open("a") as fh:
        fh.write("ZETA MEDICAL,,2016-01-01,memo\n")
    harness.resources["corpus"] = CorpusResource(path=str(corpus))
    assert harness.materialize(dg.AssetSelection.assets("rejected_records")).success
    rejected = harness.table("rejected_records")
    assert rejected.height == 4  # the demo's three malformed corpus rows and this deal
    assert rejected.filter(pl.col("source") == "acquisitions.csv").select("record_key", "reason").rows() == [
        ("acquisitions#1:ZETA MEDICAL", "missing acquired")]


def test_meddevkg_former_owners_sets_the_corpus_resource(monkeypatch):
    from meddevkg_dagster.resources import build_resources

    monkeypatch.delenv("MEDDEVKG_FORMER_OWNERS", raising=False)
    assert build_resources()["corpus"].former_owners is True
    monkeypatch.setenv("MEDDEVKG_FORMER_OWNERS", "false")
    assert build_resources()["corpus"].former_owners is False
    monkeypatch.setenv("MEDDEVKG_FORMER_OWNERS", "maybe")
    with pytest.raises(ValueError, match="MEDDEVKG_FORMER_OWNERS='maybe'"):
        build_resources()


def test_fda_supplements_make_the_dossier_score_only_when_configured(harness, tmp_path):
    from meddevkg_dagster.resources import CorpusResource

    keys = _all_devices(harness)
    assert harness.materialize(partition_range=(keys[0], keys[-1])).success
    assert harness.table("pma_supplements").height == 0
    assert harness.table("candidate_pool")["dossier_lexical"].is_nan().all()  # no records read: missing
    assert harness.table("candidate_pool")["granted_after_last_decision"].is_nan().all()  # nor decision years

    fda = tmp_path / "pma.parquet"  # fdadata_pma's own columns, a supplement of the first device only
    pl.DataFrame({"submission_number": [keys[0], f"{keys[0]}/S001", "P999999/S001", f"{keys[0]}/S002"],
                  "date_decision": ["2020-01-01", "2021-01-01", "2021-01-01", "2021-13-01"],
                  "device": ["X", "NEW MODEL", "Y", "Z"],
                  "approval_order_statement": ["original", "A new balloon catheter shaft material.", "other", "bad"]}
                 ).write_parquet(fda)
    harness.resources["corpus"] = CorpusResource(path=str(harness.corpus), fda_pma_path=str(fda))
    result = harness.materialize(partition_range=(keys[0], keys[-1]))
    assert result.success
    assert harness.table("pma_supplements").select("fda_id", "supplement_number").rows() == [(keys[0], "S001")]
    assert _materialized(result)["pma_documents"]["inputs"].value["fda_pma"] == fingerprint(fda).model_dump()
    assert harness.table("pma_quarantine").select("record_key", "reason").rows() == [  # under its device
        (f"pma.parquet#3:{keys[0]}", "supplement S002: unparseable decision_date '2021-13-01' (want YYYY-MM-DD or "
                                     "YYYYMMDD)")]
    pool = harness.table("candidate_pool")
    assert pool["dossier_lexical"].is_not_nan().all()
    first, rest = pool.filter(pl.col("fda_id") == keys[0]), pool.filter(pl.col("fda_id") != keys[0])
    assert (first["dossier_lexical"] != first["lexical"]).any()  # the supplement's words count
    assert (rest["dossier_lexical"] - rest["lexical"]).abs().max() < 1e-6  # no supplements: the device's own text
    # its latest FDA decision is the supplement's (2021): each patent's grant year minus 2021
    granted = harness.table("patents").select("pat_id", pl.col("grant_date").cast(pl.Date).dt.year().alias("year"))
    after = first.join(granted, on="pat_id").select(pl.col("year") - 2021 - pl.col("granted_after_last_decision"))
    assert after.height == first.height and after.to_series().abs().max() == 0
    links = harness.table("reranked_links")
    assert links.height == pool.height

    harness.resources["corpus"] = CorpusResource(path=str(harness.corpus), fda_pma_path=str(tmp_path / "none"))
    missing = harness.materialize(dg.AssetSelection.assets("pma_documents").required_multi_asset_neighbors(),
                                  partition_key=keys[0])
    assert not missing.success
    assert "MEDDEVKG_FDA_PMA" in str(missing.get_step_failure_events()[0].event_specific_data.error)


def test_a_deal_counts_for_a_device_fda_still_decides_on_after_it(harness, tmp_path):
    from meddevkg_core.companies import company_match_table
    from meddevkg_dagster.resources import CorpusResource

    # Meridian's closure device was approved in 2012; Meridian bought PulseWave in 2017
    keys, sealpoint = _all_devices(harness), "P909020"
    fda = tmp_path / "pma.parquet"  # a 2018 supplement: the device is still on the market after the deal
    pl.DataFrame({"submission_number": [f"{sealpoint}/S001"], "date_decision": ["2018-05-01"],
                  "device": ["SEALPOINT"], "approval_order_statement": ["A change to the anchor supplier."]}
                 ).write_parquet(fda)
    harness.resources["corpus"] = CorpusResource(path=str(harness.corpus), fda_pma_path=str(fda))
    assert harness.materialize(partition_range=(keys[0], keys[-1])).success
    pool = harness.table("candidate_pool").filter(pl.col("fda_id") == sealpoint)
    via_deal = pool.filter(pl.col("company_path") == "MERIDIAN CARDIAC <- PULSEWAVE MEDICAL (2017-03-31)")
    pulsewave = harness.table("patents").filter(pl.col("assignee").str.to_uppercase().str.contains("PULSE ?WAVE"))
    assert via_deal.height > 0 and set(via_deal["pat_id"]) <= set(pulsewave["pat_id"])
    assert (via_deal["score_company"] > 0).all() and via_deal["company_via_deal"].all()
    # on its approval day alone (no FDA records) the deal had not closed: no company match
    documents = harness.table("pma_documents").filter(pl.col("fda_id") == sealpoint)
    approval_only = company_match_table(documents, pulsewave, harness.resources["corpus"].resolver())
    assert approval_only.height == 0


def test_meddevkg_fda_pma_sets_the_corpus_resource(monkeypatch, tmp_path):
    from meddevkg_dagster.resources import build_resources

    monkeypatch.delenv("MEDDEVKG_FDA_PMA", raising=False)
    assert build_resources()["corpus"].fda_pma_path is None
    monkeypatch.setenv("MEDDEVKG_FDA_PMA", str(tmp_path / "pma.parquet"))
    assert build_resources()["corpus"].fda_pma_path is not None


def test_device_texts_that_lost_their_the_are_stored_repaired_with_the_count(harness, tmp_path):
    """The benchmark's damage (every "the" gone, CATHETER -> "CA TER") on a copy of the demo corpus."""
    from meddevkg_dagster.resources import CorpusResource

    damaged = tmp_path / "damaged"
    shutil.copytree(harness.corpus, damaged)
    devices = [json.loads(line) for line in (damaged / "devices.jsonl").read_text().splitlines()]
    originals = {d["fda_id"]: d["text"] for d in devices if d.get("text")}  # one row is quarantined
    for d in devices:
        if d.get("text"):
            d["text"] = re.sub(" +", " ", re.sub("(?i)the", " ", d["text"]))
    (damaged / "devices.jsonl").write_text("\n".join(json.dumps(d) for d in devices) + "\n")
    harness.resources["corpus"] = CorpusResource(path=str(damaged))
    keys = _all_devices(harness)

    result = harness.materialize(dg.AssetSelection.assets("pma_documents").required_multi_asset_neighbors(),
                                 partition_range=(keys[0], keys[-1]))

    assert result.success
    stored = dict(harness.table("pma_documents").select("fda_id", "text").iter_rows())
    catheter = [k for k, text in originals.items() if "catheter" in text.lower()]
    assert catheter and all("catheter" in stored[k].lower() for k in catheter)
    assert not any(" ca ter" in text.lower() for text in stored.values())
    event = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey("pma_documents")][0]
    metadata = event.step_materialization_data.materialization.metadata
    assert metadata["texts_repaired"].value >= len(catheter)
    assert metadata["words_restored"].value >= metadata["texts_repaired"].value
