"""The last step: shards get their final names and summary.json is written, in the pipeline.

It runs once every shard, the dead letters and the transform_fn are written, so shard
files appear under their final names only when the run succeeds; it is idempotent, so a
runner may retry it. Doing this in the pipeline (not the launcher) keeps it true on
Dataflow, where the launcher may be gone before the job ends.
"""

from __future__ import annotations

import collections
import datetime
import json
from collections.abc import Iterable, Sequence
from typing import Any

import apache_beam as beam
import tensorflow_transform as tft
from apache_beam.io.filesystems import FileSystems

from transforms.examples import feature_spec
from transforms.label_map import LABEL_MAP_FILE, label_map_text
from transforms.labels import LABEL_VOCABULARY
from transforms.manifest import SPLITS
from transforms.shards import ShardWritten, shard_file_suffix
from transforms.tfds_metadata import write_tfds_metadata

SUMMARY_FILE = "summary.json"


class AccountingError(RuntimeError):
    """rows read != rows in examples written + rows dead-lettered: something was lost."""


class PublishOutput(beam.PTransform):
    """Renames the shards into place and writes OUTPUT/summary.json.

    Input: a dict of PCollections: "shards" (ShardWritten), "dead_letter_reasons"
    (reason codes), "row_counts" (counts that sum to the rows read), and "written"
    (anything that must be complete first: the transform_fn and the dead-letter files).
    With label_mode "detection" it also writes label_map.pbtxt; `oov_bucket` adds the
    unseen labels' entry to it.
    """

    def __init__(self, output_dir: str, temp_dir: str, compression: str,
                 run_info: dict[str, Any], label_mode: str = "single",
                 oov_bucket: bool = False) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._compression = compression
        self._run_info = run_info
        self._label_mode = label_mode
        self._oov_bucket = oov_bucket

    def expand(self, inputs: dict[str, beam.PCollection]) -> beam.PCollection:
        errors_by_reason = (inputs["dead_letter_reasons"]
                            | "CountByReason" >> beam.combiners.Count.PerElement())
        written = inputs["written"] | "AllWritten" >> beam.Flatten()
        return (inputs["row_counts"].pipeline
                | "Once" >> beam.Create([None])
                | "Publish" >> beam.Map(
                    self._publish,
                    shards=beam.pvalue.AsList(inputs["shards"]),
                    errors_by_reason=beam.pvalue.AsDict(errors_by_reason),
                    row_counts=beam.pvalue.AsList(inputs["row_counts"]),
                    written=beam.pvalue.AsList(written)))

    def _publish(self, _: None, shards: list[ShardWritten], errors_by_reason: dict[str, int],
                 row_counts: list[int], written: list[Any]) -> dict[str, Any]:
        rows_read = sum(row_counts)
        files = name_shards(shards, self._compression)
        vocabulary = [word.decode() for word in tft.TFTransformOutput(
            self._output_dir).vocabulary_by_name(LABEL_VOCABULARY)]
        summary = build_summary(files, errors_by_reason, rows_read, vocabulary,
                                error_files=sorted(FileSystems.split(str(path))[1]
                                                   for path in written
                                                   if str(path).endswith(".jsonl")),
                                run_info=self._run_info)
        summary["features"] = feature_spec(self._label_mode)
        if self._label_mode == "detection":
            summary["label_map"] = LABEL_MAP_FILE
            with FileSystems.create(FileSystems.join(self._output_dir, LABEL_MAP_FILE)) as out:
                out.write(label_map_text(vocabulary, self._oov_bucket).encode())
        if summary["accounted"]:
            move_into_place(files, shards, self._output_dir)
            write_tfds_metadata(self._output_dir, summary)
        with FileSystems.create(FileSystems.join(self._output_dir, SUMMARY_FILE)) as out:
            out.write(json.dumps(summary, indent=2, ensure_ascii=False).encode())
        if not summary["accounted"]:  # the temp dir stays, as evidence
            raise AccountingError(
                f"rows read ({rows_read}) != rows in examples written "
                f"({summary['rows_in_examples']}) + rows dead-lettered "
                f"({summary['rows_dead_lettered']}); no shard was published, the written "
                f"ones are in {self._temp_dir}")
        if FileSystems.exists(self._temp_dir):
            FileSystems.delete([self._temp_dir])
        return summary


def name_shards(shards: Iterable[ShardWritten], compression: str
                ) -> dict[str, list[tuple[str, ShardWritten]]]:
    """split -> [(final file name, shard)] for the non-empty shards, in shard order.

    Names follow the shards actually written (`split-IIIII-of-NNNNN`), so a planned
    shard that got no image leaves no gap.
    """
    suffix = shard_file_suffix(compression)
    by_split: dict[str, list[ShardWritten]] = collections.defaultdict(list)
    for shard in sorted(shards, key=lambda s: (s.split, s.shard)):
        if shard.examples:
            by_split[shard.split].append(shard)
    return {split: [(f"{split}-{index:05d}-of-{len(split_shards):05d}{suffix}", shard)
                    for index, shard in enumerate(split_shards)]
            for split, split_shards in by_split.items()}


def move_into_place(files: dict[str, list[tuple[str, ShardWritten]]],
                    shards: Iterable[ShardWritten], output_dir: str) -> None:
    """Renames the named temp shards into `output_dir` and deletes what is stale there.

    Stale: shard files of an earlier run that this one does not replace, and the temp
    files of shards that got no image. Safe to repeat after a retry.
    """
    previous = {m.path for split in SPLITS
                for m in FileSystems.match([FileSystems.join(
                    output_dir, f"{split}-*-of-*.tfrecord*")])[0].metadata_list}
    sources, destinations = [], []
    for name, shard in (item for named in files.values() for item in named):
        destination = FileSystems.join(output_dir, name)
        previous.discard(destination)
        if FileSystems.exists(shard.temp_path):  # else a retry already moved it
            sources.append(shard.temp_path)
            destinations.append(destination)
    if sources:
        FileSystems.rename(sources, destinations)
    empty = [s.temp_path for s in shards if not s.examples and FileSystems.exists(s.temp_path)]
    if previous or empty:
        FileSystems.delete(sorted(previous) + empty)


def build_summary(files: dict[str, list[tuple[str, ShardWritten]]],
                  errors_by_reason: dict[str, int], rows_read: int,
                  vocabulary: Sequence[str], error_files: list[str],
                  run_info: dict[str, Any]) -> dict[str, Any]:
    """summary.json: counts per split and label, shard files, errors and the accounting."""
    known = set(vocabulary)
    splits = {}
    for split in SPLITS:
        shards = [shard for _, shard in files.get(split, [])]
        labels: collections.Counter[str] = collections.Counter()
        reencoded: collections.Counter[str] = collections.Counter()
        for shard in shards:
            labels.update(shard.labels)
            reencoded.update(shard.reencoded)
        splits[split] = {
            "examples": sum(shard.examples for shard in shards),
            "bytes": sum(shard.bytes for shard in shards),
            "source_bytes": sum(shard.source_bytes for shard in shards),
            "labels": dict(sorted(labels.items())),
            "unseen_label_examples": sum(n for label, n in labels.items() if label not in known),
            "reencoded": dict(sorted(reencoded.items())),
            "shards": [{"file": name, "records": shard.examples, "bytes": shard.bytes}
                       for name, shard in files.get(split, [])],
        }
    rows_in_examples = sum(shard.rows for named in files.values() for _, shard in named)
    rows_dead_lettered = sum(errors_by_reason.values())
    return {
        "rows_read": rows_read,
        "examples_written": sum(split["examples"] for split in splits.values()),
        "rows_in_examples": rows_in_examples,  # more than examples with detection boxes
        "rows_dead_lettered": rows_dead_lettered,
        "accounted": rows_read == rows_in_examples + rows_dead_lettered,
        "error_fraction": rows_dead_lettered / rows_read if rows_read else 0.0,
        "splits": splits,
        "empty_splits": [split for split in SPLITS if not splits[split]["examples"]],
        "vocabulary": {"label": list(vocabulary)},
        "errors": {"by_reason": dict(sorted(errors_by_reason.items())), "files": error_files},
        **run_info,
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
