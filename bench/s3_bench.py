"""Images in an S3 bucket: `image-tfrecords convert` on a manifest of s3:// URIs, served
by moto's S3 server, which this script starts on the loopback address, against the loop
a user writes (one boto3 client, one GET after another, each image decoded by Pillow,
one TFRecord); and the last checkout of ours again with a steady share of the image
GETs (--fault_share, seeded) answered 503 (S3's SlowDown), which botocore retries.
Every tool reaches the server through the tests' fault proxy (tests/storage_servers.py),
injecting faults or not, so all pay its cost alike.

Ours may run from several checkouts (--checkout NAME=DIR, each with this checkout's
.venv), to measure one change side by side. The runs alternate, --rounds times each, as
child processes; after round 1 every run of ours must have written the images the loop
wrote (the same SHA-256s, else exit 1). Prints the medians (wall and CPU seconds of the
whole process tree), the ratios, and writes every run to --json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import boto3
from url_bench import BENCH, VENV_BIN, crops_dataset, keys, loop_script

sys.path.insert(0, str(BENCH.parent / "tests"))
from storage_servers import FaultProxy, S3Server, s3_error

_LOOP = loop_script(
    """
import boto3
client = boto3.client("s3", endpoint_url=sys.argv[3], region_name="us-east-1",
                      aws_access_key_id="bench", aws_secret_access_key="bench")
def get(uri):
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()
""",
    "get(uri)",
)
BUCKET = "bench-images"


def s3_manifest(dataset: Path, url: str) -> Path:
    """The data set's images uploaded to the bucket; a manifest of their s3:// URIs."""
    client = boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    client.create_bucket(Bucket=BUCKET)
    rows = [line.split(",") for line in (dataset / "manifest.csv").read_text().splitlines()]
    for _, uri, _ in rows:
        client.upload_file(str(dataset / uri), BUCKET, uri)
    path = dataset / "s3.csv"
    path.write_text("".join(f"TRAIN,s3://{BUCKET}/{uri},{label}\n" for _, uri, label in rows))
    return path


def timed(command: list[str], cwd: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of a child process and everything it started."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(
        command, check=True, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        time.perf_counter() - started,
        after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", default="/tmp/image-tfrecords-s3-bench")
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--checkout",
        action="append",
        default=[],
        help=f"NAME=DIR: ours from DIR (default: ours={BENCH.parent})",
    )
    parser.add_argument("--fault_share", type=float, default=0.05)
    parser.add_argument("--json", default=str(BENCH / "s3-results.json"))
    args = parser.parse_args()
    work = Path(args.work)
    dataset = crops_dataset(work, args.images)
    checkouts = dict(entry.split("=", 1) for entry in args.checkout) or {"ours": str(BENCH.parent)}
    server = S3Server()
    clean, faulty = FaultProxy(server.url, s3_error), FaultProxy(server.url, s3_error)
    faulty.fail(rf"^/{BUCKET}/images/", 503, share=args.fault_share, seed=1)
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}

    def ours(name: str, folder: str, url: str) -> tuple[list[str], str, dict[str, str]]:
        return (
            [
                str(VENV_BIN / "python"),
                "-m",
                "image_tfrecords",
                "--manifest",
                "MANIFEST",
                "--output_dir",
                str(out / name),
                "--overwrite",
                "--s3_endpoint_url",
                url,
                "--s3_region_name",
                "us-east-1",
            ],
            folder,
            {**env, "PYTHONPATH": folder},
        )

    runs = {name: ours(name, folder, clean.url) for name, folder in checkouts.items()}
    with_faults = f"{list(checkouts)[-1]}_with_faults"
    runs[with_faults] = ours(with_faults, list(checkouts.values())[-1], faulty.url)
    runs["loop"] = (
        [str(VENV_BIN / "python"), "-c", _LOOP, "MANIFEST", str(out / "loop.tfrecord"), clean.url],
        str(BENCH.parent),
        env,
    )
    walls: dict[str, list[float]] = {tool: [] for tool in runs}
    cpus: dict[str, list[float]] = {tool: [] for tool in runs}
    try:
        manifest = str(s3_manifest(dataset, server.url))
        for round_number in range(args.rounds):
            order = list(runs)
            shift = round_number % len(order)
            for tool in order[shift:] + order[:shift]:
                command, cwd, tool_env = runs[tool]
                wall, cpu = timed(
                    [manifest if part == "MANIFEST" else part for part in command], cwd, tool_env
                )
                walls[tool].append(wall)
                cpus[tool].append(cpu)
                print(f"round {round_number + 1} {tool}: {wall:.1f} s, CPU {cpu:.1f} s", flush=True)
            if round_number == 0:
                loop = keys(str(out / "loop.tfrecord"))
                if any(
                    keys(str(out / name / "train-*.tfrecord")) != loop
                    for name in [*checkouts, with_faults]
                ):
                    sys.exit("ours did not write the loop's images")
        if 503 not in faulty.statuses(rf"^/{BUCKET}/images/"):
            sys.exit("no fault was injected")
    finally:
        clean.close()
        faulty.close()
        server.stop()
    wall = {tool: statistics.median(values) for tool, values in walls.items()}
    cpu = {tool: statistics.median(values) for tool, values in cpus.items()}
    result = {
        "started": datetime.datetime.now(datetime.UTC).isoformat(),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "python": sys.version.split()[0],
        "images": args.images,
        "checkouts": checkouts,
        "walls": walls,
        "cpus": cpus,
        "images_per_second": {tool: args.images / seconds for tool, seconds in wall.items()},
        "ratio_to_loop": {name: wall[name] / wall["loop"] for name in checkouts},
        "fault_share": args.fault_share,
        "ratio_faults_to_clean": wall[with_faults] / wall[list(checkouts)[-1]],
    }
    Path(args.json).write_text(json.dumps(result, indent=2))
    for tool in runs:
        print(
            f"{tool:10} {wall[tool]:7.1f} s  CPU {cpu[tool]:7.1f} s  "
            f"{args.images / wall[tool]:7.1f} images/s"
            + (f"  ours/loop {result['ratio_to_loop'][tool]:.3f}" if tool in checkouts else "")
        )
    print(
        f"with {args.fault_share:.0%} of image GETs answered 503: "
        f"{result['ratio_faults_to_clean']:.3f}x the clean run"
    )


if __name__ == "__main__":
    main()
