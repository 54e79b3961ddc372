"""Whether a finished run may be published: the check the publish step makes first, and
reading back the summary a run prepared or published, or the Failure it recorded.

Kept apart from publish.py so the launcher knows RunFailed, and reads a summary or a
Failure, without loading TensorFlow; Beam is loaded only to read them from storage.
FAILED.json's record, `Failure`, is core/records/failure.py's: the readers of an output (verify,
report) read it too.
"""

import json
from collections.abc import Sequence
from typing import NamedTuple

import pydantic

from image_tfrecords.core.records import naming
from image_tfrecords.core.records.choices import LabelOrder
from image_tfrecords.core.records.dead_letters import UNSEEN_LABEL, DeadLetter
from image_tfrecords.core.records.failure import Failure
from image_tfrecords.core.records.summary import Summary
from image_tfrecords.core.records.text_limits import MAX_LINE_BYTES


class PublishRules(NamedTuple):
    """What a finished run must meet to be published, how its vocabulary was made, and
    what its ids are compared with."""

    max_error_fraction: float
    pinned_from: str | None = None  # the pinned vocabulary's file; None: from TRAIN
    strict_labels: bool = False  # summary.label_warnings fail the run
    declared: bool = False  # pinned_from is what declares the input's classes, not a file
    # The label vocabulary of the output this run replaces (--overwrite); None: none
    replaced_labels: tuple[str, ...] | None = None


def read_summary(path: str) -> Summary | None:
    """The summary at `path`; None where there is none, or none this version could have
    written (an older version's, or one a killed run left half-written)."""
    # Imported here: importing this module (RunFailed, the checks) loads no Beam.
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as file:
        try:
            return Summary.from_json(file.read())
        except pydantic.ValidationError:
            return None


def read_failure(temp_dir: str) -> Failure | None:
    """The Failure a run with this temp dir recorded, or None when it recorded none."""
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415 - as read_summary

    path = naming.failure_record(temp_dir)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as file:
        return Failure.from_json(file.read(), path)


# Label ids are learnt from the TRAIN rows: without any, every label is unseen.
NO_TRAIN_ROWS = (
    "there is no TRAIN row to learn the label ids from; converting other "
    "splits alone needs the ids of the run that converted TRAIN, "
    "--vocabulary OUTPUT_DIR (or a file of labels, one a line)"
)


class RunFailed(RuntimeError):
    """The run failed its outcome check: nothing was published."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.line())
        self.failure = failure


def outcome_problems(
    summary: Summary,
    train_label_rows: dict[str, int],
    rules: PublishRules,
    example: DeadLetter | None = None,
) -> list[str]:
    """Why the run described by `summary` must not be published; empty when it may be.

    `train_label_rows` counts the TRAIN rows read per label. With --label_order
    frequency, every label of the vocabulary must be carried by a written TRAIN example
    (detection: a written TRAIN object): a label whose TRAIN rows were all dead-lettered
    would hold an id that no example has, and shift the ids after it. Sorted ids depend
    only on the set of labels the rows give: such a label keeps its place, as a pinned
    one does, and summary.json's unwritten_labels names it. `example`: the first dead
    letter, which a run that wrote no example names.
    """
    problems = []
    if not summary.accounted:
        problems.append(
            f"rows read ({summary.rows_read}) != rows in examples written "
            f"({summary.rows_in_examples}) + rows dead-lettered "
            f"({summary.rows_dead_lettered}) + rows discarded "
            f"({summary.rows_discarded}): rows were lost"
        )
    if not summary.examples_written:
        return [*problems, _no_example(summary, train_label_rows, rules, example)]
    if rules.pinned_from is None and summary.options.label_order is LabelOrder.FREQUENCY:
        unwritten = unwritten_labels(
            summary.labels, summary.splits["train"].labels, train_label_rows
        )
        if unwritten:
            problems.append(
                "labels without a written TRAIN example would get ids: "
                + ", ".join(
                    f"{label!r} ({rows} TRAIN row{'s' * (rows != 1)}, all dead-lettered)"
                    for label, rows in unwritten.items()
                )
                + "; fix those rows, pin the ids with --vocabulary FILE|OUTPUT_DIR, or "
                "number the labels by --label_order sorted"
            )
    if rules.strict_labels and summary.label_warnings:
        problems.append(
            "--strict_labels: "
            + "; ".join(
                f"{warning.message} (rows {', '.join(warning.first_rows)})"
                for warning in summary.label_warnings
            )
        )
    if summary.error_fraction > rules.max_error_fraction:
        problems.append(
            f"{summary.error_fraction:.1%} of rows were dead-lettered, more "
            f"than --max_error_fraction {rules.max_error_fraction:.1%}"
        )
    return problems


def _no_example(
    summary: Summary,
    train_label_rows: dict[str, int],
    rules: PublishRules,
    example: DeadLetter | None,
) -> str:
    """Why no example was written: what happened to the rows first (their reasons, and
    one of them), and the want of TRAIN rows only where that is why (no row but
    unseen-label dead letters, and no ids pinned)."""
    said = []
    by_reason = summary.errors.by_reason
    if summary.rows_dead_lettered:
        reasons = ", ".join(
            f"{reason} {count}"
            for reason, count in sorted(by_reason.items(), key=lambda item: (-item[1], item[0]))
        )
        one = f", e.g. {example.manifest} row {example.line}: {example.message}" if example else ""
        said.append(
            f"{summary.rows_dead_lettered} of the {summary.rows_read} rows read were "
            f"dead-lettered ({reasons}){one}"
        )
    elif not summary.rows_read:
        said.append("no row was read")
    if (
        summary.rows_read
        and rules.pinned_from is None
        and not train_label_rows
        and set(by_reason) <= {UNSEEN_LABEL}
    ):
        said.append(NO_TRAIN_ROWS)
    return "no example was written" + (": " + "; ".join(said) if said else "")


def first_dead_letter(paths: Sequence[str]) -> DeadLetter | None:
    """The first dead letter of the errors files at `paths` (their first line, read
    bounded: the staged files sit in an output folder others may write to); None where
    there is none, or it is not one."""
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415 - as read_summary

    for path in paths:
        with FileSystems.open(path) as file:
            line = file.readline(MAX_LINE_BYTES + 1)
        try:
            return DeadLetter(**json.loads(line))
        except (ValueError, TypeError):
            return None
    return None


def unwritten_labels(
    vocabulary: Sequence[str], train_examples: dict[str, int], train_label_rows: dict[str, int]
) -> dict[str, int]:
    """label -> its TRAIN rows, for each vocabulary label no written TRAIN example carries."""
    return {
        label: train_label_rows.get(label, 0)
        for label in vocabulary
        if not train_examples.get(label)
    }


def frequency_order(vocabulary: Sequence[str], train_examples: dict[str, int]) -> tuple[str, ...]:
    """The vocabulary in tf.Transform's frequency order (most first, ties by descending
    bytes) of the written TRAIN examples (detection: objects) carrying each label."""
    return tuple(
        sorted(
            vocabulary,
            key=lambda label: (train_examples.get(label, 0), label.encode()),
            reverse=True,
        )
    )
