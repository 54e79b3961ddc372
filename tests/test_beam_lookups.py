"""cached_signatures: Beam's signature lookups answered once per function, unchanged."""

import functools

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core
from apache_beam.typehints.decorators import get_signature as beams_own

from pipeline.signatures import _remembering, cached_signatures


class _Fn(beam.DoFn):
    def process(self, element, prefix="x", *args, side=None):
        yield prefix + element


class _Callable:
    def __call__(self, a, b=2):
        return a + b


def _function(a, b: int = 1, *rest, key=None):
    return a


def test_the_signatures_are_beams_own_and_beams_lookup_is_restored_after():
    callables = [_function, _Fn().process, _Fn().process, _Fn.process,
                 functools.partial(_function, 1), _Callable(), str.strip, _Fn]
    with cached_signatures():
        assert core.get_signature is not beams_own
        for _ in range(2):
            assert [core.get_signature(c) for c in callables] == [beams_own(c)
                                                                  for c in callables]
    assert core.get_signature is beams_own


def test_a_function_or_bound_method_is_looked_up_once_other_callables_each_time():
    asked = []

    def counting(function):
        asked.append(function)
        return beams_own(function)

    remembered = _remembering(counting)
    partial = functools.partial(_function, 1)
    for _ in range(3):
        remembered(_function)
        remembered(_Fn().process)  # a new bound method, and a new object, each time
        remembered(partial)
    assert asked.count(_function) == 1
    assert sum(getattr(f, "__func__", None) is _Fn.process for f in asked) == 1
    assert asked.count(partial) == 3


def test_a_pipeline_runs_alike_under_it():
    with cached_signatures(), beam.Pipeline(runner=FnApiRunner()) as p:
        result = p | beam.Create(["a", "b"]) | beam.ParDo(_Fn(), prefix="y")
        assert_that(result, equal_to(["ya", "yb"]))
