"""Byte-identical images: always reported, and with --dedupe sha256 written only once.

The shard writer reports every example's SHA-256 with the rows it came from; grouping
those small records (never the images) finds the copies. The copy kept is the one in
the earliest split (TRAIN, VALIDATION, TEST), then the earliest row, so dropping a copy
never takes an image out of TRAIN to leave it in TEST: a copy across splits is a leak.
Dropping rewrites only the shards that hold a dropped copy, from their temp files.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.tfrecordio import _TFRecordUtil
from apache_beam.metrics import Metrics

from transforms import dead_letters as reasons
from transforms.manifest import DEAD_LETTERS, SPLITS
from transforms.shards import ExampleRef, ShardWritten

class Duplicate(NamedTuple):
    sha256: str
    kept: ExampleRef
    copy: ExampleRef

    def to_json(self, dropped: bool) -> str:
        def where(ref: ExampleRef) -> dict:
            return {"uri": ref.uri, "split": ref.split, "manifest": ref.manifest,
                    "line": ref.line}
        return json.dumps({"sha256": self.sha256, "kept": where(self.kept),
                           "copy": where(self.copy), "dropped": dropped},
                          ensure_ascii=False, sort_keys=True)


class FindDuplicates(beam.PTransform):
    """(sha256, ExampleRef) -> a Duplicate for every copy after the one kept."""

    def expand(self, keys: beam.PCollection) -> beam.PCollection:
        return (keys
                | "BySha256" >> beam.GroupByKey()
                | "Copies" >> beam.FlatMapTuple(_copies))


def _copies(sha256: str, refs: Iterable[ExampleRef]) -> Iterator[Duplicate]:
    kept, *copies = sorted(refs, key=lambda ref: (SPLITS.index(ref.split), ref.manifest,
                                                  ref.line))
    for copy in copies:
        yield Duplicate(sha256, kept, copy)


class DropDuplicates(beam.PTransform):
    """ShardWritten -> ShardWritten without the copies; their rows -> DEAD_LETTERS.

    `duplicates` is FindDuplicates' output, from refs that carry their content.
    """

    def __init__(self, duplicates: beam.PCollection, compression: str) -> None:
        super().__init__()
        self._duplicates = duplicates
        self._compression = compression

    def expand(self, shards: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return ({"shard": shards | "KeyShards" >> beam.Map(
                    lambda shard: ((shard.split, shard.shard), shard)),
                 "copies": self._duplicates | "KeyCopies" >> beam.Map(
                    lambda duplicate: ((duplicate.copy.split, duplicate.copy.shard),
                                       duplicate))}
                | "ByShard" >> beam.CoGroupByKey()
                | "Rewrite" >> beam.ParDo(_RewriteShard(self._compression)).with_outputs(
                    DEAD_LETTERS, main="shards"))


class _RewriteShard(beam.DoFn):
    def __init__(self, compression: str) -> None:
        self._compression = (CompressionTypes.GZIP if compression == "gzip"
                             else CompressionTypes.UNCOMPRESSED)
        self._dropped = Metrics.counter("images", "duplicates_dropped")

    def process(self, keyed: tuple[tuple[str, int], dict[str, list]]
                ) -> Iterator[ShardWritten | beam.pvalue.TaggedOutput]:
        _, grouped = keyed
        (shard,) = grouped["shard"]
        copies = {duplicate.copy.position: duplicate for duplicate in grouped["copies"]}
        if not copies:
            yield shard
            return
        # A new file, the old one kept: a retried call reads the same input again.
        folder, name = FileSystems.split(shard.temp_path)
        rewritten = FileSystems.join(folder, f"deduped-{name}")
        kept = shard.examples - len(copies)
        if kept:  # else no file, like a shard that got no image
            with FileSystems.open(shard.temp_path, compression_type=self._compression) as old, \
                    FileSystems.create(rewritten, compression_type=self._compression) as new:
                for position in range(shard.examples):
                    record = _TFRecordUtil.read_record(old)
                    if position not in copies:
                        _TFRecordUtil.write_record(new, record)
        labels = collections.Counter(shard.labels)
        reencoded = collections.Counter(shard.reencoded)
        for duplicate in copies.values():
            dropped, original = duplicate.copy.content, duplicate.kept
            labels.subtract(dropped.labels)
            reencoded.subtract([dropped.reencoded] if dropped.reencoded else [])
            self._dropped.inc()
            for row in dropped.rows:
                yield beam.pvalue.TaggedOutput(DEAD_LETTERS, row.dead_letter(
                    reasons.DUPLICATE_IMAGE, f"byte-identical to {original.uri} "
                    f"({original.split}, {original.manifest} line {original.line}), which "
                    "is kept"))
        yield shard._replace(
            temp_path=rewritten, examples=kept,
            rows=shard.rows - sum(len(d.copy.content.rows) for d in copies.values()),
            bytes=FileSystems.match([rewritten])[0].metadata_list[0].size_in_bytes if kept else 0,
            source_bytes=shard.source_bytes - sum(d.copy.content.source_bytes
                                                  for d in copies.values()),
            labels={label: n for label, n in labels.items() if n > 0},
            reencoded={why: n for why, n in reencoded.items() if n > 0})


class ReportDuplicates(beam.PTransform):
    """(shards, example keys) -> a dict of PCollections: "shards" (without the copies
    when `drop`), "dead_letters" (the dropped copies' rows), "report" (the written
    duplicates-*.jsonl) and "by_splits" ("kept split/copy split" -> copies)."""

    def __init__(self, drop: bool, compression: str, report_prefix: str) -> None:
        super().__init__()
        self._drop = drop
        self._compression = compression
        self._report_prefix = report_prefix

    def expand(self, written: tuple[beam.PCollection, beam.PCollection]) -> dict:
        shards, example_keys = written
        duplicates = example_keys | "Find" >> FindDuplicates()
        report = (duplicates
                  | "ToJson" >> beam.Map(Duplicate.to_json, dropped=self._drop)
                  # As many files as the runner likes (one on the DirectRunner): one file
                  # would first group every line in one place, and there can be a line
                  # per example.
                  | "Write" >> beam.io.WriteToText(self._report_prefix, file_name_suffix=".jsonl",
                                                   skip_if_empty=True))
        by_splits = (duplicates
                     | "SplitPair" >> beam.Map(lambda d: f"{d.kept.split}/{d.copy.split}")
                     | "Count" >> beam.combiners.Count.PerElement())
        if not self._drop:
            return {"shards": shards, "report": report, "by_splits": by_splits,
                    "dead_letters": shards.pipeline | "NoneDropped" >> beam.Create([])}
        deduped = shards | "Drop" >> DropDuplicates(duplicates, self._compression)
        return {"shards": deduped.shards, "report": report, "by_splits": by_splits,
                "dead_letters": deduped[DEAD_LETTERS]}
