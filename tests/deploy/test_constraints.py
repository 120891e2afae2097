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


def _fake_python(path: Path, log: Path, installed: list[str]) -> None:
    """A python that logs its arguments, lists `installed` to pip, and makes a venv of its own kind."""
    listing = "".join(f"echo {pin}; " for pin in installed) or ":; "
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n'
                    f'if [ "$*" = "-m pip list --format=freeze" ]; then {listing}fi\n'
                    f'if [ "$*" = "-m venv .venv" ]; then mkdir -p .venv/bin && cp "$0" .venv/bin/python; fi\n')
    path.chmod(0o755)


def _bootstrap(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    return subprocess.run(["bash", str(tmp_path / "scripts" / "bootstrap.sh"), "--no-demo"], cwd=tmp_path,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


def _bootstrap_over_a_venv_with(tmp_path: Path, installed: list[str], extra: str) -> list[str]:
    """bootstrap.sh's pip calls, run over a fake .venv whose python logs them and lists `installed`."""
    log = tmp_path / "calls.log"
    _fake_python(tmp_path / ".venv" / "bin" / "python", log, installed)
    proc = _bootstrap(tmp_path, {"PYTHON": sys.executable, "MEDDEVKG_EXTRA": extra})
    assert proc.returncode == 0, proc.stderr
    return log.read_text().splitlines()


def _df_reporting(tmp_path: Path, free_kb: int) -> dict[str, str]:
    """PATH with a `df` that reports `free_kb` KB available on every filesystem."""
    bin_dir = tmp_path / "fake_bin"
    bin_dir.mkdir()
    (bin_dir / "df").write_text("#!/usr/bin/env bash\necho 'Filesystem 1024-blocks Used Available Capacity Mounted'\n"
                                f"echo '/dev/x 999999999 1 {free_kb} 1% /'\n")
    (bin_dir / "df").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_bootstrap_states_the_free_space_it_found_to_a_tenth_of_a_gb(tmp_path):
    """4.8 GB free was reported as "4 GB free" (integer division), and refused against a 5 GB need."""
    proc = _bootstrap(tmp_path, {**_df_reporting(tmp_path, round(4.8 * 1024 * 1024)), "PYTHON": sys.executable,
                                 "MEDDEVKG_MIN_FREE_GB": "5"})
    assert proc.returncode == 1
    assert "4.8 GB free" in proc.stderr and "needs 5 GB" in proc.stderr


@pytest.mark.parametrize(("free_kb", "installs"), [(4 * 1024 * 1024, True), (4 * 1024 * 1024 - 1, False)])
def test_bootstrap_needs_4_gb_free_by_default(tmp_path, free_kb, installs):
    """Measured: the environment is 3.3 GB and a test run 0.2 GB (CI was refused with 4.8 GB free)."""
    log = tmp_path / "calls.log"
    _fake_python(tmp_path / "python3.11", log, [])
    proc = _bootstrap(tmp_path, {**_df_reporting(tmp_path, free_kb), "PYTHON": str(tmp_path / "python3.11")})
    assert (proc.returncode == 0) == installs, proc.stderr
    assert ("-m venv .venv" in log.read_text().splitlines()) == installs
    if not installs:
        assert "3.9 GB free" in proc.stderr and "needs 4 GB" in proc.stderr


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
