#!/usr/bin/env bash
# Set up MedDevKG on a fresh machine: a virtual environment in .venv with the pinned packages,
# then (unless --no-demo) the whole pipeline materialised on the bundled demo corpus.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 is required, found {sys.version}"'

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first and pinned: its CPU wheel; anything unpinned would pull a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet "torch==2.13.0"
EXTRA=${MEDDEVKG_EXTRA:-cpu}
# Every other package at the version the tests passed with (constraints.txt).
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[${EXTRA},test]"

if [ "${1:-}" != "--no-demo" ]; then
  .venv/bin/meddevkg demo
fi
