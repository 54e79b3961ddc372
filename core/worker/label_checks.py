"""Labels that are probably a mistake in the manifest, found on every row's labels.

Each is a common one in real manifests, and none stops a run by itself (each can be
meant): the console and report.html say them, with the first rows that carry them, and
summary.json keeps them; --strict_labels makes them errors (transforms/outcome.py).

- the multi-label separator inside a label in single-label mode (`red|blue` becomes a
  class of its own);
- labels that differ only in case or surrounding spaces (`Red`, `red `): as many classes;
- labels that are all whole numbers, whose ids are not those numbers (ids follow the
  labels' order as text, or their TRAIN frequency: the text `10` may get id 1).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.records.summary import LabelWarning

FIRST_ROWS = 3  # rows named per label
MOST_WARNINGS = 20  # summary.json and the console stay short on a manifest full of them


class LabelSeen(NamedTuple):
    """The rows (of any split) that carry one label: how many, and the first few as
    `manifest:line`, the way dead letters name them."""

    rows: int
    first_rows: tuple[str, ...]

    def merged(self, other: LabelSeen) -> LabelSeen:
        return LabelSeen(
            self.rows + other.rows,
            tuple(sorted({*self.first_rows, *other.first_rows}, key=_row_order))[:FIRST_ROWS],
        )


def merge_seen(seen: Sequence[LabelSeen]) -> LabelSeen:
    """Beam's combine of one label's LabelSeen from every chunk."""
    merged = LabelSeen(0, ())
    for each in seen:
        merged = merged.merged(each)
    return merged


def label_warnings(
    seen: Mapping[str, LabelSeen],
    vocabulary: Sequence[str],
    label_mode: LabelMode,
    separator: str,
    ids_pinned: bool = False,
) -> tuple[LabelWarning, ...]:
    """The warnings for the labels `seen` on the rows; `vocabulary` gives their ids, which
    `ids_pinned` (--vocabulary, or the classes the input declares) says were not learnt,
    so that numbers whose ids differ from them are what was asked for."""
    warnings = []
    if label_mode is LabelMode.SINGLE:
        warnings += [
            _warning(
                "separator",
                [label],
                seen,
                f"label {label!r} holds the multi-label separator {separator!r}: "
                "in single-label mode it is one class of its own (give "
                "--label_mode multi if a row may carry several labels)",
            )
            for label in sorted(seen)
            if separator in label
        ]
    variants = collections.defaultdict(list)
    for label in seen:
        variants[label.strip().casefold()].append(label)
    warnings += [
        _warning(
            "variants",
            sorted(group),
            seen,
            f"labels {', '.join(map(repr, sorted(group)))} differ only in case or "
            f"surrounding spaces: they are {len(group)} classes",
        )
        for _, group in sorted(variants.items())
        if len(group) > 1
    ]
    first_id = 1 if label_mode is LabelMode.DETECTION else 0
    ids = {label: position + first_id for position, label in enumerate(vocabulary)}
    numbers = [label for label in seen if label in ids]
    if numbers and not ids_pinned and all(_is_whole_number(label) for label in numbers):
        wrong = [label for label in sorted(numbers, key=int) if ids[label] != int(label)]
        if wrong:
            warnings.append(
                _warning(
                    "numeric",
                    wrong,
                    seen,
                    "the labels are numbers, but their ids are not those numbers: "
                    + ", ".join(f"{label!r} has id {ids[label]}" for label in wrong[:5])
                    + (", ..." if len(wrong) > 5 else "")
                    + "; to keep the numbers as ids, pin them with --vocabulary (a file of the "
                    "labels in id order)",
                )
            )
    return tuple(warnings[:MOST_WARNINGS])


def _warning(
    kind: str, labels: list[str], seen: Mapping[str, LabelSeen], message: str
) -> LabelWarning:
    rows = sorted({row for label in labels for row in seen[label].first_rows}, key=_row_order)[
        :FIRST_ROWS
    ]
    return LabelWarning(
        kind=kind,
        message=message,
        labels=tuple(labels),
        rows=sum(seen[label].rows for label in labels),
        first_rows=tuple(rows),
    )


def _is_whole_number(label: str) -> bool:
    return label.isascii() and label.isdigit()


def _row_order(row: str) -> tuple[str, int]:
    manifest, _, line = row.rpartition(":")
    return manifest, int(line) if line.isdigit() else 0
