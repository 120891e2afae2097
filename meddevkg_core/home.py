"""The platform's working directory: $MEDDEVKG_HOME, default ./.meddevkg.

Caches, assembled models, the Dagster instance and exports live under it; one definition, so the
CLI, the Dagster resources and the core loaders always agree on where that is."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def home_dir(environ: Mapping[str, str] | None = None) -> Path:
    """MEDDEVKG_HOME of `environ` (default: this process's), absolute."""
    env = os.environ if environ is None else environ
    return Path(env.get("MEDDEVKG_HOME", Path.cwd() / ".meddevkg")).resolve()
