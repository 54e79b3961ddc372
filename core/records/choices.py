"""The choices a conversion makes, as enums whose members equal, and print as, the values
the command line takes, so summary.json and messages show them as the user wrote them.

Free of Beam and TensorFlow: run_settings.py builds on them, and summary.json's readers
(which import no Beam) read them.
"""

from __future__ import annotations

import enum

# What joins several labels in one field (multi) when neither --label_separator nor the
# data says otherwise (pipeline/read_choices.py).
DEFAULT_LABEL_SEPARATOR = "|"


class _Choice(enum.StrEnum):
    """A command-line choice: equal to its value, and formatted as it."""

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)


class LabelMode(_Choice):
    """--label_mode: what a row labels."""

    SINGLE = "single"  # one label per image
    MULTI = "multi"  # every label of an image, as a list
    DETECTION = "detection"  # boxes, a label each


class UnseenLabel(_Choice):
    """--unseen_label: a VALIDATION/TEST label that TRAIN never saw."""

    ERROR = "error"  # dead-letters its row
    OOV = "oov"  # keeps it, with the id len(vocabulary)


class LabelOrder(_Choice):
    """--label_order: the ids of labels learnt from TRAIN (not pinned by --vocabulary)."""

    # By the label's text: Python's string order, which is the order of the UTF-8 bytes
    # (UTF-8 keeps code point order), as Keras' image_dataset_from_directory, torchvision's
    # ImageFolder and TFDS's ImageFolder sort class names. The ids depend only on the set.
    SORTED = "sorted"
    # TFRecorder's: the most frequent TRAIN label first, ties by descending bytes (the
    # order of tf.Transform's vocabulary).
    FREQUENCY = "frequency"


class LeftOut(_Choice):
    """--leave_out: what an input holds that the examples are written without."""

    MASKS = "masks"  # instance masks: polygons, RLE, YOLO segmentation and OBB corners
    KEYPOINTS = "keypoints"
    SEGMENTATION = "segmentation"  # semantic segmentation maps (VOC's SegmentationClass)


class Dedupe(_Choice):
    """--dedupe: which copies of an image are written only once."""

    NONE = "none"  # copies are reported, all written
    SHA256 = "sha256"  # byte-identical copies are dropped
    NEAR = "near"  # near-copies too
