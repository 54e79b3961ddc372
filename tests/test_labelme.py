"""LabelMe JSON (core/inputs/labelme.py): a folder of files, one per image; rectangles,
and the extents of polygons, circles and masks, in pixels of the declared size, and their
masks; shapes sharing a group_id one object; flags as classification labels; __ignore__
left out; lines and points left out by object. X-AnyLabeling's files (LabelMe's format):
rectangles of four corners, rotated boxes, and its other shapes."""

import base64
import io
import json
from pathlib import Path

import numpy as np
from conftest import encode, photo_like
from PIL import Image

from image_tfrecords.core.imaging.masks import decode_rle
from image_tfrecords.core.inputs.rows import DiscardedRow, RowRules
from image_tfrecords.core.inputs.sources import check_sources, find_manifests, read_source
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import ManifestRow, Mask
from image_tfrecords.pipeline import run

PUBLIC = Path(__file__).parent / "data" / "public" / "labelme"


def shape(label, kind, points, group_id=None):
    return {
        "label": label,
        "points": points,
        "group_id": group_id,
        "description": "",
        "shape_type": kind,
        "flags": {},
        "mask": None,
    }


def labelme(folder, name, image_path, shapes, flags=None, size=(100, 50)):
    """A file as labelme 5 saves it (imageData left out, as --nodata saves it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(
        json.dumps(
            {
                "version": "5.4.1",
                "flags": flags or {},
                "shapes": shapes,
                "imagePath": image_path,
                "imageData": None,
                "imageHeight": size[1],
                "imageWidth": size[0],
            },
            indent=2,
        )
    )


def rows(path, rules):
    sources = find_manifests([str(path)])
    assert {source.format for source in sources} == {"labelme"}
    check_sources(sources, rules)
    return [row for source in sources for row in read_source(source, rules)]


def test_a_folder_of_labelme_files_gives_a_box_per_object(tmp_path):
    labels = tmp_path / "annotations"
    labelme(
        labels,
        "a.json",
        "../images/a.jpg",
        [
            shape("cat", "rectangle", [[60, 40], [10, 5]]),  # corners in either order
            shape("dog", "polygon", [[50, 10], [90, 20], [70, 45]], group_id=1),
            shape("dog", "polygon", [[95, 30], [99, 30], [97, 35]], group_id=1),  # same dog
            shape("ball", "circle", [[20, 25], [25, 25]]),
            shape("edge", "line", [[0, 0], [10, 10]]),
            shape("cat", "rectangle", [[60, 40], [110, 45]]),
        ],
    )
    labelme(labels, "b.json", "b.jpg", [])
    labelme(labels, "c.json", "c.jpg", [], flags={"__ignore__": True})
    # labelme --output's layout: images beside the JSONs' folder, not in it.
    found = rows(labels, RowRules(label_mode="detection", allow_paths_outside_dataset=True))
    kept = [row for row in found if isinstance(row, ManifestRow)]
    assert [(row.uri, row.line, row.labels) for row in kept] == [
        (str(tmp_path / "images" / "a.jpg"), 1, ("cat",)),
        (str(tmp_path / "images" / "a.jpg"), 2, ("dog",)),
        (str(tmp_path / "images" / "a.jpg"), 3, ("ball",)),
        (str(labels / "b.jpg"), 0, ()),
    ]
    np.testing.assert_allclose(kept[0].boxes[0][:4], (0.1, 0.1, 0.6, 0.8))
    np.testing.assert_allclose(kept[1].boxes[0][:4], (0.5, 0.2, 0.99, 0.9))
    np.testing.assert_allclose(kept[2].boxes[0][:4], (0.15, 0.4, 0.25, 0.6))
    assert kept[0].image_size == (100, 50)
    dead = [(row.line, row.reason, row.message) for row in found if isinstance(row, DeadLetter)]
    assert dead == [
        (
            5,
            reasons.BOX_OUT_OF_RANGE,
            "object 5: pixel coordinates 60.0,40.0,"
            "110.0,45.0 lie outside the declared 100x50 image",
        )
    ]
    assert [row for row in found if isinstance(row, DiscardedRow)] == [
        DiscardedRow(str(labels / "a.json"), 4, "line"),
        DiscardedRow(str(labels / "c.json"), 0),
    ]
    # A group's mask is its shapes' polygons, a circle's a 64-sided one; rectangles
    # alone are a box.
    assert kept[0].boxes[0].mask is None
    assert kept[1].boxes[0].mask == Mask(
        100, 50, ((50, 10, 90, 20, 70, 45), (95, 30, 99, 30, 97, 35))
    )
    (circle,) = kept[2].boxes[0].mask.polygons
    assert len(circle) == 2 * 64
    np.testing.assert_allclose(
        np.hypot(np.subtract(circle[0::2], 20), np.subtract(circle[1::2], 25)), 5
    )
    left_out = rows(
        labels,
        RowRules(label_mode="detection", leave_out={"masks"}, allow_paths_outside_dataset=True),
    )
    assert [row.boxes[0][:4] for row in left_out if getattr(row, "boxes", None)] == [
        row.boxes[0][:4] for row in kept if row.boxes
    ]
    assert not any(row.boxes[0].mask for row in left_out if getattr(row, "boxes", None))


def test_a_mask_shape_is_its_pixels_placed_in_the_image(tmp_path):
    """labelme's mask shape: a base64 PNG of the region between its two points."""
    region = np.array([[0, 255, 255], [255, 255, 0]], np.uint8)
    png = io.BytesIO()
    Image.fromarray(region).save(png, format="PNG")
    labelme(
        tmp_path,
        "a.json",
        "a.jpg",
        [
            dict(
                shape("cat", "mask", [[10, 5], [12, 6]]),
                mask=base64.b64encode(png.getvalue()).decode(),
            ),
            dict(shape("dog", "mask", [[1, 1], [2, 2]]), mask="not base64 PNG"),
        ],
    )
    cat, dog = rows(tmp_path / "a.json", RowRules(label_mode="detection"))
    expected = np.zeros((50, 100), np.uint8)
    expected[5:7, 10:13] = region > 0
    np.testing.assert_array_equal(decode_rle(cat.boxes[0].mask), expected)
    assert (dog.reason, dog.message) == (
        reasons.INVALID_MASK,
        "object 2: a mask's `mask` must be a PNG, base64",
    )


def test_flags_are_classification_labels(tmp_path):
    labelme(tmp_path, "a.json", "a.jpg", [], flags={"__ignore__": False, "cat": True, "dog": False})
    labelme(tmp_path, "b.json", "b.jpg", [shape("cat", "rectangle", [[1, 1], [5, 5]])])
    labelme(tmp_path, "c.json", "c.jpg", [], flags={"cat": True, "indoor": True})
    found = rows(tmp_path / "*.json", RowRules())
    assert [row.labels if isinstance(row, ManifestRow) else row.reason for row in found] == [
        ("cat",),
        reasons.MISSING_LABEL,
        reasons.MULTIPLE_LABELS,
    ]


def test_labelme_files_convert_end_to_end(tmp_path):
    (tmp_path / "a.jpg").write_bytes(encode(photo_like(100, 50, 0), "JPEG"))
    labelme(
        tmp_path,
        "a.json",
        "a.jpg",
        [
            shape("cat", "rectangle", [[10, 5], [60, 40]]),
            shape("dog", "rectangle", [[60, 5], [90, 45]]),
        ],
    )
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                f"train={tmp_path}",
                "--label_mode",
                "detection",
                "--output_dir",
                str(output),
            ]
        )
        == 0
    )
    summary = json.loads((output / "summary.json").read_text())
    assert (
        summary["rows_read"],
        summary["examples_written"],
        summary["splits"]["train"]["labels"],
    ) == (2, 1, {"cat": 1, "dog": 1})


def test_a_second_file_for_the_same_image_is_a_duplicate_not_more_objects(tmp_path):
    """LabelMe writes one file per image: a copy of it (a.json and a (copy).json) would add
    every object again to the one example. The second file's objects are dead letters
    naming the first, wherever the two files were read."""
    (tmp_path / "a.jpg").write_bytes(encode(photo_like(100, 50, 0), "JPEG"))
    objects = [
        shape("cat", "rectangle", [[10, 5], [60, 40]]),
        shape("dog", "rectangle", [[60, 5], [90, 45]]),
    ]
    labelme(tmp_path, "a.json", "a.jpg", objects)
    labelme(tmp_path, "a (copy).json", "a.jpg", objects)
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                f"train={tmp_path}",
                "--label_mode",
                "detection",
                "--output_dir",
                str(output),
                "--max_error_fraction",
                "0.5",
            ]
        )
        == 0
    )
    summary = json.loads((output / "summary.json").read_text())
    assert (
        summary["rows_read"],
        summary["examples_written"],
        summary["rows_dead_lettered"],
        summary["splits"]["train"]["labels"],
    ) == (4, 1, 2, {"cat": 1, "dog": 1})
    letters = [
        json.loads(line)
        for path in output.glob("errors-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert {(letter["reason"], letter["manifest"]) for letter in letters} == {
        (reasons.DUPLICATE_ROW, str(tmp_path / "a.json"))
    }
    assert {letter["message"] for letter in letters} == {
        f"the same image as {tmp_path / 'a (copy).json'}, which lists it with its objects; "
        "written once, from that file"
    }


def test_regions_labelled_ignore_are_no_objects(tmp_path):
    """labelme's own instance-segmentation example (labelme/examples/instance_segmentation, e.g.
    2011_000003.json) labels regions to leave alone `__ignore__`, and its labelme2coco
    skips them: they are discarded rows here, not a class; two polygons of one group_id are
    one object whose mask is both."""
    labelme(
        tmp_path,
        "a.json",
        "a.jpg",
        [
            shape("person", "polygon", [[10, 5], [40, 5], [25, 40]], group_id=0),
            shape("person", "polygon", [[60, 5], [70, 5], [65, 20]], group_id=0),
            shape("__ignore__", "polygon", [[80, 30], [95, 30], [90, 45]]),
        ],
    )
    labelme(tmp_path, "b.json", "b.jpg", [shape("__ignore__", "rectangle", [[1, 1], [9, 9]])])
    found = rows(tmp_path, RowRules(label_mode="detection"))
    kept = [row for row in found if isinstance(row, ManifestRow)]
    assert [(Path(row.uri).name, row.line, row.labels) for row in kept] == [
        ("a.jpg", 1, ("person",)),
        ("b.jpg", 0, ()),
    ]  # b.jpg: an image without objects
    assert len(kept[0].boxes[0].mask.polygons) == 2
    assert sorted(row for row in found if isinstance(row, DiscardedRow)) == [
        DiscardedRow(str(tmp_path / "a.json"), 2),
        DiscardedRow(str(tmp_path / "b.json"), 1),
    ]


def test_x_anylabeling_rectangles_are_the_extent_of_their_four_corners(tmp_path):
    """X-AnyLabeling (2.2 and later) writes a rectangle as its four corners, clockwise from
    any of them; its own converters take their extent (calculate_bounding_box), as they
    take a two-point rectangle's. A rectangle of four corners was an empty_box before."""
    labelme(
        tmp_path,
        "a.json",
        "a.jpg",
        [
            shape("car", "rectangle", [[10, 5], [60, 5], [60, 40], [10, 40]]),
            shape("car", "rectangle", [[60, 40], [10, 40], [10, 5], [60, 5]]),
            shape("car", "rectangle", [[10, 5], [60, 40]]),
        ],
    )
    found = rows(tmp_path / "a.json", RowRules(label_mode="detection"))
    assert [type(row) for row in found] == [ManifestRow] * 3
    for row in found:
        np.testing.assert_allclose(row.boxes[0][:4], (0.1, 0.1, 0.6, 0.8))
        assert row.boxes[0].mask is None


def test_x_anylabelings_other_shapes(tmp_path):
    """A rotated box (`rotation`, four corners, as YOLO OBB's) is its corners' extent and
    its mask their polygon; points (its pose keypoints are points beside a rectangle),
    lines, line strips and cuboids are left out one by one, by name; a shape of a kind no
    one names is a dead letter, and so is an object that mixes a line with a polygon."""
    corners = [[30, 10], [50, 20], [40, 40], [20, 30]]
    labelme(
        tmp_path,
        "a.json",
        "a.jpg",
        [
            dict(shape("plane", "rotation", corners), direction=0.46),
            shape("person", "rectangle", [[1, 1], [9, 1], [9, 9], [1, 9]], group_id=0),
            shape("nose", "point", [[5, 3]], group_id=0),
            shape("lane", "linestrip", [[0, 49], [50, 30], [99, 49]]),
            shape("edge", "line", [[0, 0], [10, 10]]),
            shape(
                "box", "cuboid", [[1, 1], [5, 1], [5, 5], [1, 5], [2, 2], [6, 2], [6, 6], [2, 6]]
            ),
            shape("blob", "spline", [[1, 1], [5, 5]]),
            shape("road", "polygon", [[10, 10], [20, 10], [15, 20]], group_id=3),
            shape("road", "line", [[0, 0], [10, 10]], group_id=3),
        ],
    )
    found = rows(tmp_path / "a.json", RowRules(label_mode="detection"))
    plane, person = [row for row in found if isinstance(row, ManifestRow)]
    np.testing.assert_allclose(plane.boxes[0][:4], (0.2, 0.2, 0.5, 0.8))
    assert plane.boxes[0].mask == Mask(100, 50, (tuple(v for xy in corners for v in xy),))
    assert (person.line, person.labels) == (2, ("person",))
    assert [(row.line, row.shape) for row in found if isinstance(row, DiscardedRow)] == [
        (3, "point"),
        (4, "linestrip"),
        (5, "line"),
        (6, "cuboid"),
    ]
    assert [
        (row.line, row.reason, row.message) for row in found if isinstance(row, DeadLetter)
    ] == [
        (7, reasons.UNSUPPORTED_ANNOTATION, "object 7: a spline is not a box"),
        (
            8,
            reasons.UNSUPPORTED_ANNOTATION,
            "object 8: a line is not a box, in an object with regions",
        ),
    ]


def test_x_anylabelings_own_pose_example_is_a_box_and_points_left_out(tmp_path):
    """X-AnyLabeling's pose example: the person's four-corner rectangle is its extent (it
    was an empty_box), and its 16 keypoints, point shapes tied to it only by group_id,
    are left out one by one."""
    path = tmp_path / "human-pose.json"
    path.write_bytes((PUBLIC / "x_anylabeling_human_pose.json").read_bytes())
    found = rows(path, RowRules(label_mode="detection"))
    (person,) = [row for row in found if isinstance(row, ManifestRow)]
    assert person.labels == ("person",) and person.image_size == (500, 750)
    np.testing.assert_allclose(
        person.boxes[0][:4],
        (
            202.57744789123535 / 500,
            262.77809143066406 / 750,
            321.3376522064209 / 500,
            627.0604133605957 / 750,
        ),
    )
    assert [(row.line, row.shape) for row in found if isinstance(row, DiscardedRow)] == [
        (line, "point") for line in range(2, 18)
    ]
    assert not [row for row in found if isinstance(row, DeadLetter)]


def test_an_image_path_outside_the_files_folder_is_a_dead_letter_unless_allowed(tmp_path):
    """imagePath stays in the JSON's folder (or --image_dir): `..` (backslashes too), an
    absolute path and a link leading out are path_outside_dataset. labelme --output's
    `../images/a.jpg` reads with --image_dir the images' folder, or with
    --allow_paths_outside_dataset."""
    labels, secret = tmp_path / "annotations", tmp_path / "secret.jpg"
    secret.write_bytes(b"")
    labels.mkdir()
    (labels / "link.jpg").symlink_to(secret)
    for name, image_path in [
        ("a.json", "../images/a.jpg"),
        ("b.json", str(secret)),
        ("c.json", "link.jpg"),
        ("d.json", "..\\secret.jpg"),
        ("e.json", "e.jpg"),
    ]:
        labelme(labels, name, image_path, [shape("cat", "rectangle", [[1, 1], [9, 9]])])

    def outcomes(**rules):
        found = rows(labels, RowRules(label_mode="detection", **rules))
        return [row.reason if isinstance(row, DeadLetter) else row.uri for row in found]

    outside = reasons.PATH_OUTSIDE_DATASET
    assert outcomes() == [outside, outside, outside, outside, str(labels / "e.jpg")]
    (first, *_) = rows(labels, RowRules(label_mode="detection"))
    assert first.message == (
        f"imagePath '../images/a.jpg' leaves the dataset's folder "
        f"{labels}: pass --allow_paths_outside_dataset to read files "
        "outside it"
    )
    images = tmp_path / "images"
    assert outcomes(image_dir=str(images)) == [
        str(images / "a.jpg"),
        outside,
        str(images / "link.jpg"),
        outside,
        str(images / "e.jpg"),
    ]
    assert outcomes(allow_paths_outside_dataset=True) == [
        str(images / "a.jpg"),
        str(secret),
        str(labels / "link.jpg"),
        str(secret),
        str(labels / "e.jpg"),
    ]
