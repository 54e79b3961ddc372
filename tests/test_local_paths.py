"""Local paths in the options are made absolute in the launcher (issue 43, defects 1 and
2): a cluster's workers (a worker pool beside each TaskManager) do not run in the
launcher's working folder, so a relative --manifest failed there, and a relative
--output_dir was published into the pool's folder while the launcher, looking in its
own, said nothing was published. Remote URIs are left as they are.
"""

import json

import grpc
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_job_api_pb2_grpc
from apache_beam.runners.job import utils as job_utils
from apache_beam.runners.portability import local_job_service
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from conftest import read_examples, tiny_manifest

from image_tfrecords.pipeline import engines, run
from image_tfrecords.pipeline.options import make_local_paths_absolute

RELATIVE = [
    "--manifest",
    "m.csv",
    "--manifest",
    "TEST=sets/t.csv",
    "--output_dir",
    "out/",
    "--image_dir",
    "images",
    "--vocabulary",
    "labels.txt",
    "--schema",
    "schema.json",
    "--temp_location",
    "tmp",
    "--staging_location",
    "../staging",
]


def launcher_options(argv: list[str]) -> PipelineOptions:
    options = PipelineOptions(argv)
    make_local_paths_absolute(options)
    return options


def test_relative_local_paths_reach_the_runner_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    given = launcher_options(RELATIVE).get_all_options()  # what a runner is handed
    assert given["manifest"] == [str(tmp_path / "m.csv"), f"TEST={tmp_path}/sets/t.csv"]
    assert given["output_dir"] == str(tmp_path / "out")
    assert (given["image_dir"], given["vocabulary"], given["schema"]) == (
        str(tmp_path / "images"),
        str(tmp_path / "labels.txt"),
        str(tmp_path / "schema.json"),
    )
    assert given["temp_location"] == str(tmp_path / "tmp")
    assert given["staging_location"] == str(tmp_path.parent / "staging")


def test_remote_uris_absolute_paths_and_an_inline_schema_stay_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [
        "--manifest",
        "gs://b/x=1/m.csv",
        "--manifest",
        "VAL=s3://b/v.csv",
        "--manifest",
        "/data/m.csv",
        "--image_folder",
        "hdfs://nn/photos",
        "--image_dir",
        "https://example.com/images",
        "--output_dir",
        "s3://b/out",
        "--schema",
        '{"age": "integer"}',
        "--temp_location",
        "gs://b/tmp",
    ]
    given = launcher_options(argv).get_all_options()
    assert given["manifest"] == ["gs://b/x=1/m.csv", "VAL=s3://b/v.csv", "/data/m.csv"]
    assert (given["image_folder"], given["image_dir"], given["output_dir"]) == (
        "hdfs://nn/photos",
        "https://example.com/images",
        "s3://b/out",
    )
    assert given["schema"] == '{"age": "integer"}'
    assert given["temp_location"] == "gs://b/tmp"


@pytest.mark.parametrize(
    "engine_flags",
    [
        ["--runner", "FlinkRunner", "--flink_master", "flink-jobmanager:8081"],
        ["--runner", "SparkRunner", "--spark_master_url", "spark://spark-master:7077"],
    ],
)
def test_flink_and_spark_job_servers_are_handed_the_absolute_paths(
    engine_flags, tmp_path, monkeypatch
):
    """The options as the portable runner sends them to the job server, after
    engines.py names the built job server's jar: what the cluster's workers get."""
    monkeypatch.chdir(tmp_path)
    options = launcher_options(
        [
            *RELATIVE,
            *engine_flags,
            "--flink_job_server_jar",
            "flink.jar",
            "--spark_job_server_jar",
            "spark.jar",
        ]
    )
    engines.use_built_job_server(options)
    servicer = local_job_service.LocalJobServicer()
    port = servicer.start_grpc_server(0)
    try:
        with grpc.insecure_channel(f"localhost:{port}") as channel:
            handle = JobServiceHandle(
                beam_job_api_pb2_grpc.JobServiceStub(channel), options, retain_unknown_options=True
            )
            sent = job_utils.struct_to_dict(handle.get_pipeline_options())
    finally:
        servicer.stop()
    sent = {key.split(":")[2]: value for key, value in sent.items()}
    assert sent["manifest"] == [str(tmp_path / "m.csv"), f"TEST={tmp_path}/sets/t.csv"]
    assert sent["output_dir"] == str(tmp_path / "out")
    assert sent["temp_location"] == str(tmp_path / "tmp")
    assert sent["image_dir"] == str(tmp_path / "images")


def test_a_run_with_relative_paths_publishes_and_reports_where_the_user_meant(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "data").mkdir()
    tiny_manifest(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    code = run.main(["--manifest", "data/m.csv", "--output_dir", "out", "--num_shards", "1"])
    assert code == run.EXIT_OK, capsys.readouterr().err
    output = tmp_path / "out"
    summary = json.loads((output / "summary.json").read_text())
    # summary.json names the files the job read and wrote, whatever folder it is read from
    assert summary["manifests"] == [str(tmp_path / "data" / "m.csv")]
    assert summary["options"]["output_dir"] == str(output)
    assert f"image-tfrecords: {output}\n" in capsys.readouterr().out
    assert len(read_examples(str(output / "train-*.tfrecord"))) == 2
