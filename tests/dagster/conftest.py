"""Materialise assets into a temporary DuckDB with the model-free hashing encoder."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import pytest
from dagster_duckdb_polars import DuckDBPolarsIOManager

from meddevkg_core.demo import demo_corpus_dir
from meddevkg_dagster.assets import features, linking, outputs, sources
from meddevkg_dagster.checks import CHECKS
from meddevkg_dagster.resources import (
    CorpusResource, CrossEncoderResource, EmbeddingModelResource, OpenFDAResource, PipelineConfigResource,
    SourcesResource,
)

ASSETS = dg.load_assets_from_modules([sources, features, linking, outputs])


class Harness:
    def __init__(self, root: Path, corpus: Path):
        self.db = root / "test.duckdb"
        self.corpus = corpus
        self.instance = dg.DagsterInstance.ephemeral()
        self.resources = {
            "io_manager": DuckDBPolarsIOManager(database=str(self.db), schema="meddevkg"),
            "corpus": CorpusResource(path=str(corpus)),
            "embedding_model": EmbeddingModelResource(model_path="hashing", device="cpu",
                                                      cache_dir=str(root / "cache")),
            "cross_encoder": CrossEncoderResource(),
            "pipeline_config": PipelineConfigResource(),
            "sources": SourcesResource(),
            "openfda": OpenFDAResource(),
        }

    def register(self, keys: list[str]) -> None:
        self.instance.add_dynamic_partitions("pma_devices", keys)

    def materialize(self, selection=None, partition_range: tuple[str, str] | None = None, partition_key=None):
        tags = {}
        if partition_range:
            tags = {"dagster/asset_partition_range_start": partition_range[0],
                    "dagster/asset_partition_range_end": partition_range[1]}
        return dg.materialize([*ASSETS, *CHECKS], instance=self.instance, resources=self.resources,
                              selection=selection, tags=tags, partition_key=partition_key, raise_on_error=False)

    def table(self, name: str):
        with duckdb.connect(str(self.db), read_only=True) as con:
            return con.sql(f"select * from meddevkg.{name}").pl()


@pytest.fixture
def harness(tmp_path) -> Harness:
    return Harness(tmp_path, demo_corpus_dir())
