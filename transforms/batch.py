"""Small records that travel between the pipeline's steps together, as one element."""

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam


class Batch(tuple):
    """Records that travel as one element and are pickled in one piece.

    Beam's default coder (FastPrimitivesCoder) encodes a plain list or tuple item by item
    and pickles each item that is no primitive (a NamedTuple) on its own, its class named
    again each time: microseconds a record, which for records per example (copies, their
    links) were most of the pipeline process's per-image cost (bench/RESULTS.md, issue
    53). A tuple of its own type is pickled whole, once.
    """

    __slots__ = ()


# Its coder, for the steps that declare a Batch as their output: pickled whole, as above.
# Declared as the tuple of records it holds, Beam would encode the records one by one.
beam.coders.registry.register_coder(Batch, beam.coders.PickleCoder)


def batches_by_key(pairs: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Batch]]:
    """(key, value) pairs -> (key, a Batch of its values in their order) per key."""
    grouped: dict[Any, list[Any]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    return ((key, Batch(values)) for key, values in grouped.items())
