"""Issue 57: what --split_by groups costs against today's split by the hash of the URI.

Two parts:

1. The plan alone (core/launcher/grouped_split.py) on synthetic images, 10,000 and
   100,000 (and --plan_sizes), in groups of 1 to 6 near-copies, 4 imbalanced labels:
   wall seconds and peak memory of the launcher's planning, which reads no image.
2. Whole conversions of make_dataset.py's photos (--images, default 10,000), side by side
   in --rounds rounds, each as child processes into fresh folders, alternating which
   goes first:
       hash    `image-tfrecords convert --split_column none` (every row split by the URI)
       groups  the same with --split_by groups (a staging run, the plan, a run that
               copies every example from the staging output)
   wall and CPU seconds and the peak memory of the process tree (write_bench.py's
   measure); the medians and groups/hash ratios. --dataset may be any make_dataset.py
   folder of --images images (make_dataset.py --kind scenes for 100,000 distinct photos).

    .venv/bin/python bench/grouped_split_bench.py --rounds 3 --json bench/grouped-split-results.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from write_bench import OURS, ensure_dataset, measure

from image_tfrecords.core.launcher.grouped_split import PlannedImage, plan_splits


def synthetic(count: int, seed: int = 3) -> list[PlannedImage]:
    rng = random.Random(seed)
    images: list[PlannedImage] = []
    while len(images) < count:
        label = rng.choices(["cat", "dog", "bird", "fish"], weights=[50, 30, 15, 5])[0]
        base = rng.getrandbits(64)
        for _ in range(rng.randint(1, 6)):
            number = len(images)
            near = base ^ (1 << rng.randrange(64))
            images.append(PlannedImage(f"/data/{number:07d}.jpg", (label,), f"{number}", near))
    return images[:count]


def time_plan(count: int) -> dict:
    images = synthetic(count)
    start = time.perf_counter()
    plan = plan_splits(images, (0.8, 0.1, 0.1), 10)
    seconds = time.perf_counter() - start
    return {
        "images": count,
        "plan_s": round(seconds, 2),
        "groups_kept_together": plan.info.groups_kept_together,
        "fractions": {split: round(value, 4) for split, value in plan.info.fractions.items()},
        "peak_rss_mb_so_far": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--dataset", type=Path, default=Path("/tmp/bench-photos"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--plan_sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    plans = [time_plan(count) for count in args.plan_sizes]
    for plan in plans:
        print(f"plan of {plan['images']:,} images: {plan['plan_s']} s", flush=True)

    ensure_dataset(args.dataset, args.images, None, 0)
    manifest = str(args.dataset / "manifest.csv")
    runs: dict[str, list[dict]] = {"hash": [], "groups": []}
    work = Path(tempfile.mkdtemp(prefix="grouped-split-bench-"))
    try:
        for round_number in range(args.rounds):
            order = ("hash", "groups") if round_number % 2 == 0 else ("groups", "hash")
            for tool in order:
                output = work / f"{tool}-{round_number}"
                flags = ["--split_by", "groups"] if tool == "groups" else []
                cmd = [str(OURS), "convert", "--manifest", manifest, "--output_dir", str(output)]
                code, wall, cpu, _, peaks = measure(
                    [*cmd, "--split_column", "none", "--quiet", *flags], work / f"{tool}.log"
                )
                if code:
                    print((work / f"{tool}.log").read_text()[-3000:], file=sys.stderr)
                    return 1
                tree_mb = {field: round(peak / 2**20) for field, peak in peaks.items()}
                runs[tool].append(
                    {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "tree_peak_mb": tree_mb}
                )
                print(
                    f"round {round_number}: {tool} wall {wall:.1f} s, CPU {cpu:.1f} s, "
                    f"process tree's peak memory {tree_mb} MB",
                    flush=True,
                )
                shutil.rmtree(output)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {
        tool: {key: statistics.median(run[key] for run in found) for key in ("wall_s", "cpu_s")}
        for tool, found in runs.items()
    }
    ratios = {
        key: round(medians["groups"][key] / medians["hash"][key], 2) for key in ("wall_s", "cpu_s")
    }
    print(f"medians {medians}; groups/hash {ratios}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": platform.platform(),
                    "python": platform.python_version(),
                    "images": args.images,
                    "plans": plans,
                    "runs": runs,
                    "medians": medians,
                    "groups_over_hash": ratios,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
