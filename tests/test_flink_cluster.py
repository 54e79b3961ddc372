"""The job on a real Flink session cluster, its Python workers apart from the launcher.

A JobManager and a TaskManager JVM (tests/clusters.py, from the jar `make test` builds in
tests/flink_cluster/) and Beam's worker pool from the project's venv: the launcher submits
through Beam's Flink job server (`--flink_master localhost:REST_PORT`) and the TaskManager
starts the job's SDK workers in the pool (`--environment_type EXTERNAL`), as on a
production cluster with a pool beside each TaskManager. tf.Transform's files go to a
`--temp_location` every worker reaches (here the same disk); the images and the output to
the tests' S3 server, whose keys the pool's environment holds.

The cluster has Beam's runner on its class path, so the runs set --beam_runner_on_cluster
(no jars sent with the job) and --environment_cache_millis (one SDK worker serves every
stage): tests/clusters.py's BEAM_IN_LIB says why. The sample set from the launcher's
start to its end (bench/cluster_bench.py, 2 cores): 97-115 s on a stock cluster (a fresh
worker per stage, 152 MB of jars per job), 57-69 s with Beam in the cluster's lib/ (one
worker), 21-26 s with no jars sent as well on a quiet machine (42-46 s beside two other
JVM test runs); 6.3 s on the DirectRunner. bench/RESULTS.md has the breakdown.

The last two tests stop a run: the launcher SIGTERMed while its job runs, and a job
whose SDK workers never start (a pool whose `python` has no Beam); each is cancelled on
the cluster (pipeline/stopping.py).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import portpicker
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from clusters import FlinkCluster, WorkerPool, beside_a_pool
from conftest import BUCKET, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, download
from test_engines import SAMPLE_FLAGS, comparable, hostile_set, job_servers_on, pipeline
from test_reliability import published

from image_tfrecords.pipeline import engines, stopping

# How long the launcher may take to exit once stopped: the cancellation confirmed (or
# given up on) and its job server stopped.
STOP_BOUND_S = stopping.CANCEL_WAIT_S + 20


@pytest.fixture(scope="module")
def flink(tmp_path_factory, _s3_bucket):
    """A session cluster and a worker pool beside its TaskManager (the S3 server's keys in
    its environment); at the end any job left is cancelled and every JVM and worker
    stopped."""
    folder = tmp_path_factory.mktemp("flink-cluster")
    pool = WorkerPool(
        folder,
        {"AWS_ACCESS_KEY_ID": S3_ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": S3_SECRET_ACCESS_KEY},
    )
    with beside_a_pool(
        pool, lambda: FlinkCluster(folder, engines.ENGINES["flinkrunner"].built_jar)
    ) as cluster_and_pool:
        yield cluster_and_pool


def on_the_cluster(flink, temp, environment: list[str] | None = None) -> list[str]:
    """The flags of a run on the cluster, its SDK workers in the pool unless `environment`
    names others."""
    cluster, pool = flink
    return [
        "--runner",
        "FlinkRunner",
        "--flink_master",
        f"localhost:{cluster.rest_port}",
        *(environment or in_the_pool(pool)),
        "--environment_cache_millis",
        "60000",
        "--beam_runner_on_cluster",
        "--temp_location",
        str(temp / "tft"),
    ]


def in_the_pool(pool: WorkerPool) -> list[str]:
    """The flags of SDK workers from `pool` (EXTERNAL)."""
    return ["--environment_type", "EXTERNAL", "--environment_config", f"localhost:{pool.port}"]


def worker_boot(folder: Path) -> Path:
    """pipeline/sdk_worker_boot.py as a command (the image-tfrecords-sdk-worker command of
    an install): an SDK worker that asks the job's provision service for its options."""
    boot = folder / "boot"
    boot.write_text(
        f'#!/bin/sh\nexec {sys.executable} -m image_tfrecords.pipeline.sdk_worker_boot "$@"\n'
    )
    boot.chmod(0o755)
    return boot


def process_environment(folder: Path) -> list[str]:
    """SDK workers the TaskManager starts itself (PROCESS), booted by worker_boot."""
    config = {
        "command": str(worker_boot(folder)),
        "env": {"PYTHONPATH": str(Path(__file__).parents[1])},
    }
    return ["--environment_type", "PROCESS", "--environment_config", json.dumps(config)]


@pytest.fixture(scope="module")
def hostile_in_the_bucket(_s3_bucket, tmp_path_factory):
    """The hostile set (test_engines.hostile_set) copied to the S3 server: its manifest's
    URI and flags, and what the DirectRunner publishes of it."""
    root = tmp_path_factory.mktemp("hostile-s3")
    local = hostile_set(root)
    prefix = "flink-cluster/hostile"
    # boto3, not Beam's S3 writer: that cannot write an empty object (empty.jpg).
    client = boto3.client(
        "s3",
        endpoint_url=_s3_bucket.proxy.url,
        region_name="us-east-1",
        aws_access_key_id=S3_ACCESS_KEY_ID,
        aws_secret_access_key=S3_SECRET_ACCESS_KEY,
    )
    for path in sorted(root.rglob("*")):
        if path.is_file():
            client.put_object(
                Bucket=BUCKET,
                Key=f"{prefix}/{path.relative_to(root).as_posix()}",
                Body=path.read_bytes(),
            )
    folder = f"{_s3_bucket.url}/{prefix}"
    flags = [
        *_s3_bucket.flags,
        "--manifest",
        f"{folder}/{local.name}",
        "--max_error_fraction",
        "0.5",
        "--num_shards",
        "2",
        "--dedupe",
        "near",
    ]
    job = pipeline(*flags, "--output_dir", str(root / "direct"), temp=root)
    assert job.returncode == 0, job.stderr[-3000:]
    return flags, comparable(root / "direct")


def published_from_the_bucket(bucket, output: str, local) -> dict:
    """`comparable` of a bucket's output, read back below `local`, as if written there."""
    FileSystems.set_options(PipelineOptions(bucket.flags))
    download(output, local)
    report = local / "report.html"
    report.write_text(report.read_text().replace(output, str(local)))
    return comparable(local)


def test_the_session_cluster_has_a_task_manager_with_a_slot(flink):
    cluster, _ = flink
    overview = cluster.rest("/overview")
    assert overview["flink-version"] == "1.19.0"
    assert (overview["taskmanagers"], overview["slots-total"]) == (1, 1)


def test_the_hostile_set_from_a_bucket_to_a_bucket_publishes_what_the_direct_runner_does(
    flink, hostile_in_the_bucket, _s3_bucket, tmp_path
):
    cluster, pool = flink
    flags, reference = hostile_in_the_bucket
    output = f"{_s3_bucket.url}/flink-cluster/out"
    job = pipeline(*flags, *on_the_cluster(flink, tmp_path), "--output_dir", output, temp=tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    assert "Traceback" not in job.stderr, job.stderr[-3000:]
    # The cluster ran it, to its end: one job, FINISHED, in the JobManager's REST API...
    (ran,) = cluster.jobs()
    assert ran["state"] == "FINISHED"
    # ...sent without the job server's jars (--beam_runner_on_cluster), and one SDK worker
    # served every stage (--environment_cache_millis), not one worker started per stage.
    assert cluster.jars_sent_with(ran["jid"]) == []
    assert pool.log.read_text().count("Starting worker") == 1
    files = published_from_the_bucket(_s3_bucket, output, tmp_path / "read-back")
    assert sorted(files) == sorted(reference)
    for name, content in reference.items():
        assert files[name] == content, name


def test_a_worker_pool_without_keys_reaches_the_bucket_with_the_keys_the_job_was_given(
    flink, _s3_bucket, tmp_path
):
    """A worker pool whose environment has no AWS keys, started as the docs say for keys
    given as the job's options (`--container_executable image-tfrecords-sdk-worker`):
    each worker takes the job's options, keys included, from the provision service, so
    its first storage call (the worker-started marker, in the run's temp folder in the
    bucket) and every later one reach the bucket. A plain pool's workers get no options
    from Beam (they failed with 'Unable to locate credentials')."""
    cluster, _ = flink
    pool = WorkerPool(tmp_path, container_executable=str(worker_boot(tmp_path)))
    output = f"{_s3_bucket.url}/flink-cluster/keys-as-options"
    try:
        job = pipeline(
            *SAMPLE_FLAGS,
            *_s3_bucket.flags,
            *on_the_cluster(flink, tmp_path, in_the_pool(pool)),
            "--output_dir",
            output,
            "--worker_start_timeout",
            "120",
            temp=tmp_path,
        )
    finally:
        pool.stop()
    assert job.returncode == 0, job.stderr[-3000:] + pool.log.read_text()[-3000:]
    assert cluster.jobs()[-1]["state"] == "FINISHED"
    assert "Unable to locate credentials" not in pool.log.read_text()
    files = published_from_the_bucket(_s3_bucket, output, tmp_path / "read-back")
    summary = files["summary.json"]
    assert summary["accounted"] and summary["examples_written"] > 0


def test_a_failed_run_on_the_cluster_publishes_nothing_and_the_job_failed_there(
    flink, sample_outputs, tmp_path
):
    """The hostile set with no dead letter allowed: the outcome check fails the job on the
    cluster; the output folder's previous contents stay byte for byte. Its SDK workers are
    the TaskManager's own processes (PROCESS), not the pool's."""
    cluster, _ = flink
    manifest = hostile_set(tmp_path / "data")
    output = shutil.copytree(sample_outputs("tfrecord"), tmp_path / "out")
    before = published(output)
    job = pipeline(
        "--manifest",
        str(manifest),
        "--num_shards",
        "2",
        "--output_dir",
        str(output),
        "--overwrite",
        "--max_error_fraction",
        "0",
        *on_the_cluster(flink, tmp_path, process_environment(tmp_path)),
        temp=tmp_path,
    )
    assert job.returncode == 1, job.stderr[-3000:]
    assert "FAILED: nothing below was published" in job.stdout
    assert "more than --max_error_fraction 0.0%" in job.stderr
    assert published(output) == before
    assert cluster.jobs()[-1]["state"] == "FAILED"
    # The TaskManager started the job's SDK worker itself, through Beam's sdk_worker_main
    # (the pool's workers do not run it), with the job's options.
    assert re.search(
        r"sdk_worker_main\.py:\d+ - Pipeline_options: \{'job_name': 'BeamApp-",
        cluster.task_manager_log.read_text(),
    )


def new_job(cluster: FlinkCluster, known: set[str], timeout: float = 180) -> dict:
    """The first job on the cluster not in `known` that is RUNNING."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [
            job for job in cluster.jobs() if job["jid"] not in known and job["state"] == "RUNNING"
        ]
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
            [
                sys.executable,
                "-m",
                "image_tfrecords",
                *SAMPLE_FLAGS,
                *on_the_cluster(flink, tmp_path),
                "--output_dir",
                str(output),
                "--job_port",
                job_port,
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=Path(__file__).parents[1],
            start_new_session=True,
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )
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
    assert re.fullmatch(
        re.escape(
            f"error: stopped by SIGTERM; the Flink job {job['jid']} is cancelled. After it: "
            f"nothing was published, {output} has no summary.json (no reader takes it for an "
            f"output); "
        )
        + r"(its files are in|\d+ finished shards? kept in) "
        + re.escape(
            f"{next(output.glob('.tmp-*'))}: the same image-tfrecords convert command with "
            "--resume continues it"
        ),
        said.splitlines()[-1],
    )
    assert not (output / "summary.json").exists()
    assert not job_servers_on(job_port), "the launcher left its job server running"


def test_a_job_whose_workers_never_start_is_cancelled_saying_why(flink, tmp_path):
    """A worker pool whose `python` cannot import Beam: the pool starts each worker, which
    dies at once, and the TaskManager waits for it for ever. With a short
    --worker_start_timeout the launcher cancels the job and exits 1 in one line."""
    cluster, _ = flink
    without_beam = tmp_path / "python_without_beam"
    without_beam.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # no site-packages
    without_beam.chmod(0o755)
    pool = WorkerPool(tmp_path, workers_python=str(without_beam))
    try:
        known = {job["jid"] for job in cluster.jobs()}
        output = tmp_path / "out"
        started = time.monotonic()
        job = pipeline(
            *SAMPLE_FLAGS,
            *on_the_cluster(flink, tmp_path, in_the_pool(pool)),
            "--output_dir",
            str(output),
            "--worker_start_timeout",
            "10",
            temp=tmp_path,
        )
        wall = time.monotonic() - started
    finally:
        pool.stop()
    assert job.returncode == 1, job.stderr[-3000:]
    assert "No module named 'apache_beam'" in pool.log.read_text() + job.stderr
    [new] = [found for found in cluster.jobs() if found["jid"] not in known]
    assert new["state"] == "CANCELED"
    print(f"a job whose workers never start, with --worker_start_timeout 10: {wall:.1f} s")
    assert "Traceback" not in job.stderr, job.stderr[-3000:]
    assert job.stderr.splitlines()[-1].startswith(
        "error: no SDK worker of the job started within 10 s (--worker_start_timeout) from "
        f"--environment_type EXTERNAL localhost:{pool.port}: check that every TaskManager or "
        "executor reaches it and that its python imports apache_beam and this project (the "
        "TaskManager's log says 'Still waiting for startup of environment'); the Flink job "
        f"{new['jid']} is cancelled. After it: nothing was published"
    )
    assert not (output / "summary.json").exists()
