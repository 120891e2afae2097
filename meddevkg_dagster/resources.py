"""Resources: the corpus, the models and the store, each configured from environment variables.

Every setting can come from an `EnvVar`; where the variable is unset a working local default is
used so that a fresh clone runs the demo with no configuration at all.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import dagster as dg
from dagster_duckdb_polars import DuckDBPolarsIOManager

from meddevkg_core.companies import CompanyResolver
from meddevkg_core.config import CrossEncoderConfig, PipelineConfig
from meddevkg_core.corpus import Corpus, read_corpus
from meddevkg_core.cross_encoder import PairScorer, load_cross_encoder
from meddevkg_core.demo import demo_corpus_dir
from meddevkg_core.embeddings import EmbeddingCache, Encoder, HashingEncoder, load_sentence_encoder

GPU_TAG = {"meddevkg/gpu": "true"}
"""Steps that run a neural model carry this tag; the run queue limits them to one at a time."""
DUCKDB_POOL = "duckdb"
"""Every asset writes through the DuckDB IO manager; DuckDB allows one writer, so one pool slot."""


def home_dir() -> Path:
    return Path(os.environ.get("MEDDEVKG_HOME", Path.cwd() / ".meddevkg")).resolve()


def env_or(name: str, default: str) -> str | dg.EnvVar:
    """An EnvVar where the variable is set (so the UI shows where a value comes from), else a default."""
    return dg.EnvVar(name) if os.environ.get(name) else default


class CorpusResource(dg.ConfigurableResource):
    """Where the corpus directory is (devices, patents, optional gold); the bundled demo by default."""

    path: str

    def load(self) -> Corpus:
        return _read_corpus_cached(str(Path(self.path).resolve()))

    def resolver(self) -> CompanyResolver:
        """Shipped aliases and deals, plus any the corpus directory brings (e.g. the demo's deal)."""
        return CompanyResolver.for_corpus(Path(self.path))


@cache
def _read_corpus_cached(path: str) -> Corpus:
    return read_corpus(path)


class EmbeddingModelResource(dg.ConfigurableResource):
    """The sentence encoder; `device` auto/cpu/cuda puts it on a GPU where one exists."""

    model_path: str | None = None
    device: str = "auto"
    batch_size: int = 32
    cache_dir: str | None = None

    def encoder(self) -> Encoder:
        return _encoder(self.model_path, self.device, self.batch_size)

    def cache(self) -> EmbeddingCache | None:
        return EmbeddingCache(Path(self.cache_dir)) if self.cache_dir else None


HASHING = "hashing"
"""`model_path` value for the model-free hashing encoder (tests and dry runs; not a language model)."""


@cache
def _encoder(model_path: str | None, device: str, batch_size: int) -> Encoder:
    if model_path == HASHING:
        return HashingEncoder()
    return load_sentence_encoder(model_path, device=device, batch_size=batch_size)


class CrossEncoderResource(dg.ConfigurableResource):
    """An optional cross-encoder (name or local path); without one the feature is missing."""

    model: str | None = None
    backend: str = "sentence-transformers"
    device: str = "auto"
    max_chars: int = 1024
    batch_size: int = 32

    def config(self) -> CrossEncoderConfig:
        return CrossEncoderConfig(model=self.model or None, backend=self.backend, max_chars=self.max_chars,
                                  batch_size=self.batch_size)

    def scorer(self) -> PairScorer | None:
        return _scorer(self.config(), self.device)


@cache
def _scorer(cfg: CrossEncoderConfig, device: str) -> PairScorer | None:
    return load_cross_encoder(cfg, device=device)


class PipelineConfigResource(dg.ConfigurableResource):
    """Method settings as JSON (a PipelineConfig); empty means the documented defaults."""

    config_json: str = ""

    def config(self) -> PipelineConfig:
        return PipelineConfig.model_validate_json(self.config_json) if self.config_json else PipelineConfig()


def build_resources() -> dict[str, object]:
    home = home_dir()
    return {
        "io_manager": DuckDBPolarsIOManager(
            database=env_or("MEDDEVKG_DUCKDB", str(home / "warehouse.duckdb")), schema="meddevkg"),
        "corpus": CorpusResource(path=env_or("MEDDEVKG_CORPUS", str(demo_corpus_dir()))),
        "embedding_model": EmbeddingModelResource(
            model_path=env_or("MEDDEVKG_EMBEDDING_MODEL", "") or None,
            device=env_or("MEDDEVKG_DEVICE", "auto"),
            cache_dir=env_or("MEDDEVKG_EMBEDDING_CACHE", str(home / "embedding_cache"))),
        "cross_encoder": CrossEncoderResource(
            model=env_or("MEDDEVKG_CROSS_ENCODER", "") or None,
            backend=env_or("MEDDEVKG_CROSS_ENCODER_BACKEND", "sentence-transformers"),
            device=env_or("MEDDEVKG_DEVICE", "auto")),
        "pipeline_config": PipelineConfigResource(config_json=env_or("MEDDEVKG_PIPELINE_CONFIG", "")),
    }
