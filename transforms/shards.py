"""Shards planned on the small manifest rows; each shard written whole by a worker process.

Why not `WriteToTFRecord`: with a fixed shard count it keys every record randomly and
groups the encoded images (a full shuffle of the image bytes that the DirectRunner holds
in memory, in an order that changes per run); with a runner-chosen count the number and
size of files follow the bundling. Grouping the small rows by shard instead (packed, about
20 bytes a row) keeps image bytes out of any shuffle, keeps shard sizes near the target
and makes the output deterministic: a row's shard is a hash of its URI and rows are
written in hash order (worker/shard_writer.py).

When a split has fewer shards than the worker processes can write at once, its shards are
cut into parts, ranges of that hash order of at least about PART_ROWS rows, which worker
processes write at once and one of them then joins (worker/shard_parts.py): a run with
fewer shards than cores (a small dataset, a few large shards) still uses every core. The
bytes are those of the shard written whole, so the plan may depend on the number of
workers; where there are shards enough, none is cut (a join reads its examples again).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import math
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from transforms import live_progress
from transforms.deadline import within_deadline
from transforms.manifest import DEAD_LETTERS
from transforms.run_settings import RunSettings
from worker import pool
from worker.pool import Workers
from worker.records import LabelledRow, ShardOutcome, ShardWritten
from worker.shard_parts import JoinTask
from worker.shard_writer import ShardTask, pack_rows, uri_digest

_SIZE_SAMPLE = 32  # files per split whose sizes estimate the split's total bytes
_SIZE_SECONDS = 10.0  # for statting a split's sample, all files at once
_PACK_BYTES = 4 << 20  # row JSON a packer holds before packing what it has
# Rows a shard's part is planned to hold: ~0.3 s of a core's image work at ~0.65 ms an
# image, against a few ms to hand a part over, join it and write its receipt.
PART_ROWS = 512


class SplitPlan(NamedTuple):
    """How a split is written: its number of shards, and of parts in each shard."""

    shards: int
    parts: int = 1

    def place(self, uri: str) -> tuple[int, int]:
        """The row's shard, and its part of that shard, from one hash of its URI.

        The shard is the first 8 bytes of the digest modulo the shards; the part is
        their range, and as they lead the write order (worker/shard_writer.py), a
        shard's parts in order are its rows in order."""
        leading = int.from_bytes(uri_digest(uri)[:8], "big")
        return leading % self.shards, (leading * self.parts) >> 64


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
    return SplitPlan(shards, max(1, min(math.ceil(rows / shards / PART_ROWS),
                                        math.ceil(2 * workers / shards))))


EXAMPLE_KEYS = "example_keys"  # WriteShards' output of (sha256, ExampleRef) per example


class PlanShards(beam.PTransform):
    """ManifestRows -> (split, SplitPlan), from --num_shards or the target size.

    The size estimate stats a fixed, hash-chosen sample of files per split, all at once
    and within a bound (a split's files that did not answer in time are left out), so
    the plan is the same on every run of the same manifest whose storage answers.
    """

    def __init__(self, num_shards: int | None, target_shard_bytes: int, workers: Workers
                 ) -> None:
        super().__init__()
        self._num_shards = num_shards
        self._target_shard_bytes = target_shard_bytes
        self._workers = workers

    def _plan(self, rows: int, shards: int) -> SplitPlan:
        # Where the plan is made: the DirectRunner's one process, or a runner's worker.
        return plan_split(rows, shards, self._workers.process_count())

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        uris = rows | "BySplit" >> beam.Map(lambda row: (row.split, row.uri))
        counts = uris | "CountRows" >> beam.combiners.Count.PerKey()
        if self._num_shards:
            return counts | "FixedCount" >> beam.MapTuple(lambda split, count: (
                split, self._plan(count, min(count, self._num_shards))))
        mean_sizes = (uris
                      | "SampleFiles" >> beam.combiners.Top.PerKey(
                          _SIZE_SAMPLE, key=uri_digest, reverse=True)
                      | "MeanFileSize" >> beam.MapTuple(
                          lambda split, sample: (split, mean_file_size(sample))))
        return ({"rows": counts, "mean_bytes": mean_sizes}
                | "Join" >> beam.CoGroupByKey()
                | "ShardCount" >> beam.MapTuple(lambda split, stats: (split, self._plan(
                    stats["rows"][0], shards_for(stats["rows"][0], stats["mean_bytes"][0],
                                                 self._target_shard_bytes)))))


class WriteShards(beam.PTransform):
    """LabelledRows -> ShardWritten per file; failed images -> DEAD_LETTERS; every
    example's (sha256, ExampleRef) -> EXAMPLE_KEYS, with its content where
    `settings.keeps_content`.

    `plan` is PlanShards' output: (split, SplitPlan). Each shard leaves a receipt
    (worker/receipts.py); with `resuming`, a shard whose receipt vouches for it is not
    written again.
    """

    def __init__(self, plan: beam.PCollection, temp_dir: str, settings: RunSettings,
                 resuming: bool = False) -> None:
        super().__init__()
        self._plan = plan
        self._temp_dir = temp_dir
        self._settings = settings
        self._resuming = resuming

    def expand(self, labelled: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        writer = _WriteShardFile(self._temp_dir, self._settings, self._resuming)
        return (labelled
                | "PackByShard" >> beam.ParDo(_PackByShard(), plan=beam.pvalue.AsDict(self._plan))
                | "GroupByShard" >> beam.GroupByKey()
                | "LoadAndWrite" >> beam.ParDo(writer).with_outputs(
                    DEAD_LETTERS, EXAMPLE_KEYS, main="shards"))


class _PackByShard(beam.DoFn):
    """LabelledRows -> ((split, shard), (part, pack)): the rows as compressed JSON lines, a
    pack per part of a shard per bundle, or per _PACK_BYTES of rows held.

    The DirectRunner keeps everything a GroupByKey groups in memory, in several copies,
    until the shards are written: packed, a manifest row costs about 20 bytes there, not
    about 240 as its own JSON value or 800 as Python objects (peak RSS of the 100,000-row
    bench: 902 MB, against 959 MB with a JSON value per row).
    """

    def start_bundle(self) -> None:
        self._held: dict[tuple[str, int, int], list[bytes]] = collections.defaultdict(list)
        self._held_bytes = 0

    def process(self, item: LabelledRow, plan: dict[str, SplitPlan]
                ) -> Iterator[tuple[tuple[str, int], tuple[int, bytes]]]:
        line = item.to_json()
        split = item.row.split
        self._held[split, *plan[split].place(item.row.uri)].append(line)
        self._held_bytes += len(line)
        if self._held_bytes >= _PACK_BYTES:
            yield from self._packs()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for keyed_pack in self._packs():
            yield GlobalWindows.windowed_value(keyed_pack)

    def _packs(self) -> Iterator[tuple[tuple[str, int], tuple[int, bytes]]]:
        for (split, shard, part), lines in self._held.items():
            live_progress.planned(len(lines))
            yield (split, shard), (part, pack_rows(lines))
        self._held.clear()
        self._held_bytes = 0


class _WriteShardFile(beam.DoFn):
    """Has each shard written (worker/shard_writer.py), whole or in parts joined after
    (worker/shard_parts.py), by the process's worker processes (worker/pool.py), or in
    this process with --worker_processes 0, and gives what it gave.

    The shards of a bundle are handed over as they come, each part a task of its own, and
    their outcomes given at the bundle's end, so that as many tasks run at once as there
    are workers. A shard's thread waits for its parts and then has them joined; the parts
    wait for workers on threads of their own, so a shard waiting never holds up a part.
    """

    def __init__(self, temp_dir: str, settings: RunSettings, resuming: bool) -> None:
        self._temp_dir = temp_dir
        self._resuming = resuming
        self._settings = settings
        self._written = Metrics.counter("images", "written")
        self._rejected = Metrics.counter("images", "rejected")
        self._resumed = Metrics.counter("shards", "resumed")
        self._pool: pool.ShardPool | None = None
        self._shards: concurrent.futures.ThreadPoolExecutor | None = None
        self._parts: concurrent.futures.ThreadPoolExecutor | None = None

    def setup(self) -> None:
        self._pool = pool.acquire(self._settings.workers, filesystem_options())
        if self._pool is not None:
            threads = self._settings.workers.process_count()
            self._shards = concurrent.futures.ThreadPoolExecutor(threads)
            self._parts = concurrent.futures.ThreadPoolExecutor(threads)

    def teardown(self) -> None:
        if self._shards:
            self._shards.shutdown()
            self._parts.shutdown()
            self._shards = self._parts = None
            pool.release(self._settings.workers)

    def start_bundle(self) -> None:
        self._pending: list[concurrent.futures.Future[ShardOutcome]] = []

    def process(self, shard_packs: tuple[tuple[str, int], Iterable[tuple[int, bytes]]]
                ) -> Iterator[ShardWritten | beam.pvalue.TaggedOutput]:
        (split, shard), keyed_packs = shard_packs
        by_part: dict[int, list[bytes]] = collections.defaultdict(list)
        for part, pack in keyed_packs:
            by_part[part].append(pack)
        if len(by_part) == 1:  # written whole: the same bytes, without a join
            (packs,) = by_part.values()
            tasks = [ShardTask(split, shard, tuple(packs), self._temp_dir, self._resuming)]
        else:
            tasks = [ShardTask(split, shard, tuple(by_part[part]), self._temp_dir,
                               self._resuming, part) for part in sorted(by_part)]
        if self._pool is None:
            yield from self._outputs(self._write(tasks))
        else:
            self._pending.append(self._shards.submit(self._write, tasks))

    def finish_bundle(self) -> Iterator[WindowedValue | beam.pvalue.TaggedOutput]:
        for written in self._pending:
            for output in self._outputs(written.result()):
                if isinstance(output, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(
                        output.tag, GlobalWindows.windowed_value(output.value))
                else:
                    yield GlobalWindows.windowed_value(output)
        self._pending = []

    def _write(self, tasks: list[ShardTask]) -> ShardOutcome:
        """The shard's outcome, once it is written whole or its parts joined."""
        if len(tasks) == 1:
            return self._run(tasks[0])
        run_parts = self._parts.map if self._parts else map
        _ = list(run_parts(self._run, tasks))  # what each gave is in its receipt
        first = tasks[0]
        return self._run(JoinTask(first.split, first.shard, tuple(task.part for task in tasks),
                                  self._temp_dir, self._resuming))

    def _run(self, task: pool.Task) -> ShardOutcome:
        if self._pool is None:
            return task.run(self._settings, _LiveProgress())
        return self._pool.run(task, self._settings, live_progress.handled)

    def _outputs(self, outcome: ShardOutcome
                 ) -> Iterator[ShardWritten | beam.pvalue.TaggedOutput]:
        written = outcome.written
        if written.resumed:
            self._resumed.inc()
        else:
            self._written.inc(written.examples)
            # A shard's rows naming one image are one example or all dead letters (other
            # rows of a written image can be dead letters too: duplicate_row).
            self._rejected.inc(len({dead.uri for dead in outcome.dead_letters}
                                   - {ref.uri for _, ref in outcome.example_keys}))
        for dead in outcome.dead_letters:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, dead)
        for keyed in outcome.example_keys:
            yield beam.pvalue.TaggedOutput(EXAMPLE_KEYS, keyed)
        yield written


def filesystem_options() -> dict[str, Any]:
    """The options Beam's filesystems were given in this process (by the launcher, or on a
    runner's worker by Beam's SDK harness from the job's options), for the worker
    processes to reach the same storage (S3's endpoint and keys, say).

    Read here, not carried in the DoFn: that would write credentials such as
    --s3_secret_access_key into the job's graph. Beam has no public getter for them;
    tests/test_shards.py fails if this one stops seeing what set_options gave.
    """
    options = FileSystems._pipeline_options
    return options.get_all_options(drop_default=True) if options is not None else {}


class _LiveProgress:
    """shard_writer.Progress for a shard written in this process: rows to the display."""

    def decoding(self, image: int | None) -> None:
        pass

    def handled(self, rows: int, dead_letters: int) -> None:
        live_progress.handled(rows, dead_letters)
def mean_file_size(uris: Iterable[str], seconds: float = _SIZE_SECONDS) -> float:
    """The mean size of the files that could be statted, all at once, within `seconds`.

    A missing file, or one whose storage did not answer in time, only leaves the sample
    smaller; with no size at all the mean is 0 (one shard per split).
    """
    found = within_deadline([functools.partial(_file_size, uri) for uri in uris], seconds,
                            "size-estimate")
    sizes = [size for size in found if size is not None]
    return sum(sizes) / len(sizes) if sizes else 0.0


def _file_size(path: str) -> int:
    # One request on a remote filesystem, where FileSystems.match of a path takes two.
    return FileSystems.get_filesystem(path).metadata(path).size_in_bytes
