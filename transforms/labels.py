"""Label ids with tf.Transform: the vocabulary is analysed on TRAIN (or pinned by the user)
and applied to every split.

Only the small manifest rows go through TensorFlow: the row travels beside the label as
a tf.Transform passthrough column, so the transform_fn's only input is `label`, exactly
what a serving model feeds it, and image bytes are loaded later, after shard assignment.

A pinned vocabulary (--vocabulary, see vocabulary_file.py) is a text file that
tf.Transform's apply_vocabulary reads as an asset: the SavedModel copies it to
transform_fn/assets/label, so the published transform_fn carries the pinned ids as it
would carry computed ones.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import apache_beam as beam
import pyarrow as pa
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.public import tfxio

from transforms import dead_letters as reasons
from transforms.manifest import DEAD_LETTERS
from transforms.choices import LabelMode
from transforms.run_settings import RunSettings
from transforms.schema import CATEGORICAL, ExtraColumn
from transforms.vocabulary_file import LABEL_VOCABULARY
from worker.records import LabelledRow, ManifestRow

LABEL = "label"
LABEL_ID = "label_id"
UNSEEN_LABEL_ID = -1  # what the transform gives an unseen label without an OOV bucket

_ROW = "row"  # passthrough column: the serialized ManifestRow
_BYTES_LIST = pa.large_list(pa.large_binary())


def _input_config(label_mode: LabelMode, categorical: Sequence[str], with_row: bool
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
    columns = [LABEL, *categorical, *([_ROW] if with_row else [])]
    return tfxio.TensorAdapterConfig(pa.schema([(name, _BYTES_LIST) for name in columns]),
                                     tensors)


def preprocessing_fn(inputs: dict, *, oov_bucket: bool, categorical: Sequence[str] = (),
                     pinned_file: str | None = None) -> dict:
    """label -> label_id (a list of labels -> a list of ids); ids follow TRAIN frequency,
    or the lines of `pinned_file` (a file named LABEL_VOCABULARY) when the user pinned them.
    Likewise each categorical column -> `<column>_id`, with a vocabulary named after it.

    0 is the most frequent value; ties go by descending bytes (tf.Transform's order).
    An unseen value gets id len(vocabulary) with `oov_bucket`, otherwise UNSEEN_LABEL_ID.
    """
    unseen = {"num_oov_buckets": 1} if oov_bucket else {"default_value": UNSEEN_LABEL_ID}
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


class _Columns(NamedTuple):
    """The categorical extra columns: their names and places in ManifestRow.extras."""

    names: tuple[str, ...]
    indices: tuple[int, ...]

    @classmethod
    def of(cls, extra_columns: Sequence[ExtraColumn]) -> _Columns:
        found = [(column.name, index) for index, column in enumerate(extra_columns)
                 if column.type == CATEGORICAL]
        return cls(tuple(name for name, _ in found), tuple(index for _, index in found))


class AnalyzeLabels(beam.PTransform):
    """TRAIN ManifestRows -> the transform_fn holding the label (and category) vocabularies."""

    def __init__(self, settings: RunSettings, temp_dir: str, pinned_file: str | None = None
                 ) -> None:
        super().__init__()
        self._oov_bucket = settings.oov_bucket
        self._label_mode = settings.label_mode
        self._categorical = _Columns.of(settings.extra_columns)
        self._temp_dir = temp_dir
        self._pinned_file = pinned_file  # see write_pinned_vocabulary

    def expand(self, train_rows: beam.PCollection) -> tuple:
        batches = (train_rows
                   | "Batch" >> beam.BatchElements(min_batch_size=64, max_batch_size=4096)
                   | "ToRecordBatch" >> beam.Map(_record_batch, self._categorical,
                                                 with_row=False))
        with tft_beam.Context(temp_dir=self._temp_dir):
            return ((batches, _input_config(self._label_mode, self._categorical.names,
                                            with_row=False))
                    | "Vocabulary" >> tft_beam.AnalyzeDataset(functools.partial(
                        preprocessing_fn, oov_bucket=self._oov_bucket,
                        categorical=self._categorical.names,
                        pinned_file=self._pinned_file)))


class ApplyLabels(beam.PTransform):
    """ManifestRows -> LabelledRows through `transform_fn`; unseen labels -> DEAD_LETTERS.

    With the OOV bucket an unseen label keeps its row and gets the OOV id instead.
    `pinned_from` (the pinned vocabulary's file, if any) is what unseen labels are
    said to be missing from.
    """

    def __init__(self, transform_fn: tuple, settings: RunSettings, temp_dir: str,
                 pinned_from: str | None = None) -> None:
        super().__init__()
        self._transform_fn = transform_fn
        self._label_mode = settings.label_mode
        self._categorical = _Columns.of(settings.extra_columns)
        self._temp_dir = temp_dir
        self._unseen_where = (f"is not in the pinned vocabulary {pinned_from}" if pinned_from
                              else "does not occur in the TRAIN split")

    def expand(self, rows: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        batches = (rows
                   | "Batch" >> beam.BatchElements(min_batch_size=64, max_batch_size=4096)
                   | "ToRecordBatch" >> beam.Map(_record_batch, self._categorical,
                                                 with_row=True))
        config = _input_config(self._label_mode, self._categorical.names, with_row=True)
        with tft_beam.Context(temp_dir=self._temp_dir, passthrough_keys={_ROW}):
            transformed, _ = (((batches, config), self._transform_fn)
                              | "Transform" >> tft_beam.TransformDataset(
                                  output_record_batches=True))
        return transformed | "Unbatch" >> beam.FlatMap(
            _labelled_rows, self._categorical, self._unseen_where
        ).with_outputs(DEAD_LETTERS, main="labelled")


def _record_batch(rows: Sequence[ManifestRow], categorical: _Columns, with_row: bool
                  ) -> pa.RecordBatch:
    columns = {LABEL: [[label.encode() for label in row.labels] for row in rows]}
    for name, index in zip(*categorical):
        columns[name] = [[str(row.extras[index]).encode()] for row in rows]
    if with_row:
        columns[_ROW] = [[row.to_json().encode()] for row in rows]
    return pa.RecordBatch.from_arrays([pa.array(values, _BYTES_LIST)
                                       for values in columns.values()], list(columns))


def _labelled_rows(transformed: tuple[pa.RecordBatch, dict], categorical: _Columns,
                   unseen_where: str) -> Iterator[LabelledRow | beam.pvalue.TaggedOutput]:
    batch, _ = transformed
    ids_per_row = batch.column(LABEL_ID).to_pylist()
    # One id per row: the flattened list column lines up with the rows.
    category_ids = [batch.column(category_id(name)).flatten().to_pylist()
                    for name in categorical.names]
    serialized_rows = batch.column(_ROW).flatten().to_pylist()
    for position, (label_ids, serialized) in enumerate(
            zip(ids_per_row, serialized_rows, strict=True)):
        row = ManifestRow.from_json(serialized)
        unseen = [label for label, label_id in zip(row.labels, label_ids, strict=True)
                  if label_id == UNSEEN_LABEL_ID]
        row_category_ids = tuple(ids[position] for ids in category_ids)
        unseen_categories = [f"{name} {row.extras[index]!r}"
                             for name, index, category in zip(*categorical, row_category_ids)
                             if category == UNSEEN_LABEL_ID]
        if unseen:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, row.dead_letter(
                reasons.UNSEEN_LABEL,
                f"label {', '.join(map(repr, unseen))} {unseen_where}"))
        elif unseen_categories:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, row.dead_letter(
                reasons.UNSEEN_CATEGORY, f"{', '.join(unseen_categories)} does not occur "
                "in the TRAIN split"))
        else:
            yield LabelledRow(row, tuple(label_ids), row_category_ids)
