"""Label ids with tf.Transform: the vocabulary is analysed on TRAIN and applied to every split.

Only the small manifest rows go through TensorFlow: the row travels beside the label as
a tf.Transform passthrough column, so the transform_fn's only input is `label`, exactly
what a serving model feeds it, and image bytes are loaded later, after shard assignment.
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
from transforms.manifest import DEAD_LETTERS, ManifestRow

LABEL = "label"
LABEL_ID = "label_id"
LABEL_VOCABULARY = "label"  # file name of the vocabulary under transform_fn/assets/
UNSEEN_LABEL_ID = -1  # what the transform gives an unseen label without an OOV bucket

_ROW = "row"  # passthrough column: the serialized ManifestRow
_BYTES_LIST = pa.large_list(pa.large_binary())


def _input_config(label_mode: str, with_row: bool) -> tfxio.TensorAdapterConfig:
    """The tensor `label` is for the transform_fn: a string per row, or a list of them
    (multi-label, and detection, where a row may be an image without objects).

    Single labels stay a dense scalar, so a serving model feeds plain strings.
    """
    if label_mode != "single":
        label = schema_pb2.TensorRepresentation(
            varlen_sparse_tensor=schema_pb2.TensorRepresentation.VarLenSparseTensor(
                column_name=LABEL))
    else:
        label = schema_pb2.TensorRepresentation(
            dense_tensor=schema_pb2.TensorRepresentation.DenseTensor(
                column_name=LABEL, shape=schema_pb2.FixedShape()))
    columns = [(LABEL, _BYTES_LIST)] + ([(_ROW, _BYTES_LIST)] if with_row else [])
    return tfxio.TensorAdapterConfig(pa.schema(columns), {LABEL: label})


def preprocessing_fn(inputs: dict, *, oov_bucket: bool) -> dict:
    """label -> label_id (a list of labels -> a list of ids); ids follow TRAIN frequency.

    0 is the most frequent label; ties go by descending bytes (tf.Transform's order).

    An unseen label gets id len(vocabulary) with `oov_bucket`, otherwise UNSEEN_LABEL_ID.
    """
    unseen = {"num_oov_buckets": 1} if oov_bucket else {"default_value": UNSEEN_LABEL_ID}
    return {LABEL_ID: tft.compute_and_apply_vocabulary(
        inputs[LABEL], vocab_filename=LABEL_VOCABULARY, **unseen)}


class LabelledRow(NamedTuple):
    row: ManifestRow
    label_ids: tuple[int, ...]  # one per row.labels, in the same order


class AnalyzeLabels(beam.PTransform):
    """TRAIN ManifestRows -> the transform_fn holding the label vocabulary."""

    def __init__(self, oov_bucket: bool, temp_dir: str, label_mode: str = "single") -> None:
        super().__init__()
        self._oov_bucket = oov_bucket
        self._label_mode = label_mode
        self._temp_dir = temp_dir

    def expand(self, train_rows: beam.PCollection) -> tuple:
        batches = (train_rows
                   | "Batch" >> beam.BatchElements(min_batch_size=64, max_batch_size=4096)
                   | "ToRecordBatch" >> beam.Map(_labels_batch))
        with tft_beam.Context(temp_dir=self._temp_dir):
            return ((batches, _input_config(self._label_mode, with_row=False))
                    | "Vocabulary" >> tft_beam.AnalyzeDataset(
                        functools.partial(preprocessing_fn, oov_bucket=self._oov_bucket)))


class ApplyLabels(beam.PTransform):
    """ManifestRows -> LabelledRows through `transform_fn`; unseen labels -> DEAD_LETTERS.

    With the OOV bucket an unseen label keeps its row and gets the OOV id instead.
    """

    def __init__(self, transform_fn: tuple, temp_dir: str, label_mode: str = "single") -> None:
        super().__init__()
        self._transform_fn = transform_fn
        self._label_mode = label_mode
        self._temp_dir = temp_dir

    def expand(self, rows: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        batches = (rows
                   | "Batch" >> beam.BatchElements(min_batch_size=64, max_batch_size=4096)
                   | "ToRecordBatch" >> beam.Map(_rows_batch))
        with tft_beam.Context(temp_dir=self._temp_dir, passthrough_keys={_ROW}):
            transformed, _ = (((batches, _input_config(self._label_mode, with_row=True)),
                               self._transform_fn)
                              | "Transform" >> tft_beam.TransformDataset(
                                  output_record_batches=True))
        return transformed | "Unbatch" >> beam.FlatMap(_labelled_rows).with_outputs(
            DEAD_LETTERS, main="labelled")


def _labels_batch(rows: Sequence[ManifestRow]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([_label_column(rows)], [LABEL])


def _rows_batch(rows: Sequence[ManifestRow]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [_label_column(rows), pa.array([[row.to_json().encode()] for row in rows],
                                       _BYTES_LIST)],
        [LABEL, _ROW])


def _label_column(rows: Sequence[ManifestRow]) -> pa.Array:
    return pa.array([[label.encode() for label in row.labels] for row in rows], _BYTES_LIST)


def _labelled_rows(transformed: tuple[pa.RecordBatch, dict]
                   ) -> Iterator[LabelledRow | beam.pvalue.TaggedOutput]:
    batch, _ = transformed
    ids_per_row = batch.column(LABEL_ID).to_pylist()
    serialized_rows = batch.column(_ROW).flatten().to_pylist()
    for label_ids, serialized in zip(ids_per_row, serialized_rows, strict=True):
        row = ManifestRow.from_json(serialized)
        unseen = [label for label, label_id in zip(row.labels, label_ids, strict=True)
                  if label_id == UNSEEN_LABEL_ID]
        if unseen:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, row.dead_letter(
                reasons.UNSEEN_LABEL,
                f"label {', '.join(map(repr, unseen))} does not occur in the TRAIN split"))
        else:
            yield LabelledRow(row, tuple(label_ids))
