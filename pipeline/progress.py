"""Live progress of a run: a tqdm bar on a terminal, a line every few percent in a log,
at most one every few seconds (none for a run that ends within them).

Local runs only: the DirectRunner's shard writers run in this process and report each
row they are done with (transforms/live_progress.py). A remote runner's workers cannot
reach this process; its own UI shows the job and Beam's counters.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from apache_beam.options.pipeline_options import PipelineOptions
from tqdm import tqdm

from image_tfrecords.core.launcher import console
from image_tfrecords.pipeline.options import (
    ConvertOptions,
    runs_on_the_direct_runner,
    writes_shards_in_this_process,
)
from image_tfrecords.transforms import live_progress

STEP_PERCENT = 5  # a line in a log at every 5% of the rows...
LINE_INTERVAL_S = 5.0  # ...and at most one every 5 s, counted from the first row written
REMOTE_NOTE = (
    "progress: shown by the runner's UI for the job; the counters to watch are "
    "images/written and images/rejected (Beam metrics, namespace images), and "
    "with --resume shards/resumed"
)
WORKER_PROCESSES_NOTE = (
    "progress: not shown: with --direct_running_mode multi_processing "
    "the shards are written in the DirectRunner's worker processes"
)


@contextlib.contextmanager
def shown_progress(options: PipelineOptions) -> Iterator[None]:
    """Within the block, the run's progress is shown on stderr, unless --quiet.

    Enter it before the console filter (console.py), so that the bar writes to the
    terminal itself.
    """
    if options.view_as(ConvertOptions).quiet:
        yield
        return
    if not writes_shards_in_this_process(options):
        print(
            WORKER_PROCESSES_NOTE if runs_on_the_direct_runner(options) else REMOTE_NOTE,
            file=sys.stderr,
            flush=True,
        )
        yield
        return
    with _stderr_past_the_console_filter() as out:
        progress = LiveProgress(out, terminal=out.isatty())
        try:
            with live_progress.listening(progress):
                yield
        finally:
            progress.close()


@contextlib.contextmanager
def _stderr_past_the_console_filter() -> Iterator[TextIO]:
    """The process's stderr through a descriptor of its own, which the console filter
    (it redirects descriptor 2) does not reach; or sys.stderr where that is something
    else (a notebook's stream, pytest's capture), which the filter does not reach either."""
    if console.unescaped(sys.stderr) is not sys.__stderr__:
        yield sys.stderr
        return
    # (The bar's own text is numbers and words of ours: nothing for TerminalSafe to do.)
    with os.fdopen(os.dup(sys.stderr.fileno()), "w") as out:
        yield out


class LiveProgress:
    """A live_progress.Listener that shows rows done of rows planned, their rate, the
    time left and the dead letters so far; the rate and time left count from the first
    row written, not from the start-up."""

    def __init__(
        self, out: TextIO, terminal: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._out = out
        self._terminal = terminal
        self._clock = clock
        self._lock = threading.Lock()  # writers may run on several threads
        self._planned = self._done = self._dead_letters = 0
        self._started: float | None = None
        self._bar: tqdm | None = None
        self._next_step = STEP_PERCENT
        self._next_line_at = 0.0

    def planned(self, rows: int) -> None:
        with self._lock:
            self._planned += rows
            if self._bar is not None:
                self._bar.total = self._planned

    def handled(self, rows: int, dead_letters: int) -> None:
        with self._lock:
            if self._started is None:
                self._started = self._clock()
                self._next_line_at = self._started + LINE_INTERVAL_S
                if self._terminal:
                    self._bar = tqdm(
                        total=self._planned,
                        file=self._out,
                        unit=" rows",
                        desc="writing",
                        dynamic_ncols=True,
                    )
            self._done += rows
            self._dead_letters += dead_letters
            if self._bar is not None:
                self._bar.set_postfix_str(f"dead letters: {self._dead_letters:,}", refresh=False)
                self._bar.update(rows)
                if self._done >= self._planned:  # done: the bar's last state, before the table
                    self._bar.close()
            elif self._percent() >= self._next_step and self._clock() >= self._next_line_at:
                self._print_line()
                self._next_step = (self._percent() // STEP_PERCENT + 1) * STEP_PERCENT
                self._next_line_at = self._clock() + LINE_INTERVAL_S

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.close()

    def _percent(self) -> int:
        return 100 * self._done // self._planned if self._planned else 100

    def _print_line(self) -> None:
        seconds = self._clock() - self._started
        rate = self._done / seconds if seconds > 0 else 0.0
        left = (self._planned - self._done) / rate if rate else 0.0
        print(
            f"progress: {self._done:,}/{self._planned:,} rows ({self._percent()}%), "
            f"{rate:,.0f} rows/s, {left:,.0f} s left, dead letters: {self._dead_letters:,}",
            file=self._out,
            flush=True,
        )
