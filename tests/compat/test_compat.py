"""The compatibility tier (`make compat`, which CI runs after `make test`): the package as
`pip install .` gives it, with no constraints file, on what setup.py admits: Python 3.11
and 3.13 with the newest versions of everything that day, and Python 3.11 with the oldest
Beam (tests/compat/venvs.py builds the venvs and records their versions).

Each test runs a venv's own `bin/image-tfrecords` in a process of its own, from a folder
outside the checkout (the test's tmp_path), so that what runs is the venv's package and
its dependencies; this process (the main .venv, requirements.txt's pins) only sets up the
servers and reads the outputs back. Every failure names the venv and its versions.

- The sample job: 43 examples and 7 dead letters, every file byte for byte what the
  pinned set writes (the main .venv's run of the same job, once a session), but for what
  differs between any two runs (test_two_pinned_runs_differ_only_where_any_two_runs_do):
  summary.json's run facts, checked field by field, report.html's output path and end
  time, tf.Transform's SavedModel (saved_model.pb, fingerprint.pb).
- A detection format (a real CVAT Pascal VOC export) read from s3:// (moto's server) and
  written to hdfs:// (Hadoop's MiniDFSCluster), read back with TensorFlow Datasets.
- Flink and Spark (embedded, LOOPBACK): the job servers `make job-servers` builds, which
  publish the venv's DirectRunner bytes. The registry these machines reach has no Beam
  Java job server of each Python Beam release (nor any past 2.76; see
  docs/operations/flink-spark.md): the project's job servers (Beam Java 2.62) are what runs,
  talking Beam's portable Job and Fn APIs to each venv's Python SDK. Each engine on one venv,
  for time: see ENGINE_RUNS.

Not collected by `pytest tests` (pytest.ini's norecursedirs): these tests need the venvs.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import SAMPLE_MANIFEST, download, encode, put
from PIL import Image
from test_engines import ENGINES as ENGINE_RUNS_OF_THE_SUITE
from venvs import MAIN_VENV, ROOT, Venv, venvs

from image_tfrecords.core.inputs.rows import RowRules, assign_split
from image_tfrecords.pipeline.engines import ENGINES
from image_tfrecords.pipeline.versions import TESTED

VENVS = venvs()
# Each engine runs on one end of the Python SDKs the job servers talk to: Flink with the
# newest versions, Spark with the oldest Beam (whose SparkRunner adds no Java 17 flags of
# its own: pipeline/engines.py adds them). The tier has 5-6 minutes of CI's 35, installs
# included, and the engine runs are its slowest part (28-46 s each on 2 cores beside the
# other process's runs); Python 3.13's venv runs the same Beam as py3.11-newest.
# COMPAT_ENGINE_RUNS names others ("VENV:ENGINE ...", e.g. "py3.13-newest:spark").
ENGINE_RUNS = os.environ.get(
    "COMPAT_ENGINE_RUNS", "py3.11-newest:flink py3.11-oldest-beam:spark"
).split()
SAMPLE_FLAGS = ["--manifest", str(SAMPLE_MANIFEST), "--max_error_fraction", "0.25"]
# test_engines.py's runs of the engines, with the jars named: the installed package's
# default (pipeline/engines.py's built_jar) is beside its own files, in site-packages.
ENGINE_FLAGS = {
    name: [*flags, f"--{name}_job_server_jar", str(ENGINES[f"{name}runner"].built_jar)]
    for name, flags in ENGINE_RUNS_OF_THE_SUITE.items()
}
# What a run says of itself in summary.json, not of its output; each checked on its own.
RUN_FACTS = ("started_at", "finished_at", "run_id", "versions")
# tf.Transform's SavedModel: TensorFlow gives it ids of its own on every run.
EVERY_RUN_ITS_OWN = ("transform_fn/saved_model.pb", "transform_fn/fingerprint.pb")
_TIMEOUT_S = 300


def _ids(venv: Venv) -> str:
    return venv.name


def convert(
    command: Path, output: Path, *flags: str, cwd: Path, who: str
) -> subprocess.CompletedProcess:
    """`command convert --output_dir output *flags` in a process group of its own, from
    `cwd`, its temp folder (tf.Transform's files, a job server's log) there too, what it
    printed kept in `cwd`/run.log; fails naming `who` (the venv and its versions) and the
    cause the run gave."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    with subprocess.Popen(
        [str(command), "convert", "--output_dir", str(output), *flags],
        cwd=cwd,
        env={**env, "TMPDIR": str(cwd)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as job:
        try:
            stdout, stderr = job.communicate(timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            stdout, stderr = job.communicate()
            pytest.fail(f"{who}: the run took over {_TIMEOUT_S} s\n{stderr[-4000:]}")
    (cwd / "run.log").write_text(f"{stdout}\n{stderr}")
    assert job.returncode == 0, (
        f"{who}: the run failed (exit {job.returncode}): {_cause(stderr)}\n"
        f"(what it printed: {cwd / 'run.log'})"
    )
    return subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr)


def _cause(stderr: str) -> str:
    """The run's `error:` line, and the first error a worker logged with its first lines:
    a failed Beam job's last lines are its shutdown's, not the cause."""
    lines = [line for line in stderr.splitlines() if "FutureWarning" not in line]
    said = [line for line in lines if line.startswith("error:")]
    first = next(
        (i for i, line in enumerate(lines) if line.startswith(("ERROR ", "Traceback"))), None
    )
    logged = lines[first : first + 12] if first is not None else lines[-20:]
    return "\n".join([*said, "the first error logged:", *logged])


def files_of(output: Path) -> dict[str, bytes]:
    return {
        path.relative_to(output).as_posix(): path.read_bytes()
        for path in sorted(output.rglob("*"))
        if path.is_file()
    }


def differences(
    output: Path, reference: Path, versions: dict, runner: str | None = None
) -> list[str]:
    """What differs between two outputs of one job beyond what differs between any two
    runs: every file byte for byte, but for summary.json (its run facts checked apart,
    field by field, `versions` against the venv's installed ones, `runner` the run's
    --runner where it differs from the reference's), report.html (its output path and
    end time) and EVERY_RUN_ITS_OWN."""
    found = []
    files, expected = files_of(output), files_of(reference)
    if sorted(files) != sorted(expected):
        found.append(
            f"files: {sorted(files.keys() - expected.keys())} more, "
            f"{sorted(expected.keys() - files.keys())} missing"
        )
    summary = json.loads(files.pop("summary.json", b"{}"))
    wanted = json.loads(expected.pop("summary.json"))
    found += summary_differences(summary, wanted, output, reference, versions, runner)
    for name in sorted(files.keys() & expected.keys()):
        data, want = files[name], expected[name]
        if name in EVERY_RUN_ITS_OWN:
            continue
        if name == "report.html":
            data = _without(data, output, summary)
            want = _without(want, reference, wanted)
        if data != want:
            found.append(f"{name}: {_first_difference(data, want)}")
    return found


def _without(report: bytes, output: Path, summary: dict) -> bytes:
    """report.html less its run's output path (its title and heading) and end time."""
    return report.replace(str(output).encode(), b"<output>").replace(
        summary.get("finished_at", "").encode(), b"<finished_at>"
    )


def _first_difference(data: bytes, want: bytes) -> str:
    at = next((i for i, (a, b) in enumerate(zip(data, want)) if a != b), min(len(data), len(want)))
    return (
        f"{len(data)} bytes against {len(want)}, first differing at byte {at}: "
        f"{data[max(0, at - 40) : at + 40]!r} against {want[max(0, at - 40) : at + 40]!r}"
    )


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00")


def summary_differences(
    summary: dict,
    wanted: dict,
    output: Path,
    reference: Path,
    versions: dict,
    runner: str | None = None,
) -> list[str]:
    """summary.json against the reference run's, field by field: the run's own facts each
    as it must be (times in order, a run id of its own, the venv's versions, the run's
    output folder and runner), every other field equal."""
    found = []
    if sorted(summary) != sorted(wanted):
        found.append(
            f"summary.json's fields: {sorted(summary.keys() - wanted.keys())} more, "
            f"{sorted(wanted.keys() - summary.keys())} missing"
        )
    started, finished = summary.get("started_at", ""), summary.get("finished_at", "")
    if not (_TIME.fullmatch(started) and _TIME.fullmatch(finished) and started <= finished):
        found.append(f"summary.json: started_at {started!r}, finished_at {finished!r}")
    if not re.fullmatch(r"[0-9a-f]{12}", summary.get("run_id", "")) or (
        summary["run_id"] == wanted["run_id"]
    ):
        found.append(
            f"summary.json: run_id {summary.get('run_id')!r} (the reference's {wanted['run_id']!r})"
        )
    installed = {"image-tfrecords": "0.1.0", **versions}
    want_versions = {name: installed.get(name) for name in wanted["versions"]}
    if summary.get("versions") != want_versions:
        found.append(
            f"summary.json: versions {summary.get('versions')} (installed: {want_versions})"
        )
    options, want_options = dict(summary.get("options", {})), dict(wanted["options"])
    if options.pop("output_dir", None) != str(output):
        found.append(f"summary.json: options.output_dir is not {output}")
    want_options.pop("output_dir")
    if runner is not None:
        if options.get("runner") != runner:
            found.append(f"summary.json: options.runner {options.get('runner')!r}, not {runner!r}")
        options["runner"] = want_options["runner"]
    for name in sorted(options.keys() | want_options.keys()):
        if options.get(name) != want_options.get(name):
            found.append(
                f"summary.json: options.{name} {options.get(name)!r} "
                f"(the reference's {want_options.get(name)!r})"
            )
    for name in sorted(summary.keys() & wanted.keys()):
        if name not in (*RUN_FACTS, "options") and summary[name] != wanted[name]:
            found.append(
                f"summary.json: {name} {json.dumps(summary[name])[:800]} "
                f"(the reference's {json.dumps(wanted[name])[:800]})"
            )
    return found


def _pinned_run(folder: Path) -> subprocess.CompletedProcess:
    """The sample job with the pinned set (the main .venv), as a user runs it, into
    `folder`/out."""
    folder.mkdir(parents=True, exist_ok=True)
    return convert(
        MAIN_VENV / "bin" / "image-tfrecords",
        folder / "out",
        *SAMPLE_FLAGS,
        cwd=folder,
        who="the pinned set (.venv, requirements.txt)",
    )


def shared_run(tmp_path_factory, name: str, run) -> tuple[Path, str]:
    """`run(folder)`'s output folder (folder/out) and what it printed, run once a session
    by whichever of the session's processes (`make compat` runs two, pytest-xdist's) asks
    first; the others wait for it. A failed run fails each test that asks for it, with its
    message, without running again."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, each worker's basetemp inside it
    folder = base / f"shared-{name}"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "failed.txt").exists():
            pytest.fail((folder / "failed.txt").read_text(), pytrace=False)
        if not (folder / "stdout.txt").exists():
            folder.mkdir(parents=True, exist_ok=True)
            try:
                job = run(folder)
            except BaseException as error:
                (folder / "failed.txt").write_text(str(error))
                raise
            (folder / "stdout.txt").write_text(job.stdout)
    return folder / "out", (folder / "stdout.txt").read_text()


@pytest.fixture(scope="session")
def pinned(tmp_path_factory) -> Path:
    """The sample job's output with the pinned set, once a session."""
    return shared_run(tmp_path_factory, "pinned", _pinned_run)[0]


@pytest.fixture(scope="session")
def direct_outputs(tmp_path_factory):
    """venv -> its sample job's output on the DirectRunner and what the run printed, run
    once a session (the sample job's test and the engines' compare with it)."""

    def output(venv: Venv) -> tuple[Path, str]:
        def run(folder: Path) -> subprocess.CompletedProcess:
            return convert(
                venv.bin("image-tfrecords"),
                folder / "out",
                *SAMPLE_FLAGS,
                cwd=folder,
                who=venv.description(),
            )

        return shared_run(tmp_path_factory, f"direct-{venv.name}", run)

    return output


# The tests are in three scopes, which `make compat`'s two processes take whole
# (pytest-xdist's --dist loadscope, the most tests first): the sample job's module-level
# tests, the engines' class (about as long as the two others), the storage class (whose
# process alone starts the servers). pytest-xdist's --dist loadgroup would say it more
# directly, but with pytest 9 its xdist_group marks are ignored (it renames node ids
# through an attribute pytest 9 no longer reads).

# --- Flink and Spark ---------------------------------------------------------------------------


class TestEngines:
    @pytest.mark.parametrize(
        "venv, engine",
        [
            (venv, engine)
            for venv in VENVS
            for engine in ENGINE_FLAGS
            if f"{venv.name}:{engine}" in ENGINE_RUNS
        ],
        ids=lambda value: value if isinstance(value, str) else value.name,
    )
    def test_the_engine_publishes_the_direct_runners_bytes(
        self, venv, engine, direct_outputs, tmp_path
    ):
        who = f"{venv.description()} on {engine}"
        reference, _ = direct_outputs(venv)
        convert(
            venv.bin("image-tfrecords"),
            tmp_path / "out",
            *SAMPLE_FLAGS,
            *ENGINE_FLAGS[engine],
            cwd=tmp_path,
            who=who,
        )
        found = differences(tmp_path / "out", reference, venv.versions(), ENGINE_FLAGS[engine][1])
        assert not found, f"{who}: the output differs from the DirectRunner's:\n" + "\n".join(found)
        shutil.rmtree(tmp_path / "out")


# --- what --version and docs/install.md call tested ---------------------------------------------


@pytest.mark.parametrize("venv", VENVS, ids=_ids)
def test_the_venv_is_a_combination_listed_as_tested(venv):
    """pipeline/versions.py's TESTED (what --version and docs/install.md list) holds what
    this tier resolved: a new release fails here, named, until the tier has passed on it
    and it is listed (or, where it breaks the package, setup.py's range excludes it)."""
    versions = venv.versions()
    python = ".".join(versions["python"].split(".")[:2])
    resolved = (python, versions["apache-beam"], versions["tensorflow"])
    resolved += (versions["tensorflow-transform"],)
    listed = {tested[:4] for tested in TESTED}
    assert resolved in listed, (
        f"{venv.description()} resolved a combination not in pipeline/versions.py's "
        f"TESTED: once this tier passes on it, list it there and in docs/install.md's "
        f"table (listed: {sorted(listed)})"
    )


# --- the sample job ------------------------------------------------------------------------------


def test_two_pinned_runs_differ_only_where_any_two_runs_do(pinned, tmp_path):
    """The claim the comparisons rest on: two runs of the same job, the same set, differ
    in summary.json's run facts, report.html's path and time and the SavedModel alone."""
    _pinned_run(tmp_path)
    again = tmp_path / "out"
    versions = json.loads((pinned / "summary.json").read_text())["versions"]
    assert differences(again, pinned, versions) == []
    changed = sorted(
        name for name, data in files_of(again).items() if files_of(pinned)[name] != data
    )
    assert changed == sorted(["report.html", "summary.json", *EVERY_RUN_ITS_OWN])


@pytest.mark.parametrize("venv", VENVS, ids=_ids)
def test_the_sample_job_writes_the_pinned_sets_bytes(venv, pinned, direct_outputs):
    who = venv.description()
    output, printed = direct_outputs(venv)
    assert "rows read 50 = 43 examples written + 7 dead-lettered" in printed, (
        f"{who}:\n{printed[-3000:]}"
    )
    found = differences(output, pinned, venv.versions())
    assert not found, f"{who}: the output differs from the pinned set's:\n" + "\n".join(found)


@pytest.mark.parametrize("venv", VENVS, ids=_ids)
def test_the_venv_runs_its_own_package(venv, tmp_path):
    """`image-tfrecords --version`, from outside the checkout: the venv's package, and the
    versions it says are the ones installed."""
    who = venv.description()
    versions = venv.versions()
    said = subprocess.run(
        [str(venv.bin("image-tfrecords")), "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert said.returncode == 0, f"{who}: {said.stderr[-3000:]}"
    site_packages = next((venv.path / "lib").glob("python3.*/site-packages"))
    first, named = said.stdout.splitlines()[:2]
    assert first == f"image-tfrecords 0.1.0 from {site_packages} (Python {versions['python']})", who
    for part in named.split(", "):
        name, version = part.split(" ")
        assert versions.get(name, version) == version, f"{who}: --version says {named}"


# --- a detection format from s3:// to hdfs://, read back with TFDS ---------------------------

VOC_EXPORT = ROOT / "tests" / "data" / "public" / "voc" / "cvat_pascal_voc"


def voc_objects() -> dict[str, tuple[tuple[int, int], list[tuple[str, tuple[float, ...]]]]]:
    """The export's image file names -> ((width, height), [(class, (xmin, ymin, xmax,
    ymax)) in pixels]), as its XMLs say."""
    found = {}
    for path in sorted((VOC_EXPORT / "Annotations").glob("*.xml")):
        annotation = ElementTree.parse(path).getroot()
        size = int(annotation.findtext("size/width")), int(annotation.findtext("size/height"))
        found[annotation.findtext("filename")] = (
            size,
            [
                (
                    item.findtext("name"),
                    tuple(
                        float(item.findtext(f"bndbox/{side}"))
                        for side in ("xmin", "ymin", "xmax", "ymax")
                    ),
                )
                for item in annotation.iter("object")
            ],
        )
    return found


@pytest.fixture(scope="module")
def voc_on_s3(_s3_bucket, _hdfs_cluster):
    """The CVAT Pascal VOC export (tests/data/public/README.md), with a JPEG of each
    annotation's declared size (test_detection.py's), in the session's S3 bucket; its
    folder's URL and the flags that reach S3 and HDFS."""
    hdfs = ["--hdfs_host", "127.0.0.1", "--hdfs_port", str(_hdfs_cluster.port)]
    flags = [*_s3_bucket.flags, *hdfs, "--hdfs_user", "trainer"]
    FileSystems.set_options(PipelineOptions(flags))  # this process's reads reach both
    folder = f"{_s3_bucket.url}/compat/voc"
    for path in sorted(VOC_EXPORT.rglob("*")):
        if path.is_file():
            put(f"{folder}/{path.relative_to(VOC_EXPORT).as_posix()}", path.read_bytes())
    for number, (name, (size, _)) in enumerate(voc_objects().items()):
        put(
            f"{folder}/JPEGImages/{name}",
            encode(Image.new("RGB", size, (number * 10, 90, 160)), "JPEG"),
        )
    return folder, flags


class TestS3ToHdfs:
    @pytest.mark.parametrize("venv", VENVS, ids=_ids)
    def test_a_voc_export_from_s3_to_hdfs_reads_back_in_tfds(self, venv, voc_on_s3, tmp_path):
        import tensorflow_datasets as tfds

        who = venv.description()
        folder, flags = voc_on_s3
        output = f"hdfs://compat-{venv.name}/out"
        job = convert(
            venv.bin("image-tfrecords"),
            output,
            "--manifest",
            folder,
            "--label_mode",
            "detection",
            *flags,
            cwd=tmp_path,
            who=who,
        )
        expected = voc_objects()
        rows = sum(len(objects) for _, objects in expected.values())  # a row per object
        accounted = f"rows read {rows} = {rows} rows in {len(expected)} examples written + 0 dead"
        assert accounted in job.stdout, f"{who}:\n{job.stdout[-3000:]}"
        FileSystems.set_options(PipelineOptions(flags))
        download(output, tmp_path / "out")
        builder = tfds.builder_from_directory(str(tmp_path / "out"))
        names = builder.info.features["image/object/class/label"].feature
        seen = {}
        for split in builder.info.splits:
            for element in tfds.as_numpy(builder.as_dataset(split=split)):
                name = element["image/filename"].decode()
                (width, height), objects = expected[name]
                seen[name] = split
                assert element["image/encoded"].shape == (height, width, 3), f"{who}: {name}"
                assert [names.int2str(i) for i in element["image/object/class/label"]] == [
                    label for label, _ in objects
                ], f"{who}: {name}"
                for index, side in enumerate(("xmin", "ymin", "xmax", "ymax")):
                    scale = width if side[0] == "x" else height
                    np.testing.assert_allclose(
                        element[f"image/object/bbox/{side}"],
                        np.float32([box[index] / scale for _, box in objects]),
                        rtol=1e-6,
                        err_msg=f"{who}: {name} {side}",
                    )
        fractions = RowRules().split_fractions
        assert seen == {name: assign_split(name, fractions) for name in expected}, who
