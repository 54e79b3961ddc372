"""The installed entry points, run as a user runs them, and what stops them before the job."""

import gc
import json
import os
import re
import subprocess
import sys
import time
from importlib.metadata import version

import psutil
import pytest
from conftest import SAMPLE_DATA, encode, photo_like, tiny_manifest

import image_tfrecords
from image_tfrecords.pipeline import cli, run
from image_tfrecords.pipeline.versions import TESTED


def run_command(*args, cwd=None):
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=300)


def test_convert_help_lists_this_jobs_options_in_groups_and_beams_on_request():
    result = run_command(sys.executable, "-m", "image_tfrecords", "--help")
    assert result.returncode == 0
    text = result.stdout
    groups = [
        text.index(f"\n{group}:\n") for group in ("input", "labels", "images", "output", "run")
    ]
    assert groups == sorted(groups)
    for flag in ("--manifest", "--output_dir", "--unseen_label", "--target_shard_mb"):
        assert f"  {flag} " in text, flag
    assert "--target_shard_mb MB" in text and "(default: 128.0)" in text
    assert "(default: error)" in text  # --unseen_label's
    for flag in ("--runner", "--direct_num_workers", "--project", "--flink_master"):
        assert f"  {flag}" not in text, flag
    assert text.rstrip().endswith("--help_beam lists them all.")
    assert len(text.splitlines()) <= 200  # was 837 with Beam's, 247 without examples
    examples = text[text.index("\nexamples:\n") :]
    for example in (
        "--manifest data.csv --output_dir out/",
        "--image_folder photos/",
        "--label_mode detection",
        "coco/instances.json",
        "yolo/data.yaml",
        "--output_dir gs://",
        "--resume",
    ):
        assert example in examples, example
    beam = run_command(sys.executable, "-m", "image_tfrecords", "--help_beam")
    assert beam.returncode == 0
    for flag in (
        "--runner",
        "--direct_num_workers",
        "--project",
        "--flink_master",
        "--s3_endpoint_url",
        "--hdfs_host",
    ):
        assert f"  {flag}" in beam.stdout, flag
    assert "  --manifest" not in beam.stdout


def test_help_piped_into_a_reader_that_stops_early_ends_quietly():
    command = os.path.join(os.path.dirname(sys.executable), "image-tfrecords")
    result = subprocess.run(
        f"{command} convert --help_beam | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.startswith("usage: ") and result.stderr == ""


def test_image_tfrecords_without_a_command_prints_usage_and_fails():
    result = run_command(os.path.join(os.path.dirname(sys.executable), "image-tfrecords"))
    assert result.returncode == 2 and "convert" in result.stdout
    result = run_command(
        os.path.join(os.path.dirname(sys.executable), "image-tfrecords"), "frobnicate"
    )
    assert result.returncode == 2 and "unknown command 'frobnicate'" in result.stderr


def test_python_dash_m_pipeline_converts_and_prints_the_table(tmp_path):
    tiny_manifest(tmp_path)
    result = run_command(
        sys.executable,
        "-m",
        "image_tfrecords",
        "--manifest",
        "m.csv",
        "--output_dir",
        "out",
        "--runner",
        "DirectRunner",
        "--direct_num_workers",
        "2",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "rows read 3 = 3 examples written + 0 dead-lettered" in result.stdout
    # A quiet console: none of TensorFlow's native start-up lines (on a machine without a
    # GPU, "failed call to cuInit") nor Beam's routine messages; Beam's warning about
    # these very options (two workers, in memory) shows; no progress line for a run that
    # writes its rows within seconds.
    printed = result.stderr.splitlines()
    assert [line.split(":")[0] for line in printed] == [
        "WARNING apache_beam.runners.portability.fn_api_runner.fn_runner"
    ]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["options"]["runner"] == "DirectRunner"
    assert summary["splits"]["train"]["examples"] == 2


def test_a_failed_run_ends_in_one_error_line_without_a_traceback(tmp_path):
    """The sample set has 7 broken rows of 50: over the default --max_error_fraction."""
    result = run_command(
        sys.executable,
        "-m",
        "image_tfrecords",
        "--manifest",
        str(SAMPLE_DATA / "manifest.csv"),
        "--output_dir",
        "out",
        cwd=tmp_path,
    )
    assert result.returncode == run.EXIT_FAILED
    assert "Traceback" not in result.stderr and "RunFailed" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "dead-lettered" in line]
    assert line.startswith("error: 14.0% of rows were dead-lettered") and "FAILED.json" in line
    assert "FAILED: nothing below was published" in result.stdout
    assert not (tmp_path / "out" / "summary.json").exists()


def test_a_kaggle_style_csv_with_a_header_and_discard_rows_converts(tmp_path, capsys):
    """`Image,Id` (Kaggle's whale set) names the label `Id`: no class named after the
    header; DISCARD rows are counted apart; `val` is VALIDATION."""
    for seed, name in enumerate(("a.jpg", "b.jpg", "c.jpg", "d.jpg")):
        (tmp_path / name).write_bytes(encode(photo_like(24, 16, seed), "JPEG"))
    (tmp_path / "whales.csv").write_text(
        "Image,Id,subset\na.jpg,w_1,train\nb.jpg,w_2,train\nc.jpg,w_1,val\nd.jpg,w_2,DISCARD\n"
    )
    code = run.main(
        ["--manifest", str(tmp_path / "whales.csv"), "--output_dir", str(tmp_path / "out")]
    )
    assert code == run.EXIT_OK
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert sorted(summary["vocabulary"]["label"]) == ["w_1", "w_2"]
    assert (
        summary["rows_read"],
        summary["examples_written"],
        summary["rows_dead_lettered"],
        summary["rows_discarded"],
        summary["accounted"],
    ) == (4, 3, 0, 1, True)
    assert summary["error_fraction"] == 0 and summary["splits"]["validation"]["examples"] == 1
    assert "+ 1 discarded (DISCARD)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, words",
    [
        (["--num_shard", "4"], "unknown option --num_shard (did you mean --num_shards?)"),
        (["--label_mod=multi"], "unknown option --label_mod (did you mean --label_mode?)"),
        (["--num_shards", "four"], "argument --num_shards: invalid int value: 'four'"),
        (["data.csv"], "unexpected argument 'data.csv'"),
    ],
)
def test_an_unknown_option_stops_the_run_naming_the_closest(tmp_path, capsys, args, words):
    manifest = tiny_manifest(tmp_path)
    code = run.main(["--manifest", manifest, "--output_dir", str(tmp_path / "out"), *args])
    error = capsys.readouterr().err
    assert code == run.EXIT_USAGE and error.startswith(f"error: {words}")
    assert error.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "where, words",
    [
        ("output is a file", "--output_dir {tmp}/taken is a file: give a folder"),
        (
            "manifest is a folder",
            "--manifest {tmp}/photos is a folder without LabelMe JSON or VOC "
            "XML files: give a manifest file, or --image_folder {tmp}/photos for images in class "
            "folders",
        ),
    ],
)
def test_a_file_or_folder_given_for_the_other_stops_the_run_saying_so(
    tmp_path, capsys, where, words
):
    manifest = tiny_manifest(tmp_path)
    (tmp_path / "taken").write_text("a file")
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "cat" / "a.jpg").write_bytes(encode(photo_like(8, 8, seed=1), "JPEG"))
    (tmp_path / "photos" / "notes.json").write_text("{}")  # no LabelMe file
    argv = (
        ["--manifest", manifest, "--output_dir", str(tmp_path / "taken")]
        if where == "output is a file"
        else ["--manifest", str(tmp_path / "photos"), "--output_dir", str(tmp_path / "out")]
    )
    assert run.main(argv) == run.EXIT_USAGE
    error = capsys.readouterr().err
    assert error == f"error: {words.format(tmp=tmp_path)}\n"


def test_a_detection_csv_without_detection_mode_stops_naming_the_flag(tmp_path, capsys):
    (tmp_path / "boxes.csv").write_text(
        "TRAIN,a.jpg,cat,0.1,0.2,,,0.5,0.6,,\nTRAIN,a.jpg,dog,0.5,0.5,,,0.9,0.9,,\n"
    )
    code = run.main(
        ["--manifest", str(tmp_path / "boxes.csv"), "--output_dir", str(tmp_path / "out")]
    )
    error = capsys.readouterr().err
    assert code == run.EXIT_USAGE and error.count("\n") == 1
    assert "2 of the first 2 rows end in box coordinates" in error
    assert "pass --label_mode detection" in error


def test_a_run_whose_every_row_is_rejected_says_why_not_to_give_a_vocabulary(tmp_path, capsys):
    """Rows dead-lettered as they are read never reach the ids: the error leads with their
    reasons and one of them, and does not send the user to --vocabulary."""
    (tmp_path / "m.csv").write_text("split,image_uri,label\ntrain,a.jpg,\ntrain,b.jpg,\n")
    code = run.main(["--manifest", str(tmp_path / "m.csv"), "--output_dir", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert code == 1
    assert (
        "no example was written: 2 of the 2 rows read were dead-lettered (missing_label 2), "
        f"e.g. {tmp_path / 'm.csv'} row 2: " in error
    )
    assert "--vocabulary" not in error


def test_a_conversion_of_other_splits_alone_needs_the_vocabulary_before_the_job(tmp_path, capsys):
    manifest = tiny_manifest(tmp_path)
    (tmp_path / "t.csv").write_text("test,a.jpg,cat\n")
    (tmp_path / "v.csv").write_text("validation,b.jpg,dog\n")
    arguments = [
        "--output_dir",
        str(tmp_path / "out"),
        "--manifest",
        f"TEST={tmp_path / 't.csv'}",
        "--manifest",
        f"val={tmp_path / 'v.csv'}",
    ]
    code = run.main(arguments)
    error = capsys.readouterr().err
    assert code == run.EXIT_USAGE and error.count("\n") == 1
    assert "every manifest is TEST and VALIDATION (--manifest SPLIT=PATH)" in error
    assert "there is no TRAIN row to learn the label ids from" in error
    assert not (tmp_path / "out").exists()  # refused before the job
    # With the ids of the run that converted TRAIN, it converts.
    assert run.main(["--manifest", manifest, "--output_dir", str(tmp_path / "trained")]) == 0
    assert run.main([*arguments, "--vocabulary", str(tmp_path / "trained")]) == 0


def test_the_command_and_the_python_api_refuse_a_mistyped_option(tmp_path):
    manifest = tiny_manifest(tmp_path)
    result = run_command(
        sys.executable,
        "-m",
        "image_tfrecords",
        "--manifest",
        manifest,
        "--output_dir",
        str(tmp_path / "out"),
        "--num_shard",
        "4",
    )
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "error: unknown option --num_shard (did you mean --num_shards?)"
    )
    with pytest.raises(ValueError, match=r"did you mean --num_shards\?"):
        image_tfrecords.convert(manifest, str(tmp_path / "out"), num_shard=4)


def test_the_bundled_one_hot_sample_converts_as_the_readme_says(tmp_path):
    """sample_data/one_hot.csv: `image_id,subset,cat,coffee,flower` with 0/1 values."""
    code = run.main(
        [
            "--manifest",
            str(SAMPLE_DATA / "one_hot.csv"),
            "--label_mode",
            "multi",
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    assert code == run.EXIT_OK
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (
        summary["rows_read"],
        summary["examples_written"],
        summary["rows_dead_lettered"],
        summary["rows_discarded"],
    ) == (15, 13, 0, 2)
    assert sorted(summary["vocabulary"]["label"]) == ["cat", "coffee", "flower"]
    assert summary["splits"]["train"]["labels"] == {"cat": 4, "coffee": 4, "flower": 3}
    assert [summary["splits"][split]["examples"] for split in ("validation", "test")] == [2, 1]


@pytest.mark.parametrize(
    "files, args, words",
    [
        (
            {"m.csv": "picture,kind\na.jpg,cat\nb.jpg,dog\n"},
            ["--manifest", "m.csv"],
            "its columns are 'picture', 'kind': name them with --uri_column NAME and "
            "--label_column NAME",
        ),
        (
            {"m.csv": "picture,kind\na.jpg,cat\n"},
            ["--manifest", "m.csv", "--uri_column", "picture", "--label_column", "breed"],
            "--label_column 'breed' is not a column of the first row",
        ),
        (
            {"i.jsonl": "{}\n"},
            ["--manifest", "i.jsonl", "--uri_column", "x"],
            "--uri_column, --label_column and --split_column name columns of CSV manifests only",
        ),
        (
            {"photos/cat/a.jpg": ""},
            ["--image_folder", "photos", "--label_column", "x"],
            "--uri_column, --label_column and --split_column name columns of a --manifest",
        ),
    ],
)
def test_column_problems_stop_before_the_job_in_one_line(
    tmp_path, capsys, monkeypatch, files, args, words
):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    code = run.main([*args, "--output_dir", "out"])
    error = capsys.readouterr().err
    assert code == run.EXIT_USAGE and error.startswith("error: ") and words in error
    assert error.count("\n") == 1 and not (tmp_path / "out").exists()


def test_the_reports_wall_time_counts_from_the_commands_start(tmp_path, capsys):
    """The table's wall time and images/s count the imports and checks before the job in:
    from the process's start (here pytest's, long before)."""
    since_start = time.time() - psutil.Process().create_time()
    manifest = tiny_manifest(tmp_path)
    try:
        assert cli.convert_main(["--manifest", manifest, "--output_dir", str(tmp_path / "o")]) == 0
    finally:
        gc.unfreeze()  # the command freezes what its imports made, for its process's life
    wall = float(re.search(r"^wall ([\d.]+) s", capsys.readouterr().out, re.M).group(1))
    assert wall >= since_start


def test_the_python_api_prints_nothing_of_tensorflows_own(sample_output):
    """Importing, loading and reading: no start-up line, no GPU probe, no I/W line."""
    script = (
        "import image_tfrecords\n"
        f"dataset = image_tfrecords.load({str(sample_output)!r}, 'train')\n"
        "next(iter(dataset))\n"
        "print('read')\n"
    )
    result = run_command(sys.executable, "-c", script)
    assert (result.returncode, result.stdout, result.stderr) == (0, "read\n", "")


@pytest.mark.parametrize("command", [["image-tfrecords"], ["-m", "image_tfrecords"]])
def test_version_names_the_package_and_the_libraries_its_output_depends_on(command):
    if command[0] == "image-tfrecords":
        command = [os.path.join(os.path.dirname(sys.executable), "image-tfrecords")]
    else:
        command = [sys.executable, *command]
    result = run_command(*command, "--version")
    assert result.returncode == 0, result.stderr
    package, libraries, heading, *tested, verdict = result.stdout.splitlines()
    # Where the code runs from: this checkout (the tests put it first on the path).
    assert package.startswith(
        f"image-tfrecords {version('image-tfrecords')} from "
        f"{os.path.dirname(os.path.dirname(cli.__file__))} (Python "
    )
    for name in ("apache-beam", "tensorflow", "tensorflow-transform", "tfx-bsl"):
        assert f"{name} {version(name)}" in libraries.split(", "), name
    # The combinations CI tests, this one (requirements.txt's) among them.
    assert heading == "Tested combinations:"
    assert len(tested) == len(TESTED)
    assert verdict == "This combination is tested."
    assert result.stderr == ""


def test_version_imports_neither_tensorflow_nor_beam():
    """It reads the installed packages' metadata: a TensorFlow import takes seconds."""
    code = (
        "import sys; from image_tfrecords.pipeline import cli; code = cli.main(['--version']); "
        "print(code, sorted({'tensorflow', 'apache_beam'} & set(sys.modules)))"
    )
    result = run_command(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "0 []"


def test_the_wall_time_counts_from_the_process_start_not_a_second_before():
    """The report's wall time starts at the process's own start: psutil's create_time,
    which adds the boot time in whole seconds, put it up to a second early."""
    child = (
        "import time; time.sleep(1.0); "
        "from image_tfrecords.pipeline.cli import _process_started; "
        "print(time.time() - _process_started())"
    )
    began = time.monotonic()
    age = float(subprocess.check_output([sys.executable, "-c", child], text=True))
    lived = time.monotonic() - began
    assert 1.0 <= age <= lived + 0.02  # a clock tick's rounding
