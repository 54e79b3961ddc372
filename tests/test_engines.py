"""Flink and Spark run the job for real, and publish what the DirectRunner publishes.

Each run is `python -m image_tfrecords` in a process of its own, on Beam's job servers as
`make job-servers` builds them (job_servers/): FlinkRunner on an embedded Flink
(`--flink_master [local]`, parallelism 2), SparkRunner on Spark's local mode (`local[2]`),
with the SDK workers in the launching process (LOOPBACK). tf.Transform's vocabulary, the
shards, dead letters, copy search, report and publish step all run on the engine; the
job server's log, which the console names, shows the engine's own job id and states.
"""

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from concurrent import futures
from pathlib import Path

import grpc
import portpicker
import psutil
import pytest
from conftest import SAMPLE_MANIFEST, encode, photo_like, png_declaring
from test_reliability import published
from test_resume import STOP_AT

from image_tfrecords.core.records.receipts import ShardReceipt
from image_tfrecords.pipeline import engines, run

ENGINES = {
    "flink": [
        "--runner",
        "FlinkRunner",
        "--flink_master",
        "[local]",
        "--parallelism",
        "2",
        "--environment_type",
        "LOOPBACK",
    ],
    "spark": [
        "--runner",
        "SparkRunner",
        "--spark_master_url",
        "local[2]",
        "--environment_type",
        "LOOPBACK",
    ],
}
# What the engine's own log says of a job that ran to its end there.
FINISHED = {
    "flink": re.compile(
        r"Job BeamApp-\S+ \(([0-9a-f]{32})\) switched from state RUNNING "
        r"to FINISHED"
    ),
    "spark": re.compile(r"SparkPipelineRunner: Job (BeamApp-\S+) finished"),
}
SAMPLE_FLAGS = [
    "--manifest",
    str(SAMPLE_MANIFEST),
    "--max_error_fraction",
    "0.25",
    "--num_shards",
    "2",
]
LOG_LINE = re.compile(r"image-tfrecords: running on (Flink|Spark); the job server's log: (\S+)")


def pipeline(
    *argv: str, temp: Path, script: tuple[str, ...] = ("-m", "image_tfrecords")
) -> subprocess.CompletedProcess:
    """A conversion in a process (and process group) of its own, whose temp folder (for
    tf.Transform's files and the job server's log) is the test's `temp`."""
    return subprocess.run(
        [sys.executable, *script, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[1],
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(temp)},
    )


def engine_log(job: subprocess.CompletedProcess, engine: str) -> str:
    """The job server's log the console named."""
    named = LOG_LINE.search(job.stderr)
    assert named and named.group(1).lower() == engine, job.stderr[-3000:]
    return Path(named.group(2)).read_text()


def job_servers_on(port: str) -> list[psutil.Process]:
    """The job servers started with --job-port `port` that still run."""

    def command_line(process):
        try:
            return process.cmdline()
        except psutil.Error:
            return []

    return [
        process
        for process in psutil.process_iter()
        if "--job-port" in (line := command_line(process)) and port in line
    ]


def comparable(output: Path) -> dict:
    """`published`, less the runner's name."""
    files = published(output)
    assert files["summary.json"]["options"].pop("runner")
    return files


def assert_same_output(output: Path, reference: dict) -> None:
    files = comparable(output)
    assert sorted(files) == sorted(reference)
    for name, content in reference.items():
        assert files[name] == content, name


def hostile_set(root: Path) -> Path:
    """Images a reader stumbles on and rows a manifest gets wrong, 3 labels; m.csv's path.

    Kept: 16-bit, palette-with-transparency, CMYK and animated images, a byte-identical
    copy in TEST of a TRAIN image (--dedupe near drops it). Dead letters: a cut-off JPEG,
    an empty file, text named .jpg, a missing file, a PNG declaring 10^10 pixels, an
    unknown split, a missing label, a label TRAIN never saw, a row of 4 fields.
    """
    images = root / "img"
    images.mkdir(parents=True)
    rows = []
    for index in range(24):
        label = ("cat", "dog", "fish")[index % 3]
        split = "TRAIN" if index < 18 else ("VALIDATION", "TEST")[index % 2]
        (images / f"{index}.jpg").write_bytes(encode(photo_like(40, 30, index), "JPEG"))
        rows.append(f"{split},img/{index}.jpg,{label}")
    odd = {
        "sixteen_bit.png": encode(photo_like(24, 20, 40, "L").convert("I;16"), "PNG"),
        "palette.png": encode(photo_like(24, 20, 41).convert("P"), "PNG", transparency=0),
        "cmyk.jpg": encode(photo_like(24, 20, 42, "CMYK"), "JPEG"),
        "animated.gif": encode(
            photo_like(24, 20, 43).convert("P"),
            "GIF",
            save_all=True,
            append_images=[photo_like(24, 20, 44).convert("P")],
        ),
        "cut.jpg": encode(photo_like(64, 48, 45), "JPEG")[:300],
        "empty.jpg": b"",
        "text.jpg": b"not an image at all\n",
        "bomb.png": png_declaring(100_000, 100_000),
    }
    for name, data in odd.items():
        (images / name).write_bytes(data)
    for index, name in enumerate(odd):
        rows.append(
            f"{('TRAIN', 'VALIDATION', 'TEST')[index % 3]},img/{name},"
            f"{('cat', 'dog', 'fish')[index % 3]}"
        )
    shutil.copy(images / "0.jpg", images / "copy_of_0.jpg")
    rows += [
        "TEST,img/copy_of_0.jpg,cat",
        "TRAIN,img/missing.jpg,dog",
        "TRIAN,img/1.jpg,dog",
        "TRAIN,img/2.jpg,",
        "TEST,img/3.jpg,bird",
        "TRAIN,img/4.jpg,dog,4",
    ]
    (root / "m.csv").write_text("\n".join(rows) + "\n")
    return root / "m.csv"


def direct_run_of_the_hostile_set(root: Path) -> tuple[list[str], dict]:
    """The hostile set's flags and the DirectRunner's output of it, as `comparable` reads
    it, made under `root` (conftest.py's session fixture `hostile` holds it: this module
    and test_spark_cluster.py compare their engines' outputs with the one run)."""
    flags = [
        "--manifest",
        str(hostile_set(root)),
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


@pytest.fixture(scope="module")
def sample(sample_outputs):
    return SAMPLE_FLAGS, comparable(sample_outputs("tfrecord"))


@pytest.mark.parametrize("engine", ENGINES)
def test_the_engine_publishes_what_the_direct_runner_does(engine, hostile, tmp_path):
    """The hostile set, with the engine's parallelism 2: bundles finish in other orders.
    The sample set, and a failed run, are run on the engines' clusters
    (test_flink_cluster.py, test_spark_cluster.py)."""
    flags, reference = hostile
    output = tmp_path / "out"
    job_port = str(portpicker.pick_unused_port())
    job = pipeline(
        *flags, *ENGINES[engine], "--output_dir", str(output), "--job_port", job_port, temp=tmp_path
    )
    assert job.returncode == 0, job.stderr[-3000:]
    assert not job_servers_on(job_port), "the run left its job server running"
    assert FINISHED[engine].search(engine_log(job, engine)), "no job of the engine's ran"
    summary = json.loads((output / "summary.json").read_text())
    assert summary["options"]["runner"] == ENGINES[engine][1]
    assert summary["rows_read"] == summary["examples_written"] + summary["rows_dead_lettered"]
    reasons = summary["errors"]["by_reason"]
    assert {
        "truncated_image",
        "empty_file",
        "not_an_image",
        "file_not_found",
        "decompression_bomb",
        "invalid_split",
        "missing_label",
        "unseen_label",
        "duplicate_image",
    } <= reasons.keys(), reasons
    assert_same_output(output, reference)
    # Nothing of Beam's normal shutdown reads as a failure.
    assert "Traceback" not in job.stderr, job.stderr[-3000:]


@pytest.fixture(scope="module")
def grouped(planted, tmp_path_factory):
    """--split_by groups on conftest's planted set: its flags and the DirectRunner's output."""
    flags = [
        "--manifest",
        str(planted / "m.csv"),
        "--split_by",
        "groups",
        "--group_column",
        "patient",
        "--num_shards",
        "2",
    ]
    root = tmp_path_factory.mktemp("grouped")
    job = pipeline(*flags, "--output_dir", str(root / "direct"), temp=root)
    assert job.returncode == 0, job.stderr[-3000:]
    return flags, comparable(root / "direct")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_grouped_split_on_the_engine_is_the_direct_runners_byte_for_byte(
    engine, grouped, tmp_path
):
    """Both of a grouped split's runs (the staging run, the run with the plan) on the
    engine, with its parallelism 2: the same split, shards and report (issue 57.4)."""
    flags, reference = grouped
    output = tmp_path / "out"
    job = pipeline(*flags, *ENGINES[engine], "--output_dir", str(output), temp=tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    logs = [Path(path).read_text() for _, path in LOG_LINE.findall(job.stderr)]
    assert len(logs) == 2 and all(FINISHED[engine].search(log) for log in logs), job.stderr
    assert_same_output(output, reference)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_stopped_engine_run_resumes_reusing_its_finished_shards(engine, sample, tmp_path):
    """SIGKILLed (the launcher, its LOOPBACK workers and the job server: one process
    group) once the engine's worker processes wrote the 4th of 6 shards' receipts
    (bench/stop_at.py counts the calls across processes, one at a time, so none lands
    after the kill); resumed on the engine. A shard is chosen by a hash of the image's
    path, which holds the checkout's folder: in some folders a shard gets no image, and
    has a receipt but no file, reused or published."""
    flags, reference = sample
    output = tmp_path / "out"
    argv = [*flags, *ENGINES[engine], "--output_dir", str(output)]
    stopped = pipeline(
        "image_tfrecords.core.records.receipts",
        "write_receipt",
        "after",
        "4",
        *argv,
        temp=tmp_path,
        script=(str(STOP_AT),),
    )
    assert stopped.returncode == -signal.SIGKILL, stopped.stderr[-3000:]
    receipts = [
        ShardReceipt.from_json(path.read_bytes(), str(path.parent.parent)).outcome.written
        for path in output.glob(".tmp-*/receipts/*.receipt.json")
    ]
    assert len(receipts) == 4
    reused = sum(1 for written in receipts if written.examples)
    shards = sum(1 for name in reference if name.endswith(".tfrecord"))
    job = pipeline(*argv, "--resume", temp=tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    assert f"resumed: {reused} of {shards} shards reused from the stopped run" in job.stdout
    assert FINISHED[engine].search(engine_log(job, engine))
    files = without_resume(comparable(output))
    assert files.pop("resumed_shards") == reused
    expected = without_resume(reference)
    expected.pop("resumed_shards")
    assert sorted(files) == sorted(expected)
    for name, content in expected.items():
        assert files[name] == content, name


def without_resume(files: dict) -> dict:
    """`files` with summary.json's resumed_shards under its own key, and no resume option."""
    summary = {**files["summary.json"], "options": {**files["summary.json"]["options"]}}
    summary["options"].pop("resume")
    return {**files, "summary.json": summary, "resumed_shards": summary.pop("resumed_shards")}


@pytest.mark.parametrize("beam_adds_them", [True, False])
def test_spark_gets_the_jvm_flags_java_17_needs_where_beam_adds_none(beam_adds_them, monkeypatch):
    """Beam's SparkRunner opens the JDK's internals to Spark from apache/beam#39339 on (its
    SPARK_JAR_JOB_SERVER_JVM_ARGS); on Beam 2.69 a Spark run failed on Java 17 without
    them. Where Beam adds them, nothing is added; else the launcher adds them after the
    user's own. Flink needs none."""
    from apache_beam.options.pipeline_options import JobServerOptions, PipelineOptions
    from apache_beam.runners.portability import spark_runner

    if not beam_adds_them:
        monkeypatch.delattr(spark_runner, "SPARK_JAR_JOB_SERVER_JVM_ARGS", raising=False)
    else:
        monkeypatch.setattr(spark_runner, "SPARK_JAR_JOB_SERVER_JVM_ARGS", [], raising=False)
    given = ["--job_server_jvm_properties=-Xmx2g"]
    spark = PipelineOptions(["--runner", "SparkRunner", "--spark_job_server_jar", "x.jar", *given])
    engines.use_built_job_server(spark)
    flags = engines.ENGINES["sparkrunner"].java_17_flags
    assert "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in flags
    assert spark.view_as(JobServerOptions).job_server_jvm_properties == (
        ["-Xmx2g"] if beam_adds_them else ["-Xmx2g", *flags]
    )
    flink = PipelineOptions(["--runner", "FlinkRunner", "--flink_job_server_jar", "x.jar"])
    engines.use_built_job_server(flink)
    assert flink.view_as(JobServerOptions).job_server_jvm_properties == []


def test_a_cluster_run_needs_a_temp_location_its_workers_reach(tmp_path, capsys):
    """Workers in containers elsewhere would write tf.Transform's files to their own /tmp."""
    code = run.main(
        [
            "--manifest",
            str(SAMPLE_MANIFEST),
            "--output_dir",
            str(tmp_path),
            "--runner",
            "FlinkRunner",
            "--flink_master",
            "flink-jobmanager:8081",
            "--environment_type",
            "DOCKER",
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: --temp_location: on a Flink cluster (flink_master flink-jobmanager:8081) "
        "the workers write tf.Transform's files there; give a folder every worker reaches "
        "(a shared mount, or gs://...; not s3://, which TensorFlow's filesystems cannot write)"
    )


def test_an_engine_run_without_its_job_server_says_how_to_build_it(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "not-built.jar"
    monkeypatch.setitem(
        engines.ENGINES,
        "sparkrunner",
        dataclasses.replace(engines.ENGINES["sparkrunner"], built_jar=missing),
    )
    code = run.main(
        ["--manifest", str(SAMPLE_MANIFEST), "--output_dir", str(tmp_path), "--runner", "spark"]
    )
    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: --runner SparkRunner needs Beam's Spark job server: `make job-servers` "
        f"builds it (Maven and Java 17) into {missing}; or give --spark_job_server_jar JAR, "
        "or --job_endpoint HOST:PORT of a running one"
    )


@pytest.mark.parametrize(
    "engine_flags",
    [
        [],
        ["--runner", "FlinkRunner", "--flink_master", "[local]"],
        [
            "--runner",
            "FlinkRunner",
            "--flink_master",
            "jobmanager:8081",
            "--environment_type",
            "LOOPBACK",
        ],
        ["--runner", "SparkRunner", "--spark_master_url", "spark://master:7077"],
    ],
)
def test_no_jars_are_staged_only_for_a_flink_cluster_running_the_sdk_workers(
    engine_flags, tmp_path, capsys
):
    code = run.main(
        [
            "--manifest",
            str(SAMPLE_MANIFEST),
            "--output_dir",
            str(tmp_path),
            "--temp_location",
            str(tmp_path),
            *engine_flags,
            "--beam_runner_on_cluster",
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: --beam_runner_on_cluster: for --runner FlinkRunner with a cluster's "
        "--flink_master HOST:PORT and its SDK workers there (not LOOPBACK)"
    )


def test_no_jars_are_staged_only_by_the_job_server_that_can(tmp_path, capsys):
    """Beam's own job server jar lacks the class that stages no jars: the job would fail on
    the job server with a Java stack trace."""
    other = tmp_path / "other-job-server.jar"
    with zipfile.ZipFile(other, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    code = run.main(
        [
            "--manifest",
            str(SAMPLE_MANIFEST),
            "--output_dir",
            str(tmp_path),
            "--temp_location",
            str(tmp_path),
            "--runner",
            "FlinkRunner",
            "--flink_master",
            "jobmanager:8081",
            "--environment_type",
            "EXTERNAL",
            "--environment_config",
            "localhost:50000",
            "--flink_job_server_jar",
            str(other),
            "--beam_runner_on_cluster",
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: --beam_runner_on_cluster needs the job server `make job-servers` builds "
        f"({engines.ENGINES['flinkrunner'].built_jar}): --flink_job_server_jar {other} has "
        "no imagetfrecords.NoJarsToStage"
    )


def test_a_job_servers_refusal_is_told_in_its_own_words(tmp_path):
    """A job server that refuses the job answers a gRPC error whose text is a multi-line
    repr ending in '>': the line says the status and the job server's details."""
    server = grpc.server(futures.ThreadPoolExecutor(1))
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "JobService",
                {
                    "Prepare": grpc.unary_unary_rpc_method_handler(
                        lambda request, context: context.abort(
                            grpc.StatusCode.UNKNOWN,
                            "java.lang.RuntimeException: Unable to find factory "
                            "method NoJarsToStage#create()",
                        )
                    )
                },
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.RpcError) as refused:
                channel.unary_unary("/JobService/Prepare")(b"")
    finally:
        server.stop(None)
    failed = run._job_failed(refused.value, str(tmp_path / "out"), "0123456789ab")
    assert str(failed).startswith(
        "the job failed: the job server answered UNKNOWN: java.lang.RuntimeException: "
        "Unable to find factory method NoJarsToStage#create(). After it: nothing was "
        "published"
    )
