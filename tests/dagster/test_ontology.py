"""The ontology asset: licensed UMLS / MeSH releases merged under MedDevOnto by configuration alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from meddevkg_core.terminologies import TerminologyConfig, load_ontology
from meddevkg_core.umls import read_umls
from meddevkg_dagster.assets.sources import ontology_from_table, ontology_table
from meddevkg_dagster.jobs import ONTOLOGY_ASSETS
from meddevkg_dagster.resources import TerminologiesResource

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
UMLS_DIR = FIXTURES / "umls"


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


def test_the_ontology_s_materialisation_names_the_release_files_it_read_and_none_unset(harness, tmp_path):
    from meddevkg_core.lineage import fingerprint, inputs_json

    def metadata(result) -> dict:
        [event] = [e for e in result.get_asset_materialization_events()
                   if e.event_specific_data.materialization.asset_key == dg.AssetKey("meddevonto")]
        return event.event_specific_data.materialization.metadata

    assert "inputs" not in metadata(harness.materialize(ONTOLOGY_ASSETS))  # the shipped ontology: no file read
    umls, mesh = Path(shutil.copytree(UMLS_DIR, tmp_path / "umls")), tmp_path / "desc2025.xml"
    shutil.copy(FIXTURES / "mesh" / "desc_sample.xml", mesh)
    harness.resources["terminologies"] = TerminologiesResource(umls_dir=str(umls), mesh_xml=str(mesh))
    read = metadata(harness.materialize(ONTOLOGY_ASSETS))["inputs"].value
    assert read == inputs_json({"umls_mrsty": fingerprint(umls / "MRSTY.RRF"),
                                "umls_mrconso": fingerprint(umls / "MRCONSO.RRF"),
                                "umls_mrrel": fingerprint(umls / "MRREL.RRF"), "mesh_descriptors": fingerprint(mesh)})


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


def test_the_resource_restricts_umls_by_source_restriction_level_as_the_reader_does(harness):
    harness.resources["terminologies"] = TerminologiesResource(umls_dir=str(UMLS_DIR), umls_max_srl="0")
    assert harness.materialize(ONTOLOGY_ASSETS).success
    stored = harness.table("meddevonto")
    srl9 = set(read_umls(UMLS_DIR).terms["term"]) - set(read_umls(UMLS_DIR, max_srl=0).terms["term"])
    assert srl9 == {"Stent, device", "Coronary stent", "Drug-eluting coronary stent"}  # the SNOMED CT atoms
    unfiltered = ontology_table(load_ontology(TerminologyConfig(umls_dir=UMLS_DIR)).ontology)
    assert srl9 & set(unfiltered["terms"].explode().drop_nulls())  # unrestricted, they reach the graph
    assert not srl9 & set(stored["terms"].explode().drop_nulls())
    expected = ontology_table(load_ontology(TerminologyConfig(umls_dir=UMLS_DIR, umls_max_srl=0)).ontology)
    assert stored.select(expected.columns).rows() == expected.rows()


def test_every_umls_reading_option_reaches_the_terminology_config():
    resource = TerminologiesResource(umls_dir=str(UMLS_DIR), umls_languages="ENG,FRE", umls_sabs="MSH,NCI",
                                     umls_rel_sabs="MSH", umls_max_srl="3", umls_tuis="T074", strict=True)
    assert resource.config() == TerminologyConfig(
        umls_dir=UMLS_DIR, umls_languages=("ENG", "FRE"), umls_sabs=("MSH", "NCI"), umls_rel_sabs=("MSH",),
        umls_max_srl=3, umls_tuis=frozenset({"T074"}), strict=True)
    assert TerminologiesResource().config() == TerminologyConfig()


@pytest.mark.parametrize(("field", "value", "named"), [
    ("umls_max_srl", "nine", "MEDDEVKG_UMLS_MAX_SRL='nine'"),
    ("umls_languages", "english", "MEDDEVKG_UMLS_LANGUAGES='english'"),
    ("umls_sabs", "MSH;NCI", "MEDDEVKG_UMLS_SABS='MSH;NCI'"),
    ("umls_rel_sabs", "msh", "MEDDEVKG_UMLS_REL_SABS='msh'"),
    ("umls_tuis", "Device", "MEDDEVKG_UMLS_TUIS='Device'"),
])
def test_a_bad_umls_reading_option_is_a_failure_naming_it(field, value, named):
    with pytest.raises(dg.Failure, match=named):
        TerminologiesResource(umls_dir=str(UMLS_DIR), **{field: value}).config()


def test_a_materialisation_with_a_bad_umls_option_fails_naming_it(harness):
    harness.resources["terminologies"] = TerminologiesResource(umls_dir=str(UMLS_DIR), umls_max_srl="-1")
    result = harness.materialize(ONTOLOGY_ASSETS)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert "MEDDEVKG_UMLS_MAX_SRL='-1': expected a whole number" in failure.step_failure_data.error.message


def test_build_resources_reads_the_umls_reading_options_from_the_environment(harness, monkeypatch):
    from meddevkg_dagster.resources import build_resources

    monkeypatch.setenv("MEDDEVKG_UMLS_DIR", str(UMLS_DIR))
    monkeypatch.setenv("MEDDEVKG_UMLS_MAX_SRL", "0")
    monkeypatch.delenv("MEDDEVKG_UMLS_SABS", raising=False)
    monkeypatch.setenv("MEDDEVKG_TERMINOLOGIES_STRICT", "true")
    resource = build_resources()["terminologies"]
    assert resource.umls_max_srl == dg.EnvVar("MEDDEVKG_UMLS_MAX_SRL") and resource.umls_sabs is None
    assert resource.strict is True
    harness.resources["terminologies"] = resource  # a run resolves the variables
    assert harness.materialize(ONTOLOGY_ASSETS).success
    assert "Drug-eluting coronary stent" not in set(harness.table("meddevonto")["terms"].explode().drop_nulls())
    monkeypatch.setenv("MEDDEVKG_TERMINOLOGIES_STRICT", "maybe")
    with pytest.raises(ValueError, match="MEDDEVKG_TERMINOLOGIES_STRICT='maybe'"):
        build_resources()
