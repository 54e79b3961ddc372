"""The work per image, in one process: ours' shard writer against the loop's per-image
work, on the same photos, in interleaved rounds.

ours: core/worker/shard_writer.write_shard, what a worker process runs for a shard (read,
check decode, pHash, thumbnail, the example, the record, its index and receipt), with
the settings of `image-tfrecords convert`'s defaults; the loop: handwritten.py's
serialized_example (read, a full Pillow decode, the example) written with a
TFRecordWriter. Each round times both, in turn (the round's first alternating), by this
process's CPU time; the ratio is taken within a round and the median of the rounds'
kept. No start-up, no process tree and no other process's work are in it: on the same
machine it moved by less than 0.05 between a quiet hour and one with other jobs running,
where the whole runs' marginal CPU moved by 0.3 (bench/RESULTS.md, issue 64).

    .venv/bin/python bench/work_per_image.py --photos DIR   # a make_dataset.py folder
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions
from handwritten import Row, serialized_example

from image_tfrecords.core.records.records import LabelledRow, ManifestRow
from image_tfrecords.core.worker.shard_writer import ShardTask, pack_rows, write_shard
from image_tfrecords.pipeline.options import ConvertOptions

PHOTOS = 400  # per round and tool: ~0.6 s each on 2 cores
ROUNDS = 7
_PACK_ROWS = 50  # rows per pack, as PackRows sends them


def per_image_ratios(photos: list[Path], rounds: int = ROUNDS) -> dict[str, list[float]]:
    """us of CPU per image of each tool, per round."""
    tools = {"ours": _ours(photos), "loop": _loop(photos)}
    for work in tools.values():  # once each first: imports, caches, Pillow's plugins
        work()
    found: dict[str, list[float]] = {name: [] for name in tools}
    for number in range(rounds):
        names = list(tools)[number % 2 :] + list(tools)[: number % 2]
        for name in names:
            started = time.process_time()
            tools[name]()
            found[name].append((time.process_time() - started) / len(photos) * 1e6)
    return found


def median_ratio(found: dict[str, list[float]]) -> float:
    return statistics.median(ours / loop for ours, loop in zip(found["ours"], found["loop"]))


def _ours(photos: list[Path]) -> Callable[[], None]:
    rows = [
        LabelledRow(
            ManifestRow(
                "manifest.csv",
                line,
                f"train,{path},{path.parent.name}",
                "train",
                str(path),
                (path.parent.name,),
            ),
            (0,),
        )
        for line, path in enumerate(photos, start=1)
    ]
    packs = tuple(
        pack_rows(row.to_json() for row in rows[start : start + _PACK_ROWS])
        for start in range(0, len(rows), _PACK_ROWS)
    )
    defaults = PipelineOptions(["--output_dir", "unused"]).view_as(ConvertOptions).run_settings()
    # In this process, as a worker process runs it (its read threads too).
    settings = dataclasses.replace(
        defaults, workers=dataclasses.replace(defaults.workers, processes=0)
    )

    def work() -> None:
        folder = tempfile.mkdtemp(prefix="itf-ours-")
        try:
            write_shard(ShardTask("train", 0, packs, folder), settings)
        finally:
            shutil.rmtree(folder)

    return work


def _loop(photos: list[Path]) -> Callable[[], None]:
    label_ids = {path.parent.name: 0 for path in photos}

    def work() -> None:
        folder = tempfile.mkdtemp(prefix="itf-loop-")
        try:
            with tf.io.TFRecordWriter(os.path.join(folder, "train.tfrecord")) as writer:
                for path in photos:
                    writer.write(
                        serialized_example(Row("train", str(path), path.parent.name), label_ids)
                    )
        finally:
            shutil.rmtree(folder)

    return work


def photos_in(folder: Path, count: int = PHOTOS) -> list[Path]:
    return sorted(folder.glob("images/*/*.jpg"))[:count]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--photos", type=Path, required=True, help="a make_dataset.py folder")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    found = per_image_ratios(photos_in(args.photos), args.rounds)
    by_round = ", ".join(f"{ours / loop:.2f}" for ours, loop in zip(found["ours"], found["loop"]))
    print(
        f"work per image: ours {statistics.median(found['ours']):.0f} us, loop "
        f"{statistics.median(found['loop']):.0f} us: ours/loop {median_ratio(found):.2f} "
        f"(by round {by_round})"
    )


if __name__ == "__main__":
    main()
