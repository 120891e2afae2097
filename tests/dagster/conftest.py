"""Materialise assets into a temporary DuckDB with the model-free hashing encoder."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import pytest
from dagster_duckdb import DuckDBResource

from meddevkg_core.corpus import read_corpus
from meddevkg_core.demo import demo_corpus_dir
from meddevkg_core.patent_years import year_keys
from meddevkg_dagster.assets import features, linking, outputs, sources
from meddevkg_dagster.checks import CHECKS
from meddevkg_dagster.io_manager import MeddevkgDuckDBIOManager
from meddevkg_dagster.jobs import ONTOLOGY_ASSETS, PATENT_ASSETS
from meddevkg_dagster.partitions import range_tags
from meddevkg_dagster.resources import (
    CorpusResource,
    CrossEncoderResource,
    EmbeddingModelResource,
    EntityExtractorResource,
    OpenFDAResource,
    PipelineConfigResource,
    SourcesResource,
    TerminologiesResource,
)
from tests.fake_llm import serve_llm

ASSETS = dg.load_assets_from_modules([sources, features, linking, outputs])

FAST_RERANK = '{"rerank": {"n_estimators": 30, "bagging": 2}}'
"""The harness's reranker: these tests check what Dagster stores, reads and reports, not the model, so
fewer trees and classifiers (about 10 s less per materialised graph). The default's training is
tested in tests/core and on the real benchmark."""


class Runs:
    """Several runs read as one result: success when all succeeded, their events together."""

    def __init__(self, results):
        self.results = results
        self.success = all(r.success for r in results)
        self.run_id = results[-1].run_id

    def get_asset_check_evaluations(self):
        return [e for r in self.results for e in r.get_asset_check_evaluations()]

    def get_asset_materialization_events(self):
        return [e for r in self.results for e in r.get_asset_materialization_events()]


class Harness:
    def __init__(self, root: Path, corpus: Path):
        self.db = root / "test.duckdb"
        self.corpus = corpus
        self.instance = dg.DagsterInstance.ephemeral()
        self.resources = {
            "io_manager": MeddevkgDuckDBIOManager(database=str(self.db), schema="meddevkg"),
            "warehouse": DuckDBResource(database=str(self.db)),
            "corpus": CorpusResource(path=str(corpus)),
            "embedding_model": EmbeddingModelResource(model_path="hashing", device="cpu",
                                                      cache_dir=str(root / "cache")),
            "cross_encoder": CrossEncoderResource(),
            "pipeline_config": PipelineConfigResource(config_json=FAST_RERANK),
            "sources": SourcesResource(),
            "openfda": OpenFDAResource(),
            "terminologies": TerminologiesResource(),
            "entity_extractor": EntityExtractorResource(),
        }

    def register(self, keys: list[str]) -> None:
        """Device partitions, plus the patent years of the corpus (what `meddevkg demo` registers)."""
        self.instance.add_dynamic_partitions("pma_devices", keys)
        known = set(self.instance.get_dynamic_partitions("patent_years"))
        years = [y for y in year_keys(read_corpus(self.corpus).patents) if y not in known]
        self.instance.add_dynamic_partitions("patent_years", years)

    def materialize(self, selection=None, partition_range: tuple[str, str] | None = None, partition_key=None):
        """One run over the selection; with no selection, the whole graph as the CLI runs it: every
        patent year (patents_job), then the rest over the device range (meddevkg_job)."""
        if selection is None:
            first = self.materialize_patent_years()
            if not first.success:
                return first
            rest = self.materialize(dg.AssetSelection.all() - PATENT_ASSETS - ONTOLOGY_ASSETS, partition_range,
                                    partition_key)
            return Runs([first, rest])
        tags = range_tags(*partition_range) if partition_range else {}
        return dg.materialize([*ASSETS, *CHECKS], instance=self.instance, resources=self.resources,
                              selection=selection, tags=tags, partition_key=partition_key, raise_on_error=False)

    def materialize_patent_years(self, years: list[str] | None = None):
        years = years or self.instance.get_dynamic_partitions("patent_years")
        selection = PATENT_ASSETS | ONTOLOGY_ASSETS
        if len(years) == 1:
            return self.materialize(selection, partition_key=years[0])
        return self.materialize(selection, partition_range=(years[0], years[-1]))

    def table(self, name: str):
        with duckdb.connect(str(self.db), read_only=True) as con:
            return con.sql(f"select * from meddevkg.{name}").pl()


@pytest.fixture
def harness(tmp_path) -> Harness:
    return Harness(tmp_path, demo_corpus_dir())


@pytest.fixture
def llm(fake_source, monkeypatch, tmp_path):
    """MEDDEVKG_ENTITY_EXTRACTOR=llm against a fake endpoint (tests/fake_llm.py), as build_resources and
    `meddevkg run` read it."""
    return serve_llm(fake_source, monkeypatch, tmp_path / "llm_cache")
