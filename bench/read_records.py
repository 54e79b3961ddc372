"""Lists the examples of a TFRecord output folder, one JSON line each.

Every `*.tfrecord` / `*.tfrecord.gz` file directly in the folder is read (not the `.idx`
index beside each of ours); the split is the
file name up to its first `-` or `.` (`train-00000-of-00004.tfrecord`, `train.tfrecord`).
Each line is `[split, image/source_id, image/key/sha256, image/class/text]`.
write_bench.py runs this in a child process so the harness itself never loads TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import tensorflow as tf

KEYS = ("image/source_id", "image/key/sha256", "image/class/text")
SUFFIXES = (".tfrecord", ".tfrecord.gz")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("output_dir", type=Path)
    args = parser.parse_args()
    for path in shard_files(args.output_dir):
        split = re.split(r"[-.]", path.name, maxsplit=1)[0]
        compression = "GZIP" if path.name.endswith(".gz") else ""
        for record in tf.data.TFRecordDataset(str(path), compression_type=compression):
            feature = tf.train.Example.FromString(record.numpy()).features.feature
            print(json.dumps([split, *(feature[key].bytes_list.value[0].decode() for key in KEYS)]))


def shard_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.iterdir() if path.name.endswith(SUFFIXES))


if __name__ == "__main__":
    main()
