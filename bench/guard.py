"""The guard against a slowdown: ours, the one-loop script and the process pool side by
side on two small photo sets, failing on a ratio, not on a time.

A 1.25x slowdown once landed over a few issues with nothing to catch it (issue 53). This
runs write_bench.py's tools alternately (each round starting with the next) on
make_dataset.py's photos, SMALL and LARGE images, and exits 1 when

- ours' marginal CPU per image (SMALL to LARGE, so the start-up is left out) is over
  MAX_MARGINAL_CPU times the loop's: the work per image, whatever the machine; or
- ours' wall time over the loop's at LARGE images is more than WALL_SLACK over the last
  recorded ratio (RECORDED, committed; `--record` writes this run's there once a change
  is accepted): the start-up and the parallel part, relative to the machine's own loop.

About two minutes on 2 cores: `make guard`, on a quiet machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from write_bench import bench_dataset, ensure_dataset, marginal_cpu, tools_for

SMALL, LARGE = 100, 2000  # images
ROUNDS = 3
MAX_MARGINAL_CPU = 1.15  # ours / the loop, CPU per image
WALL_SLACK = 1.25  # ours / the loop's wall at LARGE, over the recorded ratio
RECORDED = Path(__file__).resolve().parent / "guard-results.json"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--record", action="store_true", help=f"write this run's ratios to {RECORDED.name}"
    )
    parser.add_argument("--workdir", type=Path, help="datasets and logs (default: a temp folder)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="itf-guard-"))
    tools = tools_for([], [])
    results = {}
    try:  # bench_dataset exits when a tool fails or the tools wrote different examples
        for size in (SMALL, LARGE):
            folder = workdir / f"data-{size}"
            ensure_dataset(folder, size, None, seed=0)
            print(f"== {size} images", flush=True)
            results[size] = bench_dataset(
                f"{size} images", folder / "manifest.csv", workdir / f"runs-{size}", ROUNDS, tools
            )
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    marginal = marginal_cpu(results[SMALL], results[LARGE])
    cpu_ratio = marginal["ratio"]["ours/loop"]
    wall_ratio = results[LARGE]["ratio"]["ours/loop"]["wall_s"]
    recorded = json.loads(RECORDED.read_text()) if RECORDED.exists() else None
    wall_limit = recorded["wall_ratio"] * WALL_SLACK if recorded else None
    ms = marginal["ms_per_image"]
    print(
        f"marginal CPU per image: ours {ms['ours']:.2f} ms, loop {ms['loop']:.2f} ms, "
        f"pool {ms['pool']:.2f} ms: ours/loop {cpu_ratio:.2f} (at most {MAX_MARGINAL_CPU})"
    )
    medians = results[LARGE]["median"]
    print(
        f"wall at {LARGE} images: ours {medians['ours']['wall_s']:.1f} s, loop "
        f"{medians['loop']['wall_s']:.1f} s, pool {medians['pool']['wall_s']:.1f} s: ours/loop "
        f"{wall_ratio:.2f}"
        + (
            f" (recorded {recorded['wall_ratio']:.2f}, at most {wall_limit:.2f})"
            if recorded
            else " (none recorded)"
        )
        + f", ours/pool {results[LARGE]['ratio']['ours/pool']['wall_s']:.2f}"
    )
    if args.record:
        RECORDED.write_text(
            json.dumps(
                {
                    "wall_ratio": round(wall_ratio, 3),
                    "marginal_cpu_ratio": round(cpu_ratio, 3),
                    "wall_ratio_to_pool": round(results[LARGE]["ratio"]["ours/pool"]["wall_s"], 3),
                    "ms_per_image": {tool: round(value, 3) for tool, value in ms.items()},
                    "recorded_at": datetime.datetime.now(datetime.UTC).isoformat(
                        timespec="seconds"
                    ),
                    "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(),
                },
                indent=2,
            )
            + "\n"
        )
        print(f"recorded in {RECORDED}")
    failed = []
    if cpu_ratio > MAX_MARGINAL_CPU:
        failed.append(
            f"marginal CPU per image {cpu_ratio:.2f}x the loop's (at most {MAX_MARGINAL_CPU})"
        )
    if wall_limit is not None and wall_ratio > wall_limit and not args.record:
        failed.append(
            f"wall {wall_ratio:.2f}x the loop's (recorded {recorded['wall_ratio']:.2f}, "
            f"at most {wall_limit:.2f})"
        )
    if failed:
        print("SLOWER: " + "; ".join(failed) + " (bench/RESULTS.md: profile before you change)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
