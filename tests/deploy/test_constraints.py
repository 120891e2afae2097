"""constraints.txt: the versions a clean install gets, agreeing with pyproject.toml and this venv."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def _constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version and " " not in line, f"constraints.txt: not a name==version pin: {line!r}"
        key = canonicalize_name(name)
        assert key not in pins, f"constraints.txt: {name} pinned twice"
        pins[key] = version
    return pins


def test_constraints_agree_with_every_requirement_of_the_project():
    pins = _constraints()
    assert "torch" not in pins, "torch is pinned in pyproject.toml; its local +cpu tag names one build"
    assert "meddevkg" not in pins
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for spec in [*project["dependencies"], *extras["cpu"], *extras["test"], *extras["k8s"]]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        if name == "torch":
            continue
        assert name in pins, f"{req.name} is a requirement but has no pin in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject.toml's {spec!r}"


def test_this_environment_is_the_constrained_one():
    """The tests pass with exactly these versions (a drifted venv: rerun scripts/bootstrap.sh)."""
    differ = {}
    for name, version in _constraints().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            differ[name] = (version, None)
            continue
        if installed != version:
            differ[name] = (version, installed)
    assert not differ, f"pinned vs installed: {differ}"


def test_every_install_path_uses_the_constraints():
    bootstrap = (REPO / "scripts" / "bootstrap.sh").read_text()
    assert re.search(r'pip install .*-c constraints\.txt -e "\.\[', bootstrap)
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert re.search(r"^COPY .*constraints\.txt", dockerfile, re.M)
    assert "pip install -c constraints.txt -r /tmp/requirements.txt" in dockerfile
    assert 'pip install -c constraints.txt ".[${EXTRA}]"' in dockerfile


def test_bootstrap_refuses_a_disk_without_room_before_installing_anything(tmp_path):
    """A full disk failed CI halfway through pip with a bare OSError; the script now says why first."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    env = {**os.environ, "MEDDEVKG_MIN_FREE_GB": str(10**9), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / "bootstrap.sh"), "--no-demo"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert f"GB free under {tmp_path}" in proc.stderr and "Nothing was installed" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scripts"]  # no .venv begun


def _bootstrap_over_a_venv_with(tmp_path: Path, installed: list[str], extra: str) -> list[str]:
    """bootstrap.sh's pip calls, run over a fake .venv whose python logs them and lists `installed`."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    log = tmp_path / "calls.log"
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    listing = "".join(f"echo {pin}; " for pin in installed)
    python.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n'
                      f'if [ "$*" = "-m pip list --format=freeze" ]; then {listing}fi\n')
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": sys.executable, "MEDDEVKG_EXTRA": extra}
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / "bootstrap.sh"), "--no-demo"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return log.read_text().splitlines()


@pytest.mark.parametrize(("extra", "other_build"), [("cpu", "xgboost==3.2.0"), ("gpu", "faiss-cpu==1.15.1"),
                                                    ("cpu,k8s", "faiss-gpu==1.15.1")])
def test_bootstrap_switching_extras_removes_both_builds_of_faiss_and_xgboost_first(tmp_path, extra, other_build):
    """The cpu and gpu extras' faiss and xgboost are two builds of one module each: installed over the
    other build they share files, and removing either one later breaks both."""
    calls = _bootstrap_over_a_venv_with(tmp_path, ["numpy==2.3.5", other_build], extra)
    (uninstall,) = [i for i, c in enumerate(calls) if c.startswith("-m pip uninstall")]
    assert set(calls[uninstall].split()) >= {"faiss-cpu", "faiss-gpu", "xgboost", "xgboost-cpu", "--yes"}
    (project,) = [i for i, c in enumerate(calls) if re.search(r"pip install .*-e \.\[", c)]
    assert uninstall < project and f".[{extra},test]" in calls[project]


def test_bootstrap_over_the_same_extras_build_removes_nothing(tmp_path):
    calls = _bootstrap_over_a_venv_with(tmp_path, ["faiss-cpu==1.15.1", "xgboost-cpu==3.2.0"], "cpu")
    assert not [c for c in calls if "uninstall" in c]
    assert [c for c in calls if re.search(r"pip install .*-c constraints\.txt -e \.\[cpu,test\]", c)]
