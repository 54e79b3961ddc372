"""The baseline: the single-process loop a user writes today to turn a manifest into TFRecords.

Reads the manifest (`split,image_uri,label`, no header), fully decodes every image with
Pillow, and writes one OUT/<split>.tfrecord per split with the same tf.train.Example keys
as image-tfrecords. Label ids are indexes into the sorted TRAIN labels. Prints one line:
`wrote N examples: split count, ...`.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import os
from collections import Counter

import tensorflow as tf
from PIL import Image


def bytes_feature(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def int_feature(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", required=True, help="CSV: split,image_uri,label")
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args()

    folder = os.path.dirname(args.manifest)
    with open(args.manifest, newline="", encoding="utf-8") as file:
        rows = [(split.strip().lower(), uri.strip(), label.strip())
                for split, uri, label in (row for row in csv.reader(file) if row)]
    labels = sorted({label for split, _, label in rows if split == "train"})
    label_ids = {label: index for index, label in enumerate(labels)}

    os.makedirs(args.output_dir, exist_ok=True)
    writers: dict[str, tf.io.TFRecordWriter] = {}
    counts: Counter[str] = Counter()
    for split, uri, label in rows:
        path = uri if os.path.isabs(uri) else os.path.join(folder, uri)
        with open(path, "rb") as file:
            encoded = file.read()
        with Image.open(io.BytesIO(encoded)) as image:
            image.load()  # a full decode: proves the file is a whole, readable image
            width, height = image.size
            channels = len(image.getbands())
            image_format = image.format.lower()
        example = tf.train.Example(features=tf.train.Features(feature={
            "image/encoded": bytes_feature(encoded),
            "image/format": bytes_feature(image_format.encode()),
            "image/height": int_feature(height),
            "image/width": int_feature(width),
            "image/channels": int_feature(channels),
            "image/filename": bytes_feature(os.path.basename(path).encode()),
            "image/source_id": bytes_feature(path.encode()),
            "image/key/sha256": bytes_feature(hashlib.sha256(encoded).hexdigest().encode()),
            "image/class/label": int_feature(label_ids[label]),
            "image/class/text": bytes_feature(label.encode()),
        }))
        if split not in writers:
            writers[split] = tf.io.TFRecordWriter(
                os.path.join(args.output_dir, f"{split}.tfrecord"))
        writers[split].write(example.SerializeToString())
        counts[split] += 1
    for writer in writers.values():
        writer.close()
    print(f"wrote {counts.total()} examples: "
          + ", ".join(f"{split} {count}" for split, count in sorted(counts.items())))


if __name__ == "__main__":
    main()
