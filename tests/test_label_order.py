"""Label ids learnt from TRAIN, end to end: sorted by default, so that rows whose images
turn out missing change no id; TFRecorder's frequency order on request, which says where
the written examples would order the labels otherwise; and a run that replaces an
output (--overwrite) names every id it changed."""

import json

import pytest
import tensorflow as tf
import tensorflow_transform as tft
from conftest import copy_output, encode, feature, photo_like, printing, read_examples

from image_tfrecords.pipeline import run


@pytest.fixture(scope="module")
def manifests(tmp_path_factory):
    """The issue's example: cat outnumbers rocket in TRAIN, until six rows of rocket
    whose image files are missing are added (plus.csv); and ant instead of rocket
    (ant.csv)."""
    root = tmp_path_factory.mktemp("label_order")
    (root / "img").mkdir()
    for i in range(9):
        (root / "img" / f"{i}.jpg").write_bytes(encode(photo_like(20, 16, i), "JPEG"))
    rows = [f"train,img/{i}.jpg,cat" for i in range(4)]
    rows += [f"train,img/{i}.jpg,rocket" for i in range(4, 7)]
    rows += ["test,img/7.jpg,rocket", "test,img/8.jpg,cat"]
    missing = [f"train,img/missing{i}.jpg,rocket" for i in range(6)]
    (root / "base.csv").write_text("\n".join(rows) + "\n")
    (root / "plus.csv").write_text("\n".join(rows + missing) + "\n")
    (root / "ant.csv").write_text("\n".join(row.replace("rocket", "ant") for row in rows) + "\n")
    return root


def convert(manifest, output, *flags):
    return run.main(
        [
            "--manifest",
            str(manifest),
            "--output_dir",
            str(output),
            "--max_error_fraction",
            "0.9",
            *flags,
        ]
    )


def ids_of(output):
    """label text -> label id, over every example written."""
    return {
        feature(example, "image/class/text").decode(): feature(example, "image/class/label")
        for example in read_examples(f"{output}/*.tfrecord")
    }


def summary_of(output):
    return json.loads((output / "summary.json").read_text())


class Run:
    """A conversion the tests share (each takes seconds): its output and what it printed."""

    def __init__(self, manifest, output, *flags):
        status, self.console = printing(convert, manifest, output, *flags)
        assert status == 0
        self.output = output
        assert str(output) in self.console  # its report: the console was caught


@pytest.fixture(scope="module")
def runs(manifests, tmp_path_factory):
    """The runs the tests read, each made once. Those made with --overwrite replace an
    output of the ids the test names: plus_sorted replaces plus_frequency's (cat 1,
    rocket 0); base_sorted a copy of plus_sorted's, whose ids are its own; base_frequency
    a folder that is no output (no vocabulary)."""
    made = {}
    folder = tmp_path_factory.mktemp("label_order_runs")
    made["plus_frequency"] = Run(
        manifests / "plus.csv", folder / "plus_frequency", "--label_order", "frequency"
    )
    made["plus_sorted"] = Run(
        manifests / "plus.csv",
        copy_output(folder / "plus_frequency", folder / "plus_sorted"),
        "--overwrite",
    )
    made["base_sorted"] = Run(
        manifests / "base.csv",
        copy_output(folder / "plus_sorted", folder / "base_sorted"),
        "--overwrite",
    )
    (folder / "base_frequency").mkdir()
    (folder / "base_frequency" / "notes.txt").write_text("not an output\n")
    made["base_frequency"] = Run(
        manifests / "base.csv",
        folder / "base_frequency",
        "--label_order",
        "frequency",
        "--overwrite",
    )
    return made


def test_missing_images_change_no_sorted_id(runs):
    base, plus = runs["base_sorted"].output, runs["plus_sorted"].output
    assert ids_of(base) == ids_of(plus) == {"cat": 0, "rocket": 1}
    assert summary_of(plus)["errors"]["by_reason"] == {"file_not_found": 6}
    assert summary_of(plus)["options"]["label_order"] == "sorted"
    # The published transform_fn, fed `label` alone as a serving model feeds it, gives
    # the ids the shards hold.
    served = tft.TFTransformOutput(str(plus)).transform_raw_features(
        {"label": tf.constant(["rocket", "cat", "ant"])}
    )["label_id"]
    assert served.numpy().tolist() == [1, 0, -1]


def test_frequency_order_counts_the_rows_read_and_says_how_the_examples_order_them(runs):
    base = runs["base_frequency"].output
    assert ids_of(base) == {"cat": 0, "rocket": 1}  # 4 cat rows, 3 rocket
    assert summary_of(base)["frequency_order_of_examples"] == []
    # TFRecorder's order, with the rows read: rocket's nine TRAIN rows (six missing)
    # outnumber cat's four. The run says that the written examples order them otherwise.
    plus = runs["plus_frequency"]
    assert ids_of(plus.output) == {"rocket": 0, "cat": 1}
    summary = summary_of(plus.output)
    assert summary["options"]["label_order"] == "frequency"
    assert summary["frequency_order_of_examples"] == ["cat", "rocket"]
    assert (
        "warning: --label_order frequency counted the TRAIN rows read; the written TRAIN "
        "examples order the labels cat, rocket (the ids follow the rows read: "
        "--label_order sorted or --vocabulary keeps them stable)"
    ) in plus.console


def test_a_run_replacing_an_output_names_each_id_it_changed(manifests, runs, tmp_path, capsys):
    # Sorted, replacing the frequency order's ids.
    replacing = runs["plus_sorted"]
    assert summary_of(replacing.output)["label_id_changes"] == [
        {"label": "cat", "old_id": 1, "new_id": 0},
        {"label": "rocket", "old_id": 0, "new_id": 1},
    ]
    assert (
        "warning: label ids differ from the output this run replaced: cat 1 -> 0, rocket 0 -> 1"
    ) in replacing.console

    # Nothing changed: nothing said.
    unchanged = runs["base_sorted"]
    assert summary_of(unchanged.output)["label_id_changes"] == []
    assert "label ids differ" not in unchanged.console

    # A label new, a label gone: ant sorts before cat, which moves to id 1.
    output = copy_output(replacing.output, tmp_path / "out")
    assert convert(manifests / "ant.csv", output, "--overwrite") == 0
    assert ids_of(output) == {"ant": 0, "cat": 1}
    assert summary_of(output)["label_id_changes"] == [
        {"label": "ant", "old_id": None, "new_id": 0},
        {"label": "cat", "old_id": 0, "new_id": 1},
        {"label": "rocket", "old_id": 1, "new_id": None},
    ]
    assert (
        "warning: label ids differ from the output this run replaced: ant new -> 0, "
        "cat 0 -> 1, rocket 1 -> gone"
    ) in capsys.readouterr().out


def test_an_output_without_a_vocabulary_replaced_says_nothing_of_ids(runs):
    replacing = runs["base_frequency"]  # replaced a folder holding notes.txt alone
    assert summary_of(replacing.output)["label_id_changes"] == []
    assert "label ids differ" not in replacing.console
