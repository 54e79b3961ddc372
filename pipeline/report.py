"""The table printed at the end of a run, made from summary.json."""

from __future__ import annotations

import collections

from image_tfrecords.core.records.naming import REPORT_FILE
from image_tfrecords.core.records.summary import (
    MIN_EXAMPLES_PER_SHARD,
    CopiesInfo,
    SplitGroups,
    SplitInfo,
    Summary,
)
from image_tfrecords.core.worker.examples import ANNOTATION_NAMES


def counted(count: int, noun: str) -> str:
    """ "1 example", "2 examples": a count with its noun, plural where it is not one."""
    return f"{count} {noun}{'s' * (count != 1)}"


def _shown(label: str) -> str:
    """A label as the table lists it: quoted where a comma or a space would make it read as
    several, or where it is empty."""
    return repr(label) if not label or any(char in label for char in ", '\"\t") else label


def format_report(
    summary: Summary, output_dir: str, wall_seconds: float, published: bool = True
) -> str:
    """The table; `published` False heads it as a failed run's, of which nothing was
    published."""
    rows = [("split", "examples", "shards", "MB", "labels")]
    for split, stats in summary.splits.items():
        labels = ", ".join(f"{_shown(label)} {count}" for label, count in stats.labels.items())
        rows.append(
            (
                split,
                str(stats.examples),
                str(len(stats.shards)),
                f"{stats.bytes / 1e6:.1f}",
                labels or "-",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = [
        f"image-tfrecords: {output_dir}"
        + ("" if published else "  FAILED: nothing below was published")
    ]
    lines += [
        "  ".join(
            [
                cell.ljust(width) if column == 0 else cell.rjust(width)
                for column, (cell, width) in enumerate(zip(row, widths))
            ]
            + [row[4]]
        )
        for row in rows
    ]
    if summary.empty_splits:
        lines.append(f"empty splits (no shards written): {', '.join(summary.empty_splits)}")
    lines += [
        _few_per_shard_line(split, summary.splits[split])
        for split in summary.few_examples_per_shard
    ]
    written = f"{counted(summary.examples_written, 'example')} written"
    if summary.rows_in_examples != summary.examples_written:
        written = f"{counted(summary.rows_in_examples, 'row')} in {written}"
    lines.append(
        f"rows read {summary.rows_read} = {written}"
        f" + {summary.rows_dead_lettered} dead-lettered ({summary.error_fraction:.1%})"
        + (
            f" + {summary.rows_discarded} discarded ({_discarded(summary)})"
            if summary.rows_discarded
            else ""
        )
        + ("" if summary.accounted else "  MISMATCH: rows were lost")
    )
    by_reason = summary.errors.by_reason
    if by_reason:
        lines.append(
            "dead letters by reason: "
            + ", ".join(f"{reason} {count}" for reason, count in by_reason.items())
            + f"  ({', '.join(summary.errors.files)})"
        )
    duplicates = summary.duplicates
    if duplicates.copies:
        lines.append(
            _copies_line(
                "byte-identical images",
                duplicates,
                "--dedupe sha256" if not summary.near_duplicates.dropped else "--dedupe near",
            )
        )
    near = summary.near_duplicates
    if near.copies:
        lines.append(
            _copies_line(
                f"near-copies (pHash within {near.max_distance} bits)", near, "--dedupe near"
            )
        )
    lines += _split_groups_lines(summary.split_groups)
    lines += [
        f"warning: {warning.message}; {counted(warning.rows, 'row')}, "
        f"the first {', '.join(warning.first_rows)}"
        for warning in summary.label_warnings
    ]
    lines += _label_id_lines(summary)
    annotated = collections.Counter()
    for stats in summary.splits.values():
        annotated.update(stats.annotations)
    if annotated:
        lines.append(
            "examples with "
            + ", ".join(
                f"{name} {annotated[kind]}"
                for kind, name in ANNOTATION_NAMES.items()
                if annotated[kind]
            )
        )
    if summary.objects_left_out:
        lines.append(
            "objects left out (shapes the examples cannot hold; their images are "
            "written with their other objects): "
            + ", ".join(f"{shape} {count}" for shape, count in summary.objects_left_out.items())
        )
    if summary.objects_clipped:
        lines.append(
            f"objects clipped to the image (their corners reached outside it, as "
            f"Ultralytics and the Object Detection API clip them): {summary.objects_clipped}"
        )
    if summary.options.leave_out:
        lines.append(
            f"left out (--leave_out {summary.options.leave_out}): the examples hold "
            "the boxes without the input's "
            + " or ".join(name.strip() for name in summary.options.leave_out.split(","))
        )
    if summary.resumed_shards:
        shards = sum(len(stats.shards) for stats in summary.splits.values())
        lines.append(
            f"resumed: {summary.resumed_shards} of {counted(shards, 'shard')} reused "
            "from the stopped run, their images not read again"
        )
    if summary.reused_from:
        lines.append(
            f"reused: {summary.examples_reused} of {counted(summary.examples_written, 'example')}"
            f" copied from {summary.reused_from}, their images unchanged and not read again"
        )
    if summary.changes:
        lines.append(f"changed since {summary.reused_from}:")
        lines += [f"  {line}" for line in summary.changes.lines()]
    if published and REPORT_FILE in summary.files:
        lines.append(
            f"report: {output_dir.rstrip('/')}/{REPORT_FILE} (plots, a sample of "
            "each label, dead letters and copies side by side)"
        )
    images_per_second = summary.examples_written / wall_seconds if wall_seconds else 0.0
    lines.append(f"wall {wall_seconds:.1f} s, {images_per_second:.1f} images/s")
    return "\n".join(lines)


def _few_per_shard_line(split: str, stats: SplitInfo) -> str:
    """The warning for a split sharded too finely, with a --num_shards that is not."""
    shards = len(stats.shards)
    enough = max(1, stats.examples // MIN_EXAMPLES_PER_SHARD)
    return (
        f"warning: {split}'s {shards} shards hold {stats.examples / shards:.1f} examples "
        f"each on average: readers open a file for every few; --num_shards {enough} "
        f"or fewer gives {MIN_EXAMPLES_PER_SHARD} or more a shard"
    )


def _discarded(summary: Summary) -> str:
    """What the discarded rows were: DISCARD rows, objects left out, or both."""
    objects = sum(summary.objects_left_out.values())
    if not objects:
        return "DISCARD"
    others = summary.rows_discarded - objects
    return (f"{others} DISCARD, " if others else "") + (f"{counted(objects, 'object')} left out")


def _compared_with(summary: Summary) -> str:
    """The output whose ids a run's were compared with (pipeline/run.py), in words."""
    reuse_from = getattr(summary.options, "reuse_from", None)  # absent: an older summary
    return f"was built from ({reuse_from})" if reuse_from else "replaced"


def _label_id_lines(summary: Summary) -> list[str]:
    """What a user must know of the ids: those that changed from the replaced output's,
    labels that got an id without a TRAIN example, a frequency order the examples do not
    follow."""
    lines = []
    if summary.label_id_changes:
        lines.append(
            f"warning: label ids differ from the output this run {_compared_with(summary)}: "
            + ", ".join(
                f"{_shown(change.label)} {'new' if change.old_id is None else change.old_id} -> "
                f"{'gone' if change.new_id is None else change.new_id}"
                for change in summary.label_id_changes
            )
        )
    if summary.unwritten_labels:
        lines.append(
            "warning: labels without a written TRAIN example (their TRAIN rows "
            "are dead letters) keep their sorted ids: "
            + ", ".join(map(_shown, summary.unwritten_labels))
        )
    if summary.frequency_order_of_examples:
        lines.append(
            "warning: --label_order frequency counted the TRAIN rows read; the "
            "written TRAIN examples order the labels "
            + ", ".join(map(_shown, summary.frequency_order_of_examples))
            + " (the ids follow the rows read: --label_order sorted or "
            "--vocabulary keeps them stable)"
        )
    return lines


def _copies_line(heading: str, copies: CopiesInfo, dropped_by: str) -> str:
    """Copies by "kept split/copy split"; a pair of two splits is a leak (a TEST image
    also in TRAIN inflates the test score)."""
    pairs = ", ".join(
        f"{pair} {count}" + (" (leak)" if len(set(pair.split("/"))) > 1 else "")
        for pair, count in copies.by_splits.items()
    )
    dropped = f"; the copies dropped ({dropped_by})" if copies.dropped else ""
    return f"{heading}: {pairs}{dropped}  ({', '.join(copies.files)})"


def _split_groups_lines(groups: SplitGroups | None) -> list[str]:
    """What --split_by groups kept together, how close the split came to the asked
    fractions, and what it could not do."""
    if groups is None:
        return []
    fractions = ", ".join(
        f"{split} {groups.fractions[split]:.1%} (asked {groups.fractions_asked[split]:.0%})"
        for split in groups.fractions
    )
    lines = [
        f"split by groups: {counted(groups.groups_kept_together, 'group')} of copies kept "
        f"together ({groups.images_in_groups} of {groups.images} images, the largest "
        f"{groups.largest_group}); {fractions}"
    ]
    if groups.moved:
        moved = ", ".join(
            f"{row.uri} {row.was}->{row.now}"
            + (f" (joined by {row.joined_by})" if row.joined_by else "")
            for row in groups.moved_listed[:3]
        )
        lines.append(
            f"split by groups: {counted(groups.moved, 'image')} moved split since the earlier "
            f"output, their group now in one split: {moved}" + (", ..." if groups.moved > 3 else "")
        )
    lines += [f"warning: {problem}" for problem in groups.problems]
    return lines
