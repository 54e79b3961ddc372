"""Label ids with tf.Transform: the vocabulary is analysed on TRAIN (or pinned by the user)
and applied to every split.

Only the labels go through TensorFlow, to analyse them: the transform_fn's only input is
`label` (and each categorical column), exactly what a serving model feeds it. The labels
reach it as the chunks' surveys counted them on TRAIN (worker/row_tasks.py), each row
one instance. The ids are then given to every row, in the worker processes that pack the
rows, by a lookup of the vocabulary assets the transform_fn saved (worker/label_ids.py),
which gives the ids the transform_fn gives (tests/test_label_ids.py), without a
TensorFlow graph run or an Arrow round trip per row.

A pinned vocabulary (--vocabulary, see vocabulary_file.py) is a text file that
tf.Transform's apply_vocabulary reads as an asset: the SavedModel copies it to
transform_fn/assets/label, so the published transform_fn carries the pinned ids as it
would carry computed ones.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.public import tfxio

from transforms.vocabulary_file import LABEL_VOCABULARY
from worker.choices import LabelMode
from worker.label_ids import UNSEEN_ID
from worker.row_tasks import ChunkSurvey
from worker.run_settings import RunSettings
from worker.schema import CATEGORICAL, ExtraColumn

LABEL = "label"
LABEL_ID = "label_id"

_BYTES_LIST = pa.large_list(pa.large_binary())


def _input_config(label_mode: LabelMode, categorical: Sequence[str]
                  ) -> tfxio.TensorAdapterConfig:
    """The tensor `label` is for the transform_fn: a string per row, or a list of them
    (multi-label, and detection, where a row may be an image without objects); each
    categorical extra column is one string per row.

    Single labels stay a dense scalar, so a serving model feeds plain strings.
    """
    def scalar(name: str) -> schema_pb2.TensorRepresentation:
        return schema_pb2.TensorRepresentation(
            dense_tensor=schema_pb2.TensorRepresentation.DenseTensor(
                column_name=name, shape=schema_pb2.FixedShape()))

    tensors = {name: scalar(name) for name in categorical}
    if label_mode is not LabelMode.SINGLE:
        tensors[LABEL] = schema_pb2.TensorRepresentation(
            varlen_sparse_tensor=schema_pb2.TensorRepresentation.VarLenSparseTensor(
                column_name=LABEL))
    else:
        tensors[LABEL] = scalar(LABEL)
    columns = [LABEL, *categorical]
    return tfxio.TensorAdapterConfig(pa.schema([(name, _BYTES_LIST) for name in columns]),
                                     tensors)


def preprocessing_fn(inputs: dict, *, oov_bucket: bool, categorical: Sequence[str] = (),
                     pinned_file: str | None = None) -> dict:
    """label -> label_id (a list of labels -> a list of ids); ids follow TRAIN frequency,
    or the lines of `pinned_file` (a file named LABEL_VOCABULARY) when the user pinned them.
    Likewise each categorical column -> `<column>_id`, with a vocabulary named after it.

    0 is the most frequent value; ties go by descending bytes (tf.Transform's order).
    An unseen value gets id len(vocabulary) with `oov_bucket`, otherwise UNSEEN_ID.
    """
    unseen = {"num_oov_buckets": 1} if oov_bucket else {"default_value": UNSEEN_ID}
    if pinned_file:
        label_ids = tft.apply_vocabulary(inputs[LABEL], pinned_file, **unseen)
    else:
        label_ids = tft.compute_and_apply_vocabulary(inputs[LABEL],
                                                     vocab_filename=LABEL_VOCABULARY, **unseen)
    outputs = {LABEL_ID: label_ids}
    for name in categorical:
        outputs[category_id(name)] = tft.compute_and_apply_vocabulary(
            inputs[name], vocab_filename=name, **unseen)
    return outputs


def category_id(column: str) -> str:
    return f"{column}_id"


def categorical_columns(extra_columns: Sequence[ExtraColumn]) -> tuple[tuple[str, int], ...]:
    """(name, place in ManifestRow.extras) of each categorical extra column."""
    return tuple((column.name, index) for index, column in enumerate(extra_columns)
                 if column.type == CATEGORICAL)


class AnalyzeLabels(beam.PTransform):
    """ChunkSurveys -> the transform_fn holding the label (and category) vocabularies,
    analysed on the TRAIN rows each survey counted."""

    def __init__(self, settings: RunSettings, temp_dir: str, pinned_file: str | None = None
                 ) -> None:
        super().__init__()
        self._oov_bucket = settings.oov_bucket
        self._label_mode = settings.label_mode
        self._categorical = tuple(name for name, _ in categorical_columns(
            settings.extra_columns))
        self._temp_dir = temp_dir
        self._pinned_file = pinned_file  # see write_pinned_vocabulary

    def expand(self, surveys: beam.PCollection) -> tuple:
        batches = surveys | "TrainRows" >> beam.FlatMap(_train_rows, self._categorical)
        with tft_beam.Context(temp_dir=self._temp_dir):
            return ((batches, _input_config(self._label_mode, self._categorical))
                    | "Vocabulary" >> tft_beam.AnalyzeDataset(functools.partial(
                        preprocessing_fn, oov_bucket=self._oov_bucket,
                        categorical=self._categorical, pinned_file=self._pinned_file)))


def _train_rows(survey: ChunkSurvey, categorical: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """The chunk's TRAIN rows as tf.Transform reads them: a row per TRAIN row, built from
    the distinct values and repeated in Arrow (the rows' order does not matter to a
    vocabulary)."""
    groups = survey.train_labels
    if not groups:
        return
    repeat = pa.array(np.repeat(np.arange(len(groups)), [group.rows for group in groups]))
    columns = {LABEL: [[label.encode() for label in group.labels] for group in groups]}
    for place, name in enumerate(categorical):
        columns[name] = [[group.categories[place].encode()] for group in groups]
    yield pa.RecordBatch.from_arrays([pa.array(values, _BYTES_LIST).take(repeat)
                                      for values in columns.values()], list(columns))
