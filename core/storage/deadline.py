"""Calls that may hang in a storage client's retries, run with one deadline for all."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

_T = TypeVar("_T")


def within_deadline(
    calls: Sequence[Callable[[], _T]], seconds: float, name: str
) -> list[_T | None]:
    """Runs every call at once, each in a thread named `name`; returns their results in
    order, None for a call that raised or had not returned after `seconds`.

    Daemon threads: a call still retrying when the deadline passes keeps neither the
    caller nor the process waiting (a thread pool's exit would wait for it).
    """
    results: list[_T | None] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except Exception:  # noqa: BLE001, S110 - the caller counts a failed call as missing
            pass

    threads = [
        threading.Thread(target=run, args=(i,), name=name, daemon=True) for i in range(len(calls))
    ]
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    # A late call may still write its slot; the caller gets what was there in time.
    return list(results)
