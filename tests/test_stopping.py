"""The launcher stopped (SIGTERM, SIGINT) or its job's workers never starting: what it
does, without a cluster (tests/test_flink_cluster.py runs both against a real one)."""

import os
import signal
import threading
import time
import types

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import SAMPLE_MANIFEST

from image_tfrecords.pipeline import engines, run, stopping

FLINK_CLUSTER = ["--runner", "FlinkRunner", "--flink_master", "jobmanager:8081"]


def watch(*flags: str, timeout: float = 0, log: str | None = None) -> stopping.JobWatch:
    return stopping.JobWatch(PipelineOptions(list(flags)), log, timeout)


def signal_soon(signum: int, after: float = 0.2) -> None:
    threading.Timer(after, os.kill, (os.getpid(), signum)).start()


def wait_in_the_main_thread(seconds: float) -> None:
    """As the launcher waits for its job: in Python code, where signal handlers run."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_the_job_runs_stops_the_launcher_as_a_shell_says(signum, exit_code):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(stopping.Stopped) as stopped, watch():
        signal_soon(signum)
        wait_in_the_main_thread(5)
    assert (str(stopped.value), stopped.value.exit_code) == (
        f"stopped by {signal.Signals(signum).name}",
        exit_code,
    )
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


class RunningJob:
    """A job that stays RUNNING when asked to cancel, as a runner this machine cannot
    reach (Dataflow's) might; its runner's PipelineResult's interface."""

    state = "RUNNING"

    def __init__(self) -> None:
        self.cancelled = False

    def job_id(self) -> str:
        return "2026-11-26_07_00_00-123"

    def cancel(self) -> None:
        self.cancelled = True


def test_a_second_signal_stops_the_wait_for_the_cancellation_not_the_cancellation():
    job = RunningJob()
    with watch("--runner", "DataflowRunner") as watching:
        with pytest.raises(stopping.Stopped):
            signal_soon(signal.SIGINT)
            wait_in_the_main_thread(5)
        signal_soon(signal.SIGINT, after=0.5)  # raises nothing: the wait ends
        started = time.monotonic()
        outcome = watching.cancel(job)
    assert time.monotonic() - started < stopping.CANCEL_WAIT_S / 3
    assert job.cancelled
    assert outcome == (
        f"the job {job.job_id()} was asked to cancel and is still RUNNING: see the runner's console"
    )


@pytest.mark.parametrize(
    "flags, environment",
    [
        ([], None),
        ([*FLINK_CLUSTER, "--environment_type", "LOOPBACK"], None),
        (["--runner", "DataflowRunner"], None),
        (FLINK_CLUSTER, "DOCKER"),  # Beam's default environment for a portable runner
        (
            [
                *FLINK_CLUSTER,
                "--environment_type",
                "external",
                "--environment_config",
                "pool:50000",
            ],
            "EXTERNAL pool:50000",
        ),
        (["--runner", "SparkRunner", "--environment_type", "PROCESS"], "PROCESS"),
    ],
)
def test_only_workers_that_start_apart_from_the_launcher_are_waited_for(flags, environment):
    assert stopping.watched_environment(PipelineOptions(flags)) == environment


@pytest.fixture
def quick_polls(monkeypatch):
    monkeypatch.setattr(stopping, "WORKER_POLL_S", 0.05)


EXTERNAL = [*FLINK_CLUSTER, "--environment_type", "EXTERNAL", "--environment_config", "pool:50000"]


def test_no_worker_started_in_time_stops_the_job_saying_which_environment(quick_polls, tmp_path):
    submitted = types.SimpleNamespace(result=RunningJob())  # Beam's Pipeline, once run
    with (
        pytest.raises(stopping.WorkersNeverStarted) as never,
        watch(*EXTERNAL, timeout=0.3) as watching,
    ):
        watching.handed_over(submitted, str(tmp_path / "worker-started"))
        wait_in_the_main_thread(5)
    assert never.value.exit_code == 1
    assert str(never.value).startswith(
        "no SDK worker of the job started within 0.3 s (--worker_start_timeout) from "
        "--environment_type EXTERNAL pool:50000: check that every TaskManager or executor "
        "reaches it and that its python imports apache_beam"
    )


def test_a_pool_whose_workers_cannot_reach_an_s3_temp_folder_is_named_as_a_cause(quick_polls, s3):
    """Workers of a plain pool start without the job's S3 keys and cannot write the marker
    into a temp folder in a bucket: the error names that cause and what to start the pool
    with, beside the workers that never started."""
    submitted = types.SimpleNamespace(result=RunningJob())
    with (
        pytest.raises(stopping.WorkersNeverStarted) as never,
        watch(*EXTERNAL, timeout=0.3) as watching,
    ):
        watching.handed_over(submitted, f"{s3.url}/stopping/worker-started")
        wait_in_the_main_thread(5)
    assert str(never.value).endswith(
        "or, where the pool's log says 'Unable to locate credentials', that its workers "
        "have S3's keys: Beam's worker pool gives them none of the job's options, so start "
        "image-tfrecords-sdk-worker-pool instead (or give its environment "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    )


@pytest.mark.parametrize(
    "timeout, submitted, marker_written",
    [
        (0.3, True, True),  # a worker started
        (0.3, False, False),  # the submission is under way: the clock has not started
        (0, True, False),  # no limit
    ],
)
def test_the_job_runs_on_when_a_worker_started_or_no_clock_runs(
    quick_polls, tmp_path, timeout, submitted, marker_written
):
    marker = tmp_path / "worker-started"
    if marker_written:
        marker.write_bytes(b"")
    pipeline = types.SimpleNamespace(result=RunningJob() if submitted else None)
    with watch(*EXTERNAL, timeout=timeout) as watching:
        watching.handed_over(pipeline, str(marker))
        wait_in_the_main_thread(0.6)


# What the job server's Flink client logs of a job it submits to a session cluster.
SUBMITTED_LOG = """\
[flink-runner-job-invoker-0] INFO org.apache.flink.api.java.utils.PlanGenerator - The job has 0 registered types and 0 default Kryo serializers
[Flink-RestClusterClient-IO-thread-1] INFO org.apache.flink.client.program.rest.RestClusterClient - Submitting job 'BeamApp-root-1126154950-fde5da11' (77216ba76a36cd7b05bb79cf9eae1b1c).
[Flink-RestClusterClient-IO-thread-4] INFO org.apache.flink.client.program.rest.RestClusterClient - Successfully submitted job 'BeamApp-root-1126154950-fde5da11' (77216ba76a36cd7b05bb79cf9eae1b1c) to 'http://localhost:38249'.
"""


def test_the_flink_jobs_a_job_server_submitted_are_read_from_its_log():
    assert engines.submitted_flink_jobs(SUBMITTED_LOG, "jobmanager:8081") == [
        engines.FlinkJob("77216ba76a36cd7b05bb79cf9eae1b1c", "http://localhost:38249")
    ]
    # Stopped before Flink answered: the job is looked for at --flink_master.
    assert engines.submitted_flink_jobs(SUBMITTED_LOG.splitlines()[1], "jobmanager:8081") == [
        engines.FlinkJob("77216ba76a36cd7b05bb79cf9eae1b1c", "http://jobmanager:8081")
    ]


def test_a_negative_worker_start_timeout_is_refused(tmp_path, capsys):
    code = run.main(
        [
            "--manifest",
            str(SAMPLE_MANIFEST),
            "--output_dir",
            str(tmp_path),
            "--worker_start_timeout",
            "-1",
        ]
    )
    assert code == run.EXIT_USAGE
    assert capsys.readouterr().err == (
        "error: --worker_start_timeout must be 0 (no limit) or more\n"
    )


@pytest.mark.parametrize(
    "flags, outcome",
    [
        ([], "the job ran in the launcher, and stopped with it"),
        (
            ["--runner", "DataflowRunner"],  # stopped while submitting
            "its submission was under way: look for the job in the runner's console",
        ),
        (FLINK_CLUSTER, "the job was not submitted (its job server had not started)"),
    ],
)
def test_a_job_stopped_before_it_reached_a_runner_is_said_so(tmp_path, flags, outcome):
    log = tmp_path / "flink.log"
    log.write_text("")
    assert watch(*flags, log=str(log)).cancel(None) == outcome
