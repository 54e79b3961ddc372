"""FlinkRunner and SparkRunner options reach a job server untouched, for what is not run
here: a cluster's master (flink-jobmanager:8081, spark://spark-master:7077) and a launch
that does not wait for its job (--no_wait_until_finish, as a Flex Template's).

The job server is Beam's own local one (LocalJobServicer) on a localhost port: the same
Job API Flink's and Spark's job servers expose, given as --job_endpoint, with LOOPBACK
workers in this process. Flink and Spark themselves run the job in test_engines.py.
"""

import json
import time

import pytest
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.runners.job import utils as job_utils
from apache_beam.runners.portability import local_job_service
from conftest import read_examples, tiny_manifest

from image_tfrecords.pipeline import run


@pytest.fixture
def job_server():
    servicer = local_job_service.LocalJobServicer()
    port = servicer.start_grpc_server(0)
    yield servicer, f"localhost:{port}"
    servicer.stop()


def received_options(servicer) -> tuple[object, dict]:
    """The one job the server got, and its options as the server holds them."""
    (job,) = servicer._jobs.values()
    options = job_utils.struct_to_dict(job._pipeline_options)
    return job, {key.split(":")[2]: value for key, value in options.items()}


def test_flink_runner_reaches_the_job_server_with_its_options_untouched(job_server, tmp_path):
    servicer, endpoint = job_server
    code = run.main(
        [
            "--manifest",
            tiny_manifest(tmp_path),
            "--output_dir",
            str(tmp_path / "out"),
            "--runner",
            "FlinkRunner",
            "--flink_master",
            "flink-jobmanager:8081",
            "--parallelism",
            "4",
            "--environment_type",
            "LOOPBACK",
            "--job_endpoint",
            endpoint,
            "--num_shards",
            "2",
        ]
    )
    assert code == 0
    _, options = received_options(servicer)
    assert options["flink_master"] == "flink-jobmanager:8081"
    assert options["parallelism"] == "4"  # the Job API carries numbers as strings
    assert options["environment_type"] == "LOOPBACK"
    assert options["manifest"] == [str(tmp_path / "m.csv")]
    assert options["output_dir"] == str(tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["options"]["runner"] == "FlinkRunner"
    assert len(read_examples(str(tmp_path / "out" / "train-*.tfrecord"))) == 2


def test_spark_runner_submits_without_waiting_and_the_job_publishes(job_server, tmp_path, capsys):
    servicer, endpoint = job_server
    code = run.main(
        [
            "--manifest",
            tiny_manifest(tmp_path),
            "--output_dir",
            str(tmp_path / "out"),
            "--runner",
            "SparkRunner",
            "--spark_master_url",
            "spark://spark-master:7077",
            "--environment_type",
            "LOOPBACK",
            "--job_endpoint",
            endpoint,
            "--no_wait_until_finish",
        ]
    )
    assert code == 0
    assert "job submitted; it writes" in capsys.readouterr().out
    job, options = received_options(servicer)
    assert options["spark_master_url"] == "spark://spark-master:7077"
    deadline = time.monotonic() + 240
    while not job.is_terminal_state(job.state) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job.state == beam_job_api_pb2.JobState.DONE
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["examples_written"] == 3 and summary["options"]["runner"] == "SparkRunner"
