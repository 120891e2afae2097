"""The stage meter: wall seconds and a peak RSS per named stage, each stage's peak its own."""

from __future__ import annotations

import time

import numpy as np
import pytest

from meddevkg_core import stage_meter
from meddevkg_core.stage_meter import StageMeter

MB = 1 << 20


def _touch(n_mb: int) -> int:
    """Hold n_mb MB of touched (resident) pages for a moment, then free them."""
    block = np.ones(n_mb * MB, np.uint8)
    return int(block[::4096].sum())


def test_each_stage_records_its_seconds_and_a_peak_above_its_start() -> None:
    said: list[str] = []
    meter = StageMeter(said.append)
    assert meter("sleep", time.sleep, 0.05) is None
    assert meter("allocate", _touch, 96) == 96 * MB // 4096  # the stage's result is returned
    assert set(meter.seconds) == set(meter.peak_mb) == set(meter.start_mb) == {"sleep", "allocate"}
    assert meter.seconds["sleep"] >= 0.05
    assert meter.peak_mb["allocate"] >= meter.start_mb["allocate"] + 80
    assert said[0] == "[sleep] ..." and said[-1].startswith("[allocate] ") and "peak RSS" in said[-1]


def test_a_later_stage_is_not_charged_the_peak_of_an_earlier_one() -> None:
    assert stage_meter._reset_peak(), "Linux >= 4.0 lets a process reset its own peak (/proc/self/clear_refs)"
    meter = StageMeter()
    meter("allocate", _touch, 96)
    meter("small", _touch, 1)
    assert meter.peak_mb["small"] < meter.peak_mb["allocate"] - 80


def test_where_the_peak_cannot_be_reset_each_stage_reports_the_process_peak(monkeypatch: pytest.MonkeyPatch
                                                                           ) -> None:
    monkeypatch.setattr(stage_meter, "_reset_peak", lambda: False)
    meter = StageMeter()
    meter("allocate", _touch, 96)
    meter("small", _touch, 1)
    assert meter.peak_mb["small"] >= meter.peak_mb["allocate"]
    assert meter.peak_mb["small"] <= stage_meter.max_rss_mb()


def test_a_failing_stage_raises_and_records_no_seconds_or_peak() -> None:
    meter = StageMeter()
    meter("first", time.sleep, 0)
    with pytest.raises(ZeroDivisionError):
        meter("divide", lambda: 1 / 0)
    assert set(meter.seconds) == set(meter.peak_mb) == {"first"}
    assert "divide" in meter.start_mb  # only its starting RSS, taken before it ran
