"""Label ids looked up in the vocabulary assets equal what the saved transform_fn gives,
for every label mode, computed or pinned, with and without the OOV bucket, for labels
TRAIN saw and labels it did not (odd ones included)."""

import apache_beam as beam
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from apache_beam.testing.test_pipeline import TestPipeline

from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.schema import CATEGORICAL, ExtraColumn
from image_tfrecords.core.worker.label_ids import Vocabulary
from image_tfrecords.core.worker.row_tasks import survey
from image_tfrecords.transforms.labels import LABEL, LABEL_ID, AnalyzeLabels, category_id
from image_tfrecords.transforms.vocabulary_file import PinnedVocabulary, write_pinned_vocabulary

# TRAIN's labels, with repeats (with --label_order frequency, ids follow them, ties by
# descending bytes) and
# labels a manifest can hold: spaces, accents, a comma, quotes, a carriage return.
TRAIN = ["cat", "cat", "dog", "Dog", "chat noir", "é", "a,b", 'say "hi"', "x\ry", "dog", "日本"]
UNSEEN = ["bird", "CAT", "", " cat", "x\r", "\ry", "日"]
COLOURS = ["red", "red", "blue"]


def train_rows(label_mode):
    rows = []
    for line, label in enumerate(TRAIN, start=1):
        labels = (label, TRAIN[line % len(TRAIN)]) if label_mode == "multi" else (label,)
        rows.append(
            ManifestRow(
                "m.csv", line, "raw", "train", f"{line}.jpg", labels, extras=(COLOURS[line % 3],)
            )
        )
    if label_mode == "detection":
        rows.append(ManifestRow("m.csv", 99, "raw", "train", "empty.jpg", (), extras=("red",)))
    return rows


def saved_transform_fn(tmp_path, settings, pinned=None):
    pinned_file = (
        write_pinned_vocabulary(PinnedVocabulary("given.txt", pinned), str(tmp_path / "pinned"))
        if pinned
        else None
    )
    with TestPipeline() as p:
        _ = (
            p
            | beam.Create([survey(train_rows(settings.label_mode.value), 1, categorical=(0,))])
            | AnalyzeLabels(settings, str(tmp_path / "tft"), pinned_file)
            | tft_beam.WriteTransformFn(str(tmp_path / "out"))
        )
    return tft.TFTransformOutput(str(tmp_path / "out"))


def transformed(output, labels, colours, label_mode):
    """What the saved transform_fn gives these rows: a label (or a list) and a colour each."""
    if label_mode == "single":
        label = tf.constant([label.encode() for label in labels])
    else:  # a list per row: here one label each
        label = tf.RaggedTensor.from_row_lengths(
            [label.encode() for label in labels], [1] * len(labels)
        ).to_sparse()
    features = {LABEL: label, "colour": tf.constant([c.encode() for c in colours])}
    result = output.transform_raw_features(features, drop_unused_features=True)
    ids = result[LABEL_ID]
    ids = (
        ids.numpy().tolist()
        if label_mode == "single"
        else [row[0] for row in tf.RaggedTensor.from_sparse(ids).to_list()]
    )
    return ids, result[category_id("colour")].numpy().tolist()


@pytest.mark.parametrize(
    "label_mode, unseen_label, pinned, label_order",
    [
        ("single", "error", None, "sorted"),
        ("single", "oov", None, "frequency"),
        ("multi", "error", None, "sorted"),
        ("multi", "error", None, "frequency"),
        ("detection", "oov", None, "sorted"),
        ("single", "oov", ("dog", "cat", "é", "bird"), "sorted"),
        ("multi", "error", ("cat", "dog"), "frequency"),
    ],
)
def test_looked_up_ids_are_the_transform_fns(
    tmp_path, label_mode, unseen_label, pinned, label_order
):
    settings = RunSettings(
        label_mode=label_mode,
        unseen_label=unseen_label,
        label_order=label_order,
        extra_columns=(ExtraColumn("colour", CATEGORICAL),),
    )
    output = saved_transform_fn(tmp_path, settings, pinned)
    labels = sorted(set(TRAIN)) + UNSEEN
    colours = [("red", "blue", "green")[i % 3] for i in range(len(labels))]
    expected_labels, expected_colours = transformed(output, labels, colours, label_mode)

    assets = tmp_path / "out" / "transform_fn" / "assets"
    vocabulary = Vocabulary.from_asset((assets / "label").read_bytes(), settings.oov_bucket)
    colour_vocabulary = Vocabulary.from_asset((assets / "colour").read_bytes(), settings.oov_bucket)
    assert [vocabulary.id_of(label) for label in labels] == expected_labels
    assert [colour_vocabulary.id_of(colour) for colour in colours] == expected_colours
    # A categorical column follows --label_order as the labels do ("red" is the more frequent).
    assert list(colour_vocabulary.ids) == (
        [b"blue", b"red"] if label_order == "sorted" else [b"red", b"blue"]
    )
    if not pinned and label_order == "sorted":
        assert list(vocabulary.ids) == sorted({label.encode() for label in TRAIN} - {b"x\ry"})
    # Not a comparison of nothing: seen labels have ids, unseen ones the OOV id or -1.
    assert len(set(expected_labels)) >= (len(pinned) if pinned else 8)
    if not pinned:  # tf.Transform leaves a label holding "\r" out of its vocabulary
        assert b"x\ry" not in vocabulary.ids and b"x" + b"y" not in vocabulary.ids
    unseen_id = len(vocabulary.ids) if settings.oov_bucket else -1
    assert expected_labels[labels.index("bird")] == (
        pinned.index("bird") if pinned and "bird" in pinned else unseen_id
    )
