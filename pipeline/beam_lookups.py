"""Beam, building, translating and running a graph, asks the same questions again and
again; in a 200-image run (~250 transforms, tf.Transform's included):

- the signature of the same DoFn methods: about 45,000 inspect.signature calls, ~1 s
  of CPU, the largest fixed cost after the imports;
- the pipeline's TypeOptions, on every transform applied: 690 views, each parsing the
  command line anew with its own argparse parser, ~0.5 s of CPU.

cached_lookups() answers each once, for the length of a run. It replaces two of Beam's
internals, so it does so only on the Beam version it was read against (VERIFIED_ON);
on any other it changes nothing, and tests/test_beam_lookups.py fails until someone has
read the new version's get_signature and view_as again and moved VERIFIED_ON.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

import apache_beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import core

VERIFIED_ON = "2.77.0"  # the Beam whose core.get_signature and view_as this was read against


@contextlib.contextmanager
def cached_lookups() -> Iterator[None]:
    """Within the block, Beam's core.get_signature remembers its answer per function
    and PipelineOptions.view_as its view per options object and view class.

    Signatures: only for plain functions and methods bound to them, whose signature
    comes from the function alone (a bound method's drops the first parameter, whatever
    the object), and a function is its own identity; other callables (partials, objects
    with __call__, classes) are asked each time, as before.
    Views: a view holds no values of its own; it reads and writes those of the options
    it was made from (PipelineOptions._all_options), so one view per class sees every
    change, as a new one would.
    """
    if apache_beam.__version__ != VERIFIED_ON:
        yield
        return
    beam_get_signature, beam_view_as = core.get_signature, PipelineOptions.view_as
    core.get_signature = _remembering(beam_get_signature)
    PipelineOptions.view_as = _remembered_views(beam_view_as)
    try:
        yield
    finally:
        core.get_signature, PipelineOptions.view_as = beam_get_signature, beam_view_as


def _remembering(
    get_signature: Callable[[Any], inspect.Signature],
) -> Callable[[Any], inspect.Signature]:
    known: dict[Any, inspect.Signature] = {}

    def remembered(function: Any) -> inspect.Signature:
        if isinstance(function, types.FunctionType):
            key: Any = function
        elif isinstance(function, types.MethodType) and isinstance(
            function.__func__, types.FunctionType
        ):
            key = ("bound", function.__func__)
        else:
            return get_signature(function)
        if key not in known:
            known[key] = get_signature(function)
        return known[key]

    return remembered


def _remembered_views(
    view_as: Callable[[PipelineOptions, type], PipelineOptions],
) -> Callable[[PipelineOptions, type], PipelineOptions]:
    # By the options' id, with the options kept alive, so that no id is reused.
    known: dict[tuple[int, type], tuple[PipelineOptions, PipelineOptions]] = {}

    def remembered(options: PipelineOptions, cls: type) -> PipelineOptions:
        key = (id(options), cls)
        if key not in known:
            known[key] = (options, view_as(options, cls))
        return known[key][1]

    return remembered
