"""summary.json's numbers, counted from the shards a run wrote: examples, bytes, labels
and histograms per split, the shard files, the dead letters by reason, and the
accounting of every row read.

The publish step (transforms/publish.py) adds what only the pipeline knows (the
vocabularies, the copies found, the label warnings); this part needs no Beam, so a test
builds a summary from a few ShardWritten records.
"""

from __future__ import annotations

import collections
import datetime
from collections.abc import Sequence

from image_tfrecords.core.records.histograms import FILE_BYTE_BINS, LONGEST_SIDE_BINS
from image_tfrecords.core.records.records import ShardWritten
from image_tfrecords.core.records.splits import SPLITS
from image_tfrecords.core.records.summary import (
    ErrorsInfo,
    RunInfo,
    ShardInfo,
    SplitInfo,
    Summary,
    few_examples_per_shard,
)


def resumed_shards(files: dict[str, list[tuple[str, ShardWritten]]]) -> int:
    """How many of the shards were reused from a stopped run (--resume)."""
    return sum(shard.resumed for named in files.values() for _, shard in named)


def build_summary(
    files: dict[str, list[tuple[str, ShardWritten]]],
    errors_by_reason: dict[str, int],
    rows_read: int,
    vocabulary: Sequence[str],
    error_files: list[str],
    run_info: RunInfo,
    rows_discarded: int = 0,
    objects_left_out: dict[str, int] | None = None,
    companions: Sequence[str] = (),
    objects_clipped: int = 0,
) -> Summary:
    """summary.json: counts per split and label, shard files, errors and the accounting.

    `rows_discarded`: DISCARD rows and objects left out, read but left out on purpose (no
    error); `objects_left_out`: shape -> the objects of it among them; `objects_clipped`:
    the boxes read whose corners reached outside the image, clipped to it;
    `companions`: the suffixes of the files beside each shard (ShardFormat.companions).
    """
    known = set(vocabulary)
    splits = {}
    for split in SPLITS:
        shards = [shard for _, shard in files.get(split, [])]
        labels: collections.Counter[str] = collections.Counter()
        reencoded: collections.Counter[str] = collections.Counter()
        longest_side: collections.Counter[str] = collections.Counter()
        file_bytes: collections.Counter[str] = collections.Counter()
        annotations: collections.Counter[str] = collections.Counter()
        for shard in shards:
            labels.update(shard.labels)
            reencoded.update(shard.reencoded)
            longest_side.update(shard.longest_side)
            file_bytes.update(shard.file_bytes)
            annotations.update(shard.annotations)
        splits[split] = SplitInfo(
            examples=sum(shard.examples for shard in shards),
            bytes=sum(shard.bytes for shard in shards),
            source_bytes=sum(shard.source_bytes for shard in shards),
            labels=dict(sorted(labels.items())),
            unseen_label_examples=sum(n for label, n in labels.items() if label not in known),
            reencoded=dict(sorted(reencoded.items())),
            longest_side={
                name: longest_side[name] for name in LONGEST_SIDE_BINS if longest_side[name]
            },
            file_bytes={name: file_bytes[name] for name in FILE_BYTE_BINS if file_bytes[name]},
            annotations=dict(sorted(annotations.items())),
            shards=tuple(
                ShardInfo(
                    file=name,
                    records=shard.examples,
                    bytes=shard.bytes,
                    companions=tuple(name + suffix for suffix in companions),
                )
                for name, shard in files.get(split, [])
            ),
        )
    rows_in_examples = sum(shard.rows for named in files.values() for _, shard in named)
    rows_dead_lettered = sum(errors_by_reason.values())
    return Summary(
        **dict(run_info),
        finished_at=datetime.datetime.now(datetime.UTC).isoformat(),
        resumed_shards=resumed_shards(files),
        examples_reused=sum(shard.reused for named in files.values() for _, shard in named),
        rows_read=rows_read,
        examples_written=sum(split.examples for split in splits.values()),
        rows_in_examples=rows_in_examples,
        rows_dead_lettered=rows_dead_lettered,
        rows_discarded=rows_discarded,
        objects_left_out=dict(sorted((objects_left_out or {}).items())),
        objects_clipped=objects_clipped,
        accounted=rows_read == rows_in_examples + rows_dead_lettered + rows_discarded,
        error_fraction=rows_dead_lettered / rows_read if rows_read else 0.0,
        splits=splits,
        empty_splits=tuple(split for split in SPLITS if not splits[split].examples),
        few_examples_per_shard=few_examples_per_shard(splits),
        vocabulary={"label": tuple(vocabulary)},
        errors=ErrorsInfo(by_reason=dict(sorted(errors_by_reason.items())), files=error_files),
    )
