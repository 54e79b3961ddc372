"""Image folders as a source: layouts, splits, files that are not images or misplaced."""

import json

import pytest
import tensorflow_transform as tft
from conftest import encode, feature, photo_like, read_examples

from image_tfrecords.core.inputs.folder import (
    LABEL_IS_SPLIT_NAME,
    NOT_IN_LABEL_FOLDER,
    NOT_IN_SPLIT_FOLDER,
    check_folder,
    folder_rows,
)
from image_tfrecords.core.inputs.rows import ManifestError, assign_split
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.core.records.splits import normalise_split
from image_tfrecords.pipeline import run


def make_files(root, *relative_paths):
    for relative in relative_paths:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


def read(root):
    """folder_rows sorted by path: (rows as (raw, split, labels)), (dead letters as
    (raw, split, reason))."""
    items = sorted(folder_rows(str(root) + "/", (0.8, 0.1, 0.1)), key=lambda r: r.raw)
    return (
        [(r.raw, r.split, r.labels) for r in items if isinstance(r, ManifestRow)],
        [(r.raw, r.split, r.reason) for r in items if not isinstance(r, ManifestRow)],
    )


def test_label_only_folders_get_a_split_from_the_path(tmp_path):
    make_files(
        tmp_path,
        "cat/a.jpg",
        "fish/c.jpeg",
        "fish/.hidden.jpg",
        "fish/notes.txt",
        ".DS_Store",
        "loose.jpg",
        "cat/deeper/d.jpg",
    )
    items = list(folder_rows(str(tmp_path), (0.8, 0.1, 0.1)))
    assert {r.uri for r in items} == {
        str(tmp_path / p) for p in ("cat/a.jpg", "fish/c.jpeg", "loose.jpg", "cat/deeper/d.jpg")
    }
    assert read(tmp_path) == (
        [
            ("cat/a.jpg", assign_split("cat/a.jpg", (0.8, 0.1, 0.1)), ("cat",)),
            ("fish/c.jpeg", assign_split("fish/c.jpeg", (0.8, 0.1, 0.1)), ("fish",)),
        ],
        [("cat/deeper/d.jpg", "", NOT_IN_LABEL_FOLDER), ("loose.jpg", "", NOT_IN_LABEL_FOLDER)],
    )


@pytest.mark.parametrize(
    "written, split",
    [
        ("train", "train"),
        ("TRAIN", "train"),
        ("Test", "test"),
        ("validation", "validation"),
        ("Validation", "validation"),
        ("val", "validation"),
        ("VAL", "validation"),
        ("valid", "validation"),
        ("eval", "validation"),
        ("Dev", "validation"),
        (" train ", "train"),
        ("unassigned", None),
        ("DISCARD", None),
        ("", None),
        ("training", "train"),
        ("training_set", "train"),
        ("test_set", "test"),
        ("cat", None),
    ],
)
def test_split_names_in_any_case_and_validation_aliases(written, split):
    assert normalise_split(written) == split


def test_once_a_top_folder_is_a_split_no_split_or_misplaced_file_becomes_a_class(tmp_path):
    """The layout Kaggle's and Keras' datasets use, with the usual slips in it: `val/`,
    a file dropped in `train/`, a folder that is no split, a split inside a split."""
    make_files(
        tmp_path,
        "Train/cat/a.jpg",
        "train/dog/b.png",
        "val/cat/c.jpg",
        "TEST/dog/d.jpg",
        "dev/dog/e.jpg",
        "train/stray.jpg",
        "cat/f.jpg",
        "notes/cat/g.jpg",
        "loose.jpg",
        "train/val/h.jpg",
        "test/cat/deeper/i.jpg",
    )
    rows, letters = read(tmp_path)
    assert rows == [
        ("TEST/dog/d.jpg", "test", ("dog",)),
        ("Train/cat/a.jpg", "train", ("cat",)),
        ("dev/dog/e.jpg", "validation", ("dog",)),
        ("train/dog/b.png", "train", ("dog",)),
        ("val/cat/c.jpg", "validation", ("cat",)),
    ]
    assert letters == [
        ("cat/f.jpg", "", NOT_IN_SPLIT_FOLDER),
        ("loose.jpg", "", NOT_IN_LABEL_FOLDER),
        ("notes/cat/g.jpg", "", NOT_IN_SPLIT_FOLDER),
        ("test/cat/deeper/i.jpg", "test", NOT_IN_LABEL_FOLDER),
        ("train/stray.jpg", "train", NOT_IN_LABEL_FOLDER),
        ("train/val/h.jpg", "train", LABEL_IS_SPLIT_NAME),
    ]
    messages = {
        r.raw: r.message for r in folder_rows(str(tmp_path)) if not isinstance(r, ManifestRow)
    }
    assert "directly in split folder 'train'" in messages["train/stray.jpg"]
    assert "'notes' is not a split" in messages["notes/cat/g.jpg"]
    assert "'val' is a split name, not a class" in messages["train/val/h.jpg"]


def test_a_missing_or_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ManifestError, match="image folder not found or empty"):
        check_folder(str(tmp_path / "nope"))
    make_files(tmp_path, "cat/a.jpg")
    check_folder(str(tmp_path))


def test_a_photo_folder_with_val_and_a_stray_file_converts_without_split_classes(tmp_path):
    root = tmp_path / "photos"
    expected = {}
    for i, relative in enumerate(
        [
            "train/cat/0.jpg",
            "train/dog/1.jpg",
            "Train/cat/2.png",
            "train/cat/3.jpg",
            "val/dog/4.jpg",
            "val/cat/5.jpg",
            "TEST/dog/6.jpg",
            "train/stray.jpg",
            "cat/7.jpg",
        ]
    ):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            encode(photo_like(18, 14, i), "PNG" if relative.endswith("png") else "JPEG")
        )
        split, *label = relative.split("/")[:-1]
        expected[relative] = (normalise_split(split), *label)
    (root / "train" / "README.txt").write_text("not an image")
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--image_folder",
                str(root),
                "--output_dir",
                str(output),
                "--max_error_fraction",
                "0.3",
            ]
        )
        == run.EXIT_OK
    )

    found = {}
    for split in ("train", "validation", "test"):
        for example in read_examples(f"{output}/{split}-*.tfrecord"):
            relative = feature(example, "image/source_id").decode()[len(str(root)) + 1 :]
            found[relative] = (split, feature(example, "image/class/text").decode())
    assert found == {
        relative: where for relative, where in expected.items() if len(where) == 2 and where[0]
    }
    assert [w.decode() for w in tft.TFTransformOutput(str(output)).vocabulary_by_name("label")] == [
        "cat",
        "dog",
    ]
    letters = sorted(
        (letter["raw"], letter["reason"])
        for letter in map(
            json.loads, (output / "errors-00000-of-00001.jsonl").read_text().splitlines()
        )
    )
    assert letters == [("cat/7.jpg", NOT_IN_SPLIT_FOLDER), ("train/stray.jpg", NOT_IN_LABEL_FOLDER)]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["image_folder"] == str(root) and summary["accounted"]
    assert (summary["rows_read"], summary["examples_written"], summary["rows_dead_lettered"]) == (
        9,
        7,
        2,
    )
