"""Read benchmark: images/s decoded, resized and batched from our shards, in each file
format, against the same images as loose JPEG files, each through an equally tuned
tf.data pipeline; and records/s of Grain's random access to the ArrayRecord shards.

Ours: `image_tfrecords.load(OUTPUT, "train", as_supervised=True, ...)` (shuffled shard
list, parallel interleave, shuffled records, parallel decode and resize, batch, prefetch)
on a `--file_format tfrecord` and an `--file_format array_record` conversion of the set.
Loose: the TRAIN files of the manifest, shuffled, then the same parallel read + decode +
resize map, batch and prefetch. All decode to 3 channels with `tf.io.decode_image` and
resize with `tf.image.resize`. One untimed pass of each warms the page cache, then they
alternate for --rounds timed passes; prints the medians and the ratios.

Random access: every TRAIN record read through `grain.sources.ArrayRecordDataSource`, by
index in a shuffled order and in order, against the TFRecord shards' records read in
order by tf.data (no parsing or decoding: the read alone). Writes everything to --json.

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
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

import image_tfrecords

AUTOTUNE = tf.data.AUTOTUNE
CONVERT = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "image-tfrecords"


FORMATS = ("tfrecord", "array_record")


def ensure_output(data: Path, output: Path, num_shards: int, file_format: str) -> None:
    """Converts DATA/manifest.csv into OUTPUT unless that was done already."""
    if (output / "summary.json").exists():
        print(f"reusing {output}")
        return
    subprocess.run(
        [
            str(CONVERT),
            "convert",
            "--manifest",
            str(data / "manifest.csv"),
            "--output_dir",
            str(output),
            "--num_shards",
            str(num_shards),
            "--file_format",
            file_format,
        ],
        check=True,
    )


def loose_files(data: Path, vocabulary: list[str]) -> tuple[list[str], list[int]]:
    """The TRAIN images of DATA/manifest.csv (`SPLIT,uri,label`) and their label ids."""
    with (data / "manifest.csv").open(newline="") as file:
        rows = [row for row in csv.reader(file) if row[0] == "TRAIN"]
    return [str(data / uri) for _, uri, _ in rows], [
        vocabulary.index(label) for _, _, label in rows
    ]


def loose_dataset(
    paths: list[str], labels: list[int], batch_size: int, size: tuple[int, int]
) -> tf.data.Dataset:
    """The data performance guide's pipeline for files on disk, tuned as load() is."""

    def decode(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return tf.image.resize(image, size), label

    return (
        tf.data.Dataset.from_tensor_slices((paths, labels))
        .shuffle(len(paths))
        .map(decode, num_parallel_calls=AUTOTUNE, deterministic=False)
        .batch(batch_size)
        .prefetch(AUTOTUNE)
    )


def random_access(outputs: dict[str, Path], rounds: int) -> dict[str, list[float]]:
    """records/s of reading every TRAIN record: Grain by shuffled index and in order,
    tf.data's TFRecord reader in order; each the median over `rounds` alternating passes."""
    import grain

    def shard_paths(file_format: str) -> list[str]:
        return [
            path
            for path, _ in image_tfrecords.Output.read(str(outputs[file_format])).shards("train")
        ]

    source = grain.sources.ArrayRecordDataSource(shard_paths("array_record"))
    shuffled = list(range(len(source)))
    random.Random(0).shuffle(shuffled)
    records = tf.data.TFRecordDataset(shard_paths("tfrecord"), buffer_size=8 << 20)
    reads: dict[str, Callable[[], int]] = {
        "grain, shuffled index": lambda: sum(len(source[index]) for index in shuffled),
        "grain, in order": lambda: sum(len(source[index]) for index in range(len(source))),
        # In batches: one element at a time, tf.data's Python iterator costs ~200 µs each.
        "tf.data TFRecord, in order": lambda: sum(
            int(size)
            for size in records.batch(256).map(
                lambda batch: tf.reduce_sum(tf.strings.length(batch))
            )
        ),
    }
    for read in reads.values():  # warm-up
        read()
    runs: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(rounds):
        for name, read in reads.items():
            started = time.perf_counter()
            read()
            runs[name].append(len(source) / (time.perf_counter() - started))
    return runs


def timed_pass(dataset: tf.data.Dataset) -> tuple[int, float]:
    """(images, seconds) of one full pass."""
    started = time.perf_counter()
    images = sum(int(labels.shape[0]) for _, labels in dataset)
    return images, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, required=True, help="a folder made by bench/make_dataset.py"
    )
    parser.add_argument(
        "--outputs",
        type=Path,
        help="its conversions, one folder per format (default DATA; converted when missing)",
    )
    parser.add_argument("--num_shards", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", type=Path, help="results file")
    args = parser.parse_args()
    outputs = {
        file_format: (args.outputs or args.data) / f"out-{file_format}" for file_format in FORMATS
    }
    for file_format, output in outputs.items():
        ensure_output(args.data, output, args.num_shards, file_format)

    size = (args.image_size, args.image_size)
    vocabulary = image_tfrecords.Output.read(str(outputs["tfrecord"])).vocabulary
    paths, labels = loose_files(args.data, vocabulary)

    def load(output: Path) -> Callable[[], tf.data.Dataset]:
        return lambda: image_tfrecords.load(
            str(output), "train", as_supervised=True, batch_size=args.batch_size, image_size=size
        )

    pipelines: dict[str, Callable[[], tf.data.Dataset]] = {
        **{file_format: load(output) for file_format, output in outputs.items()},
        "loose files": lambda: loose_dataset(paths, labels, args.batch_size, size),
    }
    for name, make in pipelines.items():  # warm-up: page cache, tf.function tracing
        images, _ = timed_pass(make())
        if images != len(paths):
            raise SystemExit(f"{name}: {images} images, the manifest's TRAIN rows: {len(paths)}")
    runs: dict[str, list[float]] = {name: [] for name in pipelines}
    for round_index in range(args.rounds):
        # ABC CBA order, so none always runs first on a machine whose load drifts.
        order = list(pipelines) if round_index % 2 == 0 else list(reversed(pipelines))
        for name in order:
            images, seconds = timed_pass(pipelines[name]())
            runs[name].append(images / seconds)
            print(f"round {round_index + 1} {name:12s} {images / seconds:8.1f} images/s")
    medians = {name: statistics.median(values) for name, values in runs.items()}
    ratios = {f"{name} / loose files": medians[name] / medians["loose files"] for name in FORMATS}
    ratios["array_record / tfrecord"] = medians["array_record"] / medians["tfrecord"]
    print(
        f"{len(paths)} images, batch {args.batch_size}, {args.image_size}x{args.image_size}, "
        f"median of {args.rounds}: "
        + ", ".join(f"{name} {value:.1f} images/s" for name, value in medians.items())
    )
    print(", ".join(f"{name} {value:.2f}" for name, value in ratios.items()))
    access = random_access(outputs, args.rounds)
    access_medians = {name: statistics.median(values) for name, values in access.items()}
    print(
        f"records/s (read only, median of {args.rounds}): "
        + ", ".join(f"{name} {value:.0f}" for name, value in access_medians.items())
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "images": len(paths),
                    "batch_size": args.batch_size,
                    "image_size": args.image_size,
                    "shards": len(
                        image_tfrecords.Output.read(str(outputs["tfrecord"])).shards("train")
                    ),
                    "images_per_s": runs,
                    "median_images_per_s": medians,
                    "ratios": ratios,
                    "records_per_s": access,
                    "median_records_per_s": access_medians,
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "tensorflow": tf.__version__,
                    "measured_at": datetime.datetime.now(datetime.UTC).isoformat(),
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
