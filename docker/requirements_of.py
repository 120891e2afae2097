"""Print the dependencies pyproject.toml declares, plus those of the extras named (comma-separated);
or, with --constraints, the constraints that fit those extras.

The Dockerfile installs the dependencies in a layer before it copies the code, so a code change does
not reinstall every package. constraints.txt is frozen from a CPU environment, where xgboost pulls
NVIDIA's NCCL: a CUDA torch build pins its own NCCL (and CUDA runtime), so a GPU install takes the
NVIDIA packages from torch's build instead; held to the CPU freeze, pip would refuse the CUDA torch
already installed and fetch another torch build to satisfy the pin.
Usage: python requirements_of.py pyproject.toml cpu,k8s
       python requirements_of.py --constraints constraints.txt gpu
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

GPU_EXTRAS = {"gpu"}
CUDA_PACKAGE_PREFIX = "nvidia-"


def _extras(extras: str) -> list[str]:
    return [e.strip() for e in extras.split(",") if e.strip()]


def requirements(pyproject: Path, extras: str) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    names = _extras(extras)
    if unknown := [e for e in names if e not in optional]:
        raise SystemExit(f"unknown extra(s) {unknown}: {pyproject} has {sorted(optional)}")
    return [*project["dependencies"], *(d for e in names for d in optional[e])]


def constraints(path: Path, extras: str) -> list[str]:
    lines = path.read_text().splitlines()
    if GPU_EXTRAS.isdisjoint(_extras(extras)):
        return lines
    return [line for line in lines if not line.lower().startswith(CUDA_PACKAGE_PREFIX)]


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--constraints":
        print("\n".join(constraints(Path(args[1]), args[2] if len(args) > 2 else "")))
    else:
        print("\n".join(requirements(Path(args[0]), args[1] if len(args) > 1 else "")))
