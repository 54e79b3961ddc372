"""Python's cycle collector, kept off the objects that live for the whole run.

TensorFlow, tf.Transform and Beam import about 480,000 objects that the collector
tracks, and building the graph (TensorFlow's lazily loaded modules, tf.Transform's
tracing, pickled DoFns) adds more. Each full collection walks all of them (270 ms after
the imports here), and a 200-image run made 8, about 1.1 s of CPU, the later ones under
the GIL the shard writer needs; the younger generations' collections cost more as well.
None of those objects becomes garbage before the run ends, so they are made without
collections and then frozen (gc.freeze): moved to a generation the collector does not
scan. What the run itself allocates is collected as usual.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def uncollected() -> Iterator[None]:
    """No collection within the block; all that exists at its end is frozen."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def frozen_for_the_run() -> Iterator[None]:
    """On leaving, what was frozen within the block returns to the collector; unless
    something was frozen before it, which cannot be told apart and so stays frozen."""
    frozen_before = gc.get_freeze_count()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()
