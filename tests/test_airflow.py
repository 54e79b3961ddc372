"""The Airflow DAGs in templates/airflow/, run by Airflow 3 itself.

Airflow lives in its own venv (.venv-airflow, from templates/airflow/requirements.txt;
`make test` installs it); its Beam operator runs the pipeline with this interpreter.
"""

import ast
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from conftest import output_digests, read_examples

REPO = pathlib.Path(__file__).resolve().parents[1]
AIRFLOW = REPO / ".venv-airflow" / "bin" / "airflow"
PARAMETERS = {
    p["name"]: p
    for p in json.loads((REPO / "templates" / "flex" / "metadata.json").read_text())["parameters"]
}

pytestmark = pytest.mark.skipif(
    not AIRFLOW.exists(), reason="needs .venv-airflow, which `make test` installs"
)


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    """Runs the airflow command against a fresh home whose DAGs folder is templates/airflow."""
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path_factory.mktemp("airflow-home")),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "templates" / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "IMAGE_TFRECORDS_PYTHON": sys.executable,
    }

    def airflow(*args: str, variables: dict[str, str] | None = None):
        extra = {f"AIRFLOW_VAR_{name.upper()}": value for name, value in (variables or {}).items()}
        return subprocess.run(
            [str(AIRFLOW), *args], env={**env, **extra}, capture_output=True, text=True, timeout=600
        )

    migrated = airflow("db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    return airflow


def skipped(printed: str) -> set[str]:
    """The tasks the branch skipped, as Airflow logs them (in no set order)."""
    listed = re.search(r"Skipping tasks \[(.*?)\]", printed)
    assert listed, printed[-5000:]
    return set(re.findall(r"\('(\w+)', -?\d+\)", listed.group(1)))


def test_both_dags_import(airflow):
    listed = airflow("dags", "list", "--local", "--output", "json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    dags = json.loads(listed.stdout.strip().splitlines()[-1])
    assert {dag["dag_id"] for dag in dags} == {"image_tfrecords_beam", "image_tfrecords_flex"}


def run_beam_dag(airflow, date: str, output_root: pathlib.Path, runner: str | None = None):
    """`airflow dags test` of the Beam DAG on the sample set, for the logical date `date`,
    on `runner` (None: the Variable unset, the DirectRunner)."""
    conf = {
        "manifest": str(REPO / "sample_data" / "manifest.csv"),
        "output_root": str(output_root),
        "max_error_fraction": 0.25,
    }
    result = airflow(
        "dags",
        "test",
        "image_tfrecords_beam",
        date,
        "-c",
        json.dumps(conf),
        variables={"image_tfrecords_runner": runner} if runner else None,
    )
    printed = result.stdout + result.stderr
    assert result.returncode == 0, printed[-5000:]
    return printed


@pytest.fixture(scope="module")
def daily_outputs(airflow, tmp_path_factory):
    """OUTPUT_ROOT after the DAG's first day, 2026-01-02, on the DirectRunner: a full run."""
    output_root = tmp_path_factory.mktemp("daily-outputs")
    printed = run_beam_dag(airflow, "2026-01-02", output_root)
    assert skipped(printed) == {"convert_on_dataflow", "convert_on_flink"}
    return output_root


def test_the_beam_dag_converts_the_sample_set_on_the_direct_runner(daily_outputs):
    output = daily_outputs / "2026-01-02"  # date-stamped by the run's logical date
    summary = json.loads((output / "summary.json").read_text())
    assert summary["options"]["runner"] == "DirectRunner" and summary["options"]["overwrite"]
    assert summary["reused_from"] is None and summary["examples_reused"] == 0  # a full run
    assert summary["rows_read"] == 50 and summary["rows_dead_lettered"] == 7
    for split, examples in (("train", 31), ("validation", 6), ("test", 6)):
        assert len(read_examples(str(output / f"{split}-*.tfrecord"))) == examples, split


def test_the_next_day_reuses_the_days_before_and_writes_the_same_shards(airflow, daily_outputs):
    run_beam_dag(airflow, "2026-01-03", daily_outputs)
    before, after = daily_outputs / "2026-01-02", daily_outputs / "2026-01-03"
    summary = json.loads((after / "summary.json").read_text())
    assert summary["options"]["reuse_from"] == str(before)
    assert summary["reused_from"] == str(before)
    assert summary["examples_written"] == summary["examples_reused"] == 43  # nothing changed
    # Every published file the same bytes: shards, indexes, dead letters, vocabularies,
    # summary.json but for what describes the run.
    assert output_digests(after) == output_digests(before)


def test_the_reuse_source_is_the_newest_earlier_complete_output(tmp_path):
    """find_reuse_source, run in Airflow's interpreter on a hand-made OUTPUT_ROOT."""
    complete = ("2026-01-01", "2026-01-03", "2026-01-06", "notes", "2026-1-5")
    for folder in complete:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "summary.json").write_text('{"run_id": "r", "accounted": true}')
    # Days whose summary.json this pipeline did not complete (planted, or cut short): not
    # reused, whatever their name says.
    for day, text in (("2026-01-02", "{}"), ("2026-01-04", '{"run_id": "r", "accounted"')):
        (tmp_path / day).mkdir()
        (tmp_path / day / "summary.json").write_text(text)
    failed = tmp_path / "2026-01-04" / ".tmp-0123456789ab" / "staged" / "FAILED.json"
    failed.parent.mkdir(parents=True)  # a run of that day failed: it published nothing
    failed.write_text("{}")
    choose = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(REPO / 'templates' / 'airflow')!r})\n"
        "from image_tfrecords_beam import find_reuse_source\n"
        "runs = json.loads(sys.argv[1])\n"
        "print(json.dumps([find_reuse_source.function(root, ds) for root, ds in runs]))\n"
    )
    runs = [
        (str(tmp_path), "2026-01-05"),
        (str(tmp_path), "2026-01-03"),
        (str(tmp_path), "2026-01-01"),
        (str(tmp_path / "no-output-yet"), "2026-01-02"),
    ]
    result = subprocess.run(
        [str(AIRFLOW.with_name("python")), "-c", choose, json.dumps(runs)],
        env={**os.environ, "AIRFLOW_HOME": str(tmp_path / ".airflow-home")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # 2026-01-05 skips 2026-01-04 (a summary.json cut short) and never looks at a later
    # date or another name; a re-run of 2026-01-03 reuses the day before the planted
    # 2026-01-02, not itself; the first day and a root not yet made have nothing earlier:
    # full runs.
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [
        str(tmp_path / "2026-01-03"),
        str(tmp_path / "2026-01-01"),
        None,
        None,
    ]


def test_the_beam_dag_converts_the_sample_set_on_flink(airflow, tmp_path):
    """An embedded Flink ([local]) in the task, with the checkout's job server."""
    printed = run_beam_dag(airflow, "2026-01-03", tmp_path, runner="FlinkRunner")
    assert skipped(printed) == {"convert_locally", "convert_on_dataflow"}
    log = re.search(r"running on Flink; the job server's log: (\S+)", printed)
    assert log, printed[-5000:]
    assert re.search(
        r"Job BeamApp-\S+ \([0-9a-f]{32}\) switched from state RUNNING to "
        r"FINISHED",
        pathlib.Path(log.group(1)).read_text(),
    )
    summary = json.loads((tmp_path / "2026-01-03" / "summary.json").read_text())
    assert summary["options"]["runner"] == "FlinkRunner"
    assert summary["rows_read"] == 50 and summary["rows_dead_lettered"] == 7
    assert summary["examples_written"] == 43


def test_the_flex_dag_renders_a_launch_the_template_accepts(airflow):
    variables = {
        "image_tfrecords_project": "my-project",
        "image_tfrecords_region": "europe-west4",
        "image_tfrecords_template": "gs://my-bucket/templates/image-tfrecords.json",
        "image_tfrecords_image": "europe-west4-docker.pkg.dev/my-project/ml/itf:1",
        "image_tfrecords_bucket": "my-bucket",
        "image_tfrecords_manifest": "gs://my-bucket/manifests/*.csv",
        "image_tfrecords_output_root": "gs://my-bucket/tfrecords",
    }
    result = airflow(
        "tasks",
        "render",
        "image_tfrecords_flex",
        "launch_flex_template",
        "2026-01-02",
        variables=variables,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rendered = dict(re.findall(r"# property: (\w+)\n# -+\n(.*)", result.stdout))
    assert rendered["project_id"] == "my-project" and rendered["location"] == "europe-west4"
    launch = ast.literal_eval(rendered["body"])["launchParameter"]
    assert launch["containerSpecGcsPath"] == variables["image_tfrecords_template"]
    assert launch["environment"]["sdkContainerImage"] == variables["image_tfrecords_image"]
    parameters = launch["parameters"]
    assert parameters["manifest"] == "gs://my-bucket/manifests/*.csv"
    assert parameters["output_dir"] == "gs://my-bucket/tfrecords/2026-01-02"
    for name, value in parameters.items():  # what Dataflow checks before it launches
        assert name in PARAMETERS, f"{name} is no template parameter"
        for regex in PARAMETERS[name].get("regexes", []):
            assert re.fullmatch(regex, value), (name, value)
    assert {name for name, p in PARAMETERS.items() if not p["isOptional"]} <= parameters.keys()
