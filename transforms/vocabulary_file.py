"""--vocabulary: label ids the user pins, read before the job and written for tf.Transform.

Three kinds of file: one label per line (line 1 is id 0), an Object Detection API label
map (label_map.pbtxt: each item's id as given, so detection's image/object/class/label is
that id and classification's label id - 1), or an earlier output (its vocabulary). Kept
apart from labels.py so the launcher reads it without loading TensorFlow.
"""

import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

from apache_beam.io.filesystems import FileSystems

from image_tfrecords.core.records.label_map import (
    LabelMapError,
    is_gap,
    read_label_map,
    vocabulary_of,
)
from image_tfrecords.core.records.naming import LABEL_VOCABULARY, PUBLISHED_LABEL_VOCABULARY
from image_tfrecords.core.records.text_limits import file_lines, line_break_in

# Where an earlier output keeps its label vocabulary (tft.TFTransformOutput's layout).
# How a label map starts, after comments: its first entry, `item {` (or `item: {`).
_LABEL_MAP = re.compile(r"\A(?:\s*#[^\n]*\n)*\s*item\s*:?\s*\{")


class VocabularyError(ValueError):
    """A --vocabulary that cannot be used: missing, empty, an empty or repeated line."""


class PinnedVocabulary(NamedTuple):
    """The label ids the user fixed, or the input declared: `labels[i]` gets id i."""

    source: str  # the file read (the one given, or an earlier output's vocabulary), or
    # with `declared` what declares the classes (DeclaredClasses.declared_by)
    labels: tuple[str, ...]
    declared: bool = False  # the input's own classes, not a --vocabulary

    @property
    def classes(self) -> int:
        """How many classes it holds: its labels less the gaps of skipped ids."""
        return sum(not is_gap(label) for label in self.labels)

    def described(self) -> str:
        """What the console and messages call it."""
        if self.declared:
            return f"the {self.classes} classes declared by {self.source}"
        return f"the pinned vocabulary {self.source}"

    def unseen_where(self) -> str:
        """Where a label that is none of the vocabulary's is said to be missing from."""
        return f"is {'not among' if self.declared else 'not in'} {self.described()}"


def read_pinned_vocabulary(
    given: str, labels_in_data: Callable[[], Iterable[str]] = tuple
) -> PinnedVocabulary:
    """--vocabulary FILE (one label per line, ids in line order; or a label map) or
    OUTPUT_DIR (an earlier image-tfrecords output, whose transform_fn/assets/label holds
    its ids). `labels_in_data`: some labels of the input, asked for only to tell whether
    a label map's names or its display names are what the data calls its classes.

    Raises VocabularyError naming the line of an empty or repeated label (either would
    make the ids differ from the line numbers the user reads), or what is wrong with a
    label map.
    """
    earlier = FileSystems.join(given, PUBLISHED_LABEL_VOCABULARY)
    source = earlier if FileSystems.exists(earlier) else given
    try:
        with FileSystems.open(source) as file:
            text = file.read().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise VocabularyError(f"--vocabulary {source}: not UTF-8 text ({error})") from error
    except Exception as error:  # each filesystem's own "not found"
        raise VocabularyError(
            f"--vocabulary {given}: neither a file of labels nor an "
            f"image-tfrecords output ({earlier} not found)"
        ) from error
    if _LABEL_MAP.match(text):
        try:
            return PinnedVocabulary(source, _label_map_vocabulary(text, labels_in_data))
        except LabelMapError as problem:
            raise VocabularyError(f"--vocabulary {source}: {problem}") from None
    first_line: dict[str, int] = {}
    for number, line in enumerate(file_lines(text), start=1):
        label = line.strip()  # as manifest labels are
        if not label:
            raise VocabularyError(f"--vocabulary {source}: line {number} is empty")
        if breaking := line_break_in(label):
            raise VocabularyError(
                f"--vocabulary {source}: line {number}: {label!r} holds "
                f"{breaking}, which no label can hold (rows with it are "
                "dead letters)"
            )
        if label in first_line:
            raise VocabularyError(
                f"--vocabulary {source}: line {number}: {label!r} repeats line {first_line[label]}"
            )
        first_line[label] = number
    if not first_line:
        raise VocabularyError(f"--vocabulary {source}: no labels in it")
    return PinnedVocabulary(source, tuple(first_line))


def output_labels(output_dir: str) -> tuple[str, ...] | None:
    """The label vocabulary of the image-tfrecords output in `output_dir` (line i: id i),
    read as the lookup reads it (core/worker/label_ids.py); None where there is none."""
    path = FileSystems.join(output_dir, PUBLISHED_LABEL_VOCABULARY)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as file:
        return tuple(file_lines(file.read().decode()))


def _label_map_vocabulary(
    text: str, labels_in_data: Callable[[], Iterable[str]]
) -> tuple[str, ...]:
    """The label map's vocabulary: its names, or, where every item has a display name,
    whichever of the two the data's labels match more often (the API's use_display_name:
    its COCO map's names are Freebase ids, its Open Images map's are what the Open Images
    CSVs hold). A label that is one item's name and another's display name is refused."""
    items = read_label_map(text)
    if not all(item.display_name for item in items):
        return vocabulary_of(items, "name")
    labels = set(labels_in_data())
    ids = {
        field: {getattr(item, field): item.id for item in items}
        for field in ("name", "display_name")
    }
    for label in sorted(labels):
        named, displayed = ids["name"].get(label), ids["display_name"].get(label)
        if None not in (named, displayed) and named != displayed:
            raise LabelMapError(
                f"the label {label!r} is the name of id {named} and the "
                f"display_name of id {displayed}: which it means is unclear"
            )
    matched = {field: len(labels & values.keys()) for field, values in ids.items()}
    if matched["name"] != matched["display_name"]:
        return vocabulary_of(items, max(matched, key=matched.__getitem__))
    try:  # the data says nothing: the names, unless they cannot be told apart
        return vocabulary_of(items, "name")
    except LabelMapError:
        return vocabulary_of(items, "display_name")


def write_pinned_vocabulary(vocabulary: PinnedVocabulary, folder: str) -> str:
    """Writes the pinned labels where tf.Transform reads them; returns the file's path.

    The file is named LABEL_VOCABULARY because the SavedModel keeps an asset's name, and
    readers look the vocabulary up by that name (TFTransformOutput.vocabulary_by_name).
    """
    path = FileSystems.join(folder, LABEL_VOCABULARY)
    with FileSystems.create(path) as out:
        out.write("".join(f"{label}\n" for label in vocabulary.labels).encode())
    return path
