"""How fast the CPU embedding paths encode, and how close each fast path's vectors stay to fp32 ones.

Paths (each a `load_sentence_encoder` backend of the same model, default the packaged
all-MiniLM-L6-v2): "fp32" is torch fp32 as the pipeline loads it (backend "torch-fp32"); "int8"
the same weights with torch dynamic int8 quantisation of every Linear layer ("torch-int8");
"onnx-fp32" and "onnx-int8" the model exported to ONNX and run by ONNX Runtime (see
meddevkg_core.onnx_encoder; the export is built once into a cache directory, `load_s` includes it
the first time). Every path encodes the same texts in length-sorted batches on the same number of
threads. After one untimed warm-up per path, the `runs` timed passes are interleaved (path A, B,
C, D, then A, B, ...) so that a burst of load from other processes hits all paths alike; the median
is reported. Agreement is measured text by text (cosine of a path's vector with the fp32 vector of
the same text: mean, min, 1st percentile) and on the ranking it induces (overlap of each text's
10 nearest neighbours among the texts).
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meddevkg_core.embeddings import load_sentence_encoder

BACKEND_OF = {"fp32": "torch-fp32", "int8": "torch-int8", "onnx-fp32": "onnx-fp32", "onnx-int8": "onnx-int8"}
PATHS = tuple(BACKEND_OF)
ONNX_PATHS = ("onnx-fp32", "onnx-int8")
GOAL = {"texts_per_second": 40.0, "cosine_min": 0.99}
"""Issue 7: a CPU path of the same model at >= 40 texts/s whose vectors keep cosine >= 0.99 to fp32."""


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


def agreement(reference: np.ndarray, other: np.ndarray) -> dict[str, Any]:
    """Row-wise cosine of `other` with `reference` (mean, min, 1st percentile) and 10-NN overlap."""
    cos = np.sum(reference * other, axis=1) / np.maximum(
        np.linalg.norm(reference, axis=1) * np.linalg.norm(other, axis=1), 1e-12)
    overlap = _neighbour_overlap(reference, other)
    return {"cosine_mean": round(float(cos.mean()), 5), "cosine_min": round(float(cos.min()), 5),
            "cosine_p01": round(float(np.quantile(cos, 0.01)), 5),
            "neighbour_overlap_at_10": None if overlap is None else round(overlap, 4)}


def run_embed_bench(texts: Sequence[str], paths: Sequence[str] = PATHS, *, model_path: str | None = None,
                    batch_size: int = 32, runs: int = 3, warmup_texts: int = 64, threads: int | None = None,
                    onnx_cache_dir: str | Path | None = None,
                    progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Texts per second of each path (median of `runs` interleaved timed passes) and agreement with fp32."""
    import torch

    say = progress or (lambda _: None)
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise ValueError(f"unknown embedding path(s) {sorted(unknown)}; known: {PATHS}")
    texts = list(texts)
    if not texts:
        raise ValueError("no texts to encode")
    if threads is not None:
        torch.set_num_threads(threads)
    threads = torch.get_num_threads()  # ONNX Runtime runs as many batches side by side
    ort_available = importlib.util.find_spec("onnxruntime") is not None
    out: dict[str, Any] = {
        "n_texts": len(texts), "mean_chars": round(float(np.mean([len(t) for t in texts])), 1),
        "batch_size": batch_size, "runs": runs, "torch": torch.__version__, "torch_threads": threads,
        "threads": threads, "quantized_engine": torch.backends.quantized.engine,
        "onnxruntime_available": ort_available, "goal": GOAL, "paths": {},
    }
    if ort_available:
        import onnxruntime

        out["onnxruntime"] = onnxruntime.__version__
    encoders: dict[str, Any] = {}
    for path in paths:
        start = time.perf_counter()
        encoders[path] = load_sentence_encoder(model_path, device="cpu", batch_size=batch_size,
                                               backend=BACKEND_OF[path], onnx_cache_dir=onnx_cache_dir,
                                               threads=threads)
        load_s = time.perf_counter() - start
        encoders[path].encode(texts[:warmup_texts])  # untimed: first calls allocate and pick kernels
        out["paths"][path] = {"backend": BACKEND_OF[path], "model_id": encoders[path].model_id,
                              "load_s": round(load_s, 2), "seconds": [], "cpu_seconds": []}
        if path in ONNX_PATHS:
            out["paths"][path]["onnx_built_now"] = encoders[path].built_now
            out["paths"][path]["onnx_dir"] = str(encoders[path].onnx_dir)
        say(f"[{path}] loaded in {load_s:.1f} s ({encoders[path].model_id})")

    vectors: dict[str, np.ndarray] = {}
    timings: dict[str, tuple[list[float], list[float]]] = {path: ([], []) for path in encoders}
    for run in range(runs):
        for path, encoder in encoders.items():
            cpu, start = time.process_time(), time.perf_counter()
            vectors[path] = encoder.encode(texts)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            timings[path][0].append(seconds)
            timings[path][1].append(cpu)
            say(f"[{path}] run {run + 1}/{runs}: {len(texts) / seconds:.1f} texts/s")

    for path, (walls, cpus) in timings.items():
        # Rates come from the unrounded times: a tiny model on a few texts can finish in under a millisecond.
        p = out["paths"][path]
        p["seconds"], p["cpu_seconds"] = [round(s, 6) for s in walls], [round(s, 6) for s in cpus]
        median_s = statistics.median(walls)
        p["median_s"] = round(median_s, 6)
        p["texts_per_second"] = round(len(texts) / median_s, 1)
        # CPU time (all threads) is less disturbed by other processes than wall time on a shared machine.
        p["texts_per_cpu_second"] = round(len(texts) / max(statistics.median(cpus), 1e-9), 1)
    if "fp32" in vectors:
        base = out["paths"]["fp32"]
        for path in vectors:
            p = out["paths"][path]
            p["speedup"] = round(p["texts_per_second"] / base["texts_per_second"], 2)
            p["cpu_speedup"] = round(p["texts_per_cpu_second"] / base["texts_per_cpu_second"], 2)
            if path == "fp32":
                continue
            p["vs_fp32"] = {**agreement(vectors["fp32"], vectors[path]), "speedup": p["speedup"]}
            p["meets_goal"] = (p["texts_per_second"] >= GOAL["texts_per_second"]
                               and p["vs_fp32"]["cosine_min"] >= GOAL["cosine_min"])
        if "int8" in vectors:  # the key earlier reports had
            out["int8_vs_fp32"] = out["paths"]["int8"]["vs_fp32"]
    return out


def main_bench_embed(corpus_dir: str | Path, n_texts: int = 500, runs: int = 3, seed: int = 0,
                     progress: Callable[[str], None] | None = None, paths: Sequence[str] | None = None,
                     onnx_cache_dir: str | Path | None = None, batch_size: int = 32) -> dict[str, Any]:
    """`meddevkg bench-embed --corpus DIR`: patent texts of a corpus, every path, as a dict, with the
    corpus files read (`inputs`: path, size, SHA-256, as a benchmark's report.json records them)."""
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.lineage import inputs_json

    corpus = read_corpus(Path(corpus_dir))
    patents = corpus.patents
    if patents.height > n_texts:
        patents = patents.sample(n_texts, seed=seed)
    if paths is None:
        onnx = importlib.util.find_spec("onnxruntime") is not None
        paths = [p for p in PATHS if onnx or p not in ONNX_PATHS]
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    result = run_embed_bench(patents["text"].to_list(), paths, batch_size=batch_size, runs=max(runs, 1),
                             progress=progress, onnx_cache_dir=onnx_cache_dir)
    result["corpus"] = str(corpus_dir)
    result["inputs"] = inputs_json(corpus.inputs)
    return result


def format_embed_report(d: dict[str, Any]) -> str:
    lines = [f"Embedding benchmark: {d['n_texts']} texts (mean {d['mean_chars']:.0f} chars), batch {d['batch_size']}, "
             f"median of {d['runs']} interleaved runs, {d['threads']} threads, torch {d['torch']}, "
             f"onnxruntime {d.get('onnxruntime', 'not installed')}",
             f"  {'path':10s} {'texts/s':>8s} {'speedup':>8s} {'cpu-x':>6s}  {'cos mean':>8s} {'cos min':>8s} "
             f"{'cos p1':>8s} {'10-NN':>6s}  model id"]
    for path, p in d["paths"].items():
        a = p.get("vs_fp32")
        cos = (f"{a['cosine_mean']:8.4f} {a['cosine_min']:8.4f} {a['cosine_p01']:8.4f} "
               f"{a['neighbour_overlap_at_10'] if a['neighbour_overlap_at_10'] is not None else '-':>6}"
               if a else f"{'(reference)':>33s}")
        speed = f"x{p['speedup']:.2f}" if "speedup" in p else "-"
        cpu = f"x{p['cpu_speedup']:.2f}" if "cpu_speedup" in p else "-"
        goal = "  <- meets goal" if p.get("meets_goal") else ""
        lines.append(f"  {path:10s} {p['texts_per_second']:8.1f} {speed:>8s} {cpu:>6s}  {cos}  {p['model_id']}{goal}")
    lines.append(f"  goal: >= {d['goal']['texts_per_second']:.0f} texts/s with cosine min >= "
                 f"{d['goal']['cosine_min']} vs fp32; cpu-x = speedup in texts per CPU-second")
    return "\n".join(lines)
