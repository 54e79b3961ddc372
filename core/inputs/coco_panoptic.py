"""COCO panoptic segmentation JSON (`panoptic_val2017.json` beside its PNG folder
`panoptic_val2017/`, panopticapi's layout): every segment of an image one object.

An annotation lists an image's segments (`segments_info`: id, category_id, iscrowd,
bbox) and names its PNG (`file_name`), whose pixels' colours are the segments' ids:
id = R + 256 G + 256² B (panopticapi's utils.rgb2id; 0 is no segment). Each segment is
one detection row, as panopticapi's panoptic2detection_coco_format.py makes it an
instances annotation: its box the segment's `bbox` ([x, y, width, height] in pixels of
the image's declared size, normalised as create_coco_tf_record.py does), its label its
category's name (things and stuff alike, as that script keeps both without
--things_only), `iscrowd` as image/object/is_crowd, and its pixels in the PNG its mask
(not read at all with --leave_out masks). A PNG that is not the image's declared size,
or holds no pixel of a segment, dead-letters those segments.

The PNG folder is the JSON's path without `.json` (panopticapi's default for its
--segmentations_folder); the images are found as an instances file's are (file_name
relative to the JSON's folder, or --image_dir), an image no annotation names is an image
without objects, and the split is --manifest SPLIT=PATH's or one from a hash of the file
name. `categories` declares the classes, each at its id. Streamed with ijson as the
instances file is; each PNG is read once, by the worker process that reads the JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

from image_tfrecords.core.imaging.images import open_image
from image_tfrecords.core.imaging.masks import rle_of
from image_tfrecords.core.inputs.coco import (
    declared_categories,
    first_entry,
    image_attributes,
    image_row,
    is_panoptic,
    object_box,
)
from image_tfrecords.core.inputs.dataset_root import DatasetRoot, quoted
from image_tfrecords.core.inputs.input_format import (
    DeclaredClasses,
    FileHead,
    InputFormat,
    json_items,
)
from image_tfrecords.core.inputs.rows import ImageEntries, RowRules, json_id
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.choices import LeftOut
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.core.storage import storage


def read_panoptic(
    path: str, rules: RowRules, split: str | None
) -> Iterator[ManifestRow | DeadLetter]:
    """A ManifestRow per segment, and per image without segments; a DeadLetter per
    segment (or annotation) that cannot be one. `line` is the annotation's 1-based
    position in `annotations`, `raw` the segment as JSON."""
    categories = {
        json_id(category, "id"): str(category.get("name", "")).strip()
        for category in json_items(path, "categories.item")
        if isinstance(category, dict)
    }
    entries, root = ImageEntries(), DatasetRoot.of(path, rules)
    images = {
        json_id(image, "id"): first_entry(
            image_row(path, image, rules, split, root), image, entries
        )
        for image in json_items(path, "images.item")
        if isinstance(image, dict)
    }
    # The PNGs stay in their own folder, whatever --image_dir says of the images.
    pngs = DatasetRoot(segmentation_folder(path), rules.allow_paths_outside_dataset)
    annotated = set()
    for position, annotation in enumerate(json_items(path, "annotations.item"), start=1):
        if isinstance(annotation, dict):
            annotated.add(json_id(annotation, "image_id"))
        yield from _annotation_rows(path, position, annotation, images, categories, pngs, rules)
    for image_id, image in images.items():
        if image_id not in annotated:
            yield image


def segmentation_folder(path: str) -> str:
    """panopticapi's default: the JSON's path without `.json` (and a compression suffix)."""
    stem, dot, _ = path.rpartition(".json")
    return stem if dot else path


def _annotation_rows(
    path: str,
    position: int,
    annotation: object,
    images: dict[object, ManifestRow | DeadLetter],
    categories: dict[object, str],
    pngs: DatasetRoot,
    rules: RowRules,
) -> Iterator[ManifestRow | DeadLetter]:
    raw = json.dumps(annotation, ensure_ascii=False)
    if not isinstance(annotation, dict):
        yield DeadLetter.in_file(
            path,
            reasons.MALFORMED_ROW,
            "an annotation must be a JSON object",
            position=position,
            raw=raw,
        )
        return
    where = f"annotation of image id {annotation.get('image_id')}: "
    image = images.get(json_id(annotation, "image_id"))
    if image is None:
        yield DeadLetter.in_file(
            path,
            reasons.UNKNOWN_IMAGE_ID,
            f"{where}image_id {annotation.get('image_id')!r} is in no image",
            position=position,
            raw=raw,
        )
        return
    if isinstance(image, DeadLetter):
        yield image._replace(line=position, raw=raw, message=where + image.message)
        return
    row = image._replace(line=position, raw=raw)
    segments, png = annotation.get("segments_info"), annotation.get("file_name")
    if not (isinstance(segments, list) and isinstance(png, str) and png.strip()):
        yield row.dead_letter(
            reasons.INVALID_ANNOTATION,
            f"{where}expected segments_info, a list, and file_name, its PNG",
        )
        return
    if not segments:
        yield row  # an image without objects
        return
    ids = (
        None
        if LeftOut.MASKS in rules.leave_out
        else _segment_ids(png.strip(), pngs, row.image_size)
    )
    for segment in segments:
        segment_row = row._replace(raw=json.dumps(segment, ensure_ascii=False))
        yield _segment_row(segment_row, segment, categories, ids, where)


def _segment_ids(
    written: str, pngs: DatasetRoot, size: tuple[int, int]
) -> np.ndarray | tuple[str, str]:
    """The segment id per pixel of the PNG the annotation's `file_name` names in the PNG
    folder, transposed (width x height: a segment's pixels, transposed back, are then the
    column-major array pycocotools encodes, no copy made), or (dead-letter reason,
    message)."""
    png = pngs.resolve(written)
    outside = pngs.outside(png, f"the panoptic PNG {quoted(written)}")
    if outside:
        return outside
    try:
        with storage.open_read(png) as file:
            image = open_image(file.read())
            image = image if image.mode == "RGB" else image.convert("RGB")
            rgb = np.asarray(image, dtype=np.uint32)
    except (OSError, ValueError) as error:  # Pillow's UnidentifiedImageError is an OSError
        return reasons.INVALID_MASK, f"cannot read the panoptic PNG {png}: {error}"
    if image.size != size:
        return (
            reasons.SIZE_MISMATCH,
            f"the panoptic PNG {png} is {image.size[0]}x"
            f"{image.size[1]} but the image is declared {size[0]}x{size[1]}",
        )
    return np.ascontiguousarray((rgb[..., 0] + 256 * rgb[..., 1] + 256 * 256 * rgb[..., 2]).T)


def _segment_row(
    row: ManifestRow,
    segment: object,
    categories: dict[object, str],
    ids: np.ndarray | tuple[str, str] | None,
    where: str,
) -> ManifestRow | DeadLetter:
    if not isinstance(segment, dict):
        return row.dead_letter(reasons.MALFORMED_ROW, f"{where}a segment must be a JSON object")
    where += f"segment id {segment.get('id')}: "
    name = categories.get(json_id(segment, "category_id"))
    if not name:
        return row.dead_letter(
            reasons.UNKNOWN_CATEGORY_ID,
            f"{where}category_id {segment.get('category_id')!r} names no category",
        )
    box = object_box(segment, row, where)
    if isinstance(box, DeadLetter):
        return box
    if isinstance(ids, tuple):
        return row.dead_letter(ids[0], where + ids[1])
    if ids is not None:
        pixels = (ids == json_id(segment, "id")).T
        if not pixels.any():
            return row.dead_letter(
                reasons.INVALID_MASK, f"{where}no pixel of the panoptic PNG has the segment's id"
            )
        box = box._replace(mask=rle_of(pixels))
    return row._replace(labels=(name,), boxes=(box,))


class CocoPanopticFormat(InputFormat):
    name = "coco_panoptic"
    title = "a COCO panoptic JSON file"
    suffixes = (".json",)
    boxes_only = True

    def recognises(self, head: FileHead) -> bool:
        return is_panoptic(head)

    def declared_classes(self, source: ManifestSource) -> DeclaredClasses | None:
        """`categories`, read as an instances file's are (coco.declared_categories)."""
        return declared_categories(source.path)

    def group_values(
        self, source: ManifestSource, rules: RowRules, name: str
    ) -> Iterator[tuple[str, str]]:
        return image_attributes(source.path, rules, name, source.split)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return read_panoptic(source.path, rules, source.split)
