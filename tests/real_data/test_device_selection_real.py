"""The paper's device selection on the real FDA records vs the benchmark's 434 (skipped without data).

Measured on the fdadata copy of FDA's PMA file (2026-08-18): the assertions pin those figures and
the reason for every miss, so a change in the rules or the text recipe shows up here. Run with `-s`
to print the full report.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import polars as pl
import pytest

from meddevkg_core.sources.device_selection import compare_selection, format_selection_report, select_originals
from meddevkg_core.sources.pma_records import device_name, devices_from_pma

pytestmark = pytest.mark.real_data


@pytest.fixture(scope="module")
def fda(benchmark_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    root = benchmark_dir.parent / "fda"
    if not (root / "fdadata_pma.parquet").is_file() or not (root / "fdadata_product_codes.parquet").is_file():
        pytest.skip(f"FDA records not found at {root}")
    return pl.read_parquet(root / "fdadata_pma.parquet"), pl.read_parquet(root / "fdadata_product_codes.parquet")


@pytest.fixture(scope="module")
def benchmark(benchmark_dir: Path) -> pl.DataFrame:
    return pl.read_parquet(benchmark_dir / "devices.parquet")


def test_selection_against_the_benchmark(fda, benchmark):
    pma, codes = fda
    report = compare_selection(pma, codes, benchmark)
    print("\n" + format_selection_report(report))
    assert (report["fda_originals"], report["fda_pma_numbers_without_original"]) == (1476, 270)
    assert (report["selected"], report["benchmark"], report["overlap"]) == (464, 434, 421)
    assert report["benchmark_snapshot"] == "2024-08-28"
    assert report["only_selection_reasons"] == {
        "approved after the benchmark snapshot": 23,
        "outside the cardiovascular committee (likely one of the paper's unpublished hand removals)": 16,
        "cardiovascular, approved before the snapshot, yet not in the benchmark (unexplained)": 4,
    }
    assert report["only_benchmark_reasons"] == {
        "no original row in the FDA records (supplements only)": 6,
        "no keyword in its names and its product code is not on the list": 5,
        "excluded: advisory_committee OR (orthopaedic/spine)": 1,
        "excluded: advisory_committee OP (ophthalmology)": 1,
    }
    unexplained = {r["fda_id"] for r in report["detail"]["only_selection"] if "unexplained" in r["reason"]}
    assert unexplained == {"P780011", "P950029", "P950037", "P970012"}
    assert report["variant_with_cv_committee"] == {"selected": 487, "overlap": 424}


def test_device_texts_match_the_benchmark_minus_its_corruption(fda, benchmark):
    """Same recipe as the paper (name + approval statement) but without its "THE" deletion."""
    pma, _ = fda
    devices = devices_from_pma(select_originals(pma))
    joined = benchmark.join(devices.select("fda_id", pl.col("text").alias("ours"), "generic_name"), on="fda_id")

    def tokens(text: str) -> set[str]:
        return set(re.findall(r"[a-z0-9]{3,}", text.lower()))

    recall = [len(tokens(b) & tokens(o)) / max(1, len(tokens(b))) for b, o in zip(joined["text"], joined["ours"],
                                                                                   strict=True)]
    same_name = sum(b.startswith(device_name(g)) for b, g in zip(joined["text"], joined["generic_name"], strict=True))
    assert joined.height == 421 and same_name >= 380  # 384 measured; the rest had other names in 2024
    # measured: median token recall 0.986; 384 of 421 texts keep >= 80% of the benchmark text's tokens
    assert statistics.median(recall) >= 0.95 and sum(r >= 0.8 for r in recall) >= 0.85 * joined.height
    edwards = devices.filter(pl.col("fda_id") == "P000007")["text"].item()
    assert "BIOPROSTHESIS" in edwards and "PROS SIS" not in edwards and not edwards.startswith("APPROVAL")
    assert devices["fda_id"].is_unique().all() and devices["text"].str.len_chars().min() > 0
