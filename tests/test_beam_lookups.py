"""cached_lookups: Beam's signature and options-view lookups answered once, unchanged,
where the installed Beam has the shape the caches rely on; Beam's own left, silently,
where it has another."""

import functools
import logging

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, TypeOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core
from apache_beam.typehints.decorators import IOTypeHints
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


class _Annotated(beam.DoFn):
    # Strings, as `from __future__ import annotations` leaves every annotation: Beam 2.78
    # resolves them in IOTypeHints.from_callable, after get_signature.
    def process(self, element: "str", times: "int" = 2) -> "list[str]":
        yield element * times


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
        _Annotated().process,
        _Annotated().process,
    ]
    hints = [IOTypeHints.from_callable(c) for c in callables]
    with cached_lookups():
        assert core.get_signature is not beams_own
        for _ in range(2):
            assert [core.get_signature(c) for c in callables] == [beams_own(c) for c in callables]
            assert [IOTypeHints.from_callable(c) for c in callables] == hints
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


def test_the_installed_beam_has_the_shape_both_caches_rely_on():
    assert beam_lookups.signature_cache_fits()
    assert beam_lookups.view_cache_fits()
    options = PipelineOptions([])
    with cached_lookups():
        assert core.get_signature is not beams_own
        assert options.view_as(TypeOptions) is options.view_as(TypeOptions)


def _get_signature_of_another_shape(func, follow_wrapped=True):
    return beams_own(func)


def _view_as_of_another_shape(self, cls, copy=False):
    return beams_view_as(self, cls)


def _view_as_keeping_its_own_values(self, cls):
    view = beams_view_as(self, cls)
    view._all_options = dict(view._all_options)
    return view


def _a_wrapper_of_get_signature(func):
    return beams_own(func)


@pytest.mark.parametrize(
    "owner, name, other",
    [
        (core, "get_signature", _get_signature_of_another_shape),
        (core, "get_signature", _a_wrapper_of_get_signature),  # not Beam's own: unknown
        (PipelineOptions, "view_as", _view_as_of_another_shape),
        (PipelineOptions, "view_as", _view_as_keeping_its_own_values),
    ],
    ids=["signature-parameters", "signature-not-beams", "view-parameters", "view-own-values"],
)
def test_a_lookup_of_another_shape_is_left_as_beams_silently_and_the_other_cached(
    monkeypatch, caplog, owner, name, other
):
    monkeypatch.setattr(owner, name, other)
    options = PipelineOptions([])
    with caplog.at_level(logging.WARNING), cached_lookups():
        assert getattr(owner, name) is other
        if owner is core:  # the views still cached
            assert options.view_as(TypeOptions) is options.view_as(TypeOptions)
        else:  # the signatures still cached
            assert core.get_signature is not beams_own
    assert getattr(owner, name) is other
    assert not caplog.records  # a start-up saving, not worth a word
