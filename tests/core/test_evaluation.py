import polars as pl
import pytest

from meddevkg_core.evaluation import evaluate_links, evaluation_frame, gold_ranks, rank_metrics, ranking_metrics


def test_ranks_break_ties_by_patent_id_and_never_flatter():
    scores = pl.DataFrame({"fda_id": ["D"] * 4, "pat_id": ["a", "b", "c", "d"], "score": [1.0, 1.0, 0.5, 0.2]})
    gold = pl.DataFrame({"fda_id": ["D", "D"], "pat_id": ["b", "z"]})
    ranks = gold_ranks(scores, gold)
    assert ranks.sort("pat_id")["rank"].to_list() == [2, None]


def test_ranking_metrics_micro_recall_and_mrr():
    scores = pl.DataFrame({"fda_id": ["A"] * 3 + ["B"] * 3, "pat_id": ["1", "2", "3", "4", "5", "6"],
                           "score": [3.0, 2.0, 1.0, 3.0, 2.0, 1.0]})
    gold = pl.DataFrame({"fda_id": ["A", "B", "B"], "pat_id": ["1", "5", "6"]})
    m = ranking_metrics(scores, gold, ks=(1, 2))
    assert m["R@1"] == pytest.approx(1 / 3) and m["R@2"] == pytest.approx(2 / 3)
    assert m["MRR"] == pytest.approx((1 + 1 / 2) / 2)
    assert m["median_rank"] == 2


def test_macro_recall_weighs_every_gold_device_the_same():
    scores = pl.DataFrame({"fda_id": ["A"] * 3 + ["B"] * 3, "pat_id": ["1", "2", "3", "4", "5", "6"],
                           "score": [3.0, 2.0, 1.0, 3.0, 2.0, 1.0]})
    gold = pl.DataFrame({"fda_id": ["A", "B", "B", "B"], "pat_id": ["1", "5", "6", "9"]})
    m = ranking_metrics(scores, gold, ks=(1, 2))
    # A: 1 of 1 at rank 1; B: none at rank 1, one of 3 by rank 2 (pat 9 is not ranked: a miss)
    assert m["R@1"] == pytest.approx(1 / 4) and m["macro_R@1"] == pytest.approx((1 + 0) / 2)
    assert m["R@2"] == pytest.approx(2 / 4) and m["macro_R@2"] == pytest.approx((1 + 1 / 3) / 2)
    assert m["median_rank"] == 2.5


def test_macro_figures_are_the_same_float_on_every_call():
    """A float mean depends on the order of its terms: the per-device figures are averaged in one order."""
    rows = [(f"P{d:06d}", str(j), 1 + d % 13 + j * (d % 5 + 3)) for d in range(200) for j in range(1 + d % 11)]
    ranks = pl.DataFrame(rows, schema=["fda_id", "pat_id", "rank"], orient="row")
    runs = [rank_metrics(ranks) for _ in range(20)]
    assert {(m["macro_R@10"], m["macro_R@50"], m["MRR"]) for m in runs} == {
        (runs[0]["macro_R@10"], runs[0]["macro_R@50"], runs[0]["MRR"])}


def test_link_evaluation_counts_recall_share_and_noise_reduction():
    pool = pl.DataFrame({"fda_id": ["A", "A", "A", "B"], "pat_id": ["1", "2", "3", "1"]})
    links = pool.with_columns(pl.Series("decision", [True, False, False, True]), pl.lit(True).alias("out_of_fold"))
    gold = pl.DataFrame({"fda_id": ["A", "A"], "pat_id": ["1", "9"]})
    ev = evaluate_links(pool, links, gold, n_devices=2, n_patents=10)
    assert ev.pool_recall == 0.5 and ev.link_recall == 0.5
    assert ev.n_links == 2 and ev.link_share_of_pairs == pytest.approx(2 / 20)
    assert ev.noise_reduction == pytest.approx(0.5) and ev.link_recall_out_of_fold_only


def test_no_gold_gives_no_recall_rather_than_a_fake_number():
    pool = pl.DataFrame({"fda_id": ["A"], "pat_id": ["1"]})
    links = pool.with_columns(pl.lit(True).alias("decision"), pl.lit(False).alias("out_of_fold"))
    ev = evaluate_links(pool, links, pl.DataFrame(schema={"fda_id": pl.String, "pat_id": pl.String}), 1, 1)
    assert ev.pool_recall is None and ev.link_recall is None


def test_a_missing_figure_is_a_typed_float_in_the_stored_row():
    # a first run without gold (or never reaching R99) typed these columns Null, and the store made them INTEGER
    pool = pl.DataFrame({"fda_id": ["A"], "pat_id": ["1"]})
    links = pool.with_columns(pl.lit(True).alias("decision"), pl.lit(False).alias("out_of_fold"))
    ev = evaluate_links(pool, links, pl.DataFrame(schema={"fda_id": pl.String, "pat_id": pl.String}), 1, 1)
    frame = evaluation_frame({**ev.model_dump(), "share@R99": None, "R@10": 0.5})
    assert frame.height == 1 and pl.Null not in frame.dtypes
    assert frame.schema["pool_recall"] == frame.schema["share@R99"] == frame.schema["R@10"] == pl.Float64
    assert frame.schema["n_links"] == pl.Int64 and frame["share@R99"][0] is None


def test_link_recall_is_out_of_fold_only_when_every_gold_devices_row_is():
    # devices without gold are scored by the full model (out_of_fold False): they do not count
    pool = pl.DataFrame({"fda_id": ["A", "A", "B"], "pat_id": ["1", "2", "1"]})
    gold = pl.DataFrame({"fda_id": ["A"], "pat_id": ["1"]})
    links = pool.with_columns(pl.lit(True).alias("decision"), pl.Series("out_of_fold", [True, True, False]))
    assert evaluate_links(pool, links, gold, 2, 2).link_recall_out_of_fold_only
    one_in_fold = links.with_columns(pl.Series("out_of_fold", [True, False, False]))
    assert not evaluate_links(pool, one_in_fold, gold, 2, 2).link_recall_out_of_fold_only


def test_an_empty_pool_has_no_noise_reduction_rather_than_zero():
    pool = pl.DataFrame(schema={"fda_id": pl.String, "pat_id": pl.String})
    links = pool.with_columns(pl.lit(True).alias("decision"), pl.lit(True).alias("out_of_fold"))
    ev = evaluate_links(pool, links, pl.DataFrame({"fda_id": ["A"], "pat_id": ["1"]}), 1, 1)
    assert ev.noise_reduction is None and ev.pool_recall == 0.0 and ev.n_links == 0
