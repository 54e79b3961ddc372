"""Apple Create ML object detection JSON (Roboflow's "CreateML JSON" export,
`_annotations.createml.json` in each split's folder): a list of images,

    [{"image": "a.jpg", "annotations": [{"label": "cat",
      "coordinates": {"x": 120, "y": 164, "width": 230, "height": 119}}]}]

`x` and `y` the box's centre, all four in pixels of the image, whose size the file does
not declare: the shard writer divides them by the image's own (as Create ML reads them).
One detection row per annotation; an image with an empty `annotations` list is an image
without objects. `image` is relative to the JSON's folder (or --image_dir) and stays in
it. The split is the JSON's folder where it names one (Roboflow's `train/`, `valid/`,
`test/`), else --manifest SPLIT=PATH or a hashed one. The file declares no classes: the
ids are the run's. Streamed an image at a time (ijson).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

from image_tfrecords.core.inputs.boxes import box_row
from image_tfrecords.core.inputs.dataset_root import DatasetRoot, quoted
from image_tfrecords.core.inputs.input_format import FileHead, InputFormat, json_items
from image_tfrecords.core.inputs.rows import (
    ImageEntries,
    RowRules,
    assign_split,
    folder_split,
    json_text,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import Box, ManifestRow

_ITEM_KEYS = frozenset({"image", "annotations"})
_SIDES = ("x", "y", "width", "height")


def read_createml(
    path: str, rules: RowRules, split: str | None
) -> Iterator[ManifestRow | DeadLetter]:
    """A row per annotation (and per image without any); `line` is the image's 1-based
    position in the list, `raw` the annotation (or the image) as JSON."""
    root = DatasetRoot.of(path, rules)
    split = split or folder_split(path)
    entries = ImageEntries()
    for position, item in enumerate(json_items(path, "item"), start=1):
        yield from _image_rows(path, position, item, root, rules, split, entries)


def _image_rows(
    path: str,
    position: int,
    item: object,
    root: DatasetRoot,
    rules: RowRules,
    split: str | None,
    entries: ImageEntries,
) -> Iterator[ManifestRow | DeadLetter]:
    raw = _json(item)
    where = f"image {position}: "
    name = json_text(item.get("image")) if isinstance(item, dict) else None
    if not name:
        yield DeadLetter.in_file(
            path,
            reasons.MISSING_URI,
            where + "`image` (the file's name) is missing or empty",
            position=position,
            raw=raw,
            split=split or "",
        )
        return
    uri = root.resolve(name)
    image = ManifestRow(
        path,
        position,
        raw,
        split or assign_split(name, rules.split_fractions),
        uri,
        (),
        boxes_in_pixels=True,
        listed_whole=True,
    )
    outside = root.outside(uri, f"{where}image {quoted(name)}")
    if outside:
        yield image.dead_letter(*outside)
        return
    if repeated := entries.repeated(image, where.removesuffix(": ")):
        yield repeated
        return
    annotations = item.get("annotations")
    if not isinstance(annotations, list):
        yield image.dead_letter(reasons.MALFORMED_ROW, where + "`annotations` must be a list")
        return
    if not annotations:
        yield image  # an image without objects
    for index, annotation in enumerate(annotations):
        yield _object_row(
            image._replace(raw=_json(annotation)), f"{where}annotation {index}: ", annotation
        )


def _object_row(image: ManifestRow, where: str, annotation: object) -> ManifestRow | DeadLetter:
    def reject(reason: str, message: str, **_: str) -> DeadLetter:
        return image.dead_letter(reason, where + message)

    if not isinstance(annotation, dict):
        return reject(reasons.MALFORMED_ROW, "an annotation must be a JSON object")
    coordinates = annotation.get("coordinates")
    sides = [coordinates.get(side) for side in _SIDES] if isinstance(coordinates, dict) else []
    if not (
        len(sides) == len(_SIDES)
        and all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in sides)
        and all(map(math.isfinite, sides))
    ):
        return reject(
            reasons.INVALID_BOX,
            "coordinates must be {x, y, width, height} in pixels (x, y its centre), found "
            f"{coordinates!r}",
        )
    x, y, width, height = sides
    corners = (x - width / 2, y - height / 2, x + width / 2, y + height / 2)
    if not (width > 0 and height > 0):
        return reject(reasons.EMPTY_BOX, f"the box has no width or no height: {coordinates}")
    if corners[0] < 0 or corners[1] < 0:
        return reject(
            reasons.BOX_OUT_OF_RANGE,
            f"the box {coordinates} (x, y its centre) starts outside the image",
        )
    # Checked against the image's own size by the shard writer.
    label = json_text(annotation.get("label")) or ""
    return box_row(image, label, True, lambda: Box(*map(float, corners)), reject)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


class CreateMlFormat(InputFormat):
    name = "createml"
    title = "a Create ML object detection JSON file"
    suffixes = (".json",)
    boxes_only = True

    def recognises(self, head: FileHead) -> bool:
        """A JSON list whose first item has `image` and `annotations`."""
        item = head.first_list_item
        return isinstance(item, dict) and _ITEM_KEYS <= set(item)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return read_createml(source.path, rules, source.split)
