"""tf.train.Example encoding with the feature keys TensorFlow's own model code reads.

Classification examples carry `image/class/*`; detection examples carry the Object
Detection API's `image/object/*`, with class ids 1-based as that API expects (0 is its
background class), so they match label_map.pbtxt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from tensorflow.core.example import example_pb2, feature_pb2

from transforms.images import PreparedImage
from transforms.labels import LabelledRow

# The feature keys and their dtypes: the output contract readers rely on.
IMAGE_FEATURES = {
    "image/encoded": "bytes",
    "image/format": "bytes",
    "image/height": "int64",
    "image/width": "int64",
    "image/channels": "int64",
    "image/filename": "bytes",
    "image/source_id": "bytes",
    "image/key/sha256": "bytes",
}
CLASSIFICATION_FEATURES = {
    **IMAGE_FEATURES,
    "image/class/label": "int64",  # one id per label: a list for multi-label rows
    "image/class/text": "bytes",  # one text per label, in the same order
}
DETECTION_FEATURES = {
    **IMAGE_FEATURES,
    # One value per object, in the same order in every list; empty for no objects.
    "image/object/bbox/xmin": "float",
    "image/object/bbox/ymin": "float",
    "image/object/bbox/xmax": "float",
    "image/object/bbox/ymax": "float",
    "image/object/class/label": "int64",  # label id + 1
    "image/object/class/text": "bytes",
}


def feature_types(label_mode: str) -> dict[str, str]:
    """The feature keys and dtypes (bytes, int64, float) of examples written in this mode."""
    return DETECTION_FEATURES if label_mode == "detection" else CLASSIFICATION_FEATURES


def feature_spec(label_mode: str) -> dict[str, dict[str, str | bool]]:
    """What summary.json tells readers about each key: its dtype, and whether it holds a
    list (multi-label ids and texts, every image/object/* key) rather than one value."""
    lists = label_mode != "single"
    return {key: {"dtype": dtype, "list": lists and key not in IMAGE_FEATURES}
            for key, dtype in feature_types(label_mode).items()}


def encode_example(rows: Sequence[LabelledRow], image: PreparedImage, label_mode: str
                   ) -> bytes:
    """The serialized tf.train.Example for one image; `image.encoded` is stored as is.

    `rows` are the image's manifest rows: one, or in detection mode one per box.
    """
    uri = rows[0].row.uri
    texts = [label.encode() for item in rows for label in item.row.labels]
    ids = [label_id for item in rows for label_id in item.label_ids]
    values = {
        "image/encoded": image.encoded,
        "image/format": image.format.encode(),
        "image/height": image.height,
        "image/width": image.width,
        "image/channels": image.channels,
        "image/filename": uri.rsplit("/", 1)[-1].encode(),
        "image/source_id": uri.encode(),
        "image/key/sha256": hashlib.sha256(image.encoded).hexdigest().encode(),
    }
    if label_mode == "detection":
        boxes = [box for item in rows for box in item.row.boxes]
        values |= {f"image/object/bbox/{side}": [getattr(box, side) for box in boxes]
                   for side in ("xmin", "ymin", "xmax", "ymax")}
        values |= {"image/object/class/label": [label_id + 1 for label_id in ids],
                   "image/object/class/text": texts}
    else:
        values |= {"image/class/label": ids, "image/class/text": texts}
    types = feature_types(label_mode)
    features = {key: _feature(value, types[key]) for key, value in values.items()}
    # deterministic: map entries in key order, so the same image always gives the same bytes.
    return example_pb2.Example(features=feature_pb2.Features(
        feature=features)).SerializeToString(deterministic=True)


def _feature(value: bytes | int | list, dtype: str) -> feature_pb2.Feature:
    values = value if isinstance(value, list) else [value]
    if dtype == "bytes":
        return feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=values))
    if dtype == "float":
        return feature_pb2.Feature(float_list=feature_pb2.FloatList(value=values))
    return feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=values))
