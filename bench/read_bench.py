"""Read benchmark: images/s decoded, resized and batched from our shards against the same
images as loose JPEG files, each through an equally tuned tf.data pipeline.

Ours: `image_tfrecords.load(OUTPUT, "train", as_supervised=True, ...)` (shuffled shard
list, parallel interleave, shuffled records, parallel decode and resize, batch, prefetch).
Loose: the TRAIN files of the manifest, shuffled, then the same parallel read + decode +
resize map, batch and prefetch. Both decode to 3 channels with `tf.io.decode_image` and
resize with `tf.image.resize`. One untimed pass of each warms the page cache, then the two
alternate for --rounds timed passes; prints the medians and the ratio, and writes --json.

    .venv/bin/python bench/make_dataset.py --out /tmp/itf-read --images 2000
    .venv/bin/python bench/read_bench.py --data /tmp/itf-read
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402 - after the log level above

import image_tfrecords  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE
CONVERT = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "image-tfrecords"


def ensure_output(data: Path, output: Path, num_shards: int) -> None:
    """Converts DATA/manifest.csv into OUTPUT unless that was done already."""
    if (output / "summary.json").exists():
        print(f"reusing {output}")
        return
    subprocess.run([str(CONVERT), "convert", "--manifest", str(data / "manifest.csv"),
                    "--output_dir", str(output), "--num_shards", str(num_shards)], check=True)


def loose_files(data: Path, vocabulary: list[str]) -> tuple[list[str], list[int]]:
    """The TRAIN images of DATA/manifest.csv (`SPLIT,uri,label`) and their label ids."""
    with (data / "manifest.csv").open(newline="") as file:
        rows = [row for row in csv.reader(file) if row[0] == "TRAIN"]
    return [str(data / uri) for _, uri, _ in rows], [vocabulary.index(label)
                                                       for _, _, label in rows]


def loose_dataset(paths: list[str], labels: list[int], batch_size: int,
                  size: tuple[int, int]) -> tf.data.Dataset:
    """The data performance guide's pipeline for files on disk, tuned as load() is."""
    def decode(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return tf.image.resize(image, size), label

    return (tf.data.Dataset.from_tensor_slices((paths, labels))
            .shuffle(len(paths))
            .map(decode, num_parallel_calls=AUTOTUNE, deterministic=False)
            .batch(batch_size)
            .prefetch(AUTOTUNE))


def timed_pass(dataset: tf.data.Dataset) -> tuple[int, float]:
    """(images, seconds) of one full pass."""
    started = time.perf_counter()
    images = sum(int(labels.shape[0]) for _, labels in dataset)
    return images, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True,
                        help="a folder made by bench/make_dataset.py")
    parser.add_argument("--output", type=Path, help="its shards (default DATA/tfrecords; "
                                                    "converted when missing)")
    parser.add_argument("--num_shards", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", type=Path, help="results file")
    args = parser.parse_args()
    output = args.output or args.data / "tfrecords"
    ensure_output(args.data, output, args.num_shards)

    size = (args.image_size, args.image_size)
    paths, labels = loose_files(args.data, image_tfrecords.Output.read(str(output)).vocabulary)
    pipelines: dict[str, Callable[[], tf.data.Dataset]] = {
        "shards": lambda: image_tfrecords.load(str(output), "train", as_supervised=True,
                                               batch_size=args.batch_size, image_size=size),
        "loose files": lambda: loose_dataset(paths, labels, args.batch_size, size),
    }
    for name, make in pipelines.items():  # warm-up: page cache, tf.function tracing
        images, _ = timed_pass(make())
        if images != len(paths):
            raise SystemExit(f"{name}: {images} images, the manifest's TRAIN rows: {len(paths)}")
    runs: dict[str, list[float]] = {name: [] for name in pipelines}
    for round_index in range(args.rounds):
        # ABBA order, so neither always runs first on a machine whose load drifts.
        order = list(pipelines) if round_index % 2 == 0 else list(reversed(pipelines))
        for name in order:
            images, seconds = timed_pass(pipelines[name]())
            runs[name].append(images / seconds)
            print(f"round {round_index + 1} {name:12s} {images / seconds:8.1f} images/s")
    medians = {name: statistics.median(values) for name, values in runs.items()}
    ratio = medians["shards"] / medians["loose files"]
    print(f"{len(paths)} images, batch {args.batch_size}, {args.image_size}x{args.image_size}, "
          f"median of {args.rounds}: shards {medians['shards']:.1f} images/s, loose files "
          f"{medians['loose files']:.1f} images/s, ratio {ratio:.2f}")
    if args.json:
        args.json.write_text(json.dumps({
            "images": len(paths), "batch_size": args.batch_size, "image_size": args.image_size,
            "shards": len(image_tfrecords.Output.read(str(output)).shards("train")),
            "images_per_s": runs, "median_images_per_s": medians, "ratio": ratio,
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "tensorflow": tf.__version__,
            "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
