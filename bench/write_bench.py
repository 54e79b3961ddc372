"""Benchmarks `image-tfrecords convert` ("ours") against two hand-written converters.

"loop" is bench/handwritten.py (one process), "pool" bench/process_pool.py (one forked
worker per core, whole shards each). Datasets: one image set per --sizes (made by
make_dataset.py, reused when present), plus a --rows manifest whose rows cycle through the
largest set, to see whether our memory stays flat as the manifest grows. On each dataset
the tools run alternately, --rounds times each (each round starting with the next tool),
as child processes writing to fresh output folders. With --ours_worker_processes N...,
ours also runs with `--worker_processes N` for each N on the image sets, for the
speed-up from the first N to the others.

Per run: wall seconds, CPU seconds and peak memory of the whole child process tree,
images/s, and output bytes against source bytes. Peak memory is the peak of the tree's
summed PSS (a page shared by k processes counts 1/k in each, so the pages forked workers
share count once), sampled every 0.5 s. Summed RSS, which counts shared pages in every
process, is kept beside it, and so is the summed anonymous PSS: PSS also splits the pages
of files (TensorFlow's libraries) with every other process on the machine that maps them,
so on a shared machine it falls while others run TensorFlow; anonymous pages are shared by
fork only, so their PSS is the tree's own.
After round 1 every tool must have written the same examples as the loop (else exit 1).
Prints a table of medians and the ratios ours/loop and ours/pool per dataset, the marginal
CPU per image (smallest to largest image set), the memory flatness ratio (rows manifest
against the largest image set) and writes all runs to --json. Only the children are
measured; the harness never loads TensorFlow.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import itertools
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
VENV_BIN = BENCH.parent / ".venv" / "bin"
PYTHON = VENV_BIN / "python"
OURS = VENV_BIN / "image-tfrecords"
BASELINES = ("loop", "pool")
SCALING_FLAG = "--worker_processes"
SAMPLE_SECONDS = 0.05
PSS_EVERY = 10  # samples: PSS every 0.5 s (see TreeSampler)
# smaps_rollup fields summed over the tree: run keys peak_pss_mb, peak_pss_anon_mb, ...
MEMORY_FIELDS = ("Pss", "Pss_Anon", "Rss")
# (key, label, format) of the table rows; every one also gets the ours/baseline ratios.
METRICS = (
    ("wall_s", "wall s", "{:.1f}"),
    ("cpu_s", "CPU s", "{:.1f}"),
    ("peak_pss_mb", "peak PSS MB", "{:.0f}"),
    ("peak_pss_anon_mb", "peak anon PSS MB", "{:.0f}"),
    ("peak_rss_mb", "peak RSS MB", "{:.0f}"),
    ("images_per_s", "images/s", "{:.1f}"),
    ("output_per_source", "output/source bytes", "{:.3f}"),
)

Listing = dict[str, Counter[tuple[str, ...]]]  # split -> (source_id, sha256, text) -> count


@dataclass(frozen=True)
class Tool:
    name: str
    command: tuple[str, ...]  # --manifest and --output_dir are added per run
    ours: bool  # counts its examples in summary.json, not in a `wrote N examples` line


def tools_for(ours_args: list[str], worker_processes: list[int]) -> list[Tool]:
    """The two baselines, ours, and ours at each --worker_processes of the scaling mode."""
    ours = (str(OURS), "convert", "--overwrite", *ours_args)
    return [
        *(
            Tool(name, (str(PYTHON), str(BENCH / f"{script}.py")), ours=False)
            for name, script in zip(BASELINES, ("handwritten", "process_pool"))
        ),
        Tool("ours", ours, ours=True),
        *(
            Tool(scaled_name(count), (*ours, SCALING_FLAG, str(count)), ours=True)
            for count in worker_processes
        ),
    ]


def scaled_name(worker_processes: int) -> str:
    return f"ours_dp{worker_processes}"


class TreeSampler(threading.Thread):
    """Tracks the peaks of the summed memory of a process and all its descendants.

    RSS is read every SAMPLE_SECONDS; PSS and anonymous PSS every PSS_EVERY samples only,
    as the kernel walks every page of a process to sum them (/proc/PID/smaps_rollup: about
    18 ms for a 600 MB TensorFlow process here), time taken from the cores the tools use.
    """

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.done = threading.Event()
        self.peaks = dict.fromkeys(MEMORY_FIELDS, 0)
        # The root process's own CPU seconds (not its children's), as last seen: for ours
        # the process that runs Beam and writes every shard, whose work does not spread
        # over the decoding processes.
        self.root_cpu_s = 0.0

    def run(self) -> None:
        for sample in itertools.count():
            fields = MEMORY_FIELDS if sample % PSS_EVERY == 0 else ("Rss",)
            for field, total in self._tree_memory(fields).items():
                self.peaks[field] = max(self.peaks[field], total)
            try:
                self.root_cpu_s = sum(self.root.cpu_times()[:2])
            except psutil.Error:  # the root has exited
                pass
            if self.done.wait(SAMPLE_SECONDS):
                return

    def _tree_memory(self, fields: tuple[str, ...]) -> dict[str, int]:
        """The tree's sum of each of `fields` (smaps_rollup names), in bytes."""
        totals = dict.fromkeys(fields, 0)
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:  # the root has exited
            return totals
        for proc in procs:
            try:
                if fields == ("Rss",):
                    totals["Rss"] += proc.memory_info().rss
                    continue
                with open(f"/proc/{proc.pid}/smaps_rollup", encoding="ascii") as file:
                    rollup = dict(line.split(":", 1) for line in file.read().splitlines()[1:])
            except (psutil.Error, OSError):  # exited between the listing and the read
                continue
            for field in fields:
                totals[field] += int(rollup[field].split()[0]) * 1024
        return totals


def check_memory_fields() -> None:
    """Exits unless this kernel's smaps_rollup has every field the sampler sums."""
    try:
        rollup = Path("/proc/self/smaps_rollup").read_text(encoding="ascii")
    except OSError as error:
        sys.exit(f"cannot read PSS here: {error}")
    missing = [field for field in MEMORY_FIELDS if f"\n{field}:" not in rollup]
    if missing:
        sys.exit(f"this kernel's smaps_rollup lacks {', '.join(missing)} (Linux 5.8+ has them)")


def measure(cmd: list[str], log: Path) -> tuple[int, float, float, float, dict[str, int]]:
    """Runs `cmd`, output to `log`: exit code, wall s, CPU s, the root process's own CPU s
    (to within a sampling interval), its tree's memory peaks.

    CPU is wait4's rusage of the child, which includes every descendant that was waited
    for (Beam's and the pool's worker processes are), so the whole tree's user+sys time.
    """
    with log.open("wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        sampler.done.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so tell Popen
    return (
        proc.returncode,
        wall,
        usage.ru_utime + usage.ru_stime,
        sampler.root_cpu_s,
        sampler.peaks,
    )


def run_tool(
    tool: Tool, manifest: Path, out: Path, log: Path, source_bytes: int
) -> dict[str, float]:
    """One measured run of `tool` into the fresh folder `out`; exits if the tool fails."""
    cmd = [*tool.command, "--manifest", str(manifest), "--output_dir", str(out)]
    code, wall, cpu, root_cpu, memory = measure(cmd, log)
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        sys.exit(f"{tool.name} exited with {code} ({shlex.join(cmd)}); end of {log}:\n{tail}")
    if tool.ours:
        examples = json.loads((out / "summary.json").read_text())["examples_written"]
    else:
        found = re.search(r"^wrote (\d+) examples", log.read_text(errors="replace"), re.M)
        if found is None:
            sys.exit(f"{tool.name} printed no example count; see {log}")
        examples = int(found[1])
    # The shards alone, as the baselines write no index.
    output_bytes = sum(
        path.stat().st_size
        for path in out.iterdir()
        if path.name.endswith((".tfrecord", ".tfrecord.gz"))
    )
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "root_cpu_s": root_cpu,
        "examples": examples,
        **{f"peak_{field.lower()}_mb": peak / 2**20 for field, peak in memory.items()},
        "images_per_s": examples / wall,
        "output_bytes": output_bytes,
        "output_per_source": output_bytes / source_bytes,
    }


def list_examples(out: Path) -> Listing:
    """Every example in `out`, read by read_records.py in a child process (TensorFlow)."""
    result = subprocess.run(
        [str(PYTHON), str(BENCH / "read_records.py"), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    listing: Listing = {}
    for line in result.stdout.splitlines():
        split, *key = json.loads(line)
        listing.setdefault(split, Counter())[tuple(key)] += 1
    return listing


def check_same(name: str, listings: dict[str, Listing]) -> None:
    """Exits 1 unless every tool wrote the same examples to the same splits as the loop."""
    reference = listings["loop"]
    counts = ", ".join(f"{split} {keys.total()}" for split, keys in sorted(reference.items()))
    differing = [tool for tool, listing in listings.items() if listing != reference]
    if not differing:
        print(f"{name}: {', '.join(listings)} wrote the same examples ({counts})")
        return
    for tool in differing:
        other = listings[tool]
        print(f"{name}: LOOP AND {tool.upper()} WROTE DIFFERENT EXAMPLES")
        for split in sorted(reference.keys() | other.keys()):
            mine, theirs = reference.get(split, Counter()), other.get(split, Counter())
            print(
                f"  {split}: loop {mine.total()}, {tool} {theirs.total()}; "
                f"{(mine - theirs).total()} only in loop, "
                f"{(theirs - mine).total()} only in {tool}"
            )
            for key in [*(mine - theirs)][:3] + [*(theirs - mine)][:3]:
                print(f"    e.g. {key}")
    sys.exit(1)


def source_bytes_of(manifest: Path) -> int:
    """Bytes of the images the manifest's rows name, counting repeated rows each time."""
    sizes: dict[str, int] = {}
    total = 0
    with manifest.open(newline="") as file:
        for _, uri, _ in csv.reader(file):
            if uri not in sizes:
                sizes[uri] = (manifest.parent / uri).stat().st_size
            total += sizes[uri]
    return total


def ensure_dataset(folder: Path, images: int, rows: int | None, seed: int) -> None:
    """Runs make_dataset.py unless `folder` already holds these images and manifests."""
    manifests = {folder / "manifest.csv": images}
    if rows:
        manifests[folder / f"manifest_{rows}.csv"] = rows
    present = (
        all(path.exists() and _line_count(path) == count for path, count in manifests.items())
        and sum(1 for _ in folder.glob("images/*/*.jpg")) == images
    )
    if present:
        print(f"reusing {folder} ({images} images)")
        return
    cmd = [
        str(PYTHON),
        str(BENCH / "make_dataset.py"),
        "--out",
        str(folder),
        "--images",
        str(images),
        "--seed",
        str(seed),
    ]
    subprocess.run(cmd + (["--rows", str(rows)] if rows else []), check=True)


def _line_count(path: Path) -> int:
    with path.open("rb") as file:
        return sum(1 for _ in file)


def bench_dataset(
    name: str, manifest: Path, runs_dir: Path, rounds: int, tools: list[Tool]
) -> dict:
    """All rounds of the tools on one manifest: the runs, their medians and the ratios."""
    source_bytes = source_bytes_of(manifest)
    runs: dict[str, list[dict[str, float]]] = {tool.name: [] for tool in tools}
    runs_dir.mkdir(parents=True, exist_ok=True)
    for round_number in range(1, rounds + 1):
        listings: dict[str, Listing] = {}
        first = (round_number - 1) % len(tools)  # each tool in turn runs first in a round
        for tool in tools[first:] + tools[:first]:
            out = runs_dir / f"{tool.name}-{round_number}"
            shutil.rmtree(out, ignore_errors=True)
            run = run_tool(
                tool, manifest, out, runs_dir / f"{tool.name}-{round_number}.log", source_bytes
            )
            print(
                f"  round {round_number} {tool.name}: {run['wall_s']:.1f} s wall, "
                f"{run['cpu_s']:.1f} s CPU, {run['peak_pss_mb']:.0f} MB peak PSS "
                f"({run['peak_rss_mb']:.0f} RSS), {run['examples']} examples",
                flush=True,
            )
            runs[tool.name].append(run)
            if round_number == 1:
                listings[tool.name] = list_examples(out)
            # Outputs are as large as the source images: keep only the logs.
            shutil.rmtree(out)
        if listings:
            check_same(name, {tool.name: listings[tool.name] for tool in tools})
    median = {
        tool: {key: statistics.median(run[key] for run in tool_runs) for key in tool_runs[0]}
        for tool, tool_runs in runs.items()
    }
    ratio = {
        f"ours/{base}": {key: median["ours"][key] / median[base][key] for key, _, _ in METRICS}
        for base in BASELINES
    }
    return {
        "name": name,
        "manifest": str(manifest),
        "rows": _line_count(manifest),
        "source_bytes": source_bytes,
        "runs": runs,
        "median": median,
        "ratio": ratio,
    }


def scaling_of(result: dict, worker_processes: list[int]) -> dict:
    """Speed-up of ours from the first --worker_processes to each: time there / time here."""
    base = result["median"][scaled_name(worker_processes[0])]
    return {
        "from": worker_processes[0],
        "speedup": {
            str(count): {
                key: base[key] / result["median"][scaled_name(count)][key]
                for key in ("wall_s", "cpu_s")
            }
            for count in worker_processes[1:]
        },
    }


def marginal_cpu(small: dict, large: dict) -> dict:
    """CPU ms per image from the smallest image set to the largest, per tool, and ratios;
    and ours' writing process alone (its own CPU, decoding processes excluded): the work
    per image that one process does whatever the cores, so the core count at which it
    becomes the limit is about the total per image over it."""

    def per_image(tool: str, key: str) -> float:
        return (
            1000
            * (large["median"][tool][key] - small["median"][tool][key])
            / (large["median"][tool]["examples"] - small["median"][tool]["examples"])
        )

    per_tool = {tool: per_image(tool, "cpu_s") for tool in large["median"]}
    writer = per_image("ours", "root_cpu_s")
    return {
        "from": small["name"],
        "to": large["name"],
        "ms_per_image": per_tool,
        "ratio": {f"ours/{base}": per_tool["ours"] / per_tool[base] for base in BASELINES},
        "ours_writer_ms_per_image": writer,
        "ours_writer_limit_cores": per_tool["ours"] / writer if writer > 0 else None,
    }


def print_table(result: dict, rounds: int) -> None:
    tools = list(result["median"])
    print(
        f"\n{result['name']}: {result['rows']} rows, {result['source_bytes'] / 1e6:.1f} MB "
        f"of source images, median of {rounds} round(s)"
    )
    print(
        f"{'':22}"
        + "".join(f"{tool:>10}" for tool in tools)
        + "".join(f"{name:>11}" for name in result["ratio"])
    )
    for key, label, fmt in METRICS:
        print(
            f"{label:22}"
            + "".join(f"{fmt.format(result['median'][tool][key]):>10}" for tool in tools)
            + "".join(f"{ratio[key]:>11.2f}" for ratio in result["ratio"].values())
        )
    if result.get("scaling"):
        scaling = result["scaling"]
        for count, speedup in scaling["speedup"].items():
            print(
                f"speed-up of ours from {SCALING_FLAG} {scaling['from']} to {count}: "
                f"wall {speedup['wall_s']:.2f}x, CPU {speedup['cpu_s']:.2f}x "
                "(time there / time here)"
            )
    print()


def print_marginal(marginal: dict) -> None:
    print(
        f"marginal CPU per image, {marginal['from']} to {marginal['to']}: "
        + ", ".join(f"{tool} {ms:.2f} ms" for tool, ms in marginal["ms_per_image"].items())
        + "; "
        + ", ".join(f"{name} {value:.2f}" for name, value in marginal["ratio"].items())
    )
    limit = marginal["ours_writer_limit_cores"]
    print(
        f"ours' writing process: {marginal['ours_writer_ms_per_image']:.2f} ms per image "
        "of its own; the limit at about "
        + (f"{limit:.1f} cores" if limit else "(no measurable writer CPU)")
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[200, 10000], help="image counts, one dataset each"
    )
    parser.add_argument(
        "--rows",
        type=int,
        default=100000,
        help="rows of the manifest cycling the largest set (0: none)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("/tmp/itf-bench"),
        help="datasets, run logs and (by default) the JSON go here",
    )
    parser.add_argument(
        "--ours-args",
        default="",
        help="extra `convert` flags as one string, e.g. "
        '"--direct_num_workers 2" (a lone flag: --ours-args=--flag)',
    )
    parser.add_argument(
        "--ours_worker_processes",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help=f"also run ours with {SCALING_FLAG} N for each N "
        "on the image sets; speed-ups are against the first N",
    )
    parser.add_argument("--json", type=Path, help="results file (default WORKDIR/results.json)")
    args = parser.parse_args()
    largest = max(args.sizes)
    if args.rows and args.rows <= largest:
        parser.error(f"--rows must be larger than the largest size ({largest})")
    worker_processes = list(dict.fromkeys(args.ours_worker_processes))  # one run set each
    if len(worker_processes) == 1:
        parser.error("--ours_worker_processes needs two counts or more to compare")
    check_memory_fields()
    json_path = args.json or args.workdir / "results.json"
    ours_args = shlex.split(args.ours_args)
    tools = tools_for(ours_args, worker_processes)

    # (name, manifest, tools): the scaling runs only on the image sets.
    datasets: list[tuple[str, Path, list[Tool]]] = []
    for size in sorted(set(args.sizes)):
        folder = args.workdir / f"data-{size}-seed{args.seed}"
        ensure_dataset(folder, size, args.rows if size == largest else None, args.seed)
        datasets.append((f"{size} images", folder / "manifest.csv", tools))
    if args.rows:
        datasets.append(
            (
                f"{args.rows} rows over {largest} images",
                args.workdir / f"data-{largest}-seed{args.seed}" / f"manifest_{args.rows}.csv",
                [tool for tool in tools if tool.name in (*BASELINES, "ours")],
            )
        )

    results: dict = {
        "config": {
            "sizes": sorted(set(args.sizes)),
            "rows": args.rows,
            "rounds": args.rounds,
            "seed": args.seed,
            "ours_args": ours_args,
            "ours_worker_processes": worker_processes,
            "cpus": os.cpu_count(),
            "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "started_at": datetime.datetime.now(datetime.UTC).isoformat(),
        },
        "datasets": [],
        "marginal_cpu": None,
        "flatness": None,
    }
    for name, manifest, dataset_tools in datasets:
        print(f"== {name}: {manifest}", flush=True)
        slug = re.sub(r"\W+", "-", name)
        result = bench_dataset(
            name, manifest.resolve(), args.workdir / "runs" / slug, args.rounds, dataset_tools
        )
        if len(dataset_tools) > len(BASELINES) + 1:
            result["scaling"] = scaling_of(result, worker_processes)
        results["datasets"].append(result)
        print_table(result, args.rounds)
        # Saved after every dataset, so a long run that stops keeps what it measured.
        json_path.write_text(json.dumps(results, indent=2))

    image_sets = results["datasets"][: len(set(args.sizes))]
    if len(image_sets) > 1:
        results["marginal_cpu"] = marginal_cpu(image_sets[0], image_sets[-1])
        print_marginal(results["marginal_cpu"])
    if args.rows:
        at_rows, at_largest = (results["datasets"][index]["median"]["ours"] for index in (-1, -2))
        results["flatness"] = {
            "rows": args.rows,
            "images": largest,
            "ours_peak_pss_mb_rows": at_rows["peak_pss_mb"],
            "ours_peak_pss_mb_images": at_largest["peak_pss_mb"],
            "ratio": at_rows["peak_pss_mb"] / at_largest["peak_pss_mb"],
            "pss_anon_ratio": at_rows["peak_pss_anon_mb"] / at_largest["peak_pss_anon_mb"],
            "rss_ratio": at_rows["peak_rss_mb"] / at_largest["peak_rss_mb"],
        }
        print(
            f"flatness: ours peak PSS at {args.rows} rows / at {largest} images = "
            f"{at_rows['peak_pss_mb']:.0f} MB / {at_largest['peak_pss_mb']:.0f} MB = "
            f"{results['flatness']['ratio']:.2f}"
        )
    json_path.write_text(json.dumps(results, indent=2))
    print(f"results: {json_path}")


if __name__ == "__main__":
    main()
