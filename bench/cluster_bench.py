"""The job on a Flink session cluster against the DirectRunner, on this machine.

Starts what tests/test_flink_cluster.py runs on (tests/clusters.py: a JobManager and one
TaskManager JVM with one slot, Beam's runner in their class path, Beam's worker pool
from this venv beside them), then alternates, --rounds times, the DirectRunner and the
cluster on each data set: the 50-row sample (sample_data/) and --images crops of real
photos (make_dataset.py). Each cluster run is `python -m image_tfrecords` as the docs give it
(--environment_type EXTERNAL, --environment_cache_millis, --beam_runner_on_cluster);
before each, the script waits past the cached SDK worker's expiry, so every cluster run
starts its SDK worker as a daily job does.
Every run's output must equal the DirectRunner's (the published shards' bytes), else
exit 1. Prints the medians and ratios, writes every run to --json.

`make job-servers` and `make test`'s tests/flink_cluster jar first.
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
sys.path.insert(0, str(ROOT))
from clusters import FlinkCluster, WorkerPool  # noqa: E402

from image_tfrecords.pipeline import engines  # noqa: E402

CACHE_MS = 20_000  # the SDK worker's cache (its stages share one); each run waits past it
SAMPLE_FLAGS = [
    "--manifest",
    str(ROOT / "sample_data" / "manifest.csv"),
    "--max_error_fraction",
    "0.25",
    "--num_shards",
    "2",
]


def run(flags: list[str], output: Path, temp: Path) -> float:
    """The console's own wall of one conversion (a fresh output), checked to succeed."""
    shutil.rmtree(output, ignore_errors=True)
    temp.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "image_tfrecords", *flags, "--output_dir", str(output), "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)},
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{flags[-1]}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return wall


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
    cluster_folder = args.work / f"cluster-{os.getpid()}"
    cluster_folder.mkdir()
    pool = WorkerPool(cluster_folder)
    cluster = FlinkCluster(cluster_folder, engines.ENGINES["flinkrunner"].built_jar)
    on_the_cluster = [
        "--runner",
        "FlinkRunner",
        "--flink_master",
        f"localhost:{cluster.rest_port}",
        "--environment_type",
        "EXTERNAL",
        "--environment_config",
        f"localhost:{pool.port}",
        "--environment_cache_millis",
        str(CACHE_MS),
        "--beam_runner_on_cluster",
        "--temp_location",
        str(args.work / "tft"),
    ]
    runs = []
    try:
        for round_ in range(1, args.rounds + 1):
            for name, flags in sets.items():
                direct = args.work / "direct"
                times = {"direct": run(flags, direct, args.work / "tmp")}
                expected = shard_digests(direct)
                time.sleep(CACHE_MS / 1000 + 5)  # the cached SDK worker is gone
                output = args.work / "cluster"
                times["cluster"] = run([*flags, *on_the_cluster], output, args.work / "tmp")
                if shard_digests(output) != expected:
                    sys.exit(f"{name}: the cluster's shards differ from the DirectRunner's")
                runs.append({"round": round_, "set": name, **times})
                print(json.dumps(runs[-1]), flush=True)
    finally:
        cluster.stop()
        pool.stop()
    summary = {}
    for name in sets:
        of_set = [entry for entry in runs if entry["set"] == name]
        medians = {
            mode: statistics.median(entry[mode] for entry in of_set)
            for mode in of_set[0]
            if mode not in ("round", "set")
        }
        summary[name] = {**medians, "cluster/direct": medians["cluster"] / medians["direct"]}
        print(
            f"{name}: DirectRunner {medians['direct']:.1f} s, cluster "
            f"{medians['cluster']:.1f} s: {summary[name]['cluster/direct']:.2f}x"
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
                "runs": runs,
                "medians": summary,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
