"""Ultralytics YOLO datasets (core/inputs/yolo.py): data.yaml's forms, boxes as
Ultralytics converts them, polygons as masks and pose lines as keypoints, hostile label
lines, and a YOLO folder never mistaken for an image folder."""

import json
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, parse_label_map, photo_like, read_examples, row_accounting

from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import check_sources, find_manifests, read_source
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import Keypoints, ManifestRow, Mask
from image_tfrecords.pipeline import run
from image_tfrecords.pipeline.options import ConvertOptions

DETECTION = RowRules(label_mode="detection")
# Ultralytics' own YAMLs name a root outside their folder (`path: ../datasets/coco8`).
OUTSIDE_ALLOWED = RowRules(label_mode="detection", allow_paths_outside_dataset=True)


def image(path, seed=0, size=(64, 48)):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(photo_like(*size, seed), "JPEG"))


def text(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(content).lstrip())
    return path


def ultralytics_layout(root, labels):
    """root/images/<split>/<name>.jpg and root/labels/<split>/<name>.txt, as coco8 is laid
    out; `labels`: {(split, name): label file text or None for no label file}."""
    for seed, ((split, name), content) in enumerate(labels.items()):
        image(root / "images" / split / f"{name}.jpg", seed)
        if content is not None:
            text(root / "labels" / split / f"{name}.txt", content)
    return root


def rows(path, rules=DETECTION, split=None, checked=True):
    """The rows of the dataset, after the launcher's checks unless `checked` is False (as
    for a line past what the checks read)."""
    (source,) = find_manifests([f"{split}={path}" if split else str(path)])
    assert source.format == "yolo"
    if checked:
        check_sources([source], rules)
    return list(read_source(source, rules))


def xyxy(cx, cy, w, h):
    """Ultralytics' xywhn2xyxy, on normalised values (ultralytics/utils/ops.py)."""
    return (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)


def test_a_coco8_style_dataset_reads_boxes_as_ultralytics_converts_them(tmp_path):
    root = ultralytics_layout(
        tmp_path / "coco8",
        {
            ("train", "a"): "0 0.5 0.5 0.5 0.4\n45 0.25 0.75 0.1 0.2\n",
            ("train", "b"): "",  # an empty label file: no objects
            ("train", "c"): None,  # no label file: no objects
            ("val", "d"): "1 0.9 0.1 0.2 0.2\n",
        },
    )
    names = {
        0: "person",
        1: "bicycle",
        **{index: f"c{index}" for index in range(2, 45)},
        45: "bowl",
    }
    yaml = text(
        root / "coco8.yaml",
        textwrap.dedent("""
        # Ultralytics coco8.yaml's form: a root, folders, names as a dict
        path: .
        train: images/train
        val: images/val
        test:  # optional
        names:
    """)
        + "".join(f"  {index}: {name}\n" for index, name in names.items()),
    )
    found = rows(yaml)
    assert all(isinstance(row, ManifestRow) for row in found), found
    by_image = {}
    for row in found:
        by_image.setdefault((row.split, row.uri.rsplit("/", 1)[-1]), []).append(row)
    assert sorted(by_image) == [
        ("train", "a.jpg"),
        ("train", "b.jpg"),
        ("train", "c.jpg"),
        ("validation", "d.jpg"),
    ]
    a = by_image[("train", "a.jpg")]
    assert [(row.labels, row.line) for row in a] == [(("person",), 1), (("bowl",), 2)]
    np.testing.assert_allclose(a[0].boxes[0][:4], xyxy(0.5, 0.5, 0.5, 0.4))
    np.testing.assert_allclose(a[1].boxes[0][:4], xyxy(0.25, 0.75, 0.1, 0.2))
    assert a[0].manifest == str(root / "labels" / "train" / "a.txt")
    assert [row.boxes for row in by_image[("train", "b.jpg")] + by_image[("train", "c.jpg")]] == [
        (),
        (),
    ]
    np.testing.assert_allclose(
        by_image[("validation", "d.jpg")][0].boxes[0][:4], xyxy(0.9, 0.1, 0.2, 0.2)
    )
    # SPLIT=PATH reads that split's entry alone; one the YAML lacks is refused.
    assert {row.split for row in rows(yaml, split="val")} == {"validation"}
    with pytest.raises(ManifestError, match="has no 'test' entry"):
        rows(yaml, split="test")


def test_roboflow_exports_names_lists_and_txt_lists_of_images(tmp_path):
    """Roboflow writes `train: ../train/images` beside the YAML (found, as Ultralytics
    finds it, without the ../); a split may be a .txt list (./ relative to it, or
    absolute: outside the YAML's folder, with --allow_paths_outside_dataset) or a list
    of entries."""
    export = tmp_path / "export"
    image(export / "train" / "images" / "x.jpg")
    text(export / "train" / "labels" / "x.txt", "1 0.5 0.5 0.2 0.2\n")
    image(export / "valid" / "images" / "y.jpg", 1)
    image(tmp_path / "elsewhere" / "images" / "z.jpg", 2)
    text(tmp_path / "elsewhere" / "labels" / "z.txt", "0 0.5 0.5 1 1\n")
    text(export / "test.txt", f"./valid/images/y.jpg\n{tmp_path}/elsewhere/images/z.jpg\n")
    yaml = text(
        export / "data.yaml",
        """
        train: ../train/images
        val: [../valid/images]
        test: test.txt
        nc: 2
        names: ['Helmet', 'No Helmet']
    """,
    )
    found = {(row.split, row.uri.rsplit("/", 1)[-1]): row for row in rows(yaml, OUTSIDE_ALLOWED)}
    assert {key: row.labels for key, row in found.items()} == {
        ("train", "x.jpg"): ("No Helmet",),
        ("validation", "y.jpg"): (),
        ("test", "y.jpg"): (),
        ("test", "z.jpg"): ("Helmet",),
    }
    np.testing.assert_allclose(found[("test", "z.jpg")].boxes[0][:4], (0, 0, 1, 1))


@pytest.mark.parametrize(
    "line, reason, message",
    [
        ("0 0.5 0.5 0.2", reasons.WRONG_COLUMN_COUNT, "expected class cx cy w h"),
        ("0 0.5 0.5 0.2 0.2 0.3", reasons.WRONG_COLUMN_COUNT, "found 6"),
        ("0 0.3 0.3 0.2 0.2", None, None),  # the control: a good line
        ("dog 0.5 0.5 0.2 0.2", reasons.MALFORMED_ROW, "not a number"),
        ("0 nan 0.5 0.2 0.2", reasons.MALFORMED_ROW, "not a finite number"),
        ("2 0.5 0.5 0.2 0.2", reasons.UNKNOWN_CATEGORY_ID, "class 2 is not one of the 2 classes"),
        ("-1 0.5 0.5 0.2 0.2", reasons.UNKNOWN_CATEGORY_ID, "class -1"),
        ("0.5 0.5 0.5 0.2 0.2", reasons.UNKNOWN_CATEGORY_ID, "class 0.5"),
        (
            "0 1.5 0.5 0.2 0.2",
            reasons.BOX_OUT_OF_RANGE,
            "reaches outside the image by more than 1% of its side: corners 1.4, 0.4, 1.6, 0.6",
        ),
        ("0 0.05 0.5 0.5 0.2", reasons.BOX_OUT_OF_RANGE, "reaches outside the image"),
        ("0 0.095 0.5 0.2 0.2", None, None),  # 0.005 outside: clipped, as Ultralytics does
        ("0 -0.005 0.1 0.5 0.1 0.5 0.6 -0.005 0.6", None, None),  # an OBB's corners, likewise
        # Farther out, as Ultralytics checks a polygon: by its extent's centre and size.
        ("0 -0.3 0.1 0.5 0.1 0.5 0.6 -0.3 0.6", None, None),
        (
            "0 10 20 300 20 300 200 10 200",  # pixels, not normalised
            reasons.BOX_OUT_OF_RANGE,
            "the polygon's extent lies outside the image (its centre or size past 1% of its "
            "side beyond it): coordinates must be normalised to the image size, between 0 and "
            "1, found 300",
        ),
        ("0 0.5 0.5 0 0.2", reasons.EMPTY_BOX, "no width"),
        ("0 0.1 0.1 0.2 0.2 0.3 0.1 0.4", reasons.WRONG_COLUMN_COUNT, "found 8"),
        ("0 0.1 0.1 0.2 0.2", reasons.DUPLICATE_ROW, "the same object as line 1"),
    ],
)
def test_each_bad_label_line_is_a_dead_letter_naming_its_file_and_line(
    line, reason, message, tmp_path
):
    """Line 1 is always good; the line under test is line 2, read as if the launcher's
    look for polygons had not reached it."""
    root = ultralytics_layout(tmp_path, {("train", "a"): f"0 0.1 0.1 0.2 0.2\n{line}\n"})
    yaml = text(root / "data.yaml", "train: images/train\nnames: [cat, dog]\n")
    found = rows(yaml, checked=False)
    if reason is None:
        assert all(isinstance(row, ManifestRow) for row in found)
        return
    (dead,) = [row for row in found if isinstance(row, DeadLetter)]
    assert (dead.reason, dead.manifest, dead.line, dead.raw) == (
        reason,
        str(root / "labels" / "train" / "a.txt"),
        2,
        line,
    )
    assert message in dead.message


def test_obb_corners_and_polygon_points_just_outside_the_image_are_clipped(tmp_path):
    """Ultralytics' dota8 has OBB corners a little outside [0, 1] (17 of its 133 objects);
    its verify_image_label accepts coordinates 1% outside and Instances.clip clips boxes and
    segments to the image: the box and the mask here are of the clipped corners."""
    root = ultralytics_layout(
        tmp_path,
        {
            ("train", "a"): (
                "0 -0.004 0.1 0.5 0.1 0.5 0.6 -0.004 0.6\n"
                "0 0.3 0.2 1.008 0.25 0.9 1.01 0.31 0.9\n"
                "0 0.5 0.5 1.01 0.2\n"
            )
        },
    )
    yaml = text(root / "dota8.yaml", "train: images/train\nnames: [plane]\n")
    obb, polygon, box = rows(yaml)
    np.testing.assert_allclose(obb.boxes[0][:4], (0, 0.1, 0.5, 0.6))
    assert obb.boxes[0].mask == Mask(1.0, 1.0, ((0, 0.1, 0.5, 0.1, 0.5, 0.6, 0, 0.6),))
    np.testing.assert_allclose(polygon.boxes[0][:4], (0.3, 0.2, 1, 1))
    assert polygon.boxes[0].mask.polygons == ((0.3, 0.2, 1, 0.25, 0.9, 1, 0.31, 0.9),)
    np.testing.assert_allclose(box.boxes[0][:4], (0, 0.4, 1, 0.6))


def test_obb_corners_outside_the_image_are_clipped_counted_and_their_images_kept(tmp_path, capsys):
    """As Ultralytics reads dota8 (17 of its 133 objects have corners outside [0, 1], some
    by more than 1%): a turned box at the edge, whose extent's centre and size are on the
    image, is clipped to it and counted in summary.json's objects_clipped; only corners in
    pixels, not normalised, are box_out_of_range."""
    root = ultralytics_layout(
        tmp_path,
        {
            ("train", "a"): (
                "0 -0.06 0.3 0.2 0.1 0.35 0.5 0.1 0.7\n"  # a turned box over the left edge
                "0 0.6 0.6 0.8 0.6 0.8 0.8 0.6 0.8\n"  # inside
            ),
            (
                "train",
                "b",
            ): "0 0.2 0.2 0.4 0.2 0.4 0.4 0.2 0.4\n1 0.7 0.8 0.9 0.9 0.8 1.04 0.6 0.95\n",
            ("train", "c"): "1 10 20 300 20 300 200 10 200\n0 0.1 0.1 0.3 0.1 0.3 0.3 0.1 0.3\n",
        },
    )
    yaml = text(root / "data.yaml", "train: images/train\nnames: [plane, ship]\n")
    output = tmp_path / "out"
    argv = ["--manifest", str(yaml), "--label_mode", "detection", "--max_error_fraction", "0.5"]
    assert run.main([*argv, "--output_dir", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert summary["objects_clipped"] == 2
    assert summary["errors"]["by_reason"] == {"box_out_of_range": 1}
    assert (summary["rows_read"], summary["examples_written"]) == (6, 3)
    assert "objects clipped to the image" in capsys.readouterr().out
    (edge,) = [
        example
        for example in read_examples(str(output / "train-*.tfrecord"))
        if example.features.feature["image/filename"].bytes_list.value[0] == b"a.jpg"
    ]
    xmin = edge.features.feature["image/object/bbox/xmin"].float_list.value
    assert sorted(xmin) == [0.0, pytest.approx(0.6)]


def test_polygons_of_fewer_than_three_points_and_duplicated_images_are_dead_letters(tmp_path):
    root = ultralytics_layout(tmp_path, {("train", "a"): "0 0.1 0.1 0.2 0.2\n0 0.1 0.1\n"})
    text(root / "train.txt", "./images/train/a.jpg\n./images/train/a.jpg\n")
    yaml = text(root / "data.yaml", "train: train.txt\nnames: [cat]\n")
    found = rows(yaml)
    dead = [(row.reason, row.line) for row in found if isinstance(row, DeadLetter)]
    assert dead == [(reasons.WRONG_COLUMN_COUNT, 2), (reasons.DUPLICATE_ROW, 0)]
    assert (
        "a polygon needs at least 3 points (class x1 y1 x2 y2 x3 y3), found 1" in found[1].message
    )


def test_polygons_are_masks_and_pose_lines_keypoints_unless_left_out(tmp_path):
    """A polygon's box is its points' extent (Ultralytics' segments2boxes) and the polygon
    its mask; a pose line's box is its first four fields and the rest its keypoints, named
    by the YAML's kpt_names. --leave_out keeps the boxes alone."""
    seg = ultralytics_layout(
        tmp_path / "seg", {("train", "a"): "0 0.1 0.2 0.5 0.25 0.3 0.7 0.15 0.6\n"}
    )
    yaml = text(seg / "coco8-seg.yaml", "path: .\ntrain: images/train\nnames: {0: person}\n")
    (row,) = rows(yaml)
    np.testing.assert_allclose(row.boxes[0][:4], (0.1, 0.2, 0.5, 0.7))
    assert row.boxes[0].mask == Mask(1.0, 1.0, ((0.1, 0.2, 0.5, 0.25, 0.3, 0.7, 0.15, 0.6),))
    (row,) = rows(yaml, RowRules(label_mode="detection", leave_out={"masks"}))
    assert row.boxes[0].mask is None
    pose = ultralytics_layout(
        tmp_path / "pose", {("train", "a"): "0 0.5 0.5 0.4 0.6 0.4 0.3 2 0 0 0 0.6 0.35 1\n"}
    )
    yaml = text(
        pose / "hand.yaml",
        "train: images/train\nkpt_shape: [3, 3]\n"
        "names: {0: hand}\nkpt_names: {0: [wrist, thumb, index]}\n",
    )
    (row,) = rows(yaml)
    np.testing.assert_allclose(row.boxes[0][:4], xyxy(0.5, 0.5, 0.4, 0.6))
    assert row.boxes[0].keypoints == Keypoints(
        (0.4, 0.0, 0.6), (0.3, 0.0, 0.35), (2, 0, 1), ("wrist", "thumb", "index")
    )
    (row,) = rows(yaml, RowRules(label_mode="detection", leave_out={"keypoints"}))
    assert row.boxes[0].keypoints is None
    two_dimensions = text(
        pose / "xy.yaml", "train: images/train\nkpt_shape: [2, 2]\nnames: [hand]\n"
    )
    text(pose / "labels" / "train" / "a.txt", "0 0.5 0.5 0.4 0.6 0.4 0.3 -1 -1\n")
    (row,) = rows(two_dimensions)
    assert row.boxes[0].keypoints.visibility == (2, 0)  # negative: unlabelled, as Ultralytics


@pytest.mark.parametrize(
    "points, message",
    [
        ("0.4 0.3 3 0 0 0", "keypoint 1's visibility is 3"),
        ("0.4 1.3 2 0 0 0", "keypoint 1 (0.4, 1.3) is outside the image"),
        ("0 0 0 0.4 -0.1 1", "keypoint 2 (0.4, -0.1) is outside the image"),
    ],
)
def test_bad_keypoints_are_dead_letters(points, message, tmp_path):
    pose = ultralytics_layout(tmp_path, {("train", "a"): f"0 0.5 0.5 0.4 0.6 {points}\n"})
    yaml = text(pose / "pose.yaml", "train: images/train\nkpt_shape: [2, 3]\nnames: [a]\n")
    (dead,) = rows(yaml)
    assert (dead.reason, dead.line) == (reasons.INVALID_KEYPOINTS, 1)
    assert message in dead.message


@pytest.mark.parametrize(
    "content, problem",
    [
        ("train: images/train\n", "has no 'names'"),
        ("train: images/train\nnames: [a, b]\nnc: 3\n", "nc is 3 but 'names' holds 2"),
        ("train: images/train\nnames: {0: a, 2: b}\n", "keys must be the class ids 0 to 1"),
        ("train: images/train\nnames: [a, a]\n", "non-empty and distinct"),
        ("train: images/nowhere\nnames: [a]\n", "'images/nowhere' is neither a folder"),
        ("names: [a]\n", "names no split"),
        ("train: [images/train\n", "cannot parse the YAML"),
        ("train: images/train\nnames: [a]\nkpt_shape: [17]\n", "kpt_shape must be"),
    ],
)
def test_a_data_yaml_that_cannot_be_read_is_refused_in_one_line(content, problem, tmp_path, capsys):
    root = ultralytics_layout(tmp_path, {("train", "a"): "0 0.5 0.5 0.2 0.2\n"})
    yaml = text(root / "data.yaml", content)
    assert (
        run.main(
            [
                "--manifest",
                str(yaml),
                "--label_mode",
                "detection",
                "--output_dir",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and problem in line


def test_a_yolo_folder_given_as_an_image_folder_is_refused(tmp_path, capsys):
    """It used to become a one-class classifier of the class `images`, labels ignored.
    Without a file naming its classes the refusal says how to name them; with a data.yaml
    it names that file."""
    root = ultralytics_layout(tmp_path / "ds", {("train", "a"): "0 0.5 0.5 0.2 0.2\n"})
    for folder in (root, root / "images", root / "images" / "train"):
        assert run.main(["--image_folder", str(folder), "--output_dir", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert "is a YOLO dataset" in err and f"write classes.txt in {root}" in err
    text(root / "coco8.yaml", "train: images/train\nnames: [a]\n")
    for folder in (root, root / "images", root / "images" / "train"):
        assert run.main(["--image_folder", str(folder), "--output_dir", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert f"--manifest {root / 'coco8.yaml'} --label_mode detection" in err


def test_a_yolo_dataset_converts_end_to_end_with_the_object_detection_api_keys(tmp_path):
    root = ultralytics_layout(
        tmp_path / "ds",
        {
            ("train", "a"): "0 0.5 0.5 0.5 0.4\n1 0.25 0.75 0.1 0.2\n",
            ("train", "b"): None,
            ("val", "c"): "1 0.5 0.5 1 1\n",
        },
    )
    yaml = text(
        root / "data.yaml", "path: .\ntrain: images/train\nval: images/val\nnames: [cat, dog]\n"
    )
    output = tmp_path / "out"
    assert (
        run.main(
            ["--manifest", str(yaml), "--label_mode", "detection", "--output_dir", str(output)]
        )
        == 0
    )
    summary = json.loads((output / "summary.json").read_text())
    assert (summary["rows_read"], summary["examples_written"]) == (4, 3)
    names = parse_label_map((output / "label_map.pbtxt").read_text())
    (a,) = [
        example
        for example in read_examples(f"{output}/train-*.tfrecord")
        if example.features.feature["image/filename"].bytes_list.value[0] == b"a.jpg"
    ]
    feature = a.features.feature
    assert [names[label] for label in feature["image/object/class/label"].int64_list.value] == [
        "cat",
        "dog",
    ]
    np.testing.assert_array_equal(
        [
            feature[f"image/object/bbox/{side}"].float_list.value
            for side in ("xmin", "ymin", "xmax", "ymax")
        ],
        np.float32(np.transpose([xyxy(0.5, 0.5, 0.5, 0.4), xyxy(0.25, 0.75, 0.1, 0.2)])),
    )


PUBLIC = Path(__file__).parent / "data" / "public" / "yolo"
# The sizes of the coco128 images the public labels were drawn on.
COCO128_SIZES = {
    "000000000030": (640, 428),
    "000000000049": (381, 500),
    "000000000074": (640, 426),
    "000000000077": (500, 375),
}


def public_dataset(root, yaml_name, labels, images_at, labels_at, sizes=None):
    """Ultralytics' own YAML and public label files, laid out where the YAML says, with
    JPEGs of the labels' image sizes (made here: the images are not kept)."""
    shutil.copy(PUBLIC / "yaml" / yaml_name, root / yaml_name)
    for index, label in enumerate(sorted((PUBLIC / labels).glob("*.txt"))):
        shutil.copy(
            label,
            (root / labels_at).mkdir(parents=True, exist_ok=True) or root / labels_at / label.name,
        )
        image(
            root / images_at / f"{label.stem}.jpg", index, (sizes or {}).get(label.stem, (64, 48))
        )
    return root / yaml_name


def test_ultralytics_coco128_yaml_and_labels_read_as_ultralytics_reads_them(tmp_path):
    """coco128.yaml (path: ../datasets/coco128; val is the train folder) over four of its
    real label files: every line one box, xywhn2xyxy of its fields, its class named by
    the YAML; each image in both splits, as Ultralytics trains and validates on it."""
    (tmp_path / "ultralytics").mkdir()
    yaml = public_dataset(
        tmp_path / "ultralytics",
        "coco128.yaml",
        "detect",
        "../datasets/coco128/images/train2017",
        "../datasets/coco128/labels/train2017",
        COCO128_SIZES,
    )
    found = rows(yaml, OUTSIDE_ALLOWED)
    assert all(isinstance(row, ManifestRow) for row in found), found
    names = __import__("yaml").safe_load(yaml.read_text())["names"]
    expected = []
    for split in ("train", "validation"):
        for label in sorted((PUBLIC / "detect").glob("*.txt")):
            for line in label.read_text().splitlines():
                class_id, *box = line.split()
                expected.append(
                    (split, f"{label.stem}.jpg", names[int(class_id)], xyxy(*map(float, box)))
                )
    assert len(expected) == 2 * 27
    assert [(row.split, row.uri.rsplit("/", 1)[-1], row.labels[0]) for row in found] == [
        item[:3] for item in expected
    ]
    np.testing.assert_allclose(
        [row.boxes[0][:4] for row in found], [item[3] for item in expected], atol=1e-12
    )
    assert ("train", "000000000030.jpg", "potted plant") == expected[0][:3]


def test_public_segmentation_pose_and_obb_labels_convert_boxes_masks_and_keypoints(tmp_path):
    """A polygon's box is its points' extent and the polygon its mask; a pose line's box
    is its first four fields, and the rest its keypoints (x, y, visibility each)."""
    cases = [("dota8.yaml", "obb", "dota8", 27), ("coco8-pose.yaml", "pose", "coco8-pose", 5)]
    for yaml_name, labels, root, lines in cases:
        yaml = public_dataset(
            tmp_path, yaml_name, labels, f"{root}/images/train", f"{root}/labels/train"
        )
        image(tmp_path / root / "images" / "val" / "unlabelled.jpg")  # no objects
        found = rows(yaml)
        boxes = [row for row in found if row.boxes]
        assert (len(found), len(boxes)) == (lines + 1, lines), (yaml_name, found)
        for row in boxes:
            line = (
                (PUBLIC / labels / Path(row.manifest).name).read_text().splitlines()[row.line - 1]
            )
            values = [float(value) for value in line.split()[1:]]
            (box,) = row.boxes
            if labels == "pose":
                np.testing.assert_allclose(box[:4], xyxy(*values[:4]), atol=1e-12)
                assert box.keypoints == Keypoints(
                    tuple(values[4::3]), tuple(values[5::3]), tuple(map(int, values[6::3]))
                )
            else:
                np.testing.assert_allclose(
                    box[:4],
                    (min(values[0::2]), min(values[1::2]), max(values[0::2]), max(values[1::2])),
                    atol=1e-12,
                )
                assert box.mask == Mask(1.0, 1.0, (tuple(values),))


def test_real_world_yamls_a_roboflow_export_and_a_names_dict_keyed_by_coco_ids(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    yaml = export / "data.yaml"
    shutil.copy(PUBLIC / "yaml" / "007Aurick_data.yaml", yaml)
    ultralytics_layout(export / "train", {})
    image(export / "train" / "images" / "scan.jpg")
    text(export / "train" / "labels" / "scan.txt", "1 0.4 0.5 0.2 0.3\n0 0.7 0.5 0.1 0.1\n")
    image(export / "valid" / "images" / "v.jpg")
    image(export / "test" / "images" / "t.jpg")
    found = rows(yaml)
    assert [(row.split, row.labels) for row in found] == [
        ("train", ("tumor",)),
        ("train", ("1",)),
        ("validation", ()),
        ("test", ()),
    ]
    segmentation = tmp_path / "seg" / "config.yaml"
    segmentation.parent.mkdir()
    shutil.copy(PUBLIC / "yaml" / "lightly-ai_instance_segmentation_config.yaml", segmentation)
    ultralytics_layout(
        segmentation.parent,
        {("train2017", "a"): "1 0.1 0.1 0.2 0.1 0.2 0.2\n", ("val2017", "b"): None},
    )
    with pytest.raises(
        ManifestError,
        match="'names' keys must be the class ids 0 to 79, "
        r"found \[1, 2, 3",
    ):
        rows(segmentation)


def test_a_path_that_is_not_beside_the_yaml_is_read_from_the_current_directory(
    tmp_path, monkeypatch, caplog
):
    """Ultralytics' own YAMLs (ultralytics/cfg/datasets/coco8.yaml: `path:
    ../datasets/coco8`) mean the current directory, as check_det_dataset reads `path`: run
    from the repository, the dataset is its sibling datasets/coco8. The YAML's folder is
    looked at first, and the console says where the root was found."""
    ultralytics_layout(tmp_path / "datasets" / "coco8", {("train", "a"): "0 0.5 0.5 0.2 0.2\n"})
    yaml = text(
        tmp_path / "ultralytics" / "cfg" / "datasets" / "coco8.yaml",
        """
        path: ../datasets/coco8 # dataset root dir
        train: images/train
        names:
          0: person
        """,
    )
    monkeypatch.chdir(tmp_path / "ultralytics")
    (row,) = rows(yaml.relative_to(tmp_path / "ultralytics"), OUTSIDE_ALLOWED)
    assert (row.uri, row.labels) == (
        str(tmp_path / "datasets/coco8/images/train/a.jpg"),
        ("person",),
    )
    assert (
        f"read from the current directory, as Ultralytics reads it: {tmp_path}"
        "/datasets/coco8" in caplog.text
    )


def test_a_root_or_split_entry_outside_the_yamls_folder_is_refused_naming_the_option(tmp_path):
    """`path: /`, a `path` elsewhere, or a split entry (a folder, or a .txt list, which
    could be any text file) found only outside the YAML's folder: refused before the job,
    naming the YAML and --allow_paths_outside_dataset, which reads them."""
    elsewhere = ultralytics_layout(tmp_path / "elsewhere", {("train", "a"): "0 0.5 0.5 0.2 0.2\n"})
    text(elsewhere / "list.txt", "images/train/a.jpg\n")
    dataset = tmp_path / "dataset"
    for entries in (
        "path: /\ntrain: tmp\n",
        f"path: {elsewhere}\ntrain: images/train\n",
        "train: ../elsewhere/list.txt\n",
        f"train: {elsewhere}/images/train\n",
    ):
        yaml = text(dataset / "data.yaml", entries + "names: [a]\n")
        with pytest.raises(ManifestError) as refused:
            rows(yaml)
        assert str(refused.value).startswith(f"{yaml}: ")
        assert "pass --allow_paths_outside_dataset" in str(refused.value)
        if "elsewhere" in entries:
            assert [row.labels for row in rows(yaml, OUTSIDE_ALLOWED)] == [("a",)]


def test_list_lines_and_links_leading_out_of_the_yamls_folder_are_dead_letters(tmp_path):
    """A .txt list's line naming an image outside the YAML's folder is
    path_outside_dataset, naming the list and the line and quoting at most 200 characters
    of it; so is an image, or a label file, that is a link leading out."""
    secret = tmp_path / "secret.jpg"
    image(secret)
    text(tmp_path / "secret.txt", "0 0.5 0.5 0.2 0.2\n")
    root = ultralytics_layout(
        tmp_path / "dataset",
        {("train", "a"): "0 0.5 0.5 0.2 0.2\n", ("val", "b"): None, ("val", "c"): None},
    )
    (root / "images" / "val" / "link.jpg").symlink_to(secret)
    (root / "labels" / "val").mkdir(parents=True)
    (root / "labels" / "val" / "c.txt").symlink_to(tmp_path / "secret.txt")
    long = "../" * 4000 + "x.jpg"
    text(root / "train.txt", f"./images/train/a.jpg\n{secret}\n../secret.jpg\n{long}\n")
    yaml = text(root / "data.yaml", "train: train.txt\nval: images/val\nnames: [a]\n")
    found = rows(yaml)
    outside = reasons.PATH_OUTSIDE_DATASET
    assert [
        (Path(row.manifest).name, row.line, row.split, row.reason)
        if isinstance(row, DeadLetter)
        else (row.split, Path(row.uri).name)
        for row in found
    ] == [
        ("train", "a.jpg"),
        ("train.txt", 2, "train", outside),
        ("train.txt", 3, "train", outside),
        ("train.txt", 4, "train", outside),
        ("validation", "b.jpg"),
        ("data.yaml", 0, "validation", outside),
        ("data.yaml", 0, "validation", outside),
    ]
    assert found[1].message == (
        f"the image {str(secret)!r} leaves the dataset's folder "
        f"{root}: pass --allow_paths_outside_dataset to read files "
        "outside it"
    )
    assert len(found[3].message) < 400 + len(str(root))
    assert "(12,005 characters)" in found[3].message
    assert found[5].message.startswith("the label file 'labels/val/c.txt' leaves")
    assert found[6].message.startswith("the image 'images/val/link.jpg' leaves")


def test_the_command_refuses_a_root_elsewhere_and_the_option_reaches_the_reader(tmp_path, capsys):
    elsewhere = ultralytics_layout(tmp_path / "elsewhere", {("train", "a"): None})
    yaml = text(
        tmp_path / "dataset" / "data.yaml", f"path: {elsewhere}\ntrain: images/train\nnames: [a]\n"
    )
    assert (
        run.main(
            [
                "--manifest",
                str(yaml),
                "--label_mode",
                "detection",
                "--output_dir",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert f"{yaml}: path {str(elsewhere)!r} leaves the YAML's folder" in capsys.readouterr().err
    for flags in (["--allow_paths_outside_dataset"], ["--allow_paths_outside_dataset=true"]):
        assert ConvertOptions(flags).row_rules().allow_paths_outside_dataset
    assert not ConvertOptions([]).row_rules().allow_paths_outside_dataset


def test_a_labels_folder_or_label_file_given_as_a_manifest_names_the_yaml_to_pass(tmp_path):
    """Read as a manifest, every `class cx cy w h` line was a dead letter pointing
    elsewhere: a part of a YOLO dataset is refused before the job, naming YOLO and the
    dataset's data.yaml (or where it would be)."""
    public = Path(__file__).parent / "data" / "public" / "yolo" / "detect"
    labels = tmp_path / "ds" / "labels" / "train"
    shutil.copytree(public, labels)
    first = sorted(labels.iterdir())[0]
    given = [labels.parent, labels, first, labels / "*.txt"]
    for path in given:
        with pytest.raises(
            ManifestError, match=r"YOLO label file.*--manifest .*ds/data\.yaml \(or"
        ):
            find_manifests([str(path)])
    text(tmp_path / "ds" / "data.yaml", "train: images/train\nnames: [person, bicycle]\n")
    for path in given:
        with pytest.raises(ManifestError) as refused:
            find_manifests([f"train={path}"])
        assert (
            f"pass --manifest {tmp_path / 'ds' / 'data.yaml'}, with --label_mode detection"
            in str(refused.value)
        )
    # A manifest that only looks like one: read as the CSV it is.
    (tmp_path / "list.txt").write_text("split,image_uri,label\ntrain,a.jpg,cat\n")
    assert [source.format for source in find_manifests([str(tmp_path / "list.txt")])] == ["csv"]


@pytest.mark.parametrize(
    ("obj_data", "listed"),
    [
        # CVAT's YOLO 1.1 export: darknet keeps it as data/.
        (
            "classes = 2\ntrain = data/train.txt\nvalid = data/valid.txt\nnames = data/obj.names\n"
            "backup = backup/\n",
            {
                "train": "data/obj_train_data/a.jpg\ndata/obj_train_data/b.jpg\n",
                "valid": "data/obj_valid_data/c.jpg\n",
            },
        ),
        # The obj.data and train.txt of openvinotoolkit/training_extensions' YOLO test
        # asset (Apache-2.0), as written: the dataset's own folder name in their paths.
        (
            "classes = 10\ntrain = yolo_dataset/train.txt\nnames = yolo_dataset/obj.names\n"
            "backup = backup/\n",
            {"train": "yolo_dataset/obj_train_data/a.jpg\nyolo_dataset/obj_train_data/b.jpg\n"},
        ),
    ],
)
def test_a_darknet_obj_data_cvats_yolo_1_1_export_is_read_with_its_names_and_lists(
    obj_data, listed, tmp_path, capsys
):
    root = tmp_path / "yolo_dataset"
    text(root / "obj.data", obj_data)
    text(root / "obj.names", "cat\ndog\n")
    labels = {"a": "0 0.5 0.5 0.2 0.2\n", "b": "1 0.25 0.25 0.1 0.1\n0 0.7 0.7 0.2 0.2\n", "c": ""}
    for split, lines in listed.items():
        text(root / f"{split}.txt", lines)
        for line in lines.split():
            name = line.rsplit("/", 1)[-1].removesuffix(".jpg")
            folder = root / line.split("/", 1)[1].rsplit("/", 1)[0]
            image(folder / f"{name}.jpg")
            text(folder / f"{name}.txt", labels[name] or "\n")
    for given in (root / "obj.data", root):
        (source,) = find_manifests([str(given)])
        assert source.format == "yolo" and source.path.endswith("obj.data")
        found = list(read_source(source, DETECTION))
        assert [(row.split, row.uri.rsplit("/", 1)[-1], row.labels) for row in found] == [
            ("train", "a.jpg", ("cat",)),
            ("train", "b.jpg", ("dog",)),
            ("train", "b.jpg", ("cat",)),
            *([("validation", "c.jpg", ())] if "valid" in listed else []),
        ]
        np.testing.assert_allclose(found[0].boxes[0][:4], (0.4, 0.4, 0.6, 0.6))
    output = tmp_path / "out"
    assert (
        run.main(
            ["--manifest", str(root), "--label_mode", "detection", "--output_dir", str(output)]
        )
        == 0
    )
    assert "as a darknet YOLO dataset" in capsys.readouterr().out
    summary = json.loads((output / "summary.json").read_text())
    assert summary["vocabulary"]["label"] == ["cat", "dog"]
    assert summary["vocabulary_declared_by"].endswith("obj.data (names)")


def test_a_darknet_obj_data_lists_subsets_by_their_own_names(tmp_path):
    """datumaro's YOLO writer (a CVAT project's export) names each subset's list after the
    subset (`Validation = data/Validation.txt`), as its importer reads any line but
    darknet's own keys: each is the split its name says. A subset that is no split the
    converter writes is refused by its line, not left out."""
    root = tmp_path / "export"
    text(root / "obj.names", "cat\n")
    for subset, name in (("Train", "a"), ("Validation", "b")):
        text(root / f"{subset}.txt", f"data/obj_{subset}_data/{name}.jpg\n")
        image(root / f"obj_{subset}_data" / f"{name}.jpg")
        text(root / f"obj_{subset}_data" / f"{name}.txt", "0 0.5 0.5 0.2 0.2\n")
    settings = "classes = 1\nnames = data/obj.names\nbackup = backup/\n"
    text(root / "obj.data", settings + "Train = data/Train.txt\nValidation = data/Validation.txt\n")
    (source,) = find_manifests([str(root)])
    assert [(row.split, row.uri.rsplit("/", 1)[-1]) for row in read_source(source, DETECTION)] == [
        ("train", "a.jpg"),
        ("validation", "b.jpg"),
    ]
    text(root / "obj.data", settings + "Train = data/Train.txt\nextra = data/Extra.txt\n")
    with pytest.raises(ManifestError, match=r"extra = data/Extra.txt: .* 'extra' is none of them"):
        find_manifests([str(root)])


# Ultralytics' dota8, as its dota8.zip ships it: labels/train and labels/val, four files each.
DOTA8 = PUBLIC / "dota8"


def test_ultralytics_dota8_corners_just_outside_are_clipped_counted_and_kept(tmp_path):
    """Ultralytics' dota8 (its eight label files under its own dota8.yaml, `path: dota8`):
    17 of its 133 OBB objects have a corner outside [0, 1], turned boxes at the image's
    edge such as P1142's `1.04199`. Each is clipped to the image (its box the clipped
    corners' extent, its mask the clipped polygon), counted in summary.json's
    objects_clipped, and its image written. A line in pixels (the P1142 object as
    Ultralytics' docs draw it, DOTA's own coordinates) lies far outside: box_out_of_range.
    dota8's images are 1024x1024; YOLO's coordinates are relative, so 64x64 JPEGs do."""
    import io

    from PIL import Image

    shutil.copy(PUBLIC / "yaml" / "dota8.yaml", tmp_path / "dota8.yaml")
    shutil.copytree(DOTA8 / "labels", tmp_path / "dota8" / "labels")
    public = sorted((DOTA8 / "labels").glob("*/*.txt"))
    corners = [
        [float(value) for value in line.split()[1:]]
        for label in public
        for line in label.read_text().splitlines()
    ]
    outside = [values for values in corners if not all(0 <= value <= 1 for value in values)]
    assert (len(public), len(corners), len(outside)) == (8, 133, 17)
    text(
        tmp_path / "dota8" / "labels" / "train" / "pixels.txt",
        "0 635 560 919 719 1087 420 803 261\n",
    )
    for seed, label in enumerate(sorted((tmp_path / "dota8" / "labels").glob("*/*.txt"))):
        image(
            tmp_path / "dota8" / "images" / label.parent.name / f"{label.stem}.jpg", seed, (64, 64)
        )
    output = tmp_path / "out"
    argv = ["--manifest", str(tmp_path / "dota8.yaml"), "--label_mode", "detection"]
    assert run.main([*argv, "--output_dir", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert row_accounting(summary, "objects_clipped") == [134, 8, 133, 1, 0, 17]
    assert summary["errors"]["by_reason"] == {"box_out_of_range": 1}
    assert {split: summary["splits"][split]["examples"] for split in summary["splits"]} == {
        "train": 4,
        "validation": 4,
        "test": 0,
    }
    assert summary["splits"]["validation"]["labels"] == {
        "baseball diamond": 4,
        "basketball court": 3,
        "soccer ball field": 1,
    }
    names = __import__("yaml").safe_load((PUBLIC / "yaml" / "dota8.yaml").read_text())["names"]
    assert summary["vocabulary"]["label"] == [names[index] for index in range(15)]
    assert parse_label_map((output / "label_map.pbtxt").read_text())[1] == "plane"
    (p1142,) = [
        example.features.feature
        for example in read_examples(f"{output}/train-*.tfrecord")
        if example.features.feature["image/filename"].bytes_list.value[0]
        == b"P1142__1024__0___824.jpg"
    ]
    # 0 0.779296 0.690429 0.625976 0.451171 0.88965 0.266601 1.04199 0.51465
    assert list(p1142["image/object/class/label"].int64_list.value) == [1]
    np.testing.assert_array_equal(
        [
            p1142[f"image/object/bbox/{side}"].float_list.value
            for side in ("xmin", "ymin", "xmax", "ymax")
        ],
        np.float32([[0.625976], [0.266601], [1.0], [0.690429]]),
    )
    (png,) = p1142["image/object/mask"].bytes_list.value
    mask = np.asarray(Image.open(io.BytesIO(png)))
    assert mask.shape == (64, 64) and mask[:, -1].any() and not mask[:, :32].any()


def test_datumaros_darknet_yolo_export_converts_with_its_names_and_train_list(tmp_path):
    """datumaro's darknet YOLO sample, the layout CVAT's "YOLO 1.1" export writes (CVAT
    exports through datumaro): obj.data names `data/obj.names` and `data/train.txt`,
    darknet's paths; obj.names's ten classes are the declared ids in their order, though
    only two are drawn; train.txt is the TRAIN list. Its image, obj_train_data/1.jpg,
    was 15x10."""
    export = tmp_path / "export"
    shutil.copytree(PUBLIC / "darknet", export)
    image(export / "obj_train_data" / "1.jpg", size=(15, 10))
    output = tmp_path / "out"
    argv = ["--manifest", str(export), "--label_mode", "detection", "--output_dir", str(output)]
    assert run.main(argv) == 0
    summary = json.loads((output / "summary.json").read_text())
    names = [f"label_{number}" for number in range(10)]
    assert summary["vocabulary"]["label"] == names
    assert summary["vocabulary_declared_by"] == f"{export / 'obj.data'} (names)"
    assert (
        summary["rows_read"],
        summary["rows_in_examples"],
        summary["examples_written"],
        summary["rows_dead_lettered"],
        summary["rows_discarded"],
    ) == (2, 2, 1, 0, 0)
    assert {split: counts["examples"] for split, counts in summary["splits"].items()} == {
        "train": 1,
        "validation": 0,
        "test": 0,
    }
    assert summary["splits"]["train"]["labels"] == {"label_2": 1, "label_4": 1}
    (example,) = read_examples(str(output / "train-*.tfrecord"))
    written = example.features.feature
    assert written["image/object/class/text"].bytes_list.value == [b"label_2", b"label_4"]
    assert written["image/object/class/label"].int64_list.value == [3, 5]
    # `2 0.133333 0.300000 0.266667 0.200000` and `4 0.266667 0.450000 0.133333 0.300000`
    sides = ("xmin", "ymin", "xmax", "ymax")
    np.testing.assert_allclose(
        [written[f"image/object/bbox/{side}"].float_list.value for side in sides],
        [[0.0, 0.2], [0.2, 0.3], [0.266667, 1 / 3], [0.4, 0.6]],
        atol=1e-6,
    )
