"""keras-retinanet's CSV (Roboflow's "RetinaNet Keras CSV" export: `_annotations.csv` in each
split's folder, `_classes.csv` beside it): no header, a line per object,

    path/to/image.jpg,x1,y1,x2,y2,class_name

the corners in pixels of the image, whose size the file does not declare (the shard writer
divides them by the image's own); `path/to/image.jpg,,,,,` is an image without objects.
Read as keras-retinanet's CSVGenerator reads it: paths relative to the CSV's folder (or
--image_dir), and inside it. The class file (`classes.csv`, or Roboflow's `_classes.csv`,
beside the CSV; `class_name,id` a line) declares the classes with their ids. The split is
the CSV's folder where it names one (Roboflow's `train/`, `valid/`, `test/`), else
--manifest SPLIT=PATH or a hashed one.
"""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Iterator

from image_tfrecords.core.inputs.boxes import box_row
from image_tfrecords.core.inputs.dataset_root import DatasetRoot, quoted
from image_tfrecords.core.inputs.input_format import DeclaredClasses, FileHead, InputFormat
from image_tfrecords.core.inputs.lines import LongLine, numbered_lines, whole_lines
from image_tfrecords.core.inputs.rows import (
    ManifestError,
    RowRules,
    assign_split,
    folder_split,
    printable,
    rejecter,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.label_map import LabelMapError, LabelMapItem, vocabulary_of
from image_tfrecords.core.records.records import Box, ManifestRow
from image_tfrecords.core.storage import storage

_CLASS_FILES = ("classes.csv", "_classes.csv")
_NUMBER = re.compile(r"\s*-?\d+(\.\d+)?\s*")
_FIELDS = 6


def is_retinanet_row(fields: list[str]) -> bool:
    """path,x1,y1,x2,y2,class with four numbers, or path,,,,, (an image without objects)."""
    if len(fields) != _FIELDS or not fields[0].strip():
        return False
    corners = fields[1:5]
    return (all(map(_NUMBER.fullmatch, corners)) and bool(fields[5].strip())) or not any(
        field.strip() for field in fields[1:]
    )


def read_retinanet(
    path: str, rules: RowRules, split: str | None
) -> Iterator[ManifestRow | DeadLetter]:
    root = DatasetRoot.of(path, rules)
    split = split or folder_split(path)
    for line, raw in numbered_lines(path):
        if isinstance(raw, LongLine):
            yield raw.dead_letter(path, line, split or "")
            continue
        reject = rejecter(path, line, raw)
        fields = next(csv.reader([raw]), [])
        if not is_retinanet_row(fields):
            yield reject(
                reasons.WRONG_COLUMN_COUNT if len(fields) != _FIELDS else reasons.INVALID_BOX,
                "expected path,x1,y1,x2,y2,class_name (pixels) or path,,,,, (no objects), "
                f"found {len(fields)} fields",
                split=split or "",
            )
            continue
        written = fields[0].strip()
        uri = root.resolve(written)
        image = ManifestRow(
            path,
            line,
            printable(raw),
            split or assign_split(written, rules.split_fractions),
            uri,
            (),
            boxes_in_pixels=True,
        )
        if outside := root.outside(uri, f"image {quoted(written)}"):
            yield image.dead_letter(*outside)
            continue
        if not fields[5].strip():
            yield image  # an image without objects
            continue
        corners = tuple(float(value) for value in fields[1:5])
        yield box_row(
            image,
            fields[5].strip(),
            True,
            functools.partial(_pixel_corners, corners),
            functools.partial(_reject, image),
        )


def _pixel_corners(corners: tuple[float, ...]) -> Box | tuple[str, str]:
    """The Box of pixel corners, checked against the image's own size by the shard writer."""
    xmin, ymin, xmax, ymax = corners
    if xmin < 0 or ymin < 0:
        return reasons.BOX_OUT_OF_RANGE, f"corners {corners} start outside the image"
    if xmax <= xmin or ymax <= ymin:
        return reasons.EMPTY_BOX, f"x1 must be below x2 and y1 below y2: {corners}"
    return Box(*corners)


def _reject(image: ManifestRow, reason: str, message: str, **_: str) -> DeadLetter:
    return image.dead_letter(reason, message)


def declared_classes(path: str) -> DeclaredClasses | None:
    """The class file beside the CSV: `class_name,id` lines, id i the vocabulary's entry i
    (a gap entry where ids skip one). None where there is none; ManifestError for a line
    that is not one or an id twice."""
    folder = storage.split(path)[0]
    found = next(
        (
            storage.join(folder, name)
            for name in _CLASS_FILES
            if storage.exists(storage.join(folder, name))
        ),
        None,
    )
    if found is None:
        return None
    items = []
    for line, raw in whole_lines(found):
        fields = next(csv.reader([raw]), [])
        if len(fields) != 2 or not fields[1].strip().isdigit() or not fields[0].strip():
            raise ManifestError(f"{found} line {line}: expected class_name,id, found {raw!r}")
        items.append(LabelMapItem(int(fields[1]) + 1, fields[0].strip(), ""))
    try:  # id i is entry i: the label map's item i + 1
        return DeclaredClasses(found, vocabulary_of(items, "name")) if items else None
    except LabelMapError as error:
        raise ManifestError(f"{found}: {error}") from None


class RetinaNetCsvFormat(InputFormat):
    name = "retinanet_csv"
    title = "a keras-retinanet CSV (path,x1,y1,x2,y2,class_name)"
    suffixes = (".csv",)
    boxes_only = True

    def recognises(self, head: FileHead) -> bool:
        """Its first lines (up to five) are all path,x1,y1,x2,y2,class or path,,,,,."""
        lines = [line for line in head.data.decode("utf-8", "replace").splitlines() if line.strip()]
        rows = list(csv.reader(lines[:5]))
        return bool(rows) and all(map(is_retinanet_row, rows))

    def declared_classes(self, source: ManifestSource) -> DeclaredClasses | None:
        return declared_classes(source.path)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return read_retinanet(source.path, rules, source.split)
