"""What `run`, `benchmark`, `pairs-cv` and `bench-extract` start from: the method's settings, the model options'
values, the models and Stage 1's extractor; and the one line each (and `bench-scale`) ends in when its gold cannot
train Stage 3, a model is missing or the LLM fails.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from meddevkg_core.embeddings import BACKENDS, DEVICES
from meddevkg_core.home import home_dir

if TYPE_CHECKING:
    from meddevkg_core.config import CrossEncoderConfig, PipelineConfig
    from meddevkg_core.corpus import Corpus
    from meddevkg_core.lineage import InputFile
    from meddevkg_core.llm_extraction import EntityExtractor, ExtractorSettings
    from meddevkg_core.pipeline import Models


def models_from_options(args: argparse.Namespace, config: PipelineConfig, extraction: ExtractorSettings):
    """The models `run` and `benchmark` load from their options (whose defaults are the MEDDEVKG_* settings)."""
    return load_models(Path(args.corpus), config.cross_encoder, args.device,
                       Path(args.embedding_cache) if args.embedding_cache else home_dir() / "embedding_cache",
                       args.embedding_model, args.embedding_backend, extraction)


def load_models(corpus_dir: Path, cross_encoder: CrossEncoderConfig, device: str, cache_dir: Path | None,
                embedding_model: str | None = None, embedding_backend: str | None = None,
                extraction: ExtractorSettings | None = None) -> Models:
    """`extraction` (default spaCy) chooses Stage 1's extractor, as the entity_extractor resource does."""
    from meddevkg_core.company_resolver import CompanyResolver
    from meddevkg_core.cross_encoder import load_cross_encoder
    from meddevkg_core.embeddings import EmbeddingCache, load_embedding_model
    from meddevkg_core.llm_extraction import ExtractorSettings
    from meddevkg_core.packaged_models import default_models_dir
    from meddevkg_core.pipeline import Models
    from meddevkg_core.terminologies import TerminologyConfig, load_ontology
    from meddevkg_dagster.resources import former_owners_setting, terminologies_strict_setting

    try:  # MEDDEVKG_UMLS_* / MEDDEVKG_MESH_XML / MEDDEVKG_TERMINOLOGIES_STRICT, as the meddevonto asset reads them
        config = TerminologyConfig.from_env(strict=terminologies_strict_setting()).require_paths()
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(str(exc)) from exc
    ontology = load_ontology(config)
    if ontology.rejected.height:
        print(f"ontology: {ontology.rejected.height} UMLS/MeSH record(s) quarantined (in rejected_records)")
    with exit_on_missing_model():
        encoder = load_embedding_model(embedding_model, default_models_dir(), device=device, backend=embedding_backend)
    resolver = CompanyResolver.for_corpus(corpus_dir, former_owners=former_owners_setting())
    if resolver.rejected.height:
        print(f"companies: {resolver.rejected.height} row(s) of the corpus's company tables quarantined "
              "(in rejected_records)")
    with exit_on_missing_model():
        scorer = load_cross_encoder(cross_encoder, device=device)
    return Models(
        encoder=encoder, entity_extractors=(extraction or ExtractorSettings()).extractors(),
        ontology=ontology.ontology, ontology_rejected=ontology.rejected, ontology_inputs=ontology.inputs,
        resolver=resolver, cross_encoder=scorer, embedding_cache=EmbeddingCache(cache_dir) if cache_dir else None)


@contextmanager
def exit_on_missing_model() -> Iterator[None]:
    """A model an option names that is not on this machine ends the command in one line naming the option
    and its variable, as a mistyped corpus path does (the cross-encoder's ended in a traceback)."""
    from meddevkg_core.cross_encoder import ModelUnavailableOfflineError
    from meddevkg_core.errors import ModelNotFoundError

    try:
        yield
    except ModelUnavailableOfflineError as exc:
        raise SystemExit(f"--cross-encoder / MEDDEVKG_CROSS_ENCODER: {exc}") from exc
    except ModelNotFoundError as exc:
        raise SystemExit(f"--embedding-model / MEDDEVKG_EMBEDDING_MODEL: {exc}") from exc


def require_trainable_gold(corpus: Corpus, path: str) -> None:
    """Stop before any encoding when the gold cannot train Stage 3 (it would fail at the very end)."""
    from meddevkg_core.fold_models import MIN_GOLD_DEVICES

    n = corpus.gold_links["fda_id"].n_unique() if corpus.has_gold else 0
    if n < MIN_GOLD_DEVICES:
        raise SystemExit(f"{path}: {'no gold_links' if n == 0 else f'gold links for only {n} device'}; Stage 3 "
                         "learns from gold links, scoring each gold device with a model that never saw it, and "
                         f"needs them for at least {MIN_GOLD_DEVICES} devices (README, 'Another corpus')"
                         + _rejected_note(corpus.rejected))


def _rejected_note(rejected: pl.DataFrame, shown: int = 6) -> str:
    """The rejected rows by table and reason: gold lost to rejected devices must not read as a corpus without gold."""
    if not rejected.height:
        return ""
    counts = rejected.group_by("source", "reason").len().sort(
        ["len", "source", "reason"], descending=[True, False, False])
    parts = [f"{n} in {source}: {reason}" for source, reason, n in counts.head(shown).iter_rows()]
    more = f"; {counts.height - shown} other reason(s)" if counts.height > shown else ""
    return f". The corpus reader rejected {rejected.height} row(s): {'; '.join(parts)}{more}"


@contextmanager
def exit_on_untrainable_gold(source: str) -> Iterator[None]:
    """A training error found after the early check (gold devices the Stage-2 pool does not hold)
    ends the command with its reason, as the early check does, after `source`: the corpus's path, or
    bench-scale's size options (its synthetic gold has no file)."""
    from meddevkg_core.fold_models import RerankerTrainingError

    try:
        yield
    except RerankerTrainingError as exc:
        raise SystemExit(f"{source}: {exc}") from exc


def extractor_settings(args: argparse.Namespace) -> ExtractorSettings:
    """Stage 1's extractor: --entity-extractor (default $MEDDEVKG_ENTITY_EXTRACTOR) and, for `llm`, the
    MEDDEVKG_LLM_* variables, read as the entity_extractor resource reads them; a missing or malformed one is an
    InputError naming its variable."""
    from meddevkg_core.llm_extraction import ExtractorSettings

    settings = ExtractorSettings.read(args.entity_extractor, os.environ)
    if settings.llm is not None:  # the key is never printed, nor the URL (it may hold a token)
        print(f"entity extraction: LLM {settings.llm.model!r}, replies cached in {settings.llm.cache_dir}")
    return settings


@contextmanager
def exit_on_llm_failure(models: Models | None, extractors: Iterable[EntityExtractor] = ()) -> Iterator[None]:
    """An LLM endpoint that refuses the key or answers none of the documents ends the command in one line,
    before any output is written (the Dagster step fails with the same line); the extractors' HTTP clients
    (`models`', else those given) are closed however the run ends."""
    from meddevkg_core.llm_client import LLMAuthError
    from meddevkg_core.llm_extraction import LLMUnavailableError

    try:
        yield
    except (LLMAuthError, LLMUnavailableError) as exc:
        raise SystemExit(f"{type(exc).__name__}: {exc}") from None
    finally:
        for extractor in (models.entity_extractors.values() if models is not None else extractors):
            extractor.close()


def pipeline_config(args: argparse.Namespace) -> tuple[PipelineConfig, InputFile | None]:
    """The method's settings: `--config FILE`, else $MEDDEVKG_PIPELINE_CONFIG (JSON, as Dagster reads
    it), else the defaults; the cross-encoder options, when given, choose its model and backend. With the
    fingerprint of the file read, for the run's report (None without `--config`)."""
    from meddevkg_core.config import parse_pipeline_config
    from meddevkg_core.lineage import read_fingerprinted

    source, text = "MEDDEVKG_PIPELINE_CONFIG", os.environ.get("MEDDEVKG_PIPELINE_CONFIG", "")
    config_file = None
    try:
        if args.config:
            text, config_file = read_fingerprinted(args.config, lambda path: path.read_text(encoding="utf-8"))
            source = args.config
        config = parse_pipeline_config(text, source)
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"--config {args.config}: cannot be read ({exc})") from exc
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    chosen = {"model": args.cross_encoder, "backend": args.cross_encoder_backend}
    if chosen := {k: v for k, v in chosen.items() if v}:
        config = config.model_copy(update={"cross_encoder": config.cross_encoder.model_copy(update=chosen)})
    return config, config_file


CROSS_ENCODER_BACKENDS = ("sentence-transformers", "flagembedding")
"""cross_encoder.BACKENDS, named here so that every command does not import the models' modules to start."""
ENTITY_EXTRACTOR_ENV, ENTITY_EXTRACTORS = "MEDDEVKG_ENTITY_EXTRACTOR", ("spacy", "llm")
"""llm_extraction's, named here for the same reason."""
MODEL_CHOICES = {"cross_encoder_backend": ("MEDDEVKG_CROSS_ENCODER_BACKEND", CROSS_ENCODER_BACKENDS),
                 "device": ("MEDDEVKG_DEVICE", DEVICES), "embedding_backend": ("MEDDEVKG_EMBEDDING_BACKEND", BACKENDS),
                 "entity_extractor": (ENTITY_EXTRACTOR_ENV, ENTITY_EXTRACTORS)}
"""The model options that take one of a few words, by argument name: the variable of their default, the words."""


def checked_model_choices(args: argparse.Namespace) -> None:
    """argparse holds a command-line value to its option's choices but not a default, which these options take
    from a variable: a value outside them there failed in a traceback once the corpus was read."""
    for name, (variable, choices) in MODEL_CHOICES.items():  # pairs-cv extracts no entities
        if (value := getattr(args, name, None)) is not None and value not in choices:
            raise SystemExit(f"{variable}={value!r}: expected one of {', '.join(choices)} "
                             f"(the default of --{name.replace('_', '-')})")
