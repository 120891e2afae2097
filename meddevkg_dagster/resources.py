"""Resources: the corpus, the models and the store, each configured from environment variables.

Every setting can come from an `EnvVar`; where the variable is unset a working local default is
used so that a fresh clone runs the demo with no configuration at all.
"""

from __future__ import annotations

import os
from functools import cache, partial
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
from dagster_duckdb import DuckDBResource
from pydantic import Field, SecretStr, field_validator

from meddevkg_core.alerts import UI_URL_ENV, WEBHOOK_ENV, RunFailureAlert, post_alert
from meddevkg_core.company_resolver import CompanyResolver
from meddevkg_core.config import CrossEncoderConfig, PipelineConfig, parse_pipeline_config
from meddevkg_core.corpus import Corpus, TableRead, read_corpus
from meddevkg_core.cross_encoder import BACKENDS as CROSS_ENCODER_BACKENDS
from meddevkg_core.cross_encoder import PairScorer, load_cross_encoder
from meddevkg_core.demo import demo_corpus_dir
from meddevkg_core.dossier import load_supplements
from meddevkg_core.embeddings import BACKENDS, DEVICES, EmbeddingCache, Encoder, load_embedding_model
from meddevkg_core.entities import ExtractionResult
from meddevkg_core.errors import InputError
from meddevkg_core.home import home_dir
from meddevkg_core.lineage import InputFile, read_fingerprinted
from meddevkg_core.llm_client import ENV_FIELDS, ENV_PREFIX, LLMAuthError
from meddevkg_core.llm_extraction import (
    ENTITY_EXTRACTOR_ENV,
    ENTITY_EXTRACTORS,
    Domain,
    ExtractorSettings,
    LLMUnavailableError,
    default_llm_cache_dir,
)
from meddevkg_core.ontology import Ontology
from meddevkg_core.packaged_models import default_models_dir
from meddevkg_core.progress import Progress
from meddevkg_core.sources.patentsview import parse_iso_date
from meddevkg_core.terminologies import ENV_STRICT, UMLS_OPTION_SETTINGS, TerminologyConfig, umls_options
from meddevkg_dagster.io_manager import MeddevkgDuckDBIOManager

GPU_TAG = {"meddevkg/gpu": "true"}
"""Steps that run a neural model carry this tag; the run queue limits them to one at a time."""
DUCKDB_POOL = "duckdb"
"""Every asset writes through the DuckDB IO manager; DuckDB allows one writer, so one pool slot."""
WAREHOUSE_SCHEMA = "meddevkg"
"""The DuckDB schema the IO manager stores asset tables in (and the checks query)."""


def env_or(name: str, default: str) -> str | dg.EnvVar:
    """An EnvVar where the variable is set (so the UI shows where a value comes from), else a default."""
    return dg.EnvVar(name) if os.environ.get(name) else default


def setting_value(value: str | dg.EnvVar) -> str:
    """An `env_or` setting as a run reads it now; an EnvVar whose variable was unset since the definitions
    were built is an error naming it (a run would fail on it too), not a None passed on as a path."""
    if not isinstance(value, dg.EnvVar):
        return value
    if (resolved := value.get_value()) is None:
        raise RuntimeError(f"{value.env_var_name} was set when this process's Dagster definitions were built and "
                           "is not now: set it again, or run in a new process")
    return resolved


_FLAGS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def env_flag(name: str, default: bool) -> bool:
    """A yes/no setting (Dagster's EnvVar has no boolean form); anything else is an error naming it."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in _FLAGS:
        raise ValueError(f"{name}={os.environ[name]!r}: expected one of {', '.join(_FLAGS)}")
    return _FLAGS[raw]


def former_owners_setting() -> bool:
    """MEDDEVKG_FORMER_OWNERS (default true): the one place the CLI and the resources read it."""
    return env_flag("MEDDEVKG_FORMER_OWNERS", True)


def terminologies_strict_setting() -> bool:
    """MEDDEVKG_TERMINOLOGIES_STRICT (default false): the one place the CLI and the resources read it."""
    return env_flag(ENV_STRICT, False)


class CorpusResource(dg.ConfigurableResource):
    """Where the corpus directory is (devices, patents, optional gold); the bundled demo by default."""

    path: str
    former_owners: bool = Field(
        default=True,
        description="Count a former owner's patents, granted while it held a company the applicant later "
        "bought, as a company match (data/companies/README.md); false keeps ownership and alliances only.",
    )
    fda_pma_path: str | None = Field(
        default=None,
        description="FDA PMA records (fdadata_pma.parquet, MEDDEVKG_FDA_PMA) whose supplements make the corpus "
        "devices' dossiers (the dossier_lexical score); unset, corpus devices have no dossier score.",
    )

    def load(self) -> Corpus:
        root = Path(self.path).resolve()
        return _read_corpus_cached(str(root), _stamp(root))

    def supplements(self, fda_ids: list[str]) -> tuple[TableRead, InputFile] | None:
        """These devices' supplements from `fda_pma_path` with their records that failed validation, and
        the file's fingerprint (lineage); None when it is unset."""
        if not self.fda_pma_path:
            return None
        path = Path(self.fda_pma_path)
        if not path.is_file():
            raise dg.Failure(f"MEDDEVKG_FDA_PMA={self.fda_pma_path!r}: no such file")
        # only these devices' rows are cleaned: 0.02 s for one; hashing the national file takes 0.01 s
        return read_fingerprinted(path, partial(load_supplements, fda_ids=fda_ids))

    def resolver(self) -> CompanyResolver:
        """Shipped aliases, deals and alliances, plus any the corpus directory brings (e.g. the demo's deal)."""
        return CompanyResolver.for_corpus(Path(self.path), former_owners=self.former_owners)


@cache
def _read_corpus_cached(path: str, stamp: tuple) -> Corpus:
    return read_corpus(path)


def _stamp(root: Path) -> tuple:
    """The directory's files as (name, size, mtime): a long-lived code server re-reads a changed corpus."""
    if not root.is_dir():
        return ()
    return tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in root.iterdir() if f.is_file()))


def _one_of(resource: str, field: str, variable: str, choices: tuple[str, ...]) -> Any:
    """A validator holding `field` to `choices`, refusing another value in one line naming `variable`, the setting
    build_resources gives it: a bad word failed only as the step loaded its model, naming nothing (or in torch's
    traceback). An EnvVar passes as the definitions are built and its value is checked when a run initialises the
    resource (Dagster resolves it then); a Literal or Enum field would refuse the EnvVar itself."""

    def check(cls: type, value: object) -> object:
        if isinstance(value, dg.EnvVar) or value in choices:
            return value
        raise ValueError(f"{variable}={value!r} (the {resource} resource's {field}): expected one of "
                         f"{', '.join(choices)}")

    return field_validator(field, mode="before")(check)


class EmbeddingModelResource(dg.ConfigurableResource):
    """The sentence encoder; `device` auto/cpu/cuda puts it on a GPU where one exists.

    `backend` (embeddings.BACKENDS) picks the computation: "torch-fp32" (default) or a CPU-only
    fast path ("torch-int8", "onnx-fp32", "onnx-int8"), whose vectors cache under their own model id."""

    model_path: str | None = None
    device: str = "auto"
    batch_size: int = 32
    cache_dir: str | None = None
    backend: str = "torch-fp32"

    _device_is_known = _one_of("embedding_model", "device", "MEDDEVKG_DEVICE", DEVICES)
    _backend_is_known = _one_of("embedding_model", "backend", "MEDDEVKG_EMBEDDING_BACKEND", BACKENDS)

    def encoder(self) -> Encoder:
        return _encoder(self.model_path, self.device, self.batch_size, self.backend)

    def cache(self) -> EmbeddingCache | None:
        return EmbeddingCache(Path(self.cache_dir)) if self.cache_dir else None


@cache
def _encoder(model_path: str | None, device: str, batch_size: int, backend: str = "torch-fp32") -> Encoder:
    return load_embedding_model(model_path, default_models_dir(), device=device, batch_size=batch_size,
                                backend=backend)


class CrossEncoderResource(dg.ConfigurableResource):
    """An optional cross-encoder (name or local path); without one the feature is missing."""

    model: str | None = None
    backend: str = "sentence-transformers"
    device: str = "auto"
    max_chars: int = 1024
    batch_size: int = 32

    _device_is_known = _one_of("cross_encoder", "device", "MEDDEVKG_DEVICE", DEVICES)
    _backend_is_known = _one_of("cross_encoder", "backend", "MEDDEVKG_CROSS_ENCODER_BACKEND", CROSS_ENCODER_BACKENDS)

    def config(self) -> CrossEncoderConfig:
        return CrossEncoderConfig(model=self.model or None, backend=self.backend, max_chars=self.max_chars,
                                  batch_size=self.batch_size)

    def scorer(self) -> PairScorer | None:
        return _scorer(self.config(), self.device)


@cache
def _scorer(cfg: CrossEncoderConfig, device: str) -> PairScorer | None:
    return load_cross_encoder(cfg, device=device)


class TerminologiesResource(dg.ConfigurableResource):
    """Licensed UMLS and MeSH releases merged under the shipped MedDevOnto (meddevkg_core.terminologies);
    neither set means the shipped ontology alone."""

    umls_dir: str | None = Field(default=None, description="A UMLS release's META directory (MRCONSO, "
                                 "MRSTY, MRREL .RRF files): MEDDEVKG_UMLS_DIR.")
    mesh_xml: str | None = Field(default=None, description="A MeSH descriptor file (desc20XX.xml, or .gz): "
                                 "MEDDEVKG_MESH_XML.")
    umls_languages: str | None = Field(default=None, description="UMLS languages (LAT) whose atoms are kept, "
                                       "comma-separated in order of preference for a concept's name, e.g. ENG,FRE; "
                                       "unset = ENG: MEDDEVKG_UMLS_LANGUAGES.")
    umls_sabs: str | None = Field(default=None, description="UMLS source vocabularies (SAB) whose atoms are kept, "
                                  "comma-separated, e.g. MSH,NCI,MTH; unset = all: MEDDEVKG_UMLS_SABS.")
    umls_rel_sabs: str | None = Field(default=None, description="UMLS source vocabularies (SAB) whose MRREL "
                                      "parent links are kept, comma-separated; unset = all: MEDDEVKG_UMLS_REL_SABS.")
    umls_max_srl: str | None = Field(default=None, description="The highest UMLS source restriction level (SRL) "
                                     "kept, a whole number: 0 keeps only sources without additional licence "
                                     "restrictions (drops SNOMED CT, SRL 9); unset = every level your licence "
                                     "covers: MEDDEVKG_UMLS_MAX_SRL.")
    umls_tuis: str | None = Field(default=None, description="UMLS semantic types (TUI) whose concepts are kept, "
                                  "comma-separated, e.g. T074,T061; unset = the device, procedure, algorithm, "
                                  "indication and substance types (terminologies.DEFAULT_UMLS_TUIS): "
                                  "MEDDEVKG_UMLS_TUIS.")
    strict: bool = Field(default=False, description="Fail on the first malformed UMLS or MeSH record instead of "
                         f"quarantining it in ontology_quarantine: {ENV_STRICT}.")

    def config(self) -> TerminologyConfig:
        try:
            options = umls_options({field: getattr(self, field) for field in UMLS_OPTION_SETTINGS})
            return TerminologyConfig.model_validate({"umls_dir": self.umls_dir or None,
                                                     "mesh_xml": self.mesh_xml or None, "strict": self.strict,
                                                     **options}).require_paths()
        except (FileNotFoundError, ValueError) as exc:
            raise dg.Failure(str(exc)) from exc


class PipelineConfigResource(dg.ConfigurableResource):
    """Method settings as JSON (a PipelineConfig); empty means the documented defaults."""

    config_json: str = ""

    def config(self) -> PipelineConfig:
        try:
            config = parse_pipeline_config(self.config_json, "MEDDEVKG_PIPELINE_CONFIG")
        except ValueError as exc:  # a misplaced or misspelt key fails here, not silently
            raise dg.Failure(str(exc)) from exc
        if config.cross_encoder != CrossEncoderConfig():  # the cross_encoder resource decides, never silently
            raise dg.Failure(f"MEDDEVKG_PIPELINE_CONFIG sets the cross-encoder ({config.cross_encoder}); under "
                             "Dagster it is MEDDEVKG_CROSS_ENCODER and MEDDEVKG_CROSS_ENCODER_BACKEND")
        return config


class EntityExtractorResource(dg.ConfigurableResource):
    """Stage 1's extractor (meddevkg_core.llm_extraction): spaCy offline by default, or an LLM behind an
    OpenAI-compatible chat API with the settings LLMConfig.from_env reads (MEDDEVKG_LLM_*)."""

    extractor: str = Field(default="spacy", description=f"{ENTITY_EXTRACTOR_ENV}: one of "
                           f"{', '.join(ENTITY_EXTRACTORS)}.")
    llm_base_url: str | None = Field(default=None, description="MEDDEVKG_LLM_BASE_URL: the OpenAI-compatible "
                                     "API root, e.g. https://api.deepseek.com/v1.")
    llm_model: str | None = Field(default=None, description="MEDDEVKG_LLM_MODEL: the model name sent (part of "
                                  "the cache key).")
    llm_api_key: str | None = Field(default=None, description="MEDDEVKG_LLM_API_KEY: a secret, so an EnvVar; "
                                    "never in a log line or metadata.")
    llm_cache_dir: str | None = Field(default=None, description="MEDDEVKG_LLM_CACHE_DIR: the reply cache (default "
                                      "$MEDDEVKG_HOME/llm_cache): a re-run with the same inputs sends nothing.")
    llm_requests_per_minute: str | None = Field(default=None, description="MEDDEVKG_LLM_REQUESTS_PER_MINUTE "
                                                "(default 60).")
    llm_timeout: str | None = Field(default=None, description="MEDDEVKG_LLM_TIMEOUT: seconds (default 60).")
    llm_max_retries: str | None = Field(default=None, description="MEDDEVKG_LLM_MAX_RETRIES: after the first "
                                        "attempt, on 429, 5xx and timeouts (default 5).")

    _extractor_is_known = _one_of("entity_extractor", "extractor", ENTITY_EXTRACTOR_ENV, ENTITY_EXTRACTORS)

    def settings(self) -> ExtractorSettings:
        """The extractor and its LLM settings, read by ExtractorSettings (as `meddevkg run` reads them); a missing
        or malformed one fails naming its variable."""
        try:
            return ExtractorSettings.read(self.extractor, {ENV_PREFIX + name.upper(): getattr(self, f"llm_{name}")
                                                           for name in ENV_FIELDS})
        except InputError as exc:
            raise dg.Failure(str(exc)) from None

    def extract(self, domain: Domain, docs: pl.DataFrame, ontology: Ontology,
                progress: Progress) -> tuple[ExtractionResult, dict[str, str | int | float]]:
        """Mentions and rejects of `docs`, and the run's figures for the asset metadata. An endpoint that
        refuses the key or answers nothing fails the step in one line, before any output is written."""
        extractor = self.settings().extractor_for(domain)
        try:
            result = extractor.extract_mentions(docs, ontology, progress)
        except (LLMAuthError, LLMUnavailableError) as exc:
            raise dg.Failure(f"{type(exc).__name__}: {exc}") from None
        finally:
            extractor.close()
        return result, extractor.figures()


def build_resources() -> dict[str, object]:
    home = home_dir()
    database = env_or("MEDDEVKG_DUCKDB", str(home / "warehouse.duckdb"))
    return {
        "io_manager": MeddevkgDuckDBIOManager(database=database, schema=WAREHOUSE_SCHEMA),
        "warehouse": DuckDBResource(database=database),
        "corpus": CorpusResource(path=env_or("MEDDEVKG_CORPUS", str(demo_corpus_dir())),
                                 former_owners=former_owners_setting(),
                                 fda_pma_path=env_or("MEDDEVKG_FDA_PMA", "") or None),
        "embedding_model": EmbeddingModelResource(
            model_path=env_or("MEDDEVKG_EMBEDDING_MODEL", "") or None,
            device=env_or("MEDDEVKG_DEVICE", "auto"),
            cache_dir=env_or("MEDDEVKG_EMBEDDING_CACHE", str(home / "embedding_cache")),
            backend=env_or("MEDDEVKG_EMBEDDING_BACKEND", "torch-fp32")),
        "cross_encoder": CrossEncoderResource(
            model=env_or("MEDDEVKG_CROSS_ENCODER", "") or None,
            backend=env_or("MEDDEVKG_CROSS_ENCODER_BACKEND", "sentence-transformers"),
            device=env_or("MEDDEVKG_DEVICE", "auto")),
        "pipeline_config": PipelineConfigResource(config_json=env_or("MEDDEVKG_PIPELINE_CONFIG", "")),
        "terminologies": TerminologiesResource(
            umls_dir=env_or("MEDDEVKG_UMLS_DIR", "") or None, mesh_xml=env_or("MEDDEVKG_MESH_XML", "") or None,
            strict=terminologies_strict_setting(),
            **{field: env_or(name, "") or None for field, name in UMLS_OPTION_SETTINGS.items()}),
        "entity_extractor": EntityExtractorResource(
            extractor=env_or(ENTITY_EXTRACTOR_ENV, "spacy"),
            **{f"llm_{name}": env_or(ENV_PREFIX + name.upper(), str(default_llm_cache_dir()) if name == "cache_dir"
                                     else "") or None for name in ENV_FIELDS}),
        "alerts": AlertsResource(webhook_url=env_or(WEBHOOK_ENV, "") or None, ui_url=env_or(UI_URL_ENV, "") or None),
        **source_resources(),
    }


class AlertsResource(dg.ConfigurableResource):
    """Where run_failure_alert reports a failed run: a Slack/Teams incoming webhook, whose URL holds its
    token (a secret: an EnvVar, never logged), and the UI's base URL for a link to the run."""

    webhook_url: str | None = Field(default=None, description=f"{WEBHOOK_ENV}; unset, failures are only logged.")
    ui_url: str | None = Field(default=None, description=f"{UI_URL_ENV}, e.g. http://dagster.example:3000.")

    def post(self, alert: RunFailureAlert) -> None:
        """Raises SourceError, whose message never holds the URL, when the webhook fails."""
        post_alert(alert, SecretStr(self.webhook_url or ""))


DEVICE_SOURCES = ("corpus", "openfda")
PATENT_SOURCES = ("corpus", "patentsview_bulk", "patentsview_api")


class OpenFDAResource(dg.ConfigurableResource):
    """openFDA device/pma: where device documents come from when MEDDEVKG_DEVICE_SOURCE=openfda,
    and what the new-approvals sensor polls. The key is optional (openFDA allows 240/min either way)."""

    base_url: str = "https://api.fda.gov"
    api_key: str | None = None
    requests_per_minute: float = 240.0
    timeout: float = 30.0

    def client(self):
        from pydantic import SecretStr

        from meddevkg_core.sources.openfda import OpenFDAClient, OpenFDAConfig

        return OpenFDAClient(OpenFDAConfig(base_url=self.base_url, requests_per_minute=self.requests_per_minute,
                                           timeout=self.timeout,
                                           api_key=SecretStr(self.api_key) if self.api_key else None))

    def devices(self, keys: list[str]):
        """The original PMA records of these PMA numbers as devices, with quarantine and counts."""
        from meddevkg_core.sources.openfda import pma_numbers_searches, pma_records_to_devices

        with self.client() as client:
            records = [r for search in pma_numbers_searches(keys) for r in client.search_pma(search)]
        return pma_records_to_devices(records)

    def selected_originals(self, start, end):
        """(fda_id, decision_date of the originals decided in [start, end] that the paper's
        cardiovascular selection keeps (device_selection.py), the records of the poll that failed
        validation: schemas.REJECTED_RECORDS, for the caller to report)."""

        from meddevkg_core.sources.device_selection import select_originals
        from meddevkg_core.sources.openfda import decision_date_search, pma_records_to_devices

        with self.client() as client:
            records = list(client.search_pma(decision_date_search(start, end)))
        read = pma_records_to_devices(records)
        selected = select_originals(read.originals).select(pl.col("pma_number").alias("fda_id"), "decision_date")
        return selected, read.rejected


class SourcesResource(dg.ConfigurableResource):
    """Which source feeds the device and patent tables: the corpus directory (default) or the
    real sources. PatentsView bulk reads a directory of g_*.tsv.zip files; the API fetches the
    patents granted from `patents_granted_since` on (its key: MEDDEVKG_PATENTSVIEW_API_KEY)."""

    device_source: str = "corpus"
    patent_source: str = "corpus"
    patentsview_bulk_dir: str | None = None
    patentsview_api_key: str | None = None
    patents_granted_since: str | None = None

    def checked(self) -> SourcesResource:
        if self.device_source not in DEVICE_SOURCES:
            raise dg.Failure(f"MEDDEVKG_DEVICE_SOURCE={self.device_source!r}: expected one of {DEVICE_SOURCES}")
        if self.patent_source not in PATENT_SOURCES:
            raise dg.Failure(f"MEDDEVKG_PATENT_SOURCE={self.patent_source!r}: expected one of {PATENT_SOURCES}")
        if self.patent_source == "patentsview_bulk" and not self.patentsview_bulk_dir:
            raise dg.Failure("MEDDEVKG_PATENT_SOURCE=patentsview_bulk needs MEDDEVKG_PATENTSVIEW_BULK_DIR")
        try:
            since = parse_iso_date(self.patents_granted_since)
        except ValueError as exc:
            raise dg.Failure(f"MEDDEVKG_PATENTS_GRANTED_SINCE: {exc}") from None
        if self.patent_source == "patentsview_api" and since is None:
            raise dg.Failure(
                "MEDDEVKG_PATENT_SOURCE=patentsview_api needs MEDDEVKG_PATENTS_GRANTED_SINCE (YYYY-MM-DD)")
        return self


def source_resources() -> dict[str, object]:
    return {
        "openfda": OpenFDAResource(base_url=env_or("MEDDEVKG_OPENFDA_URL", "https://api.fda.gov"),
                                   api_key=env_or("MEDDEVKG_OPENFDA_API_KEY", "") or None),
        "sources": SourcesResource(
            device_source=env_or("MEDDEVKG_DEVICE_SOURCE", "corpus"),
            patent_source=env_or("MEDDEVKG_PATENT_SOURCE", "corpus"),
            patentsview_bulk_dir=env_or("MEDDEVKG_PATENTSVIEW_BULK_DIR", "") or None,
            patentsview_api_key=env_or("MEDDEVKG_PATENTSVIEW_API_KEY", "") or None,
            patents_granted_since=env_or("MEDDEVKG_PATENTS_GRANTED_SINCE", "") or None),
    }
