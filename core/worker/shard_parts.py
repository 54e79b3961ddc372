"""A shard written in parts, joined through the shard's format (ShardFormat.join), which
gives the bytes the shard has when written whole, its compression and companions included:
TFRecord's parts are framed as its shards are, so their files are concatenated (by the
kernel, between local files); other formats write the parts' records again.

Parts are written by the same code as whole shards (shard_writer.py) into plain
TFRecord-framed files. The join reads each part's receipt for what it gave, writes the
shard, its thumbnails and its receipt (which names the parts' digests, for --resume), and
then deletes the parts' files; their receipts stay, small, so that a resumed run knows a
part is in a finished shard. Runs in a worker process, like a shard's writing."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from image_tfrecords.core.file_formats import PipelineFiles
from image_tfrecords.core.records import naming, receipts
from image_tfrecords.core.records.records import ShardOutcome, ShardTally
from image_tfrecords.core.storage import storage
from image_tfrecords.core.worker.shard_writer import Progress, resumed, write_index

if TYPE_CHECKING:
    from image_tfrecords.core.records.run_settings import RunSettings


@dataclasses.dataclass(frozen=True)
class JoinTask:
    """The written `parts` (their places, in order) of one shard, to join."""

    split: str
    shard: int
    parts: tuple[int, ...]
    temp_dir: str
    resuming: bool = False

    in_worker = True  # (transforms/in_workers.py's WorkerTask) any process may write a shard

    @property
    def name(self) -> str:
        return f"shard {self.split} {self.shard} (joining {len(self.parts)} parts)"

    def run(self, settings: RunSettings, progress: Progress) -> ShardOutcome:
        return join_parts(self, settings).sent()


def join_parts(task: JoinTask, settings: RunSettings) -> ShardOutcome:
    """Writes the shard from its parts, or with `task.resuming` reuses the shard its
    receipt vouches for; returns what the shard gave, as if it had been written whole."""
    parts = receipts.read_part_receipts(task.temp_dir, task.split, task.shard, task.parts)
    part_digests = tuple(part.rows_digest for part in parts)
    digest = receipts.parts_digest(part_digests)
    receipt_at = naming.receipt_path(task.temp_dir, task.split, task.shard)
    if task.resuming and (receipt := receipts.read_receipt(receipt_at, digest)):
        return resumed(receipt.outcome)
    path = naming.shard_path(task.temp_dir, task.split, task.shard, settings.shard_format.suffix)
    thumbnails = naming.thumbnails_path(task.temp_dir, task.split, task.shard)
    with_examples = [
        place
        for place, part in zip(task.parts, parts, strict=True)
        if part.outcome.written.examples
    ]
    if with_examples:
        _join_records(task, with_examples, path, settings)
        _join_thumbnails(task, with_examples, thumbnails)
    outcome = merged(
        [part.outcome for part in parts], path, storage.size(path) if with_examples else 0
    )
    files = (
        (
            path,
            *(path + suffix for suffix in settings.shard_format.companions),
            thumbnails,
            *write_index(outcome, task.temp_dir, settings),
        )
        if with_examples
        else ()
    )
    receipts.write_receipt(
        receipt_at, receipts.ShardReceipt(digest, outcome, receipts.file_sizes(files), part_digests)
    )
    for place in with_examples:
        storage.delete(
            [
                naming.part_path(task.temp_dir, task.split, task.shard, place),
                naming.thumbnails_path(task.temp_dir, task.split, task.shard, place),
            ]
        )
    return outcome


def _join_records(task: JoinTask, parts: Sequence[int], path: str, settings: RunSettings) -> None:
    part_paths = [naming.part_path(task.temp_dir, task.split, task.shard, place) for place in parts]
    for part_path in part_paths:
        if not storage.exists(part_path):  # deleted by an earlier join (read_joined_part)
            raise FileNotFoundError(
                f"{part_path} is gone: a resumed run found this part joined into a shard "
                "that is no longer whole. Delete the run's folder to write it again"
            )
    settings.shard_format.join(path, part_paths, PipelineFiles())


def _join_thumbnails(task: JoinTask, parts: Sequence[int], path: str) -> None:
    with storage.create(path) as out:  # TFRecord-framed records: the files concatenated
        for place in parts:
            with storage.open_read(
                naming.thumbnails_path(task.temp_dir, task.split, task.shard, place)
            ) as part:
                storage.append(part, out)


def merged(parts: Sequence[ShardOutcome], path: str, size: int) -> ShardOutcome:
    """The outcome of the shard at `path` (`size` bytes) joined from parts with these
    outcomes, in order: each example's position moved past the examples before its part."""
    tally = ShardTally()
    dead_letters, example_keys = [], []
    for part in parts:
        tally.add_part(part.written)
        dead_letters.extend(part.dead_letters)
        before = len(example_keys)
        example_keys.extend(
            (sha256, ref._replace(position=before + ref.position))
            for sha256, ref in part.example_keys
        )
    first = parts[0].written
    written = tally.written(first.split, first.shard, path, size)
    return ShardOutcome(written, tuple(dead_letters), tuple(example_keys))
