"""transforms/batch.py: records that travel between steps as one element are pickled
whole by the coder registered for a Batch, not one pickle per record."""

from typing import Any

import apache_beam as beam

from image_tfrecords.core.records.records import ExampleRef
from image_tfrecords.transforms.batch import Batch, batches_by_key


def refs(count):
    return [
        ExampleRef("train", 0, position, "m.csv", position, f"/{position}.jpg", ("cat",), 7, None)
        for position in range(count)
    ]


def test_a_batch_is_pickled_once_and_comes_back_the_same():
    # What a step declaring a Batch gets, and what one without a type hint gets.
    coder, undeclared = beam.coders.registry.get_coder(Batch), beam.coders.registry.get_coder(Any)
    batch = Batch(refs(100))
    plain, whole = undeclared.encode(tuple(batch)), coder.encode(batch)
    # A plain tuple's NamedTuples are pickled one by one, each naming its class; a Batch
    # in one piece, which names it once.
    assert (plain.count(b"ExampleRef"), whole.count(b"ExampleRef")) == (100, 1)
    assert len(whole) < len(plain) / 2
    decoded = coder.decode(whole)
    assert type(decoded) is Batch and decoded == batch


def test_batches_by_key_keep_each_keys_values_in_order():
    pairs = [("b", 1), ("a", 2), ("b", 3), ("a", 4), ("c", 5)]
    assert list(batches_by_key(pairs)) == [("b", (1, 3)), ("a", (2, 4)), ("c", (5,))]
    assert all(type(values) is Batch for _, values in batches_by_key(pairs))
