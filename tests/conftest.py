"""Shared fixtures: where the shared benchmark data lives, and tiny in-memory corpora."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
BENCHMARK = SHARED_DATA / "bridge-meddevkg"


@pytest.fixture(scope="session")
def benchmark_dir() -> Path:
    if not (BENCHMARK / "devices.parquet").is_file():
        pytest.skip(f"shared benchmark data not found at {BENCHMARK}")
    return BENCHMARK
