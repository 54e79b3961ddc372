"""The Dataflow Flex Template: metadata.json against the options, the launcher's entry
point run as the launcher runs it, and what --setup_file ships to the workers."""

import json
import pathlib
import re
import subprocess
import sys
import tarfile

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.stager import Stager
from conftest import read_examples, tiny_manifest

from image_tfrecords.pipeline.options import ConvertOptions
from templates.flex.metadata import METADATA_FILE, template_metadata

REPO = pathlib.Path(__file__).resolve().parents[1]
PARAMETERS = json.loads(METADATA_FILE.read_text())["parameters"]


def test_the_parameters_are_exactly_the_jobs_options():
    names = {parameter["name"] for parameter in PARAMETERS}
    options = set(ConvertOptions.names())
    assert not names - options, f"parameters that are no option: {sorted(names - options)}"
    assert not options - names, f"options that are no parameter: {sorted(options - names)}"
    for parameter in PARAMETERS:
        assert parameter["label"] and parameter["helpText"], parameter["name"]
    assert json.loads(METADATA_FILE.read_text()) == template_metadata(), (
        "metadata.json is out of date: run python templates/flex/metadata.py"
    )


def test_a_launch_with_only_the_required_parameters_is_valid_and_each_is_needed():
    required = [p["name"] for p in PARAMETERS if not p["isOptional"]]
    # --manifest and --image_folder are either/or, so the template marks neither required.
    launch = [f"--{name}=gs://bucket/{name}" for name in required] + ["--manifest=gs://b/m.csv"]
    assert ConvertOptions(launch).problems() == [], "a required option is no required parameter"
    for name in required:
        without = [flag for flag in launch if not flag.startswith(f"--{name}=")]
        assert ConvertOptions(without).problems(), f"{name} is marked required but is not"


def test_each_regex_admits_its_options_default():
    defaults = ConvertOptions([]).values()
    checked = 0
    for parameter in PARAMETERS:
        default = defaults[parameter["name"]]
        if default is None or "regexes" not in parameter:
            continue
        text = str(default).lower() if isinstance(default, bool) else str(default)
        for regex in parameter["regexes"]:
            assert re.fullmatch(regex, text), (parameter["name"], regex, text)
        checked += 1
    assert checked >= 10


def test_the_launcher_entry_point_runs_template_style_parameters(tmp_path):
    """FLEX_TEMPLATE_PYTHON_PY_FILE with --name=value parameters, as the launcher passes them.

    The DirectRunner runs it with workers in other processes, so every function and DoFn
    is pickled and rebuilt in a process that never ran the launcher's __main__.
    """
    manifest = tiny_manifest(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.txt").write_text("from an earlier run")
    launch = [
        sys.executable,
        str(REPO / "templates" / "flex" / "main.py"),
        f"--manifest={manifest}",
        f"--output_dir={tmp_path / 'out'}",
        "--num_shards=1",
        "--max_error_fraction=0",
        "--runner=DirectRunner",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=2",
    ]

    refused = subprocess.run(
        [*launch, "--overwrite=false"], capture_output=True, text=True, timeout=300
    )
    assert refused.returncode == 2 and "is not empty" in refused.stderr

    result = subprocess.run(
        [*launch, "--overwrite=true"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rows read 3 = 3 examples written + 0 dead-lettered" in result.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["options"]["overwrite"] is True and summary["options"]["num_shards"] == 1
    assert len(read_examples(str(tmp_path / "out" / "train-*.tfrecord"))) == 2
    assert len(read_examples(str(tmp_path / "out" / "test-*.tfrecord"))) == 1


def test_setup_file_ships_every_module_to_the_workers(tmp_path):
    """What Dataflow stages for --setup_file (the launcher passes the template's setup.py)."""
    Stager.create_job_resources(
        PipelineOptions([f"--setup_file={REPO / 'setup.py'}"]), str(tmp_path)
    )
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        shipped = {pathlib.Path(*pathlib.Path(name).parts[1:]) for name in archive.getnames()}
    modules = {
        path.relative_to(REPO)
        for package in ("image_tfrecords", "pipeline", "transforms", "core")
        for path in (REPO / package).glob("*.py")
    }
    assert len(modules) > 15 and modules <= shipped, sorted(modules - shipped)
