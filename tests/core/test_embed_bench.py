"""The int8 CPU embedding path and its benchmark (a tiny random model; the real MiniLM is marked)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from meddevkg_core.embed_bench import format_embed_report, run_embed_bench
from meddevkg_core.embeddings import INT8_SUFFIX, EmbeddingCache, content_hash, embed_documents, load_sentence_encoder

WORDS = ["stent", "balloon", "catheter", "coronary", "valve", "artery", "implant", "the", "a", "with", "lead",
         "delivery", "system", "heart", "pacing", "graft", "sensor", "pressure", "blood", "vessel"]
TEXTS = [
    "a coronary stent with a balloon catheter",
    "the heart valve implant",
    "pacing lead with a pressure sensor",
    "a delivery system for the graft",
    "blood vessel with the stent graft and a balloon",
    "sensor",
    "the catheter with a lead and a coronary artery stent delivery system for the heart valve",
]


@pytest.fixture(scope="module")
def tiny_sentence_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer BERT with mean pooling, saved as a sentence-transformers model directory."""
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import BertConfig, BertModel, BertTokenizerFast  # type: ignore[attr-defined]

    try:
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Normalize, Pooling, Transformer

    bert = tmp_path_factory.mktemp("tiny_bert_encoder")
    vocab = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    BertTokenizerFast(vocab=vocab, model_max_length=128).save_pretrained(bert)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,  # type: ignore[call-arg]
                        intermediate_size=128, max_position_embeddings=128)
    BertModel(config).save_pretrained(bert)
    transformer = Transformer(str(bert), max_seq_length=64)
    out = tmp_path_factory.mktemp("tiny_sentence_model") / "tiny-st"
    SentenceTransformer(modules=[transformer, Pooling(64, "mean"), Normalize()], device="cpu").save(str(out))
    return out


def test_int8_encoder_agrees_with_fp32_and_has_its_own_model_id(tiny_sentence_model: Path) -> None:
    fp32 = load_sentence_encoder(str(tiny_sentence_model), device="cpu")
    int8 = load_sentence_encoder(str(tiny_sentence_model), device="cpu", quantize=True)
    assert fp32.model_id == "tiny-st" and int8.model_id == "tiny-st" + INT8_SUFFIX
    assert int8.dimension == fp32.dimension == 64
    import torch
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    assert not any(type(m) is torch.nn.Linear for m in int8.model.modules())  # every Linear layer runs in int8
    n_linear = sum(type(m) is torch.nn.Linear for m in fp32.model.modules())
    assert n_linear >= 12 and sum(isinstance(m, DynamicInt8Linear) for m in int8.model.modules()) == n_linear
    assert not any(isinstance(m, DynamicInt8Linear) for m in fp32.model.modules())  # fp32 copy untouched
    a, b = fp32.encode(TEXTS), int8.encode(TEXTS)
    assert b.shape == a.shape and b.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    cosine = np.sum(a * b, axis=1)
    assert cosine.min() > 0.9, cosine
    assert not np.allclose(a, b, atol=1e-6)  # int8 really is a different computation
    explicit = load_sentence_encoder(str(tiny_sentence_model), device="cpu", quantize=True, model_id="mine")
    assert explicit.model_id == "mine" + INT8_SUFFIX


def test_int8_vectors_are_cached_apart_from_fp32(tiny_sentence_model: Path, tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "cache")
    docs = pl.DataFrame({"doc_id": ["a", "b"], "text": TEXTS[:2]})
    fp32 = embed_documents(docs, load_sentence_encoder(str(tiny_sentence_model), device="cpu"), cache)
    int8 = embed_documents(docs, load_sentence_encoder(str(tiny_sentence_model), device="cpu", quantize=True), cache)
    assert set(fp32["content_hash"]).isdisjoint(int8["content_hash"])
    assert len(cache) == 4
    assert int8["content_hash"][0] == content_hash(TEXTS[0], "tiny-st" + INT8_SUFFIX)


def test_int8_is_cpu_only(tiny_sentence_model: Path) -> None:
    with pytest.raises(ValueError, match="CPU"):
        load_sentence_encoder(str(tiny_sentence_model), device="cuda", quantize=True)


def test_embed_bench_reports_speed_and_agreement(tiny_sentence_model: Path) -> None:
    texts = TEXTS * 3
    result = run_embed_bench(texts, model_path=str(tiny_sentence_model), runs=2, batch_size=4, warmup_texts=4)
    assert set(result["paths"]) == {"fp32", "int8"}
    for path in result["paths"].values():
        assert path["texts_per_s"] > 0 and len(path["seconds"]) == 2 and path["median_s"] > 0
    agreement = result["int8_vs_fp32"]
    assert {"cosine_mean", "cosine_min", "cosine_p01", "neighbour_overlap_at_10", "speedup"} <= set(agreement)
    assert 0.9 < agreement["cosine_min"] <= agreement["cosine_mean"] <= 1.0 + 1e-6
    assert result["n_texts"] == len(texts) and isinstance(result["onnxruntime_available"], bool)
    assert "texts/s" in format_embed_report(result)
    only = run_embed_bench(texts[:4], paths=("int8",), model_path=str(tiny_sentence_model), runs=1, warmup_texts=2)
    assert set(only["paths"]) == {"int8"} and "int8_vs_fp32" not in only
    with pytest.raises(ValueError, match="unknown"):
        run_embed_bench(texts, paths=("fp16",), model_path=str(tiny_sentence_model))


@pytest.mark.real_model  # loads the packaged all-MiniLM-L6-v2 twice (~5-10 s on CPU)
def test_packaged_minilm_int8_agrees_on_benchmark_abstracts(benchmark_dir: Path, capsys) -> None:
    import json

    from meddevkg_dagster.cli import main

    assert main(["bench-embed", "--corpus", str(benchmark_dir), "--texts", "24", "--runs", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("Embedding benchmark: 24 texts")  # the summary, then one JSON line last
    result = json.loads(lines[-1])
    assert result["paths"]["int8"]["model_id"] == "all-MiniLM-L6-v2" + INT8_SUFFIX
    assert result["int8_vs_fp32"]["cosine_mean"] > 0.95
