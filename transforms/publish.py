"""The last step: shards get their final names and summary.json is written, in the pipeline.

It runs once every shard, the dead letters and the transform_fn are written, so shard
files appear under their final names only when the run succeeds; it is idempotent, so a
runner may retry it. Doing this in the pipeline (not the launcher) keeps it true on
Dataflow, where the launcher may be gone before the job ends.

This is the order of things, as Beam's WriteImpl orders the calls to its sink: the file
operations (naming the shards, swapping the files into place, removing the temp
folders) are core/launcher/publishing.py's, the counts of summary.json
core/records/summary_builder.py's.
summary.json is removed first and written last, so it is present only beside a complete
set of shards, whatever the filesystem.

Before anything is moved, the run's outcome is checked (outcome_problems: rows lost, no
example, a label without a written TRAIN example, too many dead letters). A run that
fails it publishes nothing: the output stays as it was, the job fails, and what the run
wrote stays in OUTPUT/.tmp-<run id>/staged/ with FAILED.json (why, and the summary it
would have published) beside its errors-*.jsonl and a report.html that opens on the
failure, until the next run that publishes.
"""

import itertools
import logging
from typing import Any, NamedTuple

import apache_beam as beam
import tensorflow_transform as tft
from apache_beam.io.filesystems import FileSystems

from image_tfrecords.core.launcher import publishing
from image_tfrecords.core.records import naming
from image_tfrecords.core.records.choices import Dedupe, LabelMode, LabelOrder
from image_tfrecords.core.records.example_index import ExampleIndexError, read_index
from image_tfrecords.core.records.failure import Failure
from image_tfrecords.core.records.label_map import label_map_text
from image_tfrecords.core.records.naming import (
    DUPLICATES,
    ERRORS,
    LABEL_MAP_FILE,
    LABEL_VOCABULARY,
    NEAR_DUPLICATES,
    REPORT_FILE,
    SUMMARY_FILE,
    staged_dir,
)
from image_tfrecords.core.records.records import ShardWritten
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.schema import CATEGORICAL
from image_tfrecords.core.records.summary import (
    CopiesInfo,
    ExampleChanges,
    LabelIdChange,
    NearCopiesInfo,
    RunInfo,
    Summary,
)
from image_tfrecords.core.records.summary_builder import build_summary, resumed_shards
from image_tfrecords.core.report.changes import NotComparable, compare, published_entries
from image_tfrecords.core.report.report_page import ReportContent, render_report
from image_tfrecords.core.storage.beam_filesystems import settle_beam_filesystems
from image_tfrecords.core.worker import interrupts
from image_tfrecords.core.worker.examples import feature_spec
from image_tfrecords.core.worker.label_checks import LabelSeen, label_warnings
from image_tfrecords.transforms.outcome import (
    PublishRules,
    RunFailed,
    first_dead_letter,
    frequency_order,
    outcome_problems,
    read_summary,
    unwritten_labels,
)
from image_tfrecords.transforms.storage_steps import with_filesystems
from image_tfrecords.transforms.tfds_metadata import tfds_metadata


class PublishInputs(NamedTuple):
    """What PublishOutput publishes, each PCollection read whole (a side input)."""

    shards: beam.PCollection  # ShardWritten
    dead_letter_reasons: beam.PCollection  # a reason code per dead letter
    # Counts that sum to the rows read (a source with nothing to count gives none).
    row_counts: beam.PCollection
    # The DISCARD rows and objects left out among them: one count, or none for 0.
    rows_discarded: beam.PCollection
    objects_left_out: beam.PCollection  # (shape, objects of it left out)
    objects_clipped: beam.PCollection  # boxes clipped to the image: one count, or none for 0
    train_label_rows: beam.PCollection  # (label, TRAIN rows carrying it)
    # (label, LabelSeen): every split's, for summary.json's label_warnings.
    labels_seen: beam.PCollection
    duplicates_by_splits: beam.PCollection  # ("kept split/copy split", byte-identical copies)
    near_duplicates_by_splits: beam.PCollection  # ("kept split/copy split", near-copies)
    report_content: beam.PCollection  # the one ReportContent of report.html
    # What must be complete first (the transform_fn, the dead letters, the lists of
    # copies); the paths among them name the lists published.
    written: tuple[beam.PCollection, ...]


class PublishOutput(beam.PTransform):
    """PublishInputs -> the Summary: renames the shards into place, copies the
    transform_fn, writes OUTPUT/summary.json.

    `temp_dir` holds the temp shards and what is staged; `tft_dir` is tf.Transform's
    working folder, where WriteTransformFn wrote the transform_fn. Both are removed
    once the run has succeeded. With `settings.label_mode` detection it also writes
    label_map.pbtxt, with the unseen labels' entry where they have an id. A run that
    breaks `rules` raises RunFailed and publishes nothing (see the module's docstring).
    """

    def __init__(
        self,
        output_dir: str,
        temp_dir: str,
        tft_dir: str,
        settings: RunSettings,
        run_info: RunInfo,
        rules: PublishRules,
    ) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._tft_dir = tft_dir
        self._settings = settings
        self._format = settings.shard_format
        self._run_info = run_info
        self._rules = rules
        self._run_id = naming.run_id_of(temp_dir)

    # inputs: a PublishInputs. Not annotated: Beam reads expand's annotations as type hints,
    # which are PCollections.
    def expand(self, inputs) -> beam.PCollection:
        errors_by_reason = (
            inputs.dead_letter_reasons | "CountByReason" >> beam.combiners.Count.PerElement()
        )
        # Paths of files written, and tf.Transform's None once it has written its own, made
        # a path too: the Java runners' side inputs hold no null (Flink and Spark failed
        # with a NullPointerException on a nullable coder's None).
        written = (
            inputs.written
            | "AllWritten" >> beam.Flatten()
            | "AsPaths" >> beam.Map(lambda path: path or "").with_output_types(str)
        )
        return (
            inputs.row_counts.pipeline
            | "Once" >> beam.Create([None])
            | "Publish"
            >> beam.Map(
                with_filesystems(self._publish, self._settings.filesystems),
                shards=beam.pvalue.AsList(inputs.shards),
                errors_by_reason=beam.pvalue.AsDict(errors_by_reason),
                row_counts=beam.pvalue.AsList(inputs.row_counts),
                rows_discarded=beam.pvalue.AsSingleton(inputs.rows_discarded, default_value=0),
                objects_left_out=beam.pvalue.AsDict(inputs.objects_left_out),
                objects_clipped=beam.pvalue.AsSingleton(inputs.objects_clipped, default_value=0),
                train_label_rows=beam.pvalue.AsDict(inputs.train_label_rows),
                labels_seen=beam.pvalue.AsDict(inputs.labels_seen),
                duplicates=beam.pvalue.AsDict(inputs.duplicates_by_splits),
                near_duplicates=beam.pvalue.AsDict(inputs.near_duplicates_by_splits),
                report_content=beam.pvalue.AsSingleton(inputs.report_content),
                written=beam.pvalue.AsList(written),
            )
        )

    def _publish(
        self,
        _: None,
        shards: list[ShardWritten],
        errors_by_reason: dict[str, int],
        row_counts: list[int],
        rows_discarded: int,
        objects_left_out: dict[str, int],
        objects_clipped: int,
        train_label_rows: dict[str, int],
        labels_seen: dict[str, LabelSeen],
        duplicates: dict[str, int],
        near_duplicates: dict[str, int],
        report_content: ReportContent,
        written: list[Any],
    ) -> Summary:
        settle_beam_filesystems(self._output_dir)  # this may be a worker of another machine
        files = publishing.name_shards(shards, self._format)
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
            summary = self._prepare(
                files,
                errors_by_reason,
                sum(row_counts),
                (duplicates, near_duplicates),
                labels_seen,
                written,
                (rows_discarded, objects_left_out, objects_clipped),
                (report_content, train_label_rows),
            )
            publishing.write_text(prepared, summary.to_json())
        failure = self._failure(summary, train_label_rows)
        if failure is not None:  # nothing is published; the temp dir stays, as evidence
            publishing.write_text(failure.record, failure.to_json())
            raise RunFailed(failure)
        # Ctrl-C now stops the run once the output is whole (core/worker/interrupts.py).
        with interrupts.held("publishing"):
            publishing.publish(
                files,
                self._temp_dir,
                summary.files,
                self._output_dir,
                self._format.companions,
                summary.to_json(),
            )
            publishing.remove_temp_dirs(self._output_dir, self._temp_dir, self._tft_dir)
        return summary

    def _changes(self, files: dict[str, list[tuple[str, ShardWritten]]]) -> ExampleChanges | None:
        """What changed since the output this run reused, from its example indexes and
        this run's (before they are published over it); None without one, or where it
        cannot be read (said: the run's output is whole all the same)."""
        earlier = self._run_info.reused_from
        if earlier is None or not self._settings.writes_index:
            return None
        indexes = [
            naming.index_path(self._temp_dir, shard.split, shard.shard)
            for named in files.values()
            for _, shard in named
        ]
        try:
            return compare(
                published_entries(earlier), itertools.chain.from_iterable(map(read_index, indexes))
            )
        except (NotComparable, ExampleIndexError, OSError) as error:
            logging.warning("what changed since %s cannot be said: %s", earlier, error)
            return None

    def _id_notes(self, vocabulary: tuple[str, ...], summary: Summary) -> dict[str, Any]:
        """summary.json's notes on the label ids: those that differ from the replaced
        output's; for ids computed from TRAIN, sorted, the labels no written TRAIN example
        carries, or, by frequency, the order the written TRAIN examples give where it is
        another (without an example the run fails: outcome_problems)."""
        notes: dict[str, Any] = {}
        if self._rules.replaced_labels is not None:
            notes["label_id_changes"] = LabelIdChange.between(
                self._rules.replaced_labels, vocabulary
            )
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
        staged = staged_dir(self._temp_dir)
        dead_letters = [FileSystems.join(staged, name) for name in summary.errors.files]
        example = first_dead_letter(dead_letters) if not summary.examples_written else None
        problems = outcome_problems(summary, train_label_rows, self._rules, example)
        if not problems:
            return None
        return Failure(
            problems=problems,
            dead_letters=dead_letters,
            record=naming.failure_record(self._temp_dir),
            summary=summary,
        )

    def _prepare(
        self,
        files: dict[str, list[tuple[str, ShardWritten]]],
        errors_by_reason: dict[str, int],
        rows_read: int,
        copies: tuple[dict[str, int], dict[str, int]],
        labels_seen: dict[str, LabelSeen],
        written: list[Any],
        discarded: tuple[int, dict[str, int], int],  # rows discarded, objects left out, clipped
        report: tuple[ReportContent, dict[str, int]],
    ) -> Summary:
        """The summary, from the staged transform_fn's vocabularies; stages the TFDS
        metadata, report.html (from `report`: its content and the TRAIN rows per label
        that the outcome check needs) and, for detection, label_map.pbtxt."""
        staged = staged_dir(self._temp_dir)
        for folder in naming.TRANSFORM_FOLDERS:
            publishing.copy_tree(
                FileSystems.join(self._tft_dir, folder), FileSystems.join(staged, folder)
            )
        transform_output = tft.TFTransformOutput(self._tft_dir)
        vocabularies = {
            name: tuple(word.decode() for word in transform_output.vocabulary_by_name(name))
            for name in [
                LABEL_VOCABULARY,
                *(
                    column.name
                    for column in self._settings.extra_columns
                    if column.type == CATEGORICAL
                ),
            ]
        }
        duplicates, near_duplicates = copies  # "kept split/copy split" -> copies
        detection = self._settings.label_mode is LabelMode.DETECTION
        summary = build_summary(
            files,
            errors_by_reason,
            rows_read,
            vocabularies[LABEL_VOCABULARY],
            error_files=publishing.written_names(written, ERRORS),
            run_info=self._run_info,
            rows_discarded=discarded[0],
            objects_left_out=discarded[1],
            objects_clipped=discarded[2],
            companions=self._format.companions,
        )
        annotations = {kind for split in summary.splits.values() for kind in split.annotations}
        summary = summary.model_copy(
            update={
                "run_id": self._run_id,
                "vocabulary": vocabularies,
                "vocabulary_pinned_from": None if self._rules.declared else self._rules.pinned_from,
                "vocabulary_declared_by": self._rules.pinned_from if self._rules.declared else None,
                **self._id_notes(vocabularies[LABEL_VOCABULARY], summary),
                "features": feature_spec(
                    self._settings.label_mode, self._settings.extra_columns, sorted(annotations)
                ),
                "duplicates": CopiesInfo(
                    copies=sum(duplicates.values()),
                    by_splits=dict(sorted(duplicates.items())),
                    dropped=self._settings.dedupe is not Dedupe.NONE,
                    files=publishing.written_names(written, DUPLICATES),
                ),
                "near_duplicates": NearCopiesInfo(
                    copies=sum(near_duplicates.values()),
                    by_splits=dict(sorted(near_duplicates.items())),
                    max_distance=self._settings.near_distance,
                    dropped=self._settings.dedupe is Dedupe.NEAR,
                    files=publishing.written_names(written, NEAR_DUPLICATES),
                ),
                "label_map": LABEL_MAP_FILE if detection else None,
                "changes": self._changes(files),
                "label_warnings": label_warnings(
                    labels_seen,
                    vocabularies[LABEL_VOCABULARY],
                    self._settings.label_mode,
                    self._settings.label_separator,
                    ids_pinned=self._rules.pinned_from is not None,
                ),
            }
        )
        for name, text in tfds_metadata(summary).items():
            publishing.write_text(FileSystems.join(staged, name), text)
        if detection:
            publishing.write_text(
                FileSystems.join(staged, LABEL_MAP_FILE),
                label_map_text(vocabularies[LABEL_VOCABULARY], self._settings.oov_bucket),
            )
        # Listed now, as a retried publish finds them moved already.
        summary = summary.model_copy(
            update={"files": tuple(sorted([REPORT_FILE, *publishing.staged_files(self._temp_dir)]))}
        )
        # Last, as it shows the summary whole, and the run's outcome: a failed run's page
        # opens on its failure.
        content, train_label_rows = report
        publishing.write_text(
            FileSystems.join(staged, REPORT_FILE),
            render_report(
                summary, content, self._output_dir, self._failure(summary, train_label_rows)
            ),
        )
        return summary
