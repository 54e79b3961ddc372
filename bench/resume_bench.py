"""What `--resume` saves: a full run against the resume of a run stopped with half its
shards written, side by side on the same data.

Each round: a full run; then a run SIGKILLed once half the shards' receipts are written
(bench/stop_at.py); then the same command with --resume, timed. Prints the walls, the
ratio resumed / full and the shards the resume reused, and checks that the resumed
output's shards are byte for byte the full run's.

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
    return ["--manifest", str(data / "manifest.csv"), "--output_dir", str(output),
            "--num_shards", str(SHARDS_PER_SPLIT), "--overwrite", "--quiet", *flags]


def timed(command: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def shard_digests(output: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(output.glob("*.tfrecord"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="bench/make_dataset.py's folder")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="resume-bench-"))
    full_out, resumed_out = folder / "full", folder / "resumed"
    shards = 3 * SHARDS_PER_SPLIT
    rows = []
    for round_number in range(1, args.rounds + 1):
        full = timed([sys.executable, "-m", "pipeline", *convert_command(args.data, full_out)])
        stopper = [sys.executable, str(HERE / "stop_at.py"), "transforms.shards",
                   "write_receipt", "after", str(shards // 2),
                   *convert_command(args.data, resumed_out)]
        stopped = subprocess.run(stopper, stdout=subprocess.DEVNULL, start_new_session=True)
        if stopped.returncode != -9:
            sys.exit(f"the run to stop ended with {stopped.returncode}, not SIGKILL")
        resumed = timed([sys.executable, "-m", "pipeline",
                         *convert_command(args.data, resumed_out, "--resume")])
        summary = json.loads((resumed_out / "summary.json").read_text())
        if shard_digests(resumed_out) != shard_digests(full_out):
            sys.exit("the resumed run's shards are not the full run's")
        rows.append({"round": round_number, "full_s": full, "resumed_s": resumed,
                     "resumed_shards": summary["resumed_shards"], "shards": shards})
        print(f"round {round_number}: full {full:.1f} s, resumed {resumed:.1f} s "
              f"({resumed / full:.2f}), {summary['resumed_shards']} of {shards} shards reused")
    ratios = [row["resumed_s"] / row["full_s"] for row in rows]
    print(f"median: full {statistics.median(r['full_s'] for r in rows):.1f} s, resumed "
          f"{statistics.median(r['resumed_s'] for r in rows):.1f} s, resumed / full "
          f"{statistics.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
