"""Plots are written as real 1200 x 800 PNGs."""

from __future__ import annotations

import struct
from pathlib import Path

import polars as pl

from meddevkg_core.curves import CURVE
from meddevkg_core.plots import plot_rank_distribution, plot_recall_volume

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == PNG_MAGIC
    return struct.unpack(">II", header[16:24])


def test_recall_volume_plot_is_a_png(tmp_path: Path) -> None:
    curve = pl.DataFrame(
        {"share_of_pairs": [0.0, 0.001, 0.05, 1.0], "pairs_kept": [0, 1, 50, 1000], "recall": [0.0, 0.4, 0.95, 1.0],
         "threshold": [float("inf"), 0.9, 0.5, float("-inf")]},
        schema=CURVE,
    )
    flat = curve.with_columns(pl.Series("recall", [0.0, 0.1, 0.5, 0.8]))
    out = plot_recall_volume({"A": curve, "B": flat}, tmp_path / "sub" / "rv.png", title="toy")
    assert out == tmp_path / "sub" / "rv.png" and out.stat().st_size > 5000
    assert _size(out) == (1200, 800)


def test_rank_distribution_plot_is_a_png(tmp_path: Path) -> None:
    ranks = {
        "A": pl.DataFrame({"fda_id": ["D"] * 4, "pat_id": list("abcd"), "rank": [1, 12, 300, None]}),
        "B": pl.DataFrame({"fda_id": ["D"] * 2, "pat_id": list("ab"), "rank": [None, None]},
                          schema={"fda_id": pl.String, "pat_id": pl.String, "rank": pl.Int64}),
    }
    out = plot_rank_distribution(ranks, tmp_path / "ranks.png")
    assert out.stat().st_size > 5000 and _size(out) == (1200, 800)


def test_a_plot_that_fails_to_save_leaves_the_previous_one(tmp_path: Path, monkeypatch) -> None:
    import pytest
    from matplotlib.figure import Figure

    ranks = {"A": pl.DataFrame({"fda_id": ["D"] * 2, "pat_id": list("ab"), "rank": [1, 40]})}
    out = plot_rank_distribution(ranks, tmp_path / "ranks.png")
    before = out.read_bytes()
    save = Figure.savefig

    def half_then_fail(self, fname, *args, **kwargs):
        save(self, fname, *args, **kwargs)
        Path(fname).write_bytes(Path(fname).read_bytes()[:100])
        raise OSError("No space left on device")

    monkeypatch.setattr(Figure, "savefig", half_then_fail)
    with pytest.raises(OSError):
        plot_rank_distribution(ranks, out)
    assert out.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["ranks.png"]
