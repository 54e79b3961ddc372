"""Daily conversion with Apache Beam's operator: `python -m image_tfrecords` in the project's venv.

It runs on the DirectRunner, on Dataflow when the Variable image_tfrecords_runner is
DataflowRunner, or on Flink when it is FlinkRunner. Each run writes
OUTPUT_ROOT/<logical date>/ (a re-run replaces it), reusing the newest complete output
dated before it (`--reuse_from`, find_reuse_source): the examples whose images did not
change are copied from it, not read again, and summary.json names it (reused_from).
Without one (the first run, or every earlier date failed) the option is left out: the
run converts everything (a re-run of that date reuses the output it replaces, as
`convert --overwrite` does).
"Newest earlier", not exactly the day before: a run after a missed or failed day reuses
the last good one. Runs do not overlap (max_active_runs=1); a backfill has its own limit:
give it --max-active-runs 1 to build each date from the one before it.

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
import json
import os
import pathlib

from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.sdk import DAG, ObjectStoragePath, Param, Variable, task

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
# An output is whole once its summary.json is there: a run writes it last, a run that
# fails publishes nothing (its FAILED.json stays in a temp folder), and a run replacing
# an output removes its summary.json first. Only one this pipeline completed is reused:
# its summary.json names the run and says every row was accounted for (a file that
# merely has the name is not one). OUTPUT_ROOT must be written by this pipeline alone:
# what --reuse_from copies is checked against its index, not against the images
# (docs/operations/security.md).
SUMMARY_FILE = "summary.json"
MAX_SUMMARY_BYTES = 64 << 20  # what is read of a summary.json to judge it


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


@task
def find_reuse_source(output_root: str, ds: str) -> str | None:
    """The newest complete output under `output_root` dated before `ds`, the run's logical
    date, or None (no --reuse_from).

    Decided from the folders, not from Airflow's records of earlier runs: an output may
    have been removed, or written by a run with another output_root or outside Airflow.
    Earlier dates only, so that a date is always compared with an earlier day, a re-run
    of it included. OUTPUT_ROOT is a local path or gs:// (the Airflow worker's Google
    credentials), read through Airflow's ObjectStoragePath.
    """
    root = ObjectStoragePath(output_root)
    if not root.is_dir():
        return None
    earlier = sorted((path.name for path in root.iterdir() if _is_date(path.name)), reverse=True)
    for date in (date for date in earlier if date < ds):
        if _completed(root / date / SUMMARY_FILE):
            return f"{output_root.rstrip('/')}/{date}"  # spelt as the run's output_dir is
    return None


def _completed(summary: ObjectStoragePath) -> bool:
    """Whether `summary` is the summary.json this pipeline writes last in a run that
    succeeded: JSON naming its run (run_id) with every row accounted for."""
    try:
        with summary.open("rb") as file:
            recorded = json.loads(file.read(MAX_SUMMARY_BYTES + 1))
    except (OSError, ValueError):  # not there, unreadable, or not JSON (or too long)
        return False
    return (
        isinstance(recorded, dict)
        and isinstance(recorded.get("run_id"), str)
        and bool(recorded["run_id"])
        and recorded.get("accounted") is True
    )


def _is_date(name: str) -> bool:
    """Whether `name` is a folder name this DAG writes: a logical date, YYYY-MM-DD."""
    try:
        return datetime.date.fromisoformat(name).isoformat() == name
    except ValueError:
        return False


with DAG(
    dag_id="image_tfrecords_beam",
    description="Image manifest -> TFRecord shards, with Apache Beam's Airflow operator",
    schedule="@daily",
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    catchup=False,
    max_active_runs=1,  # a run reuses the date before it: that one must be finished
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

    # Decided when the run starts, as an upstream task; the operators take its result as
    # the option reuse_from, which they leave out when it is None.
    reuse_source = find_reuse_source(output_root="{{ params.output_root }}", ds="{{ ds }}")
    job_options = {**JOB_OPTIONS, "reuse_from": reuse_source}
    convert_locally = convert("convert_locally", "DirectRunner", job_options)
    convert_on_dataflow = convert(
        "convert_on_dataflow",
        "DataflowRunner",
        {**job_options, **DATAFLOW_OPTIONS},
        dataflow_config={
            "job_name": "image-tfrecords",
            "project_id": "{{ var.value.image_tfrecords_project }}",
            "location": "{{ var.value.image_tfrecords_region }}",
        },
    )
    convert_on_flink = convert("convert_on_flink", "FlinkRunner", {**job_options, **FLINK_OPTIONS})
    choose_runner() >> [convert_locally, convert_on_dataflow, convert_on_flink]
