"""Issue 46's goal: a daily run that reuses yesterday's output, against a full run of the
same day, side by side; the two outputs compared byte for byte; the images it read.

Day 1 is make_dataset.py's 10,000 photos (made once, reused when present); day 2 is day 1
with 1% new photos (an existing one turned upside down and saved again, so its bytes and
pixels are its own), 0.5% of the rows relabelled to another existing label and 0.5% of
the rows removed, all drawn from --seed. Day 1 is converted once, into OUT1. Then, in
--rounds rounds, each starting with the next tool, as child processes into fresh folders:

    full     `image-tfrecords convert` of day 2
    reuse    the same with --reuse_from OUT1
    loop     bench/handwritten.py on day 2, and pool, bench/process_pool.py: the
             hand-written baselines every bench here reports
    floor    `image-tfrecords convert` of a 10-row manifest: a run's fixed cost
    control  (with --control) a second full run, which must also equal the first

Per run: wall and CPU seconds and peak PSS of the process tree (write_bench.py's
measure). In every round the reusing run's output (and the control's) is compared with
the full run's, file by file: every shard and companion, dead letters, copy lists,
OUTPUT/sources/*, the label files, tf.Transform's folders, summary.json apart from
RUN_FACTS, and report.html and the SavedModel with the run's folder, id and times masked
(two full runs differ there only); any difference exits 1. Then the reusing run is
repeated once under `strace -f -e trace=openat`, untimed, to count the image files it
opened (and OUT1's shards); every open counts, whatever the library that made it.

    .venv/bin/python bench/daily_bench.py --rounds 3 --json bench/daily-results.json
"""

from __future__ import annotations

import argparse
import csv
import datetime
import filecmp
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import numpy as np
import psutil
from make_dataset import CLASSES, SPLITS
from PIL import Image
from write_bench import BENCH, OURS, PYTHON, check_memory_fields, ensure_dataset, measure

IMAGES = 10_000
NEW_SHARE, RELABELLED_SHARE, REMOVED_SHARE = 0.01, 0.005, 0.005
FLOOR_ROWS = 10
NEW_IMAGES_DIR = "new_images"  # beside make_dataset.py's images/, which it owns
GOAL_RATIO = 0.15  # reuse wall / full wall
TOOLS = ("full", "reuse", "loop", "pool", "floor")
# summary.json's facts about the run rather than its output: they differ between any two
# runs (the times, the run id, the folders named), or say what this run reused and what
# changed since the output it was built from, which a full run has no word for.
RUN_FACTS = (
    "run_id",
    "started_at",
    "finished_at",
    "resumed_shards",
    "options.output_dir",
    "options.reuse_from",
    "reused_from",
    "examples_reused",
    "changes",
    "label_id_changes",
)
# Files that name the run that wrote them, compared with those names masked: report.html
# names its output folder and when it finished; tf.Transform's SavedModel names its lookup
# table after the folder tf.Transform worked in, the run id's (core/records/naming.py's
# transform_dir).
NAMES_THE_RUN = ("report.html", "transform_fn/saved_model.pb")
# report.html's section (and its link) on what changed since the reused output.
REUSE_SECTION = re.compile(rb'<a href="#changes">Changes</a>|\n<h2 id="changes">.*?</table>', re.S)
# The SavedModel's checksums (so they differ with the run id), not compared: the
# SavedModel is.
NOT_COMPARED = ("transform_fn/fingerprint.pb",)


class Day2(NamedTuple):
    """What day 2 changed, by day 1's row numbers (0-based)."""

    new: list[int]  # the rows whose image, turned upside down, is a new photo
    relabelled: list[int]
    removed: list[int]


def draw_changes(rows: int, seed: int) -> Day2:
    """Disjoint rows for each change, from a seeded shuffle."""
    order = [int(row) for row in np.random.default_rng((seed, 46)).permutation(rows)]
    counts = [round(rows * share) for share in (NEW_SHARE, RELABELLED_SHARE, REMOVED_SHARE)]
    bounds = np.cumsum([0, *counts])
    new, relabelled, removed = (sorted(order[start:end]) for start, end in zip(bounds, bounds[1:]))
    return Day2(new, relabelled, removed)


def write_days(data: Path, seed: int, new_class: str | None = None) -> Day2:
    """Writes DATA/day1.csv (make_dataset.py's manifest), DATA/day2.csv, DATA/floor.csv
    and day 2's new images (kept when present: their identity is their file's). With
    `new_class`, the new photos are of that class (sorted before the others, it moves
    every label id: each copied example's label fields are written anew)."""
    with (data / "manifest.csv").open(newline="") as file:
        day1 = [tuple(row) for row in csv.reader(file)]
    changes = draw_changes(len(day1), seed)
    rng = np.random.default_rng((seed, 46, 2))
    day2 = [list(row) for row in day1]
    for row in changes.relabelled:
        label = day2[row][2]
        day2[row][2] = CLASSES[
            (CLASSES.index(label) + int(rng.integers(1, len(CLASSES)))) % len(CLASSES)
        ]
    splits, shares = zip(*SPLITS)
    added = []
    for row in changes.new:
        _, uri, label = day1[row]
        new_uri = uri.replace("images/", f"{NEW_IMAGES_DIR}/", 1).replace(".jpg", "_new.jpg")
        if not (data / new_uri).exists():
            (data / new_uri).parent.mkdir(parents=True, exist_ok=True)
            with Image.open(data / uri) as image:
                image.rotate(180).save(data / new_uri, "JPEG", quality=90)
        added.append([str(rng.choice(splits, p=shares)), new_uri, new_class or label])
    removed = set(changes.removed)
    write_rows(data / "day1.csv", day1)
    write_rows(data / "day2.csv", [r for i, r in enumerate(day2) if i not in removed] + added)
    write_rows(data / "floor.csv", floor_rows(day1))
    return changes


def floor_rows(rows: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """FLOOR_ROWS rows with every split, whose VALIDATION and TEST labels TRAIN has (so
    none is dead-lettered as unseen)."""
    by_split: dict[str, list[tuple[str, ...]]] = {}
    for row in rows:
        by_split.setdefault(row[0], []).append(row)
    train = by_split["TRAIN"][: FLOOR_ROWS - 2]
    seen = {label for _, _, label in train}
    others = [
        next(row for row in by_split[split] if row[2] in seen) for split in ("VALIDATION", "TEST")
    ]
    return train + others


def write_rows(path: Path, rows: list) -> None:
    with path.open("w", newline="") as file:
        csv.writer(file, lineterminator="\n").writerows(rows)


def commands(data: Path, out1: Path, control: bool) -> dict[str, list[str]]:
    """Each tool's command but its --output_dir."""
    day2 = str(data / "day2.csv")
    ours = [str(OURS), "convert", "--quiet", "--manifest"]
    tools = {
        "full": [*ours, day2],
        "reuse": [*ours, day2, "--reuse_from", str(out1)],
        "loop": [str(PYTHON), str(BENCH / "handwritten.py"), "--manifest", day2],
        "pool": [str(PYTHON), str(BENCH / "process_pool.py"), "--manifest", day2],
        "floor": [*ours, str(data / "floor.csv")],
    }
    if control:
        tools["control"] = tools["full"]
    return tools


def run(name: str, command: list[str], out: Path, logs: Path) -> dict[str, float]:
    """One measured run into the fresh folder `out`; exits if it fails."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [*command, "--output_dir", str(out)]
    log = logs / f"{out.name}.log"
    code, wall, cpu, _, memory = measure(cmd, log)
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        sys.exit(f"{name} exited with {code} ({shlex.join(cmd)}); end of {log}:\n{tail}")
    return {"wall_s": wall, "cpu_s": cpu, "peak_pss_mb": memory["Pss"] / 2**20}


def differences(full: Path, other: Path) -> list[str]:
    """What differs between two outputs: files in one only, files whose bytes differ
    (NAMES_THE_RUN's with the run's names masked; NOT_COMPARED aside), and summary.json's
    fields (RUN_FACTS aside)."""

    def files(root: Path) -> set[str]:
        return {str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()}

    ours, theirs = files(full), files(other)
    found = [f"only in {full.name}: {name}" for name in sorted(ours - theirs)]
    found += [f"only in {other.name}: {name}" for name in sorted(theirs - ours)]
    for name in sorted((ours & theirs) - set(NOT_COMPARED)):
        if name == "summary.json":
            found += [
                f"summary.json {field}: {a!r} != {b!r}"
                for field, a, b in summary_differences(full / name, other / name)
            ]
        elif name in NAMES_THE_RUN:
            if run_masked(full, name) != run_masked(other, name):
                found.append(f"bytes differ, the run's names masked: {name}")
        elif not filecmp.cmp(full / name, other / name, shallow=False):
            found.append(f"bytes differ: {name}")
    return found


def run_masked(output: Path, name: str) -> bytes:
    """The file's bytes with the run's facts it may hold masked: the folder it wrote to,
    its id and times (its summary.json's), and report.html's section on what changed
    since the output a run reused (summary.json's `changes`, a RUN_FACT)."""
    summary = json.loads((output / "summary.json").read_text())
    masked = REUSE_SECTION.sub(b"", (output / name).read_bytes())
    for fact in ("options.output_dir", "run_id", "started_at", "finished_at"):
        masked = masked.replace(str(flatten(summary)[fact]).encode(), f"<{fact}>".encode())
    return masked


def summary_differences(a: Path, b: Path) -> list[tuple[str, object, object]]:
    first, second = (flatten(json.loads(path.read_text())) for path in (a, b))
    return [
        (field, first.get(field), second.get(field))
        for field in sorted(first.keys() | second.keys())
        if not is_run_fact(field) and first.get(field) != second.get(field)
    ]


def flatten(value: object, prefix: str = "") -> dict[str, object]:
    """A JSON document's leaves by their dotted paths (lists kept whole)."""
    if not isinstance(value, dict):
        return {prefix: value}
    leaves: dict[str, object] = {}
    for key, item in value.items():
        leaves.update(flatten(item, f"{prefix}.{key}" if prefix else key))
    return leaves


def is_run_fact(field: str) -> bool:
    return any(field == fact or field.startswith(fact + ".") for fact in RUN_FACTS)


def count_reads(command: list[str], out: Path, data: Path, out1: Path, logs: Path) -> dict:
    """Runs `command` once under strace, untimed, and counts the opens of image files (of
    DATA) and of each of OUT1's files."""
    if shutil.which("strace") is None:
        return {"counted": False, "why": "strace is not installed"}
    shutil.rmtree(out, ignore_errors=True)
    trace = logs / "reads.strace"
    cmd = ["strace", "-f", "-qq", "-e", "trace=openat", "-o", str(trace)]
    cmd += [*command, "--output_dir", str(out)]
    with (logs / "reads.log").open("wb") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    shutil.rmtree(out)
    # A call another thread interrupts is logged as `openat(..., "PATH", ... <unfinished
    # ...>` then `<... openat resumed>`: the path is on the first line only, so each
    # call's path is counted once.
    opened = re.compile(r'openat\((?:AT_FDCWD|\d+), "([^"]+)"')
    images: list[str] = []
    previous: Counter[str] = Counter()
    with trace.open(errors="replace") as lines:
        for line in lines:
            found = opened.search(line)
            if found is None:
                continue
            path = found[1]
            if path.startswith(str(data) + "/") and path.endswith(".jpg"):
                images.append(path)
            elif path.startswith(str(out1) + "/"):
                previous[path.removeprefix(str(out1) + "/")] += 1
    trace.unlink()
    return {
        "counted": True,
        "image_opens": len(images),
        "distinct_images": len(set(images)),
        "new_images_opened": sum(f"/{NEW_IMAGES_DIR}/" in path for path in set(images)),
        "previous_output_opens": dict(sorted(previous.items())),
    }


def machine() -> dict:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.M)
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": model[1] if model else platform.processor(),
        "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("/tmp/itf-bench"),
        help="the data set (write_bench.py's, shared) and the runs go here",
    )
    parser.add_argument(
        "--tools", nargs="+", choices=TOOLS, default=list(TOOLS), help="which to run"
    )
    parser.add_argument(
        "--control", action="store_true", help="also a second full run, compared as reuse is"
    )
    parser.add_argument("--json", type=Path, help="results file (default WORKDIR/daily.json)")
    parser.add_argument(
        "--new_class",
        help="day 2's new photos are of this class (one sorted first moves every label id)",
    )
    args = parser.parse_args()
    check_memory_fields()
    # Runs import TensorFlow, tf.Transform and Beam from their bytecode, as an installed
    # package does: a venv made with PYTHONDONTWRITEBYTECODE set has none, and every run
    # would compile their sources again (~15 s of CPU a process here, py-spy). Day 1's
    # run, which is not compared, writes it.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    data = (args.workdir / f"data-{IMAGES}-seed{args.seed}").resolve()
    ensure_dataset(data, IMAGES, None, args.seed)
    changes = write_days(data, args.seed, args.new_class)
    runs_dir = (args.workdir / "daily-runs").resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    out1 = runs_dir / "day1"
    tools = {
        name: command
        for name, command in commands(data, out1, args.control).items()
        if name in args.tools or name == "control"
    }
    compared = [name for name in ("reuse", "control") if name in tools]
    if compared and "full" not in tools:
        parser.error("reuse and --control are compared with full: run it too")
    json_path = args.json or args.workdir / "daily.json"
    results: dict = {
        "config": {
            "images": IMAGES,
            "rounds": args.rounds,
            "seed": args.seed,
            "tools": list(tools),
            "commands": {name: shlex.join(cmd) for name, cmd in tools.items()},
            "machine": machine(),
            "started_at": datetime.datetime.now(datetime.UTC).isoformat(),
        },
        "day2": {
            "day1_rows": IMAGES,
            "new": len(changes.new),
            "relabelled": len(changes.relabelled),
            "removed": len(changes.removed),
            "new_class": args.new_class,
            "rows": IMAGES + len(changes.new) - len(changes.removed),
        },
        "runs": {name: [] for name in tools},
        "differences": {name: [] for name in compared},
    }
    print(
        f"day 2: {results['day2']['rows']} rows; {len(changes.new)} new photos, "
        f"{len(changes.relabelled)} relabelled, {len(changes.removed)} removed",
        flush=True,
    )
    day1 = run(
        "day 1",
        [str(OURS), "convert", "--quiet", "--manifest", str(data / "day1.csv")],
        out1,
        runs_dir,
    )
    results["day1"] = day1
    summary = json.loads((out1 / "summary.json").read_text())
    results["config"]["versions"] = summary["versions"]
    print(f"day 1, full: {day1['wall_s']:.1f} s into {out1}", flush=True)

    names = list(tools)
    for round_number in range(1, args.rounds + 1):
        first = (round_number - 1) % len(names)  # each tool in turn runs first in a round
        for name in names[first:] + names[:first]:
            out = runs_dir / f"{name}-{round_number}"
            measured = run(name, tools[name], out, runs_dir)
            results["runs"][name].append(measured)
            print(
                f"  round {round_number} {name}: {measured['wall_s']:.1f} s wall, "
                f"{measured['cpu_s']:.1f} s CPU, {measured['peak_pss_mb']:.0f} MB peak PSS",
                flush=True,
            )
            if name not in ("full", *compared):
                shutil.rmtree(out)  # as large as the photos: keep only the logs
        full = runs_dir / f"full-{round_number}"
        for name in compared:
            found = differences(full, runs_dir / f"{name}-{round_number}")
            results["differences"][name].append(found)
            print(
                f"  round {round_number}: {name} "
                + (
                    f"DIFFERS from full in {len(found)} ways"
                    if found
                    else "is byte-identical to full"
                ),
                flush=True,
            )
            for line in found[:20]:
                print(f"    {line}")
        # The last round's outputs stay, to look at after: runs/compared-full, -reuse...
        for name in ("full", *compared):
            kept = runs_dir / f"compared-{name}"
            shutil.rmtree(kept, ignore_errors=True)
            (runs_dir / f"{name}-{round_number}").rename(kept)
        json_path.write_text(json.dumps(results, indent=2))

    results["median"] = {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for name, runs in results["runs"].items()
    }
    wall = {name: median["wall_s"] for name, median in results["median"].items()}
    results["ratio"] = {
        f"{name}/{base}": wall[name] / wall[base]
        for name, base in (
            ("reuse", "full"),
            ("floor", "full"),
            ("reuse", "loop"),
            ("reuse", "pool"),
            ("full", "loop"),
            ("full", "pool"),
        )
        if name in wall and base in wall
    }
    if "reuse" in tools:
        results["reads"] = count_reads(tools["reuse"], runs_dir / "reads", data, out1, runs_dir)
        reuse_summary = json.loads((runs_dir / "compared-reuse" / "summary.json").read_text())
        results["reuse_summary"] = {
            field: value for field, value in flatten(reuse_summary).items() if is_run_fact(field)
        }
        identical = not any(results["differences"]["reuse"])
        met = identical and results["ratio"]["reuse/full"] <= GOAL_RATIO
        results["goal"] = {"ratio": GOAL_RATIO, "identical": identical, "met": met}
    json_path.write_text(json.dumps(results, indent=2))
    print_table(results)
    print(f"results: {json_path}")
    if any(any(found) for found in results["differences"].values()):
        sys.exit("an output differs from the full run's (above)")


def print_table(results: dict) -> None:
    """The medians and ratios as a Markdown table, for RESULTS.md."""
    rounds = results["config"]["rounds"]
    print(f"\nmedians of {rounds} round(s); day 1 full run {results['day1']['wall_s']:.1f} s\n")
    print("| run | wall s | CPU s | peak PSS MB | walls |")
    print("|---|---|---|---|---|")
    for name, median in results["median"].items():
        walls = ", ".join(f"{run['wall_s']:.1f}" for run in results["runs"][name])
        print(
            f"| {name} | {median['wall_s']:.1f} | {median['cpu_s']:.1f} | "
            f"{median['peak_pss_mb']:.0f} | {walls} |"
        )
    print()
    for name, ratio in results["ratio"].items():
        print(f"{name}: {ratio:.3f}")
    if "reads" in results:
        print(f"reads: {results['reads']}")
    if "goal" in results:
        print(f"goal: {results['goal']}")


if __name__ == "__main__":
    main()
