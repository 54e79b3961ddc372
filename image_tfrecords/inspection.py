"""`inspect_split(OUTPUT, split, n, DIR)`: the first N records of a split written back as
files a person can look at.

Each image key's stored bytes become an image file (extension from its bytes), and so does
each instance mask (`image/object/mask`); the other features are one row each of
DIR/records.csv (lists joined by `|`), and an example with boxes (`image/object/bbox/*`)
also gets a PNG with its objects drawn: boxes and label texts, masks and keypoints.

records.csv is opened in spreadsheets, and its texts come from the dataset: a text cell
starting with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`, so that
no spreadsheet takes it for a formula (OWASP's CSV injection guidance). Numbers are
written as they are.
"""

from __future__ import annotations

import csv
import io
import itertools
import posixpath
import re
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from image_tfrecords.core.imaging.images import open_image
from image_tfrecords.core.imaging.overlays import DrawnObject, draw_objects
from image_tfrecords.core.records.feature_keys import (
    BOX,
    FILENAME,
    IMAGE,
    KEYPOINT,
    MASKS,
    OBJECT_LABEL,
    OBJECT_TEXT,
)
from image_tfrecords.core.records.summary import FeatureInfo
from image_tfrecords.output import Output

CSV_FILE = "records.csv"
# What a spreadsheet reads as the start of a formula (OWASP, "CSV Injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inspect_split(output_dir: str, split: str, count: int, out_dir: str) -> list[str]:
    """Writes the files into `out_dir` (local or gs://); returns the paths written."""
    output = Output.read(output_dir)
    features = output.features
    columns = [
        "record",
        "shard",
        "shard_record",
        *features,
        *(["overlay"] if f"{BOX}xmin" in features else []),
    ]
    _clear_earlier_inspection(out_dir)
    tf.io.gfile.makedirs(out_dir)
    rows, written = [], []
    for index, (shard, position, record) in enumerate(
        itertools.islice(_records(output, split), count)
    ):
        values = _values(tf.train.Example.FromString(record), features)
        stem = _stem(index, values)
        row: dict[str, object] = {"record": index, "shard": _cell(shard), "shard_record": position}
        for key, value in values.items():
            if key in output.image_keys:
                name = stem if key == IMAGE else f"{stem}-{_safe(key.removesuffix('/encoded'))}"
                row[key] = _write(out_dir, name + _extension(value), value, written)
            elif key == MASKS:
                row[key] = "|".join(
                    _write(out_dir, f"{stem}-mask-{number}.png", mask, written)
                    for number, mask in enumerate(value)
                )
            else:
                text = (
                    "|".join(_text(item) for item in value) if features[key].list else _text(value)
                )
                row[key] = _cell(text) if features[key].dtype == "bytes" else text
        if "overlay" in columns:
            row["overlay"] = _write(out_dir, f"{stem}-boxes.png", _overlay(values), written)
        rows.append(row)
    table = io.StringIO()
    # Lines end in \r\n (RFC 4180's): a text holding a \r is quoted, as one holding \n is.
    writer = csv.DictWriter(table, columns)
    writer.writerow({column: _cell(column) for column in columns})  # keys: summary.json's
    writer.writerows(rows)
    _write(out_dir, CSV_FILE, table.getvalue().encode(), written)
    return written


def _clear_earlier_inspection(out_dir: str) -> None:
    """Removes what an earlier inspect wrote into `out_dir` (its CSV and the files the CSV
    names), so no stale file stands beside the new ones; ValueError for a folder holding
    anything else, which is not this command's to delete."""
    if not tf.io.gfile.isdir(out_dir):
        return
    present = set(tf.io.gfile.listdir(out_dir))
    if not present:
        return
    named: set[str] = set()
    if CSV_FILE in present:
        with tf.io.gfile.GFile(f"{out_dir.rstrip('/')}/{CSV_FILE}") as table:
            named = {
                name for row in csv.reader(table) for cell in row for name in cell.split("|")
            } | {CSV_FILE}
    if not present <= named:
        raise ValueError(
            f"--out {out_dir} holds files inspect did not write: give an empty or new folder"
        )
    for name in present:
        tf.io.gfile.remove(f"{out_dir.rstrip('/')}/{name}")


def _records(output: Output, split: str) -> Iterator[tuple[str, int, bytes]]:
    """(shard file name, index in the shard, record), shard after shard."""
    for path, _ in output.shards(split):
        for position, record in enumerate(output.read_shard(path)):
            yield posixpath.basename(path), position, record


def _values(example: tf.train.Example, features: dict[str, FeatureInfo]) -> dict[str, object]:
    """key -> its value (a list for list keys), in summary.json's key order."""
    values = {}
    for key, feature in features.items():
        holder = example.features.feature[key]
        kind = holder.WhichOneof("kind")
        items = list(getattr(holder, kind).value) if kind else []
        values[key] = items if feature.list else items[0]
    return values


def _stem(index: int, values: dict[str, object]) -> str:
    """`00003-cat_07`: the record index, then the source file's name where there is one."""
    name = values.get(FILENAME)
    if not isinstance(name, bytes):
        return f"{index:05d}"
    return f"{index:05d}-{_safe(posixpath.splitext(name.decode(errors='replace'))[0])}"


def _safe(text: str) -> str:
    """Usable in a file name: path separators and the like become `_`."""
    return re.sub(r"[^\w.-]+", "_", text)


def _extension(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return ".png"
    if data.startswith(b"\xff\xd8"):
        return ".jpg"
    return ".bin"


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="backslashreplace")
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _cell(text: str) -> str:
    """A text as a CSV cell no spreadsheet runs as a formula."""
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def _overlay(values: dict[str, object]) -> bytes:
    """The image as PNG with each object drawn: its box outlined and labelled, its mask
    tinted, its keypoints dotted, one colour per class id."""
    image = open_image(values[IMAGE])
    boxes = list(zip(*(values[f"{BOX}{side}"] for side in ("xmin", "ymin", "xmax", "ymax"))))
    masks = [np.asarray(open_image(mask)) for mask in values.get(MASKS, [])]
    xs = values.get(f"{KEYPOINT}x", [])
    count = len(xs) // len(boxes) if boxes else 0  # keypoints per object
    points = list(zip(xs, values.get(f"{KEYPOINT}y", []), values.get(f"{KEYPOINT}visibility", [])))
    labels = values.get(OBJECT_LABEL) or [1] * len(boxes)
    objects = [
        DrawnObject(
            corners,
            labels[place] - 1,
            _text(values[OBJECT_TEXT][place]) if OBJECT_TEXT in values else "",
            masks[place] if masks else None,
            points[place * count : (place + 1) * count],
        )
        for place, corners in enumerate(boxes)
    ]
    buffer = io.BytesIO()
    draw_objects(image, objects).save(buffer, "PNG")
    return buffer.getvalue()


def _write(out_dir: str, name: str, data: bytes, written: list[str]) -> str:
    """Writes one file; returns its name (what the CSV shows)."""
    path = f"{out_dir.rstrip('/')}/{name}"
    with tf.io.gfile.GFile(path, "wb") as file:
        file.write(data)
    written.append(path)
    return name
