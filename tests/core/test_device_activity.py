import json
from datetime import date

import numpy as np
import polars as pl

from meddevkg_core import rerank
from meddevkg_core.config import RerankConfig
from meddevkg_core.device_activity import (
    DORMANT_FACTOR,
    GRANTED_AFTER_LAST_DECISION,
    LAST_DECISION_DATE,
    dormant,
    grant_years_of,
    last_decision_dates,
    last_decision_years,
    with_last_decision,
)
from meddevkg_core.rerank import feature_frame, label_pairs
from tests.core.test_dossier import DEVICES as LABELS
from tests.core.test_dossier import PATENTS as PATENT_TEXTS
from tests.core.test_dossier import SUPPLEMENTS as P130026_SUPPLEMENTS
from tests.core.test_dossier import _pool
from tests.core.test_rerank import synthetic_pool

DEVICES = pl.DataFrame({"fda_id": ["P970002", "P100045", "P200001"],
                        "decision_date": [date(1997, 5, 1), date(2014, 5, 28), None]})
SUPPLEMENTS = pl.DataFrame({"fda_id": ["P970002", "P100045", "P100045"],
                            "decision_date": [date(1998, 2, 3), date(2016, 1, 4), date(2024, 9, 30)]})


def test_a_devices_latest_decision_is_its_approval_or_its_latest_supplement():
    years = last_decision_years(DEVICES, SUPPLEMENTS, ["P100045", "P970002", "P200001", "P999999"])
    assert years[:2].tolist() == [2024.0, 1998.0]
    assert np.isnan(years[2]) and np.isnan(years[3])  # no decision known; not in the records
    no_dates = last_decision_years(DEVICES.drop("decision_date"), SUPPLEMENTS, ["P970002"])
    assert no_dates.tolist() == [1998.0]  # devices without a decision_date: the supplements alone
    approval_only = last_decision_years(DEVICES, SUPPLEMENTS.clear(), ["P970002"])
    assert approval_only.tolist() == [1997.0]


def test_the_devices_carry_their_latest_decision_date_for_the_company_match():
    latest = last_decision_dates(DEVICES, SUPPLEMENTS)  # P200001 has no decision at all: no row
    assert latest.rows() == [("P100045", date(2024, 9, 30)), ("P970002", date(1998, 2, 3))]
    dated = with_last_decision(DEVICES, SUPPLEMENTS)
    assert dated.columns == [*DEVICES.columns, LAST_DECISION_DATE]
    assert dated[LAST_DECISION_DATE].to_list() == [date(1998, 2, 3), date(2024, 9, 30), None]
    assert with_last_decision(DEVICES, None) is DEVICES  # no FDA records read: unchanged
    again = with_last_decision(dated, SUPPLEMENTS.clear())  # recomputed, never a second column
    assert again.columns == dated.columns
    assert again[LAST_DECISION_DATE].to_list() == [date(1997, 5, 1), date(2014, 5, 28), None]


def test_a_patents_grant_year_comes_from_its_grant_date_else_its_number():
    patents = pl.DataFrame({"pat_id": ["6077296", "95051724", "X1"], "grant_date": [None, "2015-01-12", None]})
    years = grant_years_of(patents, ["95051724", "6077296", "X1"])
    assert years[:2].tolist() == [2015.0, 2000.0]  # the date wins; US 6,077,296 was granted in 2000
    assert np.isnan(years[2])


def test_only_a_grant_more_than_the_allowed_years_after_is_dormant():
    gap = np.array([-10.0, 3.0, 3.5, 12.0, np.nan], np.float32)
    assert dormant(gap, 3).tolist() == [False, False, True, True, False]
    assert not dormant(gap, None).any()


def test_the_reranker_scales_dormant_pairs_down_and_keeps_their_order():
    pool, gold = synthetic_pool()
    rows = feature_frame(pool, None)
    model = rerank.train_reranker(label_pairs(rows, gold), RerankConfig(n_estimators=20, folds=4))
    assert model.dormant_device_years == 3 and GRANTED_AFTER_LAST_DECISION in model.columns_of(rows).columns
    undated = rows.drop(GRANTED_AFTER_LAST_DECISION)  # a frame without the column: no rule, no error
    assert np.array_equal(model.predict(model.columns_of(undated)), model.predict(rows))
    plain = model.predict(rows)  # the pool column is null: no pair is affected
    gap = np.resize(np.array([4.0, 3.0, np.nan]), rows.height)  # dormant, at the limit, unknown
    dated = rows.with_columns(pl.Series(GRANTED_AFTER_LAST_DECISION, gap, pl.Float32))
    scored = model.predict(dated)
    assert np.array_equal(model.predict(model.columns_of(dated)), scored)  # what apply_fold_models passes
    hit = gap == 4.0
    assert np.allclose(scored[hit], plain[hit] * DORMANT_FACTOR, rtol=1e-5)
    assert np.array_equal(scored[~hit], plain[~hit])
    assert np.array_equal(np.argsort(-scored[hit], kind="stable"), np.argsort(-plain[hit], kind="stable"))
    off = rerank.train_reranker(label_pairs(rows, gold), RerankConfig(n_estimators=20, folds=4,
                                                                      dormant_device_years=None))
    assert np.array_equal(off.predict(dated), off.predict(rows))
    assert rerank.RerankerModel.from_json(model.to_json()) == model
    saved_before = {k: v for k, v in json.loads(model.to_json()).items() if k != "dormant_device_years"}
    assert rerank.RerankerModel.from_json(json.dumps(saved_before)).dormant_device_years is None


def test_the_pool_holds_each_pairs_years_after_its_devices_latest_decision():
    patents = PATENT_TEXTS.with_columns(pl.Series("pat_id", ["6077296", "10000000", "11000000"]))  # 2000, 2018, 2021
    pool = _pool(LABELS, P130026_SUPPLEMENTS, patents)
    gap = {(r["fda_id"], r["pat_id"]): r[GRANTED_AFTER_LAST_DECISION] for r in pool.iter_rows(named=True)}
    # P130026's latest supplement was decided in 2017
    assert [gap[("P130026", p)] for p in ("6077296", "10000000", "11000000")] == [-17.0, 1.0, 4.0]
    assert np.isnan(gap[("P100001", "11000000")])  # no decision known for it
    assert _pool(LABELS, None, patents)[GRANTED_AFTER_LAST_DECISION].is_nan().all()  # no FDA records read
