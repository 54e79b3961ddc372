"""The wall time, the launched process's own CPU and peak RSS, and its whole tree's CPU, of
one command: for ours, the pipeline process alone (not its worker processes) against
everything.

    .venv/bin/python bench/own_cpu.py -- .venv/bin/python -m image_tfrecords --manifest M \\
        --output_dir O --overwrite --quiet

The own CPU and RSS are sampled every 20 ms until the process exits (so it may miss its last
20 ms); the tree's is the rusage of the waited-for child, which includes every
descendant that was waited for.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import psutil

SAMPLE_SECONDS = 0.02


def main(command: list[str]) -> None:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root, own, peak_rss = psutil.Process(process.pid), 0.0, 0
    while process.poll() is None:
        try:
            own = sum(root.cpu_times()[:2])
            peak_rss = max(peak_rss, root.memory_info().rss)
        except psutil.Error:  # it has exited
            pass
        time.sleep(SAMPLE_SECONDS)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode:
        sys.exit(f"exit {process.returncode}: {process.stderr.read().decode()[-2000:]}")
    tree = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(
        f"wall {wall:.2f} s, own CPU {own:.2f} s, own peak RSS {peak_rss / 2**20:.0f} MB, "
        f"tree CPU {tree:.2f} s"
    )


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main(arguments[1:] if arguments[:1] == ["--"] else arguments)
