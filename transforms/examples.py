"""tf.train.Example encoding with the feature keys TensorFlow's own model code reads."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from tensorflow.core.example import example_pb2, feature_pb2

from transforms.images import PreparedImage
from transforms.manifest import ManifestRow

# The feature keys and their dtypes: the output contract readers rely on.
FEATURE_TYPES = {
    "image/encoded": "bytes",
    "image/format": "bytes",
    "image/height": "int64",
    "image/width": "int64",
    "image/channels": "int64",
    "image/filename": "bytes",
    "image/source_id": "bytes",
    "image/key/sha256": "bytes",
    "image/class/label": "int64",  # one id per label: a list for multi-label rows
    "image/class/text": "bytes",  # one text per label, in the same order
}


def encode_example(row: ManifestRow, label_ids: Sequence[int], image: PreparedImage) -> bytes:
    """The serialized tf.train.Example for one image; `image.encoded` is stored as is."""
    values = {
        "image/encoded": image.encoded,
        "image/format": image.format.encode(),
        "image/height": image.height,
        "image/width": image.width,
        "image/channels": image.channels,
        "image/filename": row.uri.rsplit("/", 1)[-1].encode(),
        "image/source_id": row.uri.encode(),
        "image/key/sha256": hashlib.sha256(image.encoded).hexdigest().encode(),
        "image/class/label": list(label_ids),
        "image/class/text": [label.encode() for label in row.labels],
    }
    features = {key: _feature(value) for key, value in values.items()}
    # deterministic: map entries in key order, so the same image always gives the same bytes.
    return example_pb2.Example(features=feature_pb2.Features(
        feature=features)).SerializeToString(deterministic=True)


def _feature(value: bytes | int | list) -> feature_pb2.Feature:
    values = value if isinstance(value, list) else [value]
    if isinstance(values[0], bytes):  # never empty: every example has a label
        return feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=values))
    return feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=values))
