"""What report.html shows besides summary.json's numbers, gathered from small records.

The sample (per split and label, the examples of lowest report_page.sample_rank), the
first copies of each kind (leaks first) and the first dead letters of each reason are
picked by combiners, so no stage holds more than the page shows. Their thumbnails are then read
from the files the shard writer wrote beside its shards: the writer's own decode, so no
image is read again.
"""

import collections
import heapq
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from image_tfrecords.core.file_formats.framing import read_records
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.naming import thumbnails_path
from image_tfrecords.core.records.records import ExampleRef, ShardExamples
from image_tfrecords.core.report.report_page import (
    LEAKS_LISTED,
    PAIRS_SHOWN,
    REJECTED_SHOWN,
    SAMPLE_PER_LABEL,
    CopyPair,
    Pictured,
    RejectedRow,
    ReportContent,
    copy_rank,
    distinct,
    first_copies,
    sample_rank,
)
from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
from image_tfrecords.transforms.batch import Batch
from image_tfrecords.transforms.storage_steps import with_filesystems

Place = tuple[str, int, int]  # (split, shard, position) of an example in the temp shards


def _place(ref: ExampleRef) -> Place:
    return ref.split, ref.shard, ref.position


class ReportSources(NamedTuple):
    """What GatherReportContent picks the report's content from."""

    example_keys: beam.PCollection  # WriteShards' ShardExamples
    dead_letters: beam.PCollection  # DeadLetter
    duplicates: beam.PCollection  # every byte-identical copy found, in batches
    near_duplicates: beam.PCollection  # every near-copy found, in batches


class GatherReportContent(beam.PTransform):
    """ReportSources -> one ReportContent.

    `temp_dir` is where WriteShards wrote the shards and their thumbnails, read with
    `filesystems` applied; `dropped`: batches of the copies --dedupe dropped, left out of
    the sample (None when it drops none).
    """

    def __init__(
        self, temp_dir: str, filesystems: FilesystemOptions, dropped: beam.PCollection | None = None
    ) -> None:
        super().__init__()
        self._temp_dir = temp_dir
        self._filesystems = filesystems
        self._dropped = dropped

    # inputs: a ReportSources. Not annotated: Beam reads expand's annotations as type hints,
    # which are PCollections.
    def expand(self, inputs) -> beam.PCollection:
        examples = inputs.example_keys
        if self._dropped is not None:  # a join by shard, only when it can matter
            examples = (
                {
                    "examples": examples
                    | "ExamplesByShard"
                    >> beam.Map(lambda shard: ((shard.split, shard.shard), shard)),
                    "dropped": self._dropped
                    | "DroppedByShard"
                    >> beam.FlatMap(
                        lambda batch: (
                            ((copy.copy.split, copy.copy.shard), copy.copy.position)
                            for copy in batch
                        )
                    ),
                }
                | "JoinDropped" >> beam.CoGroupByKey()
                | "Kept" >> beam.FlatMap(_kept)
            )
        # Each shard's candidates, then the best of them: a few elements per shard.
        samples = (
            examples
            | "ShardSamples" >> beam.FlatMap(_shard_sample)
            | "Sample"
            >> beam.combiners.Top.PerKey(SAMPLE_PER_LABEL, key=_sample_rank, reverse=True)
        )
        duplicates = inputs.duplicates | "FirstCopies" >> _first_copies()
        near = inputs.near_duplicates | "FirstNear" >> _first_copies()
        rejected = (
            inputs.dead_letters
            | "ByReason" >> beam.Map(lambda dead: (dead.reason, dead))
            | "FirstRejected"
            >> beam.combiners.Top.PerKey(
                REJECTED_SHOWN, key=lambda dead: (dead.manifest, dead.line), reverse=True
            )
        )
        thumbnails = (
            (
                samples | "SampleRefs" >> beam.FlatMap(lambda keyed: keyed[1]),
                duplicates | "CopyRefs" >> beam.FlatMap(_refs_of_copies),
                near | "NearRefs" >> beam.FlatMap(_refs_of_copies),
            )
            | "Shown" >> beam.Flatten()
            | "ByShard" >> beam.Map(lambda ref: ((ref.split, ref.shard), ref.position))
            | "GroupByShard" >> beam.GroupByKey()
            | "ReadThumbnails"
            >> beam.FlatMap(with_filesystems(self._read_thumbnails, self._filesystems))
        )
        return (
            inputs.example_keys.pipeline
            | "Once" >> beam.Create([None])
            | "Assemble"
            >> beam.Map(
                _assemble,
                samples=beam.pvalue.AsList(samples),
                duplicates=beam.pvalue.AsSingleton(duplicates),
                near=beam.pvalue.AsSingleton(near),
                rejected=beam.pvalue.AsList(rejected),
                thumbnails=beam.pvalue.AsDict(thumbnails),
            )
        )

    def _read_thumbnails(
        self, shard_positions: tuple[tuple[str, int], Iterable[int]]
    ) -> Iterator[tuple[Place, bytes]]:
        """The thumbnails at these positions of one shard, in one pass over its file."""
        (split, shard), positions = shard_positions
        wanted = set(positions)
        with FileSystems.open(thumbnails_path(self._temp_dir, split, shard)) as file:
            for position, thumbnail in zip(range(max(wanted) + 1), read_records(file)):
                if position in wanted:
                    yield (split, shard, position), thumbnail


def _sample_rank(ref: ExampleRef) -> int:
    return sample_rank(ref.uri)


def _shard_sample(examples: ShardExamples) -> Iterator[tuple[tuple[str, str], ExampleRef]]:
    """The shard's candidates for the sample of each (split, label): what the sample of
    all shards can take from it.

    A candidate is its example's place and URI only: the sample shows no labels, and an
    example with N labels is a candidate N times, each a pickled element of its own, so
    carrying its labels (or its rows) would make the sample hold N² of them."""
    by_label: dict[tuple[str, str], list[ExampleRef]] = collections.defaultdict(list)
    for _, ref in examples.keys:
        candidate = ref._replace(labels=(), content=None)
        for label in set(ref.labels):
            by_label[ref.split, label].append(candidate)
    for key, refs in by_label.items():
        for ref in heapq.nsmallest(SAMPLE_PER_LABEL, refs, key=_sample_rank):
            yield key, ref


def _kept(joined: tuple[tuple[str, int], dict[str, list]]) -> Iterator[ShardExamples]:
    """The shard's examples without the copies --dedupe dropped."""
    _, grouped = joined
    dropped = set(grouped["dropped"])
    for examples in grouped["examples"]:
        yield examples._replace(
            keys=tuple(keyed for keyed in examples.keys if keyed[1].position not in dropped)
        )


class _ShownCopy(NamedTuple):
    """A copy as the page takes it: without what --dedupe keeps of each example (its
    rows: ExampleContent), each label once, so the LEAKS_LISTED held stay small whatever
    an image's annotation."""

    kept: ExampleRef
    copy: ExampleRef
    distance: int


def _shown_copy(copy: Any) -> _ShownCopy:
    """`copy`: a Duplicate or a NearDuplicate."""

    def light(ref: ExampleRef) -> ExampleRef:
        return ref._replace(labels=distinct(ref.labels), content=None, source=None)

    return _ShownCopy(light(copy.kept), light(copy.copy), copy.distance)


def _copy_rank(copy: _ShownCopy) -> tuple:
    return copy_rank(
        copy.kept.split, copy.copy.split, copy.copy.manifest, copy.copy.line, copy.copy.uri
    )


class _FirstCopies(beam.CombineFn):
    """Batches of copies -> the copies the page takes (report_page.first_copies: leaks
    first), each made light once.

    A batch at a time: one element per copy would cost Beam's coders and a Top combiner
    microseconds each, thousands of times over on a set of near-copies (the launcher's
    per-image cost, bench/RESULTS.md issue 53). What is held is cut down to what the
    page takes once it is twice LEAKS_LISTED, so a run of many batches sorts each copy a
    few times, not once per batch."""

    def create_accumulator(self) -> list[_ShownCopy]:
        return []

    def add_input(self, held: list[_ShownCopy], batch: Iterable[Any]) -> list[_ShownCopy]:
        held.extend(map(_shown_copy, batch))
        if len(held) > 2 * LEAKS_LISTED:
            held[:] = first_copies(held, _copy_rank)
        return held

    def merge_accumulators(self, accumulators: Iterable[list[_ShownCopy]]) -> list[_ShownCopy]:
        return first_copies([copy for held in accumulators for copy in held], _copy_rank)

    def extract_output(self, held: list[_ShownCopy]) -> Batch:
        return Batch(first_copies(held, _copy_rank))

    def get_accumulator_coder(self) -> beam.coders.Coder:
        return beam.coders.PickleCoder()  # a list pickled whole (see Batch)


@beam.ptransform_fn
def _first_copies(batches: beam.PCollection) -> beam.PCollection:
    """Batches of copies -> [the copies the page takes, in report_page.copy_rank order]."""
    return batches | "First" >> beam.CombineGlobally(_FirstCopies()).with_output_types(Batch)


def _refs_of_copies(copies: Batch) -> Iterator[ExampleRef]:
    """The examples of the copies pictured (the rest are listed by name)."""
    for copy in copies[:PAIRS_SHOWN]:
        yield copy.kept
        yield copy.copy


def _assemble(
    _: None,
    samples: list[tuple[tuple[str, str], list[ExampleRef]]],
    duplicates: Batch,
    near: Batch,
    rejected: list[tuple[str, list[DeadLetter]]],
    thumbnails: dict[Place, bytes],
) -> ReportContent:
    def pictured(ref: ExampleRef) -> Pictured:
        return Pictured(ref.uri, ref.split, ref.labels, thumbnails.get(_place(ref)))

    def pairs(copies: list[_ShownCopy]) -> list[CopyPair]:
        return [
            CopyPair(pictured(copy.kept), pictured(copy.copy), copy.distance) for copy in copies
        ]

    by_split: dict[str, dict[str, list[Pictured]]] = {}
    for (split, label), refs in sorted(samples):
        by_split.setdefault(split, {})[label] = [pictured(ref) for ref in refs]
    return ReportContent(
        samples=by_split,
        duplicates=pairs(duplicates),
        near_duplicates=pairs(near),
        dead_letters={
            reason: [RejectedRow(dead.manifest, dead.line, dead.uri, dead.message) for dead in rows]
            for reason, rows in sorted(rejected)
        },
    )
