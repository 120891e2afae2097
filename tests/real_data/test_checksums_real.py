"""Damage to the benchmark's Parquet that polars reads without an error is caught by a release's SHA256SUMS."""

from __future__ import annotations

import hashlib
import shutil

import polars as pl
import pytest

from meddevkg_core.checksums import MANIFEST
from meddevkg_core.corpus import read_corpus
from meddevkg_core.errors import CorpusError


@pytest.mark.real_data
def test_a_flipped_byte_that_reads_as_other_rows_is_refused_against_the_manifest(benchmark_dir, tmp_path):
    release = tmp_path / "release"
    release.mkdir()
    for name in ("devices.parquet", "patents.parquet", "gold_links.parquet"):
        shutil.copyfile(benchmark_dir / name, release / name)
    (release / MANIFEST).write_text("".join(f"{hashlib.sha256((release / n).read_bytes()).hexdigest()}  {n}\n"
                                            for n in ("devices.parquet", "patents.parquet", "gold_links.parquet")))
    assert read_corpus(release).devices.height == 434

    original = (release / "devices.parquet").read_bytes()
    rows = pl.read_parquet(release / "devices.parquet")
    for position in range(len(original) // 2, len(original)):  # the first flip polars reads without an error
        damaged = bytearray(original)
        damaged[position] ^= 0x01
        (release / "devices.parquet").write_bytes(bytes(damaged))
        try:
            silent = not pl.read_parquet(release / "devices.parquet").equals(rows)
        except Exception:  # a flip the reader notices is not the case measured here
            silent = False
        if silent:
            break
    else:
        raise AssertionError("no single-byte flip was read silently")
    with pytest.raises(CorpusError, match=rf"^{release}/devices.parquet: its SHA-256 \w{{12}}\.\.\. is not "
                                          rf"\w{{12}}\.\.\., the digest {release}/{MANIFEST} lists"):
        read_corpus(release)
