"""COCO instances JSON (`instances_train2017.json`): one detection row per annotation.

`bbox` is [x, y, width, height] in pixels of the image's declared width and height,
normalised as create_coco_tf_record.py does; a category's name is the label, `iscrowd`
becomes image/object/is_crowd, and an image no annotation names is an image without
objects. `segmentation` (polygons or RLE) is the object's mask, and `keypoints` its
keypoints, named by its category's `keypoints` (create_coco_tf_record's layout). The file
is one JSON document, streamed with ijson in three passes (categories, images,
annotations), so memory holds the category and image tables, never the annotations,
whatever the keys' order in the file. `categories` declares the classes, with their ids
(declared_categories).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import ijson

from image_tfrecords.core.imaging.masks import MAX_KEYPOINTS, decode_rle, polygon_problem
from image_tfrecords.core.inputs.boxes import declared_size, pixel_box
from image_tfrecords.core.inputs.dataset_root import DatasetRoot, quoted
from image_tfrecords.core.inputs.input_format import (
    DeclaredClasses,
    FileHead,
    InputFormat,
    json_items,
)
from image_tfrecords.core.inputs.lines import open_manifest
from image_tfrecords.core.inputs.rows import (
    ImageEntries,
    ManifestError,
    RowRules,
    assign_split,
    json_id,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records import documents
from image_tfrecords.core.records.choices import LeftOut
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.label_map import LabelMapItem, vocabulary_of
from image_tfrecords.core.records.records import Box, Keypoints, ManifestRow, Mask

# A COCO file's top-level keys; Vertex AI's JSON Lines items start with their own.
_COCO_KEYS = frozenset({"info", "licenses", "images", "annotations", "categories"})


def read_coco(path: str, rules: RowRules, split: str | None) -> Iterator[ManifestRow | DeadLetter]:
    """A ManifestRow per annotation, and per image without annotations; a DeadLetter per
    annotation (or image) that cannot be one, its message naming the annotation's id.

    `line` is the annotation's 1-based position in `annotations`, 0 for an image without
    annotations; `raw` is the annotation (or image) as JSON.
    """
    categories = {
        json_id(category, "id"): _Category.of(category)
        for category in json_items(path, "categories.item")
        if isinstance(category, dict)
    }
    entries, root = ImageEntries(), DatasetRoot.of(path, rules)
    images = {
        json_id(image, "id"): first_entry(
            image_row(path, image, rules, split, root, size_from_image=True), image, entries
        )
        for image in json_items(path, "images.item")
        if isinstance(image, dict)
    }
    annotated = set()
    for position, annotation in enumerate(json_items(path, "annotations.item"), start=1):
        if isinstance(annotation, dict):
            annotated.add(json_id(annotation, "image_id"))
        yield _annotation_row(path, position, annotation, images, categories, rules)
    for image_id, image in images.items():
        if image_id not in annotated:
            yield image


class _Category(NamedTuple):
    name: str
    keypoints: tuple[str, ...]  # the names of its keypoints (person_keypoints files)

    @classmethod
    def of(cls, category: dict) -> _Category:
        keypoints = category.get("keypoints")
        return cls(
            str(category.get("name", "")).strip(),
            tuple(map(str, keypoints)) if isinstance(keypoints, list) else (),
        )


def declared_categories(path: str) -> DeclaredClasses | None:
    """`categories` as the vocabulary, ids as given, the way create_coco_tf_record writes
    them: image/object/class/label is the category_id, so entry i is the category with
    id i + 1 and an id the file skips (or a category without a name, whose annotations
    are dead letters) is a gap entry. Where a category has id 0 (not COCO's numbering,
    which starts at 1), entry i is id i: the class label is then category_id + 1, and the
    note says so. None for a file without categories; ManifestError for an id that is not
    a whole number or repeats, and for a name two ids share (its label would have both)."""
    names: dict[int, str] = {}
    for number, category in enumerate(json_items(path, "categories.item"), start=1):
        category_id = category.get("id") if isinstance(category, dict) else None
        if not isinstance(category_id, int) or isinstance(category_id, bool) or category_id < 0:
            raise ManifestError(
                f"{path}: category {number} has id {category_id!r}: "
                "category ids are whole numbers, 0 or more"
            )
        if category_id in names:
            raise ManifestError(f"{path}: two categories have id {category_id}")
        names[category_id] = _Category.of(category).name
    named = {category_id: name for category_id, name in names.items() if name}
    if not named:
        return None
    first_id: dict[str, int] = {}
    for category_id, name in sorted(named.items()):
        if name in first_id:
            raise ManifestError(
                f"{path}: categories {first_id[name]} and {category_id} are "
                f"both named {name!r}, which would have both ids: merge them, "
                "or give the ids with --vocabulary FILE"
            )
        first_id[name] = category_id
    from_zero = 0 in names
    labels = vocabulary_of(
        [LabelMapItem(category_id + from_zero, name, "") for category_id, name in named.items()],
        "name",
    )
    return DeclaredClasses(
        f"{path} (categories)",
        labels,
        note=(
            "a category has id 0, so each class label is its category_id + 1, the Object "
            "Detection API keeping 0 for the background"
            if from_zero
            else ""
        ),
    )


def category_names(path: str) -> set[str]:
    return {
        str(category.get("name", "")).strip()
        for category in json_items(path, "categories.item")
        if isinstance(category, dict)
    }


def first_entry(
    row: ManifestRow | DeadLetter, image: dict, entries: ImageEntries
) -> ManifestRow | DeadLetter:
    """The image's row, or a dead letter for its annotations when an earlier image entry
    names the same file in the same split."""
    if isinstance(row, DeadLetter):
        return row
    return entries.repeated(row, f"image id {image.get('id')}") or row


def image_row(
    path: str,
    image: dict,
    rules: RowRules,
    forced_split: str | None,
    root: DatasetRoot,
    size_from_image: bool = False,
) -> ManifestRow | DeadLetter:
    """The image's row without objects, or a DeadLetter saying why its annotations cannot
    be used. `file_name` is relative to the root, and stays in it. `size_from_image`: an
    entry that declares no size is read against the image's own (instances' boxes; a
    panoptic PNG is checked against the declared size)."""
    raw = json.dumps(image, ensure_ascii=False)
    name = image.get("file_name")
    written = name.strip() if isinstance(name, str) else ""
    uri = root.resolve(written) if written else ""
    split = forced_split or assign_split(written, rules.split_fractions)
    where = f"image id {image.get('id')}: "
    if not written:
        return DeadLetter.in_file(
            path, reasons.MISSING_URI, where + "file_name is missing or empty", raw=raw, split=split
        )
    outside = root.outside(uri, f"file_name {quoted(written)}")
    if outside:
        return DeadLetter.in_file(
            path, outside[0], where + outside[1], raw=raw, uri=uri, split=split
        )
    if size_from_image and undeclared_size(image):  # fastai's COCO_TINY
        return ManifestRow(path, 0, raw, split, uri, (), boxes_in_pixels=True, listed_whole=True)
    size = declared_size(image.get("width"), image.get("height"), rules.max_pixels)
    if not isinstance(size[0], int):
        return DeadLetter.in_file(path, size[0], where + size[1], raw=raw, uri=uri, split=split)
    return ManifestRow(path, 0, raw, split, uri, (), image_size=size, listed_whole=True)


def image_attributes(
    path: str, rules: RowRules, name: str, split: str | None
) -> Iterator[tuple[str, str]]:
    """(image URI, the value of its entry's `name`) for each entry of `images` that has
    one: a video_id, a sequence or a patient that a dataset adds to COCO's image fields
    (--group_column NAME). A list, an object or true/false is refused naming the image; so
    is a file where no image has `name` (a misspelt attribute would group nothing)."""
    root, found = DatasetRoot.of(path, rules), False
    for image in json_items(path, "images.item"):
        value = image.get(name) if isinstance(image, dict) else None
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ManifestError(
                f"{path}: image id {image.get('id')}: its {name} is "
                f"{json.dumps(value, ensure_ascii=False)[:80]}; --group_column takes an "
                "attribute whose values are strings or numbers"
            )
        found = True
        row = image_row(path, image, rules, split, root)
        if isinstance(row, ManifestRow) and str(value).strip():
            yield row.uri, str(value).strip()
    if not found:
        raise ManifestError(
            f"--group_column {name}: no image entry of {path} has an attribute {name!r} "
            "(its images' own fields, beside file_name, width and height)"
        )


def undeclared_size(image: dict) -> bool:
    """An image entry without `width` and `height` (neither given): its boxes are read
    against the image's own size, as datumaro reads such a file; one without the other is
    an error, as is a size that is not one."""
    return image.get("width") is None and image.get("height") is None


def _annotation_row(
    path: str,
    position: int,
    annotation: object,
    images: dict[object, ManifestRow | DeadLetter],
    categories: dict[object, _Category],
    rules: RowRules,
) -> ManifestRow | DeadLetter:
    raw = json.dumps(annotation, ensure_ascii=False)
    if not isinstance(annotation, dict):
        return DeadLetter.in_file(
            path,
            reasons.MALFORMED_ROW,
            "an annotation must be a JSON object",
            position=position,
            raw=raw,
        )
    where = f"annotation id {annotation.get('id')}: "
    image = images.get(json_id(annotation, "image_id"))
    if image is None:
        return DeadLetter.in_file(
            path,
            reasons.UNKNOWN_IMAGE_ID,
            f"{where}image_id {annotation.get('image_id')!r} is in no image",
            position=position,
            raw=raw,
        )
    if isinstance(image, DeadLetter):
        return image._replace(line=position, raw=raw, message=where + image.message)
    row = image._replace(line=position, raw=raw)
    category = categories.get(json_id(annotation, "category_id"))
    if not category or not category.name:
        return row.dead_letter(
            reasons.UNKNOWN_CATEGORY_ID,
            f"{where}category_id {annotation.get('category_id')!r} names no category",
        )
    box = object_box(annotation, row, where)
    if isinstance(box, DeadLetter):
        return box
    drawn = [
        (key, option)
        for key, option in (("segmentation", LeftOut.MASKS), ("keypoints", LeftOut.KEYPOINTS))
        if annotation.get(key) and option not in rules.leave_out
    ]
    if row.image_size is None and drawn:  # drawn on the declared size, as the file is read
        return row.dead_letter(
            reasons.INVALID_SIZE,
            f"{where}its image declares no width and height, and its "
            f"{' and '.join(key for key, _ in drawn)} {'are' if len(drawn) > 1 else 'is'} "
            "drawn on the declared size: add them to the image entry, or pass --leave_out "
            + ",".join(option.value for _, option in drawn),
        )
    mask = _mask(annotation.get("segmentation"), row.image_size, rules)
    if mask is not None and not isinstance(mask, Mask):
        return row.dead_letter(mask[0], where + mask[1])
    keypoints = (
        None
        if LeftOut.KEYPOINTS in rules.leave_out
        else _keypoints(
            annotation.get("keypoints"),
            annotation.get("num_keypoints"),
            row.image_size,
            category.keypoints,
        )
    )
    if keypoints is not None and not isinstance(keypoints, Keypoints):
        return row.dead_letter(keypoints[0], where + keypoints[1])
    return row._replace(
        labels=(category.name,), boxes=(box._replace(mask=mask, keypoints=keypoints),)
    )


def object_box(item: dict, row: ManifestRow, where: str) -> Box | DeadLetter:
    """An instances annotation's (or a panoptic segment's) `bbox`, [x, y, width, height]
    in pixels, and `iscrowd`, as a Box relative to the row's image; or the row's dead
    letter, its message after `where`."""
    bbox = item.get("bbox")
    if not (
        isinstance(bbox, list)
        and len(bbox) == 4
        and all(isinstance(value, (int, float)) for value in bbox)
    ):
        return row.dead_letter(
            reasons.INVALID_BOX,
            f"{where}bbox must be [x, y, width, height] in pixels, found {bbox!r}",
        )
    x, y, width, height = bbox
    is_crowd = int(bool(item.get("iscrowd")))
    if row.image_size is None:  # divided by the image's own size in the shard writer
        if not (0 <= x and 0 <= y and width > 0 and height > 0):
            return row.dead_letter(
                reasons.INVALID_BOX if min(width, height) > 0 else reasons.EMPTY_BOX,
                f"{where}bbox {bbox} must start inside the image and have a width and height",
            )
        return Box(float(x), float(y), float(x + width), float(y + height), is_crowd=is_crowd)
    box = pixel_box([x, y, x + width, y + height], row.image_size, is_crowd=is_crowd)
    if not isinstance(box, Box):
        return row.dead_letter(box[0], where + box[1])
    return box


def _mask(
    segmentation: object, size: tuple[int, int], rules: RowRules
) -> Mask | tuple[str, str] | None:
    """`segmentation` -> the object's Mask: polygons [[x, y, x, y...], ...] in pixels of the
    image's declared size, or an RLE {"size": [height, width], "counts": ...}, compressed
    (a string) or not (run lengths, as crowd annotations hold them). None for none."""
    if not segmentation or LeftOut.MASKS in rules.leave_out:
        return None
    if isinstance(segmentation, dict):
        counts, rle_size = segmentation.get("counts"), segmentation.get("size")
        if not (
            isinstance(rle_size, list)
            and len(rle_size) == 2
            and all(isinstance(side, int) for side in rle_size)
        ):
            return (
                reasons.INVALID_MASK,
                f"an RLE's size must be [height, width], found {rle_size!r}",
            )
        if tuple(rle_size[::-1]) != size:
            return (
                reasons.SIZE_MISMATCH,
                f"the RLE mask is {rle_size[1]}x{rle_size[0]} but "
                f"the image is declared {size[0]}x{size[1]}",
            )
        if isinstance(counts, list) and all(
            isinstance(count, int) and count >= 0 for count in counts
        ):
            mask = Mask(*size, counts=tuple(counts))
        elif isinstance(counts, str):
            mask = Mask(*size, counts=counts)
        else:
            return (
                reasons.INVALID_MASK,
                "an RLE's counts must be a string or a list of run lengths",
            )
        try:
            decode_rle(mask)
        except (ValueError, TypeError) as error:
            return reasons.INVALID_MASK, f"the RLE cannot be decoded: {error}"
        return mask
    if not (
        isinstance(segmentation, list)
        and all(
            isinstance(polygon, list) and all(isinstance(value, (int, float)) for value in polygon)
            for polygon in segmentation
        )
    ):
        return (
            reasons.INVALID_MASK,
            "segmentation must be a list of polygons [x1, y1, x2, "
            "y2, ...] or an RLE {size, counts}",
        )
    if any(len(polygon) < 6 or len(polygon) % 2 for polygon in segmentation):
        return (
            reasons.INVALID_MASK,
            "a polygon needs 3 or more points, x and y each: "
            f"found {[len(polygon) for polygon in segmentation]} coordinates",
        )
    return polygon_problem(segmentation, size) or Mask(*size, tuple(map(tuple, segmentation)))


def _keypoints(
    written: object, num_keypoints: object, size: tuple[int, int], names: tuple[str, ...]
) -> Keypoints | tuple[str, str] | None:
    """`keypoints` [x, y, visibility] * K in pixels -> Keypoints relative to the image's
    declared size (as create_coco_tf_record divides them), named by the category's
    `keypoints`, with `num_keypoints` as the annotation gives it (create_coco_tf_record
    copies it to image/object/keypoint/num, even where it is not the count of points with
    a place, as in CrowdPose). None for none."""
    if not written:
        return None
    if num_keypoints is not None and not (type(num_keypoints) is int and num_keypoints >= 0):
        return (
            reasons.INVALID_KEYPOINTS,
            f"num_keypoints must be a whole number of 0 or more, found {num_keypoints!r}",
        )
    if not (
        isinstance(written, list)
        and len(written) % 3 == 0
        and all(isinstance(value, (int, float)) for value in written)
    ):
        return (
            reasons.INVALID_KEYPOINTS,
            "keypoints must be [x, y, visibility] per point, "
            f"numbers: found {len(written) if isinstance(written, list) else written!r}",
        )
    if len(written) > 3 * MAX_KEYPOINTS:
        return (
            reasons.INVALID_KEYPOINTS,
            f"{len(written) // 3} keypoints, more than the {MAX_KEYPOINTS} an object may have",
        )
    if names and len(written) != 3 * len(names):
        return (
            reasons.INVALID_KEYPOINTS,
            f"{len(written) // 3} keypoints, but the category names {len(names)}",
        )
    xs, ys, flags = written[0::3], written[1::3], written[2::3]
    for number, (x, y, flag) in enumerate(zip(xs, ys, flags, strict=True), start=1):
        if flag not in (0, 1, 2):
            return (
                reasons.INVALID_KEYPOINTS,
                f"keypoint {number}'s visibility is {flag}: "
                "0 (not labelled), 1 (hidden) or 2 (visible)",
            )
        if flag and not (0 <= x <= size[0] and 0 <= y <= size[1]):
            return (
                reasons.INVALID_KEYPOINTS,
                f"keypoint {number} ({x:g}, {y:g}) is outside the {size[0]}x{size[1]} image",
            )
    return Keypoints(
        tuple(x / size[0] for x in xs),
        tuple(y / size[1] for y in ys),
        tuple(map(int, flags)),
        names,
        num_keypoints,
    )


@functools.lru_cache(maxsize=16)  # asked by both COCO formats of one file's head
def is_panoptic(head: FileHead) -> bool:
    """Whether a COCO file is panoptic: its first annotation has `segments_info` (or,
    where the categories come first, its first category `isthing`). Streams the file up
    to there: the images before it may be megabytes."""
    if head.first_json_key not in _COCO_KEYS:
        return False
    with open_manifest(head.path) as file:
        try:
            for prefix, event, value in documents.json_events(file):
                if event == "map_key" and (prefix, value) in (
                    ("annotations.item", "segments_info"),
                    ("categories.item", "isthing"),
                ):
                    return True
                if event == "end_map" and prefix in ("annotations.item", "categories.item"):
                    return False
        except (ijson.JSONError, documents.DocumentError):
            return False
    return False


class CocoFormat(InputFormat):
    name = "coco"
    title = "a COCO instances JSON file"
    suffixes = (".json",)
    boxes_only = True
    first_rows_early = False  # the first row comes only after the image table is read

    def recognises(self, head: FileHead) -> bool:
        """A JSON file whose first key is one of COCO's top-level keys, not panoptic."""
        return head.first_json_key in _COCO_KEYS and not is_panoptic(head)

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        if is_panoptic(FileHead.read(source.path)):
            raise ManifestError(
                f"{source.path} is a COCO panoptic file (segments_info), "
                "not instances: pass --input_format coco_panoptic"
            )

    def declared_classes(self, source: ManifestSource) -> DeclaredClasses | None:
        return declared_categories(source.path)

    def settled_rules(
        self, sources: Sequence[ManifestSource], rules: RowRules, say: Callable[[str], None]
    ) -> RowRules:
        """Nothing the options leave open; says, once a file, where its first image
        declares no size that its images are read against their own (undeclared_size)."""
        for source in sources:
            with contextlib.closing(json_items(source.path, "images.item")) as images:
                first = next(images, None)
            if isinstance(first, dict) and undeclared_size(first):
                say(
                    f"{source.path}: its images declare no width and height: each image's "
                    "boxes are read against its own size, as datumaro reads them"
                )
        return rules

    def labels_sampled(self, source: ManifestSource, rules: RowRules, rows: int) -> set[str]:
        """Its categories' names: the rows come only after the image table is read."""
        return category_names(source.path)

    def group_values(
        self, source: ManifestSource, rules: RowRules, name: str
    ) -> Iterator[tuple[str, str]]:
        return image_attributes(source.path, rules, name, source.split)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return read_coco(source.path, rules, source.split)
