"""The core never imports the orchestrator: checked on the source and in a fresh interpreter."""

import ast
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "meddevkg_core"


def test_no_dagster_import_in_core_sources():
    offenders = []
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0].startswith("dagster")]
    assert offenders == []


def test_importing_every_core_module_loads_no_dagster():
    modules = sorted(".".join(p.relative_to(CORE).with_suffix("").parts) for p in CORE.rglob("*.py")
                     if p.stem != "__init__")
    assert "sources.openfda" in modules  # sub-packages are covered too
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module('meddevkg_core.' + m)\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0].startswith('dagster')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
