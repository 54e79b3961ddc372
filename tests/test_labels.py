"""tf.Transform label ids: vocabulary from TRAIN only, applied to every split."""

import apache_beam as beam
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.labels import LABEL_VOCABULARY, AnalyzeLabels, ApplyLabels
from worker.records import LabelledRow
from transforms.manifest import Box, ManifestRow
from transforms.run_settings import RunSettings
from transforms.vocabulary_file import PinnedVocabulary, write_pinned_vocabulary


def row(line, split, label):
    return ManifestRow("m.csv", line, f"{split},x{line}.jpg,{label}", split,
                       f"/x{line}.jpg", (label,))


TRAIN = [row(1, "train", "cat"), row(2, "train", "dog"), row(3, "train", "cat"),
         row(4, "train", "été")]
OTHERS = [row(5, "test", "dog"), row(6, "validation", "bird")]


def apply_labels(p, tmp_path, oov_bucket, rows):
    """TRAIN -> transform_fn (written to tmp_path/out) -> applied to `rows`."""
    settings = RunSettings(unseen_label="oov" if oov_bucket else "error")
    transform_fn = (p | "Train" >> beam.Create(TRAIN)
                    | AnalyzeLabels(settings, str(tmp_path / "tmp")))
    _ = transform_fn | tft_beam.WriteTransformFn(str(tmp_path / "out"))
    return p | "Rows" >> beam.Create(rows) | ApplyLabels(transform_fn, settings)


def test_vocabulary_is_trains_by_frequency_and_unseen_labels_are_dead_letters(tmp_path):
    with TestPipeline() as p:
        labelled = apply_labels(p, tmp_path, False, TRAIN + OTHERS)
        assert_that(labelled.labelled | "Ids" >> beam.Map(lambda l: (l.row.line, l.label_ids)),
                    equal_to([(1, (0,)), (2, (2,)), (3, (0,)), (4, (1,)), (5, (2,))]), label="ids")
        assert_that(labelled.dead_letters | "Dead" >> beam.Map(lambda d: (d.line, d.reason)),
                    equal_to([(6, "unseen_label")]), label="dead")
    vocabulary = tft.TFTransformOutput(str(tmp_path / "out")).vocabulary_by_name(
        LABEL_VOCABULARY)
    # Most frequent first; ties in descending byte order (tf.Transform's rule).
    assert [w.decode() for w in vocabulary] == ["cat", "été", "dog"]


def test_oov_policy_keeps_unseen_labels_with_the_bucket_id(tmp_path):
    with TestPipeline() as p:
        labelled = apply_labels(p, tmp_path, True, OTHERS)
        assert_that(labelled.labelled | beam.Map(lambda l: (l.row.labels, l.label_ids)),
                    equal_to([(("dog",), (2,)), (("bird",), (3,))]))


def test_rows_come_through_unchanged(tmp_path):
    with TestPipeline() as p:
        labelled = apply_labels(p, tmp_path, False, TRAIN)
        assert_that(labelled.labelled | beam.Map(lambda l: l.row), equal_to(TRAIN))


def test_a_labelled_row_survives_its_json_round_trip():
    # WriteShards groups rows as this JSON: every field must come back equal and typed.
    labelled = LabelledRow(ManifestRow("m.csv", 3, "raw,\u00e9t\u00e9", "train", "/x.jpg",
                                       ("cat", "été"), (Box(0.1, 0.2, 0.3, 0.4),) * 2,
                                       (7, 0.5, "wet")), (0, 4), (2,))
    assert LabelledRow.from_json(labelled.to_json()) == labelled
    assert type(LabelledRow.from_json(labelled.to_json()).row.boxes[0]) is Box


def multi(line, split, *labels):
    return ManifestRow("m.csv", line, "raw", split, f"/m{line}.jpg", labels)


def test_multi_label_vocabulary_covers_every_train_label(tmp_path):
    train = [multi(1, "train", "cat", "dog"), multi(2, "train", "cat"),
             multi(3, "train", "fish", "cat")]
    others = [multi(4, "test", "dog", "fish"), multi(5, "test", "cat", "bird")]
    with TestPipeline() as p:
        transform_fn = (p | "Train" >> beam.Create(train)
                        | AnalyzeLabels(RunSettings(label_mode="multi"), str(tmp_path / "tmp")))
        _ = transform_fn | tft_beam.WriteTransformFn(str(tmp_path / "out"))
        labelled = (p | "Rows" >> beam.Create(train + others)
                    | ApplyLabels(transform_fn, RunSettings(label_mode="multi")))
        assert_that(labelled.labelled | "Ids" >> beam.Map(lambda l: (l.row.line, l.label_ids)),
                    equal_to([(1, (0, 2)), (2, (0,)), (3, (1, 0)), (4, (2, 1))]), label="ids")
        assert_that(labelled.dead_letters | "Dead" >> beam.Map(lambda d: (d.line, d.message)),
                    equal_to([(5, "label 'bird' does not occur in the TRAIN split")]),
                    label="dead")
    vocabulary = tft.TFTransformOutput(str(tmp_path / "out")).vocabulary_by_name(
        LABEL_VOCABULARY)
    assert [w.decode() for w in vocabulary] == ["cat", "fish", "dog"]


def test_a_pinned_vocabulary_gives_its_ids_and_is_what_the_transform_fn_carries(tmp_path):
    pinned = write_pinned_vocabulary(PinnedVocabulary("synsets.txt", ("dog", "zebra", "cat")),
                                     str(tmp_path / "pinned"))
    with TestPipeline() as p:
        transform_fn = (p | "Train" >> beam.Create(TRAIN)
                        | AnalyzeLabels(RunSettings(), str(tmp_path / "tmp"), pinned_file=pinned))
        _ = transform_fn | tft_beam.WriteTransformFn(str(tmp_path / "out"))
        labelled = (p | "Rows" >> beam.Create(TRAIN + OTHERS)
                    | ApplyLabels(transform_fn, RunSettings(), pinned_from="synsets.txt"))
        assert_that(labelled.labelled | "Ids" >> beam.Map(lambda l: (l.row.line, l.label_ids)),
                    equal_to([(1, (2,)), (2, (0,)), (3, (2,)), (5, (0,))]), label="ids")
        # A TRAIN label outside the pinned list is unseen too; the message names the list.
        assert_that(labelled.dead_letters | "Dead" >> beam.Map(lambda d: (d.line, d.message)),
                    equal_to([(4, "label 'été' is not in the pinned vocabulary synsets.txt"),
                              (6, "label 'bird' is not in the pinned vocabulary synsets.txt")]),
                    label="dead")
    output = tft.TFTransformOutput(str(tmp_path / "out"))
    # "zebra" has no row at all and keeps its id: the user asked for it.
    assert [w.decode() for w in output.vocabulary_by_name(LABEL_VOCABULARY)] == [
        "dog", "zebra", "cat"]
