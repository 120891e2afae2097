#!/usr/bin/env bash
# Debian packages the deployment and UI tests use: a PostgreSQL server (Dagster's deployed storage)
# and headless Chromium (the UI as a user sees it). Idempotent; needs root (CI runs as root).
set -euo pipefail

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
{ command -v pg_ctl >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; } || need+=(postgresql)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "system_packages.sh: missing ${need[*]}; run as root (or install them) to enable those tests" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" fonts-dejavu-core >/dev/null
