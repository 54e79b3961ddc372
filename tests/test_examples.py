"""tf.train.Example encoding: the contract's keys parse with the declared dtypes."""

import hashlib

import tensorflow as tf

from transforms.examples import FEATURE_TYPES, encode_example
from transforms.images import PreparedImage
from transforms.manifest import ManifestRow


def test_every_contract_key_parses_with_its_dtype():
    row = ManifestRow("m.csv", 3, "train,gs://b/dir/été.jpg,cat", "train",
                      "gs://b/dir/été.jpg", ("chat noir",))
    image = PreparedImage(b"\xff\xd8jpeg bytes", "jpeg", 20, 10, 3, "JPEG", None)
    dtypes = {"bytes": tf.string, "int64": tf.int64}
    spec = {key: tf.io.FixedLenFeature([], dtypes[kind]) for key, kind in FEATURE_TYPES.items()}
    parsed = {key: value.numpy() for key, value in tf.io.parse_single_example(
        encode_example(row, [7], image), spec).items()}
    assert parsed == {
        "image/encoded": b"\xff\xd8jpeg bytes", "image/format": b"jpeg",
        "image/height": 10, "image/width": 20, "image/channels": 3,
        "image/filename": "été.jpg".encode(), "image/source_id": "gs://b/dir/été.jpg".encode(),
        "image/key/sha256": hashlib.sha256(b"\xff\xd8jpeg bytes").hexdigest().encode(),
        "image/class/label": 7, "image/class/text": b"chat noir",
    }
