"""The links table: the decided pool as LINKS, each link's evidence string written column-wise."""

import numpy as np
import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.links_table import evidence, links_frame
from tests.core.test_fold_models import bench_stage3_frames

# The implementation before the column-wise rewrite, kept as an oracle; evidence (the per-row
# specification, unchanged) gives the strings the column-wise links_frame must reproduce, for every
# link (a rejected pair's evidence is null).


def _links_frame_before(decided: pl.DataFrame) -> pl.DataFrame:
    rows = decided.to_dicts()
    texts = [evidence(r) if r["decision"] else None for r in rows]
    return schemas.conform(decided.with_columns(pl.Series("evidence", texts, pl.String)), schemas.LINKS)


@pytest.fixture(scope="module")
def decided() -> pl.DataFrame:
    """A realistic small pool, decided (test_fold_models' bench_stage3)."""
    return bench_stage3_frames()[2]


def test_links_frame_identical_to_before(decided):
    assert decided["company_path"].null_count() < decided.height and (decided["shared_terms"] != "").any()
    assert links_frame(decided).equals(_links_frame_before(decided))
    assert links_frame(decided, chunk_rows=333).equals(_links_frame_before(decided))
    # cross-encoder scores (some missing), and values at the rounding edges of the formats
    rng = np.random.default_rng(0)
    edges = np.array([0.0005, 0.0015, 0.0025, -0.0005, -0.0, 0.0, 2.5, 3.5, -2.5, 0.125, 0.9995, 1e-8, -1e-8,
                      123.4565, 1e20, -1e30, np.inf, -np.inf, np.nan], np.float32)
    n = decided.height
    values = np.concatenate([edges, rng.normal(0, 1, n - len(edges)).astype(np.float32)])
    odd = decided.with_columns(
        pl.Series("ai_score", np.where(rng.random(n) < 0.3, np.nan, values[::-1]), pl.Float32).fill_nan(None),
        pl.Series("sim", values, pl.Float32), pl.Series("score_total", values * 80, pl.Float32),
        pl.Series("probability", np.roll(values, 7), pl.Float32),
        pl.Series("company_path", rng.choice(["", "A <- B"], n)).replace("", None).alias("company_path"),
        pl.Series("decision", rng.random(n) < 0.8))  # most rows links, so most values are formatted
    for frame in (odd, odd.with_columns(pl.col("ai_score").cast(pl.Float64)), odd.drop("ai_score", "shared_terms"),
                  odd.with_columns(pl.col("admitted_by").cast(pl.Categorical))):
        assert links_frame(frame, chunk_rows=1_000).equals(_links_frame_before(frame))
