"""What the shard writers have done so far, for a live display in the launching process.

Beam's counters (images/written, images/rejected) reach a runner's UI, but the
DirectRunner's FnApiRunner reports them only when the run ends. Its DoFns run in the
launcher's own process, so they tell a listener the launcher installs here; elsewhere
(Dataflow, Flink, Spark workers) nobody listens and these calls cost a check each.
"""

import contextlib
from collections.abc import Iterator
from typing import Protocol


class Listener(Protocol):
    def planned(self, rows: int) -> None:
        """`rows` more rows are on their way to the shard writers."""

    def handled(self, rows: int, dead_letters: int) -> None:
        """The writers are done with `rows` more rows, `dead_letters` of them rejected."""


_listener: Listener | None = None


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    global _listener
    _listener = listener
    try:
        yield
    finally:
        _listener = None


def planned(rows: int) -> None:
    if _listener is not None:
        _listener.planned(rows)


def handled(rows: int, dead_letters: int = 0) -> None:
    if _listener is not None:
        _listener.handled(rows, dead_letters)
