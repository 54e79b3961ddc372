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
stage): tests/clusters.py's BEAM_IN_LIB says why. Measured here (2 cores shared with
other work), the sample set from the launcher's start to its end: 115 s on a stock
cluster (a fresh worker per stage, 152 MB of jars per job), 57-69 s with Beam in the
cluster's lib/ (one worker), 42-45 s with no jars sent as well, 22-32 s once the worker
is warm; ~7 s on the DirectRunner. bench/RESULTS.md has the breakdown.
"""

import json
import re
import shutil
import sys
from pathlib import Path

import boto3
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from clusters import FlinkCluster, WorkerPool
from conftest import BUCKET, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, download
from pipeline import engines
from test_engines import comparable, hostile_set, pipeline
from test_reliability import published


@pytest.fixture(scope="module")
def flink(tmp_path_factory, _s3_bucket):
    """A session cluster and a worker pool beside its TaskManager (the S3 server's keys in
    its environment); at the end any job left is cancelled and every JVM and worker
    stopped."""
    folder = tmp_path_factory.mktemp("flink-cluster")
    pool = WorkerPool(folder, {"AWS_ACCESS_KEY_ID": S3_ACCESS_KEY_ID,
                               "AWS_SECRET_ACCESS_KEY": S3_SECRET_ACCESS_KEY})
    try:
        cluster = FlinkCluster(folder, engines.ENGINES["flinkrunner"].built_jar)
    except BaseException:
        pool.stop()
        raise
    yield cluster, pool
    cluster.stop()
    pool.stop()


def on_the_cluster(flink, temp, environment: list[str] | None = None) -> list[str]:
    """The flags of a run on the cluster, its SDK workers in the pool unless `environment`
    names others."""
    cluster, pool = flink
    return ["--runner", "FlinkRunner", "--flink_master", f"localhost:{cluster.rest_port}",
            *(environment or ["--environment_type", "EXTERNAL",
                              "--environment_config", f"localhost:{pool.port}"]),
            "--environment_cache_millis", "60000", "--beam_runner_on_cluster",
            "--temp_location", str(temp / "tft")]


def process_environment(folder: Path) -> list[str]:
    """SDK workers the TaskManager starts itself (PROCESS), booted by
    pipeline/sdk_worker_boot.py (the image-tfrecords-sdk-worker command of an install)."""
    boot = folder / "boot"
    boot.write_text(f'#!/bin/sh\nexec {sys.executable} -m pipeline.sdk_worker_boot "$@"\n')
    boot.chmod(0o755)
    config = {"command": str(boot), "env": {"PYTHONPATH": str(Path(__file__).parents[1])}}
    return ["--environment_type", "PROCESS", "--environment_config", json.dumps(config)]


@pytest.fixture(scope="module")
def hostile_in_the_bucket(_s3_bucket, tmp_path_factory):
    """The hostile set (test_engines.hostile_set) copied to the S3 server: its manifest's
    URI and flags, and what the DirectRunner publishes of it."""
    root = tmp_path_factory.mktemp("hostile-s3")
    local = hostile_set(root)
    prefix = "flink-cluster/hostile"
    # boto3, not Beam's S3 writer: that cannot write an empty object (empty.jpg).
    client = boto3.client("s3", endpoint_url=_s3_bucket.proxy.url, region_name="us-east-1",
                          aws_access_key_id=S3_ACCESS_KEY_ID,
                          aws_secret_access_key=S3_SECRET_ACCESS_KEY)
    for path in sorted(root.rglob("*")):
        if path.is_file():
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(root).as_posix()}",
                              Body=path.read_bytes())
    folder = f"{_s3_bucket.url}/{prefix}"
    flags = [*_s3_bucket.flags, "--manifest", f"{folder}/{local.name}",
             "--max_error_fraction", "0.5", "--num_shards", "2", "--dedupe", "near"]
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
        flink, hostile_in_the_bucket, _s3_bucket, tmp_path):
    cluster, pool = flink
    flags, reference = hostile_in_the_bucket
    output = f"{_s3_bucket.url}/flink-cluster/out"
    job = pipeline(*flags, *on_the_cluster(flink, tmp_path), "--output_dir", output,
                   temp=tmp_path)
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


def test_a_failed_run_on_the_cluster_publishes_nothing_and_the_job_failed_there(
        flink, sample_outputs, tmp_path):
    """The hostile set with no dead letter allowed: the outcome check fails the job on the
    cluster; the output folder's previous contents stay byte for byte. Its SDK workers are
    the TaskManager's own processes (PROCESS), not the pool's."""
    cluster, _ = flink
    manifest = hostile_set(tmp_path / "data")
    output = shutil.copytree(sample_outputs("tfrecord"), tmp_path / "out")
    before = published(output)
    job = pipeline("--manifest", str(manifest), "--num_shards", "2", "--output_dir",
                   str(output), "--overwrite", "--max_error_fraction", "0",
                   *on_the_cluster(flink, tmp_path, process_environment(tmp_path)),
                   temp=tmp_path)
    assert job.returncode == 1, job.stderr[-3000:]
    assert "FAILED: nothing below was published" in job.stdout
    assert "more than --max_error_fraction 0.0%" in job.stderr
    assert published(output) == before
    assert cluster.jobs()[-1]["state"] == "FAILED"
    # The TaskManager started the job's SDK worker itself, through Beam's sdk_worker_main
    # (the pool's workers do not run it), with the job's options.
    assert re.search(r"sdk_worker_main\.py:\d+ - Pipeline_options: \{'job_name': 'BeamApp-",
                     cluster.task_manager_log.read_text())
