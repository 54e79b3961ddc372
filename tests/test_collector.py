"""collector: what the imports and the graph's build make is kept out of the cycle
collector's scans during a run, and handed back to it afterwards."""

import gc

import pytest

from pipeline.collector import frozen_for_the_run, uncollected


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


def test_what_the_run_froze_returns_to_the_collector():
    with frozen_for_the_run():
        with uncollected():
            pass
        cycle = []
        cycle.append(cycle)  # made after the freeze: collected as usual
        del cycle
        assert gc.collect() >= 1
    assert gc.get_freeze_count() == 0


def test_what_was_frozen_before_the_run_stays_frozen():
    gc.freeze()
    before = gc.get_freeze_count()
    with frozen_for_the_run(), uncollected():
        pass
    assert gc.get_freeze_count() >= before > 0
