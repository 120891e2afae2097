"""gc_paused: the cyclic collector off inside, and on exit as it was found, however the block ends."""

import gc

import pytest

from meddevkg_core.gc_pause import gc_paused


@pytest.fixture(autouse=True)
def _gc_restored():
    """The collector on, with its thresholds, after each test, whatever the test did."""
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.enable()


def test_collection_is_paused_inside_and_resumed_after():
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_found_off_is_left_off():
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_nested_pause_leaves_the_outer_one_paused():
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_collection_resumes_when_the_block_raises():
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_the_thresholds_are_untouched():
    before = gc.get_threshold()
    with gc_paused():
        assert gc.get_threshold() == before
    assert gc.get_threshold() == before
