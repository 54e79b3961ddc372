"""Hugging Face imagefolder metadata (core/inputs/hf_imagefolder.py): labels, objects
in pixels of a declared or the image's own size, splits from the metadata's folder."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, photo_like, read_examples

from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import check_sources, find_manifests, read_source
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.pipeline import run

PUBLIC = Path(__file__).parent / "data" / "public" / "hf" / "metadata.jsonl"
DETECTION = RowRules(label_mode="detection")


def rows(path, rules):
    sources = find_manifests([str(path)])
    assert {source.format for source in sources} == {"hf_imagefolder"}
    check_sources(sources, rules)
    return [row for source in sources for row in read_source(source, rules)]


def lines(path, *items):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def test_labels_and_splits_from_the_metadatas_folders(tmp_path):
    lines(
        tmp_path / "train" / "metadata.jsonl",
        {"file_name": "a.jpg", "label": "cat"},
        {"file_name": "sub/b.jpg", "labels": ["cat", "indoor"]},
        {"file_name": "c.jpg", "text": "a caption, no label"},
    )
    lines(tmp_path / "test" / "metadata.jsonl", {"file_name": "d.jpg", "label": 3})
    found = rows(tmp_path / "*" / "metadata.jsonl", RowRules(label_mode="multi"))
    assert [
        (row.split, row.uri, row.labels)
        if isinstance(row, ManifestRow)
        else (row.split, row.reason)
        for row in found
    ] == [
        ("test", str(tmp_path / "test" / "d.jpg"), ("3",)),
        ("train", str(tmp_path / "train" / "a.jpg"), ("cat",)),
        ("train", str(tmp_path / "train" / "sub" / "b.jpg"), ("cat", "indoor")),
        ("train", reasons.MISSING_LABEL),
    ]
    assert (
        rows(tmp_path / "train" / "metadata.jsonl", RowRules())[1].reason == reasons.MULTIPLE_LABELS
    )


def test_a_metadata_csv_needs_its_file_name_column(tmp_path):
    (tmp_path / "metadata.csv").write_text("file_name,label\na.jpg,cat\nb.jpg,dog\n")
    assert [row.labels for row in rows(tmp_path / "metadata.csv", RowRules())] == [
        ("cat",),
        ("dog",),
    ]
    (tmp_path / "metadata.csv").write_text("image,label\na.jpg,cat\n")
    with pytest.raises(
        ManifestError, match="needs a file_name column; for another CSV pass --input_format csv"
    ):
        rows(tmp_path / "metadata.csv", RowRules())


def test_a_public_objects_metadata_gives_a_box_per_object_in_pixels(tmp_path):
    """dnth/vl-hf-annotation-converter's metadata.jsonl: COCO-style [x, y, w, h] pixels,
    class ids under `category`, no image size: the boxes wait for the image's own."""
    path = tmp_path / "train" / "metadata.jsonl"
    path.parent.mkdir()
    shutil.copy(PUBLIC, path)
    found = rows(path, DETECTION)
    expected = [
        (item["file_name"], str(category), (x, y, x + w, y + h))
        for item in map(json.loads, PUBLIC.read_text().splitlines())
        for (x, y, w, h), category in zip(
            item["objects"]["bbox"], item["objects"]["category"], strict=True
        )
    ]
    assert len(found) == len(expected) >= 68
    assert [(row.uri.rsplit("/", 1)[-1], row.labels[0]) for row in found] == [
        item[:2] for item in expected
    ]
    assert all(row.boxes_in_pixels and row.split == "train" for row in found)
    np.testing.assert_allclose([row.boxes[0][:4] for row in found], [item[2] for item in expected])


def test_pixel_boxes_are_divided_by_the_images_own_size_or_dead_lettered(tmp_path):
    for name in ("a.jpg", "b.jpg", "e.jpg"):
        (tmp_path / name).write_bytes(encode(photo_like(100, 50, 0), "JPEG"))
    path = lines(
        tmp_path / "metadata.jsonl",
        {
            "file_name": "a.jpg",
            "objects": {"bbox": [[10, 5, 40, 20], [50, 0, 50, 50]], "categories": ["cat", "dog"]},
        },
        {"file_name": "b.jpg", "objects": {"bbox": [[90, 5, 40, 20]], "categories": ["cat"]}},
        {
            "file_name": "e.jpg",
            "width": 200,
            "height": 50,
            "objects": {"bbox": [[10, 5, 40, 20]], "categories": ["cat"]},
        },
        {"file_name": "c.jpg", "objects": {"bbox": [[1, 1, 2]], "categories": [0]}},
        {"file_name": "d.jpg", "objects": {"bbox": [[1, 1, 2, 2]], "categories": []}},
    )
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                f"train={path}",
                "--label_mode",
                "detection",
                "--output_dir",
                str(output),
                "--max_error_fraction",
                "0.7",
            ]
        )
        == 0
    )
    (example,) = read_examples(f"{output}/train-*.tfrecord")
    feature = example.features.feature
    np.testing.assert_allclose(
        [
            feature[f"image/object/bbox/{side}"].float_list.value
            for side in ("xmin", "ymin", "xmax", "ymax")
        ],
        [[0.1, 0.5], [0.1, 0.0], [0.5, 1.0], [0.5, 1.0]],
    )
    letters = [
        json.loads(line)
        for error in output.glob("errors-*.jsonl")
        for line in error.read_text().splitlines()
    ]
    assert sorted((letter["line"], letter["reason"]) for letter in letters) == [
        (2, reasons.BOX_OUT_OF_RANGE),
        (3, reasons.SIZE_MISMATCH),
        (4, reasons.INVALID_BOX),
        (5, reasons.MALFORMED_ROW),
    ]
    assert (
        "pixel coordinates 90.0,5.0,130.0,25.0 lie outside the 100x50 image"
        in [letter["message"] for letter in letters if letter["line"] == 2][0]
    )


def test_a_file_name_outside_the_metadatas_folder_is_a_dead_letter(tmp_path):
    """`file_name` stays in the metadata's folder (or --image_dir): `..` above it or an
    absolute path elsewhere is path_outside_dataset naming the line."""
    path = lines(
        tmp_path / "train" / "metadata.jsonl",
        {"file_name": "a.jpg", "label": "cat"},
        {"file_name": "../secret.jpg", "label": "cat"},
        {"file_name": "/etc/hostname", "label": "cat"},
    )
    found = rows(path, RowRules())
    assert [
        (row.line, row.reason) if not isinstance(row, ManifestRow) else row.uri for row in found
    ] == [
        str(tmp_path / "train" / "a.jpg"),
        (2, reasons.PATH_OUTSIDE_DATASET),
        (3, reasons.PATH_OUTSIDE_DATASET),
    ]
    assert found[1].message == (
        f"file_name '../secret.jpg' leaves the dataset's folder {tmp_path / 'train'}: pass "
        "--allow_paths_outside_dataset to read files outside it"
    )


def test_an_objects_imagefolder_without_detection_is_refused_naming_it(tmp_path, capsys):
    """The public metadata.jsonl holds objects and no label: given as --image_folder (or
    --manifest) without --label_mode detection, every row would be missing_label and the
    run would fail wanting TRAIN rows. It is refused before the job, naming the mode."""
    path = tmp_path / "data" / "train" / "metadata.jsonl"
    path.parent.mkdir(parents=True)
    shutil.copy(PUBLIC, path)
    for flag, given in (("--image_folder", tmp_path / "data"), ("--manifest", path)):
        code = run.main([flag, str(given), "--output_dir", str(tmp_path / "out")])
        error = capsys.readouterr().err
        assert code == run.EXIT_USAGE, error
        assert "holds objects (boxes) and no label or labels: pass --label_mode detection" in error
    csv_path = tmp_path / "csv" / "metadata.csv"
    csv_path.parent.mkdir()
    csv_path.write_text(
        'file_name,objects\na.jpg,"{""bbox"": [[1, 1, 2, 2]], ""category"": [0]}"\n'
    )
    with pytest.raises(ManifestError, match="pass --label_mode detection"):
        rows(csv_path, RowRules())
    assert len(rows(csv_path, DETECTION)) == 1
