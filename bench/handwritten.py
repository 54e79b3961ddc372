"""The baseline: the single-process loop a user writes today to turn a manifest into TFRecords.

Reads the manifest (`split,image_uri,label`, no header), fully decodes every image with
Pillow, and writes one OUT/<split>.tfrecord per split with the same tf.train.Example keys
as image-tfrecords. Label ids are indexes into the sorted TRAIN labels. Prints one line:
`wrote N examples: split count, ...`. process_pool.py shares the helpers above main().
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import os
from collections import Counter
from typing import NamedTuple

import tensorflow as tf
from PIL import Image


class Row(NamedTuple):
    split: str
    path: str  # relative URIs resolved against the manifest's folder
    label: str


def argument_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--manifest", required=True, help="CSV: split,image_uri,label")
    parser.add_argument("--output_dir", required=True)
    return parser


def read_rows(manifest: str) -> list[Row]:
    folder = os.path.dirname(manifest)
    with open(manifest, newline="", encoding="utf-8") as file:
        return [
            Row(split.strip().lower(), os.path.join(folder, uri.strip()), label.strip())
            for split, uri, label in (row for row in csv.reader(file) if row)
        ]


def label_ids_of(rows: list[Row]) -> dict[str, int]:
    """Label text -> index into the sorted TRAIN labels."""
    labels = sorted({row.label for row in rows if row.split == "train"})
    return {label: index for index, label in enumerate(labels)}


def bytes_feature(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def int_feature(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def serialized_example(row: Row, label_ids: dict[str, int]) -> bytes:
    """Reads and fully decodes the row's image; its tf.train.Example, serialized."""
    with open(row.path, "rb") as file:
        encoded = file.read()
    with Image.open(io.BytesIO(encoded)) as image:
        image.load()  # a full decode: proves the file is a whole, readable image
        width, height = image.size
        channels = len(image.getbands())
        image_format = image.format.lower()
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "image/encoded": bytes_feature(encoded),
                "image/format": bytes_feature(image_format.encode()),
                "image/height": int_feature(height),
                "image/width": int_feature(width),
                "image/channels": int_feature(channels),
                "image/filename": bytes_feature(os.path.basename(row.path).encode()),
                "image/source_id": bytes_feature(row.path.encode()),
                "image/key/sha256": bytes_feature(hashlib.sha256(encoded).hexdigest().encode()),
                "image/class/label": int_feature(label_ids[row.label]),
                "image/class/text": bytes_feature(row.label.encode()),
            }
        )
    ).SerializeToString()


def summary(counts: Counter[str]) -> str:
    """The one line write_bench.py reads the example count from."""
    return f"wrote {counts.total()} examples: " + ", ".join(
        f"{split} {count}" for split, count in sorted(counts.items())
    )


def main() -> None:
    args = argument_parser(__doc__).parse_args()
    rows = read_rows(args.manifest)
    label_ids = label_ids_of(rows)
    os.makedirs(args.output_dir, exist_ok=True)
    writers: dict[str, tf.io.TFRecordWriter] = {}
    counts: Counter[str] = Counter()
    for row in rows:
        if row.split not in writers:
            writers[row.split] = tf.io.TFRecordWriter(
                os.path.join(args.output_dir, f"{row.split}.tfrecord")
            )
        writers[row.split].write(serialized_example(row, label_ids))
        counts[row.split] += 1
    for writer in writers.values():
        writer.close()
    print(summary(counts))


if __name__ == "__main__":
    main()
