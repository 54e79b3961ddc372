"""Same bytes whatever the workers; a crashed or killed run publishes nothing; reruns complete.

Beam's DirectRunner does not retry a failed bundle (Dataflow does, up to four times):
what a retry relies on, the writer and the publish step giving the same files when run
again, is tested in test_shards.py and test_publish.py.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REUSE_FACTS, encode, photo_like

import image_tfrecords
from image_tfrecords.pipeline import run

TIMINGS = ("started_at", "finished_at", "run_id")


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    root = tmp_path_factory.mktemp("reliability")
    (root / "img").mkdir()
    rows = []
    for i in range(60):
        (root / "img" / f"{i}.jpg").write_bytes(encode(photo_like(32, 24, i), "JPEG"))
        rows.append(f"UNASSIGNED,img/{i}.jpg,{('cat', 'dog', 'fish')[i % 3]}")
    rows += ["TRAIN,img/missing.jpg,cat", "TRAIN,img/0.jpg,"]
    (root / "m.csv").write_text("\n".join(rows) + "\n")
    return root / "m.csv"


def convert(manifest, output, *flags):
    assert (
        run.main(
            [
                "--manifest",
                str(manifest),
                "--output_dir",
                str(output),
                "--num_shards",
                "3",
                "--max_error_fraction",
                "0.1",
                "--overwrite",
                *flags,
            ]
        )
        == 0
    )


def published(output):
    """Every published file's bytes; summary.json without timings, run id and output dir,
    report.html without the end time and output dir.

    Of transform_fn/ only the vocabularies: TensorFlow writes a SavedModel with ids of
    its own that differ on every run.
    """
    files = {}
    for folder, _, names in os.walk(output):
        for name in names:
            path = os.path.relpath(os.path.join(folder, name), output)
            if path.startswith(".tmp-"):
                continue  # a run's temp dir: not published
            if not path.startswith(("transform_fn/", "transformed_metadata/")) or (
                path.startswith("transform_fn/assets/")
            ):
                files[path] = open(os.path.join(output, path), "rb").read()
    summary = json.loads(files.pop("summary.json"))
    del summary["options"]["output_dir"]
    files["summary.json"] = {
        k: v for k, v in summary.items() if k not in TIMINGS and k not in REUSE_FACTS
    }
    # report.html shows the end time and the output dir too, and what changed since the
    # output a run reused.
    report = files.pop("report.html").decode()
    for varying in (summary["finished_at"], str(output), '<a href="#changes">Changes</a>'):
        report = report.replace(varying, "")
    files["report.html"] = re.sub(r'<h2 id="changes">.*?</table>\n', "", report, flags=re.S)
    return files


@pytest.fixture(scope="module")
def reference(manifest, tmp_path_factory):
    output = tmp_path_factory.mktemp("reference") / "out"
    convert(manifest, output)
    return published(output)


@pytest.mark.parametrize(
    "workers",
    [
        ["--direct_num_workers", "2", "--direct_running_mode", "multi_threading"],
        ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"],
    ],
)
def test_same_bytes_with_one_or_two_workers(manifest, reference, tmp_path, workers):
    convert(manifest, tmp_path / "out", *workers)
    again = published(tmp_path / "out")
    assert sorted(again) == sorted(reference)
    # Several shards to get right (~50 TRAIN images over 3 shards chosen by URI hash).
    assert (
        len(
            [name for name in reference if name.startswith("train-") and name.endswith(".tfrecord")]
        )
        == 3
    )
    for name in reference:
        assert again[name] == reference[name], name


STOP_AT = Path(__file__).parent.parent / "bench" / "stop_at.py"


@pytest.fixture(scope="module")
def old_output(tmp_path_factory):
    """An earlier output for the killed runs to replace: one image, one label (cat)."""
    root = tmp_path_factory.mktemp("old")
    (root / "old.csv").write_text("TRAIN,reliability-old.jpg,cat\n")
    (root / "reliability-old.jpg").write_bytes(encode(photo_like(8, 8, 99), "JPEG"))
    assert run.main(["--manifest", str(root / "old.csv"), "--output_dir", str(root / "out")]) == 0
    return root / "out"


@pytest.mark.parametrize(
    ("module", "function", "when"),
    [
        (
            "image_tfrecords.core.records.receipts",
            "write_receipt",
            "after",
        ),  # the 2nd shard written, in a worker
        (
            "image_tfrecords.core.launcher.publishing",
            "move_into_place",
            "after",
        ),  # publishing: shards moved in
    ],
)
def test_a_killed_run_never_looks_like_a_good_one_and_a_rerun_completes(
    manifest, reference, old_output, tmp_path, module, function, when
):
    output = tmp_path / "out"
    shutil.copytree(old_output, output)  # the earlier output, made once for both kills
    old = published(output)

    job = subprocess.run(  # SIGKILLed, worker processes and all, where the test says
        [
            sys.executable,
            str(STOP_AT),
            module,
            function,
            when,
            "2" if function == "write_receipt" else "1",
            "--manifest",
            str(manifest),
            "--output_dir",
            str(output),
            "--num_shards",
            "3",
            "--overwrite",
            "--max_error_fraction",
            "0.1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # where tf.Transform's files stay
    assert job.returncode == -signal.SIGKILL, job.stderr[-3000:]
    assert [name for name in os.listdir(output) if name.startswith(".tmp-")]
    if function == "write_receipt":
        assert published(output) == old  # untouched: the killed run published nothing
    else:  # killed midway through the swap: no summary.json, so no reader takes it
        assert not (output / "summary.json").exists()
        with pytest.raises(FileNotFoundError, match="not an image-tfrecords output"):
            image_tfrecords.load(str(output), "train")

    convert(manifest, output)
    rerun = published(output)
    # The rerun names the ids that differ from the output it replaced: the old one's, or,
    # killed midway through the swap, the new vocabulary already moved in.
    changes = json.loads((output / "summary.json").read_text())["label_id_changes"]
    assert changes == (
        []
        if function == "move_into_place"
        else [
            {"label": "dog", "old_id": None, "new_id": 1},
            {"label": "fish", "old_id": None, "new_id": 2},
        ]
    )
    assert rerun == reference  # label_id_changes aside: a REUSE_FACT
    assert not [name for name in os.listdir(output) if name.startswith(".tmp-")]
