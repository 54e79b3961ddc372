"""Apple Create ML object detection JSON (core/inputs/createml.py), laid out as Roboflow's
"CreateML JSON" export writes it: `<split>/_annotations.createml.json` beside the split's
images, each box its centre, width and height in pixels of the image's own size."""

import json

import numpy as np
import pytest
from conftest import encode, photo_like, read_examples

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
