"""A job that runs without the launcher is cancelled when the launcher stops.

A Flink session cluster, a Spark cluster or Dataflow runs the job on machines of its
own: a launcher killed by SIGTERM (a scheduler's stop, `kill`) or SIGINT (Ctrl-C) left
it running there, and it published while the launcher had said nothing of it. Those
signals raise `Stopped` in the launcher's main thread (core/worker/interrupts.py, which also
stops a job that runs in the launcher: the DirectRunner's), and within a `JobWatch` the
launcher cancels the job before it exits:

- the job server it started is stopped (a terminal's Ctrl-C, sent to the whole process
  group, may have ended it already): a job that runs inside it (Flink's `[local]`, any
  Spark master, whose driver it is) ends with it;
- a Flink job the job server submitted to a cluster is cancelled through the cluster's
  REST API, by the id the job server's log names: Beam's job service cannot, as it only
  interrupts its own wait for the job (Beam's JobInvocation.cancel(); tried on a Flink
  1.19 session cluster: the job ran on to FINISHED and published);
- any other job (Dataflow, a job server given by --job_endpoint) is cancelled through
  its runner (PipelineResult.cancel()).

It waits up to CANCEL_WAIT_S for the engine to confirm, and a second signal stops the
wait (elsewhere a second signal ends the launcher at once). `Stopped.outcome` says what
became of the job, in words.

A job whose SDK workers never start (a worker pool whose `python` cannot import Beam, an
image that does not start) waits forever: Beam's environment factories retry without
end, the TaskManager logging "Still waiting for startup of environment" every two
minutes. With `--worker_start_timeout`, the job's first step writes a marker into the
run's temp folder from the first worker that starts (transforms/worker_started.py); a
watcher thread looks for it from the job's submission on, and when it is not there in
time raises `WorkersNeverStarted` in the main thread (through the SIGTERM handler), which
cancels the job the same way.
"""

from __future__ import annotations

import contextlib
import pathlib
import threading
import time
from collections.abc import Callable
from types import TracebackType

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions
from apache_beam.runners.runner import PipelineResult, PipelineState

from image_tfrecords.core.launcher.console import expect_hang_ups
from image_tfrecords.core.worker import interrupts
from image_tfrecords.core.worker.interrupts import Stopped
from image_tfrecords.pipeline import engines
from image_tfrecords.pipeline.options import runs_on_the_direct_runner

__all__ = ["JobWatch", "Stopped", "WorkersNeverStarted"]

CANCEL_WAIT_S = 30.0  # how long a cancelled job may take to stop before the launcher exits
WORKER_POLL_S = 2.0  # how often the launcher looks for the first worker's marker


class WorkersNeverStarted(Stopped):
    """No SDK worker of the job started within --worker_start_timeout."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, exit_code=1)


def watched_environment(options: PipelineOptions) -> str | None:
    """The SDK workers' environment (e.g. "EXTERNAL localhost:50000") of a Flink or Spark
    run whose workers start apart from the launcher, which may never start; None where
    they run in the launcher (LOOPBACK) or the runner starts them itself (Dataflow,
    the DirectRunner)."""
    portable = options.view_as(PortableOptions)
    kind = (portable.environment_type or "DOCKER").upper()  # Beam's default for Flink, Spark
    if engines.engine_of(options) is None or kind == "LOOPBACK":
        return None
    return f"{kind} {portable.environment_config}" if portable.environment_config else kind


class JobWatch:
    """Within the block: SIGINT and SIGTERM raise Stopped (core/worker/interrupts.py: the
    command's handler, or, for a Python API call in the main thread, the block's), once
    `handed_over` names the marker, WorkersNeverStarted is raised when the marker is not
    there within `worker_start_timeout` seconds of the job's submission (0: no
    deadline)."""

    def __init__(
        self, options: PipelineOptions, job_server_log: str | None, worker_start_timeout: float
    ) -> None:
        self._options = options
        self._job_server_log = job_server_log
        self._timeout = worker_start_timeout
        self._environment = watched_environment(options)
        self._signals = contextlib.ExitStack()
        self._entered = False
        self._handled = False  # whether signals stop the job: in the main thread only
        self._impatient = threading.Event()  # a second signal: stop waiting for the cancel
        self._job_ended = threading.Event()

    @property
    def watches_workers(self) -> bool:
        """Whether the first worker's start is waited for: workers apart from the
        launcher, a limit, and (within the block) a signal handler to stop the job by."""
        return bool(self._environment and self._timeout > 0 and self._handled)

    @property
    def started(self) -> bool:
        """Whether the block was entered: the job was being handed to its runner."""
        return self._entered

    def __enter__(self) -> JobWatch:
        self._entered = True
        expect_hang_ups(False)
        self._handled = threading.current_thread() is threading.main_thread()
        self._signals.enter_context(interrupts.signals_stop())
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._job_ended.set()
        self._signals.close()

    def handed_over(self, pipeline: beam.Pipeline, marker: str) -> None:
        """`pipeline` is being handed to its runner: once it is submitted (Beam sets its
        `result`), the first SDK worker that starts writes `marker`; without it within
        the timeout, the job is stopped."""
        if self.watches_workers:
            threading.Thread(
                target=self._wait_for_a_worker,
                args=(pipeline, marker),
                name="worker-start-watch",
                daemon=True,
            ).start()

    def _wait_for_a_worker(self, pipeline: beam.Pipeline, marker: str) -> None:
        # The clock starts at the submission, not with the job server's start before it.
        while getattr(pipeline, "result", None) is None:
            if self._job_ended.wait(WORKER_POLL_S):
                return
        since = time.monotonic()
        while not self._job_ended.wait(WORKER_POLL_S):
            if _exists(marker):
                return
            if time.monotonic() - since >= self._timeout and not self._job_ended.is_set():
                interrupts.raise_in_main_thread(
                    WorkersNeverStarted(
                        f"no SDK worker of the job started within {self._timeout:g} s "
                        f"(--worker_start_timeout) from --environment_type {self._environment}: "
                        "check that every TaskManager or executor reaches it and that its "
                        "python imports apache_beam and this project (the TaskManager's log "
                        "says 'Still waiting for startup of environment')"
                        + self._storage_hint(marker)
                    )
                )
                return

    def _storage_hint(self, marker: str) -> str:
        # A plain worker pool's workers get none of the job's options from Beam: workers
        # that started but cannot write the marker to S3 look, from here, as never started.
        if not (marker.startswith("s3://") and self._environment.startswith("EXTERNAL")):
            return ""
        return (
            ", or, where the pool's log says 'Unable to locate credentials', that its "
            "workers have S3's keys: Beam's worker pool gives them none of the job's "
            "options, so start image-tfrecords-sdk-worker-pool instead (or give its "
            "environment AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        )

    def cancel(self, result: PipelineResult | None) -> str:
        """Cancels the job `result` is (None: its submission was under way); says what
        became of it. Called once Stopped was raised, within the block."""
        expect_hang_ups(True)  # its streams to the job server end now: not failures
        # A second signal stops the wait for the cancel, not the cancel.
        with interrupts.second_signal(self._impatient.set):
            return self._cancel(result)

    def _cancel(self, result: PipelineResult | None) -> str:
        engine = engines.engine_of(self._options)
        if runs_on_the_direct_runner(self._options):
            return "the job ran in the launcher, and stopped with it"
        if engine is None or self._job_server_log is None:  # Dataflow, --job_endpoint
            if result is None:  # the runner may have made the job before it answered
                return "its submission was under way: look for the job in the runner's console"
            if engine is not None and not engines.runs_inside_the_job_server(engine, self._options):
                return self._cancel_named_on_flink(result, engine.master(self._options))
            return self._cancel_through_runner(result)
        # No submission after this, and a job inside the job server ends with it. A
        # terminal's Ctrl-C reaches the job server too (one process group): it may be gone.
        engines.stop_job_servers(engine)
        said = pathlib.Path(self._job_server_log).read_text(errors="replace")
        if not said.strip():
            return "the job was not submitted (its job server had not started)"
        if engines.runs_inside_the_job_server(engine, self._options):
            return f"the {engine.name} job is stopped with the job server that ran it"
        submitted = engines.submitted_flink_jobs(said, engine.master(self._options))
        if not submitted:
            return "the job was not submitted to the cluster"
        return "; ".join(self._cancel_on_flink(job) for job in submitted)

    def _cancel_named_on_flink(self, result: PipelineResult, flink_master: str) -> str:
        """A job on a session cluster from a job server of its own (--job_endpoint): Beam's
        cancel would only stop that job server's wait, so it is found by its name."""
        name = _job_id(result).rsplit("_", 1)[0]
        try:
            jobs = engines.flink_jobs_named(name, flink_master)
        except OSError as error:
            return f"the Flink job {name} could not be looked for at {flink_master}: {error}"
        if not jobs:
            return self._cancel_through_runner(result)
        return "; ".join(self._cancel_on_flink(job) for job in jobs)

    def _cancel_on_flink(self, job: engines.FlinkJob) -> str:
        try:
            job.cancel()
            state = self._wait(job.state)
        except OSError as error:
            return f"the Flink job {job.job_id} could not be cancelled at {job.url}: {error}"
        return self._said(f"the Flink job {job.job_id}", state, f"Flink's web UI {job.url}")

    def _cancel_through_runner(self, result: PipelineResult) -> str:
        job = f"the job {_job_id(result)}".rstrip()
        try:
            result.cancel()
            state = self._wait(lambda: str(result.state))
        except Exception as error:  # noqa: BLE001 - each runner's own: unreachable, refused
            return f"{job} could not be cancelled: {error}"
        return self._said(job, state, "the runner's console")

    def _wait(self, state: Callable[[], str]) -> str:
        """The job's state once terminal, or its last when CANCEL_WAIT_S passed or a
        second signal came."""
        deadline = time.monotonic() + CANCEL_WAIT_S
        while True:
            now = state()
            if (
                PipelineState.is_terminal(_beam_state(now))
                or time.monotonic() >= deadline
                or self._impatient.wait(0.5)
            ):
                return now

    @staticmethod
    def _said(job: str, state: str, where: str) -> str:
        if _beam_state(state) == PipelineState.CANCELLED:
            return f"{job} is cancelled"
        if PipelineState.is_terminal(_beam_state(state)):
            return f"{job} had ended ({state}) before it could be cancelled"
        return f"{job} was asked to cancel and is still {state}: see {where}"


def _job_id(result: PipelineResult) -> str:
    """The runner's id of the job: Dataflow's job_id(), the job service's for a portable
    runner; "" where the runner has none."""
    found = getattr(result, "job_id", None) or getattr(result, "_job_id", None)
    return (found() if callable(found) else found) or ""


def _beam_state(state: str) -> str:
    """An engine's state as Beam names it (Flink's CANCELED is Beam's CANCELLED)."""
    state = state.rsplit(".", 1)[-1].upper()
    return {"CANCELED": PipelineState.CANCELLED, "FINISHED": PipelineState.DONE}.get(state, state)


def _exists(marker: str) -> bool:
    try:
        return FileSystems.exists(marker)
    except Exception:  # noqa: BLE001 - storage that fails a look now may answer the next
        return False
