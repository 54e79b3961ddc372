"""What `--resume` saves: a full run against the resume of a run stopped with half its
shards written, side by side on the same data.

Each round: a full run; a run SIGKILLed once half the shards' receipts are written
(bench/stop_at.py), then the same command with --resume, timed; and as the floor, the
resume of a run stopped with every shard written (just before it moved them into
place). Prints the walls, the ratios to the full run and the shards each resume reused,
and checks that the resumed outputs' shards are byte for byte the full run's.

    .venv/bin/python bench/make_dataset.py --out /tmp/bench-2000 --images 2000
    .venv/bin/python bench/resume_bench.py --data /tmp/bench-2000 --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
SHARDS_PER_SPLIT = 8  # 24 shards in all


def convert_command(data: Path, output: Path, *flags: str) -> list[str]:
    return [
        "--manifest",
        str(data / "manifest.csv"),
        "--output_dir",
        str(output),
        "--num_shards",
        str(SHARDS_PER_SPLIT),
        "--overwrite",
        "--quiet",
        *flags,
    ]


def timed(command: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def shard_digests(output: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(output.glob("*.tfrecord"))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="bench/make_dataset.py's folder")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="resume-bench-"))
    full_out, resumed_out = folder / "full", folder / "resumed"
    shards = 3 * SHARDS_PER_SPLIT
    # Where each stopped run is killed: the resume of the first redoes half the shards.
    stops = {
        "half": ("image_tfrecords.core.records.receipts", "write_receipt", "after", shards // 2),
        "all": ("image_tfrecords.core.launcher.publishing", "move_into_place", "before", 1),
    }
    walls: dict[str, list[float]] = {"full": [], "half": [], "all": []}
    for round_number in range(1, args.rounds + 1):
        walls["full"].append(
            timed([sys.executable, "-m", "image_tfrecords", *convert_command(args.data, full_out)])
        )
        line = f"round {round_number}: full {walls['full'][-1]:.1f} s"
        for name, (module, function, when, count) in stops.items():
            stopped = subprocess.run(
                [
                    sys.executable,
                    str(HERE / "stop_at.py"),
                    module,
                    function,
                    when,
                    str(count),
                    *convert_command(args.data, resumed_out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            if stopped.returncode != -9:
                sys.exit(f"the run to stop ended with {stopped.returncode}, not SIGKILL")
            walls[name].append(
                timed(
                    [
                        sys.executable,
                        "-m",
                        "image_tfrecords",
                        *convert_command(args.data, resumed_out, "--resume"),
                    ]
                )
            )
            reused = json.loads((resumed_out / "summary.json").read_text())["resumed_shards"]
            if shard_digests(resumed_out) != shard_digests(full_out):
                sys.exit("the resumed run's shards are not the full run's")
            line += (
                f", resumed from {name} {walls[name][-1]:.1f} s "
                f"({walls[name][-1] / walls['full'][-1]:.2f}, {reused} of {shards} reused)"
            )
        print(line)
    for name in ("half", "all"):
        ratios = [resumed / full for resumed, full in zip(walls[name], walls["full"])]
        print(
            f"resumed from {name} / full: median {statistics.median(ratios):.2f} "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}); walls, medians: full "
            f"{statistics.median(walls['full']):.1f} s, resumed "
            f"{statistics.median(walls[name]):.1f} s"
        )


if __name__ == "__main__":
    main()
