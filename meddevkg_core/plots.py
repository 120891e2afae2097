"""Benchmark figures: recall against the share of all pairs kept, and where gold patents rank.

Drawn on a bare Agg canvas (no pyplot state, no display), so the functions are safe in worker
processes and tests; 12 x 8 inches at 100 dpi gives 1200 x 800 PNGs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from meddevkg_core.atomic_files import replaced_file
from meddevkg_core.curves import pairs_for_recall, recall_at_share

FIGSIZE = (12.0, 8.0)
DPI = 100


def plot_recall_volume(
    curves: Mapping[str, pl.DataFrame],
    out: Path,
    title: str = "Recall on gold vs share of all device x patent pairs kept",
    mark_recalls: Sequence[float] = (0.90, 0.95, 0.99),
) -> Path:
    """One step line per method (log x); markers at the smallest volume reaching each marked recall."""
    fig, ax = _figure()
    positive = [c.filter(pl.col("share_of_pairs") > 0)["share_of_pairs"].min() for c in curves.values()]
    left = min([float(x) for x in positive if x is not None], default=1e-6)  # type: ignore[arg-type]
    for name, curve in curves.items():
        c = curve.filter(pl.col("share_of_pairs") > 0).sort("pairs_kept")
        # Start every line at recall 0 on the common left edge, so a first jump is drawn, not skipped.
        x = np.concatenate([[left], c["share_of_pairs"].to_numpy()])
        y = np.concatenate([[0.0], c["recall"].fill_null(0.0).to_numpy()])
        ops = pairs_for_recall(curve, tuple(mark_recalls))
        label = name + "".join(
            f", R{t * 100:g}@{ops[f'share@R{t * 100:g}']:.2%}" for t in mark_recalls if ops[f"share@R{t * 100:g}"]
        )
        (line,) = ax.plot(x, y, drawstyle="steps-post", linewidth=2, label=label)
        for t in mark_recalls:
            share = ops[f"share@R{t * 100:g}"]
            if share:  # the operating point itself: its recall may overshoot the target
                reached = recall_at_share(curve, share)
                ax.plot([share], [reached], marker="o", color=line.get_color(), markersize=7)
    for t in mark_recalls:
        ax.axhline(t, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("share of all device x patent pairs kept (global score threshold)")
    ax.set_ylabel("recall on gold pairs")
    ax.set_ylim(0, 1.02)
    return _save(fig, ax, out, title)


def plot_rank_distribution(
    ranks: Mapping[str, pl.DataFrame],
    out: Path,
    title: str = "Rank of each gold patent among all patents of its device",
    ks: Sequence[int] = (10, 100, 500),
) -> Path:
    """ECDF of gold ranks per method (log x) with R@K guides; unranked gold pairs keep the curve below 1."""
    fig, ax = _figure()
    top = 1
    for name, frame in ranks.items():
        r = frame["rank"].drop_nulls().cast(pl.Float64).sort().to_numpy()
        total = max(frame.height, 1)
        if r.size == 0:
            continue
        top = max(top, int(r[-1]))
        recalls = ", ".join(f"R@{k}={np.count_nonzero(r <= k) / total:.2f}" for k in ks)
        ax.step(np.concatenate([[1.0], r]), np.arange(r.size + 1) / total, where="post", linewidth=2,
                label=f"{name} ({recalls})")
    for k in ks:
        ax.axvline(k, color="grey", linestyle=":", linewidth=1)
        ax.text(k, 1.01, f"K={k}", ha="center", va="bottom", fontsize=9, color="grey")
    ax.set_xscale("log")
    ax.set_xlim(1, max(top, max(ks, default=1)) * 1.2)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("rank of the gold patent (1 = best)")
    ax.set_ylabel("share of gold pairs at or above this rank (R@rank)")
    return _save(fig, ax, out, title)


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _save(fig: Figure, ax: Axes, out: Path, title: str) -> Path:
    ax.set_title(title, fontsize=14)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=10, framealpha=0.9)
    out = Path(out)
    with replaced_file(out) as tmp:  # an interrupted run leaves the previous plot, not half a PNG
        fig.savefig(tmp, dpi=DPI, format=out.suffix.lstrip(".") or "png")
    return out
