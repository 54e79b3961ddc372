"""cached_lookups: Beam's signature and options-view lookups answered once, unchanged."""

import functools

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, TypeOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core
from apache_beam.typehints.decorators import get_signature as beams_own

from image_tfrecords.pipeline import beam_lookups
from image_tfrecords.pipeline.beam_lookups import _remembering, cached_lookups

beams_view_as = PipelineOptions.view_as


class _Fn(beam.DoFn):
    def process(self, element, prefix="x", *args, side=None):
        yield prefix + element


class _Callable:
    def __call__(self, a, b=2):
        return a + b


def _function(a, b: int = 1, *rest, key=None):
    return a


def test_the_signatures_are_beams_own_and_beams_lookups_are_restored_after():
    callables = [
        _function,
        _Fn().process,
        _Fn().process,
        _Fn.process,
        functools.partial(_function, 1),
        _Callable(),
        str.strip,
        _Fn,
    ]
    with cached_lookups():
        assert core.get_signature is not beams_own
        for _ in range(2):
            assert [core.get_signature(c) for c in callables] == [beams_own(c) for c in callables]
    assert core.get_signature is beams_own
    assert PipelineOptions.view_as is beams_view_as


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
    with cached_lookups(), beam.Pipeline(runner=FnApiRunner()) as p:
        result = p | beam.Create(["a", "b"]) | beam.ParDo(_Fn(), prefix="y")
        assert_that(result, equal_to(["ya", "yb"]))


def test_one_view_per_class_sees_and_makes_every_change_as_a_new_view_would():
    options = PipelineOptions(["--no_pipeline_type_check"])
    other = PipelineOptions([])
    with cached_lookups():
        types = options.view_as(TypeOptions)
        assert options.view_as(TypeOptions) is types
        assert other.view_as(TypeOptions) is not types
        assert types.pipeline_type_check is False
        assert other.view_as(TypeOptions).pipeline_type_check is True
        options.view_as(TypeOptions).runtime_type_check = True
        assert types.runtime_type_check is True
    assert options.view_as(TypeOptions) is not types
    assert options.view_as(TypeOptions).runtime_type_check is True


def test_it_patches_only_the_beam_it_was_read_against(monkeypatch):
    # Fails when the pinned Beam moves: read its core.get_signature and
    # PipelineOptions.view_as again before moving VERIFIED_ON.
    assert beam.__version__ == beam_lookups.VERIFIED_ON
    monkeypatch.setattr(beam, "__version__", "9.99.0")
    with cached_lookups():
        assert core.get_signature is beams_own
        assert PipelineOptions.view_as is beams_view_as
