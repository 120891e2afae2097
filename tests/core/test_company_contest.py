import math

import numpy as np
import polars as pl
import pytest

from meddevkg_core.company_contest import (
    contest_order,
    contest_ranks,
    contested_logits,
    logit,
    product_lines,
)
from meddevkg_core.config import CompanyContestConfig


class ColumnModel:
    """Predicts a column of the rows it is given: a stand-in for a fold model."""

    def __init__(self, column: str):
        self.column = column

    def predict(self, frame: pl.DataFrame, vectors=None) -> np.ndarray:
        return frame[self.column].to_numpy().astype(np.float32)


RIVALS = pl.DataFrame({"fda_id": ["A", "A", "B", "C", "B"], "pat_id": ["p1", "p2", "p1", "p1", "p2"],
                       "q": [0.8, 0.6, 0.9, 0.7, 0.2], "r": [0.1, 0.1, 0.4, 0.1, 0.3], "is_same_company": [1] * 5})
NO_LINES = product_lines({}, 5)


def _lse(*x: float) -> float:
    return math.log(sum(math.exp(v) for v in x))


def _l(p: float) -> float:
    return math.log(p / (1 - p))


def test_product_lines_pair_devices_sharing_a_rare_head_word():
    words = {"A": frozenset({"vela", "stent"}), "B": frozenset({"vela"}), "C": frozenset({"stent"}),
             "D": frozenset({"stent"})}
    lines = product_lines(words, 2)
    assert sorted(lines.iter_rows()) == [("A", "B"), ("B", "A")]  # 'stent' is held by three devices
    assert product_lines(words, 0).height == 0 and NO_LINES.height == 0


def test_a_company_matched_pair_gains_its_log_share_among_the_companys_devices():
    top = pl.DataFrame({"fda_id": ["A", "A", "A"], "pat_id": ["p1", "p2", "p3"], "probability": [0.8, 0.6, 0.5]})
    lines = pl.DataFrame({"fda_id": ["A"], "line_mate": ["C"]})  # C is A's product line: not a rival
    got = contested_logits(top, RIVALS, lambda _: ColumnModel("q"), None, lines, 0.5)
    assert got[0] == pytest.approx(_l(0.8) + 0.5 * (_l(0.8) - _lse(_l(0.8), _l(0.9))))
    assert got[1] == pytest.approx(_l(0.6) + 0.5 * (_l(0.6) - _lse(_l(0.6), _l(0.2))))
    assert got[2] == pytest.approx(_l(0.5))  # p3 is not company-matched to A: its log-odds only
    with_line = contested_logits(top, RIVALS, lambda _: ColumnModel("q"), None, NO_LINES, 0.5)
    assert with_line[0] == pytest.approx(_l(0.8) + 0.5 * (_l(0.8) - _lse(_l(0.8), _l(0.9), _l(0.7))))
    assert np.allclose(contested_logits(top, RIVALS, lambda _: ColumnModel("q"), None, NO_LINES, 0.0),
                       logit(np.array([0.8, 0.6, 0.5])))


def test_rivals_are_scored_by_the_ranked_devices_own_model():
    top = pl.DataFrame({"fda_id": ["A", "B"], "pat_id": ["p1", "p1"], "probability": [0.8, 0.4]})
    models = {"A": ColumnModel("q"), "B": ColumnModel("r")}
    got = contested_logits(top, RIVALS, models.__getitem__, None, NO_LINES, 1.0)
    # A's rivals by A's model (q), B's by B's (r); each device's own pair keeps the probability it was ranked by
    assert got[0] == pytest.approx(2 * _l(0.8) - _lse(_l(0.8), _l(0.9), _l(0.7)), abs=1e-5)
    assert got[1] == pytest.approx(2 * _l(0.4) - _lse(_l(0.1), _l(0.4), _l(0.1)), abs=1e-5)


def _block() -> tuple[list[str], np.ndarray, np.ndarray, pl.DataFrame]:
    """Two devices of one company over five patents; A's best patent is B's product's."""
    devices, patents = ["A", "B"], np.array(["p1", "p2", "p3", "p4", "p5"], dtype=object)
    probability = np.array([[0.9, 0.8, 0.7, 0.2, 0.1], [0.99, 0.1, 0.6, 0.3, 0.2]])
    rivals = pl.DataFrame({"fda_id": ["A", "A", "B", "B", "A", "B"], "pat_id": ["p1", "p2", "p1", "p2", "p3", "p3"],
                           "q": [0.9, 0.8, 0.99, 0.1, 0.7, 0.6], "is_same_company": [1] * 6})
    return devices, patents, probability, rivals


def test_only_each_devices_top_pairs_move_and_links_and_blocks_agree():
    devices, patents, probability, rivals = _block()
    cfg = CompanyContestConfig(top_k=3, weight=1.0)
    scored = pl.DataFrame({"fda_id": np.repeat(devices, 5).tolist(), "pat_id": np.tile(patents, 2).tolist(),
                           "probability": probability.ravel()})
    by_probability = np.array([1, 2, 3, 4, 5, 1, 5, 2, 3, 4], np.int32)  # ties would go by patent
    rank = contest_ranks(scored, by_probability, rivals, lambda _: ColumnModel("q"), None, NO_LINES, cfg)
    # A: p1 is B's far more than A's, so it drops below p2 and p3; B keeps p1 first. Below the top 3, no change.
    assert rank.tolist() == [3, 1, 2, 4, 5, 1, 5, 2, 3, 4]
    block = contest_order(devices, patents, probability, rivals, lambda _: ColumnModel("q"), None, NO_LINES, cfg)
    from_block = np.argsort(np.argsort(-block, axis=1, kind="stable"), axis=1) + 1
    assert from_block.ravel().tolist() == rank.tolist()
    assert ((block > 1).sum(axis=1) == 3).all()  # the top 3 above every probability
    off = contest_ranks(scored, by_probability, rivals, lambda _: ColumnModel("q"), None, NO_LINES,
                        cfg.model_copy(update={"weight": 0}))
    assert off.tolist() == by_probability.tolist()


def test_only_the_pools_company_matched_rows_compete():
    top = pl.DataFrame({"fda_id": ["A"], "pat_id": ["p1"], "probability": [0.8]})
    pool = RIVALS.with_columns(pl.Series("is_same_company", [1, 1, 1, 0, 1], pl.Int8))  # C not company-matched
    got = contested_logits(top, pool, lambda _: ColumnModel("q"), None, NO_LINES, 1.0)
    assert got[0] == pytest.approx(2 * _l(0.8) - _lse(_l(0.8), _l(0.9)), abs=1e-5)
    with pytest.raises(ValueError, match="is_same_company"):
        contested_logits(top, RIVALS.drop("is_same_company"), lambda _: ColumnModel("q"), None, NO_LINES, 1.0)


def test_blocks_break_ties_by_patent_id_as_the_links_do():
    # p2 and p3: the same probability and the same rivals, so the same contested score
    rivals = pl.DataFrame({"fda_id": ["A", "A", "B", "B"], "pat_id": ["p2", "p3", "p2", "p3"],
                           "q": [0.7, 0.7, 0.3, 0.3], "is_same_company": [1] * 4})
    cfg = CompanyContestConfig(top_k=3, weight=1.0)
    scored = pl.DataFrame({"fda_id": ["A"] * 4, "pat_id": ["p1", "p2", "p3", "p4"],
                           "probability": [0.5, 0.7, 0.7, 0.1]})
    rank = contest_ranks(scored, np.array([3, 1, 2, 4], np.int32), rivals, lambda _: ColumnModel("q"), None,
                         NO_LINES, cfg)
    assert rank.tolist() == [3, 1, 2, 4]
    columns = np.array([2, 0, 3, 1])  # a block whose columns are not in id order: p3, p1, p4, p2
    block = contest_order(["A"], np.array(["p1", "p2", "p3", "p4"], dtype=object)[columns],
                          np.array([[0.5, 0.7, 0.7, 0.1]])[:, columns], rivals, lambda _: ColumnModel("q"), None,
                          NO_LINES, cfg)[0]
    place = np.empty(4, np.int64)
    place[np.argsort(-block, kind="stable")] = np.arange(1, 5)
    assert dict(zip(np.array(["p1", "p2", "p3", "p4"])[columns], place.tolist(), strict=True)) == {
        "p1": 3, "p2": 1, "p3": 2, "p4": 4}


def test_pairs_with_the_same_rivals_score_exactly_the_same_whatever_the_rows_order():
    """Summed in the joins' order, 11 of these 50 devices scored their 30 identical patents apart by
    an ulp, and such ties then went one way in the links and another in the benchmark's rankings."""
    rng = np.random.default_rng(1)
    devices, patents = [f"D{i:04d}" for i in range(300)], [f"p{j:04d}" for j in range(200)]
    q = rng.uniform(0.05, 0.95, len(devices))
    rows = [(d, p, float(x)) for p in patents for d, x in zip(devices, q, strict=True)]
    pool = pl.DataFrame([rows[i] for i in rng.permutation(len(rows))], orient="row",
                        schema={"fda_id": pl.String, "pat_id": pl.String, "q": pl.Float64}).with_columns(
        pl.lit(1).alias("is_same_company"))
    top = pl.DataFrame({"fda_id": np.repeat(devices[:50], 30).tolist(), "pat_id": patents[:30] * 50,
                        "probability": np.repeat(q[:50], 30)})
    got = contested_logits(top, pool, lambda _: ColumnModel("q"), None, NO_LINES, 0.5).reshape(50, 30)
    assert (got.max(axis=1) == got.min(axis=1)).all()
