"""Image decoding in light worker processes, so that one run uses every core.

The shard writer's threads read the files and write the shard; decoding (Pillow, the
SHA-256 of the stored bytes, any re-encoding) holds most of each image's CPU time, and in
one process the GIL would leave the writer at about two cores. So each thread hands its
image to one of a few decoding processes and waits. Those processes import Pillow and
images.py only, never TensorFlow or Beam: a worker costs about 30 MB and starts in a
fraction of a second.

They are started with a fresh interpreter (subprocess, a fork followed by exec), the only
start method that is safe in a process where TensorFlow's and gRPC's threads already run:
a plain fork copies locks those threads may hold, and multiprocessing's spawn and
forkserver would re-import the launcher's __main__ (TensorFlow) in every worker.

Isolation is a reliability gain too: an image that crashes its decoder (a segfault in a C
library, the kernel's OOM killer) or decodes past --decode_timeout costs only its own
row, dead-lettered as decode_crash or decode_timeout; the worker is replaced and nothing
else is lost or decoded twice. Each worker decodes one image at a time, so the image it
was on when it died is known exactly.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import NamedTuple

from PIL import Image

from transforms.images import ImageRejected, ImageSettings, PreparedImage, prepare_image

_READY = "ready"  # a worker's first message, once its imports are done
# Images up to this size reach a worker through memory it shares with the writer: a
# copy each side, where a pipe costs two copies through the kernel and a wake-up per
# 64 KB (measured here: about 40 us of CPU for a 50 KB photo, against 25 us for the
# whole hand-off of a small message). Larger ones go through the pipe. Pages are only
# allocated once written to.
_SLOT_BYTES = 32 << 20
_START_SECONDS = 120.0  # for a worker's imports, on a machine busy starting many
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PrepareImage = Callable[[bytes, ImageSettings], PreparedImage]


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
        if self.processes is not None:
            return self.processes
        return len(os.sched_getaffinity(0))  # the cores this process may run on

    def thread_count(self) -> int:
        # Two per decoding process keep each busy while the other thread reads or writes.
        return max(self.threads, 2 * self.process_count())


class _Decoded(NamedTuple):
    """A worker's answer: the prepared image, without the bytes it was sent when those
    are what it stores (they need not cross the pipe twice)."""

    image: PreparedImage
    source_kept: bool


class DecodePool:
    """`processes` decoding workers; prepare() is prepare_image, run in one of them.

    Thread-safe: each call takes an idle worker, so at most `processes` images decode at
    once and a call waits for a free worker.
    """

    def __init__(self, processes: int, timeout_s: float, slot_bytes: int = _SLOT_BYTES
                 ) -> None:
        if processes < 1:
            raise ValueError("a decode pool needs at least one process")
        self.processes = processes
        self._timeout_s = timeout_s
        self._workers = [_Worker(slot_bytes) for _ in range(processes)]
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for worker in self._workers:  # all start at once; each waits only for its own
            worker.start()
        for worker in self._workers:
            worker.wait_ready()
            self._idle.put(worker)

    def prepare(self, data: bytes, settings: ImageSettings) -> PreparedImage:
        worker = self._idle.get()
        try:
            decoded = worker.decode(data, settings, self._timeout_s)
        finally:
            self._idle.put(worker)
        if isinstance(decoded, ImageRejected):
            raise decoded
        image, source_kept = decoded
        return dataclasses.replace(image, encoded=data) if source_kept else image

    def pids(self) -> list[int]:
        """The workers' process ids (tests kill them)."""
        return [worker.pid for worker in self._workers if worker.pid is not None]

    def close(self) -> None:
        for worker in self._workers:
            worker.close()


class _Worker:
    """One decoding process and the two pipes to it; replaced at once after a crash or a
    timeout, so the pool stays whole."""

    def __init__(self, slot_bytes: int) -> None:
        self._process: subprocess.Popen | None = None
        self._inbox: Connection | None = None  # what the worker sends
        self._outbox: Connection | None = None  # what the worker reads
        # Kept across replacements: a new process maps the same memory.
        self._slot_fd = os.memfd_create("decode-slot")
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

    def wait_ready(self) -> None:
        try:
            ready = self._inbox.poll(_START_SECONDS) and self._inbox.recv() == _READY
        except EOFError:  # it failed to start; its traceback is on stderr
            ready = False
        if not ready:
            self._process.kill()
            self.stop()
            raise RuntimeError("a decoding process did not start (python -m "
                               "transforms.decode_pool); see its error above")

    def decode(self, data: bytes, settings: ImageSettings, timeout_s: float
               ) -> _Decoded | ImageRejected:
        try:
            if len(data) <= len(self._slot):
                self._slot[:len(data)] = data
                self._outbox.send((len(data), settings))
            else:
                self._outbox.send((data, settings))
        except OSError:
            # It died between images (killed while idle): this image never reached it.
            self._replace()
            return self.decode(data, settings, timeout_s)
        if not self._inbox.poll(timeout_s):
            self._replace()
            return ImageRejected("decode_timeout", f"decoding took longer than "
                                 f"{timeout_s:g} s (--decode_timeout); the decoder was stopped")
        try:
            return self._inbox.recv()
        except EOFError:
            how = _death(self._replace())
            return ImageRejected("decode_crash", f"the decoding process died ({how}) on "
                                 "this image; the image is skipped and the run goes on")

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


def acquire(decoding: Decoding) -> PrepareImage:
    """The prepare function the writer uses: the process's shared pool's, started by the
    first caller, or prepare_image itself when `decoding` has no processes."""
    global _shared, _shared_users
    processes = decoding.process_count()
    if processes == 0:
        return prepare_image
    with _shared_lock:
        if _shared is None:
            _shared = DecodePool(processes, decoding.timeout_s)
        _shared_users += 1
        return _shared.prepare


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
    """A worker's loop: one (bytes or their length in the slot, settings) in, one
    _Decoded or ImageRejected out."""
    # Ctrl-C reaches the whole process group: the writer handles it and closes the pipes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox = Connection(reads, writable=False)
    outbox = Connection(writes, readable=False)
    slot = mmap.mmap(slot_fd, 0)  # all of it
    # Pillow imports its format plugins on first use: now, not within an image's time limit.
    Image.init()
    outbox.send(_READY)
    while True:
        try:
            data, settings = inbox.recv()
        except EOFError:  # the writer is done with it, or has died
            return
        if isinstance(data, int):
            data = slot[:data]
        try:
            image = prepare_image(data, settings)
        except ImageRejected as rejected:
            outbox.send(rejected)
            continue
        source_kept = image.encoded is data
        outbox.send(_Decoded(dataclasses.replace(image, encoded=b"") if source_kept else image,
                             source_kept))


if __name__ == "__main__":
    # Run as `python -m transforms.decode_pool`: serve from the module's importable copy,
    # so what it pickles names transforms.decode_pool, not __main__.
    from transforms import decode_pool
    decode_pool._serve(*map(int, sys.argv[1:]))
