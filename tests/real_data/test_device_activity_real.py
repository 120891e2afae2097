"""Devices' latest FDA decisions on the real benchmark and FDA records (skipped without the shared data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from meddevkg_core.config import RerankConfig
from meddevkg_core.device_activity import dormant, grant_years_of, last_decision_years
from meddevkg_core.dossier import read_supplements

pytestmark = pytest.mark.real_data


def test_no_gold_patent_was_granted_after_its_devices_latest_decision(benchmark_dir: Path):
    fda = benchmark_dir.parent / "fda" / "fdadata_pma.parquet"
    if not fda.is_file():
        pytest.skip(f"FDA records not found at {fda}")
    devices = pl.read_parquet(benchmark_dir / "devices.parquet")  # as the benchmark reads it: no approval dates
    patents = pl.read_parquet(benchmark_dir / "patents.parquet")
    gold = pl.read_parquet(benchmark_dir / "gold_links.parquet")
    ids, pat_ids = devices["fda_id"].to_list(), patents["pat_id"].to_list()
    latest = last_decision_years(devices, read_supplements(fda, ids), ids)
    granted = grant_years_of(patents, pat_ids)
    assert np.isfinite(granted).all() and np.isnan(latest).sum() == 20  # the devices without supplements
    gap = granted[None, :] - latest[:, None]
    rows = np.array([ids.index(d) for d in gold["fda_id"]])
    cols = np.array([pat_ids.index(p) for p in gold["pat_id"]])
    assert gap[rows, cols].max() <= -2  # measured: every gold patent at least two years before (max -2)
    years = RerankConfig().dormant_device_years
    hit = dormant(gap, years)
    assert not hit[rows, cols].any()
    # measured 146,775 of the 948,290 pairs (15.5%), 80% of them of the 76 devices last decided before 2010
    assert 120_000 < hit.sum() < 170_000
