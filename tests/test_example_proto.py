"""Example bytes written without TensorFlow (core/example_proto.py) are TensorFlow's own:
`tf.train.Example.SerializeToString(deterministic=True)` of the same features, for every
kind of feature, keys that begin others, empty lists, negative and large ints, floats past
float32's range, and keys in any order and script."""

import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from image_tfrecords.core.example_proto import BYTES, FLOAT, INT64, serialize_example

_LIST = {BYTES: "bytes_list", FLOAT: "float_list", INT64: "int64_list"}
VALUES = {
    BYTES: st.lists(st.binary(max_size=300), max_size=4),
    FLOAT: st.lists(st.floats(allow_nan=False, width=64), max_size=4),
    INT64: st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=4),
}
FEATURES = st.dictionaries(
    st.text(min_size=0, max_size=12),
    st.sampled_from(sorted(VALUES)).flatmap(lambda kind: st.tuples(st.just(kind), VALUES[kind])),
    max_size=8,
)


def tensorflows(features):
    example = tf.train.Example()
    for key, (kind, values) in features.items():
        getattr(example.features.feature[key], _LIST[kind]).value.extend(values)
    return example.SerializeToString(deterministic=True)


@given(FEATURES)
def test_the_bytes_are_tensorflows(features):
    assert serialize_example(features) == tensorflows(features)


def test_an_image_example_is_tensorflows_and_parses_back():
    features = {
        "image/encoded": (BYTES, [bytes(range(256)) * 600]),  # a multi-byte length
        "image/height": (INT64, [480]),
        "image/object/bbox/xmin": (FLOAT, [0.1, 1 / 3]),
        "image/object/class/label": (INT64, []),
        "é/text": (BYTES, ["été".encode()]),
        # A categorical extra column: a key that begins another sorts after it.
        "file_type": (INT64, [2]),
        "file_type/text": (BYTES, [b"jpg"]),
    }
    serialized = serialize_example(features)
    assert serialized == tensorflows(features)
    parsed = tf.train.Example.FromString(serialized).features.feature
    assert parsed["image/height"].int64_list.value == [480]
    assert parsed["image/object/class/label"].HasField("int64_list")
