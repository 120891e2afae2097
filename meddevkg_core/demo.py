"""The bundled demo corpus: synthetic cardiovascular devices and patents written for this project."""

from importlib.resources import files
from pathlib import Path


def demo_corpus_dir() -> Path:
    return Path(str(files("meddevkg_core") / "data" / "demo"))
