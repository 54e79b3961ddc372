"""keras-retinanet's CSV (core/inputs/retinanet_csv.py), as its README gives it and
Roboflow's "RetinaNet Keras CSV" export lays it out: `<split>/_annotations.csv` (no header,
path,x1,y1,x2,y2,class_name in pixels; path,,,,, an image without objects) beside
`_classes.csv` (class_name,id), which declares the ids."""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, photo_like, read_examples, row_accounting

from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import (
    check_sources,
    class_declarations,
    find_manifests,
    read_source,
)
from image_tfrecords.pipeline import run

DETECTION = RowRules(label_mode="detection")
# keras-retinanet's README example, its images 64x48 here and relative to the CSV.
ANNOTATIONS = (
    "imgs/img_001.jpg,37,16,61,36,cow\n"
    "imgs/img_002.jpg,15,12,29,31,cat\n"
    "imgs/img_002.jpg,22,5,39,24,bird\n"
    "imgs/img_003.jpg,,,,,\n"
    "imgs/img_004.jpg,20,10,90,30,cat\n"
)
CLASSES = "cow,0\ncat,1\nbird,2\n"


def export(root, split="train"):
    folder = root / split
    for seed, name in enumerate(("img_001", "img_002", "img_003", "img_004")):
        (folder / "imgs").mkdir(parents=True, exist_ok=True)
        (folder / "imgs" / f"{name}.jpg").write_bytes(encode(photo_like(64, 48, seed), "JPEG"))
    (folder / "_annotations.csv").write_text(ANNOTATIONS)
    (folder / "_classes.csv").write_text(CLASSES)
    return folder / "_annotations.csv"


def test_each_line_is_a_box_in_pixels_and_the_class_file_declares_the_ids(tmp_path):
    path = export(tmp_path)
    sources = find_manifests([str(path)])
    assert [source.format for source in sources] == ["retinanet_csv"]
    check_sources(sources, DETECTION)
    (declared,) = class_declarations(sources)
    assert declared.labels == ("cow", "cat", "bird")
    found = list(read_source(sources[0], DETECTION))
    assert [(row.line, row.split, row.labels) for row in found] == [
        (1, "train", ("cow",)),
        (2, "train", ("cat",)),
        (3, "train", ("bird",)),
        (4, "train", ()),
        (5, "train", ("cat",)),
    ]
    assert all(row.boxes_in_pixels for row in found)
    np.testing.assert_allclose(found[0].boxes[0][:4], (37, 16, 61, 36))
    with pytest.raises(ManifestError, match="pass --label_mode detection"):
        check_sources(sources, RowRules())
    # A header, or four fields, is not this format's.
    (tmp_path / "other.csv").write_text("image_uri,label\na.jpg,cat\n")
    assert [s.format for s in find_manifests([str(tmp_path / "other.csv")])] == ["csv"]


def test_a_retinanet_export_converts_end_to_end_with_its_declared_ids(tmp_path):
    path = export(tmp_path)
    output = tmp_path / "out"
    argv = ["--manifest", str(path), "--label_mode", "detection", "--max_error_fraction", "0.5"]
    assert run.main([*argv, "--output_dir", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert (summary["rows_read"], summary["examples_written"]) == (5, 3)
    assert summary["errors"]["by_reason"] == {"box_out_of_range": 1}  # 90 past 64 pixels
    assert summary["vocabulary"]["label"] == ["cow", "cat", "bird"]
    (two,) = [
        example
        for example in read_examples(str(output / "train-*.tfrecord"))
        if example.features.feature["image/filename"].bytes_list.value[0] == b"img_002.jpg"
    ]
    feature = two.features.feature
    assert list(feature["image/object/class/label"].int64_list.value) == [2, 3]
    np.testing.assert_allclose(
        feature["image/object/bbox/xmin"].float_list.value, (15 / 64, 22 / 64), rtol=1e-6
    )


def test_a_class_file_that_is_not_one_is_refused_naming_its_line(tmp_path):
    path = export(tmp_path)
    (tmp_path / "train" / "_classes.csv").write_text("cow,0\ncat\n")
    with pytest.raises(ManifestError, match=r"_classes.csv line 2: expected class_name,id"):
        class_declarations(find_manifests([str(path)]))


PUBLIC = Path(__file__).parent / "data" / "public" / "retinanet_csv"


def test_a_public_keras_retinanet_csv_converts_with_its_class_file(tmp_path):
    """DavidReveloLuna/HandDetectRetinaNet's annotations_test.csv and classes.csv, made for
    keras-retinanet's `retinanet-train csv annotations.csv classes.csv`: 47 lines such as
    `images/116.png,35,18,197,212,left`, PNG paths relative to the CSV, no header, and one
    class (`left,0`, which declares id 0). Its images are 224x224 PNGs; the folder names no
    split, so each image's split is hashed from its path."""
    for name in ("annotations_test.csv", "classes.csv"):
        (tmp_path / name).write_bytes((PUBLIC / name).read_bytes())
    lines = (tmp_path / "annotations_test.csv").read_text().splitlines()
    assert len(lines) == 47 and lines[0] == "images/116.png,35,18,197,212,left"
    (tmp_path / "images").mkdir()
    for seed, line in enumerate(lines):
        (tmp_path / line.split(",")[0]).write_bytes(encode(photo_like(224, 224, seed), "PNG"))
    output = tmp_path / "out"
    argv = ["--manifest", str(tmp_path / "annotations_test.csv"), "--label_mode", "detection"]
    assert run.main([*argv, "--output_dir", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert row_accounting(summary) == [47, 47, 47, 0, 0]
    splits = summary["splits"]
    assert sum(split["examples"] for split in splits.values()) == 47
    assert splits["train"]["examples"] > 0
    assert all(
        split["labels"] == {"left": split["examples"]}
        for split in splits.values()
        if split["examples"]
    )
    assert summary["vocabulary"]["label"] == ["left"]
    assert summary["vocabulary_declared_by"] == str(tmp_path / "classes.csv")
    (first,) = [
        example.features.feature
        for example in read_examples(str(output / "*-*.tfrecord"))
        if example.features.feature["image/filename"].bytes_list.value[0] == b"116.png"
    ]
    assert list(first["image/object/class/label"].int64_list.value) == [1]
    np.testing.assert_allclose(
        [
            first[f"image/object/bbox/{side}"].float_list.value[0]
            for side in ("xmin", "ymin", "xmax", "ymax")
        ],
        (35 / 224, 18 / 224, 197 / 224, 212 / 224),
        rtol=1e-6,
    )
