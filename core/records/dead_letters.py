"""Rows that could not become an example, kept with the reason so nothing is lost."""

from __future__ import annotations

import json
from typing import NamedTuple

from image_tfrecords.core.records.text_limits import (
    EXCERPT_CHARS,
    MAX_LABEL_CHARS,
    MAX_LABELS_PER_ROW,
    MAX_LINE_BYTES,
    kept,
)
from image_tfrecords.core.storage.redaction import redact_urls, redacted

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
# An annotation file's image or label path that leaves its dataset's folder
# (core/inputs/dataset_root.py).
PATH_OUTSIDE_DATASET = "path_outside_dataset"
# Text over core/records/text_limits.py's limits, and labels no vocabulary file can hold.
TEXT_TOO_LONG = "text_too_long"
TOO_MANY_LABELS = "too_many_labels"
LABEL_BREAKS_LINES = "label_breaks_lines"
# More pixels than --max_image_pixels: an image's (core/imaging/images.py), or a declared size.
DECOMPRESSION_BOMB = "decompression_bomb"

# Every reason a dead letter can give, with what it means: the row reasons above, the image
# reasons of core/imaging/images.py's REASONS and the image folder's of core/inputs/folder.py.
# docs/reference/dead-letters.md is generated from it (docs/gen_reference.py), and
# tests/test_docs.py checks that every reason the code can emit is here, and no other.
HTTP_STATUS = "http_<status>"  # http_404, http_503...: the pattern of core/imaging/images.py
REGISTRY: dict[str, str] = {
    # A row, line or annotation as read, before any image is.
    MALFORMED_ROW: "the row, line or object cannot be parsed: not CSV (a field over 131,072 "
    "characters), not a JSON object, a field that is not a number",
    WRONG_COLUMN_COUNT: "the row has more or fewer fields than its layout",
    INVALID_ENCODING: "the row or line is not valid UTF-8",
    TEXT_TOO_LONG: f"a line over {MAX_LINE_BYTES >> 20} MiB, or a label over "
    f"{MAX_LABEL_CHARS:,} characters; the dead letter keeps its first "
    f"{EXCERPT_CHARS} characters and its length",
    MISSING_URI: "the image URI or file name is empty or missing",
    MISSING_LABEL: "the label (or a box's label) is empty or missing",
    INVALID_SPLIT: "the split is not train (training), validation (val, valid, eval, dev), "
    "test (testing), each also with _set after it, UNASSIGNED, DISCARD or "
    "empty, or disagrees with the SPLIT= of its --manifest",
    MULTIPLE_LABELS: "several labels where --label_mode single takes one",
    TOO_MANY_LABELS: f"more than {MAX_LABELS_PER_ROW:,} labels in one row (--label_mode multi)",
    LABEL_BREAKS_LINES: "a label holding a character that breaks lines (U+2028, \\v, "
    "\\x1c...: any str.splitlines splits on), which the vocabulary file, "
    "a label a line, cannot hold; the message names it",
    UNSUPPORTED_ANNOTATION: "an annotation of a kind this label mode or format does not "
    "write (a shape of a kind its reader does not name, video tracks...)",
    PATH_OUTSIDE_DATASET: "an annotation file's image (or label file) outside its dataset's "
    "folder (--image_dir, else the file's own): an absolute path, "
    "'..', another bucket or a URL, a link leading out; "
    "--allow_paths_outside_dataset reads it",
    INVALID_ANNOTATION: "an annotation file that cannot be read (a VOC XML or LabelMe JSON "
    "that does not parse, a VOC XML without <filename> or <size>)",
    # Boxes, masks and keypoints (--label_mode detection).
    INVALID_BOX: "box coordinates that are not numbers, or neither two nor four vertices",
    BOX_OUT_OF_RANGE: "a box outside the image: a relative coordinate outside [0, 1], or pixels "
    "outside the declared size",
    EMPTY_BOX: "a box with no width or no height (a minimum not below its maximum)",
    INVALID_SIZE: "a declared image width or height that is not a positive whole number",
    SIZE_MISMATCH: "the size an annotation declares (or a mask's or segmentation map's) is "
    "not the image's own, or a mask region (CVAT's, LabelMe's) is larger "
    "than the image",
    UNKNOWN_IMAGE_ID: "a COCO annotation whose image_id names no image",
    UNKNOWN_CATEGORY_ID: (
        "a COCO category_id, YOLO class or Open Images LabelName that names no category"
    ),
    INVALID_MASK: "a polygon of fewer than 3 points, an RLE that is not one, a mask or "
    "segmentation map that cannot be read as class indices, or polygons "
    "farther outside the image than its side, or together longer than 100 "
    "of its sides",
    INVALID_KEYPOINTS: "keypoints that are not whole points, a visibility not 0, 1 or 2, "
    "a point outside the image, or more than 1,000 of them; or an image whose objects "
    "x the most keypoints any has are over 100,000",
    # Labels and --schema columns, against the vocabulary.
    UNSEEN_LABEL: "a label outside the vocabulary (TRAIN's, or the pinned --vocabulary); "
    "--unseen_label oov keeps it instead",
    INVALID_VALUE: "a --schema column's value that is not of its type, or an empty "
    "non-string value",
    UNSEEN_CATEGORY: "a categorical --schema value TRAIN never saw; --unseen_label oov "
    "keeps it instead",
    # Repeats.
    DUPLICATE_ROW: "the same image again in the same split (single labels, or a second "
    "annotation file naming it); the first row makes the example",
    DUPLICATE_IMAGE: "--dedupe: a byte-identical copy of an image that is kept",
    NEAR_DUPLICATE_IMAGE: "--dedupe near: a near-copy (pHash within "
    "--near_duplicate_distance bits) of an image that is kept",
    # An image folder's layout (--image_folder).
    "not_in_label_folder": "a file directly in the root, directly in a split folder, or "
    "deeper than the layout",
    "not_in_split_folder": "with split folders present, a file under a top-level folder "
    "that is no split",
    "label_is_split_name": "a file in a label folder named like a split (train/val/x.jpg)",
    # The image file, read by the shard writer.
    "file_not_found": "the URI names no file (a bucket's 404 included; a URL's is http_404)",
    "read_error": "a directory, no permission, or the storage failed after its retries",
    "not_a_file": "a FIFO, a device or a socket: never read (its read could wait or run for ever)",
    "empty_file": "the file has zero bytes",
    "not_an_image": "not in a format the converter reads (JPEG, PNG, GIF, BMP, TIFF, WebP): "
    "other formats, EPS included, are never opened",
    "truncated_image": "the data ends before the image does",
    DECOMPRESSION_BOMB: "more pixels than --max_image_pixels (the image's, or the size an "
    "annotation declares for it), refused before any pixel is allocated",
    "decode_error": "recognised but undecodable: corrupt data, an unsupported variant",
    "encode_error": "decoded, but converting or re-encoding it failed",
    "decode_crash": "the worker process died decoding it (a crash, the OOM killer)",
    "decode_timeout": "reading (a local file) and decoding took longer than --decode_timeout "
    "seconds",
    # An image URL (http://, https://), downloaded by the shard writer.
    HTTP_STATUS: "the server answered this HTTP error status (after the retries for 5xx and "
    "429; a 4xx is not retried), or a redirect (3xx) that is not followed: to "
    "another scheme, host or port, or more in a row than are followed",
    "http_timeout": "no answer, or a stalled body, within --download_timeout, after the "
    "retries; or a body still arriving 3 x --download_timeout after its "
    "try began",
    "connection_error": "the connection was refused, reset or cut, after the retries",
    "too_large": "the file (a URL's body, a bucket's object, a local file) is larger than "
    "--max_download_mb",
}


class _DeadLetterFields(NamedTuple):
    manifest: str
    line: int
    raw: str
    uri: str
    split: str
    reason: str
    message: str


class DeadLetter(_DeadLetterFields):
    """One rejected manifest row, written as one line of OUTPUT/errors-*.jsonl.

    Made with its URLs redacted (core/storage/redaction.py), in the URI, the raw line and the
    message alike: wherever a dead letter goes (the errors files, receipts, report.html,
    the console), no credential of an image URL goes with it. Its row text and message
    are bounded (text_limits.kept): whatever a reader copies into them, an over-long one
    is kept as its excerpt.
    """

    __slots__ = ()

    def __new__(
        cls, manifest: str, line: int, raw: str, uri: str, split: str, reason: str, message: str
    ) -> DeadLetter:
        return super().__new__(
            cls,
            manifest,
            line,
            kept(redact_urls(raw)),
            redacted(uri),
            split,
            reason,
            kept(redact_urls(message)),
        )

    @classmethod
    def in_file(
        cls,
        path: str,
        reason: str,
        message: str,
        *,
        position: int = 0,
        raw: str = "",
        uri: str = "",
        split: str = "",
    ) -> DeadLetter:
        """A dead letter of an annotation file (`path`), or of the entry at `position` in
        it (a task, an image element, a list line: `raw` its text), about the image `uri`
        where one is named."""
        return cls(path, position, raw, uri, split, reason, message)

    def to_json(self) -> str:
        return json.dumps(self._asdict(), ensure_ascii=False, sort_keys=True)
