"""tf.Transform label ids: vocabulary from TRAIN only (as the chunks' surveys count it),
applied to every split by the lookup the packing step makes."""

import apache_beam as beam
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from apache_beam.testing.test_pipeline import TestPipeline

from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.naming import LABEL_VOCABULARY
from image_tfrecords.core.records.records import Box, LabelledRow, ManifestRow
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.worker.label_ids import LabelLookup
from image_tfrecords.core.worker.row_tasks import survey
from image_tfrecords.transforms.labels import AnalyzeLabels
from image_tfrecords.transforms.vocabulary_file import PinnedVocabulary, write_pinned_vocabulary


def row(line, split, label):
    return ManifestRow(
        "m.csv", line, f"{split},x{line}.jpg,{label}", split, f"/x{line}.jpg", (label,)
    )


TRAIN = [
    row(1, "train", "cat"),
    row(2, "train", "dog"),
    row(3, "train", "cat"),
    row(4, "train", "été"),
]
OTHERS = [row(5, "test", "dog"), row(6, "validation", "bird")]


def labelled_by(tmp_path, settings, train, pinned_file=None, pinned_from=None):
    """The lookup of the transform_fn analysed on the `train` rows (as one chunk's survey)
    and written to tmp_path/out, as the packing step makes it."""
    with TestPipeline() as p:
        _ = (
            p
            | beam.Create([survey(train, 1)])
            | AnalyzeLabels(settings, str(tmp_path / "tmp"), pinned_file)
            | tft_beam.WriteTransformFn(str(tmp_path / "out"))
        )
    where = (
        f"is not in the pinned vocabulary {pinned_from}"
        if pinned_from
        else "does not occur in the TRAIN split"
    )
    return LabelLookup(
        str(tmp_path / "out" / "transform_fn"), (LABEL_VOCABULARY,), (), settings.oov_bucket, where
    ).labelled


def ids_and_dead_letters(label, rows):
    """((line, ids) of the labelled rows, (line, reason, message) of the dead letters)."""
    results = [label(row) for row in rows]
    return (
        [(r.row.line, r.label_ids) for r in results if isinstance(r, LabelledRow)],
        [(r.line, r.reason, r.message) for r in results if isinstance(r, DeadLetter)],
    )


def vocabulary_of(tmp_path, name=LABEL_VOCABULARY):
    output = tft.TFTransformOutput(str(tmp_path / "out"))
    return [word.decode() for word in output.vocabulary_by_name(name)]


def test_vocabulary_is_trains_labels_sorted_and_unseen_labels_are_dead_letters(tmp_path):
    train = TRAIN + [
        row(7, "train", "zebra"),
        row(8, "train", "zebra"),
        row(9, "train", "zebra"),
        row(10, "train", "Ant"),
    ]
    label = labelled_by(tmp_path, RunSettings(), train)
    ids, dead = ids_and_dead_letters(label, train + OTHERS)
    # By the labels' text, not their counts: Python's str order, which is the UTF-8
    # bytes' order ("Ant" before "cat", "été" after "zebra").
    assert vocabulary_of(tmp_path) == ["Ant", "cat", "dog", "zebra", "été"]
    assert ids == [
        (1, (1,)),
        (2, (2,)),
        (3, (1,)),
        (4, (4,)),
        (7, (3,)),
        (8, (3,)),
        (9, (3,)),
        (10, (0,)),
        (5, (2,)),
    ]
    assert dead == [(6, "unseen_label", "label 'bird' does not occur in the TRAIN split")]


def test_sorted_ids_depend_only_on_the_set_of_labels(tmp_path):
    once = [row(1, "train", "rocket"), row(2, "train", "cat")]
    often = once + [row(line, "train", "rocket") for line in range(3, 9)]
    labelled_by(tmp_path / "once", RunSettings(), once)
    labelled_by(tmp_path / "often", RunSettings(), often)
    assert (
        vocabulary_of(tmp_path / "once") == vocabulary_of(tmp_path / "often") == ["cat", "rocket"]
    )


def test_label_order_frequency_is_tfrecorders(tmp_path):
    label = labelled_by(tmp_path, RunSettings(label_order="frequency"), TRAIN)
    ids, _ = ids_and_dead_letters(label, TRAIN + OTHERS)
    assert ids == [(1, (0,)), (2, (2,)), (3, (0,)), (4, (1,)), (5, (2,))]
    # Most frequent first; ties in descending byte order (tf.Transform's rule).
    assert vocabulary_of(tmp_path) == ["cat", "été", "dog"]


@pytest.mark.parametrize("label_order", ["sorted", "frequency"])
def test_the_transform_fn_maps_label_alone_as_the_shards_ids(tmp_path, label_order):
    # What a serving model feeds: `label` only, not the weights the analysis read.
    settings = RunSettings(label_order=label_order)
    label = labelled_by(tmp_path, settings, TRAIN)
    output = tft.TFTransformOutput(str(tmp_path / "out"))
    fed = [row.labels[0] for row in TRAIN]
    served = output.transform_raw_features({"label": tf.constant(fed)})["label_id"]
    assert served.numpy().tolist() == [label(row).label_ids[0] for row in TRAIN]
    assert set(output.transform_features_layer()({"label": tf.constant(["dog"])})) == {"label_id"}


def test_oov_policy_keeps_unseen_labels_with_the_bucket_id(tmp_path):
    label = labelled_by(tmp_path, RunSettings(unseen_label="oov"), TRAIN)
    assert [(r.row.labels, r.label_ids) for r in map(label, OTHERS)] == [
        (("dog",), (1,)),
        (("bird",), (3,)),
    ]


def test_rows_come_through_unchanged(tmp_path):
    label = labelled_by(tmp_path, RunSettings(), TRAIN)
    assert [label(row).row for row in TRAIN] == TRAIN


def test_a_labelled_row_survives_its_json_round_trip():
    # WriteShards groups rows as this JSON: every field must come back equal and typed.
    labelled = LabelledRow(
        ManifestRow(
            "m.csv",
            3,
            "raw,\u00e9t\u00e9",
            "train",
            "/x.jpg",
            ("cat", "été"),
            (Box(0.1, 0.2, 0.3, 0.4),) * 2,
            (7, 0.5, "wet"),
        ),
        (0, 4),
        (2,),
    )
    assert LabelledRow.from_json(labelled.to_json()) == labelled
    assert type(LabelledRow.from_json(labelled.to_json()).row.boxes[0]) is Box


def multi(line, split, *labels):
    return ManifestRow("m.csv", line, "raw", split, f"/m{line}.jpg", labels)


def test_multi_label_vocabulary_covers_every_train_label(tmp_path):
    train = [
        multi(1, "train", "cat", "dog"),
        multi(2, "train", "cat"),
        multi(3, "train", "fish", "cat"),
    ]
    others = [multi(4, "test", "dog", "fish"), multi(5, "test", "cat", "bird")]
    label = labelled_by(tmp_path, RunSettings(label_mode="multi"), train)
    ids, dead = ids_and_dead_letters(label, train + others)
    assert ids == [(1, (0, 1)), (2, (0,)), (3, (2, 0)), (4, (1, 2))]
    assert dead == [(5, "unseen_label", "label 'bird' does not occur in the TRAIN split")]
    assert vocabulary_of(tmp_path) == ["cat", "dog", "fish"]


def test_a_pinned_vocabulary_gives_its_ids_and_is_what_the_transform_fn_carries(tmp_path):
    pinned = write_pinned_vocabulary(
        PinnedVocabulary("synsets.txt", ("dog", "zebra", "cat")), str(tmp_path / "pinned")
    )
    label = labelled_by(tmp_path, RunSettings(), TRAIN, pinned, pinned_from="synsets.txt")
    ids, dead = ids_and_dead_letters(label, TRAIN + OTHERS)
    assert ids == [(1, (2,)), (2, (0,)), (3, (2,)), (5, (0,))]
    # A TRAIN label outside the pinned list is unseen too; the message names the list.
    assert [(line, message) for line, _, message in dead] == [
        (4, "label 'été' is not in the pinned vocabulary synsets.txt"),
        (6, "label 'bird' is not in the pinned vocabulary synsets.txt"),
    ]
    output = tft.TFTransformOutput(str(tmp_path / "out"))
    # "zebra" has no row at all and keeps its id: the user asked for it.
    assert [w.decode() for w in output.vocabulary_by_name(LABEL_VOCABULARY)] == [
        "dog",
        "zebra",
        "cat",
    ]
