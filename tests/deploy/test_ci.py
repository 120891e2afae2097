"""CI (.ci/run) fails on a skipped test: it installs everything the tests need, so a skip there is a
broken environment (no shared data, no Chromium, no PostgreSQL), not a pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _pytest(directory: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "MEDDEVKG_NO_SKIPS"} | env
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           str(directory)], cwd=REPO, env=environ, capture_output=True, text=True)


def test_a_skip_fails_the_run_where_ci_asks_for_no_skips(tmp_path):
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n\ndef test_needs_chromium():\n    pytest.skip('no chromium here')\n\n"
        "def test_fine():\n    assert True\n")
    assert _pytest(tmp_path).returncode == 0  # a user's machine without Chromium: skipped, the run passes
    strict = _pytest(tmp_path, MEDDEVKG_NO_SKIPS="1")
    assert strict.returncode == 1
    assert "skipped while MEDDEVKG_NO_SKIPS is set: Skipped: no chromium here" in strict.stdout
    ci = (REPO / ".ci" / "run").read_text()
    assert "MEDDEVKG_NO_SKIPS=1" in ci
