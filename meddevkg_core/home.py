"""The platform's working directory: $MEDDEVKG_HOME, default ./.meddevkg.

Caches, assembled models, the Dagster instance and exports live under it; one definition, so the
CLI, the Dagster resources and the core loaders always agree on where that is."""

from __future__ import annotations

import os
from pathlib import Path


def home_dir() -> Path:
    return Path(os.environ.get("MEDDEVKG_HOME", Path.cwd() / ".meddevkg")).resolve()
