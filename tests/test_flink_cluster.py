"""The job on a real Flink session cluster, laid out and run as docs/operations/clusters.md
says: its commands and settings are taken from the page (tests/clusters.py: FlinkPage).

A Flink 1.19 installation (tests/flink_cluster/: Flink's lib/ and log4j settings) with
Beam's runner copied into its lib/ by the page's script, a JobManager and a TaskManager JVM
started as Flink's scripts start them, the page's worker pool beside the TaskManager and
its job server started once; each conversion is the page's launcher command with this
machine's hosts and folders: `--job_endpoint` the job server, `--environment_type EXTERNAL`
the pool, `--environment_cache_millis` and `--beam_runner_on_cluster`. tf.Transform's files
go to a `--temp_location` every worker reaches (here the same disk); the images and the
output to the tests' S3 server, whose keys only the job's options hold (the pool's
environment has none: each worker takes them from the runner).

bench/cluster_bench.py times the same commands; bench/RESULTS.md has the figures.

The last two tests stop a run: the launcher SIGTERMed while its job runs, and a job
whose SDK workers never start (Beam's pool with a `python` that has no Beam); each is
cancelled on the cluster (pipeline/stopping.py).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

import boto3
import portpicker
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from clusters import ROOT, FlinkCluster, JobServer, WorkerPool, beside_a_pool, flink_page
from conftest import BUCKET, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, download
from test_engines import SAMPLE_FLAGS, comparable, hostile_set, job_servers_on, pipeline
from test_reliability import published

from image_tfrecords.pipeline import engines, stopping

# How long the launcher may take to exit once stopped: the cancellation confirmed (or
# given up on) and its job server stopped.
STOP_BOUND_S = stopping.CANCEL_WAIT_S + 20


PAGE = flink_page()


class Flink(NamedTuple):
    """The page's cluster, pool and job server."""

    cluster: FlinkCluster
    pool: WorkerPool
    job_server: JobServer


@pytest.fixture(scope="module")
def flink(tmp_path_factory):
    """The page's session cluster, its worker pool beside the TaskManager (no keys in its
    environment) and its job server; at the end any job left is cancelled and every JVM and
    worker stopped."""
    folder = tmp_path_factory.mktemp("flink-cluster")
    pool = WorkerPool(folder, PAGE.pool)
    with beside_a_pool(pool, lambda: FlinkCluster(folder, PAGE)) as (cluster, pool):
        job_server = JobServer(folder, PAGE.job_server, f"localhost:{cluster.rest_port}")
        try:
            yield Flink(cluster, pool, job_server)
        finally:
            job_server.stop()


def on_the_cluster(flink: Flink, temp: Path, environment: list[str] | None = None) -> list[str]:
    """The page's launcher options for this cluster (its storage options are the test's),
    its SDK workers from the page's pool unless `environment` names others."""
    flags = PAGE.launcher_flags(flink.cluster, flink.job_server, flink.pool, temp)
    if environment:
        at = flags.index("--environment_type")
        flags[at : at + 4] = environment
    return flags


def with_its_own_job_server(flags: list[str]) -> list[str]:
    """`flags` without --job_endpoint: the launcher starts a job server for the run."""
    at = flags.index("--job_endpoint")
    return flags[:at] + flags[at + 2 :]


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
    config = {"command": str(worker_boot(folder))}
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


def test_the_page_script_copies_beams_runner_but_not_flinks_own_jars_or_slf4j(tmp_path):
    """Step 1's script: Beam's job server and its lib/ into lib/beam/, less the jars the
    installation has (flink-*: Flink's modules; slf4j-*: Beam's slf4j-simple would take the
    logs from log4j); a Flink other than 1.19, or a folder that is none, refused."""
    script, built = ROOT / PAGE.copy_runner[0], engines.ENGINES["flinkrunner"].built_jar
    home = tmp_path / "flink"
    (home / "lib").mkdir(parents=True)
    (home / "lib" / "flink-dist-1.19.0.jar").write_bytes(b"")
    copied = subprocess.run([script, str(home)], capture_output=True, text=True, check=True)
    beams = {jar.name for jar in (built.parent / "lib").glob("*.jar")}
    kept = {name for name in beams if not name.startswith(("flink-", "slf4j-"))}
    assert {jar.name for jar in (home / "lib" / "beam").iterdir()} == kept | {built.name}
    assert len(beams - kept) >= 20 and "slf4j-simple" in " ".join(beams - kept)
    assert f"copied {len(kept) + 1} jars" in copied.stdout
    (home / "lib" / "flink-dist-1.19.0.jar").rename(home / "lib" / "flink-dist-1.20.0.jar")
    refused = subprocess.run([script, str(home)], capture_output=True, text=True)
    assert refused.returncode == 1 and "is not Flink 1.19" in refused.stderr
    refused = subprocess.run([script, str(tmp_path)], capture_output=True, text=True)
    assert refused.returncode == 1 and "holds no flink-dist jar" in refused.stderr


def test_the_session_cluster_has_a_task_manager_with_a_slot(flink):
    overview = flink.cluster.rest("/overview")
    assert overview["flink-version"] == "1.19.0"
    assert (overview["taskmanagers"], overview["slots-total"]) == (1, 1)


def web_ui_log(cluster: FlinkCluster, path: str) -> str:
    """A log as Flink's web UI shows it."""
    with urllib.request.urlopen(cluster.url + path, timeout=10) as answer:
        return answer.read().decode(errors="replace")


def test_the_hostile_set_from_a_bucket_to_a_bucket_publishes_what_the_direct_runner_does(
    flink, hostile_in_the_bucket, _s3_bucket, tmp_path
):
    """The page's commands: the DirectRunner's bytes, from a pool whose environment has no
    S3 keys (each worker takes the job's options from the runner); the job's states in the
    JobManager's log and the worker's lines in the TaskManager's, as the web UI shows them,
    nothing in the .out files."""
    cluster, pool, _ = flink
    flags, reference = hostile_in_the_bucket
    output = f"{_s3_bucket.url}/flink-cluster/out"
    job = pipeline(*flags, *on_the_cluster(flink, tmp_path), "--output_dir", output, temp=tmp_path)
    assert job.returncode == 0, job.stderr[-3000:] + pool.log.read_text()[-3000:]
    assert "Traceback" not in job.stderr, job.stderr[-3000:]
    # The cluster ran it, to its end: one job, FINISHED, in the JobManager's REST API...
    (ran,) = cluster.jobs()
    assert ran["state"] == "FINISHED"
    # ...sent without the job server's jars (--beam_runner_on_cluster), and one SDK worker
    # served every stage (--environment_cache_millis), not one worker started per stage.
    assert cluster.jars_sent_with(ran["jid"]) == []
    assert pool.log.read_text().count("Started worker") == 1
    files = published_from_the_bucket(_s3_bucket, output, tmp_path / "read-back")
    assert sorted(files) == sorted(reference)
    for name, content in reference.items():
        assert files[name] == content, name
    # Where "Following a job" points.
    assert f"({ran['jid']}) switched from state RUNNING to FINISHED" in web_ui_log(
        cluster, "/jobmanager/log"
    )
    [task_manager] = cluster.rest("/taskmanagers")["taskmanagers"]
    worker_lines = web_ui_log(cluster, f"/taskmanagers/{task_manager['id']}/log")
    assert re.search(r"sdk_worker_main\.py:\d+ .*- Python sdk harness starting", worker_lines)
    assert "Unable to locate credentials" not in worker_lines + pool.log.read_text()
    for out in (cluster.home / "log").glob("*.out"):
        assert out.read_text() == "", out  # no "multiple SLF4J bindings", no log line


def test_a_failed_run_on_the_cluster_publishes_nothing_and_the_job_failed_there(
    flink, sample_outputs, tmp_path
):
    """The hostile set with no dead letter allowed: the outcome check fails the job on the
    cluster; the output folder's previous contents stay byte for byte. Its SDK workers are
    the TaskManager's own processes (PROCESS), not the pool's."""
    cluster = flink.cluster
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
        r"sdk_worker_main\.py:\d+ .*- Pipeline_options: \{'job_name': 'BeamApp-",
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


@pytest.mark.parametrize("job_server", ["the page's", "the launcher's own"])
def test_a_launcher_stopped_by_sigterm_cancels_its_job_on_the_cluster(flink, tmp_path, job_server):
    """Beam's job service cannot cancel a job its job server submitted to a session
    cluster (the job ran on to FINISHED and published): the launcher cancels it through
    the cluster's REST API (the job its own job server's log names, or the job named as
    Beam named it on the page's job server), says so in one line, publishes nothing and
    exits 143; a job server it started is stopped."""
    cluster = flink.cluster
    known = {job["jid"] for job in cluster.jobs()}
    output, job_port = tmp_path / "out", str(portpicker.pick_unused_port())
    flags = on_the_cluster(flink, tmp_path)
    if job_server == "the launcher's own":
        flags = [*with_its_own_job_server(flags), "--job_port", job_port]
    with open(tmp_path / "stderr", "w+") as stderr:
        launcher = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "image_tfrecords",
                *SAMPLE_FLAGS,
                *flags,
                "--output_dir",
                str(output),
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
    cluster = flink.cluster
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
