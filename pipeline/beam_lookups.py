"""Beam, building, translating and running a graph, asks the same questions again and
again; in a 200-image run (~250 transforms, tf.Transform's included):

- the signature of the same DoFn methods: about 45,000 inspect.signature calls, ~1 s
  of CPU, the largest fixed cost after the imports;
- the pipeline's TypeOptions, on every transform applied: 690 views, each parsing the
  command line anew with its own argparse parser, ~0.5 s of CPU.

cached_lookups() answers each once, for the length of a run. It replaces two of Beam's
internals, core.get_signature (the name core's get_function_args_defaults calls) and
PipelineOptions.view_as, so each is replaced only where the installed Beam has the shape
the cache relies on (core/storage/beam_internals.py):

- core.get_signature is Beam's own typehints.decorators.get_signature, taking (func):
  an inspect.signature with two specialisations that depend on the callable alone. Beam
  2.78 resolves string annotations, but after it, in IOTypeHints.from_callable, which
  calls decorators' own name (not core's) and resolves them per callable: the signatures
  cached here, whose parameters get_function_args_defaults reads, are as they were.
- PipelineOptions.view_as takes (self, cls), and a view shares its options' values
  (view._all_options is the options' own), so one view per class sees every change.

Read on 2.69.0 to 2.78.0, both hold (view_as is the same code on all). Where one does not,
that lookup is left as Beam's, without a word: the cache only saves time.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import types
from collections.abc import Callable, Iterator
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions, TypeOptions
from apache_beam.transforms import core
from apache_beam.typehints import decorators

from image_tfrecords.core.storage.beam_internals import Unfit, attribute, same_parameters


@contextlib.contextmanager
def cached_lookups() -> Iterator[None]:
    """Within the block, Beam's core.get_signature remembers its answer per function
    and PipelineOptions.view_as its view per options object and view class, where the
    installed Beam fits (signature_cache_fits, view_cache_fits).

    Signatures: only for plain functions and methods bound to them, whose signature
    comes from the function alone (a bound method's drops the first parameter, whatever
    the object), and a function is its own identity; other callables (partials, objects
    with __call__, classes) are asked each time, as before.
    Views: a view holds no values of its own; it reads and writes those of the options
    it was made from (PipelineOptions._all_options), so one view per class sees every
    change, as a new one would.
    """
    beam_get_signature, beam_view_as = core.get_signature, PipelineOptions.view_as
    if signature_cache_fits():
        core.get_signature = _remembering(beam_get_signature)
    if view_cache_fits():
        PipelineOptions.view_as = _remembered_views(beam_view_as)
    try:
        yield
    finally:
        core.get_signature, PipelineOptions.view_as = beam_get_signature, beam_view_as


def signature_cache_fits() -> bool:
    """Whether core.get_signature is Beam's own, with the parameters of its cache."""
    try:
        found = attribute(core, "get_signature", "apache_beam.transforms.core")
        if found is not attribute(decorators, "get_signature", "apache_beam.typehints.decorators"):
            raise Unfit("core.get_signature is not typehints.decorators.get_signature")
        same_parameters("core.get_signature", found, _remembering(found))
    except Unfit as unfit:
        _not_cached(unfit)
        return False
    return True


def view_cache_fits() -> bool:
    """Whether PipelineOptions.view_as takes the parameters of its cache, and a view
    shares the values of the options it was made from."""
    try:
        found = attribute(PipelineOptions, "view_as", "PipelineOptions")
        same_parameters("PipelineOptions.view_as", found, _remembered_views(found))
        options = PipelineOptions([])
        view = options.view_as(TypeOptions)
        if attribute(view, "_all_options", "a view") is not attribute(
            options, "_all_options", "PipelineOptions"
        ):
            raise Unfit("a view made by PipelineOptions.view_as keeps values of its own")
    except Unfit as unfit:
        _not_cached(unfit)
        return False
    return True


def _not_cached(unfit: Unfit) -> None:
    # Only a start-up saving is lost: a debug line, for whoever wonders where it went.
    logging.getLogger(__name__).debug("A Beam lookup left uncached: %s", unfit)


def _remembering(
    get_signature: Callable[[Any], inspect.Signature],
) -> Callable[[Any], inspect.Signature]:
    known: dict[Any, inspect.Signature] = {}

    def remembered(func: Any) -> inspect.Signature:  # Beam's parameter name
        if isinstance(func, types.FunctionType):
            key: Any = func
        elif isinstance(func, types.MethodType) and isinstance(func.__func__, types.FunctionType):
            key = ("bound", func.__func__)
        else:
            return get_signature(func)
        if key not in known:
            known[key] = get_signature(func)
        return known[key]

    return remembered


def _remembered_views(
    view_as: Callable[[PipelineOptions, type], PipelineOptions],
) -> Callable[[PipelineOptions, type], PipelineOptions]:
    # By the options' id, with the options kept alive, so that no id is reused.
    known: dict[tuple[int, type], tuple[PipelineOptions, PipelineOptions]] = {}

    def remembered(self: PipelineOptions, cls: type) -> PipelineOptions:  # Beam's names
        key = (id(self), cls)
        if key not in known:
            known[key] = (self, view_as(self, cls))
        return known[key][1]

    return remembered
