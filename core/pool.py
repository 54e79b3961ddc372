"""Worker processes that each write whole shards, so that one run uses every core.

The pipeline's process hands a worker a ShardTask (a shard's or a part's packed rows, a
few KB) and gets back its ShardOutcome (counts, dead letters, example keys); the worker
reads, checks and encodes every image of it and writes its files (shard_writer.py). A
JoinTask has a worker join a shard's parts (shard_parts.py); a SurveyTask or PackTask
has it parse a chunk of the manifest (row_tasks.py). The pipeline's process never
touches an image. Workers import Pillow and this package, never
TensorFlow, and Beam's filesystems only when a path is remote (storage.py): a worker takes
about 40 MB and starts in ~0.2 s here.

They are started with a fresh interpreter (subprocess, a fork followed by exec), the only
start method that is safe in a process where TensorFlow's and gRPC's threads already run:
a plain fork copies locks those threads may hold, and multiprocessing's spawn and
forkserver would re-import the launcher's __main__ (TensorFlow) in every worker.

Isolation: an image that crashes its worker (a segfault in a C library, the kernel's OOM
killer) or decodes past --decode_timeout costs only its own rows, dead-lettered as
decode_crash or decode_timeout. The worker marks in memory it shares with the pipeline's
process which image it is decoding; when it dies or overruns, it is replaced and the
shard is written again from the start without that image, which gives the bytes the
shard would have had had the image been rejected in place. The same memory carries the
rows done so far, for the live progress display.

Stopping (core/interrupts.py): the workers run in a process group of their own, so a
terminal's Ctrl-C, sent to the launcher's group, reaches only the launcher (a worker
that got it in its imports would print a traceback); the launcher kills them when it is
stopped, and a pool that is stopping starts no other worker and runs no other task.
"""

from __future__ import annotations

import dataclasses
import math
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
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import image_tfrecords
from image_tfrecords.core import interrupts, storage
from image_tfrecords.core.images import ImageSettings
from image_tfrecords.core.shard_writer import Progress

if TYPE_CHECKING:
    from image_tfrecords.core.run_settings import RunSettings

_READY = "ready"  # a worker's first message, once its imports are done
_START_SECONDS = 120.0  # for a worker's imports, on a machine busy starting many
_WATCH_SECONDS = 0.2  # how often a waiting pipeline thread reads the worker's progress
# The shared memory: the place of the image being decoded (-1: none), rows done, rows of
# those dead-lettered.
_STATE = struct.Struct("<qqq")
_NOT_DECODING = -1
# The folder the image_tfrecords package is imported from, for a worker's PYTHONPATH (a
# launcher may have it on sys.path only; an installed package is found anyway).
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(image_tfrecords.__file__)))

# Called with (rows, dead letters) as the workers get through rows: live_progress.handled.
ProgressSink = Callable[[int, int], None]


class Task(Protocol):
    """What a worker is handed: shard_writer.ShardTask, shard_parts.JoinTask, and
    row_tasks.SurveyTask and PackTask; `in_worker` is false for a task that must run in
    the pipeline's process (transforms/in_workers.py)."""

    @property
    def name(self) -> str: ...

    @property
    def in_worker(self) -> bool: ...

    def run(self, settings: RunSettings, progress: Progress) -> Any: ...


class _Lost(NamedTuple):
    """A worker that died or overran: the place of the image it was decoding (None when
    it was not decoding), and the dead letter's reason and message for it."""

    place: int | None
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Workers:
    """Where shards are written, and how.

    processes: worker processes per pipeline process; 0 writes shards in the pipeline's
      own threads (no isolation, no time limit); None, one per core of the machine the
      pipeline process runs on, found there (a Flink or Spark worker is not the launcher),
      fewer where its memory holds fewer (default_process_count).
    read_threads: threads per shard writer that read its images ahead of the decoding.
    timeout_s: how long one image may take to decode in a worker process.
    max_pixels: the largest image a worker decodes (--max_image_pixels), what its memory
      is planned for.
    """

    processes: int | None = None
    read_threads: int = 4
    timeout_s: float = 120.0
    max_pixels: int = ImageSettings().max_pixels

    def process_count(self) -> int:
        if self.processes is not None:
            return self.processes
        return default_process_count(usable_cores(), usable_memory(), self.max_pixels)


class _Failed:
    """A worker's answer when writing the shard raised: the error, re-raised in the
    pipeline's process (pickled when it can be, else as its text)."""

    def __init__(self, error: BaseException) -> None:
        self.text = "".join(traceback.format_exception(error))
        self.error = error if _pickles(error) else None

    def raise_it(self) -> None:
        if self.error is not None:
            self.error.add_note(f"raised in the worker process writing the shard:\n{self.text}")
            raise self.error
        raise RuntimeError(f"a worker process failed writing a shard:\n{self.text}")


def _pickles(error: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return False
    return True


class ShardPool:
    """`processes` worker processes; run() runs a task in one of them.

    Thread-safe: each call takes an idle worker for its whole task, so at most
    `processes` tasks run at once and a call waits for a free worker.
    """

    def __init__(self, processes: int, timeout_s: float,
                 storage_options: dict[str, Any] | None = None) -> None:
        if processes < 1:
            raise ValueError("a shard pool needs at least one process")
        self._timeout_s = timeout_s
        self._workers = [_Worker(storage_options or {}) for _ in range(processes)]
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for worker in self._workers:  # all start at once; each waits only for its own
            worker.start()
        for worker in self._workers:
            worker.wait_ready()
            self._idle.put(worker)

    def run(self, task: Task, settings: RunSettings,
            progress: ProgressSink | None = None) -> Any:
        worker = self._idle.get()
        try:
            return worker.run(task, settings, self._timeout_s, _Relay(progress))
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

    def __init__(self, storage_options: dict[str, Any]) -> None:
        self._storage_options = storage_options
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
            filter(None, [_PACKAGE_ROOT, environment.get("PYTHONPATH")]))
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "image_tfrecords.core.pool", str(worker_reads),
                 str(worker_writes), str(self._state_fd)],
                stdin=subprocess.DEVNULL, process_group=0,
                pass_fds=(worker_reads, worker_writes, self._state_fd), env=environment)
            interrupts.end_with_the_run(self._process)
        finally:
            os.close(worker_reads)
            os.close(worker_writes)
        self._inbox = Connection(inbox, writable=False)
        self._outbox = Connection(outbox, readable=False)
        self._answered = select.poll()
        self._answered.register(inbox, select.POLLIN)

    def wait_ready(self) -> None:
        try:
            ready = self._answers_within(_START_SECONDS) and self._inbox.recv() == _READY
            self._outbox.send(self._storage_options)
        except (EOFError, OSError):  # it failed to start; its traceback is on stderr
            ready = False
        if not ready:
            self._process.kill()
            self.stop()
            raise RuntimeError("a shard-writing process did not start (python -m "
                               "image_tfrecords.core.pool); see its error above")

    def run(self, task: Task, settings: RunSettings, timeout_s: float,
            progress: _Relay) -> Any:
        """The task's outcome. After a crash or a timeout in an image's decoding, the
        task is run again by the replacement, that image left out as lost; a worker that
        dies while not decoding gets the task once more, then the run fails."""
        died_elsewhere = False
        while True:
            interrupts.raise_if_stopping()  # its worker was killed: no attempt is lost
            try:
                _STATE.pack_into(self._state, 0, _NOT_DECODING, 0, 0)
                self._outbox.send((task, settings))
            except OSError:  # it died while idle: the task never reached it
                self._replace()
                continue
            answer = self._await_answer(timeout_s, progress)
            if isinstance(answer, _Failed):
                answer.raise_it()
            if not isinstance(answer, _Lost):
                progress.so_far(*_STATE.unpack_from(self._state, 0)[1:])  # its last rows
                return answer
            if answer.place is None:
                if died_elsewhere:
                    raise RuntimeError(f"the worker process running {task.name} died twice "
                                       f"while not decoding an image ({answer.message})")
                died_elsewhere = True
                continue
            task = dataclasses.replace(task, lost=(*task.lost, tuple(answer)))

    def _await_answer(self, timeout_s: float, progress: _Relay
                      ) -> Any | _Failed | _Lost:
        """The worker's answer, or what it was doing when it died or overran."""
        watch = min(_WATCH_SECONDS, timeout_s / 4)
        place, since = self._decoding(), time.monotonic()
        while not self._answers_within(watch):
            _, rows, dead_letters = _STATE.unpack_from(self._state, 0)
            progress.so_far(rows, dead_letters)
            now, current = time.monotonic(), self._decoding()
            if current != place:
                place, since = current, now
            elif place is not None and now - since > timeout_s:
                self._replace()
                return _Lost(place, "decode_timeout", (
                    f"decoding took longer than {timeout_s:g} s (--decode_timeout); the "
                    "process was stopped and the shard written again without this image"))
        try:
            return self._inbox.recv()
        except EOFError:
            place = self._decoding()
            how = _death(self._replace())
            return _Lost(place, "decode_crash", (
                f"the process writing its shard died ({how}) decoding this image; the "
                "shard was written again without it"))

    def _decoding(self) -> int | None:
        (place, _, _) = _STATE.unpack_from(self._state, 0)
        return None if place == _NOT_DECODING else place

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
            self._process.kill()  # hung in a decode
            code = self._process.wait()
        interrupts.forget(self._process)
        self._process = None
        return code

    def close(self) -> None:
        self.stop()
        self._state.close()
        os.close(self._state_fd)


class _Relay:
    """Passes a shard's rows done on to the progress display, each row once: an attempt
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
    """shard_writer.Progress, written to the memory the pipeline's process reads."""

    def __init__(self, state: mmap.mmap) -> None:
        self._state = state
        self._rows = self._dead = 0

    def decoding(self, image: int | None) -> None:
        _STATE.pack_into(self._state, 0, _NOT_DECODING if image is None else image,
                         self._rows, self._dead)

    def handled(self, rows: int, dead_letters: int) -> None:
        self._rows += rows
        self._dead += dead_letters
        _STATE.pack_into(self._state, 0, _NOT_DECODING, self._rows, self._dead)


def usable_cores(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The cores this process may use: those it may run on (Linux's affinity mask, a
    container's cpuset), fewer under a CPU quota (cgroup v2 cpu.max, e.g. a Kubernetes
    CPU limit or docker --cpus)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    try:
        with open(cpu_max, encoding="ascii") as file:
            quota, period = file.read().split()
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):  # no cgroup v2 here (macOS, cgroup v1): no quota known
        pass
    return cores


# What one worker process holds at its peak, decoding the largest image --max_image_pixels
# admits: the decode (up to 4 bytes a pixel), the conversions beside it (an RGBA image is
# composited over white for its hash and thumbnail: three more RGBA copies) and the
# re-encoded copy, over the process's own Python, Pillow and NumPy. An 89.5-megapixel
# RGBA PNG (Pillow's default limit) peaked at 1.75 GB of resident memory, 1.71 GB of it
# for the image: 20 bytes a pixel.
PEAK_BYTES_PER_PIXEL = 20
WORKER_BASE_BYTES = 128 << 20


def default_process_count(cores: int, memory_bytes: int, max_pixels: int) -> int:
    """The default number of worker processes: one per core, but no more than the memory
    holds at each one's peak for a `max_pixels` image (at least one)."""
    peak = WORKER_BASE_BYTES + PEAK_BYTES_PER_PIXEL * max_pixels
    return max(1, min(cores, memory_bytes // peak))


def usable_memory(limits: tuple[str, ...] = ("/sys/fs/cgroup/memory.max",
                                             "/sys/fs/cgroup/memory/memory.limit_in_bytes")
                  ) -> int:
    """The bytes of memory this process's machine has, less under a container's limit
    (cgroup v2 memory.max, v1 memory.limit_in_bytes: a Kubernetes memory limit, docker
    --memory)."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in limits:
        try:
            with open(path, encoding="ascii") as file:
                limit = file.read().strip()
        except OSError:  # no such cgroup here
            continue
        if limit.isdigit():  # v2 says "max" where there is no limit
            memory = min(memory, int(limit))
    return memory


def _shared_memory_fd() -> int:
    """A file descriptor of memory a child process can map: a memfd on Linux, elsewhere
    (macOS) an unlinked temporary file."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("shard-writer-state")
    with tempfile.TemporaryFile() as file:
        return os.dup(file.fileno())


def _death(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = ", e.g. by the kernel's out-of-memory killer" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


# One pool per process that writes shards, however many DoFn instances and threads use it.
_shared_lock = threading.Lock()
_shared: ShardPool | None = None
_shared_users = 0


def acquire(workers: Workers, storage_options: dict[str, Any]) -> ShardPool | None:
    """The process's shared pool, started by the first caller with its size and time
    limit (every writer of a run has the same); None when `workers` has no processes."""
    global _shared, _shared_users
    processes = workers.process_count()
    if processes == 0:
        return None
    with _shared_lock:
        if _shared is None:
            _shared = ShardPool(processes, workers.timeout_s, storage_options)
        _shared_users += 1
        return _shared


def release(workers: Workers) -> None:
    """Undoes one acquire(); the last user's release stops the pool's processes."""
    global _shared, _shared_users
    if workers.process_count() == 0:
        return
    with _shared_lock:
        _shared_users -= 1
        if _shared_users == 0 and _shared is not None:
            _shared.close()
            _shared = None


def _serve(reads: int, writes: int, state_fd: int) -> None:
    """A worker's loop: a task in, its files written, its outcome out."""
    # The pipeline's process stops it (core/interrupts.py): a SIGINT sent to it alone
    # is no stop of the run.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox = Connection(reads, writable=False)
    outbox = Connection(writes, readable=False)
    state = mmap.mmap(state_fd, 0)  # all of it
    from image_tfrecords.core.images import load_plugins
    # Pillow imports its format plugins on first use: now, not within an image's time limit.
    load_plugins()
    outbox.send(_READY)
    try:
        storage.configure(inbox.recv())
    except EOFError:
        return
    while True:
        try:
            task, settings = inbox.recv()
        except EOFError:  # the pipeline is done with it, or has died
            return
        try:
            answer: Any = task.run(settings, _SharedProgress(state))
        except Exception as error:  # the pipeline's process raises it: the bundle fails
            answer = _Failed(error)
        try:
            outbox.send(answer)
        except BrokenPipeError:  # the pipeline's process has died
            return


if __name__ == "__main__":
    # Run as `python -m image_tfrecords.core.pool`: serve from the module's importable copy, so what it
    # pickles names image_tfrecords.core.pool, not __main__.
    from image_tfrecords.core import pool
    pool._serve(*map(int, sys.argv[1:]))
