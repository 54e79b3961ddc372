"""collector: what the imports and the graph's build make is kept out of the cycle
collector's scans during a run, and handed back to it afterwards."""

import gc
import weakref

import pytest

from image_tfrecords.pipeline.collector import frozen_for_the_run, uncollected


@pytest.fixture(autouse=True)
def collector_restored():
    assert gc.get_freeze_count() == 0, "another test left objects frozen"
    yield
    gc.unfreeze()
    gc.enable()


def test_no_collection_within_the_block_and_what_it_made_is_frozen():
    with uncollected():
        assert not gc.isenabled()
        made_within = [[]]
    assert gc.isenabled()
    # Frozen: in none of the generations the collector scans.
    assert gc.get_freeze_count() > 0
    assert not any(seen is made_within for seen in gc.get_objects())


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    with uncollected():
        pass
    assert not gc.isenabled()


class Node:
    """A cycle of one: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.itself = self


def garbage_cycle() -> weakref.ref:
    """A weak reference to a cycle nothing else holds."""
    return weakref.ref(Node())


def test_what_the_run_froze_returns_to_the_collector():
    with frozen_for_the_run():
        with uncollected():
            made_within = garbage_cycle()
        made_after = garbage_cycle()
        gc.collect()
        assert made_within() is not None  # frozen: not even a full collection frees it
        assert made_after() is None  # made after the freeze: collected as usual
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert made_within() is None  # back with the collector


def test_what_was_frozen_before_the_run_stays_frozen():
    gc.freeze()
    before = gc.get_freeze_count()
    with frozen_for_the_run(), uncollected():
        pass
    # Not unfrozen (the count would be 0); a frozen object whose last reference goes
    # (in a thread an earlier test left) still leaves, so the count may fall a little.
    assert gc.get_freeze_count() > 0.9 * before > 0
