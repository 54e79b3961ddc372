"""Shards planned from the chunks' surveys of the rows; each shard written whole by a
worker process.

Why not `WriteToTFRecord`: with a fixed shard count it keys every record randomly and
groups the encoded images (a full shuffle of the image bytes that the DirectRunner holds
in memory, in an order that changes per run); with a runner-chosen count the number and
size of files follow the bundling. Grouping the small rows by shard instead (packed, about
20 bytes a row) keeps image bytes out of any shuffle, keeps shard sizes near the target
and makes the output deterministic: a row's shard is a hash of its URI and rows are
written in hash order (core/worker/shard_writer.py).

When a split has fewer shards than the worker processes can write at once, its shards are
cut into parts, ranges of that hash order of at least about PART_ROWS rows, which worker
processes write at once and one of them then joins (core/worker/shard_parts.py): a run with
fewer shards than cores (a small dataset, a few large shards) still uses every core. The
bytes are those of the shard written whole, so the plan may depend on the number of
workers; where there are shards enough, none is cut (a join reads its examples again).
"""

import collections
import concurrent.futures
import functools
import math
from collections.abc import Iterable, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from image_tfrecords.core.inputs.rows import DEAD_LETTERS
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.example_index import PreviousShard
from image_tfrecords.core.records.records import ShardExamples, ShardOutcome, ShardWritten
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.workers import Workers
from image_tfrecords.core.storage import storage
from image_tfrecords.core.storage.deadline import within_deadline
from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
from image_tfrecords.core.worker.row_tasks import sample_of
from image_tfrecords.core.worker.shard_parts import JoinTask
from image_tfrecords.core.worker.shard_writer import ShardTask, SplitPlan
from image_tfrecords.transforms.element_types import tagged
from image_tfrecords.transforms.in_workers import RunInWorkers
from image_tfrecords.transforms.storage_steps import with_filesystems

SIZE_SAMPLE = 32  # files per split whose sizes estimate the split's total bytes
_SIZE_SECONDS = 10.0  # for statting a split's sample, all files at once
# Rows a shard's part is planned to hold: ~0.3 s of a core's image work at ~0.65 ms an
# image, against a few ms to hand a part over, join it and write its receipt.
PART_ROWS = 512


def shard_of(uri: str, num_shards: int) -> int:
    return SplitPlan(num_shards).place(uri)[0]


def part_of(uri: str, parts: int) -> int:
    return SplitPlan(1, parts).place(uri)[1]


def shards_for(rows: int, mean_file_bytes: float, target_shard_bytes: int) -> int:
    """Enough shards that none exceeds the target, never more shards than rows."""
    return max(1, min(rows, math.ceil(rows * mean_file_bytes / target_shard_bytes)))


def plan_split(rows: int, shards: int, workers: int) -> SplitPlan:
    """`shards` shards, each cut into as many parts as keep `workers` processes busy
    twice over (so that they finish together), none of fewer than about PART_ROWS rows."""
    return SplitPlan(
        shards, max(1, min(math.ceil(rows / shards / PART_ROWS), math.ceil(2 * workers / shards)))
    )


EXAMPLE_KEYS = "example_keys"  # WriteShards' output of ShardExamples, one per shard


class PlanShards(beam.PTransform):
    """ChunkSurveys -> (split, SplitPlan), from --num_shards or the target size.

    The size estimate stats a fixed, hash-chosen sample of files per split (sample_of),
    all at once and within a bound (a split's files that did not answer in time are left
    out), so the plan is the same on every run of the same manifest whose storage answers;
    it stats them with `filesystems` applied.
    """

    def __init__(
        self,
        num_shards: int | None,
        target_shard_bytes: int,
        workers: Workers,
        filesystems: FilesystemOptions,
    ) -> None:
        super().__init__()
        self._num_shards = num_shards
        self._target_shard_bytes = target_shard_bytes
        self._workers = workers
        self._filesystems = filesystems

    def _plan(self, rows: int, shards: int) -> SplitPlan:
        # Where the plan is made: the DirectRunner's one process, or a runner's worker.
        return plan_split(rows, shards, self._workers.process_count())

    def expand(self, surveys: beam.PCollection) -> beam.PCollection:
        counts = (
            surveys
            | "RowsBySplit"
            >> beam.FlatMap(lambda survey: survey.rows.items()).with_output_types(tuple[str, int])
            | "CountRows" >> beam.CombinePerKey(sum)
        )
        if self._num_shards:
            return counts | "FixedCount" >> beam.MapTuple(
                lambda split, count: (split, self._plan(count, min(count, self._num_shards)))
            )
        mean_sizes = (
            surveys
            | "Samples"
            >> beam.FlatMap(lambda survey: survey.size_sample.items()).with_output_types(
                tuple[str, list[str]]
            )
            | "SampleFiles" >> beam.CombinePerKey(_SampleOfSamples())
            | "MeanFileSize"
            >> beam.MapTuple(
                with_filesystems(
                    lambda split, sample: (split, mean_file_size(sample)), self._filesystems
                )
            ).with_output_types(tuple[str, float])
        )
        return (
            {"rows": counts, "mean_bytes": mean_sizes}
            | "Join" >> beam.CoGroupByKey()
            | "ShardCount"
            >> beam.MapTuple(
                lambda split, stats: (
                    split,
                    self._plan(
                        stats["rows"][0],
                        shards_for(
                            stats["rows"][0], stats["mean_bytes"][0], self._target_shard_bytes
                        ),
                    ),
                )
            )
        )


class _SampleOfSamples(beam.CombineFn):
    """A split's chunks' size samples -> the split's (row_tasks.sample_of)."""

    def create_accumulator(self) -> list[str]:
        return []

    def add_input(self, sample: list[str], uris: list[str]) -> list[str]:
        return sample_of(sample + uris, SIZE_SAMPLE)

    def merge_accumulators(self, samples: Iterable[list[str]]) -> list[str]:
        return sample_of([uri for sample in samples for uri in sample], SIZE_SAMPLE)

    def extract_output(self, sample: list[str]) -> list[str]:
        return sample


class WriteShards(beam.PTransform):
    """Packs of rows ((split, shard), (part, pack)) -> ShardWritten per file; failed
    images -> DEAD_LETTERS; each shard's examples' (sha256, ExampleRef), with their
    content where `settings.keeps_content` -> EXAMPLE_KEYS, as one ShardExamples.

    Beside the packs, ((split, shard), (part, PreviousShard)): the previous output's
    examples that the shard's rows may copy (RoutePreviousExamples); a shard none of
    whose rows is left gets none of them.

    Each shard leaves a receipt (core/records/receipts.py); with `resuming`, a shard whose
    receipt vouches for it is not written again.
    """

    def __init__(self, temp_dir: str, settings: RunSettings, resuming: bool = False) -> None:
        super().__init__()
        self._temp_dir = temp_dir
        self._settings = settings
        self._resuming = resuming

    def expand(self, packs: beam.PCollection):
        writer = _WriteShardFile(self._temp_dir, self._settings, self._resuming)
        return (
            packs
            | "GroupByShard" >> beam.GroupByKey()
            | "WithRows" >> beam.Filter(_has_rows)
            | "LoadAndWrite"
            >> beam.ParDo(writer).with_outputs(DEAD_LETTERS, EXAMPLE_KEYS, main="shards")
        )


def _has_rows(shard_packs: tuple[tuple[str, int], Iterable[tuple[int, object]]]) -> bool:
    return any(isinstance(pack, bytes) for _, pack in shard_packs[1])


class _WriteShardFile(RunInWorkers):
    """Has each shard written (core/worker/shard_writer.py), whole or in parts joined after
    (core/worker/shard_parts.py), by the process's worker processes, and gives what it gave.

    A shard's thread waits for its parts and then has them joined; the parts wait for
    workers on threads of their own, so a shard waiting never holds up a part.
    """

    def __init__(self, temp_dir: str, settings: RunSettings, resuming: bool) -> None:
        super().__init__(settings)
        self._temp_dir = temp_dir
        self._resuming = resuming
        self._written = Metrics.counter("images", "written")
        self._rejected = Metrics.counter("images", "rejected")
        self._resumed = Metrics.counter("shards", "resumed")
        self._parts: concurrent.futures.ThreadPoolExecutor | None = None

    def setup(self) -> None:
        super().setup()
        if self._pool is not None:
            self._parts = self.threads()  # not the shards' own: they wait on the parts

    def task(
        self, shard_packs: tuple[tuple[str, int], Iterable[tuple[int, bytes]]]
    ) -> list[ShardTask]:
        (split, shard), keyed_packs = shard_packs
        by_part: dict[int, list[bytes]] = collections.defaultdict(list)
        previous: dict[int, list[PreviousShard]] = collections.defaultdict(list)
        for part, pack in keyed_packs:
            if isinstance(pack, PreviousShard):
                previous[part].append(pack)
            else:
                by_part[part].append(pack)
        if len(by_part) == 1:  # written whole: the same bytes, without a join
            ((part, packs),) = by_part.items()
            return [
                ShardTask(
                    split,
                    shard,
                    tuple(packs),
                    self._temp_dir,
                    self._resuming,
                    previous=tuple(previous[part]),
                )
            ]
        return [
            ShardTask(
                split,
                shard,
                tuple(by_part[part]),
                self._temp_dir,
                self._resuming,
                part,
                previous=tuple(previous[part]),
            )
            for part in sorted(by_part)
        ]

    def execute(self, tasks: list[ShardTask]) -> ShardOutcome:
        """The shard's outcome, once it is written whole or its parts joined."""
        if len(tasks) == 1:
            return super().execute(tasks[0])
        run_parts = self._parts.map if self._parts else map
        _ = list(run_parts(super().execute, tasks))  # what each gave is in its receipt
        first = tasks[0]
        return super().execute(
            JoinTask(
                first.split,
                first.shard,
                tuple(task.part for task in tasks),
                self._temp_dir,
                self._resuming,
            )
        )

    def outputs(
        self, outcome: ShardOutcome
    ) -> Iterator[
        ShardWritten | tagged(DEAD_LETTERS, DeadLetter) | tagged(EXAMPLE_KEYS, ShardExamples)
    ]:
        written = outcome.written
        if written.resumed:
            self._resumed.inc()
        else:
            self._written.inc(written.examples)
            # A shard's rows naming one image are one example or all dead letters (other
            # rows of a written image can be dead letters too: duplicate_row).
            self._rejected.inc(
                len(
                    {dead.uri for dead in outcome.dead_letters}
                    - {ref.uri for _, ref in outcome.example_keys}
                )
            )
        for dead in outcome.dead_letters:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, dead)
        if outcome.example_keys:
            yield beam.pvalue.TaggedOutput(
                EXAMPLE_KEYS, ShardExamples(written.split, written.shard, outcome.example_keys)
            )
        yield written


def mean_file_size(uris: Iterable[str], seconds: float = _SIZE_SECONDS) -> float:
    """The mean size of the files that could be statted, all at once, within `seconds`.

    A missing file, or one whose storage did not answer in time, only leaves the sample
    smaller; with no size at all the mean is 0 (one shard per split).
    """
    found = within_deadline(
        [functools.partial(_file_size, uri) for uri in uris], seconds, "size-estimate"
    )
    sizes = [size for size in found if size is not None]
    return sum(sizes) / len(sizes) if sizes else 0.0


def _file_size(path: str) -> int:
    # One request on a remote filesystem, where FileSystems.match of a path takes two; a
    # URL's HEAD.
    return storage.size(path)
