"""Full-corpus scale benchmark: Stage 2 and Stage 3 on a synthetic corpus of the paper's size.

The paper's search space is 434 devices x 698,191 patents (about 3.03e8 pairs); the corpus is the
synthetic one of synthetic_corpus.py, with the real benchmark's statistics, since the question here
is whether the *linking* scales, not the encoding.

Stage 2 is the pipeline's own `generate_candidates` (block-wise over devices; the pair table is
never built), Stage 3 the pipeline's `feature_frame` + `apply_fold_models` + `decide` + `with_ranks`
with a reranker trained first on synthetic gold links (timed separately). Every stage reports wall
seconds and its own peak RSS (stage_meter.StageMeter: VmHWM, reset before each stage through
/proc/self/clear_refs).
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from meddevkg_core.block_scores import max_devices_per_block
from meddevkg_core.candidates import collect_candidates
from meddevkg_core.config import CandidateConfig, PipelineConfig
from meddevkg_core.errors import prefixed
from meddevkg_core.fold_models import RerankerTrainingError, apply_fold_models, fit_fold_models
from meddevkg_core.links_table import links_frame
from meddevkg_core.ontology import load_meddevonto
from meddevkg_core.rerank import feature_frame
from meddevkg_core.reranked_links import decide, with_ranks
from meddevkg_core.stage_meter import StageMeter
from meddevkg_core.synthetic_corpus import (
    DIMENSION,
    PAPER_DEVICES,
    PAPER_PATENTS,
    stage2_inputs,
    synthetic_corpus,
    synthetic_gold,
)

LINKS_SLICE_ROWS = 1 << 20
"""Rows of LINKS made at a time by the benchmark (see links_digest)."""


def links_digest(decided: pl.DataFrame, slice_rows: int = LINKS_SLICE_ROWS) -> str:
    """`links_frame` over every row of `decided`, slice by slice: each slice's LINKS rows (with the
    evidence string of every link) are made, hashed and dropped, as a pipeline writing LINKS out in
    parts would do, so the whole table is never held at once. The digest covers every row and
    column in order, whatever `slice_rows` is."""
    h = hashlib.sha256()
    for start in range(0, decided.height, slice_rows):
        part = links_frame(decided.slice(start, slice_rows))
        h.update(part.hash_rows(seed=0).to_numpy().tobytes())
        del part
    return h.hexdigest()[:16]


def pool_digest(pool: pl.DataFrame) -> str:
    """A content hash of a pool (sorted by pair), so two runs can be compared by one string.

    Column by column through the sort permutation, so the sorted pool is never held whole.
    """
    order = pool.select(pl.arg_sort_by("fda_id", "pat_id")).to_series()
    h = hashlib.sha256()
    for col in pool.columns:
        h.update(col.encode())
        h.update(pool[col].gather(order).hash(seed=0).to_numpy().tobytes())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- the benchmark


def run_scale_bench(n_patents: int = PAPER_PATENTS, n_devices: int = PAPER_DEVICES, seed: int = 0, *,
                    runs: int = 1, block_size: int | None = None, lexical: bool = True,
                    config: PipelineConfig | None = None, links_rows: int | None = None,
                    progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Generate the synthetic corpus once, then time Stage 2 `runs` times, then Stage 3 `runs` times
    on the pool (medians; the corpus is released between the two, Stage 3 does not read it).

    Stage 2 = building the entity index (`stage2_index`) and `generate_candidates` over every
    device (`stage2`; as `collect_candidates` + `to_frame`, with the inputs, and on the last run the
    corpus, released in between: no later step reads them); Stage 3 = `feature_frame` +
    `apply_fold_models` + `decide` on the whole pool (`stage3`). The reranker is trained once on
    synthetic gold (`stage3_train`, not in stage 3). `links_frame` (the LINKS table: every pool row, an evidence
    string per link) is timed on the whole pool (`stage3_links_frame`), made in slices of
    LINKS_SLICE_ROWS rows that are hashed and dropped (`links_digest`), or on `links_rows` sampled
    rows scaled linearly to the pool (labelled as such) when `links_rows` is given and smaller.

    A corpus too small for its synthetic gold to train Stage 3 (which sizes are, the pool decides: not
    known before Stage 2) is a RerankerTrainingError naming the sizes, the seed and the pool.
    """
    say = progress or (lambda _: None)
    config = config or PipelineConfig()
    if block_size is not None:
        config = config.model_copy(update={"candidates": config.candidates.model_copy(
            update={"device_block_size": block_size})})
    cfg = config.candidates
    onto = load_meddevonto()
    meter = StageMeter(say)
    corpus = meter("generate", synthetic_corpus, n_patents, n_devices, seed, lexical=lexical, ontology=onto,
                   progress=say)
    per_run: list[dict[str, float]] = [{} for _ in range(runs)]
    pool = None
    result: dict[str, Any] = {}
    corpus_stats = corpus.stats()
    for run in range(runs):
        pool = None  # release the previous run's pool before measuring this one
        m = StageMeter(say)
        inputs = m("stage2_index", stage2_inputs, corpus, config, onto)
        # What Stage 2 may release once every block is scored, before the pool is assembled: the
        # inputs (entity index), and on the last run the synthetic corpus too (vectors, mentions,
        # company table, TF-IDF; about 2 GB at 698K patents). Stage 3 reads the pool and the trained
        # models only, so every Stage 2 run comes first, then every Stage 3 run on the pool.
        held: list[Any] = [inputs]
        del inputs
        if run == runs - 1:
            held.append(corpus)
            del corpus
        pool = m("stage2", _stage2, held, cfg)
        per_run[run] |= _stage_row(m)
        say(f"run {run + 1}/{runs}: stage2 {m.seconds['stage2']:.1f}s")
    assert pool is not None
    gold = synthetic_gold(pool, seed=seed)
    m = StageMeter(say)
    # a small corpus's pool may hold its gold and too little else
    with prefixed(f"synthetic corpus of {n_patents:,} patents x {n_devices:,} devices (seed {seed}; a Stage-2 "
                  f"pool of {pool.height:,} pairs, {gold.height:,} synthetic gold links)", RerankerTrainingError):
        models = m("stage3_train", fit_fold_models, feature_frame(pool.filter(
            pl.col("fda_id").is_in(gold["fda_id"].unique().implode())), None), gold, config.rerank)
    result["stage3_train_s"] = m.seconds["stage3_train"]
    result["stage3_train_peak_rss_mb"] = m.peak_mb["stage3_train"]
    result["stage3_train_start_rss_mb"] = m.start_mb["stage3_train"]
    result["gold_links"] = gold.height
    for run in range(runs):
        m = StageMeter(say)
        decided = m("stage3", _stage3, pool, models, config)
        sample = decided if links_rows is None or decided.height <= links_rows else decided.sample(links_rows,
                                                                                                   seed=seed)
        result["links_digest"] = m("stage3_links_frame", links_digest, sample)
        row = per_run[run] | _stage_row(m)
        row["stage3_links_frame_rows"] = sample.height
        row["links_decided"] = int(decided["decision"].sum())
        per_run[run] = row
        say(f"run {run + 1}/{runs}: stage2 {row['stage2_s']:.1f}s, stage3 {row['stage3_s']:.1f}s")
        del decided, sample
    med = {k: _median([r[k] for r in per_run]) for k in per_run[0]}
    pairs = n_patents * n_devices
    links_scale = pool.height / max(med["stage3_links_frame_rows"], 1)
    result = {
        "n_patents": n_patents, "n_devices": n_devices, "pairs": pairs, "seed": seed, "runs": runs,
        "dimension": DIMENSION, "lexical": lexical,
        "block_size": cfg.device_block_size,
        "effective_block_size": max_devices_per_block(cfg, n_patents),
        "generate_s": meter.seconds["generate"],
        "stage2_index_s": med["stage2_index_s"],
        "stage2_s": med["stage2_s"],
        "stage2_pairs_per_s": round(pairs / med["stage2_s"]) if med["stage2_s"] else None,
        "stage3_s": med["stage3_s"],
        "stage3_pool_rows_per_s": round(pool.height / med["stage3_s"]) if med["stage3_s"] else None,
        "stage3_links_frame_s_measured": med["stage3_links_frame_s"],
        "stage3_links_frame_rows_measured": int(med["stage3_links_frame_rows"]),
        "stage3_links_frame_slice_rows": LINKS_SLICE_ROWS,
        "stage3_links_frame_s_extrapolated": round(med["stage3_links_frame_s"] * links_scale, 1)
        if links_scale > 1 else None,
        **result,
        "candidates_kept": pool.height,
        "candidates_share_of_pairs": round(pool.height / pairs, 5),
        "admitted_by": dict(pool["admitted_by"].value_counts().sort("admitted_by").iter_rows()),
        "links_decided": int(med["links_decided"]),
        "peak_rss_mb": {k.removesuffix("_peak_rss_mb"): v for k, v in med.items() if k.endswith("_peak_rss_mb")}
        | {"generate": meter.peak_mb["generate"]},
        "rss_at_stage_start_mb": {k.removesuffix("_start_rss_mb"): v for k, v in med.items()
                                  if k.endswith("_start_rss_mb")},
        # the per-stage VmHWM resets also reset ru_maxrss, so the process peak is the largest stage peak
        "max_rss_mb": max([*_med_peaks(med), meter.peak_mb["generate"], result.get("stage3_train_peak_rss_mb", 0.0)]),
        "per_run_s": {k: [r[k] for r in per_run] for k in ("stage2_index_s", "stage2_s", "stage3_s")},
        "pool_digest": pool_digest(pool),
        "corpus": corpus_stats,
    }
    return result


def _stage2(held: list[Any], cfg: CandidateConfig) -> pl.DataFrame:
    """`generate_candidates(held[0], cfg)`, with `held` (the inputs and what else the caller no longer
    needs) emptied once every block is scored, so the pool is assembled without them in memory."""
    parts = collect_candidates(held[0], cfg)
    held.clear()
    return parts.to_frame()


def _stage_row(m: StageMeter) -> dict[str, float]:
    row = {f"{k}_s": v for k, v in m.seconds.items()}
    row |= {f"{k}_peak_rss_mb": v for k, v in m.peak_mb.items()}
    return row | {f"{k}_start_rss_mb": v for k, v in m.start_mb.items()}


def _med_peaks(med: dict[str, float]) -> list[float]:
    return [v for k, v in med.items() if k.endswith("_peak_rss_mb")]


def _stage3(pool: pl.DataFrame, models, config: PipelineConfig) -> pl.DataFrame:
    """Scores, decisions and each pair's rank in its device (by probability: the synthetic corpus
    is released before Stage 3, so no text adapter is trained or applied here)."""
    return with_ranks(decide(apply_fold_models(feature_frame(pool, None), models), config.rerank), models, None,
                      config.rerank)


def _median(values: Sequence[float]) -> float:
    return round(float(statistics.median(values)), 3)


def main_bench_scale(patents: int = PAPER_PATENTS, devices: int = PAPER_DEVICES, seed: int = 0, runs: int = 1,
                     progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`meddevkg bench-scale --patents N --devices M`: the measurements as a dict (the CLI prints them)."""
    result = run_scale_bench(patents, devices, seed, runs=runs, progress=progress)
    return result


def _rate(per_s: int | None, unit: str) -> str:
    """A stage timed at 0.000 s (times are rounded to the millisecond) has no rate to print."""
    return f"{per_s:,} {unit}" if per_s is not None else "too fast to time (under 1 ms)"


def format_scale_report(d: dict[str, Any]) -> str:
    """A few human-readable lines from run_scale_bench's dict."""
    mb = d["peak_rss_mb"]
    lines = [
        f"Scale benchmark: {d['n_devices']:,} devices x {d['n_patents']:,} patents = {d['pairs']:,} pairs "
        f"(synthetic, seed {d['seed']}, median of {d['runs']} run(s); blocks of {d['effective_block_size']} devices)",
        f"  Stage 2 index : {d['stage2_index_s']:8.1f} s   peak RSS {mb['stage2_index']:8.0f} MB",
        f"  Stage 2       : {d['stage2_s']:8.1f} s   peak RSS {mb['stage2']:8.0f} MB   "
        + _rate(d['stage2_pairs_per_s'], "pairs/s"),
        f"  Stage 3       : {d['stage3_s']:8.1f} s   peak RSS {mb['stage3']:8.0f} MB   "
        + _rate(d['stage3_pool_rows_per_s'], "pool rows/s"),
        f"  Stage 3 train : {d['stage3_train_s']:8.1f} s   "
        f"(once, {d['gold_links']} synthetic gold links; not in Stage 3)",
    ]
    lf = (f"  links_frame   : {d['stage3_links_frame_s_measured']:8.1f} s "
          f"on {d['stage3_links_frame_rows_measured']:,} rows")
    if d.get("stage3_links_frame_s_extrapolated"):
        lf += f" (extrapolated to the whole pool: {d['stage3_links_frame_s_extrapolated']:.0f} s)"
    lines += [lf,
              f"  Candidates    : {d['candidates_kept']:,} ({100 * d['candidates_share_of_pairs']:.2f}% of pairs), "
              f"links decided {d['links_decided']:,}",
              f"  Peak RSS      : {d['max_rss_mb']:.0f} MB (whole process, incl. the synthetic corpus)"]
    return "\n".join(lines)
