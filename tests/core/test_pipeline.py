"""`prepare` runs Stage 1 through the models' extractors; `write_result`: a run's files are replaced as one set."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.company_resolver import CompanyResolver
from meddevkg_core.corpus import read_corpus
from meddevkg_core.embeddings import HashingEncoder
from meddevkg_core.entities import ExtractionResult, extract_mentions, load_spacy_pipeline
from meddevkg_core.lineage import fingerprint
from meddevkg_core.llm_extraction import spacy_extractors
from meddevkg_core.ontology import load_meddevonto
from meddevkg_core.pipeline import Models, PipelineResult, Timer, documents, prepare, write_result
from meddevkg_core.progress import no_progress


def _result(version: int) -> PipelineResult:
    frame = pl.DataFrame({"fda_id": ["P1"], "pat_id": [f"US{version}"]})
    full = SimpleNamespace(threshold=0.5, n_train_pairs=1, n_train_devices=1)
    model = SimpleNamespace(full=full, folds=[], to_frame=lambda: pl.DataFrame({"fold": [version]}))
    evaluation = SimpleNamespace(model_dump=lambda: {"n_links": version})
    return PipelineResult(frame, frame, frame, model, evaluation, schemas.empty(schemas.REJECTED_RECORDS),
                          frame, frame, frame)


def _contents(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_write_that_fails_midway_leaves_the_previous_run_and_no_temporary_file(tmp_path, monkeypatch):
    out = tmp_path / "run"
    write_result(_result(1), out)
    (out / "notes.txt").write_text("the user's own file")
    before = _contents(out)
    real = pl.DataFrame.write_parquet

    def disk_full_on_the_model(self, file, *args, **kwargs):
        if "reranker_model" in Path(file).name:
            Path(file).write_bytes(b"PAR1 half a")
            raise OSError("No space left on device")
        return real(self, file, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", disk_full_on_the_model)
    with pytest.raises(OSError, match="No space left"):
        write_result(_result(2), out)
    assert _contents(out) == before
    monkeypatch.undo()
    write_result(_result(2), out)
    assert pl.read_parquet(out / "links.parquet")["pat_id"].to_list() == ["US2"]
    assert (out / "notes.txt").read_text() == "the user's own file"
    assert sorted(p.name for p in out.iterdir()) == sorted(before)


def test_the_summary_records_the_runs_corpus_and_the_bytes_of_its_input_files(tmp_path):
    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,stent\n")
    devices = fingerprint(tmp_path / "devices.csv")
    result = _result(1)
    result.inputs = {"devices": devices}
    write_result(result, tmp_path / "run", tmp_path)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["corpus"] == {"path": str(tmp_path)}
    assert summary["inputs"] == {"devices": {"path": devices.path, "size": 21, "sha256": devices.sha256}}


class _Recording:
    """An EntityExtractor answering every document with one mention and one reject named after it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def extract_mentions(self, docs, ontology, progress=no_progress):
        ids = docs["doc_id"].to_list()
        progress(len(ids), len(ids))
        mentions = pl.DataFrame({"doc_id": ids, "mention": [self.name] * len(ids), "start": 0, "end": 1,
                                 "entity_type": "COMPONENT", "norm": self.name, "concept_id": None,
                                 "map_tier": "none", "grounding": "exact"}, schema=schemas.MENTIONS)
        rejected = pl.DataFrame({"source": "entities", "record_key": ids, "reason": f"{self.name} said no",
                                 "record": "{}"}, schema=schemas.REJECTED_RECORDS)
        return ExtractionResult(mentions, rejected)


def _models(tmp_path: Path, extractors) -> Models:
    return Models(encoder=HashingEncoder(dimension=16), entity_extractors=extractors, ontology=load_meddevonto(),
                  resolver=CompanyResolver.for_corpus(tmp_path))


def _tiny_corpus(root: Path):
    (root / "devices.csv").write_text("fda_id,text\nP1,A drug-eluting coronary stent on a balloon catheter.\n"
                                      "P2,An implantable pacemaker with a pacing lead.\n")
    (root / "patents.csv").write_text("pat_id,text\n1,A stent delivery catheter.\n2,A pacing lead electrode.\n"
                                      "3,\n")
    return read_corpus(root)


def test_stage_1_runs_each_domains_extractor_with_the_stages_progress(tmp_path):
    # Stage 1 called spaCy on models.nlp whatever extractor was chosen: an LLM's could not be used by `run`
    corpus = _tiny_corpus(tmp_path)
    lines: list[str] = []
    prepared = prepare(corpus, _models(tmp_path, {"device": _Recording("dev"), "patent": _Recording("pat")}),
                       Timer(lines.append))
    assert prepared.device_mentions.select("doc_id", "norm").rows() == [("P1", "dev"), ("P2", "dev")]
    assert prepared.patent_mentions.select("doc_id", "norm").rows() == [("1", "pat"), ("2", "pat")]
    assert {"dev said no", "pat said no"} <= set(prepared.rejected["reason"])
    assert [line.split(",")[0] for line in lines if line.startswith("[device_entities]:")] == [
        "[device_entities]: 2/2 documents (100%)"]
    assert [line.split(",")[0] for line in lines if line.startswith("[patent_entities]:")] == [
        "[patent_entities]: 2/2 documents (100%)"]


def test_stage_1_with_spacy_is_spacys_extraction_with_its_progress(tmp_path):
    corpus = _tiny_corpus(tmp_path)
    nlp = load_spacy_pipeline()
    lines: list[str] = []
    prepared = prepare(corpus, _models(tmp_path, spacy_extractors(nlp)), Timer(lines.append))
    ontology = load_meddevonto()
    device = extract_mentions(documents(corpus.devices, "fda_id"), ontology, nlp)
    patent = extract_mentions(documents(corpus.patents, "pat_id"), ontology, nlp)
    assert prepared.device_mentions.equals(device.mentions) and device.mentions.height > 0
    assert prepared.patent_mentions.equals(patent.mentions) and patent.mentions.height > 0
    assert prepared.rejected.filter(pl.col("source") == "entities").equals(pl.concat([device.rejected,
                                                                                       patent.rejected]))
    assert [line.split(",")[0] for line in lines if "_entities]:" in line] == [
        "[device_entities]: 2/2 documents (100%)", "[patent_entities]: 2/2 documents (100%)"]
