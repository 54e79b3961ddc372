"""Daily conversion with Apache Beam's operator: `python -m image_tfrecords` in the project's venv.

It runs on the DirectRunner, on Dataflow when the Variable image_tfrecords_runner is
DataflowRunner, or on Flink when it is FlinkRunner. Each run writes
OUTPUT_ROOT/<logical date>/ (a re-run replaces it).

Settings of the deployment:
- IMAGE_TFRECORDS_PYTHON, in the Airflow worker's environment: the interpreter that has
  image-tfrecords installed (a checkout's .venv/bin/python). An environment variable, not
  an Airflow Variable: the operator's py_interpreter is not templated.
- For Dataflow, Variables image_tfrecords_project, image_tfrecords_region,
  image_tfrecords_bucket (temp and staging) and image_tfrecords_image (the image built
  by templates/flex/build_and_run.sh, as the workers' SDK container); the Airflow worker
  needs gcloud and Google Cloud credentials.
- For Flink, the checkout's job server (`make job-servers`) and the Variables
  image_tfrecords_flink_master (default [local]: an embedded Flink in the Airflow
  worker; host:8081 for a cluster's JobManager) and image_tfrecords_flink_parallelism
  (default 2). The SDK workers run in the Airflow worker (LOOPBACK), so a cluster must
  reach it, and the paths must be ones the cluster's task managers read too.
Run params: manifest, output_root, max_error_fraction.
"""

from __future__ import annotations

import datetime
import os
import pathlib

from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.sdk import DAG, Param, Variable, task

# This file sits in templates/airflow/ of a checkout: the defaults point at its sample set.
CHECKOUT = pathlib.Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("IMAGE_TFRECORDS_PYTHON", "python3")

JOB_OPTIONS = {
    "manifest": "{{ params.manifest }}",
    "output_dir": "{{ params.output_root }}/{{ ds }}",
    "max_error_fraction": "{{ params.max_error_fraction }}",
    "overwrite": True,  # a re-run of a date replaces that date's output
}
DATAFLOW_OPTIONS = {
    "temp_location": "gs://{{ var.value.image_tfrecords_bucket }}/temp",
    "staging_location": "gs://{{ var.value.image_tfrecords_bucket }}/staging",
    "setup_file": str(CHECKOUT / "setup.py"),
    "sdk_container_image": "{{ var.value.image_tfrecords_image }}",
    "worker_machine_type": "n2-standard-4",
    "max_num_workers": 20,
    # One SDK process per worker VM: TensorFlow is loaded once, not once per core, and
    # the shard writer's decode threads get every core.
    "experiments": ["no_use_multiple_sdk_containers"],
}
FLINK_OPTIONS = {
    "flink_master": "{{ var.value.get('image_tfrecords_flink_master', '[local]') }}",
    "parallelism": "{{ var.value.get('image_tfrecords_flink_parallelism', '2') }}",
    "environment_type": "LOOPBACK",
}
RUNNER_TASKS = {"DataflowRunner": "convert_on_dataflow", "FlinkRunner": "convert_on_flink"}


def convert(
    task_id: str, runner: str, options: dict, **operator_args
) -> BeamRunPythonPipelineOperator:
    """`python -m image_tfrecords` on `runner` with `options`, in the project's interpreter."""
    return BeamRunPythonPipelineOperator(
        task_id=task_id,
        runner=runner,
        py_interpreter=PYTHON,
        py_options=["-m"],
        py_file="image_tfrecords",
        pipeline_options=dict(options),
        **operator_args,
    )


with DAG(
    dag_id="image_tfrecords_beam",
    description="Image manifest -> TFRecord shards, with Apache Beam's Airflow operator",
    schedule="@daily",
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    catchup=False,
    params={
        "manifest": Param(
            str(CHECKOUT / "sample_data" / "manifest.csv"),
            type="string",
            description="Manifest path or glob (gs:// on Dataflow).",
        ),
        "output_root": Param(
            str(CHECKOUT / "airflow-output"),
            type="string",
            description="Each run writes OUTPUT_ROOT/<logical date>/.",
        ),
        "max_error_fraction": Param(
            0.01,
            type="number",
            minimum=0,
            maximum=1,
            description="Fail the run above this dead-letter share.",
        ),
    },
    tags=["image-tfrecords"],
) as dag:

    @task.branch
    def choose_runner() -> str:
        runner = Variable.get("image_tfrecords_runner", default="DirectRunner")
        return RUNNER_TASKS.get(runner, "convert_locally")

    convert_locally = convert("convert_locally", "DirectRunner", JOB_OPTIONS)
    convert_on_dataflow = convert(
        "convert_on_dataflow",
        "DataflowRunner",
        {**JOB_OPTIONS, **DATAFLOW_OPTIONS},
        dataflow_config={
            "job_name": "image-tfrecords",
            "project_id": "{{ var.value.image_tfrecords_project }}",
            "location": "{{ var.value.image_tfrecords_region }}",
        },
    )
    convert_on_flink = convert("convert_on_flink", "FlinkRunner", {**JOB_OPTIONS, **FLINK_OPTIONS})
    choose_runner() >> [convert_locally, convert_on_dataflow, convert_on_flink]
