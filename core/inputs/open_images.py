"""Open Images box annotations: `oidv6-train-annotations-bbox.csv`,
`validation-annotations-bbox.csv`, `test-annotations-bbox.csv` (v4 to v7), a row per box:

    ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,IsGroupOf,IsDepiction,IsInside

Read as the Object Detection API's create_oid_tf_record.py and oid_tfrecord_creation.py
read it: the rows of one ImageID are the objects of one example, its image
`<ImageID>.jpg`; the box is already relative to the image (XMin, YMin, XMax, YMax, in
that order); IsGroupOf is written as image/object/is_crowd (the script's `group_of`: a
box around several objects, as COCO's crowd) and IsTruncated as image/object/truncated.
Every box row is kept whatever its Confidence, as the script keeps it (Open Images'
human-verified boxes all have 1); a row without a box, which the script reads as an
image-level label, is a dead letter. Not kept: Source, Confidence, IsOccluded, IsDepiction
and IsInside (keys the shard writer has no place for). A header is recognised by its
ImageID, LabelName and box columns, so `--manifest train-annotations-bbox.csv` is enough.

The label is the class's DisplayName from the class descriptions file beside the CSV
(`oidv7-class-descriptions-boxable.csv`, `class-descriptions-boxable.csv`: `MID,name` per
line, a `LabelName,DisplayName` header in v7's), which also declares the classes and their
ids, in its order; a LabelName it does not list is a dead letter. Without that file the
label is the MID itself (`/m/011k07`), and the ids are the run's.
Images: --image_dir, else datumaro's layout (`ROOT/annotations/*.csv` beside
`ROOT/images/<split>/`), else the CSV's folder; an ImageID naming a file outside that
folder is path_outside_dataset (core/inputs/dataset_root.py). The split is the file
name's (`train`, `validation`, `test`), else --manifest SPLIT=PATH's or one from a hash of
the ImageID.
Read a line range at a time by worker processes: the rows of one image need not be
together, the shard writer gathers an image's objects.
"""

from __future__ import annotations

import csv
import logging
import re
from collections.abc import Iterator

from image_tfrecords.core.inputs.boxes import clipped_box
from image_tfrecords.core.inputs.dataset_root import DatasetRoot, quoted
from image_tfrecords.core.inputs.input_format import DeclaredClasses, FileHead, InputFormat
from image_tfrecords.core.inputs.lines import LongLine, numbered_lines, whole_lines
from image_tfrecords.core.inputs.rows import (
    ManifestError,
    RowRules,
    assign_split,
    has_undecodable_bytes,
    printable,
    rejecter,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import Box, ManifestRow
from image_tfrecords.core.records.splits import normalise_split
from image_tfrecords.core.storage import storage

_REQUIRED = ("ImageID", "LabelName", "XMin", "XMax", "YMin", "YMax")
_FLAGS = {"IsTruncated": "truncated", "IsGroupOf": "is_crowd"}  # Open Images' -> Box's
# The descriptions files Open Images publishes, the boxable classes' first.
_DESCRIPTIONS = ("*class-descriptions-boxable.csv", "*class-descriptions.csv")
_DESCRIPTIONS_HEADER = ["LabelName", "DisplayName"]
_SPLIT_IN_NAME = re.compile(r"(?:^|[-_])(train|validation|test)[-_]")


def is_open_images_header(line: str) -> bool:
    return set(_REQUIRED) <= set(_fields(line))


def _fields(line: str) -> list[str]:
    try:
        return [field.strip() for field in next(csv.reader([line]), [])]
    except csv.Error:
        return []


class ClassDescriptions:
    """The class descriptions file beside a box CSV: MID -> DisplayName, in its order."""

    def __init__(self, path: str, names: dict[str, str]) -> None:
        self.path = path
        self.names = names

    @classmethod
    def beside(cls, csv_path: str) -> ClassDescriptions | None:
        folder = storage.split(csv_path)[0]
        for pattern in _DESCRIPTIONS:
            found = sorted(
                metadata.path for metadata in storage.match(storage.join(folder, pattern))
            )
            if found:
                return cls.read(found[0])
        return None

    @classmethod
    def read(cls, path: str) -> ClassDescriptions:
        names: dict[str, str] = {}
        by_name: dict[str, str] = {}
        for line, raw in whole_lines(path):
            fields = _fields(raw)
            if line == 1 and fields == _DESCRIPTIONS_HEADER:
                continue
            if len(fields) != 2 or not all(fields):
                raise ManifestError(
                    f"{path} line {line}: expected MID,DisplayName, found {printable(raw)!r}"
                )
            mid, name = fields
            if mid in names or name in by_name:
                raise ManifestError(
                    f"{path} line {line}: {mid if mid in names else name!r} is listed twice "
                    f"(first for {by_name.get(name, mid)}): its labels would not name one "
                    "class each"
                )
            names[mid], by_name[name] = name, mid
        return cls(path, names)


def read_open_images(
    path: str, rules: RowRules, split: str | None, lines: LineRange | None = None
) -> Iterator[ManifestRow | DeadLetter]:
    """A row per box row of the CSV (or of its `lines`); a DeadLetter per row that
    cannot be one."""
    header = _header(path)
    descriptions = ClassDescriptions.beside(path)
    split = split or split_in_name(path)
    images = DatasetRoot(
        rules.image_dir or _image_folder(path, split), rules.allow_paths_outside_dataset
    )
    for line, raw in numbered_lines(path, lines):
        if isinstance(raw, LongLine):
            yield raw.dead_letter(path, line, split)
            continue
        if line == header[0]:
            continue
        yield _box_row(path, line, raw, header[1], descriptions, images, split, rules)


def split_in_name(path: str) -> str | None:
    """The split Open Images' file names say: `oidv6-train-...`, `validation-...`."""
    found = _SPLIT_IN_NAME.search(storage.split(path)[1].lower())
    return normalise_split(found.group(1)) if found else None


def _header(path: str) -> tuple[int, dict[str, int]]:
    """(its line, column name -> index) of the CSV's first line."""
    for line, raw in whole_lines(path):
        return line, {name: index for index, name in enumerate(_fields(raw))}
    raise ManifestError(f"{path} is empty")


def _image_folder(path: str, split: str | None) -> str:
    """datumaro's ROOT/images/<split> for a CSV in ROOT/annotations; the CSV's folder."""
    folder = storage.split(path)[0]
    root, name = storage.split(folder)
    if name == "annotations" and split:
        images = storage.join(root, "images", split)
        if storage.match(storage.join(images, "*"), limit=1):
            return images
    return folder


def _box_row(
    path: str,
    line: int,
    raw: str,
    columns: dict[str, int],
    descriptions: ClassDescriptions | None,
    images: DatasetRoot,
    split: str | None,
    rules: RowRules,
) -> ManifestRow | DeadLetter:
    reject = rejecter(path, line, raw)
    if has_undecodable_bytes(raw):
        return reject(reasons.INVALID_ENCODING, "the line is not valid UTF-8")
    fields = _fields(raw)
    if len(fields) != len(columns):
        return reject(
            reasons.WRONG_COLUMN_COUNT,
            f"expected {len(columns)} fields as the header names, found {len(fields)}",
        )
    value = dict(zip(columns, fields, strict=True))
    image_id = value["ImageID"]
    if not image_id:
        return reject(reasons.MISSING_URI, "ImageID is empty")
    image = ManifestRow(
        path,
        line,
        printable(raw),
        split or assign_split(image_id, rules.split_fractions),
        images.resolve(f"{image_id}.jpg"),
        (),
    )
    outside = images.outside(image.uri, f"ImageID {quoted(image_id)}")
    if outside:
        return image.dead_letter(*outside)
    mid = value["LabelName"]
    label = descriptions.names.get(mid) if descriptions else mid
    if not label:
        return image.dead_letter(
            reasons.UNKNOWN_CATEGORY_ID,
            (
                f"LabelName {mid!r} is not in {descriptions.path}"
                if descriptions
                else "LabelName is empty"
            ),
        )
    written = [value[side] for side in ("XMin", "YMin", "XMax", "YMax")]
    if not any(written):  # create_oid_tf_record.py reads such rows as image-level labels
        return image.dead_letter(
            reasons.UNSUPPORTED_ANNOTATION,
            "an image-level label (no box): only boxes are read from a box CSV",
        )
    try:
        corners = [float(corner) for corner in written]
    except ValueError:
        return image.dead_letter(
            reasons.INVALID_BOX,
            "XMin, XMax, YMin and YMax must be "
            "numbers relative to the image (0 to 1): "
            f"{[value[side] for side in ('XMin', 'XMax', 'YMin', 'YMax')]}",
        )
    box = clipped_box(*corners)
    if not isinstance(box, Box):
        return image.dead_letter(*box)
    flags = {field: int(value.get(column, "").strip() == "1") for column, field in _FLAGS.items()}
    return image._replace(labels=(label,), boxes=(box._replace(**flags),))


class OpenImagesFormat(InputFormat):
    name = "open_images"
    title = "an Open Images box CSV"
    suffixes = (".csv",)
    cuts_by_lines = True
    boxes_only = True

    def recognises(self, head: FileHead) -> bool:
        first = head.data.removeprefix(b"\xef\xbb\xbf").split(b"\n", 1)[0]
        return is_open_images_header(first.decode("utf-8", "replace"))

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        columns = _header(source.path)[1]
        missing = [name for name in _REQUIRED if name not in columns]
        if missing:
            raise ManifestError(
                f"{source.path}: an Open Images box CSV needs the columns "
                f"{', '.join(_REQUIRED)}; the header lacks {', '.join(missing)}"
            )
        if ClassDescriptions.beside(source.path) is None:
            logging.warning(
                "%s: no class descriptions file (%s) beside it: the labels are "
                "the MIDs (LabelName)",
                source.path,
                " or ".join(_DESCRIPTIONS),
            )

    def declared_classes(self, source: ManifestSource) -> DeclaredClasses | None:
        descriptions = ClassDescriptions.beside(source.path)
        if descriptions is None:
            return None
        return DeclaredClasses(
            f"{descriptions.path} (DisplayName)", tuple(descriptions.names.values())
        )

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return read_open_images(source.path, rules, source.split, lines)
