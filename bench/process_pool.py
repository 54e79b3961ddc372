"""The second baseline: the process pool a user writes when the one-loop script is too slow.

The shape of the old inception build_image_data.py, with processes instead of threads:
each split's rows are cut into --shards_per_split contiguous shards, and a pool of
--workers processes (forked after the imports, so they share TensorFlow's pages) converts
whole shards, each fully decoding every image with Pillow and writing its shard with a
tf.io.TFRecordWriter to OUT/<split>-NNNNN-of-MMMMM.tfrecord. Same manifest, example keys,
label ids and summary line as handwritten.py, whose helpers it uses.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from typing import NamedTuple

import tensorflow as tf
from handwritten import Row, argument_parser, label_ids_of, read_rows, serialized_example, summary


class Shard(NamedTuple):
    path: str
    split: str
    rows: list[Row]
    label_ids: dict[str, int]


def plan_shards(rows: list[Row], shards_per_split: int, output_dir: str) -> list[Shard]:
    by_split: dict[str, list[Row]] = {}
    for row in rows:
        by_split.setdefault(row.split, []).append(row)
    label_ids = label_ids_of(rows)
    shards = []
    for split, split_rows in by_split.items():
        count = min(shards_per_split, len(split_rows))
        bounds = [len(split_rows) * index // count for index in range(count + 1)]
        shards += [
            Shard(
                os.path.join(output_dir, f"{split}-{index:05d}-of-{count:05d}.tfrecord"),
                split,
                split_rows[bounds[index] : bounds[index + 1]],
                label_ids,
            )
            for index in range(count)
        ]
    # Largest first, so the small splits' shards fill in at the end of the run.
    return sorted(shards, key=lambda shard: len(shard.rows), reverse=True)


def write_shard(shard: Shard) -> tuple[str, int]:
    with tf.io.TFRecordWriter(shard.path) as writer:
        for row in shard.rows:
            writer.write(serialized_example(row, shard.label_ids))
    return shard.split, len(shard.rows)


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count(), help="processes (default: one per core)"
    )
    parser.add_argument(
        "--shards_per_split",
        type=int,
        help="default: --workers, so the largest split keeps every worker busy",
    )
    args = parser.parse_args()
    os.makedirs(args.output_dir, exist_ok=True)
    shards = plan_shards(
        read_rows(args.manifest), args.shards_per_split or args.workers, args.output_dir
    )
    counts: Counter[str] = Counter()
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        for split, written in pool.imap_unordered(write_shard, shards):
            counts[split] += written
    print(summary(counts))


if __name__ == "__main__":
    main()
