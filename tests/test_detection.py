"""Object detection end to end: box rows grouped per image, Object Detection API output."""

import collections
import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from conftest import SAMPLE_DATA, encode, object_detection_spec, parse_label_map, photo_like, read_examples
from pipeline import run

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
    rows = [f"{split},img/{image},{label},{x0},{y0},,,{x1},{y1},," for split, image, label,
            (x0, y0, x1, y1) in BOXES]
    rows += [*BAD_ROWS, "TRAIN,img/c.jpg,,,,,,,,,"]  # c.jpg: an image without objects
    (root / "boxes.csv").write_text("\n".join(rows) + "\n")
    # A second manifest, in Vertex AI's format: g.jpg with two boxes.
    (root / "boxes.jsonl").write_text(json.dumps({
        "imageGcsUri": "img/g.jpg",
        "boundingBoxAnnotations": [
            {"displayName": "cat", "xMin": 0.05, "yMin": 0.1, "xMax": 0.45, "yMax": 0.9},
            {"displayName": "dog", "xMin": 0.5, "yMin": 0.1, "xMax": 0.95, "yMax": 0.9}],
        "dataItemResourceLabels": {"aiplatform.googleapis.com/ml_use": "training"}}) + "\n")
    output = root / "out"
    code = run.main(["--manifest", str(root / "boxes.csv"), "--manifest",
                     str(root / "boxes.jsonl"), "--output_dir", str(output),
                     "--label_mode", "detection", "--max_error_fraction", "0.5"])
    assert code == 0
    return root, output


def examples_by_image(output, split):
    spec = object_detection_spec()
    found = {}
    for example in read_examples(f"{output}/{split}-*.tfrecord"):
        parsed = {key: value.numpy() if not isinstance(value, tf.SparseTensor)
                  else tf.sparse.to_dense(value).numpy()
                  for key, value in tf.io.parse_single_example(
                      example.SerializeToString(), spec).items()}
        found[parsed["image/filename"].decode()] = parsed
    return found


def test_each_image_is_one_example_with_all_its_valid_boxes_in_row_order(detection_output):
    root, output = detection_output
    vocabulary = [w.decode() for w in tft.TFTransformOutput(str(output)).vocabulary_by_name(
        "label")]
    expected = collections.defaultdict(list)
    for split, image, label, box in BOXES:
        if image != "f.jpg":
            expected[(split.lower(), image)].append((label, box))
    expected[("train", "c.jpg")] = []
    expected[("train", "g.jpg")] = [("cat", (0.05, 0.1, 0.45, 0.9)),
                                    ("dog", (0.5, 0.1, 0.95, 0.9))]
    found = {(split, name): parsed for split in ("train", "validation", "test")
             for name, parsed in examples_by_image(output, split).items()}
    assert sorted(found) == sorted(expected)
    for key, objects in expected.items():
        parsed = found[key]
        texts = [t.decode() for t in parsed["image/object/class/text"]]
        assert texts == [label for label, _ in objects]
        assert parsed["image/object/class/label"].tolist() == [
            vocabulary.index(label) + 1 for label in texts]
        for side, values in zip(("xmin", "ymin", "xmax", "ymax"),
                                zip(*[box for _, box in objects]) if objects else [()] * 4):
            np.testing.assert_array_equal(parsed[f"image/object/bbox/{side}"],
                                          np.float32(values))
        image = tf.io.decode_image(parsed["image/encoded"]).numpy()
        assert image.shape == (48, 64, 3) == (parsed["image/height"], parsed["image/width"], 3)
        assert parsed["image/source_id"].decode() == str(root / "img" / key[1])


def test_label_map_matches_the_vocabulary_and_the_example_ids(detection_output):
    _, output = detection_output
    vocabulary = [w.decode() for w in tft.TFTransformOutput(str(output)).vocabulary_by_name(
        "label")]
    assert vocabulary == ["cat", "dog"]  # by TRAIN box frequency: 4 cats, 2 dogs
    assert parse_label_map((output / "label_map.pbtxt").read_text()) == {1: "cat", 2: "dog"}


def test_every_box_row_is_accounted_for(detection_output):
    root, output = detection_output
    summary = json.loads((output / "summary.json").read_text())
    csv_rows = len(BOXES) + len(BAD_ROWS) + 1
    assert summary["rows_read"] == csv_rows + 2
    assert summary["examples_written"] == 5  # a, b, c, g; d; nothing from f
    assert summary["rows_in_examples"] == len(BOXES) - 2 + 1 + 2
    assert summary["errors"]["by_reason"] == {
        "box_out_of_range": 1, "empty_box": 1, "unseen_label": 1, "file_not_found": 1,
        "truncated_image": 2}
    assert summary["accounted"] and summary["label_map"] == "label_map.pbtxt"
    assert summary["features"]["image/object/class/label"] == {"dtype": "int64", "list": True}
    assert summary["splits"]["train"]["labels"] == {"cat": 4, "dog": 2}  # objects
    dead = [json.loads(line) for line in (output / "errors-00000-of-00001.jsonl").open()]
    assert {(d["line"], d["reason"]) for d in dead if d["reason"] == "truncated_image"} == {
        (6, "truncated_image"), (7, "truncated_image")}
    assert {d["raw"]: d["reason"] for d in dead if d["line"] in (8, 9, 10, 11)} == BAD_ROWS


def test_image_folders_cannot_be_read_as_detection(tmp_path, capsys):
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "a.jpg").write_bytes(encode(photo_like(8, 8, 0), "JPEG"))
    assert run.main(["--image_folder", str(tmp_path), "--output_dir", str(tmp_path / "o"),
                     "--label_mode", "detection"]) == run.EXIT_USAGE
    assert "--label_mode detection needs a manifest of boxes" in capsys.readouterr().err


def test_the_bundled_detection_sample_converts(tmp_path):
    assert run.main(["--manifest", str(SAMPLE_DATA / "detection.csv"), "--output_dir",
                     str(tmp_path), "--label_mode", "detection",
                     "--max_error_fraction", "0.25"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["rows_read"], summary["rows_in_examples"], summary["examples_written"],
            summary["rows_dead_lettered"]) == (13, 11, 9, 2)
