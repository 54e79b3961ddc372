"""LabelMe JSON (wkentaro/labelme): one file per image, `imagePath` (relative to the
JSON's folder, or to --image_dir), `imageWidth`, `imageHeight`, image-level `flags` and
`shapes`, each `label`, `points` in pixels, `shape_type` and `group_id`. A file flagged
`__ignore__` is left out, as a DISCARD row is.

Rows: with --label_mode single or multi, one per file, its labels the flags set true
(labelme's classification flags; `__ignore__` is not a class); with detection, one per
object: the extent of a rectangle's points (labelme writes two opposite corners,
X-AnyLabeling all four, and its converters take their extent too), of a polygon's, of a
rotated box's four corners (X-AnyLabeling's `rotation`, as YOLO OBB's), of a circle (its
centre and a point on it) or of a mask's corners. Shapes sharing a label and a group_id
are one object, as labelme's own labelme2coco merges them, and its mask is their union:
the polygons and rotated boxes, the circles (as 64-sided polygons), the rectangles, or a
mask shape's pixels (a base64 PNG of its region). A region labelled `__ignore__` is no
object: a discarded row, as labelme2coco skips it. Points, lines, line strips and
X-AnyLabeling's cuboids are no boxes: each such object is left out by itself (a
discarded row, counted by shape in summary.json's objects_left_out), its image written
with its other objects (an image of such objects alone is not written); an object that
mixes them with regions, or a shape of a kind not named here, is a dead letter naming
it. A folder given to --manifest is read as its .json files.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator

import numpy as np
from PIL import Image

from image_tfrecords.core.imaging.images import open_image
from image_tfrecords.core.inputs.boxes import (
    box_row,
    declared_size,
    extent,
    pixel_box,
    polygon_mask,
    region_mask,
    region_problem,
    with_mask,
)
from image_tfrecords.core.inputs.dataset_root import DatasetRoot, quoted
from image_tfrecords.core.inputs.input_format import FileHead, InputFormat
from image_tfrecords.core.inputs.rows import DiscardedRow, RowRules, assign_split, json_id, left_out
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.documents import load_json
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.core.storage import storage

# labelme's first keys: version, flags, shapes, imagePath, imageData...
_LABELME_KEYS = frozenset({"version", "flags", "shapes"})
# The points each region needs: labelme's rectangle two opposite corners (X-AnyLabeling's
# all four), X-AnyLabeling's rotated box (`rotation`) its four corners, a circle its centre
# and a point on it, a mask its region's top left and bottom right corners.
_POINTS_NEEDED = {"rectangle": 2, "rotation": 4, "polygon": 3, "circle": 2, "mask": 2}
# labelme's and X-AnyLabeling's shapes that are no region: left out, object by object.
_LEFT_OUT = frozenset({"point", "points", "line", "linestrip", "cuboid"})
# A circle's mask is a polygon of this many sides (labelme's own draws it with Pillow).
_CIRCLE_SIDES = 64
# labelme's own flag for an image to leave out (its file is a discarded row, as DISCARD),
# and label for a region that is no object (a discarded row too).
_IGNORE_FLAG = "__ignore__"


def read_labelme(
    path: str, rules: RowRules, split: str | None
) -> Iterator[ManifestRow | DeadLetter | DiscardedRow]:
    """The rows of one LabelMe file; `line` is the object's 1-based position among the
    file's objects (0 for the image's own row), `raw` its shapes as JSON."""
    try:
        with storage.open_read(path) as file:
            document = load_json(file.read())
    except (OSError, ValueError) as error:
        yield DeadLetter.in_file(
            path, reasons.INVALID_ANNOTATION, f"cannot read the JSON: {error}", split=split or ""
        )
        return
    written = document.get("imagePath") if isinstance(document, dict) else None
    if not isinstance(written, str) or not written.strip():
        yield DeadLetter.in_file(
            path, reasons.MISSING_URI, "imagePath is missing or empty", split=split or ""
        )
        return
    written = written.strip().replace("\\", "/")  # labelme on Windows writes backslashes
    root = DatasetRoot.of(path, rules)
    # labelme turns an image upright by its EXIF orientation before showing it.
    image = ManifestRow(
        path,
        0,
        written,
        split or assign_split(written, rules.split_fractions),
        root.resolve(written),
        (),
        drawn_upright=True,
        listed_whole=True,
    )
    flags = document.get("flags")
    if isinstance(flags, dict) and flags.get(_IGNORE_FLAG) is True:
        yield DiscardedRow(path, 0)
        return
    outside = root.outside(image.uri, f"imagePath {quoted(written)}")
    if outside:
        yield image.dead_letter(*outside)
        return
    if not rules.detection:
        yield _flagged(image, flags, rules)
        return
    size = declared_size(document.get("imageWidth"), document.get("imageHeight"), rules.max_pixels)
    if not isinstance(size[0], int):
        yield image.dead_letter(*size)
        return
    image = image._replace(image_size=size)
    shapes = document.get("shapes")
    if not isinstance(shapes, list):
        yield image.dead_letter(reasons.MALFORMED_ROW, "shapes is not a list")
        return
    objects = list(enumerate(_objects(shapes), start=1))
    # A region labelled __ignore__ is no object (labelme's own labelme2coco skips it).
    ignored = [
        position
        for position, group in objects
        if isinstance(group[0], dict) and group[0].get("label") == _IGNORE_FLAG
    ]
    yield from (DiscardedRow(path, position) for position in ignored)
    if len(ignored) == len(objects):
        yield image  # an image without objects
    for position, group in objects:
        if position not in ignored:
            row = image._replace(line=position, raw=json.dumps(group, ensure_ascii=False))
            yield _object_row(row, group, rules)


def _objects(shapes: list) -> list[list]:
    """The shapes grouped into objects: those with one label and one group_id together,
    in the order of their first shape; each other shape alone."""
    groups: dict[object, list] = {}
    for index, shape in enumerate(shapes):
        group_id = json_id(shape, "group_id") if isinstance(shape, dict) else None
        key = (str(shape.get("label")), group_id) if group_id is not None else index
        groups.setdefault(key, []).append(shape)
    return list(groups.values())


def _object_row(
    row: ManifestRow, shapes: list, rules: RowRules
) -> ManifestRow | DeadLetter | DiscardedRow:
    where = f"object {row.line}: "

    def reject(reason: str, message: str, **_: str) -> DeadLetter:
        return row.dead_letter(reason, where + message)

    if not all(isinstance(shape, dict) for shape in shapes):
        return reject(reasons.MALFORMED_ROW, "a shape must be a JSON object")
    # labelme before 4.0 wrote no shape_type: its shapes were polygons.
    kinds = [str(shape.get("shape_type") or "polygon") for shape in shapes]
    if all(kind in _LEFT_OUT for kind in kinds):
        return left_out(row, kinds[0])
    xs: list[float] = []
    ys: list[float] = []
    polygons: list[list[tuple[float, float]]] = []  # the object's region, as polygons
    region = None  # or as a mask shape's pixels (a group of them: the last one's)
    for shape, kind in zip(shapes, kinds, strict=True):
        if kind not in _POINTS_NEEDED:
            return reject(
                reasons.UNSUPPORTED_ANNOTATION,
                f"a {kind} is not a box"
                + (", in an object with regions" if kind in _LEFT_OUT else ""),
            )
        points = _points(shape.get("points"))
        needed = _POINTS_NEEDED[kind]
        if points is None or len(points) < needed:
            return reject(
                reasons.INVALID_BOX,
                f"a {kind} needs {needed} or more points [x, y], found {shape.get('points')!r}",
            )
        if kind == "circle":
            (cx, cy), (px, py) = points[:2]
            radius = math.hypot(px - cx, py - cy)
            points = [
                (cx + radius * math.cos(turn), cy + radius * math.sin(turn))
                for turn in (2 * math.pi * step / _CIRCLE_SIDES for step in range(_CIRCLE_SIDES))
            ]
        elif kind == "rectangle":  # its points' extent, whether two corners or four
            x0, y0, x1, y1 = extent([x for x, _ in points], [y for _, y in points])
            points = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]
        elif kind == "mask":
            region = _mask_pixels(shape.get("mask"), row.image_size)
            if isinstance(region, tuple):
                return reject(*region)
            region = (region, *map(int, points[0]))
        if kind != "mask":
            polygons.append(points)
        xs += [x for x, _ in points]
        ys += [y for _, y in points]
    label = str(shapes[0].get("label") or "").strip()
    if region is not None:
        mask = region_mask(*region, row.image_size, rules)
    elif any(kind != "rectangle" for kind in kinds):
        mask = polygon_mask(polygons, row.image_size, rules)
    else:
        mask = None  # rectangles alone: a box
    return box_row(
        row, label, True, lambda: with_mask(pixel_box(extent(xs, ys), row.image_size), mask), reject
    )


def _mask_pixels(encoded: object, size: tuple[int, int]) -> np.ndarray | tuple[str, str]:
    """labelme's mask: a base64 PNG of the region's pixels, true where the object is, on
    an image declared `size`; or (dead-letter reason, message). The PNG's own size is
    checked against the image's before its pixels are decoded."""
    try:
        with open_image(base64.b64decode(str(encoded), validate=True), formats=("PNG",)) as image:
            problem = region_problem(image.size, size)
            if problem:
                return problem
            return (np.asarray(image.convert("L")) > 0).astype(np.uint8)
    except (ValueError, OSError, Image.DecompressionBombError):
        return reasons.INVALID_MASK, "a mask's `mask` must be a PNG, base64"


def _points(value: object) -> list[tuple[float, float]] | None:
    if not isinstance(value, list):
        return None
    try:
        points = [(float(x), float(y)) for x, y in value]
    except (TypeError, ValueError):
        return None
    return points if all(math.isfinite(x) and math.isfinite(y) for x, y in points) else None


def _flagged(image: ManifestRow, flags: object, rules: RowRules) -> ManifestRow | DeadLetter:
    labels = (
        tuple(
            name.strip()
            for name, value in (flags or {}).items()
            if value is True and name != _IGNORE_FLAG and name.strip()
        )
        if isinstance(flags, dict)
        else ()
    )
    if not labels:
        return image.dead_letter(
            reasons.MISSING_LABEL,
            "no flag is set (labelme's image labels); for its shapes pass --label_mode detection",
        )
    if len(labels) > 1 and rules.label_mode is LabelMode.SINGLE:
        return image.dead_letter(
            reasons.MULTIPLE_LABELS,
            f"{len(labels)} flags are set; pass --label_mode multi to keep them all",
        )
    return image._replace(labels=labels)


class LabelMeFormat(InputFormat):
    name = "labelme"
    title = "a LabelMe JSON file"
    suffixes = (".json",)
    folder_glob = "*.json"  # one file per image, beside the images
    folder_files = "LabelMe JSON"

    def recognises(self, head: FileHead) -> bool:
        return head.first_json_key in _LABELME_KEYS

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter | DiscardedRow]:
        return read_labelme(source.path, rules, source.split)
