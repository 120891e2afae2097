"""The whole pipeline on the real benchmark (434 devices x 2,185 patents), model-free encoder.

The hashing encoder keeps this under a minute; the real MiniLM figures come from `meddevkg run`.
"""

import json

import polars as pl
import pytest

from meddevkg_core.app_store import from_output_dir
from meddevkg_core.company_resolver import CompanyResolver
from meddevkg_core.config import PipelineConfig
from meddevkg_core.corpus import read_corpus
from meddevkg_core.embeddings import HashingEncoder
from meddevkg_core.entities import load_spacy_pipeline
from meddevkg_core.llm_extraction import spacy_extractors
from meddevkg_core.ontology import load_meddevonto
from meddevkg_core.pipeline import Models, run_pipeline, write_result


@pytest.mark.real_data
def test_pipeline_on_the_real_benchmark(benchmark_dir, tmp_path, monkeypatch):
    corpus = read_corpus(benchmark_dir)
    ontology_reject = pl.DataFrame({"source": ["UMLS merge"], "record_key": ["C9900005"], "reason": ["a test"],
                                    "record": ["{}"]})
    models = Models(encoder=HashingEncoder(dimension=384), entity_extractors=spacy_extractors(load_spacy_pipeline()),
                    ontology=load_meddevonto(), resolver=CompanyResolver.for_corpus(benchmark_dir),
                    ontology_rejected=ontology_reject)
    result = run_pipeline(corpus, models, progress=lambda _: None)
    ev = result.evaluation
    assert ev.n_devices == 434 and ev.n_patents == 2185 and ev.n_gold_pairs == 426
    assert ev.link_recall_out_of_fold_only
    assert ev.pool_recall >= 0.80 and ev.pool_share_of_pairs <= 0.10  # MiniLM: 0.90 at 6.2%
    assert ev.link_recall >= 0.75 and ev.n_links < ev.pool_size
    links = result.links
    assert links.select("fda_id", "pat_id").is_unique().all()
    assert links.filter(pl.col("fda_id").is_in(corpus.gold_links["fda_id"].implode()))["out_of_fold"].all()
    out = write_result(result, tmp_path / "out", corpus.root)
    assert pl.read_parquet(out / "links.parquet").height == links.height
    assert pl.read_parquet(out / "text_repairs.parquet").equals(corpus.text_repairs)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["text_repairs"]["devices"] == corpus.text_repairs.height
    assert summary["config"] == json.loads(PipelineConfig().model_dump_json())  # what produced these links
    assert not list(out.glob(".*.tmp"))
    assert pl.read_parquet(out / "rejected_records.parquet").filter(pl.col("source") == "UMLS merge").height == 1
    monkeypatch.delenv("MEDDEVKG_CORPUS", raising=False)
    tables = from_output_dir(out)  # the applications find the run's corpus from summary.json alone
    assert tables.devices is not None and (tables.devices.height, tables.patents.height) == (434, 2185)
