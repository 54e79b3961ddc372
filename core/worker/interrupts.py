"""SIGINT (Ctrl-C) and SIGTERM stop a run at any point, in one way.

Within `signals_stop()` (the whole `convert` command, from before its imports: a Python
API call's job only, pipeline/stopping.py) the first of those signals raises Stopped in
the main thread, where Python runs signal handlers, and the launcher says in one line
what the run kept and exits 130 (143 for SIGTERM). At that signal, before anything
unwinds:

- the run's worker processes (core/worker/pool.py, in a process group of their own, so that a
  terminal's Ctrl-C reaches only the launcher) are killed, and the pool starts no other
  and takes no other task: the run stops writing at once;
- within `held()` (publishing, transforms/publish.py; the few writes that start a run's
  folder) the stop waits until the block ends: an output is published whole or not at
  all.

A second signal ends the process at once, in one line and without a traceback (its
worker processes killed first); only while a cluster's job is being cancelled
(`second_signal()`, pipeline/stopping.py) it stops that wait instead.

No Beam, TensorFlow or Pillow here: the command installs this before it imports them.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Set at the first signal until the block ends: no worker process is started again or
# given a task while it is set.
STOPPING = threading.Event()
_NOTHING_WRITTEN = "nothing was written"
REAP_WAIT_S = 1.0  # for a killed worker process to be gone (it takes milliseconds)


class Stopped(KeyboardInterrupt):
    """The launcher was told to stop; `outcome` says what became of the job. A
    KeyboardInterrupt, so that no `except Exception` of Beam's holds it up."""

    # Beam's DoFnRunner re-raises an exception so marked as it is: unlogged, not wrapped
    # in a RuntimeError that would read as the job's failure.
    _tagged_with_step = True

    def __init__(self, reason: str, exit_code: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.exit_code = exit_code  # as a shell gives a command a signal ended: 128 + N
        self.outcome = "the job was not submitted"

    @classmethod
    def by(cls, signum: int) -> Stopped:
        return cls(f"stopped by {signal.Signals(signum).name}", 128 + signum)

    def said(self) -> str:
        """The stop and what it left, in a line: its message where the launcher gave it
        one (pipeline/run.py), else (it came before the run's folder) that nothing was
        written."""
        if self.args != (self.reason,):
            return str(self)
        return f"{self.reason} before the run started; {_NOTHING_WRITTEN}"

    def again(self) -> Stopped:
        """The same stop, raised anew (in another thread)."""
        return Stopped(self.reason, self.exit_code)


class _Stop:
    """The state of the one handler, for the whole process."""

    def __init__(self) -> None:
        self.installed = False
        self.first: Stopped | None = None  # the stop raised at the first signal
        self.injected: Stopped | None = None  # what raise_in_main_thread raises
        self.holding: list[str] = []  # the steps that hold the stop until they end
        self.held: Stopped | None = None  # the stop they hold
        self.on_second: Callable[[], None] | None = None
        self.processes: set[subprocess.Popen] = set()
        self.kept = _NOTHING_WRITTEN  # what the run keeps, said on an exit at once


_stop = _Stop()


@contextlib.contextmanager
def signals_stop() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM stop the run (see the module). In the main
    thread only, where Python runs signal handlers; elsewhere, and within an outer block,
    nothing changes."""
    if _stop.installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _on_signal) for signum in SIGNALS}
    _stop.installed = True
    try:
        yield
    finally:
        _stop.installed = False
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        # A Python API call after a stopped one runs.
        STOPPING.clear()
        _stop.first = _stop.injected = _stop.held = None
        _stop.kept = _NOTHING_WRITTEN


def stopped() -> Stopped | None:
    """The stop under way, if a signal came."""
    return _stop.first


def raise_in_main_thread(error: Stopped) -> None:
    """Stops the run with `error`, from any thread, as a signal would."""
    _stop.injected = error
    _thread.interrupt_main(signal.SIGTERM)


def keeping(what: str) -> None:
    """Says what the run keeps if a second signal ends it at once (its temp folder)."""
    _stop.kept = what


@contextlib.contextmanager
def second_signal(call: Callable[[], None]) -> Iterator[None]:
    """Within the block, a second signal calls `call` instead of ending the process."""
    _stop.on_second = call
    try:
        yield
    finally:
        _stop.on_second = None


@contextlib.contextmanager
def held(step: str) -> Iterator[None]:
    """A stop that comes within the block is raised when it ends, so that `step` (e.g.
    "publishing", said if a second signal cuts it short) is done whole."""
    # No lock: the handler runs between two bytecodes of the main thread, which may hold it.
    _stop.holding.append(step)
    try:
        yield
    finally:
        _stop.holding.remove(step)
        stop = _stop.held if not _stop.holding else None
        if stop is not None:
            _stop.held = None
            raise stop


def end_with_the_run(process: subprocess.Popen) -> None:
    """`process` is killed when the run is stopped (the pool's workers)."""
    _stop.processes.add(process)


def forget(process: subprocess.Popen) -> None:
    _stop.processes.discard(process)


def raise_if_stopping() -> None:
    """Raises the stop under way, in the thread that calls (a pool's waiting thread)."""
    first = _stop.first  # None once the block has ended
    if STOPPING.is_set() and first is not None:
        raise first.again()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if STOPPING.is_set():
        if _stop.on_second is not None:
            _stop.on_second()
            return
        _exit_at_once(signum)
    stop = _stop.first = _stop.injected or Stopped.by(signum)
    STOPPING.set()  # after `first`, which the pool's threads raise once it is set
    _kill_processes()
    if _stop.holding:
        _stop.held = stop
        return
    raise stop


def _kill_processes() -> None:
    processes = list(_stop.processes)
    for process in processes:
        with contextlib.suppress(OSError):
            process.kill()
    for process in processes:  # reaped: none is left a zombie when the launcher exits
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            process.wait(REAP_WAIT_S)


def _exit_at_once(signum: int) -> None:
    """Ends the process now, in one line: no unwinding, no traceback."""
    _kill_processes()
    cut = f"; {_stop.holding[-1]} was cut short" if _stop.holding else ""
    line = f"error: stopped at once by a second {signal.Signals(signum).name}{cut}; {_stop.kept}\n"
    with contextlib.suppress(OSError):
        os.write(2, line.encode(errors="replace"))
    os._exit(128 + signum)
