"""Byte-identical and near-copy images: always reported; --dedupe writes each once.

The shard writer reports every example's SHA-256 and perceptual hash with the rows it
came from; grouping those small records (never the images) finds the copies, exact ones
here and near ones in near_duplicates.py. The copy kept is the one in the earliest split
(TRAIN, VALIDATION, TEST), then the earliest row, so dropping a copy never takes an
image out of TRAIN to leave it in TEST: a copy across splits is a leak. Dropping
rewrites only the shards that hold a dropped copy, from their temp files.
"""

import collections
import json
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from image_tfrecords.core.file_formats import PipelineFiles, ShardFormat
from image_tfrecords.core.inputs.rows import DEAD_LETTERS
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records import naming
from image_tfrecords.core.records.choices import Dedupe
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.histograms import file_bytes_bin, longest_side_bin
from image_tfrecords.core.records.naming import DUPLICATES, NEAR_DUPLICATES
from image_tfrecords.core.records.records import ExampleRef, ShardExamples, ShardWritten
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
from image_tfrecords.core.worker.examples import example_annotations
from image_tfrecords.transforms.batch import Batch, batches_by_key
from image_tfrecords.transforms.element_types import tagged
from image_tfrecords.transforms.near_duplicates import (
    FindNearDuplicates,
    NearDuplicate,
    described,
    order,
)
from image_tfrecords.transforms.sorted_lines import WriteSortedLines
from image_tfrecords.transforms.storage_steps import StorageDoFn


class Duplicate(NamedTuple):
    sha256: str
    kept: ExampleRef
    copy: ExampleRef

    @property
    def distance(self) -> int:
        """Perceptual-hash bits apart, as a NearDuplicate has: none, the bytes are equal."""
        return 0

    def to_json(self, dropped: bool) -> str:
        return json.dumps(
            {
                "sha256": self.sha256,
                "kept": described(self.kept),
                "copy": described(self.copy),
                "dropped": dropped,
            },
            ensure_ascii=False,
            sort_keys=True,
        )

    def why_dropped(self) -> str:
        return (
            f"byte-identical to {self.kept.uri} ({self.kept.split}, {self.kept.manifest} "
            f"line {self.kept.line}), which is kept"
        )


class FindDuplicates(beam.PTransform):
    """ShardExamples -> batches of Duplicates: one for every copy after the one kept.

    Each shard's keys are split into _BUCKETS by their SHA-256 and grouped by bucket, so
    the grouping moves a few elements per shard, not one per example; each bucket's
    copies leave as one batch."""

    def expand(self, shard_examples: beam.PCollection) -> beam.PCollection:
        return (
            shard_examples
            | "ByBucket" >> beam.FlatMap(_by_bucket)
            | "GroupByBucket" >> beam.GroupByKey()
            | "Copies" >> beam.FlatMapTuple(_copies_in_bucket)
        )


_BUCKETS = 16


def _by_bucket(examples: ShardExamples) -> Iterator[tuple[int, Batch]]:
    return batches_by_key(
        (int(sha256[:8], 16) % _BUCKETS, (sha256, ref)) for sha256, ref in examples.keys
    )


def _copies_in_bucket(_: int, shards_keys: Iterable[Batch]) -> Iterator[Batch]:
    by_sha256: dict[str, list[ExampleRef]] = collections.defaultdict(list)
    for keys in shards_keys:
        for sha256, ref in keys:
            by_sha256[sha256].append(ref)
    if batch := Batch(
        copy
        for sha256, refs in by_sha256.items()
        if len(refs) > 1
        for copy in _copies(sha256, refs)
    ):
        yield batch


def _copies(sha256: str, refs: Iterable[ExampleRef]) -> Iterator[Duplicate]:
    kept, *copies = sorted(refs, key=order)
    for copy in copies:
        yield Duplicate(sha256, kept, copy)


class DropDuplicates(beam.PTransform):
    """ShardWritten -> ShardWritten without the copies; their rows -> DEAD_LETTERS.

    `duplicates`: batches of Duplicates and NearDuplicates, from refs that carry their
    content; the shards are rewritten with `filesystems` applied.
    """

    def __init__(
        self,
        duplicates: beam.PCollection,
        shard_format: ShardFormat,
        filesystems: FilesystemOptions,
    ) -> None:
        super().__init__()
        self._duplicates = duplicates
        self._format = shard_format
        self._filesystems = filesystems

    def expand(self, shards: beam.PCollection):
        return (
            {
                "shard": shards
                | "KeyShards" >> beam.Map(lambda shard: ((shard.split, shard.shard), shard)),
                "copies": self._duplicates
                | "KeyCopies"
                >> beam.FlatMap(
                    lambda batch: (
                        ((duplicate.copy.split, duplicate.copy.shard), duplicate)
                        for duplicate in batch
                    )
                ),
            }
            | "ByShard" >> beam.CoGroupByKey()
            | "Rewrite"
            >> beam.ParDo(_RewriteShard(self._format, self._filesystems)).with_outputs(
                DEAD_LETTERS, main="shards"
            )
        )


class _RewriteShard(StorageDoFn):
    def __init__(self, shard_format: ShardFormat, filesystems: FilesystemOptions) -> None:
        super().__init__(filesystems)
        self._format = shard_format
        self._dropped = Metrics.counter("images", "duplicates_dropped")
        self._near_dropped = Metrics.counter("images", "near_duplicates_dropped")

    def process(
        self, keyed: tuple[tuple[str, int], dict[str, list]]
    ) -> Iterator[ShardWritten | tagged(DEAD_LETTERS, DeadLetter)]:
        _, grouped = keyed
        (shard,) = grouped["shard"]
        copies: dict[int, Duplicate | NearDuplicate] = {}
        # A copy both byte-identical to one image and near another is dropped as the first.
        for duplicate in sorted(
            grouped["copies"], key=lambda d: (isinstance(d, NearDuplicate), order(d.kept))
        ):
            copies.setdefault(duplicate.copy.position, duplicate)
        if not copies:
            yield shard
            return
        # A new file, the old one kept: a retried call reads the same input again.
        folder, name = FileSystems.split(shard.temp_path)
        rewritten = FileSystems.join(folder, f"deduped-{name}")
        kept = shard.examples - len(copies)
        if kept:  # else no file, like a shard that got no image
            with self._format.create(rewritten, PipelineFiles()) as new:
                for position, record in enumerate(
                    self._format.read(shard.temp_path, PipelineFiles())
                ):
                    if position not in copies:
                        new.write(record)
        labels = collections.Counter(shard.labels)
        reencoded = collections.Counter(shard.reencoded)
        longest_side = collections.Counter(shard.longest_side)
        file_bytes = collections.Counter(shard.file_bytes)
        annotations = collections.Counter(shard.annotations)
        for duplicate in copies.values():
            dropped = duplicate.copy.content
            labels.subtract(duplicate.copy.labels)
            reencoded.subtract([dropped.reencoded] if dropped.reencoded else [])
            longest_side[longest_side_bin(dropped.longest_side)] -= 1
            file_bytes[file_bytes_bin(dropped.source_bytes)] -= 1
            annotations.subtract(example_annotations(dropped.rows))
            near = isinstance(duplicate, NearDuplicate)
            (self._near_dropped if near else self._dropped).inc()
            for row in dropped.rows:
                yield beam.pvalue.TaggedOutput(
                    DEAD_LETTERS,
                    row.dead_letter(
                        reasons.NEAR_DUPLICATE_IMAGE if near else reasons.DUPLICATE_IMAGE,
                        duplicate.why_dropped(),
                    ),
                )
        yield shard._replace(
            temp_path=rewritten,
            examples=kept,
            rows=shard.rows - sum(len(d.copy.content.rows) for d in copies.values()),
            bytes=FileSystems.match([rewritten])[0].metadata_list[0].size_in_bytes if kept else 0,
            source_bytes=shard.source_bytes
            - sum(d.copy.content.source_bytes for d in copies.values()),
            labels=_positive(labels),
            reencoded=_positive(reencoded),
            longest_side=_positive(longest_side),
            file_bytes=_positive(file_bytes),
            annotations=_positive(annotations),
        )


def _positive(counts: collections.Counter[str]) -> dict[str, int]:
    return {key: n for key, n in counts.items() if n > 0}


class DuplicatesResult(NamedTuple):
    """ReportDuplicates' outputs."""

    shards: beam.PCollection  # ShardWritten, without the copies `settings.dedupe` drops
    dead_letters: beam.PCollection  # the dropped copies' rows (none: --dedupe none)
    reports: beam.PCollection  # the paths of duplicates-*.jsonl and near_duplicates-*.jsonl
    by_splits: beam.PCollection  # ("kept split/copy split", byte-identical copies)
    near_by_splits: beam.PCollection  # ("kept split/copy split", near-copies)
    duplicates: beam.PCollection  # every byte-identical copy found, in batches
    near_duplicates: beam.PCollection  # every near-copy found, in batches
    dropped: beam.PCollection | None  # the copies dropped, in batches; None: --dedupe none


class ReportDuplicates(beam.PTransform):
    """(shards, their ShardExamples) -> DuplicatesResult: the copies found, reported, and
    dropped as `settings.dedupe` says.

    `temp_dir` is where the shards and their receipts were written, `report_dir` where
    the reports are staged."""

    def __init__(self, settings: RunSettings, temp_dir: str, report_dir: str) -> None:
        super().__init__()
        self._settings = settings
        self._dedupe = settings.dedupe
        self._near_distance = settings.near_distance
        self._format = settings.shard_format
        self._temp_dir = temp_dir
        self._report_dir = report_dir

    def expand(self, written):  # (shards, example keys): not a PCollection, so not annotated
        shards, example_keys = written
        exact = example_keys | "Find" >> FindDuplicates()
        near = example_keys | "FindNear" >> FindNearDuplicates(
            self._near_distance, self._temp_dir, self._settings
        )
        reports = (
            self._report(exact, "", self._dedupe is not Dedupe.NONE),
            self._report(near, "Near", self._dedupe is Dedupe.NEAR),
        )
        reports = reports | "Reports" >> beam.Flatten()
        by_splits = exact | "Count" >> _CountBySplits()
        near_by_splits = near | "CountNear" >> _CountBySplits()
        if self._dedupe is Dedupe.NONE:
            kept, dropped = shards, None
            dead_letters = shards.pipeline | "NoneDropped" >> beam.Create([])
        else:
            dropped = (
                (exact, near) if self._dedupe is Dedupe.NEAR else (exact,)
            ) | "Dropped" >> beam.Flatten()
            deduped = shards | "Drop" >> DropDuplicates(
                dropped, self._format, self._settings.filesystems
            )
            kept, dead_letters = deduped.shards, deduped[DEAD_LETTERS]
        return DuplicatesResult(
            shards=kept,
            dead_letters=dead_letters,
            reports=reports,
            by_splits=by_splits,
            near_by_splits=near_by_splits,
            duplicates=exact,
            near_duplicates=near,
            dropped=dropped,
        )

    def _report(self, copies: beam.PCollection, name: str, dropped: bool) -> beam.PCollection:
        """Writes duplicates-*.jsonl (`name` "") or near_duplicates-*.jsonl ("Near")."""
        path = naming.jsonl_list(self._report_dir, NEAR_DUPLICATES if name else DUPLICATES)
        return copies | f"Write{name}" >> WriteSortedLines(
            path,
            lambda copy: copy.to_json(dropped),
            self._temp_dir,
            batched=True,
            filesystems=self._settings.filesystems,
        )


class _CountBySplits(beam.PTransform):
    """Batches of copies -> ("kept split/copy split", copies)."""

    def expand(self, copies: beam.PCollection) -> beam.PCollection:
        return (
            copies
            | "SplitPair"
            >> beam.FlatMap(lambda batch: (f"{d.kept.split}/{d.copy.split}" for d in batch))
            | "PerPair" >> beam.combiners.Count.PerElement()
        )
