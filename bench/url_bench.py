"""Images at URLs: `image-tfrecords convert` on a manifest of http:// URLs, served by a web
server this script starts on the loopback address with a realistic delay before each
answer (--latency_ms), against the loop a user writes (one GET after another with
urllib, each image decoded by Pillow, one TFRecord); and ours again against a second
server that answers a steady share of the GETs (--fault_share, seeded) with 503, which
ours retries (the loop has no retries to survive it).

The image set is make_dataset.py's (crops of real photos, reused when present). The two
tools run alternately, --rounds times each, as child processes; after round 1 both runs
of ours must have written every image the loop wrote (the same SHA-256s, else exit 1).
Prints the medians (wall seconds, images/s), the ratios, and writes every run to --json.
"""

from __future__ import annotations

import argparse
import datetime
import http.server
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
VENV_BIN = BENCH.parent / ".venv" / "bin"


def loop_script(setup: str, fetch: str) -> str:
    """The loop a user writes: after `setup`, each row's image is fetched by `fetch` (an
    expression of the row's `uri`), decoded by Pillow and written, with its SHA-256 and
    label, to one TFRecord (argv: the manifest, the TFRecord)."""
    return f"""
import csv, hashlib, io, sys
import PIL.Image, tensorflow as tf
{setup}
with tf.io.TFRecordWriter(sys.argv[2]) as writer:
    for split, uri, label in csv.reader(open(sys.argv[1])):
        data = {fetch}
        PIL.Image.open(io.BytesIO(data)).load()
        feature = {{"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                   "image/key/sha256": tf.train.Feature(bytes_list=tf.train.BytesList(
                       value=[hashlib.sha256(data).hexdigest().encode()])),
                   "image/class/text": tf.train.Feature(bytes_list=tf.train.BytesList(
                       value=[label.encode()]))}}
        writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                     .SerializeToString())
"""


_LOOP = loop_script("import urllib.request", "urllib.request.urlopen(uri, timeout=30).read()")

_KEYS_OF = """
import glob, json, sys, tensorflow as tf
print(json.dumps(sorted(
    tf.train.Example.FromString(record.numpy()).features.feature["image/key/sha256"]
    .bytes_list.value[0].decode()
    for path in sorted(glob.glob(sys.argv[1])) for record in tf.data.TFRecordDataset(path))))
"""


class _Server:
    """The image set's folder over HTTP, each answer after `latency_s`; `fault_share` of
    the GETs answered 503 instead."""

    def __init__(self, folder: Path, latency_s: float, fault_share: float = 0.0) -> None:
        draws, lock = random.Random(0), threading.Lock()

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, directory=str(folder), **kwargs)

            def log_message(self, *args) -> None:
                pass

            def send_head(self):
                time.sleep(latency_s)
                with lock:
                    failing = self.command == "GET" and draws.random() < fault_share
                if failing:
                    self.send_response(503)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                return super().send_head()

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.request_queue_size = 512
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()


def url_manifest(dataset: Path, url: str, name: str) -> Path:
    rows = [line.split(",") for line in (dataset / "manifest.csv").read_text().splitlines()]
    path = dataset / name
    path.write_text("".join(f"TRAIN,{url}/{uri},{label}\n" for _, uri, label in rows))
    return path


def crops_dataset(work: Path, images: int) -> Path:
    """make_dataset.py's crops, `images` of them, in `work` (made once, then reused)."""
    dataset = work / f"crops-{images}"
    if not (dataset / "manifest.csv").exists():
        subprocess.run(
            [
                str(VENV_BIN / "python"),
                str(BENCH / "make_dataset.py"),
                "--out",
                str(dataset),
                "--images",
                str(images),
            ],
            check=True,
        )
    return dataset


def keys(pattern: str) -> list[str]:
    done = subprocess.run(
        [str(VENV_BIN / "python"), "-c", _KEYS_OF, pattern],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", default="/tmp/image-tfrecords-url-bench")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--latency_ms", type=float, default=100.0)
    parser.add_argument("--fault_share", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=str(BENCH / "url-results.json"))
    args = parser.parse_args()
    work = Path(args.work)
    dataset = crops_dataset(work, args.images)
    server = _Server(dataset, args.latency_ms / 1000)
    faulty = _Server(dataset, args.latency_ms / 1000, args.fault_share)
    manifest = url_manifest(dataset, server.url, "urls.csv")
    faulty_manifest = url_manifest(dataset, faulty.url, "faulty-urls.csv")
    commands = {
        "ours": [
            str(VENV_BIN / "image-tfrecords"),
            "convert",
            "--manifest",
            str(manifest),
            "--output_dir",
            str(work / "out" / "ours"),
            "--overwrite",
        ],
        "loop": [
            str(VENV_BIN / "python"),
            "-c",
            _LOOP,
            str(manifest),
            str(work / "out" / "loop.tfrecord"),
        ],
        "ours_with_faults": [
            str(VENV_BIN / "image-tfrecords"),
            "convert",
            "--manifest",
            str(faulty_manifest),
            "--output_dir",
            str(work / "out" / "ours_with_faults"),
            "--overwrite",
        ],
    }
    (work / "out").mkdir(parents=True, exist_ok=True)
    walls: dict[str, list[float]] = {tool: [] for tool in commands}
    try:
        for round_number in range(args.rounds):
            order = list(commands)
            for tool in order[round_number % 3 :] + order[: round_number % 3]:
                started = time.perf_counter()
                subprocess.run(
                    commands[tool], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                walls[tool].append(time.perf_counter() - started)
                print(f"round {round_number + 1} {tool}: {walls[tool][-1]:.1f} s", flush=True)
            loop = keys(str(work / "out" / "loop.tfrecord")) if round_number == 0 else None
            if loop is not None and any(
                keys(str(work / "out" / tool / "train-*.tfrecord")) != loop
                for tool in ("ours", "ours_with_faults")
            ):
                sys.exit("ours did not write the loop's images")
    finally:
        server.close()
        faulty.close()
    medians = {tool: statistics.median(values) for tool, values in walls.items()}
    result = {
        "started": datetime.datetime.now(datetime.UTC).isoformat(),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "python": sys.version.split()[0],
        "images": args.images,
        "latency_ms": args.latency_ms,
        "walls": walls,
        "images_per_second": {tool: args.images / wall for tool, wall in medians.items()},
        "fault_share": args.fault_share,
        "ratio_ours_to_loop": medians["ours"] / medians["loop"],
        "ratio_faults_to_clean": medians["ours_with_faults"] / medians["ours"],
    }
    Path(args.json).write_text(json.dumps(result, indent=2))
    for tool, wall in medians.items():
        print(f"{tool:16} {wall:7.1f} s  {args.images / wall:7.1f} images/s")
    print(
        f"ours/loop {result['ratio_ours_to_loop']:.3f}, with {args.fault_share:.0%} "
        f"faults/clean {result['ratio_faults_to_clean']:.3f}"
    )


if __name__ == "__main__":
    main()
