"""Beam, building, translating and running a graph, asks Python for the signature of the
same DoFn methods again and again: about 45,000 inspect.signature calls in a 200-image
run (~250 transforms, tf.Transform's included), about 1 s of CPU, the largest fixed
cost after the imports. cached_signatures() answers each function's question once.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

from apache_beam.transforms import core


@contextlib.contextmanager
def cached_signatures() -> Iterator[None]:
    """Within the block, Beam's core.get_signature remembers its answer per function.

    Only for plain functions and methods bound to them: their signature comes from the
    function alone (a bound method's drops the first parameter, whatever the object),
    and a function is its own identity. Other callables (partials, objects with
    __call__, classes) are asked each time, as before.
    """
    beam_get_signature = core.get_signature
    core.get_signature = _remembering(beam_get_signature)
    try:
        yield
    finally:
        core.get_signature = beam_get_signature


def _remembering(get_signature: Callable[[Any], inspect.Signature]
                 ) -> Callable[[Any], inspect.Signature]:
    known: dict[Any, inspect.Signature] = {}

    def remembered(function: Any) -> inspect.Signature:
        if isinstance(function, types.FunctionType):
            key: Any = function
        elif (isinstance(function, types.MethodType)
              and isinstance(function.__func__, types.FunctionType)):
            key = ("bound", function.__func__)
        else:
            return get_signature(function)
        if key not in known:
            known[key] = get_signature(function)
        return known[key]

    return remembered
