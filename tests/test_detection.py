"""Object detection end to end: box rows grouped per image, Object Detection API output."""

import collections
import io
import json
import shutil
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from conftest import (
    SAMPLE_DATA,
    encode,
    object_detection_spec,
    parse_label_map,
    photo_like,
    read_examples,
    shard_pattern,
    voc_annotation,
)
from PIL import Image

from image_tfrecords import load
from image_tfrecords.core.inputs.rows import RowRules, assign_split
from image_tfrecords.output import Output
from image_tfrecords.pipeline import run
from image_tfrecords.verify import verify

# (split, image, label, box as x_min, y_min, x_max, y_max) per manifest row, in order.
BOXES = [
    ("TRAIN", "a.jpg", "cat", (0.1, 0.1, 0.4, 0.5)),
    ("TRAIN", "b.jpg", "cat", (0.0, 0.0, 1.0, 1.0)),
    ("TRAIN", "a.jpg", "dog", (0.5, 0.2, 0.9, 0.8)),
    ("TRAIN", "a.jpg", "cat", (1 / 3, 0.6, 2 / 3, 0.95)),
    ("VALIDATION", "d.jpg", "dog", (0.25, 0.25, 0.75, 0.75)),
    ("TEST", "f.jpg", "cat", (0.1, 0.2, 0.3, 0.4)),
    ("TEST", "f.jpg", "dog", (0.5, 0.6, 0.7, 0.8)),
]
BAD_ROWS = {  # row -> the reason it is dead-lettered
    "TRAIN,img/a.jpg,cat,0.2,0.2,,,1.2,0.5,,": "box_out_of_range",
    "TRAIN,img/b.jpg,dog,0.5,0.5,,,0.5,0.9,,": "empty_box",
    "VALIDATION,img/d.jpg,bird,0.1,0.1,,,0.2,0.2,,": "unseen_label",
    "TEST,img/missing.jpg,cat,0.1,0.1,,,0.2,0.2,,": "file_not_found",
}


@pytest.fixture(scope="module")
def detection_output(tmp_path_factory):
    root = tmp_path_factory.mktemp("detection")
    (root / "img").mkdir()
    for seed, name in enumerate(("a.jpg", "b.jpg", "c.jpg", "d.jpg", "g.jpg")):
        (root / "img" / name).write_bytes(encode(photo_like(64, 48, seed), "JPEG"))
    whole = encode(photo_like(64, 48, 9), "JPEG")
    (root / "img" / "f.jpg").write_bytes(whole[: len(whole) // 2])  # both its boxes go
    rows = [
        f"{split},img/{image},{label},{x0},{y0},,,{x1},{y1},,"
        for split, image, label, (x0, y0, x1, y1) in BOXES
    ]
    rows += [*BAD_ROWS, "TRAIN,img/c.jpg,,,,,,,,,"]  # c.jpg: an image without objects
    (root / "boxes.csv").write_text("\n".join(rows) + "\n")
    # A second manifest, in Vertex AI's format: g.jpg with two boxes.
    (root / "boxes.jsonl").write_text(
        json.dumps(
            {
                "imageGcsUri": "img/g.jpg",
                "boundingBoxAnnotations": [
                    {"displayName": "cat", "xMin": 0.05, "yMin": 0.1, "xMax": 0.45, "yMax": 0.9},
                    {"displayName": "dog", "xMin": 0.5, "yMin": 0.1, "xMax": 0.95, "yMax": 0.9},
                ],
                "dataItemResourceLabels": {"aiplatform.googleapis.com/ml_use": "training"},
            }
        )
        + "\n"
    )
    output = root / "out"
    code = run.main(
        [
            "--manifest",
            str(root / "boxes.csv"),
            "--manifest",
            str(root / "boxes.jsonl"),
            "--output_dir",
            str(output),
            "--label_mode",
            "detection",
            "--max_error_fraction",
            "0.5",
        ]
    )
    assert code == 0
    return root, output


def examples_by_image(output, split):
    spec = object_detection_spec()
    found = {}
    for example in read_examples(f"{output}/{split}-*.tfrecord"):
        parsed = {
            key: value.numpy()
            if not isinstance(value, tf.SparseTensor)
            else tf.sparse.to_dense(value).numpy()
            for key, value in tf.io.parse_single_example(example.SerializeToString(), spec).items()
        }
        found[parsed["image/filename"].decode()] = parsed
    return found


def test_each_image_is_one_example_with_all_its_valid_boxes_in_row_order(detection_output):
    root, output = detection_output
    vocabulary = [
        w.decode() for w in tft.TFTransformOutput(str(output)).vocabulary_by_name("label")
    ]
    expected = collections.defaultdict(list)
    for split, image, label, box in BOXES:
        if image != "f.jpg":
            expected[(split.lower(), image)].append((label, box))
    expected[("train", "c.jpg")] = []
    expected[("train", "g.jpg")] = [("cat", (0.05, 0.1, 0.45, 0.9)), ("dog", (0.5, 0.1, 0.95, 0.9))]
    found = {
        (split, name): parsed
        for split in ("train", "validation", "test")
        for name, parsed in examples_by_image(output, split).items()
    }
    assert sorted(found) == sorted(expected)
    for key, objects in expected.items():
        parsed = found[key]
        texts = [t.decode() for t in parsed["image/object/class/text"]]
        assert texts == [label for label, _ in objects]
        assert parsed["image/object/class/label"].tolist() == [
            vocabulary.index(label) + 1 for label in texts
        ]
        for side, values in zip(
            ("xmin", "ymin", "xmax", "ymax"),
            zip(*[box for _, box in objects]) if objects else [()] * 4,
        ):
            np.testing.assert_array_equal(parsed[f"image/object/bbox/{side}"], np.float32(values))
        image = tf.io.decode_image(parsed["image/encoded"]).numpy()
        assert image.shape == (48, 64, 3) == (parsed["image/height"], parsed["image/width"], 3)
        assert parsed["image/source_id"].decode() == str(root / "img" / key[1])


def test_label_map_matches_the_vocabulary_and_the_example_ids(detection_output):
    _, output = detection_output
    vocabulary = [
        w.decode() for w in tft.TFTransformOutput(str(output)).vocabulary_by_name("label")
    ]
    assert vocabulary == ["cat", "dog"]  # sorted
    assert parse_label_map((output / "label_map.pbtxt").read_text()) == {1: "cat", 2: "dog"}


def test_every_box_row_is_accounted_for(detection_output):
    root, output = detection_output
    summary = json.loads((output / "summary.json").read_text())
    csv_rows = len(BOXES) + len(BAD_ROWS) + 1
    assert summary["rows_read"] == csv_rows + 2
    assert summary["examples_written"] == 5  # a, b, c, g; d; nothing from f
    assert summary["rows_in_examples"] == len(BOXES) - 2 + 1 + 2
    assert summary["errors"]["by_reason"] == {
        "box_out_of_range": 1,
        "empty_box": 1,
        "unseen_label": 1,
        "file_not_found": 1,
        "truncated_image": 2,
    }
    assert summary["accounted"] and summary["label_map"] == "label_map.pbtxt"
    assert summary["features"]["image/object/class/label"] == {"dtype": "int64", "list": True}
    assert summary["splits"]["train"]["labels"] == {"cat": 4, "dog": 2}  # objects
    dead = [json.loads(line) for line in (output / "errors-00000-of-00001.jsonl").open()]
    assert {(d["line"], d["reason"]) for d in dead if d["reason"] == "truncated_image"} == {
        (6, "truncated_image"),
        (7, "truncated_image"),
    }
    assert {d["raw"]: d["reason"] for d in dead if d["line"] in (8, 9, 10, 11)} == BAD_ROWS


def test_image_folders_cannot_be_read_as_detection(tmp_path, capsys):
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "a.jpg").write_bytes(encode(photo_like(8, 8, 0), "JPEG"))
    assert (
        run.main(
            [
                "--image_folder",
                str(tmp_path),
                "--output_dir",
                str(tmp_path / "o"),
                "--label_mode",
                "detection",
            ]
        )
        == run.EXIT_USAGE
    )
    assert "--label_mode detection needs a manifest of boxes" in capsys.readouterr().err


def test_the_bundled_detection_sample_converts(tmp_path):
    assert (
        run.main(
            [
                "--manifest",
                str(SAMPLE_DATA / "detection.csv"),
                "--output_dir",
                str(tmp_path),
                "--label_mode",
                "detection",
                "--max_error_fraction",
                "0.25",
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (
        summary["rows_read"],
        summary["rows_in_examples"],
        summary["examples_written"],
        summary["rows_dead_lettered"],
    ) == (13, 11, 9, 2)


# The Object Detection API's own CSV pair (xml_to_csv.py's columns, boxes in pixels), its
# images in a separate folder, as its tutorial lays a project out.
API_IMAGES = {
    "a.jpg": (96, 64),
    "b.jpg": (64, 80),
    "c.jpg": (80, 60),
    "d.jpg": (96, 64),
    "e.jpg": (64, 48),
}
API_ROWS = {
    "train": [
        ("a.jpg", "cat", (10, 5, 50, 60)),
        ("a.jpg", "dog", (40, 0, 96, 64)),
        ("b.jpg", "dog", (3, 7, 61, 77)),
        ("c.jpg", "cat", (0, 0, 33, 21)),
        ("e.jpg", "cat", (1, 1, 30, 30)),
    ],
    "test": [("d.jpg", "cat", (17, 11, 95, 63)), ("d.jpg", "cat", (1, 2, 3, 4))],
}
DECLARED = {"e.jpg": (96, 64)}  # what the CSV says instead of the real 64x48


def reference_tf_example(group, image_dir, class_text_to_int):
    """What the Object Detection API tutorial's generate_tfrecord.py writes for one image
    (its create_tf_example, re-implemented): pixel / PIL's size, class ids from a map."""
    from PIL import Image as PILImage

    encoded = (image_dir / group.filename).read_bytes()
    width, height = PILImage.open(io.BytesIO(encoded)).size
    rows = [row for _, row in group.object.iterrows()]

    def floats(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    def strings(values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "image/height": ints([height]),
                "image/width": ints([width]),
                "image/filename": strings([group.filename.encode()]),
                "image/source_id": strings([group.filename.encode()]),
                "image/encoded": strings([encoded]),
                "image/format": strings([b"jpg"]),
                "image/object/bbox/xmin": floats([row["xmin"] / width for row in rows]),
                "image/object/bbox/xmax": floats([row["xmax"] / width for row in rows]),
                "image/object/bbox/ymin": floats([row["ymin"] / height for row in rows]),
                "image/object/bbox/ymax": floats([row["ymax"] / height for row in rows]),
                "image/object/class/text": strings([row["class"].encode() for row in rows]),
                "image/object/class/label": ints([class_text_to_int(row["class"]) for row in rows]),
            }
        )
    )


def reference_examples(csv_path, image_dir, class_text_to_int):
    import pandas as pd

    frame = pd.read_csv(csv_path)
    grouped = frame.groupby("filename")
    return {
        filename: reference_tf_example(
            collections.namedtuple("data", ["filename", "object"])(
                filename, grouped.get_group(filename)
            ),
            image_dir,
            class_text_to_int,
        )
        for filename in grouped.groups
    }


def test_object_detection_api_csv_pair_matches_generate_tfrecord(tmp_path):
    images, annotations = tmp_path / "images", tmp_path / "annotations"
    images.mkdir()
    annotations.mkdir()
    for seed, (name, size) in enumerate(API_IMAGES.items()):
        (images / name).write_bytes(encode(photo_like(*size, seed), "JPEG"))
    for split, rows in API_ROWS.items():
        lines = ["filename,width,height,class,xmin,ymin,xmax,ymax"] + [
            ",".join(map(str, (name, *DECLARED.get(name, API_IMAGES[name]), label, *box)))
            for name, label, box in rows
        ]
        (annotations / f"{split}_labels.csv").write_text("\n".join(lines) + "\n")
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                f"train={annotations / 'train_labels.csv'}",
                "--manifest",
                f"TEST={annotations / 'test_labels.csv'}",
                "--image_dir",
                str(images),
                "--output_dir",
                str(output),
                "--label_mode",
                "detection",
                "--max_error_fraction",
                "0.2",
            ]
        )
        == 0
    )

    label_ids = {
        name: label_id
        for label_id, name in parse_label_map((output / "label_map.pbtxt").read_text()).items()
    }
    for split in API_ROWS:
        ours = {
            parsed["image/filename"][0].decode(): parsed
            for parsed in map(parse_example, read_examples(f"{output}/{split}-*.tfrecord"))
        }
        expected = reference_examples(
            annotations / f"{split}_labels.csv", images, label_ids.__getitem__
        )
        expected.pop("e.jpg", None)  # its declared size is wrong: dead-lettered below
        assert sorted(ours) == sorted(expected)
        for name, reference in expected.items():
            mine = ours[name]
            assert set(reference.features.feature) <= set(mine)
            for key, feature in reference.features.feature.items():
                if key in ("image/source_id", "image/format"):  # the path; "jpeg"
                    continue
                kind = feature.WhichOneof("kind")
                values = list(getattr(feature, kind).value)
                if kind == "float_list":  # both float32 of the same float64 quotient
                    np.testing.assert_allclose(mine[key], values, rtol=1e-7)
                else:
                    assert mine[key].tolist() == values, key
            objects = len(mine["image/object/class/text"])
            for flag in ("difficult", "truncated", "is_crowd"):
                assert mine[f"image/object/{flag}"].tolist() == [0] * objects

    summary = json.loads((output / "summary.json").read_text())
    assert (
        summary["rows_read"],
        summary["rows_in_examples"],
        summary["examples_written"],
        summary["errors"]["by_reason"],
    ) == (7, 6, 4, {"size_mismatch": 1})
    assert set(summary["splits"]) >= {"train", "test"} and summary["accounted"]
    assert summary["manifests"] == [
        f"TEST={annotations / 'test_labels.csv'}",
        f"TRAIN={annotations / 'train_labels.csv'}",
    ]
    (dead,) = [json.loads(line) for line in (output / "errors-00000-of-00001.jsonl").open()]
    assert (dead["uri"], dead["reason"]) == (str(images / "e.jpg"), "size_mismatch")
    assert "declares a 96x64 image but the image is 64x48 pixels" in dead["message"]


def parse_example(example):
    """Every feature of a tf.train.Example as a numpy array of its values."""
    return {
        key: np.array(getattr(feature, feature.WhichOneof("kind")).value)
        for key, feature in example.features.feature.items()
    }


def test_voc_devkit_labelimg_and_coco_convert_together_with_the_same_keys(tmp_path):
    devkit = tmp_path / "VOCdevkit" / "VOC2007"
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (devkit / folder).mkdir(parents=True)
    voc = {
        "000001": [("dog", (8, 4, 40, 30), 0, 0), ("person", (0, 0, 64, 48), 1, 0)],
        "000002": [("cat", (0, 10, 20, 48), 0, 1)],
        "000003": [("dog", (1, 1, 9, 9), 0, 0)],
        "000004": [("cat", (1, 1, 9, 9), 0, 0)],
    }  # in no ImageSets list: left out
    for seed, (image_id, objects) in enumerate(voc.items()):
        (devkit / "JPEGImages" / f"{image_id}.jpg").write_bytes(
            encode(photo_like(64, 48, seed), "JPEG")
        )
        (devkit / "Annotations" / f"{image_id}.xml").write_text(
            voc_annotation(f"{image_id}.jpg", (64, 48), objects)
        )
    (devkit / "ImageSets/Main/train.txt").write_text("000001\n000002\n")
    (devkit / "ImageSets/Main/val.txt").write_text("000003\n")
    labelimg = tmp_path / "labelimg"  # labelImg: each XML beside its image
    labelimg.mkdir()
    (labelimg / "x.jpg").write_bytes(encode(photo_like(40, 30, 7), "JPEG"))
    (labelimg / "x.xml").write_text(
        voc_annotation("x.jpg", (40, 30), [("cat", (4, 3, 36, 27), 0, 0)])
    )
    coco = tmp_path / "coco"
    (coco / "images").mkdir(parents=True)
    for seed, name in enumerate(("p.jpg", "q.jpg"), start=8):
        (coco / "images" / name).write_bytes(encode(photo_like(50, 40, seed), "JPEG"))
    (coco / "instances_val.json").write_text(
        json.dumps(
            {
                "info": {"description": "test"},
                "licenses": [],
                "images": [
                    {"id": 5, "file_name": "images/p.jpg", "width": 50, "height": 40},
                    {"id": 6, "file_name": "images/q.jpg", "width": 50, "height": 40},
                ],
                "annotations": [
                    {
                        "id": 1,
                        "image_id": 5,
                        "category_id": 1,
                        "bbox": [5, 4, 20, 16],
                        "iscrowd": 0,
                        "area": 320,
                        "segmentation": [[5, 4, 25, 4, 25, 20]],
                    },
                    {
                        "id": 2,
                        "image_id": 5,
                        "category_id": 2,
                        "bbox": [0, 0, 50, 40],
                        "iscrowd": 1,
                        "area": 2000,
                        "segmentation": {"counts": [0, 2000], "size": [40, 50]},
                    },
                    {"id": 3, "image_id": 5, "category_id": 7, "bbox": [1, 1, 5, 5], "iscrowd": 0},
                ],
                "categories": [
                    {"id": 1, "name": "dog", "supercategory": "animal"},
                    {"id": 2, "name": "person", "supercategory": "person"},
                ],
            },
            indent=1,
        )
    )
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                str(devkit),
                "--manifest",
                f"train={labelimg}",
                "--leave_out",
                "masks",
                "--manifest",
                f"val={coco / 'instances_val.json'}",
                "--output_dir",
                str(output),
                "--label_mode",
                "detection",
                "--max_error_fraction",
                "0.2",
            ]
        )
        == 0
    )

    found = {
        (split, name): parsed
        for split in ("train", "validation")
        for name, parsed in examples_by_image(output, split).items()
    }
    assert sorted(found) == [
        ("train", "000001.jpg"),
        ("train", "000002.jpg"),
        ("train", "x.jpg"),
        ("validation", "000003.jpg"),
        ("validation", "p.jpg"),
        ("validation", "q.jpg"),
    ]
    names = parse_label_map((output / "label_map.pbtxt").read_text())
    objects = {
        key: [
            (names[label], *flags)
            for label, *flags in zip(
                parsed["image/object/class/label"],
                parsed["image/object/difficult"],
                parsed["image/object/truncated"],
                parsed["image/object/is_crowd"],
            )
        ]
        for key, parsed in found.items()
    }
    assert objects == {  # (label, difficult, truncated, is_crowd) per object
        ("train", "000001.jpg"): [("dog", 0, 0, 0), ("person", 1, 0, 0)],
        ("train", "000002.jpg"): [("cat", 0, 1, 0)],
        ("train", "x.jpg"): [("cat", 0, 0, 0)],
        ("validation", "000003.jpg"): [("dog", 0, 0, 0)],
        ("validation", "p.jpg"): [("dog", 0, 0, 0), ("person", 0, 0, 1)],
        ("validation", "q.jpg"): [],
    }
    p = found[("validation", "p.jpg")]
    np.testing.assert_array_equal(
        np.stack([p[f"image/object/bbox/{side}"] for side in ("xmin", "ymin", "xmax", "ymax")]),
        np.float32([[5 / 50, 0], [4 / 40, 0], [25 / 50, 1], [20 / 40, 1]]),
    )
    assert found[("train", "x.jpg")]["image/source_id"].decode() == str(labelimg / "x.jpg")
    serialized = [
        example
        for split in ("train", "validation")
        for example in read_examples(f"{output}/{split}-*.tfrecord")
    ]
    assert {frozenset(example.features.feature) for example in serialized} == {
        frozenset(json.loads((output / "summary.json").read_text())["features"])
    }
    summary = json.loads((output / "summary.json").read_text())
    assert (
        summary["rows_read"],
        summary["rows_in_examples"],
        summary["examples_written"],
        summary["errors"]["by_reason"],
    ) == (9, 8, 6, {"unknown_category_id": 1})
    (dead,) = [json.loads(line) for line in (output / "errors-00000-of-00001.jsonl").open()]
    assert dead["message"].startswith("annotation id 3: category_id 7")


def test_the_bundled_api_csv_voc_and_coco_samples_convert_in_one_run(tmp_path):
    """The README's examples: sample_data/detection/, images under sample_data/images."""
    samples = SAMPLE_DATA / "detection"
    assert (
        run.main(
            [
                "--manifest",
                f"train={samples / 'api' / 'train_labels.csv'}",
                "--manifest",
                f"test={samples / 'api' / 'test_labels.csv'}",
                "--manifest",
                str(samples / "voc" / "VOC2007"),
                "--manifest",
                f"val={samples / 'coco' / 'instances.json'}",
                "--image_dir",
                str(SAMPLE_DATA / "images"),
                "--output_dir",
                str(tmp_path),
                "--label_mode",
                "detection",
                "--max_error_fraction",
                "0.1",
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (
        summary["rows_read"],
        summary["rows_in_examples"],
        summary["examples_written"],
        summary["errors"]["by_reason"],
    ) == (16, 15, 12, {"size_mismatch": 1})
    assert {split: stats["examples"] for split, stats in summary["splits"].items()} == {
        "train": 7,
        "validation": 4,
        "test": 1,
    }
    assert sorted(parse_label_map((tmp_path / "label_map.pbtxt").read_text()).values()) == [
        "cat",
        "cup",
        "flower",
        "saucer",
    ]


def test_the_coco_label_map_pins_the_apis_own_ids_through_to_the_published_map(tmp_path):
    """--vocabulary mscoco_label_map.pbtxt (tensorflow/models) over a COCO file: each
    object's class/label is the map's id (stop sign 13, past the gap at 12), its text the
    display name; label_map.pbtxt lists the map's 80 items under their own ids, and
    verify and load() read the output back."""
    label_map = Path(__file__).parent / "data" / "public" / "label_maps" / "mscoco_label_map.pbtxt"
    for seed, name in enumerate(("a.jpg", "b.jpg")):
        (tmp_path / name).write_bytes(encode(photo_like(50, 40, seed), "JPEG"))
    coco = tmp_path / "instances_val2017.json"
    coco.write_text(
        json.dumps(
            {
                "images": [
                    {"id": 1, "file_name": "a.jpg", "width": 50, "height": 40},
                    {"id": 2, "file_name": "b.jpg", "width": 50, "height": 40},
                ],
                "annotations": [
                    {"id": 1, "image_id": 1, "category_id": 1, "bbox": [5, 4, 20, 16]},
                    {"id": 2, "image_id": 1, "category_id": 13, "bbox": [25, 4, 20, 16]},
                    {"id": 3, "image_id": 2, "category_id": 90, "bbox": [0, 0, 50, 40]},
                ],
                "categories": [
                    {"id": 1, "name": "person"},
                    {"id": 13, "name": "stop sign"},
                    {"id": 90, "name": "toothbrush"},
                ],
            }
        )
    )
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                f"validation={coco}",
                "--vocabulary",
                str(label_map),
                "--label_mode",
                "detection",
                "--output_dir",
                str(output),
            ]
        )
        == 0
    )
    found = examples_by_image(output, "validation")
    assert [list(found[name]["image/object/class/label"]) for name in ("a.jpg", "b.jpg")] == [
        [1, 13],
        [90],
    ]
    published = parse_label_map((output / "label_map.pbtxt").read_text())
    assert len(published) == 80 and 12 not in published
    assert (published[1], published[13], published[90]) == ("person", "stop sign", "toothbrush")
    verify(str(output))
    vocabulary = Output.read(str(output)).vocabulary
    assert (len(vocabulary), vocabulary[0], vocabulary[12], vocabulary[89]) == (
        90,
        "person",
        "stop sign",
        "toothbrush",
    )
    (b,) = [
        element
        for element in load(str(output), "validation", batch_size=None)
        if element["image/filename"] == b"b.jpg"
    ]
    assert list(b["image/object/class/label"].numpy()) == [90]


def test_coco_images_without_a_declared_size_are_read_against_their_own(tmp_path, capsys):
    """fastai's COCO_TINY (train.json) gives each image only `file_name` and `id`: each
    box is divided by the image's own size, as datumaro reads it, and the console says so
    once. Half a size is an error; masks, drawn on the declared size, need one."""
    images = {"a.jpg": (64, 48), "b.jpg": (40, 80), "c.jpg": (32, 32), "d.jpg": (32, 32)}
    for seed, (name, size) in enumerate(images.items()):
        (tmp_path / name).write_bytes(encode(photo_like(*size, seed), "JPEG"))
    coco = {
        "categories": [{"id": 1, "name": "chair"}, {"id": 2, "name": "vase"}],
        "images": [
            {"file_name": "a.jpg", "id": 1},
            {"file_name": "b.jpg", "id": 2},
            {"file_name": "c.jpg", "id": 3, "width": 32},
            {"file_name": "d.jpg", "id": 4},
        ],
        "annotations": [
            {"image_id": 1, "bbox": [16, 12, 32, 24], "category_id": 1, "id": 1},
            {"image_id": 2, "bbox": [0, 40, 40, 40], "category_id": 2, "id": 2},
            {"image_id": 2, "bbox": [0, 0, 50, 10], "category_id": 1, "id": 3},
            {"image_id": 3, "bbox": [0, 0, 8, 8], "category_id": 1, "id": 4},
            {
                "image_id": 4,
                "bbox": [0, 0, 8, 8],
                "category_id": 1,
                "id": 5,
                "segmentation": [[0, 0, 8, 0, 8, 8]],
            },
        ],
    }
    (tmp_path / "train.json").write_text(json.dumps(coco))
    output = tmp_path / "out"
    argv = ["--manifest", f"train={tmp_path / 'train.json'}", "--label_mode", "detection"]
    assert run.main([*argv, "--output_dir", str(output), "--max_error_fraction", "1"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("declare no width and height") == 1
    (a, b) = sorted(
        read_examples(str(output / "train-*.tfrecord")),
        key=lambda example: example.features.feature["image/filename"].bytes_list.value[0],
    )
    for example, expected in ((a, [0.25, 0.25, 0.75, 0.75]), (b, [0.0, 0.5, 1.0, 1.0])):
        boxes = example.features.feature
        written = [
            boxes[f"image/object/bbox/{side}"].float_list.value[0]
            for side in ("xmin", "ymin", "xmax", "ymax")
        ]
        np.testing.assert_allclose(written, expected, atol=1e-6)
    errors = [
        json.loads(line)
        for path in output.glob("errors-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert sorted((error["reason"], error["message"]) for error in errors) == [
        ("box_out_of_range", "pixel coordinates 0.0,0.0,50.0,10.0 lie outside the 40x80 image"),
        (
            "invalid_size",
            "annotation id 4: image id 3: the declared image width and height must be "
            "positive whole numbers of pixels, found 32 x None",
        ),
        (
            "invalid_size",
            "annotation id 5: its image declares no width and height, and its segmentation "
            "is drawn on the declared size: add them to the image entry, or pass --leave_out "
            "masks",
        ),
    ]


def test_cvats_pascal_voc_export_reads_its_labelmap_and_splits_default_by_hash(tmp_path):
    """A real CVAT "Pascal VOC 1.1" export (Motlante/mmdet_zavtrak_test, 2022): its folder
    is no VOC2007 but holds Annotations/, so it is a VOC dataset; its labelmap.txt
    (`# label:color_rgb:parts:actions`, background first) declares the four classes, named
    in Cyrillic, in its order; ImageSets/Main/default.txt is CVAT's `default` subset, no
    split, so every image is written, in the split its file name hashes to. Each XML's
    empty <depth> and the <attributes> CVAT writes in each <object> change nothing."""
    export = tmp_path / "export"
    shutil.copytree(Path(__file__).parent / "data" / "public" / "voc" / "cvat_pascal_voc", export)
    (export / "JPEGImages").mkdir()
    splits = {}
    for number, path in enumerate(sorted((export / "Annotations").glob("*.xml"))):
        annotation = ElementTree.parse(path).getroot()
        name = annotation.findtext("filename")
        size = int(annotation.findtext("size/width")), int(annotation.findtext("size/height"))
        (export / "JPEGImages" / name).write_bytes(
            encode(Image.new("RGB", size, (number * 10, 90, 160)), "JPEG")
        )
        splits[name.encode()] = assign_split(name, RowRules().split_fractions)
    assert len(splits) == 18 and collections.Counter(splits.values()) == {
        "train": 15,
        "validation": 3,
    }
    output = tmp_path / "out"
    argv = ["--manifest", str(export), "--label_mode", "detection", "--output_dir", str(output)]
    assert run.main(argv) == 0
    summary = json.loads((output / "summary.json").read_text())
    classes = ["Кесадилья с курицей", "Поднос", "Салфетки", "Тарелка"]
    assert summary["vocabulary"]["label"] == classes
    assert summary["vocabulary_declared_by"] == str(export / "labelmap.txt")
    assert (
        summary["rows_read"],
        summary["rows_in_examples"],
        summary["examples_written"],
        summary["rows_dead_lettered"],
        summary["rows_discarded"],
    ) == (18 * 4, 18 * 4, 18, 0, 0)
    assert summary["splits"]["train"]["labels"] == dict.fromkeys(classes, 15)
    written = {
        example.features.feature["image/filename"].bytes_list.value[0]: (
            split,
            example.features.feature,
        )
        for split in ("train", "validation")
        for example in read_examples(shard_pattern(output, split))
    }
    assert {name: split for name, (split, _) in written.items()} == splits
    _, first = written[b"photo_2022-03-20_15-48-44.jpg"]  # 576x1280
    assert [text.decode() for text in first["image/object/class/text"].bytes_list.value] == classes
    assert first["image/object/class/label"].int64_list.value == [1, 2, 3, 4]
    sides = ("xmin", "ymin", "xmax", "ymax")
    np.testing.assert_allclose(
        [first[f"image/object/bbox/{side}"].float_list.value[0] for side in sides],
        (87.5 / 576, 437.7 / 1280, 374.9 / 576, 678.1 / 1280),
        rtol=1e-6,
    )
