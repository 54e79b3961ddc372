"""The job on a real Flink session cluster, its Python workers apart from the launcher.

A JobManager and a TaskManager JVM (tests/clusters.py, from the jar `make test` builds in
tests/flink_cluster/) and Beam's worker pool from the project's venv: the launcher submits
through Beam's Flink job server (`--flink_master localhost:REST_PORT`) and the TaskManager
starts the job's SDK workers in the pool (`--environment_type EXTERNAL`), as on a
production cluster with a pool beside each TaskManager. tf.Transform's files go to a
`--temp_location` every worker reaches (here the same disk).

The cluster has Beam's runner on its class path and the run sets --environment_cache_millis,
so one SDK worker serves every stage (tests/clusters.py's BEAM_IN_LIB says why). Measured
here (2 cores shared with other work), the sample set: 57-62 s from the launcher's start
to its end, of which ~31 s before the job starts on the cluster (the job server's start
and the submission), ~22 s the job itself (REST API), ~4 s after it; 115 s with a stock
cluster (a fresh worker per stage); ~7 s on the DirectRunner. Issue 43's goal is 45 s.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import portpicker
import pytest

from clusters import FlinkCluster, WorkerPool
from pipeline import engines, stopping
from test_engines import (SAMPLE_FLAGS, assert_same_output, comparable, job_servers_on,
                          pipeline)

# How long the launcher may take to exit once stopped: the cancellation confirmed (or
# given up on) and its job server stopped.
STOP_BOUND_S = stopping.CANCEL_WAIT_S + 20


@pytest.fixture(scope="module")
def flink(tmp_path_factory):
    """A session cluster and a worker pool beside its TaskManager; at the end any job left
    is cancelled and every JVM and worker stopped."""
    folder = tmp_path_factory.mktemp("flink-cluster")
    pool = WorkerPool(folder)
    try:
        cluster = FlinkCluster(folder, engines.ENGINES["flinkrunner"].built_jar)
    except BaseException:
        pool.stop()
        raise
    yield cluster, pool
    cluster.stop()
    pool.stop()


def test_the_session_cluster_has_a_task_manager_with_a_slot(flink):
    cluster, _ = flink
    overview = cluster.rest("/overview")
    assert overview["flink-version"] == "1.19.0"
    assert (overview["taskmanagers"], overview["slots-total"]) == (1, 1)


def test_the_sample_on_the_cluster_publishes_what_the_direct_runner_does(
        flink, sample_outputs, tmp_path):
    cluster, pool = flink
    reference = comparable(sample_outputs("tfrecord"))
    output = tmp_path / "out"
    started = time.monotonic()
    job = pipeline(*on_the_cluster(cluster, pool, tmp_path), "--output_dir", str(output),
                   temp=tmp_path)
    wall = time.monotonic() - started
    assert job.returncode == 0, job.stderr[-3000:]
    # The cluster ran it, to its end: one job, FINISHED, in the JobManager's REST API.
    jobs = cluster.jobs()
    assert [job["state"] for job in jobs] == ["FINISHED"]
    print(f"the sample on the Flink session cluster: {wall:.1f} s, "
          f"the cluster's job {jobs[0]['duration'] / 1000:.1f} s of it")
    # One SDK worker served every stage (--environment_cache_millis, Beam in the cluster's
    # class path), not one worker started per stage.
    assert pool.log.read_text().count("Starting worker") == 1
    summary = json.loads((output / "summary.json").read_text())
    assert summary["options"]["runner"] == "FlinkRunner"
    assert_same_output(output, reference)


def on_the_cluster(cluster: FlinkCluster, pool: WorkerPool, temp: Path) -> list[str]:
    """The sample's flags for a run on `cluster` with its workers in `pool`."""
    return [*SAMPLE_FLAGS, "--temp_location", str(temp / "tft"),
            "--runner", "FlinkRunner", "--flink_master", f"localhost:{cluster.rest_port}",
            "--environment_type", "EXTERNAL", "--environment_config", f"localhost:{pool.port}",
            "--environment_cache_millis", "60000"]


def new_job(cluster: FlinkCluster, known: set[str], timeout: float = 180) -> dict:
    """The first job on the cluster not in `known` that is RUNNING."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [job for job in cluster.jobs()
                   if job["jid"] not in known and job["state"] == "RUNNING"]
        if running:
            return running[0]
        time.sleep(0.5)
    raise AssertionError(f"no new job ran on the cluster within {timeout} s")


def test_a_launcher_stopped_by_sigterm_cancels_its_job_on_the_cluster(flink, tmp_path):
    """Beam's job service cannot cancel a job its job server submitted to a session
    cluster (the job ran on to FINISHED and published): the launcher cancels it through
    the cluster's REST API, says so in one line, publishes nothing and exits 143."""
    cluster, pool = flink
    known = {job["jid"] for job in cluster.jobs()}
    output, job_port = tmp_path / "out", str(portpicker.pick_unused_port())
    with open(tmp_path / "stderr", "w+") as stderr:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "pipeline", *on_the_cluster(cluster, pool, tmp_path),
             "--output_dir", str(output), "--job_port", job_port],
            stdout=subprocess.DEVNULL, stderr=stderr, cwd=Path(__file__).parents[1],
            start_new_session=True, env={**os.environ, "TMPDIR": str(tmp_path)})
        try:
            job = new_job(cluster, known)
            launcher.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            launcher.wait(STOP_BOUND_S)
            took = time.monotonic() - stopped
        finally:
            if launcher.poll() is None:
                os.killpg(launcher.pid, signal.SIGKILL)
        stderr.seek(0)
        said = stderr.read()
    assert launcher.returncode == 128 + signal.SIGTERM, said[-3000:]
    assert cluster.rest(f"/jobs/{job['jid']}")["state"] == "CANCELED"
    print(f"SIGTERM to the launcher's exit, the Flink job cancelled: {took:.1f} s")
    assert "Traceback" not in said, said[-3000:]
    assert said.splitlines()[-1] == (
        f"error: stopped by SIGTERM; the Flink job {job['jid']} is cancelled. After it: "
        f"nothing was published, {output} has no summary.json (no reader takes it for an "
        f"output); the run's files are in {next(output.glob('.tmp-*'))} (--resume reuses "
        "its finished shards)")
    assert not (output / "summary.json").exists()
    assert not job_servers_on(job_port), "the launcher left its job server running"


def test_a_job_whose_workers_never_start_is_cancelled_saying_why(flink, tmp_path):
    """A worker pool whose `python` cannot import Beam: the pool starts each worker, which
    dies at once, and the TaskManager waits for it for ever. With a short
    --worker_start_timeout the launcher cancels the job and exits 1 in one line."""
    cluster, _ = flink
    without_beam = tmp_path / "python_without_beam"
    without_beam.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")  # no site-packages
    without_beam.chmod(0o755)
    pool = WorkerPool(tmp_path, workers_python=str(without_beam))
    try:
        known = {job["jid"] for job in cluster.jobs()}
        output = tmp_path / "out"
        started = time.monotonic()
        job = pipeline(*on_the_cluster(cluster, pool, tmp_path), "--output_dir", str(output),
                       "--worker_start_timeout", "45", temp=tmp_path)
        wall = time.monotonic() - started
    finally:
        pool.stop()
    assert job.returncode == 1, job.stderr[-3000:]
    assert "No module named 'apache_beam'" in pool.log.read_text() + job.stderr
    [new] = [found for found in cluster.jobs() if found["jid"] not in known]
    assert new["state"] == "CANCELED"
    print(f"a job whose workers never start, with --worker_start_timeout 45: {wall:.1f} s")
    assert "Traceback" not in job.stderr, job.stderr[-3000:]
    assert job.stderr.splitlines()[-1].startswith(
        "error: no SDK worker of the job started within 45 s (--worker_start_timeout) from "
        f"--environment_type EXTERNAL localhost:{pool.port}: check that every TaskManager or "
        "executor reaches it and that its python imports apache_beam and this project (the "
        "TaskManager's log says 'Still waiting for startup of environment'); the Flink job "
        f"{new['jid']} is cancelled. After it: nothing was published")
    assert not (output / "summary.json").exists()
