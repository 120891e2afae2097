"""Wall seconds and peak resident memory of named stages, each measured on its own.

A benchmark of a pipeline's stages run in one process needs each stage's own peak RSS, not the
process's: the peak is reset at each stage start through /proc/self/clear_refs (Linux), falling
back to the process peak (getrusage) where that is not allowed.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable

from meddevkg_core.c_heap import release_free_heap


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def rss_mb() -> float:
    kb = _status_kb("VmRSS")
    return round(kb / 1024, 1) if kb is not None else float("nan")


def max_rss_mb() -> float:
    """Peak RSS of the whole process so far (getrusage; never reset)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


class StageMeter:
    """Wall seconds and peak RSS of named stages (peak = VmHWM after a reset at the stage start).

    Each stage starts with the C heap's free pages returned to the OS (`release_free_heap`), so a
    stage is not charged for memory an earlier one freed but the allocator kept resident (a
    pipeline running its stages as separate Dagster steps starts each in a fresh process)."""

    def __init__(self, progress: Callable[[str], None] | None = None):
        self.seconds: dict[str, float] = {}
        self.peak_mb: dict[str, float] = {}
        self.start_mb: dict[str, float] = {}
        self.progress = progress or (lambda _: None)

    def __call__(self, name: str, fn: Callable, *args, **kwargs):
        self.progress(f"[{name}] ...")
        release_free_heap()
        reset = _reset_peak()
        self.start_mb[name] = rss_mb()
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self.seconds[name] = round(time.perf_counter() - start, 3)
        hwm = _status_kb("VmHWM") if reset else None
        self.peak_mb[name] = round(hwm / 1024, 1) if hwm is not None else max_rss_mb()
        self.progress(f"[{name}] {self.seconds[name]:.1f}s, peak RSS {self.peak_mb[name]:.0f} MB")
        return out
