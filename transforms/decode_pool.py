"""Image decoding in light worker processes, so that one run uses every core.

The shard writer's threads read the files and write the shard; decoding (Pillow, the
SHA-256 of the stored bytes, any re-encoding) holds most of each image's CPU time, and in
one process the GIL would leave the writer at about two cores. So each thread hands a
batch of images to one of a few decoding processes and waits. Those processes import
Pillow and images.py only, never TensorFlow or Beam: a worker takes about 28 MB RSS
(19 MB PSS) and two start in 0.4 s here.

They are started with a fresh interpreter (subprocess, a fork followed by exec), the only
start method that is safe in a process where TensorFlow's and gRPC's threads already run:
a plain fork copies locks those threads may hold, and multiprocessing's spawn and
forkserver would re-import the launcher's __main__ (TensorFlow) in every worker.

Isolation is a reliability gain too: an image that crashes its decoder (a segfault in a C
library, the kernel's OOM killer) or decodes past --decode_timeout costs only its own
row, dead-lettered as decode_crash or decode_timeout; the worker is replaced and no other
image is lost. Each worker decodes one image at a time and marks in memory it shares with
the writer which one it is on, so the image it died on is known exactly.
"""

from __future__ import annotations

import dataclasses
import math
import mmap
import os
import queue
import select
import signal
import subprocess
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import NamedTuple

from transforms.images import (ImageRejected, ImageSettings, PreparedImage, load_plugins,
                               prepare_image)

_READY = "ready"  # a worker's first message, once its imports are done
# Images up to this size reach a worker through memory it shares with the writer: a
# copy each side, where a pipe costs two copies through the kernel and a wake-up per
# 64 KB (measured here: about 40 us of CPU for a 50 KB photo, against 25 us for the
# whole hand-off of a small message). Larger ones go through the pipe. Pages are only
# allocated once written to.
_SLOT_BYTES = 32 << 20
_START_SECONDS = 120.0  # for a worker's imports, on a machine busy starting many
# The shared memory starts with the index in its batch of the image a worker is on.
_PROGRESS = struct.Struct("<q")
_NOT_STARTED = -1
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

Prepared = PreparedImage | ImageRejected
PrepareImages = Callable[[Sequence[bytes], ImageSettings], list[Prepared]]


@dataclasses.dataclass(frozen=True)
class Decoding:
    """Where the shard writer decodes images, and how many at once.

    processes: decoding processes per writing process; 0 decodes in the writer's own
      threads (no isolation, no time limit); None, one per core of the machine the
      writer runs on, found there (a Flink or Spark worker is not the launcher).
    threads: the writer's threads that read files and wait on decoders.
    timeout_s: how long one image may take in a decoding process.
    """

    processes: int | None = None
    threads: int = 4
    timeout_s: float = 120.0

    def process_count(self) -> int:
        return self.processes if self.processes is not None else usable_cores()

    def thread_count(self) -> int:
        # Two per decoding process keep each busy while the other thread reads or writes.
        return max(self.threads, 2 * self.process_count())


class _Decoded(NamedTuple):
    """A worker's answer: the prepared image, without the bytes it was sent when those
    are what it stores (they need not cross back)."""

    image: PreparedImage
    source_kept: bool


def prepare_in_process(images: Sequence[bytes], settings: ImageSettings) -> list[Prepared]:
    """prepare_image of each, in this process: what --decode_processes 0 uses."""
    return [_prepared(data, settings) for data in images]


def _prepared(data: bytes, settings: ImageSettings) -> Prepared:
    try:
        return prepare_image(data, settings)
    except ImageRejected as rejected:
        return rejected


class DecodePool:
    """`processes` decoding workers; prepare_all() is prepare_in_process, run in one.

    Thread-safe: each call takes an idle worker for its whole batch, so at most
    `processes` images decode at once and a call waits for a free worker. A batch costs
    one wake-up on each side instead of one per image (about 60 us of CPU each here).
    """

    def __init__(self, processes: int, timeout_s: float, slot_bytes: int = _SLOT_BYTES
                 ) -> None:
        if processes < 1:
            raise ValueError("a decode pool needs at least one process")
        self._timeout_s = timeout_s
        self._workers = [_Worker(slot_bytes) for _ in range(processes)]
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for worker in self._workers:  # all start at once; each waits only for its own
            worker.start()
        for worker in self._workers:
            worker.wait_ready()
            self._idle.put(worker)

    def prepare_all(self, images: Sequence[bytes], settings: ImageSettings) -> list[Prepared]:
        worker = self._idle.get()
        try:
            answers = worker.decode(images, settings, self._timeout_s)
        finally:
            self._idle.put(worker)
        return [_restored(answer, data) for data, answer in zip(images, answers, strict=True)]

    def pids(self) -> list[int]:
        """The workers' process ids (tests kill them)."""
        return [worker.pid for worker in self._workers if worker.pid is not None]

    def close(self) -> None:
        for worker in self._workers:
            worker.close()


def _restored(answer: _Decoded | ImageRejected, sent: bytes) -> Prepared:
    if isinstance(answer, ImageRejected):
        return answer
    return dataclasses.replace(answer.image, encoded=sent) if answer.source_kept else answer.image


class _Worker:
    """One decoding process and the two pipes to it; replaced at once after a crash or a
    timeout, so the pool stays whole."""

    def __init__(self, slot_bytes: int) -> None:
        self._process: subprocess.Popen | None = None
        self._inbox: Connection | None = None  # what the worker sends
        self._outbox: Connection | None = None  # what the worker reads
        self._answered = select.poll()  # on _inbox: cheaper than Connection.poll's selector
        # Kept across replacements: a new process maps the same memory.
        self._slot_fd = _shared_memory_fd()
        os.ftruncate(self._slot_fd, slot_bytes)
        self._slot = mmap.mmap(self._slot_fd, slot_bytes)

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
                [sys.executable, "-m", "transforms.decode_pool", str(worker_reads),
                 str(worker_writes), str(self._slot_fd)],
                stdin=subprocess.DEVNULL,
                pass_fds=(worker_reads, worker_writes, self._slot_fd), env=environment)
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
        except EOFError:  # it failed to start; its traceback is on stderr
            ready = False
        if not ready:
            self._process.kill()
            self.stop()
            raise RuntimeError("a decoding process did not start (python -m "
                               "transforms.decode_pool); see its error above")

    def decode(self, images: Sequence[bytes], settings: ImageSettings, timeout_s: float
               ) -> list[_Decoded | ImageRejected]:
        """Each image's answer, in order. After a crash or a timeout the shared memory
        says which image the worker was on: that one is rejected, and the others of the
        batch go to the replacement (those done before it, lost with the process, are
        decoded again)."""
        answers: list[_Decoded | ImageRejected | None] = [None] * len(images)
        todo = list(range(len(images)))
        died_idle = False
        while todo:
            try:
                self._send([images[index] for index in todo], settings)
            except OSError:  # it died while idle: none of these reached it
                self._replace()
                continue
            outcome = self._await_answers(timeout_s)
            if isinstance(outcome, list):
                for index, answer in zip(todo, outcome, strict=True):
                    answers[index] = answer
                return answers
            position, rejection = outcome
            if position is None and not died_idle:
                died_idle = True  # killed before it began: send the batch again, once
                continue
            answers[todo.pop(position or 0)] = rejection
            died_idle = False
        return answers

    def _send(self, images: Sequence[bytes], settings: ImageSettings) -> None:
        """The images one after another in the shared memory, as their lengths; those
        past its end inline."""
        _PROGRESS.pack_into(self._slot, 0, _NOT_STARTED)
        items: list[int | bytes] = []
        offset = _PROGRESS.size
        for data in images:
            if offset + len(data) <= len(self._slot):
                self._slot[offset:offset + len(data)] = data
                offset += len(data)
                items.append(len(data))
            else:
                items.append(data)
        self._outbox.send((items, settings))

    def _await_answers(self, timeout_s: float
                       ) -> list[_Decoded | ImageRejected] | tuple[int | None, ImageRejected]:
        """The batch's answers, or where in the batch the worker died or overran its time
        limit (None: before it began the batch) and that image's rejection.

        The worker answers once per batch (a wake-up costs about 60 us of CPU here, each
        side); it marks each image it starts in the shared memory, and each image gets
        `timeout_s` from when it is marked.
        """
        check_every = min(1.0, timeout_s / 4)
        position, since = self._position(), time.monotonic()
        while not self._answers_within(check_every):
            now, current = time.monotonic(), self._position()
            if current != position:
                position, since = current, now
            elif position is not None and now - since > timeout_s:
                self._replace()
                return position, ImageRejected("decode_timeout", (
                    f"decoding took longer than {timeout_s:g} s (--decode_timeout); "
                    "the decoder was stopped"))
        try:
            return self._inbox.recv()
        except EOFError:
            position = self._position()
            how = _death(self._replace())
            return position, ImageRejected("decode_crash", (
                f"the decoding process died ({how}) on this image; the image is skipped "
                "and the run goes on"))

    def _position(self) -> int | None:
        """The image of the batch the worker is on, or None before it began the batch."""
        (position,) = _PROGRESS.unpack_from(self._slot, 0)
        return None if position == _NOT_STARTED else position

    def _answers_within(self, seconds: float) -> bool:
        """Whether an answer, or the end of the pipe (a dead worker), is there in time."""
        return bool(self._answered.poll(seconds * 1000))

    def _replace(self) -> int | None:
        """Kills this process, which is dead or hung, and starts another; returns the
        old one's exit code."""
        if self._process:  # None when its own start failed
            self._process.kill()  # nothing if it has exited already
        code = self.stop()
        self.start()
        self.wait_ready()
        return code

    def stop(self) -> int | None:
        if self._process is None:
            return None
        for connection in (self._inbox, self._outbox):
            connection.close()  # a live worker reads EOF and exits
        try:
            code = self._process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self._process.kill()  # hung in a decode
            code = self._process.wait()
        self._process = None
        return code

    def close(self) -> None:
        self.stop()
        self._slot.close()
        os.close(self._slot_fd)


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


def _shared_memory_fd() -> int:
    """A file descriptor of memory a child process can map: a memfd on Linux, elsewhere
    (macOS) an unlinked temporary file."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("decode-slot")
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
_shared: DecodePool | None = None
_shared_users = 0


def acquire(decoding: Decoding) -> PrepareImages:
    """The function the writer prepares its images with: the process's shared pool's,
    started by the first caller with its size and time limit (every writer of a run has
    the same), or prepare_in_process when `decoding` has no processes."""
    global _shared, _shared_users
    processes = decoding.process_count()
    if processes == 0:
        return prepare_in_process
    with _shared_lock:
        if _shared is None:
            _shared = DecodePool(processes, decoding.timeout_s)
        _shared_users += 1
        return _shared.prepare_all


def release(decoding: Decoding) -> None:
    """Undoes one acquire(); the last user's release stops the pool's processes."""
    global _shared, _shared_users
    if decoding.process_count() == 0:
        return
    with _shared_lock:
        _shared_users -= 1
        if _shared_users == 0 and _shared is not None:
            _shared.close()
            _shared = None


def _serve(reads: int, writes: int, slot_fd: int) -> None:
    """A worker's loop: a batch in (each image's length in the shared memory, or its
    bytes), each image marked in the shared memory as it is started, the answers out."""
    # Ctrl-C reaches the whole process group: the writer handles it and closes the pipes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox = Connection(reads, writable=False)
    outbox = Connection(writes, readable=False)
    slot = mmap.mmap(slot_fd, 0)  # all of it
    # Pillow imports its format plugins on first use: now, not within an image's time limit.
    load_plugins()
    outbox.send(_READY)
    while True:
        try:
            items, settings = inbox.recv()
        except EOFError:  # the writer is done with it, or has died
            return
        answers = []
        offset = _PROGRESS.size
        for position, item in enumerate(items):
            _PROGRESS.pack_into(slot, 0, position)
            if isinstance(item, int):
                data = slot[offset:offset + item]
                offset += item
            else:
                data = item
            answers.append(_answer(data, settings))
        outbox.send(answers)


def _answer(data: bytes, settings: ImageSettings) -> _Decoded | ImageRejected:
    image = _prepared(data, settings)
    if isinstance(image, ImageRejected):
        return image
    source_kept = image.encoded is data
    return _Decoded(dataclasses.replace(image, encoded=b"") if source_kept else image,
                    source_kept)


if __name__ == "__main__":
    # Run as `python -m transforms.decode_pool`: serve from the module's importable copy,
    # so what it pickles names transforms.decode_pool, not __main__.
    from transforms import decode_pool
    decode_pool._serve(*map(int, sys.argv[1:]))
