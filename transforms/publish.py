"""The last step: shards get their final names and summary.json is written, in the pipeline.

It runs once every shard, the dead letters and the transform_fn are written, so shard
files appear under their final names only when the run succeeds; it is idempotent, so a
runner may retry it. Doing this in the pipeline (not the launcher) keeps it true on
Dataflow, where the launcher may be gone before the job ends.

Everything here goes through Beam's FileSystems, so it works alike on local disks,
gs://, s3:// and hdfs://. Object stores have no directories (a "directory" is a name
prefix) and no atomic rename of several files: summary.json is therefore removed first
and written last, so it is present only beside a complete set of shards.

Before anything is moved, the run's outcome is checked (outcome_problems: rows lost, no
example, a label without a written TRAIN example, too many dead letters). A run that
fails it publishes nothing: the output stays as it was, the job fails, and what the run
wrote stays in OUTPUT/.tmp-<run id>/staged/ with FAILED.json (why, and the summary it
would have published) beside its errors-*.jsonl and a report.html that opens on the
failure, until the next run that publishes.
"""

from __future__ import annotations

import collections
import datetime
import re
import shutil
from collections.abc import Iterable, Sequence
from typing import Any

import apache_beam as beam
import tensorflow_transform as tft
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from image_tfrecords.transforms.storage_steps import with_filesystems
from image_tfrecords.transforms.outcome import (PublishRules, RunFailed, frequency_order,
                                outcome_problems, read_summary, unwritten_labels)
from image_tfrecords.transforms.tfds_metadata import LABELS_SUFFIX, tfds_metadata
from image_tfrecords.core import interrupts, naming
from image_tfrecords.core.choices import Dedupe, LabelMode, LabelOrder
from image_tfrecords.core.examples import feature_spec
from image_tfrecords.core.failure import Failure
from image_tfrecords.core.file_formats import ShardFormat, shard_globs
from image_tfrecords.core.beam_filesystems import settle_beam_filesystems
from image_tfrecords.core.histograms import FILE_BYTE_BINS, LONGEST_SIDE_BINS
from image_tfrecords.core.splits import SPLITS
from image_tfrecords.core.label_checks import LabelSeen, label_warnings
from image_tfrecords.core.label_map import label_map_text
from image_tfrecords.core.naming import (DATASET_INFO_FILE, DUPLICATES, ERRORS, FEATURES_FILE,
                           LABEL_MAP_FILE, LABEL_VOCABULARY, NEAR_DUPLICATES, REPORT_FILE, SUMMARY_FILE,
                           staged_dir)
from image_tfrecords.core.records import ShardWritten
from image_tfrecords.core.report_page import ReportContent, render_report
from image_tfrecords.core.run_settings import RunSettings
from image_tfrecords.core.schema import CATEGORICAL
from image_tfrecords.core.summary import (CopiesInfo, ErrorsInfo, LabelIdChange, NearCopiesInfo, RunInfo,
                            ShardInfo, SplitInfo, Summary, few_examples_per_shard)

# What tf.Transform's WriteTransformFn writes, as tft.TFTransformOutput(OUTPUT) reads it.
TRANSFORM_FOLDERS = (naming.TRANSFORM_FN_DIR, naming.TRANSFORMED_METADATA_DIR)
_RAW = CompressionTypes.UNCOMPRESSED  # copies keep bytes as they are, whatever the name


class PublishOutput(beam.PTransform):
    """Renames the shards into place, copies the transform_fn, writes OUTPUT/summary.json.

    Input: a dict of PCollections: "shards" (ShardWritten), "dead_letter_reasons"
    (reason codes), "row_counts" (counts that sum to the rows read; a source with
    nothing to count gives none), "rows_discarded" (the DISCARD rows and objects left
    out among them: one count, or none for 0), "objects_left_out" ((shape, objects of it
    left out)), "train_label_rows" ((label, TRAIN rows carrying it)),
    "labels_seen" ((label, LabelSeen): every split's, for summary.json's label_warnings),
    "duplicates_by_splits" and "near_duplicates_by_splits" ("kept split/copy split",
    copies), "report_content" (the one ReportContent of report.html) and
    "written" (anything that must be complete first: the transform_fn, the dead letters,
    the duplicates).
    `temp_dir` holds the temp shards and what is staged; `tft_dir` is tf.Transform's
    working folder, where WriteTransformFn wrote the transform_fn. Both are removed
    once the run has succeeded. With `settings.label_mode` detection it also writes
    label_map.pbtxt, with the unseen labels' entry where they have an id. A run that
    breaks `rules` raises RunFailed and publishes nothing (see the module's docstring).
    """

    def __init__(self, output_dir: str, temp_dir: str, tft_dir: str, settings: RunSettings,
                 run_info: RunInfo, rules: PublishRules) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._tft_dir = tft_dir
        self._settings = settings
        self._format = settings.shard_format
        self._run_info = run_info
        self._rules = rules
        self._run_id = naming.run_id_of(temp_dir)

    def expand(self, inputs: dict[str, beam.PCollection]) -> beam.PCollection:
        errors_by_reason = (inputs["dead_letter_reasons"]
                            | "CountByReason" >> beam.combiners.Count.PerElement())
        written = inputs["written"] | "AllWritten" >> beam.Flatten()
        return (inputs["row_counts"].pipeline
                | "Once" >> beam.Create([None])
                | "Publish" >> beam.Map(
                    with_filesystems(self._publish, self._settings.filesystems),
                    shards=beam.pvalue.AsList(inputs["shards"]),
                    errors_by_reason=beam.pvalue.AsDict(errors_by_reason),
                    row_counts=beam.pvalue.AsList(inputs["row_counts"]),
                    rows_discarded=beam.pvalue.AsSingleton(inputs["rows_discarded"],
                                                           default_value=0),
                    objects_left_out=beam.pvalue.AsDict(inputs["objects_left_out"]),
                    train_label_rows=beam.pvalue.AsDict(inputs["train_label_rows"]),
                    labels_seen=beam.pvalue.AsDict(inputs["labels_seen"]),
                    duplicates=beam.pvalue.AsDict(inputs["duplicates_by_splits"]),
                    near_duplicates=beam.pvalue.AsDict(inputs["near_duplicates_by_splits"]),
                    report_content=beam.pvalue.AsSingleton(inputs["report_content"]),
                    written=beam.pvalue.AsList(written)))

    def _publish(self, _: None, shards: list[ShardWritten], errors_by_reason: dict[str, int],
                 row_counts: list[int], rows_discarded: int,
                 objects_left_out: dict[str, int], train_label_rows: dict[str, int],
                 labels_seen: dict[str, LabelSeen],
                 duplicates: dict[str, int], near_duplicates: dict[str, int],
                 report_content: ReportContent, written: list[Any]) -> Summary:
        settle_beam_filesystems(self._output_dir)  # this may be a worker of another machine
        files = name_shards(shards, self._format)
        final = FileSystems.join(self._output_dir, SUMMARY_FILE)
        prepared = FileSystems.join(self._temp_dir, SUMMARY_FILE)
        if not FileSystems.exists(prepared):
            published = read_summary(final)
            if published and published.run_id == self._run_id:  # a retry after the end
                return published
        summary = read_summary(prepared)  # a retry: files may have been moved already
        if summary is not None:  # what the shards given now were reused from, if resumed
            summary = summary.model_copy(update={"resumed_shards": resumed_shards(files)})
        else:
            summary = self._prepare(files, errors_by_reason, sum(row_counts),
                                    (duplicates, near_duplicates), labels_seen,
                                    written, (rows_discarded, objects_left_out),
                                    (report_content, train_label_rows))
            _write_text(prepared, summary.to_json())
        failure = self._failure(summary, train_label_rows)
        if failure is not None:  # nothing is published; the temp dir stays, as evidence
            _write_text(failure.record, failure.to_json())
            raise RunFailed(failure)
        # Ctrl-C now stops the run once the output is whole (core/interrupts.py).
        with interrupts.held("publishing"):
            move_into_place(files, self._temp_dir, summary.files, self._output_dir,
                            self._format.companions)
            _write_text(final, summary.to_json())
            # This run's temp dirs, and those of runs that crashed before publishing
            # (match lists files, not folders).
            crashed = {re.match(rf".*?/{re.escape(naming.TEMP_PREFIX)}[^/]+", m.path).group()
                       for m in FileSystems.match([FileSystems.join(
                           naming.every_temp_dir(self._output_dir), "**")])[0].metadata_list}
            for folder in sorted({self._temp_dir, self._tft_dir, *crashed}):
                delete_tree(folder)
        return summary

    def _id_notes(self, vocabulary: tuple[str, ...], summary: Summary) -> dict[str, Any]:
        """summary.json's notes on the label ids: those that differ from the replaced
        output's; for ids computed from TRAIN, sorted, the labels no written TRAIN example
        carries, or, by frequency, the order the written TRAIN examples give where it is
        another (without an example the run fails: outcome_problems)."""
        notes: dict[str, Any] = {}
        if self._rules.replaced_labels is not None:
            notes["label_id_changes"] = LabelIdChange.between(self._rules.replaced_labels,
                                                              vocabulary)
        if self._rules.pinned_from is not None:
            return notes
        train_examples = summary.splits["train"].labels
        if self._settings.label_order is LabelOrder.SORTED:
            notes["unwritten_labels"] = tuple(unwritten_labels(vocabulary, train_examples, {}))
        elif (by_examples := frequency_order(vocabulary, train_examples)) != vocabulary:
            notes["frequency_order_of_examples"] = by_examples
        return notes

    def _failure(self, summary: Summary, train_label_rows: dict[str, int]) -> Failure | None:
        """Why the run must not be published, to be written to FAILED.json beside the
        staged dead letters (for the user and the launcher); None when it may be."""
        problems = outcome_problems(summary, train_label_rows, self._rules)
        if not problems:
            return None
        staged = staged_dir(self._temp_dir)
        return Failure(problems=problems, dead_letters=[
            FileSystems.join(staged, name) for name in summary.errors.files],
            record=naming.failure_record(self._temp_dir), summary=summary)

    def _prepare(self, files: dict[str, list[tuple[str, ShardWritten]]],
                 errors_by_reason: dict[str, int], rows_read: int,
                 copies: tuple[dict[str, int], dict[str, int]],
                 labels_seen: dict[str, LabelSeen],
                 written: list[Any], discarded: tuple[int, dict[str, int]],
                 report: tuple[ReportContent, dict[str, int]]) -> Summary:
        """The summary, from the staged transform_fn's vocabularies; stages the TFDS
        metadata, report.html (from `report`: its content and the TRAIN rows per label
        that the outcome check needs) and, for detection, label_map.pbtxt."""
        staged = staged_dir(self._temp_dir)
        for folder in TRANSFORM_FOLDERS:
            copy_tree(FileSystems.join(self._tft_dir, folder), FileSystems.join(staged, folder))
        transform_output = tft.TFTransformOutput(self._tft_dir)
        vocabularies = {name: tuple(word.decode()
                                    for word in transform_output.vocabulary_by_name(name))
                        for name in [LABEL_VOCABULARY, *(
                            column.name for column in self._settings.extra_columns
                            if column.type == CATEGORICAL)]}
        duplicates, near_duplicates = copies  # "kept split/copy split" -> copies
        detection = self._settings.label_mode is LabelMode.DETECTION
        summary = build_summary(files, errors_by_reason, rows_read, vocabularies[LABEL_VOCABULARY],
                                error_files=_written_names(written, ERRORS),
                                run_info=self._run_info, rows_discarded=discarded[0],
                                objects_left_out=discarded[1],
                                companions=self._format.companions)
        annotations = {kind for split in summary.splits.values() for kind in split.annotations}
        summary = summary.model_copy(update={
            "run_id": self._run_id,
            "vocabulary": vocabularies,
            "vocabulary_pinned_from": None if self._rules.declared else self._rules.pinned_from,
            "vocabulary_declared_by": self._rules.pinned_from if self._rules.declared else None,
            **self._id_notes(vocabularies[LABEL_VOCABULARY], summary),
            "features": feature_spec(self._settings.label_mode, self._settings.extra_columns,
                                     sorted(annotations)),
            "duplicates": CopiesInfo(
                copies=sum(duplicates.values()), by_splits=dict(sorted(duplicates.items())),
                dropped=self._settings.dedupe is not Dedupe.NONE,
                files=_written_names(written, DUPLICATES)),
            "near_duplicates": NearCopiesInfo(
                copies=sum(near_duplicates.values()),
                by_splits=dict(sorted(near_duplicates.items())),
                max_distance=self._settings.near_distance,
                dropped=self._settings.dedupe is Dedupe.NEAR,
                files=_written_names(written, NEAR_DUPLICATES)),
            "label_map": LABEL_MAP_FILE if detection else None,
            "label_warnings": label_warnings(labels_seen, vocabularies[LABEL_VOCABULARY],
                                             self._settings.label_mode,
                                             self._settings.label_separator,
                                             ids_pinned=self._rules.pinned_from is not None)})
        for name, text in tfds_metadata(summary).items():
            _write_text(FileSystems.join(staged, name), text)
        if detection:
            _write_text(FileSystems.join(staged, LABEL_MAP_FILE), label_map_text(
                vocabularies[LABEL_VOCABULARY], self._settings.oov_bucket))
        # Listed now, as a retried publish finds them moved already.
        # (match may give the paths in another form than `staged`: absolute, say)
        marker = "/{}/{}/".format(*staged.rstrip("/").rsplit("/", 2)[-2:])  # <temp>/staged/
        summary = summary.model_copy(update={"files": tuple(sorted([REPORT_FILE, *(
            m.path[m.path.index(marker) + len(marker):]
            for m in FileSystems.match([FileSystems.join(staged, "**")])[0].metadata_list)]))})
        # Last, as it shows the summary whole, and the run's outcome: a failed run's page
        # opens on its failure.
        content, train_label_rows = report
        _write_text(FileSystems.join(staged, REPORT_FILE), render_report(
            summary, content, self._output_dir, self._failure(summary, train_label_rows)))
        return summary


def read_failure(temp_dir: str) -> Failure | None:
    """The Failure a run with this temp dir recorded, or None when it recorded none."""
    path = naming.failure_record(temp_dir)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as file:
        return Failure.from_json(file.read(), path)


def _written_names(written: list[Any], stem: str) -> list[str]:
    """The names of the lists written of `stem` (naming.jsonl_list)."""
    return sorted(name for name in (FileSystems.split(str(path))[1] for path in written)
                  if name.startswith(f"{stem}-"))


def _write_text(path: str, text: str) -> None:
    with FileSystems.create(path) as out:
        out.write(text.encode())


def name_shards(shards: Iterable[ShardWritten], shard_format: ShardFormat
                ) -> dict[str, list[tuple[str, ShardWritten]]]:
    """split -> [(final file name, shard)] for the non-empty shards, in shard order.

    Names follow the shards actually written (`split-IIIII-of-NNNNN`), so a planned
    shard that got no image leaves no gap.
    """
    suffix = shard_format.suffix
    by_split: dict[str, list[ShardWritten]] = collections.defaultdict(list)
    for shard in sorted(shards, key=lambda s: (s.split, s.shard)):
        if shard.examples:
            by_split[shard.split].append(shard)
    return {split: [(naming.PublishedShard(split, index, len(split_shards), suffix).name, shard)
                    for index, shard in enumerate(split_shards)]
            for split, split_shards in by_split.items()}


# Everything a run publishes but summary.json; what matches and is not replaced is stale.
_PUBLISHED = (*(glob for split in SPLITS for glob in shard_globs(split)),
              *(f"{folder}/**" for folder in TRANSFORM_FOLDERS),
              *(naming.every_jsonl_list(stem) for stem in (ERRORS, DUPLICATES, NEAR_DUPLICATES)),
              REPORT_FILE, LABEL_MAP_FILE,
              DATASET_INFO_FILE, FEATURES_FILE, f"*{LABELS_SUFFIX}")
# What readers start from: removed first, so none takes a half-swapped folder for whole
# (summary.json is written again last; the TFDS files come with the others).
_ENTRY_POINTS = (SUMMARY_FILE, DATASET_INFO_FILE)


def move_into_place(files: dict[str, list[tuple[str, ShardWritten]]], temp_dir: str,
                    staged_files: Sequence[str], output_dir: str,
                    companions: Sequence[str] = ()) -> None:
    """Swaps this run's files into `output_dir`: the named temp shards, the files
    beside each named as it plus one of `companions` (ShardFormat.companions), and the
    `staged_files` (paths relative to staged_dir(temp_dir)).

    In this order: summary.json and dataset_info.json go, so no reader takes the folder
    for a whole output until the caller writes the new summary.json; then every file of
    an earlier run that this one does not replace, so none stands beside this run's;
    then the renames, undone if one fails. Safe to repeat after a retry: a file no longer
    in the temp folder was moved by the first try. Listings, not a request per file, say
    what is where.
    """
    staged = staged_dir(temp_dir)
    destinations = {shard.temp_path + companion: FileSystems.join(output_dir, name + companion)
                    for named in files.values() for name, shard in named
                    for companion in ("", *companions)}
    destinations |= {FileSystems.join(staged, name): FileSystems.join(output_dir, name)
                     for name in staged_files}
    waiting = sorted(m.path for m in FileSystems.match(
        [FileSystems.join(temp_dir, "**")])[0].metadata_list if m.path in destinations)
    arriving = {destinations[path] for path in waiting}
    present = {m.path for pattern in _PUBLISHED + _ENTRY_POINTS
               for m in FileSystems.match([FileSystems.join(output_dir, pattern)])[0]
               .metadata_list}
    # The entry points (unless a retry moved the new one in already), then the stale.
    entry_points = {FileSystems.join(output_dir, name) for name in _ENTRY_POINTS}
    first = sorted(path for path in present & entry_points
                   if path in arriving or path not in destinations.values())
    stale = sorted(present - entry_points - set(destinations.values()))
    for paths in (first, stale):
        if paths:
            FileSystems.delete(paths)
    if FileSystems.get_filesystem(output_dir).has_dirs():  # local disks need the folders
        for folder in sorted({FileSystems.split(path)[0] for path in arriving}):
            if not FileSystems.exists(folder):
                FileSystems.mkdirs(folder)
    if not waiting:
        return
    try:
        FileSystems.rename(waiting, [destinations[path] for path in waiting])
    except Exception:
        # Undo a partial swap: no split stands half-published, and a retry starts over.
        # What arrived is what left the temp folder: a file of the earlier output under
        # the same name is not this run's to move.
        still_waiting = {m.path: m.last_updated_in_seconds for m in FileSystems.match(
            [FileSystems.join(temp_dir, "**")])[0].metadata_list}
        back = [path for path in waiting if path not in still_waiting]
        if back:
            FileSystems.rename([destinations[path] for path in back], back)
        if not FileSystems.get_filesystem(output_dir).has_dirs():
            _remove_landed_copies({destinations[path]: still_waiting[path]
                                   for path in waiting if path in still_waiting}, output_dir)
        raise


def _remove_landed_copies(sources_updated: dict[str, float], output_dir: str) -> None:
    """Deletes the destinations (given with their source's time of writing) that were
    written after their source though the source is still in the temp folder: on an
    object store a rename is a copy and then a delete, and a copy that landed before its
    delete failed left this run's file under its final name.

    A file written before is an earlier output's, not this run's to touch. (Times, not
    checksums: a copy of an object uploaded in parts gets another S3 ETag.)
    """
    listed = FileSystems.match([FileSystems.join(output_dir, "**")])[0].metadata_list
    landed = [m.path for m in listed if m.path in sources_updated
              and m.last_updated_in_seconds >= sources_updated[m.path]]
    if landed:
        FileSystems.delete(landed)


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


def resumed_shards(files: dict[str, list[tuple[str, ShardWritten]]]) -> int:
    """How many of the shards were reused from a stopped run (--resume)."""
    return sum(shard.resumed for named in files.values() for _, shard in named)


def build_summary(files: dict[str, list[tuple[str, ShardWritten]]],
                  errors_by_reason: dict[str, int], rows_read: int,
                  vocabulary: Sequence[str], error_files: list[str],
                  run_info: RunInfo, rows_discarded: int = 0,
                  objects_left_out: dict[str, int] | None = None,
                  companions: Sequence[str] = ()) -> Summary:
    """summary.json: counts per split and label, shard files, errors and the accounting.

    `rows_discarded`: DISCARD rows and objects left out, read but left out on purpose (no
    error); `objects_left_out`: shape -> the objects of it among them;
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
            longest_side={name: longest_side[name] for name in LONGEST_SIDE_BINS
                          if longest_side[name]},
            file_bytes={name: file_bytes[name] for name in FILE_BYTE_BINS if file_bytes[name]},
            annotations=dict(sorted(annotations.items())),
            shards=tuple(ShardInfo(file=name, records=shard.examples, bytes=shard.bytes,
                                   companions=tuple(name + suffix for suffix in companions))
                         for name, shard in files.get(split, [])))
    rows_in_examples = sum(shard.rows for named in files.values() for _, shard in named)
    rows_dead_lettered = sum(errors_by_reason.values())
    return Summary(
        **dict(run_info),
        finished_at=datetime.datetime.now(datetime.timezone.utc).isoformat(),
        resumed_shards=resumed_shards(files),
        rows_read=rows_read,
        examples_written=sum(split.examples for split in splits.values()),
        rows_in_examples=rows_in_examples,
        rows_dead_lettered=rows_dead_lettered,
        rows_discarded=rows_discarded,
        objects_left_out=dict(sorted((objects_left_out or {}).items())),
        accounted=rows_read == rows_in_examples + rows_dead_lettered + rows_discarded,
        error_fraction=rows_dead_lettered / rows_read if rows_read else 0.0,
        splits=splits,
        empty_splits=tuple(split for split in SPLITS if not splits[split].examples),
        few_examples_per_shard=few_examples_per_shard(splits),
        vocabulary={"label": tuple(vocabulary)},
        errors=ErrorsInfo(by_reason=dict(sorted(errors_by_reason.items())), files=error_files))
