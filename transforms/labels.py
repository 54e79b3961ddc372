"""Label ids with tf.Transform: the vocabulary is analysed on TRAIN (or pinned by the user)
and applied to every split.

Only the labels go through TensorFlow, to analyse them: the transform_fn's input is
`label` (and each categorical column), exactly what a serving model feeds it. The labels
reach it as the chunks' surveys counted them on TRAIN (core/worker/row_tasks.py): each
distinct value once (sorted order, below) or each row one instance (frequency order).
The ids are then given to every row, in the worker processes that pack the rows, by a
lookup of the vocabulary assets the transform_fn saved (core/worker/label_ids.py), which
gives the ids the transform_fn gives (tests/test_label_ids.py), without a TensorFlow
graph run or an Arrow round trip per row.

A pinned vocabulary (--vocabulary, see vocabulary_file.py) is a text file that
tf.Transform's apply_vocabulary reads as an asset: the SavedModel copies it to
transform_fn/assets/label, so the published transform_fn carries the pinned ids as it
would carry computed ones.

Computed ids follow --label_order. `sorted` (the default) orders the labels by their text,
so an id depends only on the set of TRAIN labels, not on how often each occurs nor on
which images later turn out broken (Keras' image_dataset_from_directory, torchvision's
and TFDS's ImageFolder sort class names alike). tf.Transform orders a vocabulary by count,
then by descending bytes, and has no sorted order of its own; so the distinct TRAIN values
are gathered in Beam (a few, however many rows there are), sorted, and fed to it once
each, the k-th of n with the weight n - k: the weighted count order is then the sorted
order. The weights are inputs of the analysis only: no output depends on them, so the
saved transform_fn still maps `label` alone (TFTransformOutput supplies inputs that
no output needs; tests/test_labels.py feeds it `label` only). `frequency` is
TFRecorder's order: every TRAIN row that passed the row checks counts once.
"""

import functools
from collections.abc import Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.public import tfxio

from image_tfrecords.core.records.choices import LabelMode, LabelOrder
from image_tfrecords.core.records.naming import LABEL_VOCABULARY
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.schema import CATEGORICAL, ExtraColumn
from image_tfrecords.core.worker.label_ids import UNSEEN_ID
from image_tfrecords.core.worker.row_tasks import ChunkSurvey

LABEL = "label"
LABEL_ID = "label_id"

_BYTES_LIST = pa.large_list(pa.large_binary())
_FLOAT_LIST = pa.large_list(pa.float32())


def _input_config(
    label_mode: LabelMode, categorical: Sequence[str], weighted: bool
) -> tfxio.TensorAdapterConfig:
    """The tensor `label` is for the transform_fn: a string per row, or a list of them
    (multi-label, and detection, where a row may be an image without objects); each
    categorical extra column is one string per row. `weighted`: each column has a twin,
    order_weight(column), holding a weight per value (see the module's docstring).

    Single labels stay a dense scalar, so a serving model feeds plain strings.
    """

    def scalar(name: str) -> schema_pb2.TensorRepresentation:
        return schema_pb2.TensorRepresentation(
            dense_tensor=schema_pb2.TensorRepresentation.DenseTensor(
                column_name=name, shape=schema_pb2.FixedShape()
            )
        )

    def varlen(name: str) -> schema_pb2.TensorRepresentation:
        return schema_pb2.TensorRepresentation(
            varlen_sparse_tensor=schema_pb2.TensorRepresentation.VarLenSparseTensor(
                column_name=name
            )
        )

    label_tensor = scalar if label_mode is LabelMode.SINGLE else varlen
    tensors = {LABEL: label_tensor(LABEL)} | {name: scalar(name) for name in categorical}
    columns = [(name, _BYTES_LIST) for name in tensors]
    if weighted:
        tensors |= {order_weight(LABEL): label_tensor(order_weight(LABEL))}
        tensors |= {order_weight(name): scalar(order_weight(name)) for name in categorical}
        columns += [(order_weight(name), _FLOAT_LIST) for name in (LABEL, *categorical)]
    return tfxio.TensorAdapterConfig(pa.schema(columns), tensors)


def preprocessing_fn(
    inputs: dict,
    *,
    oov_bucket: bool,
    categorical: Sequence[str] = (),
    pinned_file: str | None = None,
    weighted: bool = False,
) -> dict:
    """label -> label_id (a list of labels -> a list of ids); ids follow the vocabulary
    tf.Transform computes on TRAIN, or the lines of `pinned_file` (a file named
    LABEL_VOCABULARY) when the user pinned them. Likewise each categorical column ->
    `<column>_id`, with a vocabulary named after it.

    Computed, 0 is the value of most weight (`weighted`: the sum of its order_weight
    inputs, see the module's docstring) or count; ties go by descending bytes
    (tf.Transform's order). An unseen value gets id len(vocabulary) with `oov_bucket`,
    otherwise UNSEEN_ID.
    """
    unseen = {"num_oov_buckets": 1} if oov_bucket else {"default_value": UNSEEN_ID}

    def computed_ids(name: str, vocabulary: str) -> tf.Tensor | tf.SparseTensor:
        weights = inputs[order_weight(name)] if weighted else None
        if isinstance(weights, tf.SparseTensor):
            weights = weights.values  # tf.Transform pairs them with the labels' values
        return tft.compute_and_apply_vocabulary(
            inputs[name], vocab_filename=vocabulary, weights=weights, **unseen
        )

    if pinned_file:
        label_ids = tft.apply_vocabulary(inputs[LABEL], pinned_file, **unseen)
    else:
        label_ids = computed_ids(LABEL, LABEL_VOCABULARY)
    outputs = {LABEL_ID: label_ids}
    for name in categorical:
        outputs[category_id(name)] = computed_ids(name, name)
    return outputs


def order_weight(column: str) -> str:
    """The analysis input that weighs `column`'s values into sorted order."""
    return f"{column}_order_weight"


def category_id(column: str) -> str:
    return f"{column}_id"


def categorical_columns(extra_columns: Sequence[ExtraColumn]) -> tuple[tuple[str, int], ...]:
    """(name, place in ManifestRow.extras) of each categorical extra column."""
    return tuple(
        (column.name, index)
        for index, column in enumerate(extra_columns)
        if column.type == CATEGORICAL
    )


class AnalyzeLabels(beam.PTransform):
    """ChunkSurveys -> the transform_fn holding the label (and category) vocabularies,
    analysed on the TRAIN rows each survey counted."""

    def __init__(
        self, settings: RunSettings, temp_dir: str, pinned_file: str | None = None
    ) -> None:
        super().__init__()
        self._oov_bucket = settings.oov_bucket
        self._label_mode = settings.label_mode
        self._sorted = settings.label_order is LabelOrder.SORTED
        self._categorical = tuple(name for name, _ in categorical_columns(settings.extra_columns))
        self._temp_dir = temp_dir
        self._pinned_file = pinned_file  # see write_pinned_vocabulary

    def expand(self, surveys: beam.PCollection):
        if self._sorted:
            batches = (
                surveys
                | "TrainValues" >> beam.FlatMap(_train_values, self._categorical)
                | "Distinct" >> beam.Distinct()
                | "AllValues" >> beam.combiners.ToList()
                | "SortedRows" >> beam.FlatMap(_sorted_rows, self._label_mode, self._categorical)
            )
        else:
            batches = surveys | "TrainRows" >> beam.FlatMap(_train_rows, self._categorical)
        with tft_beam.Context(temp_dir=self._temp_dir):
            return (
                batches,
                _input_config(self._label_mode, self._categorical, self._sorted),
            ) | "Vocabulary" >> tft_beam.AnalyzeDataset(
                functools.partial(
                    preprocessing_fn,
                    oov_bucket=self._oov_bucket,
                    categorical=self._categorical,
                    pinned_file=self._pinned_file,
                    weighted=self._sorted,
                )
            )


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
    yield pa.RecordBatch.from_arrays(
        [pa.array(values, _BYTES_LIST).take(repeat) for values in columns.values()], list(columns)
    )


def _train_values(survey: ChunkSurvey, categorical: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(column, value) for each value of the chunk's TRAIN rows."""
    for group in survey.train_labels:
        for label in group.labels:
            yield LABEL, label
        yield from zip(categorical, group.categories)


def _sorted_rows(
    values: list[tuple[str, str]], label_mode: LabelMode, categorical: Sequence[str]
) -> Iterator[pa.RecordBatch]:
    """The distinct TRAIN values, each column's sorted, as rows for tf.Transform: row k
    holds each column's k-th value, weighted n - k (n: the column's count of values),
    so that tf.Transform's order, by weight, is the sorted one.

    A column with fewer values fills its rows with its first value weighted 0 (a
    label list with none: no value), which changes no sum. (float32 holds every whole
    number up to 2**24, more values than a vocabulary holds.)
    """
    by_column = {
        name: sorted(value for column, value in values if column == name)
        for name in (LABEL, *categorical)
    }
    rows = max(map(len, by_column.values()))
    if not rows:
        return
    columns, weights = {}, {}
    for name, found in by_column.items():
        ranked = [
            ([value.encode()], [float(len(found) - rank)]) for rank, value in enumerate(found)
        ]
        scalar = name != LABEL or label_mode is LabelMode.SINGLE
        filler = ([found[0].encode()], [0.0]) if scalar else ([], [])
        ranked += [filler] * (rows - len(found))
        columns[name] = pa.array([value for value, _ in ranked], _BYTES_LIST)
        weights[order_weight(name)] = pa.array([weight for _, weight in ranked], _FLOAT_LIST)
    yield pa.RecordBatch.from_arrays([*columns.values(), *weights.values()], [*columns, *weights])
