"""Rows that could not become an example, kept with the reason so nothing is lost."""

from __future__ import annotations

import json
from typing import NamedTuple

# Reason codes a manifest row can be rejected with before any image is read.
MALFORMED_ROW = "malformed_row"
WRONG_COLUMN_COUNT = "wrong_column_count"
INVALID_ENCODING = "invalid_encoding"
MISSING_URI = "missing_uri"
MISSING_LABEL = "missing_label"
INVALID_SPLIT = "invalid_split"
UNSEEN_LABEL = "unseen_label"
MULTIPLE_LABELS = "multiple_labels"
UNSUPPORTED_ANNOTATION = "unsupported_annotation"
INVALID_BOX = "invalid_box"  # not numbers, or neither two nor four vertices
BOX_OUT_OF_RANGE = "box_out_of_range"  # a coordinate outside [0, 1]
EMPTY_BOX = "empty_box"  # x_min >= x_max or y_min >= y_max
INVALID_SIZE = "invalid_size"  # a declared image width or height is not a positive integer
SIZE_MISMATCH = "size_mismatch"  # the declared image size is not the image's own
UNKNOWN_IMAGE_ID = "unknown_image_id"  # a COCO annotation's image_id names no image
UNKNOWN_CATEGORY_ID = "unknown_category_id"  # a COCO annotation's category_id names none
# A polygon of fewer than 3 points, an RLE that is not one, a mask that cannot be read.
INVALID_MASK = "invalid_mask"
# Keypoints not a whole number of points, a visibility not 0, 1 or 2, or a point outside
# the image.
INVALID_KEYPOINTS = "invalid_keypoints"
INVALID_ANNOTATION = "invalid_annotation"  # an annotation file (VOC XML) that cannot be read
INVALID_VALUE = "invalid_value"  # an extra (--schema) column's value is not of its type
UNSEEN_CATEGORY = "unseen_category"  # a categorical value TRAIN never saw
DUPLICATE_ROW = "duplicate_row"  # single labels: the image is in the split already
DUPLICATE_IMAGE = "duplicate_image"  # --dedupe: a byte-identical image is kept
NEAR_DUPLICATE_IMAGE = "near_duplicate_image"  # --dedupe near: a near-copy is kept


class DeadLetter(NamedTuple):
    """One rejected manifest row, written as one line of OUTPUT/errors-*.jsonl."""

    manifest: str
    line: int
    raw: str
    uri: str
    split: str
    reason: str
    message: str

    def to_json(self) -> str:
        return json.dumps(self._asdict(), ensure_ascii=False, sort_keys=True)
