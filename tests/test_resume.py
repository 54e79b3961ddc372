"""--resume: a run SIGKILLed while it writes shards or publishes, run again with --resume,
publishes what an uninterrupted run does, reusing the shards it had finished; a stopped
run made from other inputs or options is refused.

The stopped runs are real processes killed with SIGKILL, at points chosen by counting
calls in the pipeline's own code (bench/stop_at.py), so each kill lands where the test
says.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import download, encode, photo_like, put
from test_reliability import published

from image_tfrecords.pipeline import resume, run

STOP_AT = Path(__file__).parent.parent / "bench" / "stop_at.py"
SPLITS = {"train": 40, "validation": 16, "test": 16}  # 2 shards each, none empty
SHARDS = 6


def make_manifest(folder: str, splits: dict[str, int] = SPLITS) -> str:
    """Images and a manifest of them (`splits`: images per split), with a missing image
    and a row without a label."""
    rows = []
    for index, split in enumerate(split for split, count in splits.items() for _ in range(count)):
        put(f"{folder}/img/{index}.jpg", encode(photo_like(40, 30, index), "JPEG"))
        rows.append(f"{split.upper()},{folder}/img/{index}.jpg,{('cat', 'dog')[index % 2]}")
    rows += [f"TRAIN,{folder}/img/missing.jpg,cat", f"TRAIN,{folder}/img/0.jpg,"]
    put(f"{folder}/m.csv", ("\n".join(rows) + "\n").encode())
    return f"{folder}/m.csv"


def arguments(manifest: str, output: str, *flags: str, shards_per_split: int = 2) -> list[str]:
    return [
        "--manifest",
        manifest,
        "--output_dir",
        output,
        "--num_shards",
        str(shards_per_split),
        "--max_error_fraction",
        "0.2",
        "--overwrite",
        *flags,
    ]


def stopped_run(
    argv: list[str], module: str, function: str, when: str, count: int, temp: Path
) -> None:
    """Runs the command line in a new process group, SIGKILLed as bench/stop_at.py says;
    what it leaves in its temp folder (tf.Transform's) goes in `temp`."""
    job = subprocess.run(
        [sys.executable, str(STOP_AT), module, function, when, str(count), *argv],
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    assert job.returncode == -signal.SIGKILL, job.stderr[-3000:]


def resumed(argv: list[str], capsys) -> str:
    """Runs again with --resume; returns what it printed."""
    assert run.main([*argv, "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "image-tfrecords: resuming the stopped run in " in printed
    return printed


def comparable(output) -> dict:
    """`published`, less what says whether the run was resumed, or reused an output."""
    files = published(output)
    files["summary.json"].pop("resumed_shards")
    files["summary.json"]["options"].pop("resume")
    return files


def same_output(output, reference, temp_left: bool = False) -> None:
    again = comparable(output)
    assert sorted(again) == sorted(reference)
    for name in reference:
        assert again[name] == reference[name], name
    if not temp_left:
        assert not [name for name in os.listdir(output) if name.startswith(".tmp-")]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A manifest and the output of an uninterrupted run of it, as `published` reads it."""
    folder = tmp_path_factory.mktemp("resume")
    manifest = make_manifest(str(folder / "data"))
    output = folder / "out"
    assert run.main(arguments(manifest, str(output))) == 0
    shards = [name for name in os.listdir(output) if name.endswith(".tfrecord")]
    assert len(shards) == SHARDS
    return manifest, output, comparable(output)


@pytest.mark.parametrize(
    ("function", "when", "count", "reused"),
    [
        # While writing: after the fourth shard's receipt, and with the third shard's files
        # closed but its receipt not yet written (that shard is redone).
        ("write_receipt", "after", 4, 4),
        ("write_receipt", "before", 3, 2),
    ],
)
def test_a_run_stopped_while_writing_resumes_to_the_same_output(
    local, capsys, function, when, count, reused
):
    manifest, output, reference = local
    stopped_run(
        arguments(manifest, str(output)),
        "image_tfrecords.core.records.receipts",
        function,
        when,
        count,
        output.parent,
    )
    receipts = [
        name
        for folder in os.listdir(output)
        if folder.startswith(".tmp-")
        for name in os.listdir(output / folder / "receipts")
        if name.endswith(".receipt.json")
    ]
    assert len(receipts) == reused
    # Killed while copying from the output it replaces (--overwrite reuses it): intact.
    same_output(output, reference, temp_left=True)
    printed = resumed(arguments(manifest, str(output)), capsys)
    assert f"resumed: {reused} of {SHARDS} shards reused from the stopped run" in printed
    summary = json.loads((output / "summary.json").read_text())
    assert summary["resumed_shards"] == reused
    same_output(output, reference)


@pytest.mark.parametrize(
    ("function", "when", "reused"),
    [
        ("move_into_place", "before", SHARDS),  # the summary prepared, nothing moved yet
        ("move_into_place", "after", 0),  # the shards moved in, summary.json not yet written
        ("delete_tree", "before", 0),  # published, its temp folder not yet removed
    ],
)
def test_a_run_stopped_while_publishing_resumes_to_the_same_output(
    local, capsys, function, when, reused
):
    manifest, output, reference = local
    stopped_run(
        arguments(manifest, str(output)),
        "image_tfrecords.core.launcher.publishing",
        function,
        when,
        1,
        output.parent,
    )
    resumed(arguments(manifest, str(output)), capsys)
    assert json.loads((output / "summary.json").read_text())["resumed_shards"] == reused
    same_output(output, reference)


def test_a_failed_run_resumed_with_a_higher_error_threshold_reuses_every_shard(
    local, tmp_path, capsys
):
    """2 of 74 rows are dead letters: more than 1%, so the first run publishes nothing."""
    manifest, _, reference = local
    output = tmp_path / "out"
    assert run.main(arguments(manifest, str(output), "--max_error_fraction", "0.01")) == 1
    assert "more than --max_error_fraction 1.0%" in capsys.readouterr().err
    printed = resumed(arguments(manifest, str(output)), capsys)
    assert f"resumed: {SHARDS} of {SHARDS} shards reused" in printed
    same_output(output, reference)


def test_a_stopped_run_made_from_other_inputs_or_options_is_refused(local, tmp_path, capsys):
    manifest, reference_output, _ = local
    data = tmp_path / "data"
    data.mkdir()
    changed = data / "m.csv"
    changed.write_text(open(manifest).read())
    output = str(tmp_path / "out")
    stopped_run(
        arguments(str(changed), output),
        "image_tfrecords.core.records.receipts",
        "write_receipt",
        "after",
        2,
        tmp_path,
    )
    capsys.readouterr()
    with changed.open("a") as file:
        file.write(f"TEST,{os.path.dirname(manifest)}/img/1.jpg,dog\n")
    assert run.main(arguments(str(changed), output, "--resume")) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: --resume: the stopped run in ")
    assert (
        f"made from other inputs or settings: {changed} has changed. Run without "
        "--resume to start again from the first image" in error
    )
    assert error.count("\n") == 1

    assert (
        run.main(
            arguments(manifest, output, "--resume", "--num_shards", "3", "--image_format", "png")
        )
        == 2
    )
    error = capsys.readouterr().err
    assert (
        f"{manifest} is new; {changed} is no longer given; --image_format 'png' (the "
        "stopped run's: 'keep'); --num_shards 3 (the stopped run's: 2)" in error
    )
    assert not os.path.exists(os.path.join(output, "summary.json"))  # nothing published


def test_resume_with_nothing_to_resume_starts_from_the_first_image(local, tmp_path, capsys):
    manifest, _, reference = local
    output = tmp_path / "out"
    assert run.main(arguments(manifest, str(output), "--resume")) == 0
    assert "no stopped run in" in capsys.readouterr().out
    assert json.loads((output / "summary.json").read_text())["resumed_shards"] == 0


@pytest.mark.parametrize("bucket", ["gcs", "s3"])
def test_a_run_stopped_while_writing_to_a_bucket_resumes_to_the_same_output(
    bucket, request, tmp_path, capsys
):
    """The receipts, shards and run.json live in the bucket, as on Dataflow (a shard per
    split: every request to the test servers takes a while)."""
    server = request.getfixturevalue(bucket)
    folder = f"{server.url}/resume-{bucket}"
    manifest = make_manifest(f"{folder}/data", {"train": 6, "validation": 3, "test": 3})
    output = f"{folder}/out"
    argv = [*arguments(manifest, output, shards_per_split=1), *server.flags]
    assert run.main(argv) == 0
    download(output, tmp_path / "reference")
    reference = comparable(tmp_path / "reference")
    stopped_run(
        argv, "image_tfrecords.core.records.receipts", "write_receipt", "after", 2, tmp_path
    )
    printed = resumed(argv, capsys)
    assert "resumed: 2 of 3 shards reused" in printed
    download(output, tmp_path / "resumed")
    same_output(tmp_path / "resumed", reference)


def test_only_a_folder_named_by_a_run_id_is_a_stopped_run(tmp_path):
    """A folder of another name (`.tmp-*`, whose name is a glob of every run's) is not
    resumed, whatever its run.json says."""
    recorded = resume.Fingerprint(sources={}, options={}, versions={}).model_dump_json()
    for name in (".tmp-0123456789ab", ".tmp-*", ".tmp-..", ".tmp-x y"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(recorded)
    assert [run_id for run_id, _ in resume._stopped_runs(str(tmp_path))] == ["0123456789ab"]
