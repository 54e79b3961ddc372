"""--vocabulary: label ids the user pins, read before the job and written for tf.Transform.

Kept apart from labels.py so the launcher reads it without loading TensorFlow.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from apache_beam.io.filesystems import FileSystems

LABEL_VOCABULARY = "label"  # file name of the vocabulary under transform_fn/assets/
# Where an earlier output keeps its label vocabulary (tft.TFTransformOutput's layout).
_EARLIER_OUTPUT_VOCABULARY = f"transform_fn/assets/{LABEL_VOCABULARY}"
# The first line of an Object Detection API label map's entry: `item {`.
_LABEL_MAP_ITEM = re.compile(r"item\s*\{")


class VocabularyError(ValueError):
    """A --vocabulary that cannot be used: missing, empty, an empty or repeated line."""


class PinnedVocabulary(NamedTuple):
    """The label ids the user fixed: `labels[i]` gets id i."""

    source: str  # the file read: the one given, or an earlier output's vocabulary
    labels: tuple[str, ...]


def read_pinned_vocabulary(given: str) -> PinnedVocabulary:
    """--vocabulary FILE (one label per line, ids in line order) or OUTPUT_DIR (an earlier
    image-tfrecords output, whose transform_fn/assets/label holds its ids).

    Raises VocabularyError naming the line of an empty or repeated label: either would
    make the ids differ from the line numbers the user reads.
    """
    earlier = FileSystems.join(given, _EARLIER_OUTPUT_VOCABULARY)
    source = earlier if FileSystems.exists(earlier) else given
    try:
        with FileSystems.open(source) as file:
            text = file.read().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise VocabularyError(f"--vocabulary {source}: not UTF-8 text ({error})") from error
    except Exception as error:  # each filesystem's own "not found"
        raise VocabularyError(f"--vocabulary {given}: neither a file of labels nor an "
                              f"image-tfrecords output ({earlier} not found)") from error
    first_line: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        label = line.strip()  # as manifest labels are
        if _LABEL_MAP_ITEM.match(label):
            # Read line by line, it would pin "item {", "id: 1"...: every row unseen.
            raise VocabularyError(
                f"--vocabulary {source}: line {number} starts an Object Detection API "
                "label map entry (item { id: ... name: ... }), which --vocabulary does not "
                "read yet; give the names one a line, in id order (line 1 is detection "
                "id 1, classification id 0)")
        if not label:
            raise VocabularyError(f"--vocabulary {source}: line {number} is empty")
        if label in first_line:
            raise VocabularyError(f"--vocabulary {source}: line {number}: {label!r} "
                                  f"repeats line {first_line[label]}")
        first_line[label] = number
    if not first_line:
        raise VocabularyError(f"--vocabulary {source}: no labels in it")
    return PinnedVocabulary(source, tuple(first_line))


def write_pinned_vocabulary(vocabulary: PinnedVocabulary, folder: str) -> str:
    """Writes the pinned labels where tf.Transform reads them; returns the file's path.

    The file is named LABEL_VOCABULARY because the SavedModel keeps an asset's name, and
    readers look the vocabulary up by that name (TFTransformOutput.vocabulary_by_name).
    """
    path = FileSystems.join(folder, LABEL_VOCABULARY)
    with FileSystems.create(path) as out:
        out.write("".join(f"{label}\n" for label in vocabulary.labels).encode())
    return path
