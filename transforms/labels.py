"""Label ids with tf.Transform: the vocabulary is analysed on TRAIN (or pinned by the user)
and applied to every split.

Only the labels go through TensorFlow, to analyse them: the transform_fn's only input is
`label` (and each categorical column), exactly what a serving model feeds it. The ids are
then given to every row by a lookup of the vocabulary assets the transform_fn saved
(worker/label_ids.py), which gives the ids the transform_fn gives
(tests/test_label_ids.py), without a TensorFlow graph run or an Arrow round trip per row.

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
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.public import tfxio

from transforms import dead_letters as reasons
from transforms.manifest import DEAD_LETTERS
from transforms.choices import LabelMode
from transforms.run_settings import RunSettings
from transforms.schema import CATEGORICAL, ExtraColumn
from transforms.vocabulary_file import LABEL_VOCABULARY
from worker.label_ids import UNSEEN_ID, Vocabulary
from worker.records import LabelledRow, ManifestRow

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
                   | "ToRecordBatch" >> beam.Map(_record_batch, self._categorical))
        with tft_beam.Context(temp_dir=self._temp_dir):
            return ((batches, _input_config(self._label_mode, self._categorical.names))
                    | "Vocabulary" >> tft_beam.AnalyzeDataset(functools.partial(
                        preprocessing_fn, oov_bucket=self._oov_bucket,
                        categorical=self._categorical.names,
                        pinned_file=self._pinned_file)))


class ApplyLabels(beam.PTransform):
    """ManifestRows -> LabelledRows, ids looked up in the vocabularies of `transform_fn`
    (AnalyzeLabels' output); unseen labels -> DEAD_LETTERS.

    With the OOV bucket an unseen label keeps its row and gets the OOV id instead.
    `pinned_from` (the pinned vocabulary's file, if any) is what unseen labels are
    said to be missing from.
    """

    def __init__(self, transform_fn: tuple, settings: RunSettings,
                 pinned_from: str | None = None) -> None:
        super().__init__()
        self._transform_fn_dir = transform_fn[0]  # a PCollection of the SavedModel's path
        self._settings = settings
        self._pinned_from = pinned_from

    def expand(self, rows: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return rows | "LookUpIds" >> beam.ParDo(
            _LookUpIds(self._settings, self._pinned_from),
            beam.pvalue.AsSingleton(self._transform_fn_dir)).with_outputs(
            DEAD_LETTERS, main="labelled")


class _LookUpIds(beam.DoFn):
    def __init__(self, settings: RunSettings, pinned_from: str | None) -> None:
        self._oov_bucket = settings.oov_bucket
        self._categorical = _Columns.of(settings.extra_columns)
        self._unseen_where = (f"is not in the pinned vocabulary {pinned_from}" if pinned_from
                              else "does not occur in the TRAIN split")
        self._unseen = Metrics.counter("labels", "unseen")
        self._read_from: str | None = None

    def process(self, row: ManifestRow, transform_fn_dir: str
                ) -> Iterator[LabelledRow | beam.pvalue.TaggedOutput]:
        if self._read_from != transform_fn_dir:  # once per DoFn instance
            self._labels, *self._categories = [
                _vocabulary(transform_fn_dir, name, self._oov_bucket)
                for name in (LABEL_VOCABULARY, *self._categorical.names)]
            self._read_from = transform_fn_dir
        label_ids = tuple(map(self._labels.id_of, row.labels))
        category_ids = tuple(vocabulary.id_of(str(row.extras[index])) for vocabulary, index
                             in zip(self._categories, self._categorical.indices))
        if UNSEEN_ID in label_ids:
            self._unseen.inc()
            unseen = [label for label, label_id in zip(row.labels, label_ids)
                      if label_id == UNSEEN_ID]
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, row.dead_letter(
                reasons.UNSEEN_LABEL,
                f"label {', '.join(map(repr, unseen))} {self._unseen_where}"))
        elif UNSEEN_ID in category_ids:
            self._unseen.inc()
            unseen = [f"{name} {row.extras[index]!r}"
                      for name, index, category in zip(*self._categorical, category_ids)
                      if category == UNSEEN_ID]
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, row.dead_letter(
                reasons.UNSEEN_CATEGORY,
                f"{', '.join(unseen)} does not occur in the TRAIN split"))
        else:
            yield LabelledRow(row, label_ids, category_ids)


def _vocabulary(transform_fn_dir: str, name: str, oov_bucket: bool) -> Vocabulary:
    """The vocabulary asset `name` of the SavedModel at `transform_fn_dir`."""
    with FileSystems.open(FileSystems.join(transform_fn_dir, "assets", name),
                          compression_type=CompressionTypes.UNCOMPRESSED) as file:
        return Vocabulary.from_asset(file.read(), oov_bucket)


def _record_batch(rows: Sequence[ManifestRow], categorical: _Columns) -> pa.RecordBatch:
    columns = {LABEL: [[label.encode() for label in row.labels] for row in rows]}
    for name, index in zip(*categorical):
        columns[name] = [[str(row.extras[index]).encode()] for row in rows]
    return pa.RecordBatch.from_arrays([pa.array(values, _BYTES_LIST)
                                       for values in columns.values()], list(columns))
