"""The whole method as one call over a corpus, built from the same stage functions the assets use.

The CLI (`meddevkg run`) and the Dagster assets both go through these functions, so there is one
implementation of every stage; the assets only add partitions, storage and metadata.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from meddevkg_core import schemas
from meddevkg_core.atomic_files import replaced_files
from meddevkg_core.baselines import TfidfScorer
from meddevkg_core.block_scores import Stage2Inputs
from meddevkg_core.candidates import generate_candidates
from meddevkg_core.companies import company_match_table
from meddevkg_core.company_resolver import CompanyResolver
from meddevkg_core.config import PipelineConfig
from meddevkg_core.corpus import Corpus
from meddevkg_core.cross_encoder import PairScorer, score_candidate_pairs
from meddevkg_core.device_activity import grant_years_of, last_decision_years, with_last_decision
from meddevkg_core.device_names import head_words_of
from meddevkg_core.dossier import device_dossiers
from meddevkg_core.embeddings import EmbeddingCache, Encoder, embed_documents, embedding_matrix
from meddevkg_core.entity_match import EntityMatcher, doc_keys
from meddevkg_core.evaluation import LinkEvaluation, evaluate_links
from meddevkg_core.fold_models import FoldModels, apply_fold_models, fit_fold_models
from meddevkg_core.lineage import InputFile, inputs_json
from meddevkg_core.links_table import links_frame
from meddevkg_core.llm_extraction import Domain, EntityExtractor
from meddevkg_core.ontology import Ontology
from meddevkg_core.progress import ThrottledReporter, stage_reporter
from meddevkg_core.rerank import feature_frame
from meddevkg_core.reranked_links import decide, with_ranks
from meddevkg_core.text_adapter import Vectors
from meddevkg_core.text_repair import repair_counts
from meddevkg_core.training_pairs import training_pairs


@dataclass(frozen=True)
class Models:
    """Everything loaded once and passed in: no stage loads a model by itself."""

    encoder: Encoder
    entity_extractors: Mapping[Domain, EntityExtractor]
    """Stage 1's extractor of device and of patent texts (llm_extraction: spaCy's, or an LLM's by domain prompt)."""
    ontology: Ontology
    resolver: CompanyResolver
    cross_encoder: PairScorer | None = None
    embedding_cache: EmbeddingCache | None = None
    ontology_rejected: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.REJECTED_RECORDS))
    """What loading the ontology's licensed releases quarantined (terminologies.load_ontology)."""
    ontology_inputs: Mapping[str, InputFile] = field(default_factory=dict)
    """The licensed releases' files the ontology was merged from (MergedOntology.inputs; none: the shipped one)."""


def documents(df: pl.DataFrame, id_col: str) -> pl.DataFrame:
    return df.select(pl.col(id_col).alias("doc_id"), pl.col("text"))


def stage2_inputs(device_embeddings: pl.DataFrame, patent_embeddings: pl.DataFrame,
                  device_mentions: pl.DataFrame, patent_mentions: pl.DataFrame,
                  company_matches: pl.DataFrame, ontology: Ontology, config: PipelineConfig,
                  devices: pl.DataFrame | None = None, patents: pl.DataFrame | None = None,
                  supplements: pl.DataFrame | None = None) -> Stage2Inputs:
    """Stage-2 inputs aligned by row; with device and patent texts, also a TF-IDF lexical scorer,
    and with the devices' supplements (even none), one over their dossiers (dossier) and the
    devices' latest FDA decisions (device_activity). The device texts also give each device's
    label-head words (device_names)."""
    device_ids, device_vectors = embedding_matrix(device_embeddings)
    patent_ids, patent_vectors = embedding_matrix(patent_embeddings)
    cfg = config.candidates
    matcher = EntityMatcher(doc_keys(device_mentions, ontology, cfg), doc_keys(patent_mentions, ontology, cfg),
                            patent_ids, cfg)
    lexical = dossier = last_decision = grant_year = None
    words = head_words_of(devices.select("fda_id", "text").iter_rows()) if devices is not None else {}
    if devices is not None and patents is not None:
        dev_text = dict(devices.select("fda_id", "text").iter_rows())
        pat_text = dict(patents.select("pat_id", "text").iter_rows())
        views = [[dev_text[d] for d in device_ids]]
        if supplements is not None:
            dossiers = device_dossiers(devices, supplements)
            views.append([dossiers[d] for d in device_ids])
            last_decision = last_decision_years(devices, supplements, device_ids)
            grant_year = grant_years_of(patents, patent_ids)
        lexical, *rest = TfidfScorer.fit_views(views, [pat_text[p] for p in patent_ids])
        dossier = rest[0] if rest else None
    return Stage2Inputs(device_ids, device_vectors, patent_ids, patent_vectors, company_matches, matcher, lexical,
                        dossier, words, last_decision, grant_year)


def rerank(candidates: pl.DataFrame, ce_scores: pl.DataFrame | None, gold: pl.DataFrame,
           config: PipelineConfig, models: FoldModels | None = None,
           training: pl.DataFrame | None = None, vectors: Vectors | None = None) -> tuple[pl.DataFrame, FoldModels]:
    """Stage 3 on a pool: trains fold models on the gold (unless given), scores, decides, ranks.

    `training` (see training_pairs) replaces the pool as the training population when given;
    `vectors` lets the text adapters train and order each device's top pairs (text_adapter).
    """
    features = feature_frame(candidates, ce_scores)
    if models is None:
        models = fit_fold_models(features if training is None else training, gold, config.rerank, vectors)
    scored = decide(apply_fold_models(features, models, vectors), config.rerank)
    return links_frame(with_ranks(scored, models, vectors, config.rerank)), models


class Timer:
    """Times named stages and reports progress (to the CLI, a Dagster log, or nowhere)."""

    def __init__(self, progress: Callable[[str], None] = print):
        self.progress = progress
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, fn, *args, **kwargs):
        self.progress(f"[{name}] ...")
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self.seconds[name] = round(time.perf_counter() - start, 2)
        self.progress(f"[{name}] done in {self.seconds[name]:.1f}s")
        return out

    def reporter(self, name: str, unit: str) -> ThrottledReporter:
        """Progress inside a long stage, to the same place as the stage lines."""
        return stage_reporter(name, self.progress, unit)


@dataclass(frozen=True)
class PreparedCorpus:
    """Per-document features, computed once; Stage 2 and 3 (and every ablation) start from here."""

    corpus: Corpus
    device_mentions: pl.DataFrame
    patent_mentions: pl.DataFrame
    device_embeddings: pl.DataFrame
    patent_embeddings: pl.DataFrame
    company_matches: pl.DataFrame
    rejected: pl.DataFrame


def market_company_matches(devices: pl.DataFrame, supplements: pl.DataFrame | None, patents: pl.DataFrame,
                           resolver: CompanyResolver) -> pl.DataFrame:
    """The device x patent pairs whose companies `resolver` relates, over each device's time on the
    market: a deal counts up to its latest FDA decision, when supplements are known (Reach.holds)."""
    return company_match_table(with_last_decision(devices, supplements), patents, resolver)


def prepare(corpus: Corpus, models: Models, timer: Timer) -> PreparedCorpus:
    dev_docs, pat_docs = documents(corpus.devices, "fda_id"), documents(corpus.patents, "pat_id")
    dev_ext = timer("device_entities", models.entity_extractors["device"].extract_mentions, dev_docs,
                    models.ontology, progress=timer.reporter("device_entities", "documents"))
    pat_ext = timer("patent_entities", models.entity_extractors["patent"].extract_mentions, pat_docs,
                    models.ontology, progress=timer.reporter("patent_entities", "documents"))
    dev_emb = timer("device_embeddings", embed_documents, dev_docs, models.encoder, models.embedding_cache,
                    progress=timer.reporter("device_embeddings", "texts"))
    pat_emb = timer("patent_embeddings", embed_documents, pat_docs, models.encoder, models.embedding_cache,
                    progress=timer.reporter("patent_embeddings", "texts"))
    matches = timer("company_matches", market_company_matches, corpus.devices, corpus.supplements, corpus.patents,
                    models.resolver)
    rejected = pl.concat([corpus.rejected, models.ontology_rejected, models.resolver.rejected, dev_ext.rejected,
                          pat_ext.rejected])
    return PreparedCorpus(corpus, dev_ext.mentions, pat_ext.mentions, dev_emb, pat_emb, matches, rejected)


@dataclass(frozen=True)
class LinkRun:
    """Stages 2 and 3 on prepared features under one configuration."""

    inputs: Stage2Inputs
    candidates: pl.DataFrame
    cross_encoder_scores: pl.DataFrame
    links: pl.DataFrame
    models: FoldModels


def link(prepared: PreparedCorpus, models: Models, config: PipelineConfig, timer: Timer) -> LinkRun:
    corpus = prepared.corpus
    inputs = timer("stage2_index", stage2_inputs, prepared.device_embeddings, prepared.patent_embeddings,
                   prepared.device_mentions, prepared.patent_mentions, prepared.company_matches,
                   models.ontology, config, corpus.devices, corpus.patents, corpus.supplements)
    pool = timer("candidate_pool", generate_candidates, inputs, config.candidates,
                 progress=timer.reporter("candidate_pool", "devices"))
    ce = timer("cross_encoder_scores", score_candidate_pairs, pool, corpus.devices, corpus.patents,
               models.cross_encoder, config.cross_encoder.max_chars, config.cross_encoder.batch_size)
    training = timer("training_pairs", training_pairs, inputs, pool, ce, corpus.gold_links, config)
    links, fold_models = timer("reranked_links", rerank, pool, ce, corpus.gold_links, config, training=training,
                               vectors=Vectors.of_inputs(inputs))
    return LinkRun(inputs, pool, ce, links, fold_models)


@dataclass
class PipelineResult:
    candidates: pl.DataFrame
    links: pl.DataFrame
    cross_encoder_scores: pl.DataFrame
    model: FoldModels
    evaluation: LinkEvaluation
    rejected: pl.DataFrame
    device_mentions: pl.DataFrame
    patent_mentions: pl.DataFrame
    company_matches: pl.DataFrame
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    text_repairs: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.TEXT_REPAIRS))
    config: PipelineConfig = field(default_factory=PipelineConfig)
    entity_extraction: dict[str, dict[str, str | int | float]] = field(default_factory=dict)
    """extraction_figures of the run: which extractor ran on each domain, and an LLM's model and counts."""
    inputs: Mapping[str, InputFile] = field(default_factory=dict)
    """run_inputs: the files the run read, with their bytes' digest."""


def run_inputs(corpus: Corpus, models: Models, config_file: InputFile | None) -> dict[str, InputFile]:
    """The files a run read, by name, with their bytes' digest (lineage): the corpus tables and FDA
    records (Corpus.inputs), the corpus's company tables (the resolver's), the `--config` file and the
    UMLS / MeSH files merged into the ontology (Models.ontology_inputs)."""
    return {**corpus.inputs, **models.resolver.inputs, **({"config": config_file} if config_file else {}),
            **models.ontology_inputs}


def run_pipeline(corpus: Corpus, models: Models, config: PipelineConfig | None = None,
                 progress: Callable[[str], None] = print, config_file: InputFile | None = None) -> PipelineResult:
    """Stages 1-3 over a corpus, with the reranker trained and evaluated out-of-fold on its gold.
    `config_file`: the file `config` was read from, if any, recorded with the run's inputs."""
    config = config or PipelineConfig()
    timer = Timer(progress)
    prepared = prepare(corpus, models, timer)
    run = link(prepared, models, config, timer)
    evaluation = evaluate_links(run.candidates, run.links, corpus.gold_links, corpus.devices.height,
                                corpus.patents.height)
    return PipelineResult(run.candidates, run.links, run.cross_encoder_scores, run.models, evaluation,
                          prepared.rejected, prepared.device_mentions, prepared.patent_mentions,
                          prepared.company_matches, timer.seconds, notes(models),
                          corpus.text_repairs, config, extraction_figures(models),
                          run_inputs(corpus, models, config_file))


def extraction_figures(models: Models) -> dict[str, dict[str, str | int | float]]:
    """By domain, the extractor that ran and, for an LLM, its model and counts (as the entity assets'
    metadata has them): a run's summary says how its mentions were made."""
    return {domain: extractor.figures() for domain, extractor in models.entity_extractors.items()}


def notes(models: Models) -> list[str]:
    return [] if models.cross_encoder else ["no cross-encoder configured: ai_score is missing for XGBoost"]


def write_result(result: PipelineResult, out: str | Path, corpus_root: Path | None = None) -> Path:
    """Write every table of a run, replacing a previous run's files as one set
    (atomic_files.replaced_files: a failed write leaves the previous run's files and no temporary one).

    `corpus_root` (read_corpus makes it absolute) is recorded in summary.json, so the applications
    find the run's devices and patents from any directory (app_store.corpus_of); so are the files the
    run read, with their bytes' digest (`inputs`)."""
    out = Path(out)
    tables = {"candidates": result.candidates, "links": result.links,
              "cross_encoder_scores": result.cross_encoder_scores, "rejected_records": result.rejected,
              "device_mentions": result.device_mentions, "patent_mentions": result.patent_mentions,
              "company_matches": result.company_matches, "text_repairs": result.text_repairs,
              "reranker_model": result.model.to_frame()}
    summary = {"evaluation": result.evaluation.model_dump(), "timings_s": result.timings, "notes": result.notes,
               "text_repairs": repair_counts(result.text_repairs), "entity_extraction": result.entity_extraction,
               "reranker": {"threshold": result.model.full.threshold,
                            "n_train_pairs": result.model.full.n_train_pairs,
                            "n_train_devices": result.model.full.n_train_devices,
                            "folds": len(result.model.folds)},
               "config": json.loads(result.config.model_dump_json())}
    if corpus_root is not None:
        summary["corpus"] = {"path": str(corpus_root)}
    summary["inputs"] = inputs_json(result.inputs)
    with replaced_files(out) as stage:
        for name, df in tables.items():
            df.write_parquet(stage / f"{name}.parquet")
        (stage / "summary.json").write_text(json.dumps(summary, indent=2))
    return out


