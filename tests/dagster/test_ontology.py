"""The ontology asset: licensed UMLS / MeSH releases merged under MedDevOnto by configuration alone."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from meddevkg_dagster.assets.sources import ontology_from_table
from meddevkg_dagster.jobs import ONTOLOGY_ASSETS
from meddevkg_dagster.resources import TerminologiesResource

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_umls_and_mesh_releases_reach_the_stored_ontology_and_their_rejects_the_quarantine(harness):
    harness.resources["terminologies"] = TerminologiesResource(umls_dir=str(FIXTURES / "umls"),
                                                               mesh_xml=str(FIXTURES / "mesh" / "desc_sample.xml"))
    assert harness.materialize(ONTOLOGY_ASSETS).success
    onto = ontology_from_table(harness.table("meddevonto"))  # what every downstream asset reads
    new = onto.lookup("open-irrigated RF catheter")  # a UMLS concept the shipped ontology lacks
    assert new == "C9900003" and onto.parents(new) == {"C0085590"} and onto.category(new) == "DEVICE_TYPE"
    assert onto.lookup("drug eluting stents") == "MDO:0018"  # a MeSH entry term, folded into a shipped concept
    assert onto.lookup("lead") == "MDO:0010"  # the shipped ontology keeps priority
    quarantine = harness.table("ontology_quarantine")
    assert "C9900005" in quarantine.filter(pl.col("source") == "UMLS merge")["record_key"].to_list()
    assert quarantine.filter(pl.col("source") == "MRREL.RRF").height == 1  # the reader's rejects are kept too


def test_unset_is_the_shipped_ontology_and_a_wrong_path_names_its_variable(harness, tmp_path):
    from meddevkg_core.ontology import load_meddevonto

    assert harness.materialize(ONTOLOGY_ASSETS).success
    stored = ontology_from_table(harness.table("meddevonto"))
    assert stored.concepts.height == load_meddevonto().concepts.height
    assert harness.table("ontology_quarantine").height == 0
    harness.resources["terminologies"] = TerminologiesResource(umls_dir=str(tmp_path / "missing"))
    result = harness.materialize(ONTOLOGY_ASSETS)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert "MEDDEVKG_UMLS_DIR=" in failure.step_failure_data.error.message
