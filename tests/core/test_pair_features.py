import numpy as np
import polars as pl
import pytest

from meddevkg_core.applications import grant_year_from_number
from meddevkg_core.pair_features import (
    POOL_FEATURES,
    YEAR_FEATURES,
    grant_year,
    with_pool_features,
    with_year_features,
)
from meddevkg_core.rerank import EXTENDED_FEATURES, feature_frame

PATENT_IDS = ["3930270", "3930271", "5683345", " 6261316 ", "US10000000B2", "10,000,000", "11065097",
              "12635108", "12635109", "95002174", "abc", None]


def test_grant_year_is_the_number_lookup_vectorised():
    expected = [grant_year_from_number(p) for p in PATENT_IDS]
    assert grant_year(pl.Series(PATENT_IDS, dtype=pl.String)).to_list() == expected
    assert expected[:4] == [None, 1976, 1997, 2001]


@pytest.mark.parametrize("fda_id,year", [("P040002", 2004), ("P990054", 1999), ("P760001", 1976),
                                          ("H200001", 2020), ("p120006", 2012), ("N16837", None),
                                          ("K123456", None)])
def test_device_year_from_pma_and_hde_numbers(fda_id, year):
    out = with_year_features(pl.DataFrame({"fda_id": [fda_id], "pat_id": ["6261316"]}))
    assert out["device_year"][0] == year
    assert out["year_gap"][0] == (None if year is None else 2001 - year)


def test_year_features_keep_rows_and_order_and_are_idempotent():
    pairs = pl.DataFrame({"fda_id": ["P040002", "P040002", "N16837"], "pat_id": ["8167925", "6261316", "8167925"],
                          "sim": [0.1, 0.2, 0.3]})
    out = with_year_features(pairs)
    assert out.select(pairs.columns).equals(pairs)
    assert out["year_gap"].to_list() == [8.0, -3.0, None]
    assert with_year_features(out).equals(out)


def test_extended_features_include_the_years_and_feature_frame_adds_them():
    assert set(YEAR_FEATURES) <= set(EXTENDED_FEATURES)
    candidates = pl.DataFrame({"fda_id": ["P040002"], "pat_id": ["6261316"], "sim": [0.5], "lexical": [0.1],
                               "score_company": [20], "score_entity": [60.0], "tier_s_match": [True],
                               "admitted_by": ["threshold"]})
    frame = feature_frame(candidates, None)
    assert frame["year_gap"].to_list() == [-3.0] and frame["ai_score"].is_null().all()


def test_the_default_feature_set_holds_no_feature_that_depends_on_the_batch_of_devices():
    from meddevkg_core.config import RerankConfig
    from meddevkg_core.rerank import CORPUS_FEATURES, feature_names

    assert "sim_z_patent" not in feature_names(RerankConfig()) and "sim_z_patent" in CORPUS_FEATURES
    assert feature_names(RerankConfig(features="extended_corpus")) == CORPUS_FEATURES


def _pairs() -> pl.DataFrame:
    return pl.DataFrame({
        "fda_id": ["A", "A", "A", "A", "B", "B"], "pat_id": ["p1", "p2", "p3", "p4", "p1", "p2"],
        "sim": [0.9, 0.5, 0.4, 0.8, 0.3, 0.2], "lexical": [0.3, 0.1, 0.2, 0.0, 0.5, 0.1],
        "score_company": [20, 20, 0, 0, 20, 0], "score_entity": [60.0, 60.0, 20.0, 60.0, 0.0, 0.0],
        "admitted_by": ["threshold", "same_company", "rescue_vector", None, "threshold", "threshold"]})


def test_pool_features_are_z_scores_among_the_devices_pool_and_same_company_pool_rows():
    out = with_pool_features(_pairs())
    a = out.filter(pl.col("fda_id") == "A")
    pool_sim, company_sim = np.array([0.9, 0.5, 0.4]), np.array([0.9, 0.5])
    assert a["pool_size"].to_list() == [3, 3, 3, 3]  # p4 is outside the pool and scored against it
    expected = (np.array([0.9, 0.5, 0.4, 0.8]) - pool_sim.mean()) / pool_sim.std(ddof=1)
    assert a["sim_z_pool"].to_numpy() == pytest.approx(expected, rel=1e-5)
    expected = (np.array([0.9, 0.5, 0.4, 0.8]) - company_sim.mean()) / company_sim.std(ddof=1)
    assert a["sim_z_company"].to_numpy() == pytest.approx(expected, rel=1e-5)
    assert out.filter(pl.col("fda_id") == "B")["sim_z_company"].is_null().all()  # one same-company row: no spread


def test_entity_pool_share_is_the_share_of_the_devices_pool_with_the_pairs_entity_score():
    out = with_pool_features(_pairs())
    # A's pool: p1 and p2 score 60, p3 20; p4 (outside the pool, 60) is measured against those three
    assert out["entity_pool_share"].to_list() == pytest.approx([2 / 3, 2 / 3, 1 / 3, 2 / 3, 1.0, 1.0])
    outside = with_pool_features(_pairs().with_columns(pl.lit(None, pl.String).alias("admitted_by")))
    assert outside["entity_pool_share"].is_null().all()  # no pool to compare with


def test_pool_features_of_a_device_do_not_depend_on_the_other_devices_in_the_frame():
    both = with_pool_features(_pairs()).filter(pl.col("fda_id") == "A")
    alone = with_pool_features(_pairs().filter(pl.col("fda_id") == "A"))
    assert both.equals(alone)
    assert set(POOL_FEATURES) <= set(EXTENDED_FEATURES)
