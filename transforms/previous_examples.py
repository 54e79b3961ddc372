"""The examples of an earlier output that this run's shards may copy (--reuse_from).

Each of the earlier output's example indexes (core/records/example_index.py) is read once; its
entries that could be reused (an identity and a key recorded) are placed by this run's
shard plan, the shard and part their URI gets now, and sent to that shard packed per
earlier shard: a grown dataset moves rows between shards, so reuse is per example. Only
small records travel; the shard writer reads the records it copies from the earlier
shards itself.
"""

import collections
import logging
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from image_tfrecords.core.records.example_index import (
    ExampleIndexError,
    PreviousOutput,
    PreviousShard,
    PreviousShardFiles,
    read_index,
)
from image_tfrecords.core.records.split_plan import planned_splits
from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
from image_tfrecords.core.worker.shard_writer import SplitPlan
from image_tfrecords.transforms.storage_steps import StorageDoFn


class RoutePreviousExamples(beam.PTransform):
    """(split, SplitPlan) -> ((split, shard), (part, PreviousShard)), as WriteShards
    takes them beside the rows' packs; nothing without a `previous` output."""

    def __init__(
        self,
        previous: PreviousOutput | None,
        filesystems: FilesystemOptions,
        split_plan: str | None = None,
    ) -> None:
        super().__init__()
        self._shards = previous.shards if previous else ()
        self._filesystems = filesystems
        self._split_plan = split_plan

    def expand(self, shard_plan: beam.PCollection) -> beam.PCollection:
        return (
            shard_plan.pipeline
            | "PreviousShards" >> beam.Create(self._shards).with_output_types(PreviousShardFiles)
            | "Route"
            >> beam.ParDo(
                _Route(self._filesystems, self._split_plan), plans=beam.pvalue.AsDict(shard_plan)
            )
        )


class _Route(StorageDoFn):
    """Each entry to the shard its URI gets in its split now: the split it was in, or
    with a grouped split's plan (--split_by groups), the plan's."""

    def __init__(self, filesystems: FilesystemOptions, split_plan: str | None = None) -> None:
        super().__init__(filesystems)
        self._split_plan = split_plan
        self._offered = Metrics.counter("images", "offered_for_reuse")

    def process(
        self, files: PreviousShardFiles, plans: dict[str, SplitPlan]
    ) -> Iterator[tuple[tuple[str, int], tuple[int, PreviousShard]]]:
        placed = collections.defaultdict(list)
        planned = planned_splits(self._split_plan) if self._split_plan else {}
        try:
            for entry in read_index(files.index):
                split = planned.get(entry.uri, entry.split)
                plan = plans.get(split)
                if plan is not None and entry.key is not None and entry.identity is not None:
                    # Its labels are not needed to copy it (they come from this run's
                    # rows) and are most of what it holds: memory follows the rows.
                    placed[(split, *plan.place(entry.uri))].append(
                        entry.model_copy(update={"labels": ()})
                    )
        except (ExampleIndexError, OSError) as error:
            # Reuse only saves work: the images of this shard are read again.
            logging.warning("not reusing %s: %s", files.shard, error)
            return
        for (split, shard, part), entries in placed.items():
            self._offered.inc(len(entries))
            yield (
                (split, shard),
                (part, PreviousShard.packed(files.shard, files.thumbnails, entries)),
            )
