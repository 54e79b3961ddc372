"""Runs one conversion: checks what can be checked up front, runs the graph, reports."""

from __future__ import annotations

import contextlib
import datetime
import functools
import itertools
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence

import grpc
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)

from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import (
    FORMATS,
    ManifestSource,
    check_sources,
    class_declarations,
    find_manifests,
    image_folder_sources,
    one_declaration,
    read_source,
    split_and_path,
)
from image_tfrecords.core.launcher.console import quiet_console
from image_tfrecords.core.records import naming
from image_tfrecords.core.records.example_index import PreviousOutput, previous_output
from image_tfrecords.core.records.naming import SUMMARY_FILE
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.split_plan import plan_info
from image_tfrecords.core.records.splits import SPLITS
from image_tfrecords.core.records.summary import RunInfo, RunOptions, Summary
from image_tfrecords.core.storage import storage
from image_tfrecords.core.storage.beam_filesystems import settle_beam_filesystems
from image_tfrecords.core.storage.redaction import redact_urls
from image_tfrecords.core.worker import interrupts
from image_tfrecords.pipeline.collector import frozen_for_the_run, uncollected
from image_tfrecords.pipeline.engines import (
    EngineUnusable,
    job_server_of_the_run,
    use_built_job_server,
)
from image_tfrecords.pipeline.options import (
    ConvertOptions,
    make_local_paths_absolute,
    runs_on_the_direct_runner,
    unknown_option_problem,
    writes_shards_in_this_process,
)
from image_tfrecords.pipeline.progress import shown_progress
from image_tfrecords.pipeline.read_choices import settle_read_choices
from image_tfrecords.pipeline.report import counted, format_report
from image_tfrecords.pipeline.resume import (
    Fingerprint,
    ResumeRefused,
    RunFolder,
    choose_run_folder,
    finished_shards,
    published_by,
    scan_sources,
    start,
    unstart,
)
from image_tfrecords.pipeline.split_staging import convert_grouped
from image_tfrecords.pipeline.stage_lines import stage
from image_tfrecords.pipeline.stopping import JobWatch, Stopped, WorkersNeverStarted
from image_tfrecords.pipeline.storage_probe import FILES_PER_SCHEME, probe_storage
from image_tfrecords.pipeline.tft_storage import tensorflow_location_problem
from image_tfrecords.pipeline.versions import installed_versions, say_once_if_untested
from image_tfrecords.transforms.in_workers import workers_of_the_run
from image_tfrecords.transforms.outcome import NO_TRAIN_ROWS, RunFailed, read_summary
from image_tfrecords.transforms.vocabulary_file import (
    PinnedVocabulary,
    VocabularyError,
    output_labels,
    read_pinned_vocabulary,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# How a stopped run is continued (docs/output/what-is-written.md, "A stopped run").
_RESUMED = ": the same image-tfrecords convert command with --resume continues it"
_ROWS_PROBED = 10  # rows of a manifest whose images the storage probe may read
ROWS_NAMED = 3  # of the rows an error is about, those it names
# Rows of a manifest whose labels tell a label map's names from its display names.
_ROWS_SAMPLED_FOR_LABELS = 200
_STEP_ERRORS_LOGGER = "apache_beam.runners.common"  # Beam's DoFnRunner logs what a step raised


class UsageError(ValueError):
    """Options or an output location that cannot work; reported without a traceback."""


class ImagesNotFound(UsageError):
    """Not one image the first rows of the manifests name in --image_dir is there: the
    folder (or the names) must be wrong. `rows`: those rows."""

    def __init__(self, image_dir: str, rows: list[ManifestRow]) -> None:
        self.image_dir, self.rows = image_dir, rows
        super().__init__(
            f"not one image of the first {counted(len(rows), 'row')} is in --image_dir "
            f"{image_dir}: "
            + ", ".join(
                f"{self.name(row)} ({row.manifest} line {row.line})" for row in rows[:ROWS_NAMED]
            )
            + (", ..." if len(rows) > ROWS_NAMED else "")
            + "; give absolute paths, or the folder the names are relative to as --image_dir"
        )

    def name(self, row: ManifestRow) -> str:
        """The image's name as the row gives it, relative to --image_dir."""
        return os.path.relpath(row.uri, self.image_dir)


class JobFailed(RuntimeError):
    """The job stopped on an error of its own (storage that refused a write, a worker that
    died), not on its outcome check: nothing was published; the message says so, the
    cause, and where the run's files are."""


def main(argv: Sequence[str] | None = None, started: float | None = None) -> int:
    """The command line: the report on stdout, problems on stderr, an exit status.
    `started` (time.time()) is when the command started, for the report's wall time."""
    try:
        convert_and_report(sys.argv[1:] if argv is None else argv, started)
    except (UsageError, ManifestError) as problem:  # an image URL's credentials not shown
        print(f"error: {redact_urls(str(problem))}", file=sys.stderr)
        return EXIT_USAGE
    except (RunFailed, JobFailed) as failed:
        print(f"error: {redact_urls(str(failed))}", file=sys.stderr)
        return EXIT_FAILED
    except Stopped as stopped:
        print(f"error: {redact_urls(stopped.said())}", file=sys.stderr)
        return stopped.exit_code
    return EXIT_OK


def convert_and_report(argv: Sequence[str], started: float | None = None) -> Summary | None:
    """Runs one conversion, prints its report; returns the summary.json it published.
    The report's wall time counts from `started` (time.time(); default: now), so that
    what came before the call (imports, say) can be counted in.

    The summary is None for a job submitted with --no_wait_until_finish that is still
    running (the job then checks its outcome itself). Raises UsageError or ManifestError
    before any work starts, RunFailed (after printing what the run would have published)
    when the run failed its outcome check and published nothing, JobFailed when the job
    stopped on an error or no SDK worker of it started in time, Stopped (a
    KeyboardInterrupt) when SIGINT or SIGTERM stopped the launcher while the job ran, once
    the job is cancelled; its message says what became of the job and of the output.
    """
    # Beam itself only logs "Discarding unparseable args" and runs on with the defaults.
    problem = unknown_option_problem(argv)
    if problem:
        raise UsageError(problem)
    options = PipelineOptions(list(argv))
    make_local_paths_absolute(options)  # before anything reads them, or a worker gets them
    # Beam's filesystems take their settings (S3 endpoint and keys, WebHDFS host...) from
    # here; the workers get them from Beam's harness or RunSettings.filesystems.
    FileSystems.set_options(options)
    settle_beam_filesystems()
    say_once_if_untested()
    convert = options.view_as(ConvertOptions)
    try:
        with shown_progress(options), quiet_console(convert.verbose), _run_failed_unlogged():
            return _run(argv, options, convert, time.time() if started is None else started)
    except WorkersNeverStarted as never:  # the job's failure, not the launcher's stop
        raise JobFailed(str(never)) from None


@contextlib.contextmanager
def _run_failed_unlogged() -> Iterator[None]:
    """Within the block, Beam does not log RunFailed. A run that fails its outcome check
    raises it in the publish step, and Beam's step runner logs it, with its traceback, as
    an ERROR before it reraises it; the launcher reports it as one `error:` line, the
    Python API as its result's `problem`, and neither is a crash."""

    def not_run_failed(record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], RunFailed))

    logger = logging.getLogger(_STEP_ERRORS_LOGGER)
    logger.addFilter(not_run_failed)
    try:
        yield
    finally:
        logger.removeFilter(not_run_failed)


def _run(
    argv: Sequence[str], options: PipelineOptions, convert: ConvertOptions, started: float
) -> Summary | None:
    """convert_and_report's work, within its console filter."""
    try:
        use_built_job_server(options)
    except EngineUnusable as problem:
        raise UsageError(str(problem)) from None
    stage("checking the input: " + ", ".join(convert.manifest or [convert.image_folder or ""]))
    manifests = _preflight(convert)
    if convert.splits_by_groups and not convert.split_plan:  # its two runs, each as this
        # The report's wall time is the two runs'.
        return convert_grouped(
            argv, options, manifests, functools.partial(convert_and_report, started=started)
        )
    pinned = _pinned_vocabulary(convert, manifests)
    if (
        not pinned
        and manifests
        and all(source.split not in (None, SPLITS[0]) for source in manifests)
    ):
        splits = " and ".join(sorted({source.split.upper() for source in manifests}))
        raise UsageError(
            f"every manifest is {splits} (--manifest SPLIT=PATH), no "
            f"--vocabulary is given and they declare no classes: {NO_TRAIN_ROWS}"
        )
    run_info = RunInfo(
        # An image folder read as the manifests it holds (folder_reading) names them too.
        manifests=[source.describe() for source in manifests] or None,
        image_folder=convert.image_folder,
        options=RunOptions(
            runner=options.view_as(StandardOptions).runner or "DirectRunner", **convert.values()
        ),
        versions=installed_versions(),
        started_at=datetime.datetime.now(datetime.UTC).isoformat(),
    )
    # Read now: publishing may replace it. The summary says which ids this run changed
    # since the output it was built from (--reuse_from), or the one it replaces.
    earlier = convert.earlier_output()
    replaced_labels = output_labels(earlier) if earlier else None
    settings = convert.run_settings()
    previous = _previous_output(convert, settings)
    if previous and previous.shards and not convert.staged_output:
        run_info = run_info.model_copy(update={"reused_from": previous.folder})
    if convert.split_plan:
        run_info = run_info.model_copy(update={"split_groups": plan_info(convert.split_plan)})
    scan = scan_sources(
        convert, manifests, pinned, run_info.versions, settings.workers.process_count()
    )
    interrupts.raise_if_stopping()  # a stop that a library's `except:` swallowed
    folder = _whole_run_folder(convert, scan.fingerprint)
    watch = None
    try:
        with (
            frozen_for_the_run(),
            job_server_of_the_run(options, folder.run_id) as log,
            workers_of_the_run(settings, writes_shards_in_this_process(options)) as job,
        ):
            # TensorFlow loads here, so usage errors above come back in a second, not six.
            stage("loading TensorFlow")
            with uncollected():
                from image_tfrecords.pipeline import graph  # noqa: PLC0415
            interrupts.raise_if_stopping()
            watch = JobWatch(options, log and str(log), convert.worker_start_timeout)
            stage(
                "reading the rows: the label ids (tf.Transform) and the shard plan, then the images"
                if runs_on_the_direct_runner(options)
                else f"starting the job on {options.view_as(StandardOptions).runner}"
            )
            summary = graph.run(
                options,
                graph.JobInputs(
                    settings, tuple(scan.chunks), run_info, pinned, replaced_labels, previous
                ),
                folder,
                watch,
            )
            job.goes_on = summary is None  # submitted with --no_wait_until_finish
    except RunFailed as failed:
        print(
            format_report(
                failed.failure.summary, convert.output_dir, time.time() - started, published=False
            )
        )
        raise
    except Stopped as stopped:
        stopped.args = (
            _stopped_line(stopped, convert.output_dir, folder, watch is not None and watch.started),
        )
        raise
    except Exception as error:
        raise _job_failed(error, convert.output_dir, folder.run_id) from error
    if summary is None:
        print(
            f"image-tfrecords: job submitted; it writes "
            f"{convert.output_dir}/{SUMMARY_FILE} when it ends"
        )
    else:
        print(format_report(summary, convert.output_dir, time.time() - started))
    return summary


def _previous_output(convert: ConvertOptions, settings: RunSettings) -> PreviousOutput | None:
    """The output whose unchanged examples this run copies, as it is now (read before
    the run: publishing may replace it); said on the console."""
    source = convert.reuse_source()
    if source is None:
        return None
    previous = previous_output(source, settings.shard_format.suffix)
    if previous.shards and convert.staged_output:
        _say("copying the examples of the staging run (--split_by groups)")
    elif previous.shards:
        _say(f"reusing the unchanged examples of {source} ({len(previous.shards)} shards)")
    elif convert.reuse_from:  # asked for: say why nothing is reused
        _say(
            f"--reuse_from {source}: no shard of this format with an example index there "
            "(an output written before indexes, or none): every image is read"
        )
    return previous


def _job_failed(error: Exception, output_dir: str, run_id: str) -> JobFailed:
    """The cause, and what the failed job left."""
    return JobFailed(
        f"the job failed: {_last_line(error)}. After it: {_left_behind(output_dir, run_id)}"
    )


def _stopped_line(stopped: Stopped, output_dir: str, folder: RunFolder, job_started: bool) -> str:
    """What a run stopped after its folder was started left, and how it is continued."""
    if not job_started:
        return f"{stopped.reason} before the job started; {_unstarted(output_dir, folder)}"
    if _published_by(output_dir, folder.run_id):  # publishing holds a stop
        return (
            f"{stopped.reason} while publishing, which was finished first: "
            f"{output_dir} is this run's whole output"
        )
    return (
        f"{stopped.reason}; {stopped.outcome}. After it: "
        f"{_left_behind(output_dir, folder.run_id, stopped=True)}"
    )


def _published_by(output_dir: str, run_id: str) -> bool:
    try:
        return published_by(output_dir, run_id) is not None
    except Exception:  # noqa: BLE001 - storage that cannot be read now: not said to be
        return False


def _left_behind(output_dir: str, run_id: str, stopped: bool = False) -> str:
    """What a job that did not end well (was `stopped`) left: the output as it was, or
    (it stopped while publishing swapped files) no summary.json, which no reader takes
    for an output; or the output it published before it could be stopped."""
    try:
        summary = read_summary(FileSystems.join(output_dir, SUMMARY_FILE))
    except Exception:  # noqa: BLE001 - the storage that failed the job may fail this too
        summary = None
    temp = naming.temp_dir(output_dir, run_id)
    if summary is not None and summary.run_id == run_id:
        return (
            f"it published {output_dir} and failed removing its temp folder {temp}, "
            "which can be deleted"
        )
    if summary is not None:
        left = f"nothing was published, {output_dir} is as it was"
    else:
        left = (
            f"nothing was published, {output_dir} has no {SUMMARY_FILE} (no reader "
            "takes it for an output)"
        )
    if stopped:
        return f"{left}; {_kept(temp)}"
    return left + f"; the run's files are in {temp} (--resume reuses its finished shards)"


def _kept(temp: str) -> str:
    """What a stopped run keeps, and how it is continued."""
    try:
        shards = finished_shards(temp)
    except Exception:  # noqa: BLE001 - storage that cannot list now: the folder is said
        shards = 0
    kept = (
        f"{counted(shards, 'finished shard')} kept in {temp}"
        if shards
        else f"its files are in {temp}"
    )
    return kept + _RESUMED


def _unstarted(output_dir: str, folder: RunFolder) -> str:
    """What a run stopped before its job started left: a new run's folder is removed (it
    holds only run.json), a stopped run's given with --resume stays as it was."""
    temp = naming.temp_dir(output_dir, folder.run_id)
    if folder.resumed:
        return f"nothing was published; {_kept(temp)}"
    try:
        unstart(temp)
    except Exception:  # noqa: BLE001 - storage that fails now: the folder is said
        return f"nothing was written but {temp}, which can be deleted"
    return f"nothing was written, {output_dir} is as it was"


def _whole_run_folder(convert: ConvertOptions, current: Fingerprint) -> RunFolder:
    """_run_folder, which a stop does not cut short: one that came meanwhile is raised
    once the folder is removed again (a stopped run's given with --resume is kept)."""
    folder = None
    try:
        with interrupts.held("starting the run's folder"):
            folder = _run_folder(convert, current)
    except Stopped as stopped:
        if folder is not None:
            stopped.args = (_stopped_line(stopped, convert.output_dir, folder, False),)
        raise
    # What a second signal, which ends the launcher at once, says is kept.
    interrupts.keeping(
        f"its files are in {naming.temp_dir(convert.output_dir, folder.run_id)}{_RESUMED}"
    )
    return folder


def _run_folder(convert: ConvertOptions, current: Fingerprint) -> RunFolder:
    """The run's temp folder, started: a stopped run's with --resume, else a new one."""
    try:
        folder = choose_run_folder(convert, current)
    except ResumeRefused as refused:
        raise UsageError(str(refused)) from None
    path = naming.temp_dir(convert.output_dir, folder.run_id)
    if folder.resumed:
        print(f"image-tfrecords: resuming the stopped run in {path}")
    elif convert.resume:
        print(
            f"image-tfrecords: no stopped run in {convert.output_dir} to resume; "
            "starting from the first image"
        )
    try:
        start(path, current, folder.resumed)
    except Exception as error:
        # The first write to the output: the probe could only list it.
        raise UsageError(
            f"cannot use the storage: cannot write to {path}: {_last_line(error)}"
        ) from error
    return folder


def _last_line(error: BaseException) -> str:
    """An error's message in one line: its last (a remote runner's message is a traceback
    that ends with the exception), or, where the runner's own error says no more than the
    step, the error it was raised from; and the step the runner names."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    step = lines.pop() if lines and lines[-1].startswith("[while running") else ""
    if lines and lines[-1].endswith(" with exceptions None"):  # Beam's step annotation
        lines[-1], step = lines[-1].rsplit(" [while running", 1)
        step = "[while running" + step.removesuffix(" with exceptions None")
    cause = error.__cause__ or error.__context__
    if (batch := _failed_batch(error)) is not None:
        message = batch
    elif isinstance(error, grpc.Call):  # a job server's answer: its text ends in ">"
        message = f"the job server answered {error.code().name}: {_last_line_of(error.details())}"
    elif lines:
        message = lines[-1]
    else:
        message = _last_line(cause) if cause is not None else repr(error)
    return " ".join(part for part in (message, step) if part)


def _last_line_of(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "(no details)"


def _failed_batch(error: BaseException | None) -> str | None:
    """A Beam filesystem's failed batch (a BeamIOError with its files' errors, maybe the
    cause of the runner's error) in a line: how many files failed, and the first's error.
    Its own message lists every file's error, a line of kilobytes."""
    while error is not None:
        details = getattr(error, "exception_details", None)
        if details:
            operation = str(error).split(" with exceptions ", 1)[0]
            files, problem = next(iter(details.items()))
            named = " to ".join(files) if isinstance(files, tuple) else files
            return (
                f"{operation} for {counted(len(details), 'file')}, the first {named}: "
                f"{_last_line(problem)}"
            )
        error = error.__cause__ or error.__context__
    return None


def _pinned_vocabulary(
    convert: ConvertOptions, manifests: list[ManifestSource]
) -> PinnedVocabulary | None:
    """The label ids, read (and checked) before the job starts: --vocabulary's, else the
    classes the input declares (YOLO's names, COCO's categories...), else None (learnt
    from TRAIN). The console says which, and what --vocabulary overrides."""
    if convert.vocabulary:
        return _given_vocabulary(convert, manifests)
    found = class_declarations(manifests)
    declaring = [declared.declared_by for declared in found if declared]
    if not declaring:
        return None
    if len(declaring) < len(found):
        undeclaring = len(found) - len(declaring)
        print(
            f"image-tfrecords: label ids: learnt from TRAIN, as {undeclaring} of the "
            f"{len(found)} inputs declare{'s' * (undeclaring == 1)} no classes (declared by "
            f"{', '.join(declaring)}); pin them with --vocabulary"
        )
        return None
    declared = one_declaration(found)
    pinned = PinnedVocabulary(declared.declared_by, declared.labels, declared=True)
    print(
        f"image-tfrecords: label ids: {pinned.described()}"
        + (f" ({declared.note})" if declared.note else "")
    )
    return pinned


def _given_vocabulary(convert: ConvertOptions, manifests: list[ManifestSource]) -> PinnedVocabulary:
    """--vocabulary's labels; the console names the declarations it overrides."""
    try:
        pinned = read_pinned_vocabulary(
            convert.vocabulary, lambda: _labels_in_data(manifests, convert.row_rules())
        )
    except VocabularyError as problem:
        raise UsageError(str(problem)) from problem
    try:
        overridden = ", ".join(
            declared.declared_by for declared in class_declarations(manifests) if declared
        )
    except ManifestError as problem:  # a declaration that cannot give ids: --vocabulary does
        overridden = f"the input ({problem})"
    if overridden:
        print(
            f"image-tfrecords: label ids: --vocabulary {convert.vocabulary} overrides the "
            f"classes declared by {overridden}"
        )
    return pinned


def _preflight(convert: ConvertOptions) -> list[ManifestSource]:
    """Usage errors before any worker starts: options, sources, headers, the output dir;
    then what the options leave open and the manifests decide (read_choices.py).

    Returns the manifest files (none for an image folder).
    """
    problems = convert.problems()
    if tft_problem := tensorflow_location_problem(
        "temp_location", convert.view_as(GoogleCloudOptions).temp_location
    ):
        problems.append(tft_problem)
    if problems:
        raise UsageError("; ".join(problems))
    try:
        manifests = _check_locations(convert)
        settle_read_choices(convert, manifests)
        return manifests
    except (UsageError, ManifestError):
        raise
    except Exception as error:  # each filesystem's own: unreachable, forbidden, no client
        # BeamIOError holds each path's own error, which says what went wrong.
        details = getattr(error, "exception_details", None) or {}
        problem = "; ".join(f"{path}: {cause}" for path, cause in details.items())
        raise UsageError(f"cannot use the storage: {problem or error}") from error


def _check_locations(convert: ConvertOptions) -> list[ManifestSource]:
    if storage.is_local(convert.output_dir) and os.path.isfile(convert.output_dir):
        raise UsageError(f"--output_dir {convert.output_dir} is a file: give a folder")
    probe_storage(_source_locations(convert))
    rules = convert.row_rules()
    if convert.image_folder:
        manifests, first_images = image_folder_sources(convert.image_folder, rules, _say)
    else:
        manifests, first_images = (
            find_manifests(convert.manifest, convert.input_format, say=_say),
            [],
        )
    check_sources(manifests, rules)
    first_rows = _first_image_rows(manifests, rules)
    probe_storage(first_images + [row.uri for row in first_rows])
    _check_image_dir(convert.image_dir, first_rows)
    existing = FileSystems.match([FileSystems.join(convert.output_dir, "*")])[0].metadata_list
    if existing and not convert.overwrite:
        raise UsageError(
            f"--output_dir {convert.output_dir} is not empty; "
            "pass --overwrite to replace its contents"
        )
    return manifests


def _say(line: str) -> None:
    """A line of the console about how the input is read, before the job."""
    print(f"image-tfrecords: {line}")


def _source_locations(convert: ConvertOptions) -> list[str]:
    """What the launcher reads first, probed before it is listed or read: the manifest
    files named without a glob, or the image folder, and the output folder (a trailing /
    lists a folder)."""
    output = convert.output_dir.rstrip("/") + "/"
    if convert.image_folder:
        return [convert.image_folder.rstrip("/") + "/", output]
    paths = (split_and_path(argument)[1] for argument in convert.manifest)
    return [*(path for path in paths if not any(c in path for c in "*?[")), output]


def _first_image_rows(manifests: list[ManifestSource], rules: RowRules) -> list[ManifestRow]:
    """The first rows of the first manifests: their images are what the probe reads.

    Not from files whose first row comes only after a table of the whole dataset (COCO's
    images: InputFormat.first_rows_early).
    """
    readable = [source for source in manifests if FORMATS[source.format].first_rows_early]
    return [
        row
        for source in readable[:FILES_PER_SCHEME]
        for row in itertools.islice(read_source(source, rules), _ROWS_PROBED)
        if isinstance(row, ManifestRow)
    ]


def _check_image_dir(image_dir: str | None, first_rows: list[ManifestRow]) -> None:
    """ImagesNotFound where a local --image_dir (a DataFrame's: the current directory)
    holds not one image the first rows name in it: the job would only dead-letter every
    row as file_not_found. A few missing images are ordinary dead letters."""
    if not image_dir or not storage.is_local(image_dir):
        return
    inside = [
        row
        for row in first_rows
        if storage.is_local(row.uri) and row.uri.startswith(os.path.join(image_dir, ""))
    ]
    if inside and not any(os.path.exists(row.uri) for row in inside):
        raise ImagesNotFound(image_dir, inside)


def _labels_in_data(manifests: list[ManifestSource], rules: RowRules) -> set[str]:
    """Labels of the first rows of the first manifests (InputFormat.labels_sampled: a
    COCO file's are its categories)."""
    return set().union(
        *(
            FORMATS[source.format].labels_sampled(source, rules, _ROWS_SAMPLED_FOR_LABELS)
            for source in manifests[:FILES_PER_SCHEME]
        )
    )
