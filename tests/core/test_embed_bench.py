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


def test_embed_bench_reports_speed_and_agreement(tiny_sentence_model: Path, tmp_path: Path) -> None:
    texts = TEXTS * 3
    result = run_embed_bench(texts, model_path=str(tiny_sentence_model), runs=3, batch_size=4, warmup_texts=4,
                             onnx_cache_dir=tmp_path / "onnx")
    assert set(result["paths"]) == {"fp32", "int8", "onnx-fp32", "onnx-int8"}
    for path in result["paths"].values():
        assert path["texts_per_second"] > 0 and len(path["seconds"]) == 3 and path["median_s"] > 0
        assert path["texts_per_second"] == pytest.approx(len(texts) / path["median_s"], rel=0.01)
        assert path["speedup"] > 0 and path["texts_per_cpu_second"] > 0
    assert result["paths"]["fp32"]["speedup"] == 1.0 and "vs_fp32" not in result["paths"]["fp32"]
    assert result["paths"]["onnx-int8"]["onnx_built_now"] and result["paths"]["onnx-fp32"]["onnx_built_now"]
    for name in ("int8", "onnx-fp32", "onnx-int8"):
        agreement = result["paths"][name]["vs_fp32"]
        assert {"cosine_mean", "cosine_min", "cosine_p01", "neighbour_overlap_at_10", "speedup"} <= set(agreement)
        assert 0.9 < agreement["cosine_min"] <= agreement["cosine_p01"] <= agreement["cosine_mean"] <= 1.0 + 1e-6
        assert isinstance(result["paths"][name]["meets_goal"], bool)
    assert result["paths"]["onnx-fp32"]["vs_fp32"]["cosine_min"] > 0.99999  # the same network
    assert result["paths"]["onnx-int8"]["vs_fp32"]["cosine_min"] > 0.99
    assert result["int8_vs_fp32"] == result["paths"]["int8"]["vs_fp32"]
    assert result["n_texts"] == len(texts) and isinstance(result["onnxruntime_available"], bool)
    report = format_embed_report(result)
    assert "texts/s" in report and all(name in report for name in result["paths"])
    again = run_embed_bench(texts[:4], paths=("onnx-int8",), model_path=str(tiny_sentence_model), runs=1,
                            warmup_texts=2, onnx_cache_dir=tmp_path / "onnx")
    assert set(again["paths"]) == {"onnx-int8"} and "int8_vs_fp32" not in again
    assert not again["paths"]["onnx-int8"]["onnx_built_now"]  # the first run's export is reused
    with pytest.raises(ValueError, match="unknown"):
        run_embed_bench(texts, paths=("fp16",), model_path=str(tiny_sentence_model))


@pytest.mark.real_model  # loads the packaged all-MiniLM-L6-v2 twice (~5-10 s on CPU)
def test_packaged_minilm_int8_agrees_on_benchmark_abstracts(benchmark_dir: Path, capsys, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from meddevkg_core.onnx_encoder import ONNX_SUFFIX
    from meddevkg_dagster.cli import main

    monkeypatch.setenv("MEDDEVKG_ONNX_CACHE", str(tmp_path / "onnx"))  # exports the real model (~20 s)
    assert main(["bench-embed", "--corpus", str(benchmark_dir), "--texts", "24", "--runs", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("Embedding benchmark: 24 texts")  # the summary, then one JSON line last
    result = json.loads(lines[-1])
    assert result["paths"]["int8"]["model_id"] == "all-MiniLM-L6-v2" + INT8_SUFFIX
    assert result["int8_vs_fp32"]["cosine_mean"] > 0.95
    assert result["paths"]["onnx-int8"]["model_id"] == "all-MiniLM-L6-v2" + ONNX_SUFFIX["onnx-int8"]
    assert result["paths"]["onnx-fp32"]["vs_fp32"]["cosine_min"] > 0.9999
    assert result["paths"]["onnx-int8"]["vs_fp32"]["cosine_mean"] > 0.99
    assert result["paths"]["onnx-int8"]["vs_fp32"]["cosine_min"] > 0.99  # issue 7: min, not only mean


# --- ONNX Runtime paths -------------------------------------------------------------------------


def _built_dirs(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if not p.name.startswith(".")) if cache.is_dir() else []


def test_onnx_paths_agree_with_torch_fp32(tiny_sentence_model: Path, tmp_path: Path) -> None:
    from meddevkg_core.onnx_encoder import ONNX_SUFFIX, OnnxSentenceEncoder

    fp32 = load_sentence_encoder(str(tiny_sentence_model), device="cpu", batch_size=3)
    reference = fp32.encode(TEXTS)
    for backend in ("onnx-fp32", "onnx-int8"):
        enc = load_sentence_encoder(str(tiny_sentence_model), backend=backend, batch_size=3,
                                    onnx_cache_dir=tmp_path / "onnx", threads=1)
        assert isinstance(enc, OnnxSentenceEncoder) and enc.built_now
        assert enc.model_id == "tiny-st" + ONNX_SUFFIX[backend] and enc.dimension == 64
        assert enc.max_seq_length == 64  # the SentenceTransformer's max_seq_length, not the tokenizer's 128
        vectors = enc.encode(TEXTS)
        assert vectors.shape == (len(TEXTS), 64) and vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        # batching (padded and unpadded batches, a batch of one) does not change an fp32 vector; int8
        # activations are quantised with one scale per batch, so there it moves a little
        single = np.concatenate([enc.encode([t]) for t in TEXTS])
        if backend == "onnx-fp32":
            np.testing.assert_allclose(single, vectors, atol=1e-5)
        else:
            assert np.sum(single * vectors, axis=1).min() > 0.999
        cosine = np.sum(vectors * reference, axis=1)
        if backend == "onnx-fp32":
            np.testing.assert_allclose(vectors, reference, atol=1e-5)  # the same network
            assert enc.meta["fused_ops"].get("Attention") == 2  # ORT fused both attention layers
        else:
            assert cosine.min() > 0.99, cosine
            assert not np.allclose(vectors, reference, atol=1e-6)  # int8 really is a different computation
    assert len(_built_dirs(tmp_path / "onnx")) == 2 and enc.encode([]).shape == (0, 64)


def test_onnx_batches_side_by_side_give_the_sequential_vectors(tiny_sentence_model: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    texts = [t * k for k in (1, 3, 7) for t in TEXTS]  # several batches of different lengths
    for backend in ("onnx-fp32", "onnx-int8"):
        enc = load_sentence_encoder(str(tiny_sentence_model), backend=backend, batch_size=2,
                                    onnx_cache_dir=tmp_path, threads=2)
        assert enc.workers == 2 and enc.session.get_session_options().intra_op_num_threads == 1
        sequential = replace(enc, workers=1).encode(texts)
        np.testing.assert_array_equal(enc.encode(texts), sequential)  # same batches, same rows, same order
        np.testing.assert_allclose(replace(enc, sort_by_length=False).encode(texts), sequential, atol=0.02)


def test_onnx_tokenisation_is_the_sentence_transformers_one(tiny_sentence_model: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    enc = load_sentence_encoder(str(tiny_sentence_model), backend="onnx-fp32", onnx_cache_dir=tmp_path)
    st = SentenceTransformer(str(tiny_sentence_model), device="cpu", local_files_only=True)
    long_text = " ".join(WORDS * 10)  # 200 words: truncated at max_seq_length
    texts = [long_text, *TEXTS]
    expected = st.preprocess(texts)
    got = enc.tokenizer(texts, padding=True, truncation="longest_first", max_length=enc.max_seq_length,
                        return_tensors="np")
    for name in enc.input_names:
        np.testing.assert_array_equal(got[name], expected[name].numpy())
    assert got["input_ids"].shape[1] == 64


def test_onnx_model_is_built_once_then_reused(tiny_sentence_model: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from meddevkg_core import onnx_encoder

    cache = tmp_path / "onnx"
    first = load_sentence_encoder(str(tiny_sentence_model), backend="onnx-int8", onnx_cache_dir=cache)
    assert first.built_now and (first.onnx_dir / "model.onnx").is_file()
    mtime = (first.onnx_dir / "model.onnx").stat().st_mtime_ns

    def no_export(*args, **kwargs):
        raise AssertionError("re-exported a cached model")

    monkeypatch.setattr(onnx_encoder, "_build", no_export)
    second = load_sentence_encoder(str(tiny_sentence_model), backend="onnx-int8", onnx_cache_dir=cache)
    assert not second.built_now and second.onnx_dir == first.onnx_dir
    assert (second.onnx_dir / "model.onnx").stat().st_mtime_ns == mtime
    np.testing.assert_array_equal(second.encode(TEXTS), first.encode(TEXTS))
    assert [p.name for p in cache.iterdir()] == [first.onnx_dir.name]  # no temporaries left behind
    # another recipe is another cache entry (and would need a build)
    with pytest.raises(AssertionError, match="re-exported"):
        onnx_encoder.ensure_onnx_model(tiny_sentence_model, onnx_encoder.OnnxRecipe("int8", per_channel=False), cache)
    assert [p.name for p in cache.iterdir()] == [first.onnx_dir.name]


def test_onnx_int8_graph_keeps_the_recipes_fp32_matmuls_and_quantises_the_rest(tiny_sentence_model: Path,
                                                                                tmp_path: Path) -> None:
    # The recipe names nodes to keep in fp32; a name the exporter no longer produces would be ignored.
    import onnx

    from meddevkg_core.onnx_encoder import FP32_NODES

    encoder = load_sentence_encoder(str(tiny_sentence_model), backend="onnx-int8", onnx_cache_dir=tmp_path)
    nodes = {n.name: n.op_type for n in onnx.load(str(encoder.onnx_dir / "model.onnx")).graph.node}
    kept = [name for name in FP32_NODES if name in nodes]
    assert len(kept) == 3  # the tiny model has 2 layers: layer.2's node is the only one it lacks
    assert all(nodes[name] == "MatMul" for name in kept)
    assert sum(op in ("MatMulInteger", "QAttention") for op in nodes.values()) >= 4  # the rest is quantised


def test_onnx_cache_key_follows_model_content(tiny_sentence_model: Path, tmp_path: Path) -> None:
    import shutil

    from meddevkg_core.onnx_encoder import OnnxRecipe, cache_key, model_content_hash

    copy = tmp_path / "tiny-st"
    shutil.copytree(tiny_sentence_model, copy)
    assert model_content_hash(copy) == model_content_hash(tiny_sentence_model)  # content, not location
    (copy / "config.json").write_text((copy / "config.json").read_text() + "\n")
    changed = model_content_hash(copy)
    assert changed != model_content_hash(tiny_sentence_model)
    assert cache_key(changed, OnnxRecipe("int8")) != cache_key(changed, OnnxRecipe("fp32"))


def test_failed_onnx_build_leaves_nothing(tiny_sentence_model: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from meddevkg_core import onnx_encoder

    def broken(*args, **kwargs):
        raise RuntimeError("quantisation crashed")

    monkeypatch.setattr(onnx_encoder, "_quantize", broken)
    with pytest.raises(RuntimeError, match="crashed"):
        load_sentence_encoder(str(tiny_sentence_model), backend="onnx-int8", onnx_cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_onnx_vectors_are_cached_apart(tiny_sentence_model: Path, tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "cache")
    docs = pl.DataFrame({"doc_id": ["a", "b"], "text": TEXTS[:2]})
    ids = set()
    for backend in ("torch-fp32", "onnx-fp32", "onnx-int8"):
        enc = load_sentence_encoder(str(tiny_sentence_model), backend=backend, onnx_cache_dir=tmp_path / "onnx")
        ids.add(enc.model_id)
        embed_documents(docs, enc, cache)
    assert len(ids) == 3 and len(cache) == 6


def test_onnx_backends_are_cpu_only_and_checked(tiny_sentence_model: Path) -> None:
    with pytest.raises(ValueError, match="CPU"):
        load_sentence_encoder(str(tiny_sentence_model), device="cuda", backend="onnx-int8")
    with pytest.raises(ValueError, match="unknown embedding backend"):
        load_sentence_encoder(str(tiny_sentence_model), backend="onnx-fp16")
    with pytest.raises(ValueError, match="quantize"):
        load_sentence_encoder(str(tiny_sentence_model), backend="onnx-int8", quantize=True)


def test_bench_embed_refuses_a_batch_size_below_one() -> None:
    from meddevkg_core.demo import demo_corpus_dir
    from meddevkg_core.embed_bench import main_bench_embed

    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        main_bench_embed(demo_corpus_dir(), n_texts=5, batch_size=0)


class _InstantEncoder:
    """Encodes in no measurable time, as a tiny model on a few texts nearly does."""

    model_id = "instant"

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32) / 2.0


class _FakeClock:
    """Each reading is 0.2 ms after the last: a run lasts less than the milliseconds the report rounds to."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 2e-4
        return self.now

    process_time = perf_counter


def test_sub_millisecond_runs_still_give_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    from meddevkg_core import embed_bench

    monkeypatch.setattr(embed_bench, "load_sentence_encoder", lambda *args, **kwargs: _InstantEncoder())
    monkeypatch.setattr(embed_bench, "time", _FakeClock())
    result = run_embed_bench(TEXTS, paths=("fp32", "int8"), model_path="unused", runs=3, warmup_texts=1)
    for path in result["paths"].values():
        assert 0 < path["median_s"] < 1e-3
        assert path["texts_per_second"] == pytest.approx(len(TEXTS) / path["median_s"], rel=0.01)
        assert path["texts_per_cpu_second"] > 0 and path["speedup"] == 1.0


def test_bench_embed_records_the_corpus_files_it_read_with_their_bytes_digest(tmp_path, monkeypatch) -> None:
    # its figures named the corpus by path only: a patent file changed there left no trace in them
    import hashlib

    from meddevkg_core import embed_bench

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "devices.csv").write_text("fda_id,text\nP000001,a coronary stent\n")
    (corpus / "patents.csv").write_text("pat_id,text\n" + "".join(f"{i},{t}\n" for i, t in enumerate(TEXTS)))
    monkeypatch.setattr(embed_bench, "load_sentence_encoder", lambda *args, **kwargs: _InstantEncoder())
    result = embed_bench.main_bench_embed(corpus, n_texts=3, runs=1, paths=("fp32",))
    files = {"devices": corpus / "devices.csv", "patents": corpus / "patents.csv"}
    assert result["inputs"] == {name: {"path": str(path.resolve()), "size": path.stat().st_size,
                                       "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
                                for name, path in files.items()}


def test_a_local_models_cache_id_follows_its_files_not_its_directory_name(tiny_sentence_model, tmp_path):
    import shutil

    from meddevkg_core.embeddings import load_embedding_model

    first = load_embedding_model(str(tiny_sentence_model), tmp_path, device="cpu").model_id
    moved = shutil.copytree(tiny_sentence_model, tmp_path / "elsewhere" / "tiny-st")
    assert first.startswith("tiny-st@") and load_embedding_model(str(moved), tmp_path, device="cpu").model_id == first
    retrained = shutil.copytree(tiny_sentence_model, tmp_path / "retrained" / "tiny-st")
    weights = next(p for p in retrained.rglob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-4] + b"\x00\x00\x00\x00")  # other weights, same directory name
    assert load_embedding_model(str(retrained), tmp_path, device="cpu").model_id != first  # its own cache entries


def test_an_embedding_model_setting_with_two_models_is_their_ensemble(tiny_sentence_model, tmp_path):
    from meddevkg_core.embeddings import ConcatenatedEncoder, load_embedding_model

    one = load_embedding_model(str(tiny_sentence_model), tmp_path, device="cpu")
    two = load_embedding_model(f"{tiny_sentence_model}, {tiny_sentence_model}", tmp_path, device="cpu")
    assert isinstance(two, ConcatenatedEncoder) and not isinstance(one, ConcatenatedEncoder)
    assert two.model_id == f"{one.model_id}+{one.model_id}" and two.dimension == 2 * one.dimension
    single = one.encode(WORDS[:4])
    np.testing.assert_allclose(two.encode(WORDS[:4]), np.hstack([single, single]) / np.sqrt(2), atol=1e-5)
    with pytest.raises(ValueError, match="empty model name"):
        load_embedding_model(f"{tiny_sentence_model},", tmp_path, device="cpu")
