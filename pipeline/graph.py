"""The whole pipeline on one screen.

The manifest is read twice, in chunks that worker processes parse, because rows are small
and images are not: the first pass learns the label vocabulary (tf.Transform, TRAIN only)
and the shard plan; the second gives every row its label id and packs the rows by shard,
and only then does a worker process read each image of a shard, once, and write it. This
process handles chunks, packs and shards, never a row or an image: no image byte is
shuffled or passed through TensorFlow, and no stage waits on a side input while holding
the manifest.
"""

import dataclasses
import tempfile
from collections.abc import Iterable, Iterator

import apache_beam as beam
import tensorflow_transform.beam as tft_beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.runner import PipelineState

from image_tfrecords.core.launcher.publishing import delete_tree
from image_tfrecords.core.records import naming
from image_tfrecords.core.records.chunks import RowChunk
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.example_index import PreviousOutput
from image_tfrecords.core.records.failure import Failure
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.summary import RunInfo, Summary
from image_tfrecords.core.worker.label_checks import LabelSeen, merge_seen
from image_tfrecords.core.worker.row_tasks import ChunkSurvey
from image_tfrecords.pipeline import resume
from image_tfrecords.pipeline.beam_lookups import cached_lookups
from image_tfrecords.pipeline.collector import uncollected
from image_tfrecords.pipeline.options import ConvertOptions, runs_on_the_direct_runner
from image_tfrecords.pipeline.stopping import JobWatch, Stopped
from image_tfrecords.transforms.duplicates import ReportDuplicates
from image_tfrecords.transforms.labels import AnalyzeLabels
from image_tfrecords.transforms.outcome import PublishRules, RunFailed, read_failure
from image_tfrecords.transforms.previous_examples import RoutePreviousExamples
from image_tfrecords.transforms.publish import PublishInputs, PublishOutput
from image_tfrecords.transforms.report_content import GatherReportContent, ReportSources
from image_tfrecords.transforms.rows import PACKS, UNSEEN_IN_TRAIN, PackRows, SurveyRows
from image_tfrecords.transforms.shards import EXAMPLE_KEYS, PlanShards, WriteShards
from image_tfrecords.transforms.sorted_lines import WriteSortedLines
from image_tfrecords.transforms.vocabulary_file import PinnedVocabulary, write_pinned_vocabulary
from image_tfrecords.transforms.worker_started import SayWorkerStarted

_MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class JobInputs:
    """What the launcher settled before the job, passed whole to `run` and `build`."""

    settings: RunSettings  # built once, by the launcher, from the options
    row_chunks: tuple[RowChunk, ...]
    run_info: RunInfo
    pinned: PinnedVocabulary | None = None  # --vocabulary or declared classes: the ids
    # The vocabulary of the output this run follows (--reuse_from, or the one --overwrite
    # replaces), whose ids the summary compares with this run's.
    replaced_labels: tuple[str, ...] | None = None
    previous: PreviousOutput | None = None  # whose unchanged examples are copied


@dataclasses.dataclass(frozen=True)
class JobFolders:
    """Where the job's files go: the run's temp folder and tf.Transform's; `resuming`: the
    shards a stopped run left in `temp_dir` are reused where their receipts say so;
    `pinned_file`: the pinned vocabulary as tf.Transform reads it
    (write_pinned_vocabulary); `worker_marker`: written by the first SDK worker that
    starts, for the launcher (pipeline/stopping.py)."""

    temp_dir: str
    tft_dir: str
    resuming: bool = False
    pinned_file: str | None = None
    worker_marker: str | None = None


def run(
    options: PipelineOptions, job: JobInputs, folder: resume.RunFolder, watch: JobWatch
) -> Summary | None:
    """Runs the conversion in `folder` and returns the summary.json it wrote; within
    `watch`, which cancels the job when the launcher is stopped (Stopped is raised, its
    outcome said) or no SDK worker starts in time.

    None when the job is still running: with --no_wait_until_finish (a Flex Template
    launch) the launcher returns once the job is submitted, and the job writes
    summary.json itself when it ends (or fails, publishing nothing). Raises RunFailed
    when the job failed its outcome check.
    """
    convert = options.view_as(ConvertOptions)
    temp_dir = naming.temp_dir(convert.output_dir, folder.run_id)
    if folder.resumed and (published := resume.published_by(convert.output_dir, folder.run_id)):
        delete_tree(temp_dir)  # it was stopped after publishing, while cleaning up
        return published
    # tf.Transform reads and writes through TensorFlow's filesystems, which know local
    # paths and the real gs:// but not s3://, hdfs:// or a GCS emulator: its working
    # folder is --temp_location (Dataflow's bucket) or the local temp dir, and the
    # publish step copies the transform_fn to the output through Beam's FileSystems.
    tft_dir = naming.transform_dir(
        options.view_as(GoogleCloudOptions).temp_location or tempfile.gettempdir(), folder.run_id
    )
    delete_tree(tft_dir)  # a resumed run's, left by the stopped one: made again
    try:
        # Before the graph is built: tf.Transform reads the pinned file as it traces.
        pinned_file = (
            write_pinned_vocabulary(job.pinned, FileSystems.join(tft_dir, "pinned"))
            if job.pinned
            else None
        )
        p = beam.Pipeline(runner=_runner(options), options=options)
        with watch:
            try:
                with cached_lookups(), p:
                    marker = naming.worker_started(temp_dir)
                    # The graph lives until the run, as this block exits, ends.
                    with uncollected():
                        build(
                            p,
                            convert,
                            job,
                            JobFolders(
                                temp_dir,
                                tft_dir,
                                resuming=folder.resumed,
                                pinned_file=pinned_file,
                                worker_marker=marker if watch.watches_workers else None,
                            ),
                        )
                    watch.handed_over(p, marker)
            except Stopped as stopped:  # before its files go: the job may still use them
                stopped.outcome = watch.cancel(getattr(p, "result", None))
                raise
    except BaseException as error:
        # Publishing removes it after a success; after a failure it is no evidence (the
        # temp shards and the staged transform_fn are), so it does not pile up either.
        delete_tree(tft_dir)
        # The runner's own exception wraps the publish step's in text; FAILED.json says
        # the same in a form the launcher can report.
        if not isinstance(error, Stopped) and (failure := _recorded_failure(temp_dir)):
            raise RunFailed(failure) from None
        raise
    if not PipelineState.is_terminal(p.result.state):
        return None
    with FileSystems.open(FileSystems.join(convert.output_dir, naming.SUMMARY_FILE)) as file:
        return Summary.from_json(file.read())


def build(p: beam.Pipeline, options: ConvertOptions, job: JobInputs, folders: JobFolders) -> None:
    """The conversion's graph, from what the launcher settled (`job`) and where the job's
    files go (`folders`)."""
    settings, rules = job.settings, options.row_rules()
    temp_dir, tft_dir, pinned = folders.temp_dir, folders.tft_dir, job.pinned

    # Pass 1, over chunks of the small rows: the label vocabulary and each split's shards.
    chunks = p | "RowChunks" >> beam.Create(job.row_chunks)
    if folders.worker_marker:  # a cluster run, whose launcher waits for it (pipeline/stopping.py)
        chunks = chunks | "SayWorkerStarted" >> beam.ParDo(
            SayWorkerStarted(folders.worker_marker, settings.filesystems)
        )
    surveys = chunks | "SurveyRows" >> SurveyRows(rules, settings)
    transform_fn = surveys | "AnalyzeLabels" >> AnalyzeLabels(
        settings, tft_dir, folders.pinned_file
    )
    # What the publish step names when a label's TRAIN rows all became dead letters.
    train_label_rows = (
        surveys
        | "TrainLabels" >> beam.FlatMap(_label_rows)
        | "CountTrainLabels" >> beam.CombinePerKey(sum)
    )
    # Labels that are probably a mistake: every split's, with their first rows.
    labels_seen = (
        surveys
        | "LabelsSeen" >> beam.FlatMap(_labels_seen)
        | "MergeLabelsSeen" >> beam.CombinePerKey(merge_seen)
    )
    transform_fn_written = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(tft_dir)
    shard_plan = surveys | "PlanShards" >> PlanShards(
        options.num_shards,
        int(options.target_shard_mb * _MB),
        settings.workers,
        settings.filesystems,
    )

    # Pass 2: the chunks again, their rows labelled and packed by shard; then each shard
    # loads and writes its own images, or copies the previous output's where unchanged.
    packed = chunks | "PackRows" >> PackRows(
        shard_plan,
        transform_fn,
        rules,
        settings,
        pinned.unseen_where() if pinned else UNSEEN_IN_TRAIN,
    )
    previous_examples = shard_plan | "PreviousExamples" >> RoutePreviousExamples(
        job.previous, settings.filesystems, rules.split_plan
    )
    written = (
        (packed[PACKS], previous_examples)
        | "RowsAndPrevious" >> beam.Flatten()
        | "WriteShards" >> WriteShards(temp_dir, settings, folders.resuming)
    )

    # What is published besides the shards is staged, so the previous output stays whole
    # until the publish step swaps everything at once.
    staged = naming.staged_dir(temp_dir)
    deduped = (written.shards, written[EXAMPLE_KEYS]) | "Duplicates" >> ReportDuplicates(
        settings, temp_dir, staged
    )

    dead_letters = (
        surveys | "RowDeadLetters" >> beam.FlatMap(_row_dead_letters),
        packed.dead_letters,
        written.dead_letters,
        deduped.dead_letters,
    ) | "DeadLetters" >> beam.Flatten()
    dead_letter_files = dead_letters | "WriteDeadLetters" >> WriteSortedLines(
        naming.jsonl_list(staged, naming.ERRORS),
        DeadLetter.to_json,
        temp_dir,
        sort_key=lambda d: (d.manifest, d.line),
        filesystems=settings.filesystems,
    )
    # DISCARD rows are left out on purpose: read, but neither examples nor dead letters.
    rows_discarded = (
        surveys
        | "Discarded" >> beam.Map(_discarded)
        | "CountDiscarded" >> beam.CombineGlobally(sum).without_defaults().with_output_types(int)
    )
    # Objects of shapes the examples cannot hold, by shape: among the discarded rows.
    objects_left_out = (
        surveys
        | "LeftOut" >> beam.FlatMap(_objects_left_out)
        | "CountLeftOut" >> beam.CombinePerKey(sum)
    )
    # Boxes clipped to the image (their corners reached outside it): one count, none for 0.
    objects_clipped = (
        surveys
        | "Clipped" >> beam.Map(_objects_clipped)
        | "CountClipped" >> beam.CombineGlobally(sum).without_defaults().with_output_types(int)
    )
    row_counts = surveys | "RowsRead" >> beam.Map(_rows_read)

    # What report.html shows besides summary.json: a sample, the first copies and dead letters.
    report_content = ReportSources(
        example_keys=written[EXAMPLE_KEYS],
        dead_letters=dead_letters,
        duplicates=deduped.duplicates,
        near_duplicates=deduped.near_duplicates,
    ) | "ReportContent" >> GatherReportContent(
        temp_dir, settings.filesystems, dropped=deduped.dropped
    )

    _ = PublishInputs(
        shards=deduped.shards,
        dead_letter_reasons=dead_letters | "Reasons" >> beam.Map(_reason),
        row_counts=row_counts,
        rows_discarded=rows_discarded,
        objects_left_out=objects_left_out,
        objects_clipped=objects_clipped,
        train_label_rows=train_label_rows,
        labels_seen=labels_seen,
        duplicates_by_splits=deduped.by_splits,
        near_duplicates_by_splits=deduped.near_by_splits,
        report_content=report_content,
        written=(transform_fn_written, dead_letter_files, deduped.reports),
    ) | "Publish" >> PublishOutput(
        options.output_dir,
        temp_dir,
        tft_dir,
        settings,
        job.run_info,
        PublishRules(
            options.max_error_fraction,
            pinned.source if pinned else None,
            options.strict_labels,
            declared=bool(pinned and pinned.declared),
            replaced_labels=job.replaced_labels,
        ),
    )


def _label_rows(survey: ChunkSurvey) -> Iterator[tuple[str, int]]:
    """(label, TRAIN rows carrying it) of a chunk: each label of each row."""
    for group in survey.train_labels:
        for label in group.labels:
            yield label, group.rows


# What each step takes from a chunk's survey. Named and annotated, not lambdas: Beam takes
# a function's annotations as its output type, so every PCollection's coder is declared
# (tests/test_coders.py), the same on every Beam release.
def _labels_seen(survey: ChunkSurvey) -> Iterable[tuple[str, LabelSeen]]:
    return survey.labels_seen.items()


def _row_dead_letters(survey: ChunkSurvey) -> Iterable[DeadLetter]:
    return survey.dead_letters


def _discarded(survey: ChunkSurvey) -> int:
    return survey.discarded


def _objects_left_out(survey: ChunkSurvey) -> Iterable[tuple[str, int]]:
    return survey.objects_left_out.items()


def _objects_clipped(survey: ChunkSurvey) -> int:
    return survey.objects_clipped


def _rows_read(survey: ChunkSurvey) -> int:
    return survey.rows_read


def _reason(dead_letter: DeadLetter) -> str:
    return dead_letter.reason


def _recorded_failure(temp_dir: str) -> Failure | None:
    """The failure the publish step recorded, if it did; None when storage cannot say,
    so that the exception that stopped the run is the one raised."""
    try:
        return read_failure(temp_dir)
    except Exception:  # noqa: BLE001 - each filesystem's own
        return None


def _runner(options: PipelineOptions) -> FnApiRunner | None:
    """DirectRunner jobs run on Beam's in-process FnApiRunner.

    Beam 2.77's DirectRunner would first try Prism, which it downloads from GitHub at
    run time; the FnApiRunner is the engine it falls back to, without the download.
    """
    if runs_on_the_direct_runner(options):
        return FnApiRunner()
    return None  # Beam resolves --runner
