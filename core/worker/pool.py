"""Worker processes that each run whole tasks, so that one run uses every core.

The pool runs tasks and knows nothing of what they do: a task is a small picklable object
with a name and a run(context, progress) (`Task`); the pool hands it to an idle worker with
the `context` every task of the run shares, and gets back what it returns. Its callers
(transforms/in_workers.py) hand it a shard or part to write (shard_writer.py), parts to
join (shard_parts.py), a chunk of the manifest to parse (row_tasks.py), so the
pipeline's process never touches an image. Workers import what their tasks need,
Pillow and this package's core, never TensorFlow, and Beam's filesystems only when a path
is remote (storage.py): a worker takes about 40 MB and starts in ~0.2 s here.

They are started with a fresh interpreter (subprocess, a fork followed by exec), the only
start method that is safe in a process where TensorFlow's and gRPC's threads already run:
a plain fork copies locks those threads may hold, and multiprocessing's spawn and
forkserver would re-import the launcher's __main__ (TensorFlow) in every worker.

Isolation: a task tells its progress which of its items it is on (progress.on_item: the
shard writer, the image it decodes), and the worker marks it in memory it shares with
the pipeline's process. When the worker dies on an item (a segfault in a C library, the
kernel's OOM killer) or stays on one past the pool's time limit, it is replaced and the
task run again from the start, leaving that item out (`Lost`, task.leaving_out(): the
shard writer dead-letters the image as decode_crash or decode_timeout, which gives the
bytes the shard would have had had the image been rejected in place). The same memory
carries the rows done so far, for the live progress display.

Stopping (core/worker/interrupts.py): the workers run in a process group of their own, so a
terminal's Ctrl-C, sent to the launcher's group, reaches only the launcher (a worker
that got it in its imports would print a traceback); the launcher kills them when it is
stopped, a worker ends itself once its launcher is gone (killed, it could stop none), and a
pool that is stopping starts no other worker and runs no other task.
"""

from __future__ import annotations

import concurrent.futures
import mmap
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, NamedTuple, Protocol

from image_tfrecords import CODE_FOLDER
from image_tfrecords.core.worker import interrupts

_READY = "ready"  # a worker's first message, once its imports and setup are done
_START_SECONDS = 120.0  # for a worker's imports, on a machine busy starting many
_WATCH_SECONDS = 0.2  # how often a waiting pipeline thread reads the worker's progress
# The shared memory: the place of the item the task is on (-1: none), rows done, rows of
# those dead-lettered.
_STATE = struct.Struct("<qqq")
_NO_ITEM = -1

# Called with (rows, dead letters) as the workers get through rows: live_progress.handled.
ProgressSink = Callable[[int, int], None]


class Lost(NamedTuple):
    """The item a task was on when its worker died or overran: its place (None: the task
    was on no item), and how the process ended ("killed by SIGKILL, ..."; None: it stayed
    on the item past `timeout_s` and was stopped)."""

    place: int | None
    death: str | None
    timeout_s: float


class Task(Protocol):
    """What a worker is handed (pickled): run(context, progress) runs it, with the
    `context` the pool's caller gives every task and a progress that has on_item(place)
    and handled(rows, dead_letters); what it returns goes back. A task that tells
    on_item() of an item has leaving_out(lost: Lost) too, which gives the task without
    that item, to run again after its worker died or overran on it."""

    @property
    def name(self) -> str: ...

    def run(self, context: Any, progress: Any) -> Any: ...


class _Failed:
    """A worker's answer when its task raised: the error, re-raised in the pipeline's
    process (pickled when it can be, else as its text)."""

    def __init__(self, error: BaseException, task: str) -> None:
        self.text = "".join(traceback.format_exception(error))
        self.error = error if _pickles(error) else None
        self.task = task

    def raise_it(self) -> None:
        if self.error is not None:
            self.error.add_note(f"raised in the worker process running {self.task}:\n{self.text}")
            raise self.error
        raise RuntimeError(f"a worker process failed running {self.task}:\n{self.text}")


def _pickles(error: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - any error that does not survive pickling
        return False
    return True


class WorkerPool:
    """`processes` worker processes; run() runs a task in one of them.

    `timeout_s`: how long a task may stay on one item (Lost). `setup`: what each worker
    process runs once, before its first task (pickled: a module's function, or a partial
    of one).
    Thread-safe: each call takes an idle worker for its whole task, so at most
    `processes` tasks run at once and a call waits for a free worker.
    """

    def __init__(
        self, processes: int, timeout_s: float, setup: Callable[[], object] | None = None
    ) -> None:
        if processes < 1:
            raise ValueError("a worker pool needs at least one process")
        self._timeout_s = timeout_s
        self._workers = [_Worker(setup) for _ in range(processes)]
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        try:
            for worker in self._workers:  # all start at once; each waits only for its own
                worker.start()
            for worker in self._workers:
                worker.wait_ready()
                self._idle.put(worker)
        except BaseException:
            # One that did not start (killed by a stop while the others were still being
            # started, as a run stopped before its job may do): none is left running.
            self.close()
            raise

    def run(self, task: Task, context: Any, progress: ProgressSink | None = None) -> Any:
        """What `task` returns, run with `context` (the run's settings) in a worker."""
        worker = self._idle.get()
        try:
            return worker.run(task, context, self._timeout_s, _Relay(progress))
        finally:
            self._idle.put(worker)

    def pids(self) -> list[int]:
        """The workers' process ids (tests kill them)."""
        return [worker.pid for worker in self._workers if worker.pid is not None]

    def close(self) -> None:
        for worker in self._workers:
            worker.close()


class _Worker:
    """One worker process and the two pipes to it; replaced at once after a crash or a
    timeout, so the pool stays whole."""

    def __init__(self, setup: Callable[[], object] | None) -> None:
        self._setup = setup
        self._process: subprocess.Popen | None = None
        self._inbox: Connection | None = None  # what the worker sends
        self._outbox: Connection | None = None  # what the worker reads
        self._answered = select.poll()  # on _inbox: cheaper than Connection.poll's selector
        # Kept across replacements: a new process maps the same memory.
        self._state_fd = _shared_memory_fd()
        os.ftruncate(self._state_fd, mmap.PAGESIZE)
        self._state = mmap.mmap(self._state_fd, mmap.PAGESIZE)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> None:
        worker_reads, outbox = os.pipe()
        inbox, worker_writes = os.pipe()
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [CODE_FOLDER, environment.get("PYTHONPATH")])
        )
        try:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "image_tfrecords.core.worker.pool",
                    str(worker_reads),
                    str(worker_writes),
                    str(self._state_fd),
                ],
                stdin=subprocess.DEVNULL,
                process_group=0,
                pass_fds=(worker_reads, worker_writes, self._state_fd),
                env=environment,
            )
            interrupts.end_with_the_run(self._process)
        finally:
            os.close(worker_reads)
            os.close(worker_writes)
        self._inbox = Connection(inbox, writable=False)
        self._outbox = Connection(outbox, readable=False)
        self._answered = select.poll()
        self._answered.register(inbox, select.POLLIN)
        try:  # run by the worker before it says it is ready: all start at once
            self._outbox.send(self._setup)
        except OSError:  # it died at once: wait_ready() says so
            pass

    def wait_ready(self) -> None:
        try:
            ready = self._answers_within(_START_SECONDS) and self._inbox.recv() == _READY
        except (EOFError, OSError):  # it failed to start; its traceback is on stderr
            ready = False
        if not ready:
            self._process.kill()
            self.stop()
            raise RuntimeError(
                "a worker process did not start (python -m "
                "image_tfrecords.core.worker.pool); see its error above"
            )

    def run(self, task: Task, context: Any, timeout_s: float, progress: _Relay) -> Any:
        """The task's outcome. After a crash or a timeout on an item, the task is run
        again by the replacement, leaving that item out; a worker that dies while on no
        item gets the task once more, then the run fails."""
        died_elsewhere = False
        while True:
            interrupts.raise_if_stopping()  # its worker was killed: no attempt is lost
            try:
                _STATE.pack_into(self._state, 0, _NO_ITEM, 0, 0)
                self._outbox.send((task, context))
            except OSError:  # it died while idle: the task never reached it
                self._replace()
                continue
            answer = self._await_answer(timeout_s, progress)
            if isinstance(answer, _Failed):
                answer.raise_it()
            if not isinstance(answer, Lost):
                progress.so_far(*_STATE.unpack_from(self._state, 0)[1:])  # its last rows
                return answer
            if answer.place is None:
                if died_elsewhere:
                    raise RuntimeError(
                        f"the worker process running {task.name} died twice "
                        f"while on no item ({answer.death})"
                    )
                died_elsewhere = True
                continue
            task = task.leaving_out(answer)

    def _await_answer(self, timeout_s: float, progress: _Relay) -> Any | _Failed | Lost:
        """The worker's answer, or the item it was on when it died or overran."""
        watch = min(_WATCH_SECONDS, timeout_s / 4)
        place, since = self._item(), time.monotonic()
        while not self._answers_within(watch):
            _, rows, dead_letters = _STATE.unpack_from(self._state, 0)
            progress.so_far(rows, dead_letters)
            now, current = time.monotonic(), self._item()
            if current != place:
                place, since = current, now
            elif place is not None and now - since > timeout_s:
                self._replace()
                return Lost(place, None, timeout_s)
        try:
            return self._inbox.recv()
        except EOFError:
            place = self._item()
            return Lost(place, _death(self._replace()), timeout_s)

    def _item(self) -> int | None:
        (place, _, _) = _STATE.unpack_from(self._state, 0)
        return None if place == _NO_ITEM else place

    def _answers_within(self, seconds: float) -> bool:
        """Whether an answer, or the end of the pipe (a dead worker), is there in time."""
        return bool(self._answered.poll(seconds * 1000))

    def _replace(self) -> int | None:
        """Kills this process, which is dead or hung, and starts another; returns the
        old one's exit code."""
        if self._process:  # None when its own start failed
            self._process.kill()  # nothing if it has exited already
        code = self.stop()
        interrupts.raise_if_stopping()  # the launcher killed it: none is started again
        self.start()
        self.wait_ready()
        return code

    def stop(self) -> int | None:
        if self._process is None:
            return None
        for connection in (self._inbox, self._outbox):
            connection.close()  # a live worker reads EOF and exits
        try:
            code = self._process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self._process.kill()  # hung on an item
            code = self._process.wait()
        interrupts.forget(self._process)
        self._process = None
        return code

    def close(self) -> None:
        self.stop()
        self._state.close()
        os.close(self._state_fd)


class _Relay:
    """Passes a task's rows done on to the progress display, each row once: an attempt
    that follows a crash counts from 0 again, and only rows past what was passed on are
    news."""

    def __init__(self, sink: ProgressSink | None) -> None:
        self._sink = sink
        self._rows = self._dead_letters = 0

    def so_far(self, rows: int, dead_letters: int) -> None:
        """This attempt has done `rows`, `dead_letters` of them rejected."""
        if self._sink is not None and rows > self._rows:
            self._sink(rows - self._rows, max(0, dead_letters - self._dead_letters))
            self._rows, self._dead_letters = rows, max(dead_letters, self._dead_letters)


class _SharedProgress:
    """A task's progress, written to the memory the pipeline's process reads."""

    def __init__(self, state: mmap.mmap) -> None:
        self._state = state
        self._rows = self._dead = 0

    def on_item(self, place: int | None) -> None:
        """The task is on the item at `place` of its order (None: on none)."""
        _STATE.pack_into(
            self._state, 0, _NO_ITEM if place is None else place, self._rows, self._dead
        )

    def handled(self, rows: int, dead_letters: int) -> None:
        """`rows` more of its rows are done with, `dead_letters` of them rejected."""
        self._rows += rows
        self._dead += dead_letters
        _STATE.pack_into(self._state, 0, _NO_ITEM, self._rows, self._dead)


def _shared_memory_fd() -> int:
    """A file descriptor of memory a child process can map: a memfd on Linux, elsewhere
    (macOS) an unlinked temporary file."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("worker-state")
    with tempfile.TemporaryFile() as file:
        return os.dup(file.fileno())


def _death(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = ", e.g. by the kernel's out-of-memory killer" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


# One pool per process that runs tasks, however many DoFn instances and threads use it.
_shared_lock = threading.Lock()
_shared: WorkerPool | None = None
_shared_key: tuple[int, float, bytes] | None = None  # _key of what _shared was started with
_shared_users = 0


class _EarlyStart(NamedTuple):
    """A shared pool being started ahead of its first acquire() (start_early)."""

    key: tuple[int, float, bytes]  # _key of what it was started with
    pool: concurrent.futures.Future  # of the WorkerPool


_early: _EarlyStart | None = None


def start_early(processes: int, timeout_s: float, setup: Callable[[], object]) -> None:
    """Starts the process's shared pool now, in the background, for the acquire() that
    will ask for the same: its workers import and run `setup` while this process goes on
    (the launcher importing TensorFlow). Counts as one acquire(); the run's end calls
    stop_shared()."""
    global _shared_users, _early
    with _shared_lock:
        _shared_users += 1
        if _shared is None and _early is None:
            starting = concurrent.futures.ThreadPoolExecutor(1, "worker-pool-start")
            _early = _EarlyStart(
                _key(processes, timeout_s, setup),
                starting.submit(WorkerPool, processes, timeout_s, setup),
            )
            starting.shutdown(wait=False)


def acquire(processes: int, timeout_s: float, setup: Callable[[], object]) -> WorkerPool:
    """The process's shared pool, started by the first caller with its size, time limit
    and setup (every caller of a run gives the same), or the one start_early() started
    with them. One started with other settings is not this run's: it is replaced."""
    global _shared, _shared_key, _shared_users
    key = _key(processes, timeout_s, setup)
    with _shared_lock:
        if (early := _take_early()) is not None:
            if early.key == key:
                _shared, _shared_key = early.pool.result(), key  # raises what its start raised
            else:
                _close_started(early)
        if _shared is not None and _shared_key != key:
            _shared.close()
            _shared = None
        if _shared is None:
            _shared, _shared_key = WorkerPool(processes, timeout_s, setup), key
        _shared_users += 1
        return _shared


def release() -> None:
    """Undoes one acquire() or start_early(); the last user's release stops the pool's
    processes."""
    global _shared_users
    with _shared_lock:
        _shared_users = max(0, _shared_users - 1)  # none below 0 after a stop_shared()
        if _shared_users == 0:
            _stop()


def stop_shared() -> None:
    """Stops the shared pool however many users have not released it: the run that used it
    is over. Beam's DoFn teardown is best effort (a bundle that fails while another
    starts may leave a DoFn never torn down), and a pool left running would serve the
    process's next run."""
    global _shared_users
    with _shared_lock:
        _shared_users = 0
        _stop()


def _stop() -> None:
    global _shared
    if (early := _take_early()) is not None:  # started, never acquired
        _close_started(early)
    if _shared is not None:
        _shared.close()
        _shared = None


def _key(processes: int, timeout_s: float, setup: Callable[[], object]) -> tuple[int, float, bytes]:
    return processes, timeout_s, pickle.dumps(setup)


def _take_early() -> _EarlyStart | None:
    global _early
    early, _early = _early, None
    return early


def _close_started(early: _EarlyStart) -> None:
    if early.pool.exception() is None:  # a start that failed left nothing running
        early.pool.result().close()


def _serve(reads: int, writes: int, state_fd: int) -> None:
    """A worker's loop: a task in, its outcome out."""
    # The pipeline's process stops it (core/worker/interrupts.py): a SIGINT sent to it alone
    # is no stop of the run.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(
        target=_end_with, args=(os.getppid(),), name="end-with-the-pipeline", daemon=True
    ).start()
    inbox = Connection(reads, writable=False)
    outbox = Connection(writes, readable=False)
    state = mmap.mmap(state_fd, 0)  # all of it
    try:
        setup = inbox.recv()
    except EOFError:
        return
    if setup is not None:
        setup()
    outbox.send(_READY)
    while True:
        try:
            task, context = inbox.recv()
        except EOFError:  # the pipeline is done with it, or has died
            return
        try:
            answer: Any = task.run(context, _SharedProgress(state))
        except Exception as error:  # noqa: BLE001 - the pipeline's process raises it: the bundle fails
            answer = _Failed(error, task.name)
        try:
            outbox.send(answer)
        except BrokenPipeError:  # the pipeline's process has died
            return


def _end_with(pipeline_pid: int) -> None:
    """Ends this worker once the pipeline's process is gone (killed: SIGKILL leaves it no
    time to stop its workers). A worker on its inbox sees the pipe close, but one inside a
    task (a read that waits, an endless decode) would live on in its own process group;
    its parent becomes another process then. A check twice a second costs nothing."""
    while os.getppid() == pipeline_pid:
        time.sleep(_PARENT_CHECK_S)
    os._exit(1)


_PARENT_CHECK_S = 0.5


if __name__ == "__main__":
    # Run as `python -m image_tfrecords.core.worker.pool`: serve from the module's importable
    # copy, so what it pickles names image_tfrecords.core.worker.pool, not __main__.
    from image_tfrecords.core.worker import pool

    pool._serve(*map(int, sys.argv[1:]))  # noqa: SLF001 - this module's own, under its package name
