"""Apple Create ML object detection JSON (core/inputs/createml.py), laid out as Roboflow's
"CreateML JSON" export writes it: `<split>/_annotations.createml.json` beside the split's
images, each box its centre, width and height in pixels of the image's own size."""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, photo_like, read_examples, row_accounting
from PIL import Image

from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import check_sources, find_manifests, read_source
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.pipeline import run

DETECTION = RowRules(label_mode="detection")
# As a public Roboflow export (impri2/CV-project, train/_annotations.createml.json) writes
# its entries: one per image, its objects' labels and pixel coordinates, x and y the centre.
TRAIN = [
    {
        "image": "board_jpg.rf.06d058407b83.jpg",
        "annotations": [
            {"label": "black-king", "coordinates": {"x": 40, "y": 30, "width": 20, "height": 12}},
            {"label": "white-pawn", "coordinates": {"x": 10, "y": 8, "width": 8, "height": 16}},
        ],
    },
    {"image": "empty_jpg.rf.0a8e65da4f29.jpg", "annotations": []},
    {
        "image": "edge_jpg.rf.02fcb1d459e5.jpg",
        "annotations": [
            {"label": "black-king", "coordinates": {"x": 2, "y": 20, "width": 10, "height": 4}},
            {"label": "white-pawn", "coordinates": {"x": 54, "y": 38, "width": 10, "height": 20}},
            {"label": "white-pawn", "coordinates": {"x": 30, "y": 20}},
        ],
    },
]
VALID = [
    {
        "image": "val_jpg.rf.0e119efea84f.jpg",
        "annotations": [
            {"label": "white-pawn", "coordinates": {"x": 32, "y": 24, "width": 64, "height": 48}}
        ],
    }
]


def export(root):
    """Roboflow's layout: a folder per split, each with its JSON and its 64x48 images."""
    for split, entries in (("train", TRAIN), ("valid", VALID)):
        folder = root / split
        folder.mkdir(parents=True)
        (folder / "_annotations.createml.json").write_text(json.dumps(entries, indent=4))
        for seed, entry in enumerate(entries):
            (folder / entry["image"]).write_bytes(encode(photo_like(64, 48, seed), "JPEG"))
    return [root / split / "_annotations.createml.json" for split in ("train", "valid")]


def test_each_annotation_is_a_box_in_pixels_its_split_the_folder(tmp_path):
    train, valid = export(tmp_path)
    sources = find_manifests([str(train), str(valid)])
    assert [source.format for source in sources] == ["createml", "createml"]
    check_sources(sources, DETECTION)
    found = [row for source in sources for row in read_source(source, DETECTION)]
    kept = [row for row in found if isinstance(row, ManifestRow)]
    assert [(row.split, row.line, row.labels) for row in kept] == [
        ("train", 1, ("black-king",)),
        ("train", 1, ("white-pawn",)),
        ("train", 2, ()),  # an image without objects
        ("train", 3, ("white-pawn",)),
        ("validation", 1, ("white-pawn",)),
    ]
    assert all(row.boxes_in_pixels for row in kept)
    np.testing.assert_allclose(kept[0].boxes[0][:4], (30, 24, 50, 36))
    dead = [row for row in found if isinstance(row, DeadLetter)]
    assert [(row.reason, row.message) for row in dead] == [
        (
            reasons.BOX_OUT_OF_RANGE,
            "image 3: annotation 0: the box {'x': 2, 'y': 20, 'width': 10, 'height': 4} (x, y "
            "its centre) starts outside the image",
        ),
        (
            reasons.INVALID_BOX,
            "image 3: annotation 2: coordinates must be {x, y, width, height} in pixels (x, y "
            "its centre), found {'x': 30, 'y': 20}",
        ),
    ]
    with pytest.raises(ManifestError, match="pass --label_mode detection"):
        check_sources(sources, RowRules())


def test_a_createml_export_converts_end_to_end(tmp_path):
    train, valid = export(tmp_path)
    output = tmp_path / "out"
    argv = ["--manifest", str(train), "--manifest", str(valid), "--label_mode", "detection"]
    assert run.main([*argv, "--max_error_fraction", "0.5", "--output_dir", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert (summary["rows_read"], summary["examples_written"], summary["rows_dead_lettered"]) == (
        7,
        4,
        2,
    )
    assert summary["splits"]["validation"]["labels"] == {"white-pawn": 1}
    (board,) = [
        example
        for example in read_examples(str(output / "train-*.tfrecord"))
        if example.features.feature["image/filename"].bytes_list.value[0].startswith(b"board")
    ]
    feature = board.features.feature
    np.testing.assert_allclose(
        [
            feature[f"image/object/bbox/{side}"].float_list.value[0]
            for side in ("xmin", "ymin", "xmax", "ymax")
        ],
        (30 / 64, 24 / 48, 50 / 64, 36 / 48),
        rtol=1e-6,
    )


PUBLIC = Path(__file__).parent / "data" / "public" / "createml"
# The sizes of dhshin04/EggsByTheDozen's images, which its public file's boxes were drawn on.
EGGS_SIZES = {
    "medium_test.jpeg": (1067, 800),
    "hard_test.jpeg": (758, 569),
    "MISC_TEST.jpg": (1920, 1200),
    "null_test.jpeg": (540, 360),
    "easy_test.png": (972, 675),
}


def test_a_public_createml_file_converts_each_box_divided_by_its_own_images_size(tmp_path):
    """dhshin04/EggsByTheDozen's _annotations.createml.json (one line, no newline at the
    end): five images of five sizes, a PNG among JPEGs, 78 `Barber` boxes whose centres and
    sides are floats such as 60.54999999999998, boxes reaching the image's edge
    (hard_test.jpeg's right and bottom, medium_test.jpeg's top), and an image without
    objects (`"annotations":[]`). Given as the train split, each box is divided by its own
    image's size (the file declares none): plain images of those sizes stand in for them."""
    manifest = tmp_path / "_annotations.createml.json"
    manifest.write_bytes((PUBLIC / "eggs_annotations.createml.json").read_bytes())
    entries = json.loads(manifest.read_text())
    assert [entry["image"] for entry in entries] == [
        "medium_test.jpeg",
        "hard_test.jpeg",
        "MISC_TEST.jpg",
        "null_test.jpeg",
        "easy_test.png",
    ]
    for seed, (name, size) in enumerate(EGGS_SIZES.items()):
        plain = Image.new("RGB", size, (40 * seed, 120, 200 - 30 * seed))
        (tmp_path / name).write_bytes(encode(plain, "PNG" if name.endswith(".png") else "JPEG"))
    output = tmp_path / "out"
    argv = ["--manifest", f"train={manifest}", "--label_mode", "detection"]
    assert run.main([*argv, "--output_dir", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert row_accounting(summary) == [79, 5, 79, 0, 0]  # 78 boxes and the image without any
    assert {split: summary["splits"][split]["examples"] for split in summary["splits"]} == {
        "train": 5,
        "validation": 0,
        "test": 0,
    }
    assert summary["splits"]["train"]["labels"] == {"Barber": 78}
    assert summary["vocabulary"]["label"] == ["Barber"]
    examples = {
        example.features.feature["image/filename"].bytes_list.value[0].decode(): (
            example.features.feature
        )
        for example in read_examples(str(output / "train-*.tfrecord"))
    }
    assert sorted(examples) == sorted(EGGS_SIZES)
    assert not examples["null_test.jpeg"]["image/object/bbox/xmin"].float_list.value
    easy = examples["easy_test.png"]
    assert list(easy["image/object/class/label"].int64_list.value) == [1, 1, 1]
    # {"x":345,"y":450,"width":126,"height":132}: x and y its centre, on a 972x675 image
    np.testing.assert_allclose(
        [
            easy[f"image/object/bbox/{side}"].float_list.value[0]
            for side in ("xmin", "ymin", "xmax", "ymax")
        ],
        (282 / 972, 384 / 675, 408 / 972, 516 / 675),
        rtol=1e-6,
    )
    hard = examples["hard_test.jpeg"]
    assert max(hard["image/object/bbox/xmax"].float_list.value) == pytest.approx(757.995 / 758)
    assert max(hard["image/object/bbox/ymax"].float_list.value) == 1.0
