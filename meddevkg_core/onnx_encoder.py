"""ONNX Runtime CPU paths of a local sentence-transformers model: exported once, cached, then encoded.

`onnx-fp32` is the same network as the torch fp32 path, exported with the legacy (TorchScript)
exporter and fused by ONNX Runtime's transformer optimizer (attention, GELU, skip-LayerNorm);
`onnx-int8` is that graph with dynamic int8 quantisation (int8 weights per output channel,
activations quantised per batch at run time). Pooling and normalisation are inside the graph, as
the sentence-transformers model does them: mean of the token vectors under the attention mask,
then L2 normalisation. Tokenisation uses the model's own tokenizer with its `max_seq_length`.

Built models live in a cache directory, one sub-directory per (model content hash, recipe,
library versions); a build writes into a temporary directory and renames it into place, so a
crash leaves a complete model or none, and a second load reuses the first build.
Only models that are Transformer -> mean Pooling (-> Normalize) are supported.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from meddevkg_core.home import home_dir

log = logging.getLogger(__name__)

RECIPE_VERSION = 3
"""Bump when the export or quantisation recipe changes: it is part of the cache key and the model id."""

ONNX_BACKENDS = ("onnx-fp32", "onnx-int8")
ONNX_SUFFIX = {"onnx-fp32": f"+onnx-fp32-r{RECIPE_VERSION}", "onnx-int8": f"+onnx-int8-dynamic-r{RECIPE_VERSION}"}
"""Appended to the model id: vectors of each path are cached apart from those of every other path."""

OPTIMIZER_MODEL_TYPES = {"bert": "bert", "roberta": "bert", "distilbert": "bert", "mpnet": "bert"}
"""HF model types whose graph ONNX Runtime's transformer optimizer fuses (as its `bert` model type)."""

_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
_PROBE_TEXTS = (
    "A drug-eluting coronary stent with a bioresorbable polymer coating.",
    "Catheter",
    "An implantable cardioverter defibrillator lead with a pressure sensor, and a delivery system for it.",
)


@dataclass(frozen=True)
class OnnxRecipe:
    """What a built ONNX model depends on besides the source weights (all part of the cache key)."""

    precision: str = "fp32"  # "fp32" or "int8"
    opset: int = 17
    optimize: bool = True  # ORT transformer optimizer fusions before (optional) quantisation
    per_channel: bool = True  # int8: one weight scale per output channel
    reduce_range: bool = False  # int8: 7-bit weights (for CPUs whose u8s8 kernels saturate)
    op_types_to_quantize: tuple[str, ...] = ()  # int8: empty = ORT's default (every supported op)
    nodes_to_exclude: tuple[str, ...] = ()  # int8: node names left in fp32

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "int8"):
            raise ValueError(f"precision must be 'fp32' or 'int8', got {self.precision!r}")


FP32_NODES = ("/encoder/encoder/layer.0/attention/output/dense/MatMul",
              *(f"/encoder/encoder/layer.{i}/output/dense/MatMul" for i in range(3)))
"""MatMuls that onnx-int8 keeps in fp32 (names of the exported HF BERT graph; names a graph lacks are
ignored). Quantised one at a time on 200 abstracts outside the benchmark sample, the FFN output
projections of layers 0-2 (input: the GELU output, whose outlier channels stretch the per-batch
activation scale) and the layer-0 attention output each lost 2-5x more mean cosine to fp32 than a
typical other MatMul (~0.0002). On this AVX2 CPU (no VNNI) the layer-0 attention output's loss is probably
mostly u8 x s8 saturation in the int8 kernel: with 7-bit weights it was 36x smaller (mean 1-cosine
0.2e-4 vs 8.5e-4, that MatMul alone quantised). SmoothQuant-style smoothing (per-input-channel scales
moved from the activations into the weights, alpha 0.5-0.75) did not pay here: it needs representative
calibration text at build time (scales from a dozen hand-written sentences lost 6x more cosine than
scales from 200 abstracts), and even with 200 abstracts it only matched these exclusions in accuracy
(the layer-0 FFN output pairs its outlier activation channel with an outlier weight row, so no split
of the scale between them helps much)."""

RECIPES = {"onnx-fp32": OnnxRecipe("fp32"),
           "onnx-int8": OnnxRecipe("int8", op_types_to_quantize=("MatMul", "Attention"),
                                   nodes_to_exclude=FP32_NODES)}
"""onnx-int8 quantises the MatMuls except FP32_NODES and the fused attentions' QKV projections (about a
quarter of the linear FLOPs), and keeps the embeddings in fp32. On 300 benchmark abstracts, vs torch
fp32 (r2 kept the attention in fp32): every MatMul quantised, cosine mean 0.9946 / min 0.988; with
FP32_NODES in fp32, 0.9983 / 0.995; and with the attention quantised too (r3), 0.9970 / 0.994, 1.11x as
fast as r2 (median of 9 interleaved pairs on 2 cores, range 1.10-1.14). Quantising FP32_NODES as well
was another ~10% faster but lost accuracy (min 0.984); u8 weights were ~9% slower; reduce_range (7-bit
weights) everywhere and per-tensor weight scales lost accuracy."""


def default_onnx_cache_dir() -> Path:
    """$MEDDEVKG_ONNX_CACHE, else `onnx_models` under $MEDDEVKG_HOME (default ./.meddevkg)."""
    if os.environ.get("MEDDEVKG_ONNX_CACHE"):
        return Path(os.environ["MEDDEVKG_ONNX_CACHE"])
    return home_dir() / "onnx_models"


def model_content_hash(model_dir: str | Path) -> str:
    """sha256 over every file of a model directory (relative path and bytes), in path order."""
    root = Path(model_dir)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(".") or "/." in rel:  # .gitattributes, .cache/: not the model
            continue
        digest.update(rel.encode() + b"\x00")
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\x00")
    return digest.hexdigest()


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import torch

    return {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def cache_key(source_hash: str, recipe: OnnxRecipe) -> str:
    payload = {"source": source_hash, "recipe": asdict(recipe), "recipe_version": RECIPE_VERSION, **_versions()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


# --- export ---------------------------------------------------------------------------------


def _check_architecture(st_model: Any) -> None:
    """Transformer -> mean Pooling (-> Normalize): what the exported graph reproduces."""
    names = [type(m).__name__ for m in st_model]
    if names[:2] != ["Transformer", "Pooling"] or names[2:] not in ([], ["Normalize"]):
        raise ValueError(f"ONNX export supports Transformer -> Pooling(mean) [-> Normalize] models, got {names}")
    pooling = st_model[1]
    mode = getattr(pooling, "pooling_mode", None)
    if mode is None:
        mode = pooling.get_config_dict().get("pooling_mode")
    if mode is None:  # sentence-transformers < 6 keeps one flag per mode
        mode = "mean" if pooling.get_config_dict().get("pooling_mode_mean_tokens") else "other"
    if mode != "mean":
        raise ValueError(f"ONNX export supports mean pooling only, the model uses {mode!r}")


def _export_fp32(model_dir: Path, st_model: Any, out: Path, opset: int) -> list[str]:
    """The HF encoder with mean pooling and L2 normalisation, as an ONNX graph; returns its input names."""
    import warnings

    import torch
    from transformers import AutoModel

    # Eager attention exports as plain MatMul/Softmax, which ORT's optimizer fuses into Attention;
    # SDPA exports a pattern it does not recognise.
    hf = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager", local_files_only=True).eval()

    class Pooled(torch.nn.Module):
        def __init__(self, encoder: torch.nn.Module, names: list[str]) -> None:
            super().__init__()
            self.encoder, self.names = encoder, names

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            features = dict(zip(self.names, inputs, strict=True))
            hidden = self.encoder(**features).last_hidden_state
            mask = features["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    # A padded batch of two, so the traced graph keeps the attention-mask path (an all-ones mask
    # can be dropped by transformers and would then be missing from the graph).
    sample = st_model[0].tokenizer(["a", "a longer second text for padding"], padding=True, truncation="longest_first",
                                   max_length=st_model.max_seq_length, return_tensors="pt")
    names = [n for n in _INPUT_NAMES if n in sample]
    dynamic = {n: {0: "batch", 1: "sequence"} for n in names} | {"sentence_embedding": {0: "batch"}}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer and legacy-exporter deprecation warnings
        torch.onnx.export(Pooled(hf, names), tuple(sample[n] for n in names), str(out), input_names=names,
                          output_names=["sentence_embedding"], dynamic_axes=dynamic, opset_version=opset,
                          do_constant_folding=True, dynamo=False)
    return names


def _optimize(src: Path, out: Path, config: Any) -> dict[str, int]:
    """ORT's transformer fusions (attention, GELU, LayerNorm), saved to `out`; returns fused-op counts."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(str(src), model_type=OPTIMIZER_MODEL_TYPES[config.model_type],
                           num_heads=int(config.num_attention_heads), hidden_size=int(config.hidden_size),
                           opt_level=0)
    model.save_model_to_file(str(out))
    return {k: int(v) for k, v in model.get_fused_operator_statistics().items() if v}


def _quantize(src: Path, out: Path, recipe: OnnxRecipe) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    kwargs: dict[str, Any] = {}
    if recipe.op_types_to_quantize:
        kwargs["op_types_to_quantize"] = list(recipe.op_types_to_quantize)
    # DefaultTensorType: the fused ops (Attention, SkipLayerNorm) come from the com.microsoft
    # domain, where ONNX shape inference cannot type their outputs.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic logs a pre-processing hint on the root logger
    try:
        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, per_channel=recipe.per_channel,
                         reduce_range=recipe.reduce_range, nodes_to_exclude=list(recipe.nodes_to_exclude),
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT}, **kwargs)
    finally:
        root.setLevel(level)


def _build(model_dir: Path, recipe: OnnxRecipe, tmp: Path) -> dict[str, Any]:
    """Write model.onnx, tokenizer/ and meta.json into `tmp`; returns the metadata."""
    from sentence_transformers import SentenceTransformer

    start = time.perf_counter()
    # Any, as in the helpers: torch types a module's sub-modules and attributes as `Tensor | Module`
    st_model: Any = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True).eval()
    _check_architecture(st_model)
    config = st_model[0].model.config
    exported = tmp / "exported.onnx"
    names = _export_fp32(model_dir, st_model, exported, recipe.opset)
    fused: dict[str, int] = {}
    current = exported
    if recipe.optimize and getattr(config, "model_type", None) in OPTIMIZER_MODEL_TYPES:
        fused = _optimize(exported, tmp / "optimized.onnx", config)
        current = tmp / "optimized.onnx"
    if recipe.precision == "int8":
        _quantize(current, tmp / "quantized.onnx", recipe)
        current = tmp / "quantized.onnx"
    current.replace(tmp / "model.onnx")
    for leftover in ("exported.onnx", "optimized.onnx", "quantized.onnx"):
        (tmp / leftover).unlink(missing_ok=True)
    # The tokenizer as sentence-transformers configured it (max length, any lower-casing normaliser).
    st_model[0].tokenizer.save_pretrained(str(tmp / "tokenizer"))

    # Check the graph against the torch model it came from, on a few probe texts.
    reference = st_model.encode(list(_PROBE_TEXTS), normalize_embeddings=True, convert_to_numpy=True)
    meta: dict[str, Any] = {
        "recipe": asdict(recipe), "recipe_version": RECIPE_VERSION, **_versions(),
        "input_names": names, "max_seq_length": int(st_model.max_seq_length),
        "dimension": int(st_model.get_embedding_dimension()), "fused_ops": fused,
        "model_type": getattr(config, "model_type", None), "build_s": None,
    }
    probe = _encode_batches(_session(tmp / "model.onnx", threads=None), _load_tokenizer(tmp / "tokenizer"),
                            list(_PROBE_TEXTS), names, meta["max_seq_length"], batch_size=len(_PROBE_TEXTS))
    cosine = np.sum(probe * reference, axis=1)
    if recipe.precision == "fp32" and not np.allclose(probe, reference, atol=1e-4):
        raise RuntimeError(f"exported ONNX graph disagrees with the torch model (cosine {cosine.tolist()})")
    meta["probe_cosine_min"] = round(float(cosine.min()), 6)
    meta["build_s"] = round(time.perf_counter() - start, 2)
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    return meta


def ensure_onnx_model(model_dir: str | Path, recipe: OnnxRecipe, cache_dir: str | Path | None = None,
                      *, source_hash: str | None = None) -> tuple[Path, bool]:
    """The cached build of `model_dir` under `recipe` (built now if absent); returns (dir, built_now)."""
    model_dir = Path(model_dir)
    root = Path(cache_dir) if cache_dir is not None else default_onnx_cache_dir()
    key = cache_key(source_hash or model_content_hash(model_dir), recipe)
    final = root / f"{model_dir.name}-{recipe.precision}-{key}"
    if (final / "meta.json").is_file():
        return final, False
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
    try:
        log.info("exporting %s to ONNX (%s) in %s", model_dir, recipe.precision, final)
        _build(model_dir, recipe, tmp)
        try:
            tmp.rename(final)  # atomic; fails if another process finished the same build first
        except OSError:
            if not (final / "meta.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return final, False
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, True


# --- encoding -------------------------------------------------------------------------------


def _session(path: Path, threads: int | None) -> Any:
    """A CPU session with `threads` intra-op threads (default: all cores)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads or default_threads()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def default_threads() -> int:
    """The cores this process may run on (what torch uses too)."""
    with contextlib.suppress(AttributeError):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def _encode_batches(session: Any, tokenizer: Any, texts: list[str], names: Sequence[str], max_seq_length: int,
                    batch_size: int, sort_by_length: bool = True, workers: int = 1) -> np.ndarray:
    """Rows of `texts` in input order, from batches of similar length run on `workers` threads.

    With workers > 1 the session should have one intra-op thread: whole batches then run side by
    side (ONNX Runtime releases the GIL in `run`), which beat one batch on all cores by 14-24% on
    2 cores (no per-op thread hand-offs; the serial parts overlap). The tokenizer is
    only called from this thread (a fast tokenizer is not safe to call concurrently), batch after
    batch while the workers run; the longest batches go first so the workers finish together.
    """
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    from meddevkg_core.embeddings import length_batches

    def features(batch: list[str]) -> dict[str, np.ndarray]:
        f = tokenizer(batch, padding=True, truncation="longest_first", max_length=max_seq_length, return_tensors="np")
        return {n: np.asarray(f[n], dtype=np.int64) for n in names}

    out = np.empty((len(texts), session.get_outputs()[0].shape[-1]), dtype=np.float32)
    batches = length_batches(texts, batch_size, sort_by_length, longest_first=True)
    if workers <= 1 or len(batches) == 1:
        for idx in batches:
            out[idx] = session.run(None, features([texts[i] for i in idx]))[0]
        return out
    # At most two batches per worker are tokenised ahead, so one call over a whole corpus does not
    # hold every batch's token ids at once.
    pending: deque[tuple[np.ndarray, Future[list[Any]]]] = deque()
    with ThreadPoolExecutor(workers, thread_name_prefix="onnx-encode") as pool:
        for idx in batches:
            if len(pending) >= 2 * workers:
                done, result = pending.popleft()
                out[done] = result.result()[0]
            pending.append((idx, pool.submit(session.run, None, features([texts[i] for i in idx]))))
        for done, result in pending:
            out[done] = result.result()[0]
    return out


@dataclass(frozen=True)
class OnnxSentenceEncoder:
    """An exported sentence-transformers model run by ONNX Runtime on CPU (see module docstring)."""

    session: Any
    tokenizer: Any
    model_id: str
    dimension: int
    max_seq_length: int
    input_names: tuple[str, ...]
    onnx_dir: Path
    built_now: bool = False
    batch_size: int = 32
    sort_by_length: bool = True
    workers: int = 1  # batches run side by side, each on one intra-op thread of `session`

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from meddevkg_core.embeddings import l2_normalise

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)  # ONNX Runtime refuses an empty batch
        vectors = _encode_batches(self.session, self.tokenizer, texts, self.input_names, self.max_seq_length,
                                  self.batch_size, self.sort_by_length, self.workers)
        return l2_normalise(vectors)  # the graph normalises already; this keeps rows exactly unit after int8

    @property
    def meta(self) -> dict[str, Any]:
        return json.loads((self.onnx_dir / "meta.json").read_text())


def load_onnx_encoder(model_dir: str | Path, backend: str, model_id: str, *, batch_size: int = 32,
                      cache_dir: str | Path | None = None, threads: int | None = None,
                      recipe: OnnxRecipe | None = None) -> OnnxSentenceEncoder:
    """An ONNX Runtime encoder for `backend` ("onnx-fp32" or "onnx-int8"), built into the cache once.

    `model_id` is the source model's id; the backend's suffix is appended unless already there.
    `threads` (default: the cores available) batches run side by side, one intra-op thread each.
    """
    if backend not in ONNX_BACKENDS:
        raise ValueError(f"unknown ONNX backend {backend!r}; known: {ONNX_BACKENDS}")
    recipe = recipe or RECIPES[backend]
    if recipe.precision != backend.removeprefix("onnx-"):
        raise ValueError(f"recipe precision {recipe.precision!r} does not match backend {backend!r}")
    onnx_dir, built = ensure_onnx_model(model_dir, recipe, cache_dir)
    meta = json.loads((onnx_dir / "meta.json").read_text())
    suffix = ONNX_SUFFIX[backend] if recipe == RECIPES[backend] else ONNX_SUFFIX[backend] + "-" + onnx_dir.name[-8:]
    key = model_id if model_id.endswith(suffix) else model_id + suffix
    return OnnxSentenceEncoder(
        session=_session(onnx_dir / "model.onnx", 1), workers=threads or default_threads(),
        tokenizer=_load_tokenizer(onnx_dir / "tokenizer"),
        model_id=key, dimension=int(meta["dimension"]), max_seq_length=int(meta["max_seq_length"]),
        input_names=tuple(meta["input_names"]), onnx_dir=onnx_dir, built_now=built, batch_size=batch_size)
