"""The manifest's rows, a chunk at a time (core/records/chunks.py), parsed by the worker
processes in each pass (core/worker/row_tasks.py): the pipeline's process sees one element
per chunk, and per pack of rows bound for a shard, never one per row.
"""

from collections.abc import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from image_tfrecords.core.inputs.rows import DEAD_LETTERS, RowRules
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.chunks import RowChunk
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.naming import LABEL_VOCABULARY
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.worker.label_ids import LabelLookup
from image_tfrecords.core.worker.row_tasks import ChunkPacks, ChunkSurvey, PackTask, SurveyTask
from image_tfrecords.transforms import live_progress
from image_tfrecords.transforms.element_types import tagged
from image_tfrecords.transforms.in_workers import RunInWorkers
from image_tfrecords.transforms.labels import categorical_columns
from image_tfrecords.transforms.shards import SIZE_SAMPLE

UNSEEN_IN_TRAIN = "does not occur in the TRAIN split"  # where learnt ids lack a label
PACKS = "packs"  # PackRows' output of ((split, shard), (part, pack))


class SurveyRows(beam.PTransform):
    """RowChunks -> a ChunkSurvey each (pass 1)."""

    def __init__(self, rules: RowRules, settings: RunSettings) -> None:
        super().__init__()
        self._rules = rules
        self._settings = settings

    def expand(self, chunks: beam.PCollection) -> beam.PCollection:
        return chunks | "Survey" >> beam.ParDo(_Survey(self._rules, self._settings))


class _Survey(RunInWorkers):
    def __init__(self, rules: RowRules, settings: RunSettings) -> None:
        super().__init__(settings)
        self._rules = rules
        self._rows_read = Metrics.counter("manifest", "rows_read")
        self._rows_rejected = Metrics.counter("manifest", "rows_rejected")
        self._rows_discarded = Metrics.counter("manifest", "rows_discarded")

    def task(self, chunk: RowChunk) -> SurveyTask:
        return SurveyTask(
            chunk,
            self._rules,
            SIZE_SAMPLE,
            tuple(index for _, index in categorical_columns(self._settings.extra_columns)),
        )

    def outputs(self, survey: ChunkSurvey) -> Iterator[ChunkSurvey]:
        self._rows_read.inc(survey.rows_read)
        self._rows_rejected.inc(len(survey.dead_letters))
        self._rows_discarded.inc(survey.discarded)
        yield survey


class PackRows(beam.PTransform):
    """RowChunks -> ((split, shard), (part, pack)) (PACKS), the chunk's labelled rows
    packed by where they are written; unseen labels -> DEAD_LETTERS (pass 2).

    `plan`: PlanShards' (split, SplitPlan); `transform_fn`: AnalyzeLabels' output, whose
    vocabulary assets give the ids (core/worker/label_ids.py). With the OOV bucket an unseen
    label keeps its row and gets the OOV id instead. `unseen_where` says where an unseen
    label is missing from (a pinned vocabulary's PinnedVocabulary.unseen_where).
    """

    def __init__(
        self,
        plan: beam.PCollection,
        transform_fn: tuple,
        rules: RowRules,
        settings: RunSettings,
        unseen_where: str = UNSEEN_IN_TRAIN,
    ) -> None:
        super().__init__()
        self._plan = plan
        self._transform_fn_dir = transform_fn[0]  # a PCollection of the SavedModel's path
        self._rules = rules
        self._settings = settings
        self._unseen_where = unseen_where

    def expand(self, chunks: beam.PCollection):
        return chunks | "Pack" >> beam.ParDo(
            _Pack(self._rules, self._settings, self._unseen_where),
            beam.pvalue.AsDict(self._plan),
            beam.pvalue.AsSingleton(self._transform_fn_dir),
        ).with_outputs(DEAD_LETTERS, main=PACKS)


class _Pack(RunInWorkers):
    def __init__(self, rules: RowRules, settings: RunSettings, unseen_where: str) -> None:
        super().__init__(settings)
        self._rules = rules
        self._unseen_where = unseen_where
        self._unseen = Metrics.counter("labels", "unseen")

    def task(self, chunk: RowChunk, plan: dict, transform_fn_dir: str) -> PackTask:
        categorical = categorical_columns(self._settings.extra_columns)
        return PackTask(
            chunk,
            self._rules,
            plan,
            LabelLookup(
                transform_fn_dir,
                (LABEL_VOCABULARY, *(name for name, _ in categorical)),
                categorical,
                self._settings.oov_bucket,
                self._unseen_where,
            ),
        )

    def outputs(
        self, packed: ChunkPacks
    ) -> Iterator[tuple[tuple[str, int], tuple[int, bytes]] | tagged(DEAD_LETTERS, DeadLetter)]:
        live_progress.planned(packed.rows)
        self._unseen.inc(
            sum(
                dead.reason in (reasons.UNSEEN_LABEL, reasons.UNSEEN_CATEGORY)
                for dead in packed.dead_letters
            )
        )
        for dead in packed.dead_letters:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, dead)
        yield from packed.packs
