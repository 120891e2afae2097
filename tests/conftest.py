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


@pytest.fixture
def fake_source():
    """A real HTTP server on 127.0.0.1 with scripted routes and faults (tests/fake_source_server.py)."""
    from tests.fake_source_server import FakeSourceServer

    with FakeSourceServer() as server:
        yield server
