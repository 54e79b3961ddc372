"""COCO instances JSON (`instances_train2017.json`): one detection row per annotation.

`bbox` is [x, y, width, height] in pixels of the image's declared width and height,
normalised as create_coco_tf_record.py does; a category's name is the label, `iscrowd`
becomes image/object/is_crowd, and an image no annotation names is an image without
objects. Masks (`segmentation`) and keypoints are not written yet: an annotation holding
one is dead-lettered unless --leave_out names it, and the launcher refuses a file whose
first annotations hold them (check_coco). The file is one JSON document, streamed with ijson in three passes (categories,
images, annotations), so memory holds the category and image tables, never the
annotations, whatever the keys' order in the file.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import ijson

from worker import dead_letters as reasons
from worker.dead_letters import DeadLetter
from worker.chunks import LineRange, ManifestSource
from worker.inputs.boxes import declared_size, pixel_box, unwritten_annotation
from worker.inputs.input_format import FileHead, InputFormat
from worker.inputs.lines import open_manifest
from worker.choices import LeftOut
from worker.inputs.rows import (ImageEntries, ManifestError, RowRules, assign_split, image_folder,
                                resolve_uri)
from worker.records import Box, ManifestRow

# What COCO calls what --leave_out names.
_HELD = {LeftOut.MASKS: "instance masks", LeftOut.KEYPOINTS: "keypoints"}
# Annotations the launcher reads to see whether the file holds masks or keypoints.
_PEEKED_ANNOTATIONS = 50
# A COCO file's top-level keys; Vertex AI's JSON Lines items start with their own.
_COCO_KEYS = frozenset({"info", "licenses", "images", "annotations", "categories"})


def read_coco(path: str, rules: RowRules, split: str | None
              ) -> Iterator[ManifestRow | DeadLetter]:
    """A ManifestRow per annotation, and per image without annotations; a DeadLetter per
    annotation (or image) that cannot be one, its message naming the annotation's id.

    `line` is the annotation's 1-based position in `annotations`, 0 for an image without
    annotations; `raw` is the annotation (or image) as JSON.
    """
    categories = {category.get("id"): str(category.get("name", "")).strip()
                  for category in _items(path, "categories.item") if isinstance(category, dict)}
    entries = ImageEntries()
    images = {image.get("id"): _first_entry(_image_row(path, image, rules, split), image,
                                            entries)
              for image in _items(path, "images.item") if isinstance(image, dict)}
    annotated = set()
    for position, annotation in enumerate(_items(path, "annotations.item"), start=1):
        if isinstance(annotation, dict):
            annotated.add(annotation.get("image_id"))
        yield _annotation_row(path, position, annotation, images, categories, rules)
    for image_id, image in images.items():
        if image_id not in annotated:
            yield image


def category_names(path: str) -> set[str]:
    return {str(category.get("name", "")).strip() for category in _items(path, "categories.item")
            if isinstance(category, dict)}


def _items(path: str, prefix: str) -> Iterator[Any]:
    with open_manifest(path) as file:
        yield from ijson.items(file, prefix, use_float=True)


def _first_entry(row: ManifestRow | DeadLetter, image: dict, entries: ImageEntries
                 ) -> ManifestRow | DeadLetter:
    """The image's row, or a dead letter for its annotations when an earlier image entry
    names the same file in the same split."""
    if isinstance(row, DeadLetter):
        return row
    return entries.repeated(row, f"image id {image.get('id')}") or row


def _image_row(path: str, image: dict, rules: RowRules, forced_split: str | None
               ) -> ManifestRow | DeadLetter:
    """The image's row without objects, or a DeadLetter saying why its annotations cannot
    be used."""
    raw = json.dumps(image, ensure_ascii=False)
    name = image.get("file_name")
    written = name.strip() if isinstance(name, str) else ""
    uri = resolve_uri(written, image_folder(path, rules)) if written else ""
    split = forced_split or assign_split(written, rules.split_fractions)
    where = f"image id {image.get('id')}: "
    if not written:
        return DeadLetter(path, 0, raw, "", split, reasons.MISSING_URI,
                          where + "file_name is missing or empty")
    size = declared_size(image.get("width"), image.get("height"))
    if not isinstance(size[0], int):
        return DeadLetter(path, 0, raw, uri, split, size[0], where + size[1])
    return ManifestRow(path, 0, raw, split, uri, (), image_size=size)


def _annotation_row(path: str, position: int, annotation: object,
                    images: dict[object, ManifestRow | DeadLetter],
                    categories: dict[object, str], rules: RowRules
                    ) -> ManifestRow | DeadLetter:
    raw = json.dumps(annotation, ensure_ascii=False)
    if not isinstance(annotation, dict):
        return DeadLetter(path, position, raw, "", "", reasons.MALFORMED_ROW,
                          "an annotation must be a JSON object")
    where = f"annotation id {annotation.get('id')}: "
    image = images.get(annotation.get("image_id"))
    if image is None:
        return DeadLetter(path, position, raw, "", "", reasons.UNKNOWN_IMAGE_ID,
                          f"{where}image_id {annotation.get('image_id')!r} is in no image")
    if isinstance(image, DeadLetter):
        return image._replace(line=position, raw=raw, message=where + image.message)
    row = image._replace(line=position, raw=raw)
    label = categories.get(annotation.get("category_id"))
    if not label:
        return row.dead_letter(reasons.UNKNOWN_CATEGORY_ID, f"{where}category_id "
                               f"{annotation.get('category_id')!r} names no category")
    held = _unwritten(annotation, rules)
    unwritten = held and unwritten_annotation(held, rules, _HELD[held])
    if unwritten:
        return row.dead_letter(unwritten[0], where + unwritten[1])
    bbox = annotation.get("bbox")
    if not (isinstance(bbox, list) and len(bbox) == 4
            and all(isinstance(value, (int, float)) for value in bbox)):
        return row.dead_letter(reasons.INVALID_BOX, f"{where}bbox must be [x, y, width, "
                               f"height] in pixels, found {bbox!r}")
    x, y, width, height = bbox
    box = pixel_box([x, y, x + width, y + height], row.image_size,
                    is_crowd=int(bool(annotation.get("iscrowd"))))
    if not isinstance(box, Box):
        return row.dead_letter(box[0], where + box[1])
    return row._replace(labels=(label,), boxes=(box,))


def _unwritten(annotation: dict, rules: RowRules) -> LeftOut | None:
    """What the annotation holds that this version does not write and --leave_out does
    not name: masks (`segmentation`) or keypoints (any of them visible)."""
    if annotation.get("segmentation") and LeftOut.MASKS not in rules.leave_out:
        return LeftOut.MASKS
    keypoints = annotation.get("keypoints")
    if (isinstance(keypoints, list) and any(keypoints[2::3])
            and LeftOut.KEYPOINTS not in rules.leave_out):
        return LeftOut.KEYPOINTS
    return None


def check_coco(path: str, rules: RowRules) -> None:
    """Before the job: the first annotations hold no mask or keypoints that --leave_out
    does not name (a COCO file holds them in every annotation or in none)."""
    for annotation in itertools.islice(_items(path, "annotations.item"), _PEEKED_ANNOTATIONS):
        held = isinstance(annotation, dict) and _unwritten(annotation, rules)
        if held:
            raise ManifestError(f"{path}: its annotations hold {_HELD[held]} (annotation id "
                                f"{annotation.get('id')}), which this version does not write: "
                                f"pass --leave_out {held} to convert their boxes alone")


class CocoFormat(InputFormat):
    name = "coco"
    title = "a COCO instances JSON file"
    suffixes = (".json",)
    boxes_only = True

    def recognises(self, head: FileHead) -> bool:
        """A JSON file whose first key is one of COCO's top-level keys."""
        return head.first_json_key in _COCO_KEYS

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        check_coco(source.path, rules)

    def read(self, source: ManifestSource, rules: RowRules, lines: LineRange | None
             ) -> Iterator[ManifestRow | DeadLetter]:
        return read_coco(source.path, rules, source.split)
