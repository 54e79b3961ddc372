"""tf.train.Example encoding with the feature keys TensorFlow's own model code reads.

Classification examples carry `image/class/*`; detection examples carry the Object
Detection API's `image/object/*`, with class ids 1-based as that API expects (0 is its
background class), so they match label_map.pbtxt. The keys readers name too are
core/records/feature_keys.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from image_tfrecords.core.imaging.images import ImageRejected, PreparedImage
from image_tfrecords.core.imaging.masks import MAX_PADDED_KEYPOINTS, box_mask, mask_png
from image_tfrecords.core.records import feature_keys as keys
from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.records.dead_letters import INVALID_KEYPOINTS
from image_tfrecords.core.records.records import Box, Keypoints, LabelledRow, ManifestRow
from image_tfrecords.core.records.schema import (
    CATEGORICAL,
    FLOAT,
    IMAGE,
    INTEGER,
    SEGMENTATION,
    STRING,
    ExtraColumn,
)
from image_tfrecords.core.records.summary import FeatureInfo
from image_tfrecords.core.storage.redaction import redacted
from image_tfrecords.core.worker.example_proto import serialize_example, with_features

# The feature keys and their dtypes: the output contract readers rely on.
_BOX_SIDES = ("xmin", "ymin", "xmax", "ymax")
_STORED_IMAGE = {
    "encoded": "bytes",
    "format": "bytes",
    "height": "int64",
    "width": "int64",
    "channels": "int64",
}  # under image/, and under <column>/ for image columns
IMAGE_FEATURES = {
    **{f"image/{key}": dtype for key, dtype in _STORED_IMAGE.items()},
    keys.FILENAME: "bytes",
    keys.SOURCE_ID: "bytes",
    keys.IMAGE_SHA256: "bytes",
}
CLASSIFICATION_FEATURES = {
    **IMAGE_FEATURES,
    keys.CLASS_LABEL: "int64",
    keys.CLASS_TEXT: "bytes",
}
DETECTION_FEATURES = {
    **IMAGE_FEATURES,
    # One value per object, in the same order in every list; empty for no objects.
    **{f"{keys.BOX}{side}": "float" for side in _BOX_SIDES},
    keys.OBJECT_LABEL: "int64",
    keys.OBJECT_TEXT: "bytes",
    # 0 where the source does not say (Pascal VOC's difficult/truncated, COCO's iscrowd).
    **{f"image/object/{flag}": "int64" for flag in ("difficult", "truncated", "is_crowd")},
}
# What an input holds beside labels and boxes. Instance masks and keypoints in the keys of
# the Object Detection API's create_coco_tf_record: an example has them when one of its
# objects has a mask or keypoints, for every object (an object without a mask has its box
# as its mask; one without keypoints has K unlabelled points: 0, 0, visibility 0).
# A segmentation map in DeepLab's keys.
SEGMENTATION_FEATURES = {keys.SEGMENTATION: "bytes", keys.SEGMENTATION_FORMAT: "bytes"}
ANNOTATION_FEATURES = {
    "masks": {keys.MASKS: "bytes"},
    "keypoints": {
        # K per object, relative to the image like the boxes: K * objects values.
        f"{keys.KEYPOINT}x": "float",
        f"{keys.KEYPOINT}y": "float",
        f"{keys.KEYPOINT}visibility": "int64",  # COCO's 0, 1, 2
        f"{keys.KEYPOINT}num": "int64",  # per object: num_keypoints, or points placed
    },
    "keypoint_names": {f"{keys.KEYPOINT}text": "bytes"},  # K * objects, where known
    "segmentation": SEGMENTATION_FEATURES,
}
# Each kind as the console and report.html name it.
ANNOTATION_NAMES = {
    "masks": "instance masks",
    "keypoints": "keypoints",
    "keypoint_names": "named keypoints",
    "segmentation": "segmentation maps",
}


def feature_types(
    label_mode: LabelMode,
    extra_columns: Sequence[ExtraColumn] = (),
    annotations: Iterable[str] = (),
) -> dict[str, str]:
    """The feature keys and dtypes (bytes, int64, float) of examples written in this mode.

    `annotations`: the kinds of ANNOTATION_FEATURES that examples hold.
    A --schema column of type segmentation adds no key of its own: its map is in
    SEGMENTATION_FEATURES.
    Extra columns add `<column>` (integer, float, string; a categorical's vocabulary id,
    with its text in `<column>/text`), or `<column>/encoded`... for a second image.
    """
    types = dict(
        DETECTION_FEATURES if label_mode == LabelMode.DETECTION else CLASSIFICATION_FEATURES
    )
    for kind in annotations:
        types |= ANNOTATION_FEATURES[kind]
    for column in extra_columns:
        if column.type == IMAGE:
            types |= {f"{column.name}/{key}": dtype for key, dtype in _STORED_IMAGE.items()}
        elif column.type != SEGMENTATION:
            types[column.name] = _EXTRA_DTYPES[column.type]
        if column.type == CATEGORICAL:
            types[f"{column.name}/text"] = "bytes"
    return types


_EXTRA_DTYPES = {INTEGER: "int64", FLOAT: "float", STRING: "bytes", CATEGORICAL: "int64"}


def feature_spec(
    label_mode: LabelMode,
    extra_columns: Sequence[ExtraColumn] = (),
    annotations: Iterable[str] = (),
) -> dict[str, FeatureInfo]:
    """What summary.json tells readers about each key: its dtype, and whether it holds a
    list (multi-label ids and texts, every image/object/* key) rather than one value."""
    lists = {
        key
        for key in feature_types(label_mode, (), annotations)
        if label_mode != LabelMode.SINGLE and key not in IMAGE_FEATURES | SEGMENTATION_FEATURES
    }
    return {
        key: FeatureInfo(dtype=dtype, list=key in lists)
        for key, dtype in feature_types(label_mode, extra_columns, annotations).items()
    }


def encode_example(
    rows: Sequence[LabelledRow],
    image: PreparedImage,
    label_mode: LabelMode,
    extra_columns: Sequence[ExtraColumn] = (),
    extra_images: Mapping[str, PreparedImage] | None = None,
    class_map: bytes | None = None,
) -> bytes:
    """The serialized tf.train.Example for one image; `image.encoded` is stored as is.

    `rows` are the image's manifest rows: one, or in detection mode one per box.
    `extra_images`: the loaded image of each image extra column, by column name.
    `class_map`: its segmentation map's PNG (masks.class_map_png), where it has one.
    """
    uri = redacted(rows[0].row.uri)  # source_id and filename: no credential of a URL
    values = {
        **_stored_image(image, "image"),
        keys.FILENAME: uri.rsplit("/", 1)[-1].encode(),
        keys.SOURCE_ID: uri.encode(),
        keys.IMAGE_SHA256: image.sha256.encode(),
    }
    if label_mode == LabelMode.DETECTION:
        boxes = [box for item in rows for box in item.row.boxes]
        values |= {
            f"{keys.BOX}{side}": [getattr(box, side) for box in boxes] for side in _BOX_SIDES
        }
        values |= {
            f"image/object/{flag}": [getattr(box, flag) for box in boxes]
            for flag in ("difficult", "truncated", "is_crowd")
        }
        values |= _object_annotations(boxes, image)
    values |= _label_values(rows, label_mode)
    values |= _extra_values(rows[0], extra_columns, extra_images or {})
    if class_map is not None:
        values |= {keys.SEGMENTATION: class_map, keys.SEGMENTATION_FORMAT: b"png"}
    types = feature_types(label_mode, extra_columns, ANNOTATION_FEATURES)
    return serialize_example(_typed(values, types))


# The features relabelled writes: the label ids and texts of either mode.
RELABELLED_FEATURES = frozenset(
    {keys.CLASS_LABEL, keys.CLASS_TEXT, keys.OBJECT_LABEL, keys.OBJECT_TEXT}
)


def relabelled(record: bytes, rows: Sequence[LabelledRow], label_mode: LabelMode) -> bytes:
    """The example `record` (encode_example's, of the same image and settings) with the
    label fields `rows` give now: a label id moved by a class added before it, or a row
    relabelled, without reading the image again. The bytes encode_example gives."""
    return with_features(
        record,
        _typed(_label_values(rows, label_mode), CLASSIFICATION_FEATURES | DETECTION_FEATURES),
    )


def _label_values(rows: Sequence[LabelledRow], label_mode: LabelMode) -> dict[str, list]:
    """The example's label ids and texts: every object's with detection, else each label
    once (the rows of one image are merged)."""
    labelled = [
        (label, label_id)
        for item in rows
        for label, label_id in zip(item.row.labels, item.label_ids, strict=True)
    ]
    if label_mode == LabelMode.DETECTION:
        ids, texts = keys.OBJECT_LABEL, keys.OBJECT_TEXT
        labelled = [(label, label_id + 1) for label, label_id in labelled]
    else:
        ids, texts = keys.CLASS_LABEL, keys.CLASS_TEXT
        labelled = list(dict.fromkeys(labelled))
    return {
        ids: [label_id for _, label_id in labelled],
        texts: [label.encode() for label, _ in labelled],
    }


def _typed(values: Mapping[str, object], types: Mapping[str, str]) -> dict[str, tuple[str, list]]:
    return {
        key: (types[key], value if isinstance(value, list) else [value])
        for key, value in values.items()
    }


def example_labels(rows: Sequence[LabelledRow], label_mode: LabelMode) -> list[str]:
    """The labels of the example `rows` make: every box's, or each label once."""
    labels = [label for item in rows for label in item.row.labels]
    return labels if label_mode == LabelMode.DETECTION else list(dict.fromkeys(labels))


def example_annotations(rows: Iterable[ManifestRow]) -> set[str]:
    """The kinds of ANNOTATION_FEATURES the example `rows` make holds."""
    rows = list(rows)
    boxes = [box for row in rows for box in row.boxes]
    kinds = {"masks"} if any(box.mask for box in boxes) else set()
    if any(row.segmentation for row in rows):
        kinds.add("segmentation")
    if any(box.keypoints for box in boxes):
        kinds.add("keypoints")
        if any(box.keypoints and box.keypoints.names for box in boxes):
            kinds.add("keypoint_names")
    return kinds


def _object_annotations(boxes: Sequence[Box], image: PreparedImage) -> dict[str, list]:
    """The masks and keypoints of an example's objects, for every object where one has
    them. Objects with fewer keypoints than the most any has are padded with unlabelled
    points, so every object has K (the API reads them as objects x K)."""
    values: dict[str, list] = {}
    if any(box.mask for box in boxes):
        values[keys.MASKS] = [
            mask_png(box.mask or box_mask(box), image.width, image.height) for box in boxes
        ]
    points = [box.keypoints for box in boxes]
    if not any(points):
        return values
    count = max(len(keypoints.xs) for keypoints in points if keypoints)
    if count * len(boxes) > MAX_PADDED_KEYPOINTS:  # before any padding is allocated
        raise ImageRejected(
            INVALID_KEYPOINTS,
            f"{len(boxes):,} objects x {count:,} keypoints (every object is padded to the "
            f"most any has) is {count * len(boxes):,} points, more than the "
            f"{MAX_PADDED_KEYPOINTS:,} one image may hold",
        )
    names = any(keypoints and keypoints.names for keypoints in points)
    for keypoints in points:
        keypoints = keypoints or Keypoints((), (), ())
        padding = count - len(keypoints.xs)
        for key, field, blank in (
            ("x", "xs", 0.0),
            ("y", "ys", 0.0),
            ("visibility", "visibility", 0),
        ):
            values.setdefault(f"{keys.KEYPOINT}{key}", []).extend(
                (*getattr(keypoints, field), *[blank] * padding)
            )
        values.setdefault(f"{keys.KEYPOINT}num", []).append(keypoints.num)
        if names:
            values.setdefault(f"{keys.KEYPOINT}text", []).extend(
                text.encode()
                for text in (*(keypoints.names or [""] * len(keypoints.xs)), *[""] * padding)
            )
    return values


def _stored_image(image: PreparedImage, prefix: str) -> dict[str, bytes | int]:
    return {
        f"{prefix}/encoded": image.encoded,
        f"{prefix}/format": image.format.encode(),
        f"{prefix}/height": image.height,
        f"{prefix}/width": image.width,
        f"{prefix}/channels": image.channels,
    }


def _extra_values(
    item: LabelledRow, columns: Sequence[ExtraColumn], images: Mapping[str, PreparedImage]
) -> dict[str, bytes | int | float]:
    values: dict[str, bytes | int | float] = {}
    category_ids = iter(item.category_ids)
    for column, value in zip(columns, item.row.extras, strict=True):
        if column.type == SEGMENTATION:
            continue  # written as the example's segmentation map
        if column.type == IMAGE:
            values |= _stored_image(images[column.name], column.name)
        elif column.type == CATEGORICAL:
            values |= {column.name: next(category_ids), f"{column.name}/text": value.encode()}
        else:
            values[column.name] = value.encode() if column.type == STRING else value
    return values
