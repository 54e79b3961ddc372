"""The guard against a slowdown: ours, the one-loop script and the process pool side by
side on two small photo sets, failing on a ratio, not on a time.

A 1.25x slowdown once landed over a few issues with nothing to catch it (issue 53). This
runs write_bench.py's tools on make_dataset.py's photos, SMALL and LARGE images, and
exits 1 when

- ours' marginal CPU per image (SMALL to LARGE, so the start-up is left out) is over
  MAX_MARGINAL_CPU times the loop's: the work per image, whatever the machine; or
- ours' wall time over the loop's at LARGE images is more than WALL_SLACK over the last
  recorded ratio (RECORDED, committed; `--record` writes this run's there once a change
  is accepted): the start-up and the parallel part, relative to the machine's own loop.

Each ratio is taken within a round and the guard uses their median. A round runs each
tool on SMALL then at once on LARGE (the tools in turn, each round starting with the
next): the marginal CPU is a difference of two runs, and ours' start-up is ~6 CPU-s to
the loop's 1, so a host that got 15% slower between all the SMALL runs and all the LARGE
ones moved ours' marginal 30% and the loop's 15% (1.00 quiet, 1.13 in CI; issue 53).

About two minutes on 2 cores (a third more `--with_pool`): `make guard`; CI runs it after
the tests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from write_bench import (
    check_same,
    ensure_dataset,
    list_examples,
    run_tool,
    source_bytes_of,
    tools_for,
)

SMALL, LARGE = 100, 5000  # images
ROUNDS = 3
MAX_MARGINAL_CPU = 1.15  # ours / the loop, CPU per image
WALL_SLACK = 1.25  # ours / the loop's wall at LARGE, over the recorded ratio
RECORDED = Path(__file__).resolve().parent / "guard-results.json"
TOOLS = ("ours", "loop")  # and "pool" with --with_pool: a figure to record, no check


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--record", action="store_true", help=f"write this run's ratios to {RECORDED.name}"
    )
    parser.add_argument("--workdir", type=Path, help="datasets and logs (default: a temp folder)")
    parser.add_argument(
        "--with_pool",
        action="store_true",
        help="run the process pool too, for ours/pool (no check uses it; a third longer)",
    )
    args = parser.parse_args()
    tools = (*TOOLS, "pool") if args.with_pool else TOOLS
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="itf-guard-"))
    try:  # run_tool and check_same exit when a tool fails or the tools differ
        manifests = {}
        for size in (SMALL, LARGE):
            ensure_dataset(workdir / f"data-{size}", size, None, seed=0)
            manifests[size] = workdir / f"data-{size}" / "manifest.csv"
        rounds = [
            paired_round(number, manifests, workdir / "runs", tools) for number in range(ROUNDS)
        ]
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    ms = {tool: statistics.median(r.ms_per_image[tool] for r in rounds) for tool in tools}
    cpu_ratio = statistics.median(r.ms_per_image["ours"] / r.ms_per_image["loop"] for r in rounds)
    wall_ratio = statistics.median(r.wall_s["ours"] / r.wall_s["loop"] for r in rounds)
    pool_ratio = (
        statistics.median(r.wall_s["ours"] / r.wall_s["pool"] for r in rounds)
        if args.with_pool
        else None
    )
    recorded = json.loads(RECORDED.read_text()) if RECORDED.exists() else None
    wall_limit = recorded["wall_ratio"] * WALL_SLACK if recorded else None
    by_round = ", ".join(f"{r.ms_per_image['ours'] / r.ms_per_image['loop']:.2f}" for r in rounds)
    print(
        f"marginal CPU per image: ours {ms['ours']:.2f} ms, loop {ms['loop']:.2f} ms"
        + (f", pool {ms['pool']:.2f} ms" if args.with_pool else "")
        + f": ours/loop {cpu_ratio:.2f} (at most {MAX_MARGINAL_CPU}; by round {by_round})"
    )
    print(
        f"wall at {LARGE} images: ours/loop {wall_ratio:.2f}"
        + (
            f" (recorded {recorded['wall_ratio']:.2f}, at most {wall_limit:.2f})"
            if recorded
            else " (none recorded)"
        )
        + (f", ours/pool {pool_ratio:.2f}" if pool_ratio is not None else "")
    )
    if args.record:
        RECORDED.write_text(
            json.dumps(
                {
                    "wall_ratio": round(wall_ratio, 3),
                    "marginal_cpu_ratio": round(cpu_ratio, 3),
                    **(
                        {"wall_ratio_to_pool": round(pool_ratio, 3)}
                        if pool_ratio is not None
                        else {}
                    ),
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


class Round(NamedTuple):
    """One round's measures, per tool."""

    ms_per_image: dict[str, float]  # CPU, SMALL to LARGE
    wall_s: dict[str, float]  # at LARGE


def paired_round(
    number: int, manifests: dict[int, Path], runs_dir: Path, names: tuple[str, ...]
) -> Round:
    """Each tool on SMALL, then on LARGE; in the first round, the tools' examples compared."""
    tools = [tool for tool in tools_for([], []) if tool.name in names]
    first = number % len(tools)
    runs_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[int, dict[str, float]]] = {}
    listings: dict[int, dict] = {SMALL: {}, LARGE: {}}
    for tool in tools[first:] + tools[:first]:
        for size, manifest in manifests.items():
            out = runs_dir / f"{tool.name}-{size}"
            shutil.rmtree(out, ignore_errors=True)
            runs.setdefault(tool.name, {})[size] = run_tool(
                tool, manifest, out, runs_dir / f"{tool.name}-{size}.log", source_bytes_of(manifest)
            )
            if number == 0:
                listings[size][tool.name] = list_examples(out)
            shutil.rmtree(out)  # as large as the source images
        small, large = runs[tool.name][SMALL], runs[tool.name][LARGE]
        print(
            f"  round {number + 1} {tool.name}: {small['wall_s']:.1f} / {large['wall_s']:.1f} s "
            f"wall, {small['cpu_s']:.1f} / {large['cpu_s']:.1f} s CPU at {SMALL} / {LARGE} images",
            flush=True,
        )
    for size, listing in listings.items():
        if listing:
            check_same(f"{size} images", listing)
    return Round(
        {
            tool: 1000
            * (sizes[LARGE]["cpu_s"] - sizes[SMALL]["cpu_s"])
            / (sizes[LARGE]["examples"] - sizes[SMALL]["examples"])
            for tool, sizes in runs.items()
        },
        {tool: sizes[LARGE]["wall_s"] for tool, sizes in runs.items()},
    )


if __name__ == "__main__":
    sys.exit(main())
