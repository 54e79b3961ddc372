"""The last step: shards get their final names and summary.json is written, in the pipeline.

It runs once every shard, the dead letters and the transform_fn are written, so shard
files appear under their final names only when the run succeeds; it is idempotent, so a
runner may retry it. Doing this in the pipeline (not the launcher) keeps it true on
Dataflow, where the launcher may be gone before the job ends.

Everything here goes through Beam's FileSystems, so it works alike on local disks,
gs://, s3:// and hdfs://. Object stores have no directories (a "directory" is a name
prefix) and no atomic rename of several files: summary.json is therefore removed first
and written last, so it is present only beside a complete set of shards.
"""

from __future__ import annotations

import collections
import datetime
import json
import shutil
from collections.abc import Iterable, Sequence
from typing import Any

import apache_beam as beam
import tensorflow_transform as tft
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.labels import LABEL_VOCABULARY
from transforms.manifest import SPLITS
from transforms.shards import ShardWritten, shard_file_suffix

SUMMARY_FILE = "summary.json"
# What tf.Transform's WriteTransformFn writes, as tft.TFTransformOutput(OUTPUT) reads it.
TRANSFORM_FOLDERS = (tft.TFTransformOutput.TRANSFORM_FN_DIR,
                     tft.TFTransformOutput.TRANSFORMED_METADATA_DIR)
_RAW = CompressionTypes.UNCOMPRESSED  # copies keep bytes as they are, whatever the name


class AccountingError(RuntimeError):
    """rows read != examples written + rows dead-lettered: something was lost."""


class PublishOutput(beam.PTransform):
    """Renames the shards into place, copies the transform_fn, writes OUTPUT/summary.json.

    Input: a dict of PCollections: "shards" (ShardWritten), "dead_letter_reasons"
    (reason codes), "row_counts" (counts that sum to the rows read), and "written"
    (anything that must be complete first: the transform_fn and the dead-letter files).
    `temp_dir` holds the temp shards; `tft_dir` is tf.Transform's working folder, where
    WriteTransformFn wrote the transform_fn. Both are removed once the run has succeeded.
    """

    def __init__(self, output_dir: str, temp_dir: str, tft_dir: str, compression: str,
                 run_info: dict[str, Any]) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._tft_dir = tft_dir
        self._compression = compression
        self._run_info = run_info

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
            self._tft_dir).vocabulary_by_name(LABEL_VOCABULARY)]
        summary = build_summary(files, errors_by_reason, rows_read, vocabulary,
                                error_files=sorted(FileSystems.split(str(path))[1]
                                                   for path in written
                                                   if str(path).endswith(".jsonl")),
                                run_info=self._run_info)
        summary_path = FileSystems.join(self._output_dir, SUMMARY_FILE)
        if FileSystems.exists(summary_path):  # an earlier run's: gone before anything changes
            FileSystems.delete([summary_path])
        if summary["accounted"]:
            move_into_place(files, self._output_dir)
            for folder in TRANSFORM_FOLDERS:
                delete_tree(FileSystems.join(self._output_dir, folder))
                copy_tree(FileSystems.join(self._tft_dir, folder),
                          FileSystems.join(self._output_dir, folder))
        with FileSystems.create(summary_path) as out:
            out.write(json.dumps(summary, indent=2, ensure_ascii=False).encode())
        if not summary["accounted"]:  # the temp dirs stay, as evidence
            raise AccountingError(
                f"rows read ({rows_read}) != examples written ({summary['examples_written']})"
                f" + rows dead-lettered ({summary['rows_dead_lettered']}); no shard was "
                f"published, the written ones are in {self._temp_dir}")
        for folder in (self._temp_dir, self._tft_dir):
            delete_tree(folder)
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


def move_into_place(files: dict[str, list[tuple[str, ShardWritten]]], output_dir: str
                    ) -> None:
    """Deletes every shard file of an earlier run, then renames the named temp shards
    into `output_dir`, so no earlier shard ever stands beside this run's.

    Safe to repeat after a retry: a shard no longer in the temp folder was moved by the
    first try, and what is at its final name is this run's. Each listing is one request,
    where a remote filesystem would take one per file to say whether it exists.
    """
    named = [item for split_files in files.values() for item in split_files]
    destinations = {shard.temp_path: FileSystems.join(output_dir, name) for name, shard in named}
    temp_folders = {FileSystems.split(temp_path)[0] for temp_path in destinations}
    waiting = sorted(m.path for folder in temp_folders
                     for m in FileSystems.match([FileSystems.join(folder, "*")])[0].metadata_list
                     if m.path in destinations)
    moved = set(destinations.values()) - {destinations[path] for path in waiting}
    earlier = sorted(m.path for m in FileSystems.match(
        [FileSystems.join(output_dir, "*-*-of-*.tfrecord*")])[0].metadata_list
        if FileSystems.split(m.path)[1].split("-")[0] in SPLITS and m.path not in moved)
    if earlier:
        FileSystems.delete(earlier)
    if waiting:
        FileSystems.rename(waiting, [destinations[path] for path in waiting])


def copy_tree(source: str, destination: str) -> None:
    """Copies every file under `source` to the same place under `destination`, which may
    be on another filesystem (Beam's FileSystems.copy needs both on the same one)."""
    for metadata in FileSystems.match([FileSystems.join(source, "**")])[0].metadata_list:
        relative = metadata.path[len(source.rstrip("/")) + 1:]
        with FileSystems.open(metadata.path, compression_type=_RAW) as data, \
                FileSystems.create(FileSystems.join(destination, relative),
                                   compression_type=_RAW) as out:
            shutil.copyfileobj(data, out)


def delete_tree(folder: str) -> None:
    """Deletes `folder` and everything under it; nothing happens when there is none."""
    if FileSystems.get_filesystem(folder).has_dirs():  # local disks, HDFS
        if FileSystems.exists(folder):
            FileSystems.delete([folder])
    else:
        # An object store's folder is only a name prefix: with a trailing "/" Beam deletes
        # every object under it (none: nothing to do); without, it would look for one object.
        FileSystems.delete([folder.rstrip("/") + "/"])


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
    examples_written = sum(split["examples"] for split in splits.values())
    rows_dead_lettered = sum(errors_by_reason.values())
    return {
        "rows_read": rows_read,
        "examples_written": examples_written,
        "rows_dead_lettered": rows_dead_lettered,
        "accounted": rows_read == examples_written + rows_dead_lettered,
        "error_fraction": rows_dead_lettered / rows_read if rows_read else 0.0,
        "splits": splits,
        "empty_splits": [split for split in SPLITS if not splits[split]["examples"]],
        "vocabulary": {"label": list(vocabulary)},
        "errors": {"by_reason": dict(sorted(errors_by_reason.items())), "files": error_files},
        **run_info,
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
