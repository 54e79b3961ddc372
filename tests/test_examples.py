"""tf.train.Example encoding: the contract's keys parse with the declared dtypes."""

import hashlib

import numpy as np
import pytest
import tensorflow as tf
from conftest import object_detection_spec

from image_tfrecords.core.imaging.images import PreparedImage
from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.records.records import Box, LabelledRow, ManifestRow
from image_tfrecords.core.worker.examples import (
    CLASSIFICATION_FEATURES,
    encode_example,
    feature_spec,
    relabelled,
)

IMAGE = PreparedImage(
    b"\xff\xd8jpeg bytes",
    "jpeg",
    20,
    10,
    3,
    "JPEG",
    None,
    (20, 10),
    hashlib.sha256(b"\xff\xd8jpeg bytes").hexdigest(),
    0x8F3A5C0012345678,
    b"\xff\xd8thumbnail",
)
DTYPES = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
IMAGE_VALUES = {
    "image/encoded": b"\xff\xd8jpeg bytes",
    "image/format": b"jpeg",
    "image/height": 10,
    "image/width": 20,
    "image/channels": 3,
    "image/filename": "été.jpg".encode(),
    "image/source_id": "gs://b/dir/été.jpg".encode(),
    "image/key/sha256": hashlib.sha256(b"\xff\xd8jpeg bytes").hexdigest().encode(),
}


def row(line, labels, boxes=()):
    return ManifestRow("m.csv", line, "raw", "train", "gs://b/dir/été.jpg", labels, boxes)


def parse(serialized, spec):
    parsed = tf.io.parse_single_example(serialized, spec)
    return {
        key: (tf.sparse.to_dense(value) if isinstance(value, tf.SparseTensor) else value).numpy()
        for key, value in parsed.items()
    }


def test_every_classification_key_parses_with_its_dtype():
    spec = {
        key: tf.io.FixedLenFeature([], DTYPES[kind])
        for key, kind in CLASSIFICATION_FEATURES.items()
    }
    serialized = encode_example(
        [LabelledRow(row(3, ("chat noir",)), (7,))], IMAGE, LabelMode.SINGLE
    )
    assert parse(serialized, spec) == {
        **IMAGE_VALUES,
        "image/class/label": 7,
        "image/class/text": b"chat noir",
    }


def test_detection_example_holds_every_box_of_the_image_with_1_based_ids():
    boxes = [Box(0.1, 0.2, 0.3, 0.4), Box(1 / 3, 0.0, 1.0, 2 / 3)]
    rows = [
        LabelledRow(row(4, ("cat",), (boxes[0],)), (0,)),
        LabelledRow(row(9, ("dog",), (boxes[1],)), (1,)),
    ]
    parsed = parse(encode_example(rows, IMAGE, LabelMode.DETECTION), object_detection_spec())
    assert {key: parsed[key] for key in IMAGE_VALUES} == IMAGE_VALUES
    assert parsed["image/object/class/label"].tolist() == [1, 2]
    assert parsed["image/object/class/text"].tolist() == [b"cat", b"dog"]
    for side in ("xmin", "ymin", "xmax", "ymax"):
        np.testing.assert_array_equal(
            parsed[f"image/object/bbox/{side}"], np.float32([getattr(box, side) for box in boxes])
        )


def test_an_image_without_objects_has_empty_object_lists():
    parsed = parse(
        encode_example([LabelledRow(row(2, ()), ())], IMAGE, LabelMode.DETECTION),
        object_detection_spec(),
    )
    assert all(parsed[key].size == 0 for key in parsed if key.startswith("image/object/"))
    assert parsed["image/height"] == 10


def test_feature_spec_says_which_keys_hold_lists():
    def lists(mode):
        return sorted(key for key, spec in feature_spec(LabelMode(mode)).items() if spec.list)

    assert lists("single") == []
    assert lists("multi") == ["image/class/label", "image/class/text"]
    assert lists("detection") == sorted(object_detection_spec().keys() - IMAGE_VALUES.keys())
    assert feature_spec("detection")["image/object/bbox/xmin"].dtype == "float"


BOXES = (Box(0.1, 0.2, 0.3, 0.4), Box(1 / 3, 0.0, 1.0, 2 / 3))


@pytest.mark.parametrize(
    ("mode", "before", "now"),
    [
        # A new class sorted first: every id moves up by one.
        (LabelMode.SINGLE, [(("cat",), (0,))], [(("cat",), (1,))]),
        # Relabelled: another text, another id.
        (LabelMode.SINGLE, [(("cat",), (0,))], [(("dog",), (3,))]),
        # Two rows of one image, merged: a label once, whatever rows repeat it.
        (LabelMode.MULTI, [(("cat",), (0,)), (("dog",), (1,))], [(("cat", "dog"), (2, 0))]),
        (
            LabelMode.DETECTION,
            [(("cat",), (0,)), (("dog",), (1,))],
            [(("dog",), (1,)), (("dog",), (1,))],
        ),
    ],
)
def test_a_copied_example_relabelled_is_the_example_its_rows_make_now(mode, before, now):
    """examples.relabelled: a reusing run's copy of an earlier example, its label
    fields written from its rows now, is byte for byte what encode_example makes of them."""

    def rows(labelled):
        return [
            LabelledRow(
                row(line, labels, BOXES[line : line + 1] if mode == LabelMode.DETECTION else ()),
                ids,
            )
            for line, (labels, ids) in enumerate(labelled)
        ]

    earlier = encode_example(rows(before), IMAGE, mode)
    assert relabelled(earlier, rows(now), mode) == encode_example(rows(now), IMAGE, mode)
    assert relabelled(earlier, rows(before), mode) == earlier
