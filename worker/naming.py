"""The names of what the shard writers leave in a run's temp folder, in one place (as
TFDS's core/naming.py): each shard and its thumbnails, the parts a large shard is written
in before they are joined, and the receipts that vouch for each.

    <temp>/train-00003.tfrecord            a shard, awaiting its published name
    <temp>/thumbnails/train-00003.records  its thumbnails, for report.html
    <temp>/parts/train-00003-0001.records  a part of it (TFRecord-framed, uncompressed)
    <temp>/parts/thumbnails/train-00003-0001.records
    <temp>/receipts/train-00003.receipt.json        the shard's receipt
    <temp>/receipts/train-00003-0001.receipt.json   its part's
"""

from __future__ import annotations

from worker import storage

RECEIPTS_DIR = "receipts"
THUMBNAILS_DIR = "thumbnails"
PARTS_DIR = "parts"
PART_SUFFIX = ".records"  # TFRecord framing, whatever the shards' format


def _stem(split: str, shard: int, part: int | None) -> str:
    return f"{split}-{shard:05d}" + ("" if part is None else f"-{part:04d}")


def shard_path(temp_dir: str, split: str, shard: int, suffix: str) -> str:
    """A shard as written, before the publish step gives it its final name."""
    return storage.join(temp_dir, _stem(split, shard, None) + suffix)


def part_path(temp_dir: str, split: str, shard: int, part: int) -> str:
    return storage.join(temp_dir, PARTS_DIR, _stem(split, shard, part) + PART_SUFFIX)


def thumbnails_path(temp_dir: str, split: str, shard: int, part: int | None = None) -> str:
    """A shard's (or a part's) thumbnails, a record per example in its order: TFRecord-
    framed, whatever the shards' format (a file of the run's own, read by report_content.py)."""
    folder = (THUMBNAILS_DIR,) if part is None else (PARTS_DIR, THUMBNAILS_DIR)
    return storage.join(temp_dir, *folder, _stem(split, shard, part) + ".records")


def receipt_path(temp_dir: str, split: str, shard: int, part: int | None = None) -> str:
    return storage.join(temp_dir, RECEIPTS_DIR, _stem(split, shard, part) + ".receipt.json")
