"""The page's Flink session cluster against the DirectRunner, on this machine.

Starts a cluster laid out and run as docs/operations/clusters.md says (tests/clusters.py
takes its commands from the page: Flink's lib/ with Beam's runner copied in by the page's
script, a JobManager and one TaskManager with one slot, the page's worker pool and its job
server started once), then alternates, --rounds times, on each data set (the 50-row sample
of the README's job and --images crops of real photos, make_dataset.py):

- the DirectRunner;
- the page's launcher command (`--job_endpoint` the job server, the page's pool);
- the same without `--job_endpoint`: the launcher starts a job server for the run;
- the page's command with Beam's own worker pool (worker_pool_main) instead.

Every run's published shards must equal the DirectRunner's, and each cluster run must start
exactly one SDK worker (a job's worker never serves the next job), else exit 1. Prints the
medians and ratios, writes every run to --json.

`make job-servers` and `make test`'s tests/flink_cluster first.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT / "tests"))
from clusters import (  # noqa: E402
    TASK_MANAGER_JVM,
    TASK_MANAGER_MEMORY,
    FlinkCluster,
    JobServer,
    WorkerPool,
    flink_page,
)

SAMPLE_FLAGS = [
    "--manifest",
    str(ROOT / "sample_data" / "manifest.csv"),
    "--max_error_fraction",
    "0.25",
]


def run(flags: list[str], output: Path, temp: Path) -> float:
    """The wall of one conversion (a fresh output) from the launcher's start to its end,
    checked to succeed."""
    shutil.rmtree(output, ignore_errors=True)
    temp.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "image_tfrecords", *flags, "--output_dir", str(output), "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{flags[-1]}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return wall


def workers_started(pool: WorkerPool) -> int:
    """How many SDK workers `pool` has started (its own log's lines, either pool's)."""
    text = pool.log.read_text(errors="replace")
    return text.count("Started worker") + text.count("Starting worker")


def shard_digests(output: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(output.glob("*.tfrecord"))
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/image-tfrecords-cluster-bench"))
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=str(BENCH / "cluster-results.json"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    photos = args.work / f"crops-{args.images}"
    if not (photos / "manifest.csv").exists():
        subprocess.run(
            [
                sys.executable,
                str(BENCH / "make_dataset.py"),
                "--out",
                str(photos),
                "--images",
                str(args.images),
            ],
            check=True,
        )
    sets = {
        "sample": SAMPLE_FLAGS,
        f"{args.images} photos": ["--manifest", str(photos / "manifest.csv")],
    }
    page = flink_page()
    folder = args.work / f"cluster-{os.getpid()}"
    (folder / "beams-pool").mkdir(parents=True)
    pools = {
        "page": WorkerPool(folder, page.pool),
        "beam": WorkerPool(folder / "beams-pool"),
    }
    cluster = FlinkCluster(folder, page)
    job_server = JobServer(folder, page.job_server, f"localhost:{cluster.rest_port}")

    def launcher_flags(pool: WorkerPool) -> list[str]:
        return page.launcher_flags(cluster, job_server, pool, args.work)

    page_flags = launcher_flags(pools["page"])
    at = page_flags.index("--job_endpoint")
    modes = {
        "cluster": (page_flags, pools["page"]),
        "own job server": (page_flags[:at] + page_flags[at + 2 :], pools["page"]),
        "beam's pool": (launcher_flags(pools["beam"]), pools["beam"]),
    }
    runs = []
    try:
        for round_ in range(1, args.rounds + 1):
            for name, flags in sets.items():
                direct = args.work / "direct"
                times = {"direct": run(flags, direct, args.work / "tmp")}
                expected = shard_digests(direct)
                for mode, (on_the_cluster, pool) in modes.items():
                    before = workers_started(pool)
                    output = args.work / "cluster"
                    times[mode] = run([*flags, *on_the_cluster], output, args.work / "tmp")
                    if shard_digests(output) != expected:
                        sys.exit(f"{name}, {mode}: the shards differ from the DirectRunner's")
                    if workers_started(pool) != before + 1:
                        sys.exit(f"{name}, {mode}: not one SDK worker started for the job")
                runs.append({"round": round_, "set": name, **times})
                print(json.dumps(runs[-1]), flush=True)
    finally:
        job_server.stop()
        cluster.stop()
        for pool in pools.values():
            pool.stop()
    summary = {}
    for name in sets:
        of_set = [entry for entry in runs if entry["set"] == name]
        medians = {
            mode: statistics.median(entry[mode] for entry in of_set)
            for mode in of_set[0]
            if mode not in ("round", "set")
        }
        summary[name] = {
            **medians,
            **{f"{mode}/direct": medians[mode] / medians["direct"] for mode in modes},
        }
        print(
            f"{name}: DirectRunner {medians['direct']:.1f} s; "
            + ", ".join(
                f"{mode} {medians[mode]:.1f} s ({summary[name][f'{mode}/direct']:.2f}x)"
                for mode in modes
            )
        )
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    Path(args.json).write_text(
        json.dumps(
            {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "machine": {
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                    "java": java.splitlines()[0],
                },
                "command": " ".join(sys.argv),
                "cluster": {
                    "task managers": 1,
                    "slots": 1,
                    "task manager": {
                        **TASK_MANAGER_MEMORY,
                        **page.settings,
                        "jvm": TASK_MANAGER_JVM,
                    },
                    "job manager": "-Xmx512m, jobmanager.memory.process.size 1g",
                },
                "runs": runs,
                "medians": summary,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
