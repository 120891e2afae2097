"""How fast the CPU embedding paths encode, and how close int8 vectors stay to fp32 ones.

Paths: "fp32" is the packaged all-MiniLM-L6-v2 as the pipeline loads it; "int8" the same weights
with dynamic int8 quantisation of every Linear layer (`load_sentence_encoder(quantize=True)`).
Each path encodes the same texts through `SentenceTransformerEncoder.encode` (length-sorted
batches, as the pipeline does): one untimed warm-up, then `runs` timed passes, median reported.
Agreement is measured text by text (cosine of the int8 vector with the fp32 vector of the same
text) and on the ranking it induces (overlap of each text's 10 nearest neighbours among the texts).
ONNX Runtime is not installed in this environment (reported as `onnxruntime_available`), so no
ONNX path is offered.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meddevkg_core.embeddings import SentenceTransformerEncoder, load_sentence_encoder

PATHS = ("fp32", "int8")


def _neighbour_overlap(a: np.ndarray, b: np.ndarray, k: int = 10) -> float | None:
    """Mean share of each text's k nearest neighbours (among the texts) that both paths agree on."""
    n = len(a)
    if n <= k:
        return None
    sa, sb = a @ a.T, b @ b.T
    np.fill_diagonal(sa, -np.inf)
    np.fill_diagonal(sb, -np.inf)
    ta = np.argpartition(-sa, k, axis=1)[:, :k]
    tb = np.argpartition(-sb, k, axis=1)[:, :k]
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(ta.tolist(), tb.tolist(), strict=True)]))


def run_embed_bench(texts: Sequence[str], paths: Sequence[str] = PATHS, *, model_path: str | None = None,
                    batch_size: int = 32, runs: int = 3, warmup_texts: int = 64,
                    progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Texts per second of each path (median of `runs` timed passes) and int8-vs-fp32 agreement."""
    import torch

    say = progress or (lambda _: None)
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise ValueError(f"unknown embedding path(s) {sorted(unknown)}; known: {PATHS}")
    texts = list(texts)
    if not texts:
        raise ValueError("no texts to encode")
    out: dict[str, Any] = {
        "n_texts": len(texts), "mean_chars": round(float(np.mean([len(t) for t in texts])), 1),
        "batch_size": batch_size, "runs": runs, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "quantized_engine": torch.backends.quantized.engine,
        "onnxruntime_available": importlib.util.find_spec("onnxruntime") is not None,
        "paths": {},
    }
    vectors: dict[str, np.ndarray] = {}
    for path in paths:
        start = time.perf_counter()
        encoder: SentenceTransformerEncoder = load_sentence_encoder(model_path, device="cpu", batch_size=batch_size,
                                                                    quantize=path == "int8")
        load_s = time.perf_counter() - start
        encoder.encode(texts[:warmup_texts])  # untimed: first calls allocate and pick kernels
        seconds = []
        for run in range(runs):
            start = time.perf_counter()
            vectors[path] = encoder.encode(texts)
            seconds.append(time.perf_counter() - start)
            say(f"[{path}] run {run + 1}/{runs}: {len(texts) / seconds[-1]:.1f} texts/s")
        median = statistics.median(seconds)
        out["paths"][path] = {
            "model_id": encoder.model_id, "load_s": round(load_s, 2),
            "seconds": [round(x, 3) for x in seconds], "median_s": round(median, 3),
            "texts_per_s": round(len(texts) / median, 1),
        }
    if "fp32" in vectors and "int8" in vectors:
        a, b = vectors["fp32"], vectors["int8"]
        cos = np.sum(a * b, axis=1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
        out["int8_vs_fp32"] = {
            "cosine_mean": round(float(cos.mean()), 5), "cosine_min": round(float(cos.min()), 5),
            "cosine_p01": round(float(np.quantile(cos, 0.01)), 5),
            "neighbour_overlap_at_10": None if (o := _neighbour_overlap(a, b)) is None else round(o, 4),
            "speedup": round(out["paths"]["int8"]["texts_per_s"] / out["paths"]["fp32"]["texts_per_s"], 2),
        }
    return out


def main_bench_embed(corpus_dir: str | Path, n_texts: int = 500, runs: int = 3, seed: int = 0,
                     progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`meddevkg bench-embed --corpus DIR`: patent texts of a corpus, both paths, as a dict."""
    from meddevkg_core.corpus import read_corpus

    patents = read_corpus(Path(corpus_dir)).patents
    if patents.height > n_texts:
        patents = patents.sample(n_texts, seed=seed)
    result = run_embed_bench(patents["text"].to_list(), runs=runs, progress=progress)
    result["corpus"] = str(corpus_dir)
    return result


def format_embed_report(d: dict[str, Any]) -> str:
    lines = [f"Embedding benchmark: {d['n_texts']} texts (mean {d['mean_chars']:.0f} chars), batch {d['batch_size']}, "
             f"median of {d['runs']} runs, torch {d['torch']} on {d['torch_threads']} threads"]
    for path, p in d["paths"].items():
        lines.append(f"  {path:5s}: {p['texts_per_s']:8.1f} texts/s   ({p['model_id']})")
    if "int8_vs_fp32" in d:
        a = d["int8_vs_fp32"]
        lines.append(f"  int8 vs fp32: x{a['speedup']:.2f}; cosine mean {a['cosine_mean']:.4f}, "
                     f"min {a['cosine_min']:.4f}; 10-NN overlap {a['neighbour_overlap_at_10']}")
    lines.append(f"  onnxruntime installed: {d['onnxruntime_available']}")
    return "\n".join(lines)
