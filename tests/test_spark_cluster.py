"""The job on a real Spark standalone cluster, its Python workers apart from the launcher.

A Master and a Worker JVM (tests/clusters.py, from the jar `make test` builds in
tests/spark_cluster/) and Beam's worker pool from the project's venv: the launcher submits
through Beam's Spark job server (`--spark_master_url spark://HOST:PORT`), whose driver
asks the Master for an application; the Worker starts its executor, and the executor
starts the job's SDK workers in the pool (`--environment_type EXTERNAL`), as on a
production cluster with a pool beside each Worker. tf.Transform's files go to a
`--temp_location` every worker reaches (here the same disk).

What the cluster has on its class path: Spark 3.5.0 and its dependencies, with one
Jackson (tests/spark_cluster/pom.xml), as a Spark distribution's jars/ folder; not Beam.
Beam's runner reaches the executors the way it does on any standalone cluster: the
job server's SparkPipelineRunner, for a master that is not local, names every jar of its
own class path in the SparkContext's spark.jars (SparkCommonPipelineOptions.
prepareFilesToStage, SparkContextFactory), and each executor fetches them from the driver
into its work folder and loads them after Spark's own (233 jars, 260 MB, 2-5 s here; with
Beam's shaded job server jar it is that one jar). No Guava of the cluster's may shadow
the application's there (tests/spark_cluster/pom.xml says what failed). Unlike Flink's,
the executor keeps one class loader for the whole application, so --environment_cache_millis
alone makes one SDK worker serve every stage: without it the pool started 61 workers and
the set took 194 s.

Measured here (2 cores shared with other work, load 2 to 9), the hostile set: 48-86 s
from the launcher's start to its end, of which 12-31 s before the application starts on
the cluster (the launcher, the job server's start, the submission), 35-60 s the
application itself (the Master's JSON: the executor's start ~3-7 s, fetching Beam's jars
~2-5 s, the SDK worker's start with the first stage ~20-30 s, the other 41 Spark jobs
~20 s), ~1 s after it; the same set embedded (`local[2]`, LOOPBACK) 26-54 s, on the
DirectRunner 11-18 s. The failed run: 39-66 s. The module: 104 s at load 2, 154-169 s at 6-8.
"""

import dataclasses
import re
import shutil
import subprocess
import time

import pytest
from clusters import SparkCluster, WorkerPool, beside_a_pool
from storage_servers import HOST
from test_engines import assert_same_output, engine_log, pipeline
from test_reliability import published


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """A standalone cluster and a worker pool beside its Worker; at the end any application
    left is killed and every JVM, executor and worker stopped."""
    folder = tmp_path_factory.mktemp("spark-cluster")
    with beside_a_pool(WorkerPool(folder), lambda: SparkCluster(folder)) as cluster_and_pool:
        yield cluster_and_pool


@dataclasses.dataclass(frozen=True)
class ClusterRun:
    """A launcher's run on the cluster: its process, the application the Master shows for
    it, and the times: `wall` from the launcher's start to its end, `before` until the
    Master started the application, `application` its duration there."""

    job: subprocess.CompletedProcess
    application: dict
    wall: float
    before: float
    application_s: float

    def times(self) -> str:
        return (
            f"{self.wall:.1f} s, of which {self.before:.1f} s before the application "
            f"started, the application {self.application_s:.1f} s, "
            f"{self.wall - self.before - self.application_s:.1f} s after it"
        )


def run_on_the_cluster(spark, *argv: str, temp, monkeypatch) -> ClusterRun:
    """`pipeline(*argv)` on the cluster, its SDK workers in the pool."""
    cluster, pool = spark
    # The driver, in the launcher's job server, binds HOST as the cluster does.
    monkeypatch.setenv("SPARK_LOCAL_IP", HOST)
    known = {application["id"] for application in cluster.applications()}
    started = time.time()
    job = pipeline(
        *argv,
        "--temp_location",
        str(temp / "tft"),
        "--runner",
        "SparkRunner",
        "--spark_master_url",
        cluster.master_url,
        "--environment_type",
        "EXTERNAL",
        "--environment_config",
        f"localhost:{pool.port}",
        "--environment_cache_millis",
        "60000",
        temp=temp,
    )
    ended = time.time()
    [application] = [
        application for application in cluster.applications() if application["id"] not in known
    ]
    return ClusterRun(
        job,
        application,
        wall=ended - started,
        before=application["starttime"] / 1000 - started,
        application_s=application["duration"] / 1000,
    )


def test_the_hostile_set_on_the_cluster_publishes_what_the_direct_runner_does(
    spark, hostile, tmp_path, monkeypatch
):
    _, pool = spark
    flags, reference = hostile
    workers_before = pool.log.read_text().count("Starting worker")
    output = tmp_path / "out"
    run = run_on_the_cluster(
        spark, *flags, "--output_dir", str(output), temp=tmp_path, monkeypatch=monkeypatch
    )
    assert run.job.returncode == 0, run.job.stderr[-3000:]
    print(f"the hostile set on the Spark cluster: {run.times()}")
    # The cluster ran it, to its end: its application FINISHED in the Master's JSON.
    assert run.application["state"] == "FINISHED"
    # Every task ran once: no task failed on the executor and passed on Spark's retry.
    assert "Lost task" not in engine_log(run.job, "spark")
    # One SDK worker served every stage (--environment_cache_millis), not one per stage.
    assert pool.log.read_text().count("Starting worker") - workers_before == 1
    assert_same_output(output, reference)


def test_a_failed_run_on_the_cluster_publishes_nothing(
    spark, hostile, sample_outputs, tmp_path, monkeypatch
):
    """The hostile set with no dead letter allowed: the outcome check, on the executor,
    fails the job; the output folder's previous contents stay byte for byte."""
    flags, _ = hostile
    output = shutil.copytree(sample_outputs("tfrecord"), tmp_path / "out")
    before = published(output)
    run = run_on_the_cluster(
        spark,
        *flags,
        "--output_dir",
        str(output),
        "--overwrite",
        "--max_error_fraction",
        "0",
        temp=tmp_path,
        monkeypatch=monkeypatch,
    )
    print(f"a failed run on the Spark cluster: {run.times()}")
    assert run.job.returncode == 1, run.job.stderr[-3000:]
    assert "FAILED: nothing below was published" in run.job.stdout
    assert "more than --max_error_fraction 0.0%" in run.job.stderr
    assert published(output) == before
    # The job failed on the executor, the outcome check's task tried as often as Spark
    # tries any (spark.task.maxFailures, 4 on a cluster; 1 in local mode).
    assert re.search(r"Task \d+ in stage [\d.]+ failed 4 times", engine_log(run.job, "spark"))
    # The Master's state says the driver ended its application, not how the job went:
    # FINISHED here too. The launcher's exit code and its error line are the verdict.
    assert run.application["state"] == "FINISHED"
