"""Shards planned on the small manifest rows; each shard written whole by a worker process.

Why not `WriteToTFRecord`: with a fixed shard count it keys every record randomly and
groups the encoded images (a full shuffle of the image bytes that the DirectRunner holds
in memory, in an order that changes per run); with a runner-chosen count the number and
size of files follow the bundling. Grouping the small rows by shard instead (packed, about
20 bytes a row) keeps image bytes out of any shuffle, keeps shard sizes near the target
and makes the output deterministic: a row's shard is a hash of its URI and rows are
written in hash order (worker/shard_writer.py).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import math
from collections.abc import Iterable, Iterator
from typing import Any

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
from worker.records import LabelledRow, ShardOutcome, ShardWritten
from worker.shard_writer import ShardTask, pack_rows, uri_digest, write_shard

_SIZE_SAMPLE = 32  # files per split whose sizes estimate the split's total bytes
_SIZE_SECONDS = 10.0  # for statting a split's sample, all files at once
_PACK_BYTES = 4 << 20  # row JSON a packer holds before packing what it has


def shard_of(uri: str, num_shards: int) -> int:
    return int.from_bytes(uri_digest(uri)[:8], "big") % num_shards


def shards_for(rows: int, mean_file_bytes: float, target_shard_bytes: int) -> int:
    """Enough shards that none exceeds the target, never more shards than rows."""
    return max(1, min(rows, math.ceil(rows * mean_file_bytes / target_shard_bytes)))


EXAMPLE_KEYS = "example_keys"  # WriteShards' output of (sha256, ExampleRef) per example


class PlanShards(beam.PTransform):
    """ManifestRows -> (split, number of shards), from --num_shards or the target size.

    The size estimate stats a fixed, hash-chosen sample of files per split, all at once
    and within a bound (a split's files that did not answer in time are left out), so
    the plan is the same on every run of the same manifest whose storage answers.
    """

    def __init__(self, num_shards: int | None, target_shard_bytes: int) -> None:
        super().__init__()
        self._num_shards = num_shards
        self._target_shard_bytes = target_shard_bytes

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        uris = rows | "BySplit" >> beam.Map(lambda row: (row.split, row.uri))
        counts = uris | "CountRows" >> beam.combiners.Count.PerKey()
        if self._num_shards:
            return counts | "FixedCount" >> beam.MapTuple(
                lambda split, count: (split, min(count, self._num_shards)))
        mean_sizes = (uris
                      | "SampleFiles" >> beam.combiners.Top.PerKey(
                          _SIZE_SAMPLE, key=uri_digest, reverse=True)
                      | "MeanFileSize" >> beam.MapTuple(
                          lambda split, sample: (split, mean_file_size(sample))))
        return ({"rows": counts, "mean_bytes": mean_sizes}
                | "Join" >> beam.CoGroupByKey()
                | "ShardCount" >> beam.MapTuple(lambda split, stats: (split, shards_for(
                    stats["rows"][0], stats["mean_bytes"][0], self._target_shard_bytes))))


class WriteShards(beam.PTransform):
    """LabelledRows -> ShardWritten per file; failed images -> DEAD_LETTERS; every
    example's (sha256, ExampleRef) -> EXAMPLE_KEYS, with its content where
    `settings.keeps_content`.

    `plan` is PlanShards' output: (split, number of shards). Each shard leaves a receipt
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
    """LabelledRows -> ((split, shard), pack): the rows as compressed JSON lines, a pack per
    shard per bundle, or per _PACK_BYTES of rows held.

    The DirectRunner keeps everything a GroupByKey groups in memory, in several copies,
    until the shards are written: packed, a manifest row costs about 20 bytes there, not
    about 240 as its own JSON value or 800 as Python objects (peak RSS of the 100,000-row
    bench: 902 MB, against 959 MB with a JSON value per row).
    """

    def start_bundle(self) -> None:
        self._held: dict[tuple[str, int], list[bytes]] = collections.defaultdict(list)
        self._held_bytes = 0

    def process(self, item: LabelledRow, plan: dict[str, int]
                ) -> Iterator[tuple[tuple[str, int], bytes]]:
        line = item.to_json()
        self._held[item.row.split, shard_of(item.row.uri, plan[item.row.split])].append(line)
        self._held_bytes += len(line)
        if self._held_bytes >= _PACK_BYTES:
            yield from self._packs()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for keyed_pack in self._packs():
            yield GlobalWindows.windowed_value(keyed_pack)

    def _packs(self) -> Iterator[tuple[tuple[str, int], bytes]]:
        for key, lines in self._held.items():
            live_progress.planned(len(lines))
            yield key, pack_rows(lines)
        self._held.clear()
        self._held_bytes = 0


class _WriteShardFile(beam.DoFn):
    """Has each shard written whole (worker/shard_writer.py) by one of the process's
    worker processes (worker/pool.py), or in this process with --worker_processes 0, and
    gives what it gave.

    The shards of a bundle are handed to the workers as they come and their outcomes
    given at the bundle's end, so that as many are written at once as there are workers.
    """

    def __init__(self, temp_dir: str, settings: RunSettings, resuming: bool) -> None:
        self._temp_dir = temp_dir
        self._resuming = resuming
        self._settings = settings
        self._written = Metrics.counter("images", "written")
        self._rejected = Metrics.counter("images", "rejected")
        self._resumed = Metrics.counter("shards", "resumed")
        self._pool: pool.ShardPool | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def setup(self) -> None:
        self._pool = pool.acquire(self._settings.workers, filesystem_options())
        if self._pool is not None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                self._settings.workers.process_count())

    def teardown(self) -> None:
        if self._executor:
            self._executor.shutdown()
            self._executor = None
            pool.release(self._settings.workers)

    def start_bundle(self) -> None:
        self._pending: list[concurrent.futures.Future[ShardOutcome]] = []

    def process(self, shard_packs: tuple[tuple[str, int], Iterable[bytes]]
                ) -> Iterator[ShardWritten | beam.pvalue.TaggedOutput]:
        (split, shard), packs = shard_packs
        task = ShardTask(split, shard, tuple(packs), self._temp_dir, self._resuming)
        if self._pool is None:
            yield from self._outputs(write_shard(task, self._settings, _LiveProgress()))
        else:
            self._pending.append(self._executor.submit(
                self._pool.write, task, self._settings, live_progress.handled))

    def finish_bundle(self) -> Iterator[WindowedValue | beam.pvalue.TaggedOutput]:
        for written in self._pending:
            for output in self._outputs(written.result()):
                if isinstance(output, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(
                        output.tag, GlobalWindows.windowed_value(output.value))
                else:
                    yield GlobalWindows.windowed_value(output)
        self._pending = []

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
