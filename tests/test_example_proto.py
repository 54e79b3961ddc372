"""Example bytes written without TensorFlow (core/worker/example_proto.py) are TensorFlow's own:
`tf.train.Example.SerializeToString(deterministic=True)` of the same features, for every
kind of feature, keys that begin others, empty lists, negative and large ints, floats past
float32's range, and keys in any order and script; and so are an Example's bytes with
some features written anew (with_features: a copied example's labels)."""

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from image_tfrecords.core.worker.example_proto import (
    BYTES,
    FLOAT,
    INT64,
    first_bytes_values,
    serialize_example,
    with_features,
)

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


@given(FEATURES, FEATURES)
def test_features_written_anew_give_the_bytes_of_the_whole(kept, new):
    assert with_features(serialize_example(kept), new) == tensorflows(kept | new)


@pytest.mark.parametrize(
    "foreign",
    [
        b"\x12\x00",  # a second field beside Example.features
        b"\x0a\x02\x12\x00",  # a field of Features that is not a map entry
        b"\x08\x01",  # a varint where every field is length-delimited
        b"\x0a\x05\x0a\x03",  # cut short
    ],
)
def test_bytes_that_are_not_an_example_as_written_here_are_refused_not_trimmed(foreign):
    """A copied record comes from an earlier output others may write to: what cannot be
    kept whole is an error (its image is read again), never dropped unseen."""
    record = serialize_example({"image/source_id": (BYTES, [b"a.jpg"])}) + foreign
    for read in (
        lambda: with_features(record, {"image/class/label": (INT64, [1])}),
        lambda: first_bytes_values(record, frozenset({"image/source_id"})),
    ):
        with pytest.raises(ValueError):
            read()
