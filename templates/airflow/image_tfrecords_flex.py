"""Daily launch of the Flex Template built by templates/flex/build_and_run.sh.

Each run writes OUTPUT_ROOT/<logical date>/ (a re-run replaces it). The launcher returns
once the job is submitted; the operator then waits for the Dataflow job to end.

Variables of the deployment: image_tfrecords_project, image_tfrecords_region,
image_tfrecords_template (the gs:// template spec file), image_tfrecords_image (the same
image, as the workers' SDK container), image_tfrecords_bucket (temp and staging), and
image_tfrecords_manifest and image_tfrecords_output_root, the defaults of the run params
manifest and output_root.
"""

from __future__ import annotations

import datetime

from airflow.providers.google.cloud.operators.dataflow import DataflowStartFlexTemplateOperator
from airflow.sdk import DAG, Param

with DAG(
    dag_id="image_tfrecords_flex",
    description="Image manifest -> TFRecord shards, launched from the Dataflow Flex Template",
    schedule="@daily",
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    catchup=False,
    params={
        "manifest": Param(
            None,
            type=["null", "string"],
            description="gs:// manifest or glob; default: Variable image_tfrecords_manifest.",
        ),
        "output_root": Param(
            None,
            type=["null", "string"],
            description="gs:// folder; each run writes OUTPUT_ROOT/<logical "
            "date>/; default: Variable image_tfrecords_output_root.",
        ),
    },
    tags=["image-tfrecords"],
) as dag:
    DataflowStartFlexTemplateOperator(
        task_id="launch_flex_template",
        project_id="{{ var.value.image_tfrecords_project }}",
        location="{{ var.value.image_tfrecords_region }}",
        body={
            "launchParameter": {
                "jobName": "image-tfrecords-{{ ds_nodash }}",
                "containerSpecGcsPath": "{{ var.value.image_tfrecords_template }}",
                # Template parameters are strings; they are the job's options (metadata.json).
                "parameters": {
                    "manifest": "{{ params.manifest or var.value.image_tfrecords_manifest }}",
                    "output_dir": (
                        "{{ params.output_root or var.value.image_tfrecords_output_root }}/{{ ds }}"
                    ),
                    "overwrite": "true",
                },
                "environment": {
                    "sdkContainerImage": "{{ var.value.image_tfrecords_image }}",
                    "tempLocation": "gs://{{ var.value.image_tfrecords_bucket }}/temp",
                    "stagingLocation": "gs://{{ var.value.image_tfrecords_bucket }}/staging",
                    "machineType": "n2-standard-4",
                    "maxWorkers": 20,
                    # One SDK process per worker VM: TensorFlow loads once, not once per core.
                    "additionalExperiments": ["no_use_multiple_sdk_containers"],
                },
            }
        },
    )
