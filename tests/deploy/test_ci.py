"""CI (.ci/run) fails on a skipped test: it installs everything the tests need, so a skip there is a
broken environment (no shared data, no Chromium, no PostgreSQL), not a pass. And it runs the README's test
command, as a new engineer would."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _pytest(directory: Path, *options: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "MEDDEVKG_NO_SKIPS"} | env
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           *options, str(directory)], cwd=REPO, env=environ, capture_output=True, text=True)


def test_a_skip_fails_the_run_where_ci_asks_for_no_skips(tmp_path):
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n\ndef test_needs_chromium():\n    pytest.skip('no chromium here')\n\n"
        "def test_fine():\n    assert True\n")
    assert _pytest(tmp_path).returncode == 0  # a user's machine without Chromium: skipped, the run passes
    strict = _pytest(tmp_path, MEDDEVKG_NO_SKIPS="1")
    assert strict.returncode == 1
    assert "skipped while MEDDEVKG_NO_SKIPS is set: Skipped: no chromium here" in strict.stdout
    # CI runs on xdist workers, which report to the controller: the skip still fails the run there.
    workers = _pytest(tmp_path, "-n", "2", MEDDEVKG_NO_SKIPS="1")
    assert workers.returncode == 1 and "1 failed, 1 passed" in workers.stdout, workers.stdout
    ci = (REPO / ".ci" / "run").read_text()
    assert "MEDDEVKG_NO_SKIPS=1" in ci


def _pytest_arguments(line: str) -> list[str]:
    """The words after `python -m pytest` on a shell line, up to a comment."""
    words = line.split("#", 1)[0].split()
    return words[words.index("pytest") + 1:]


def test_ci_runs_the_readmes_test_command_on_the_same_workers():
    # The README's command is what a new engineer runs and what the 15-minute budget is about; CI must run it,
    # not a slower or faster variant of it.
    readme = next(line for line in (REPO / "README.md").read_text().splitlines()
                  if line.startswith(".venv/bin/python -m pytest"))
    ci = next(line for line in (REPO / ".ci" / "run").read_text().splitlines() if "-m pytest" in line)
    readme_args, ci_args = _pytest_arguments(readme), _pytest_arguments(ci)
    assert "-n" in readme_args, "the README's test command runs the suite on pytest-xdist workers"
    workers = readme_args[readme_args.index("-n") + 1]
    assert "-n" in ci_args and ci_args[ci_args.index("-n") + 1] == workers, (ci, readme)
    assert set(ci_args) - set(readme_args) <= {"-q", "-p", "no:cacheprovider"}, (ci, readme)


def test_the_suite_is_distributed_by_file_so_module_fixtures_are_built_once():
    # Under xdist's default (`load`), a module's tests spread over the workers and each worker builds the
    # module's fixtures again: the benchmark contract's run (about 90 s) twice.
    addopts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--dist loadfile" in addopts
