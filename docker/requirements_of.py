"""Print the dependencies pyproject.toml declares, plus those of the extras named (comma-separated).

The Dockerfile installs the dependencies in a layer before it copies the code, so a code change does
not reinstall every package.
Usage: python requirements_of.py pyproject.toml cpu,k8s
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: str) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    names = [e.strip() for e in extras.split(",") if e.strip()]
    if unknown := [e for e in names if e not in optional]:
        raise SystemExit(f"unknown extra(s) {unknown}: {pyproject} has {sorted(optional)}")
    return [*project["dependencies"], *(d for e in names for d in optional[e])]


if __name__ == "__main__":
    args = sys.argv[1:]
    print("\n".join(requirements(Path(args[0]), args[1] if len(args) > 1 else "")))
