"""Progress of long stages (encoding, extraction, scoring), for logs a person watches.

Core loops call `progress(done, total)`; the caller decides where lines go (the CLI prints,
Dagster assets log). Throttled, so a million small steps still make a handful of lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Progress = Callable[[int, int], None]
"""progress(done, total): `done` of `total` units (documents, texts, devices) are finished."""


def no_progress(done: int, total: int) -> None:
    """The default: report nothing."""


class ThrottledReporter:
    """Emit `stage: done/total (pct), rate/s, ~eta` at most every `every_seconds`, and at the end."""

    def __init__(self, stage: str, emit: Callable[[str], None], unit: str = "items", every_seconds: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stage, self.emit, self.unit, self.every = stage, emit, unit, every_seconds
        self._clock = clock
        self._start = clock()
        self._last: float | None = None

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        finished = done >= total
        if not finished and self._last is not None and now - self._last < self.every:
            return
        if not finished and self._last is None and now - self._start < self.every:
            return
        self._last = now
        elapsed = max(now - self._start, 1e-9)
        rate = done / elapsed
        eta = f", ~{(total - done) / rate:.0f}s left" if rate > 0 and not finished else ""
        pct = 100.0 * done / total if total else 100.0
        self.emit(f"{self.stage}: {done:,}/{total:,} {self.unit} ({pct:.0f}%), {rate:,.1f} {self.unit}/s{eta}")


def stage_reporter(stage: str, emit: Callable[[str], None], unit: str) -> ThrottledReporter:
    """Progress inside a named stage, its lines opening as the stage's own do (`[stage]: 10/20 ...`)."""
    return ThrottledReporter(f"[{stage}]", emit, unit=unit)
