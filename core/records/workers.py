"""How many worker processes write shards, and how: `Workers`, part of the run's settings
(core/records/run_settings.py). Whoever starts the pool (transforms/in_workers.py) sizes it from
them; the pool itself (core/worker/pool.py) knows nothing of images.

The default number of processes is found on the machine that runs them: one per core it
may use, fewer where its memory holds fewer at each one's peak decoding the largest image
--max_image_pixels admits.
"""

from __future__ import annotations

import dataclasses
import math
import os

from image_tfrecords.core.records.image_settings import ImageSettings


@dataclasses.dataclass(frozen=True)
class Workers:
    """Where shards are written, and how.

    processes: worker processes per pipeline process; 0 writes shards in the pipeline's
      own threads (no isolation, no time limit); None, one per core of the machine the
      pipeline process runs on, found there (a Flink or Spark worker is not the launcher),
      fewer where its memory holds fewer (default_process_count).
    read_threads: threads per shard writer that read its images in buckets ahead of the
      decoding (local files are read as they are decoded).
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


def usable_cores(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The cores this process may use: those it may run on (Linux's affinity mask, a
    container's cpuset), fewer under a CPU quota (cgroup v2 cpu.max, e.g. a Kubernetes
    CPU limit or docker --cpus)."""
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
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


def usable_memory(
    limits: tuple[str, ...] = (
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ),
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
