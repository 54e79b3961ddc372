"""Benchmarks `image-tfrecords convert` ("ours") against bench/handwritten.py ("baseline").

Datasets: one image set per --sizes (made by make_dataset.py, reused when present), plus
a --rows manifest whose rows cycle through the largest set, to see whether our memory
stays flat as the manifest grows. On each dataset the two tools run alternately, --rounds
times each, as child processes writing to fresh output folders. Per run: wall seconds,
CPU seconds and peak RSS of the whole child process tree, images/s, and output bytes
against source bytes. After round 1 both outputs must hold the same examples (else exit
1). Prints a table of medians per dataset and the memory flatness ratio, and writes all
runs to --json. Only the children are measured; the harness never loads TensorFlow.
"""

from __future__ import annotations

import argparse
import csv
import datetime
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
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
VENV_BIN = BENCH.parent / ".venv" / "bin"
PYTHON = VENV_BIN / "python"
OURS = VENV_BIN / "image-tfrecords"
TOOLS = ("baseline", "ours")
SAMPLE_SECONDS = 0.05
# (key, label, format) of the table rows; every one also gets an ours/baseline ratio.
METRICS = (("wall_s", "wall s", "{:.1f}"), ("cpu_s", "CPU s", "{:.1f}"),
           ("peak_rss_mb", "peak RSS MB", "{:.0f}"), ("images_per_s", "images/s", "{:.1f}"),
           ("output_per_source", "output/source bytes", "{:.3f}"))

Listing = dict[str, Counter[tuple[str, ...]]]  # split -> (source_id, sha256, text) -> count


class TreeSampler(threading.Thread):
    """Tracks the peak of the summed RSS of a process and all its descendants."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.done = threading.Event()
        self.peak_bytes = 0

    def run(self) -> None:
        while True:
            self.peak_bytes = max(self.peak_bytes, self._tree_rss())
            if self.done.wait(SAMPLE_SECONDS):
                return

    def _tree_rss(self) -> int:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:  # the root has exited
            return 0
        total = 0
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except psutil.Error:  # exited between the listing and the read
                pass
        return total


def measure(cmd: list[str], log: Path) -> tuple[int, float, float, int]:
    """Runs `cmd`, output to `log`: exit code, wall s, CPU s, peak RSS bytes of its tree.

    CPU is wait4's rusage of the child, which includes every descendant that was waited
    for (Beam's worker processes are), so the whole tree's user+sys time.
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
    return proc.returncode, wall, usage.ru_utime + usage.ru_stime, sampler.peak_bytes


def run_tool(tool: str, manifest: Path, out: Path, log: Path, ours_args: list[str],
             source_bytes: int) -> dict[str, float]:
    """One measured run of `tool` into the fresh folder `out`; exits if the tool fails."""
    if tool == "baseline":
        cmd = [str(PYTHON), str(BENCH / "handwritten.py"),
               "--manifest", str(manifest), "--output_dir", str(out)]
    else:
        cmd = [str(OURS), "convert", "--manifest", str(manifest), "--output_dir", str(out),
               "--overwrite", *ours_args]
    code, wall, cpu, peak = measure(cmd, log)
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        sys.exit(f"{tool} exited with {code} ({shlex.join(cmd)}); end of {log}:\n{tail}")
    if tool == "baseline":
        found = re.search(r"^wrote (\d+) examples", log.read_text(errors="replace"), re.M)
        if found is None:
            sys.exit(f"baseline printed no example count; see {log}")
        examples = int(found[1])
    else:
        examples = json.loads((out / "summary.json").read_text())["examples_written"]
    output_bytes = sum(path.stat().st_size for path in out.glob("*.tfrecord*"))
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak / 2**20, "examples": examples,
            "images_per_s": examples / wall, "output_bytes": output_bytes,
            "output_per_source": output_bytes / source_bytes}


def list_examples(out: Path) -> Listing:
    """Every example in `out`, read by read_records.py in a child process (TensorFlow)."""
    result = subprocess.run([str(PYTHON), str(BENCH / "read_records.py"), str(out)],
                            capture_output=True, text=True, check=True)
    listing: Listing = {}
    for line in result.stdout.splitlines():
        split, *key = json.loads(line)
        listing.setdefault(split, Counter())[tuple(key)] += 1
    return listing


def check_same(name: str, listings: dict[str, Listing]) -> None:
    """Exits 1 unless both tools wrote the same examples to the same splits."""
    base, ours = listings["baseline"], listings["ours"]
    counts = ", ".join(f"{split} {keys.total()}" for split, keys in sorted(base.items()))
    if base == ours:
        print(f"{name}: baseline and ours wrote the same examples ({counts})")
        return
    print(f"{name}: BASELINE AND OURS WROTE DIFFERENT EXAMPLES")
    for split in sorted(base.keys() | ours.keys()):
        only_base = base.get(split, Counter()) - ours.get(split, Counter())
        only_ours = ours.get(split, Counter()) - base.get(split, Counter())
        print(f"  {split}: baseline {base.get(split, Counter()).total()}, "
              f"ours {ours.get(split, Counter()).total()}; "
              f"{only_base.total()} only in baseline, {only_ours.total()} only in ours")
        for key in [*only_base][:3] + [*only_ours][:3]:
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
    present = (all(path.exists() and _line_count(path) == count
                   for path, count in manifests.items())
               and sum(1 for _ in folder.glob("images/*/*.jpg")) == images)
    if present:
        print(f"reusing {folder} ({images} images)")
        return
    cmd = [str(PYTHON), str(BENCH / "make_dataset.py"), "--out", str(folder),
           "--images", str(images), "--seed", str(seed)]
    subprocess.run(cmd + (["--rows", str(rows)] if rows else []), check=True)


def _line_count(path: Path) -> int:
    with path.open("rb") as file:
        return sum(1 for _ in file)


def bench_dataset(name: str, manifest: Path, runs_dir: Path, rounds: int,
                  ours_args: list[str]) -> dict:
    """All rounds of both tools on one manifest: the runs, their medians and the ratios."""
    source_bytes = source_bytes_of(manifest)
    runs: dict[str, list[dict[str, float]]] = {tool: [] for tool in TOOLS}
    runs_dir.mkdir(parents=True, exist_ok=True)
    for round_number in range(1, rounds + 1):
        listings: dict[str, Listing] = {}
        for tool in TOOLS:
            out = runs_dir / f"{tool}-{round_number}"
            shutil.rmtree(out, ignore_errors=True)
            run = run_tool(tool, manifest, out, runs_dir / f"{tool}-{round_number}.log",
                           ours_args, source_bytes)
            print(f"  round {round_number} {tool}: {run['wall_s']:.1f} s wall, "
                  f"{run['cpu_s']:.1f} s CPU, {run['peak_rss_mb']:.0f} MB peak RSS, "
                  f"{run['examples']} examples", flush=True)
            runs[tool].append(run)
            if round_number == 1:
                listings[tool] = list_examples(out)
            # Outputs are as large as the source images: keep only the logs.
            shutil.rmtree(out)
        if listings:
            check_same(name, listings)
    median = {tool: {key: statistics.median(run[key] for run in runs[tool])
                     for key in runs[tool][0]} for tool in TOOLS}
    ratio = {key: median["ours"][key] / median["baseline"][key] for key, _, _ in METRICS}
    return {"name": name, "manifest": str(manifest), "rows": _line_count(manifest),
            "source_bytes": source_bytes, "runs": runs, "median": median, "ratio": ratio}


def print_table(result: dict, rounds: int) -> None:
    print(f"\n{result['name']}: {result['rows']} rows, {result['source_bytes'] / 1e6:.1f} MB "
          f"of source images, median of {rounds} round(s)")
    print(f"{'':22}{'baseline':>10}{'ours':>10}{'ours/baseline':>15}")
    for key, label, fmt in METRICS:
        print(f"{label:22}{fmt.format(result['median']['baseline'][key]):>10}"
              f"{fmt.format(result['median']['ours'][key]):>10}"
              f"{result['ratio'][key]:>15.2f}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 10000],
                        help="image counts, one dataset each")
    parser.add_argument("--rows", type=int, default=100000,
                        help="rows of the manifest cycling the largest set (0: none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/itf-bench"),
                        help="datasets, run logs and (by default) the JSON go here")
    parser.add_argument("--ours-args", default="",
                        help='extra `convert` flags as one string, e.g. '
                             '"--direct_num_workers 2" (a lone flag: --ours-args=--flag)')
    parser.add_argument("--json", type=Path, help="results file (default WORKDIR/results.json)")
    args = parser.parse_args()
    largest = max(args.sizes)
    if args.rows and args.rows <= largest:
        parser.error(f"--rows must be larger than the largest size ({largest})")
    json_path = args.json or args.workdir / "results.json"
    ours_args = shlex.split(args.ours_args)

    manifests: list[tuple[str, Path]] = []
    for size in sorted(set(args.sizes)):
        folder = args.workdir / f"data-{size}-seed{args.seed}"
        ensure_dataset(folder, size, args.rows if size == largest else None, args.seed)
        manifests.append((f"{size} images", folder / "manifest.csv"))
    if args.rows:
        manifests.append((f"{args.rows} rows over {largest} images", args.workdir
                          / f"data-{largest}-seed{args.seed}" / f"manifest_{args.rows}.csv"))

    results: dict = {
        "config": {"sizes": sorted(set(args.sizes)), "rows": args.rows, "rounds": args.rounds,
                   "seed": args.seed, "ours_args": ours_args, "cpus": os.cpu_count(),
                   "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
                   "python": platform.python_version(), "platform": platform.platform(),
                   "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat()},
        "datasets": [], "flatness": None}
    for name, manifest in manifests:
        print(f"== {name}: {manifest}", flush=True)
        slug = re.sub(r"\W+", "-", name)
        result = bench_dataset(name, manifest.resolve(), args.workdir / "runs" / slug,
                               args.rounds, ours_args)
        results["datasets"].append(result)
        print_table(result, args.rounds)
        # Saved after every dataset, so a long run that stops keeps what it measured.
        json_path.write_text(json.dumps(results, indent=2))

    if args.rows:
        at_rows, at_largest = (results["datasets"][index]["median"]["ours"]["peak_rss_mb"]
                               for index in (-1, -2))
        results["flatness"] = {"rows": args.rows, "images": largest,
                               "ours_peak_rss_mb_rows": at_rows,
                               "ours_peak_rss_mb_images": at_largest,
                               "ratio": at_rows / at_largest}
        print(f"flatness: ours peak RSS at {args.rows} rows / at {largest} images = "
              f"{at_rows:.0f} MB / {at_largest:.0f} MB = {at_rows / at_largest:.2f}")
        json_path.write_text(json.dumps(results, indent=2))
    print(f"results: {json_path}")


if __name__ == "__main__":
    main()
