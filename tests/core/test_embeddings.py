from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.embeddings import (
    EmbeddingCache,
    Encoder,
    HashingEncoder,
    content_hash,
    embed_documents,
    embedding_matrix,
    load_sentence_encoder,
    resolve_device,
)


@dataclass
class CountingEncoder:
    """Wraps an encoder and records every text it is asked to encode."""

    inner: HashingEncoder = field(default_factory=HashingEncoder)
    calls: list[list[str]] = field(default_factory=list)

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.inner.encode(texts)

    @property
    def encoded(self) -> list[str]:
        return [t for call in self.calls for t in call]


def docs(*rows: tuple[str, str | None]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"doc_id": pl.String, "text": pl.String}, orient="row")


def test_hashing_encoder_is_deterministic_unit_and_lexical() -> None:
    enc = HashingEncoder(dimension=128)
    texts = ["drug-eluting coronary stent", "coronary stent with drug coating", "dental implant abutment", "!!!"]
    a, b = enc.encode(texts), HashingEncoder(dimension=128).encode(texts)
    assert a.dtype == np.float32 and a.shape == (4, 128)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    assert a[0] @ a[1] > a[0] @ a[2]
    assert enc.encode([]).shape == (0, 128)
    assert isinstance(enc, Encoder)
    assert enc.model_id != HashingEncoder(dimension=64).model_id


def test_resolve_device(monkeypatch) -> None:
    import torch

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in {"cpu", "cuda"}
    with pytest.raises(ValueError, match="device"):
        resolve_device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("cuda") == "cuda" and resolve_device("auto") == "cuda"


def test_cuda_where_torch_finds_no_gpu_is_an_input_error_naming_the_setting(monkeypatch) -> None:
    # it was torch's AssertionError ("Torch not compiled with CUDA enabled") once a model was moved there
    import torch

    from meddevkg_core.errors import InputError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match=r"^device 'cuda' \(MEDDEVKG_DEVICE, --device\): torch .* finds no CUDA GPU"):
        resolve_device("cuda")
    assert resolve_device("auto") == "cpu"


def test_content_hash_depends_on_model_and_text() -> None:
    h = content_hash("stent", "m1")
    assert len(h) == 64 and h == content_hash("stent", "m1")
    assert h != content_hash("stent", "m2") and h != content_hash("stent ", "m1")


def test_embed_documents_schema_order_and_values() -> None:
    enc = HashingEncoder(dimension=32)
    frame = docs(("P1", "balloon catheter"), ("p2", "heart valve"), ("3", "balloon catheter"))
    out = embed_documents(frame, enc)
    assert out.schema == schemas.EMBEDDINGS
    assert out["doc_id"].to_list() == ["P1", "p2", "3"]
    assert out["content_hash"][0] == out["content_hash"][2] == content_hash("balloon catheter", enc.model_id)
    ids, matrix = embedding_matrix(out)
    assert ids == ["P1", "p2", "3"] and matrix.dtype == np.float32 and matrix.shape == (3, 32)
    np.testing.assert_allclose(matrix, enc.encode(frame["text"].to_list()), rtol=1e-6)


def test_embed_documents_custom_columns_and_empty() -> None:
    frame = pl.DataFrame({"fda_id": ["P1"], "body": ["stent"]})
    out = embed_documents(frame, HashingEncoder(), text_col="body", id_col="fda_id")
    assert out["doc_id"].to_list() == ["P1"]
    empty = embed_documents(docs(), HashingEncoder())
    assert empty.schema == schemas.EMBEDDINGS and empty.height == 0
    assert embedding_matrix(empty)[1].shape == (0, 0)


@pytest.mark.parametrize("bad", [None, "", "   "])
def test_embed_documents_rejects_missing_text_naming_doc(bad: str | None) -> None:
    with pytest.raises(ValueError, match="P_BAD"):
        embed_documents(docs(("P1", "stent"), ("P_BAD", bad)), HashingEncoder())


def test_identical_texts_are_encoded_once() -> None:
    enc = CountingEncoder()
    embed_documents(docs(("a", "stent"), ("b", "valve"), ("c", "stent"), ("d", "stent")), enc)
    assert sorted(enc.encoded) == ["stent", "valve"]


def test_cache_hit_means_no_second_encode(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "cache")
    enc = CountingEncoder()
    first = embed_documents(docs(("a", "stent"), ("b", "valve")), enc, cache)
    second = embed_documents(docs(("b", "valve"), ("a", "stent")), enc, cache)
    assert len(enc.calls) == 1
    assert second["doc_id"].to_list() == ["b", "a"]
    assert first.sort("doc_id").equals(second.sort("doc_id"))

    third = embed_documents(docs(("a", "stent"), ("z", "pacemaker lead")), enc, cache)
    assert enc.calls[-1] == ["pacemaker lead"] and len(enc.calls) == 2
    assert third.height == 2 and len(cache) == 3


def test_cache_is_keyed_by_model(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    embed_documents(docs(("a", "stent")), CountingEncoder(HashingEncoder(16)), cache)
    other = CountingEncoder(HashingEncoder(24))
    out = embed_documents(docs(("a", "stent")), other, cache)
    assert other.encoded == ["stent"] and len(out["embedding"][0]) == 24


def test_failed_write_leaves_no_partial_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = EmbeddingCache(tmp_path)
    cache.put_many(["h1"], np.ones((1, 4), dtype=np.float32))

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        embed_documents(docs(("a", "stent")), HashingEncoder(4), cache)
    assert [p.name for p in tmp_path.iterdir()] == [cache.shards()[0].name]
    monkeypatch.undo()

    # A temporary left behind by a killed process is ignored by readers.
    (tmp_path / ".tmp-dead.partial").write_bytes(b"half a shard")
    assert len(cache) == 1 and set(cache.get_many(["h1", "h2"])) == {"h1"}


def test_unreadable_shard_is_recomputed_not_fatal(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    (tmp_path / "shard-corrupt.npz").write_bytes(b"not a zip")
    enc = CountingEncoder()
    embed_documents(docs(("a", "stent")), enc, cache)
    assert enc.encoded == ["stent"]


def test_compact_merges_shards(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    enc = CountingEncoder()
    for i in range(3):
        embed_documents(docs((f"d{i}", f"text {i}")), enc, cache)
    assert len(cache.shards()) == 3
    cache.compact()
    assert len(cache.shards()) == 1 and len(cache) == 3
    embed_documents(docs(("x", "text 1")), enc, cache)
    assert len(enc.calls) == 3


def test_encoder_shape_mismatch_is_caught() -> None:
    class Broken:
        model_id, dimension = "broken", 8

        def encode(self, texts: Sequence[str]) -> np.ndarray:
            return np.zeros((len(texts), 4), dtype=np.float32)

    with pytest.raises(ValueError, match="shape"):
        embed_documents(docs(("a", "stent")), Broken())


@pytest.mark.real_model  # loads the packaged all-MiniLM-L6-v2 from disk (~2-5 s on CPU)
def test_packaged_minilm_encoder() -> None:
    enc = load_sentence_encoder(device="cpu")
    assert enc.model_id == "all-MiniLM-L6-v2" and enc.dimension == 384
    texts = [
        "A balloon-expandable drug-eluting coronary stent for treating artery stenosis.",
        "An implantable metallic stent that keeps a narrowed coronary artery open after angioplasty.",
        "A dental implant screwed into the jawbone to support a crown replacing a missing tooth.",
    ]
    vecs = enc.encode(texts)
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]
    # Our length-sorted batching must not change any vector or its order.
    unsorted = type(enc)(enc.model, enc.model_id, enc.dimension, batch_size=1, sort_by_length=False)
    np.testing.assert_allclose(unsorted.encode(texts), vecs, atol=1e-5)


def test_backend_is_validated_before_any_model_is_loaded(tmp_path: Path) -> None:
    from meddevkg_core.embeddings import BACKENDS, DEFAULT_BACKEND

    assert DEFAULT_BACKEND == "torch-fp32" and set(BACKENDS) >= {"torch-fp32", "torch-int8", "onnx-fp32", "onnx-int8"}
    with pytest.raises(ValueError, match="unknown embedding backend"):
        load_sentence_encoder(str(tmp_path / "absent"), backend="tensorrt")
    with pytest.raises(ValueError, match="CPU only"):
        load_sentence_encoder(str(tmp_path / "absent"), device="cuda", backend="onnx-fp32")
    with pytest.raises(FileNotFoundError):  # a valid backend gets as far as looking for the model
        load_sentence_encoder(str(tmp_path / "absent"), backend="onnx-int8", onnx_cache_dir=tmp_path / "onnx")
    assert not (tmp_path / "onnx").exists()
