"""Label Studio JSON exports (core/inputs/label_studio.py): choices as classification
labels, rectangles and polygons as boxes, Label Studio's own image paths, and what is
not a box left out by name, region by region."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, photo_like

from image_tfrecords.core.imaging.masks import mask_pixels
from image_tfrecords.core.inputs.rows import DiscardedRow, RowRules
from image_tfrecords.core.inputs.sources import check_sources, find_manifests, read_source
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import ManifestRow, Mask
from image_tfrecords.pipeline import run

# Images outside the export's folder read (an s3:// URL; the public fixtures' "/image1").
OUTSIDE_ALLOWED = RowRules(label_mode="detection", allow_paths_outside_dataset=True)


def task(task_id, image, *regions, cancelled_first=False):
    """A task as Label Studio 1.x exports it (JSON, not JSON-MIN)."""
    annotation = {
        "id": task_id,
        "completed_by": 1,
        "was_cancelled": False,
        "result": list(regions),
        "ground_truth": False,
        "lead_time": 3.2,
    }
    annotations = [annotation]
    if cancelled_first:
        annotations.insert(
            0, {"id": 99, "was_cancelled": True, "result": [rectangle("r0", "dog", 0, 0, 10, 10)]}
        )
    return {
        "id": task_id,
        "annotations": annotations,
        "file_upload": image.rsplit("/", 1)[-1],
        "drafts": [],
        "predictions": [],
        "data": {"image": image},
        "meta": {},
        "created_at": "2024-05-01T10:00:00.000000Z",
        "project": 3,
    }


def region(region_id, kind, value):
    return {
        "id": region_id,
        "type": kind,
        "from_name": "label",
        "to_name": "image",
        "original_width": 640,
        "original_height": 480,
        "image_rotation": 0,
        "value": value,
        "origin": "manual",
    }


def rectangle(region_id, label, x, y, width, height, rotation=0):
    return region(
        region_id,
        "rectanglelabels",
        {
            "x": x,
            "y": y,
            "width": width,
            "height": height,
            "rotation": rotation,
            "rectanglelabels": [label],
        },
    )


def polygon(region_id, label, points):
    return region(
        region_id, "polygonlabels", {"points": points, "closed": True, "polygonlabels": [label]}
    )


def choices(*labels):
    return {
        "id": "c",
        "type": "choices",
        "from_name": "class",
        "to_name": "image",
        "value": {"choices": list(labels)},
        "origin": "manual",
    }


def export(tmp_path, tasks):
    path = tmp_path / "project-3-at-2024-05-01.json"
    path.write_text(json.dumps(tasks, indent=2))
    return path


def rows(path, rules):
    (source,) = find_manifests([str(path)])
    assert source.format == "label_studio"
    check_sources([source], rules)
    return list(read_source(source, rules))


def test_rectangles_and_polygons_are_boxes_in_percent_of_the_image(tmp_path):
    path = export(
        tmp_path,
        [
            task(
                1,
                "/data/upload/3/a1b2-cat.jpg",
                rectangle("r1", "cat", 10, 20, 30, 40),
                polygon("p1", "dog", [[50, 50], [90, 55], [70, 95]]),
                choices("indoor"),
            ),
            task(2, "/data/local-files/?d=photos/empty.jpg"),
            task(
                3,
                "s3://bucket/x.jpg",
                rectangle("r2", "cat", 0, 0, 100, 100.0000001),
                cancelled_first=True,
            ),
            task(
                4,
                "y.jpg",
                rectangle("r3", "cat", 10, 10, 20, 20, rotation=30),
                region("k1", "keypointlabels", {"x": 5, "y": 5, "keypointlabels": ["nose"]}),
                rectangle("r4", "cat", 90, 10, 20, 20),
                {"id": "r5", "type": "rectanglelabels", "value": {"x": "a"}},
            ),
        ],
    )
    found = rows(path, OUTSIDE_ALLOWED)  # s3://bucket/x.jpg: Label Studio's cloud storage
    kept = [row for row in found if isinstance(row, ManifestRow)]
    assert [(row.uri, row.labels) for row in kept] == [
        (str(tmp_path / "upload/3/a1b2-cat.jpg"), ("cat",)),
        (str(tmp_path / "upload/3/a1b2-cat.jpg"), ("dog",)),
        (str(tmp_path / "photos/empty.jpg"), ()),
        ("s3://bucket/x.jpg", ("cat",)),  # the cancelled annotation's dog is not read
        (str(tmp_path / "y.jpg"), ("cat",)),
    ]
    np.testing.assert_allclose(kept[0].boxes[0][:4], (0.1, 0.2, 0.4, 0.6))
    np.testing.assert_allclose(kept[1].boxes[0][:4], (0.5, 0.5, 0.9, 0.95))
    np.testing.assert_allclose(kept[3].boxes[0][:4], (0, 0, 1, 1))  # clipped at the edge
    # r3: 128x96 pixels at (64, 48) of 640x480, turned 30 degrees clockwise about (64, 48):
    # corners (64, 48), (174.85, 112), (126.85, 195.14), (16, 131.14).
    np.testing.assert_allclose(
        kept[4].boxes[0][:4],
        (16 / 640, 48 / 480, (64 + 128 * 3**0.5 / 2) / 640, (112 + 48 * 3**0.5) / 480),
    )
    dead = [(row.line, row.reason, row.message) for row in found if isinstance(row, DeadLetter)]
    assert [(line, reason) for line, reason, _ in dead] == [
        (4, reasons.BOX_OUT_OF_RANGE),
        (4, reasons.INVALID_BOX),
    ]
    assert [row for row in found if isinstance(row, DiscardedRow)] == [
        DiscardedRow(str(path), 4, "keypointlabels")
    ]
    # The polygon is its mask, in its percent divided by 100; a rectangle is a box; a
    # rotated one its turned corners, in pixels.
    assert kept[0].boxes[0].mask is None
    assert kept[1].boxes[0].mask == Mask(1.0, 1.0, ((0.5, 0.5, 0.9, 0.55, 0.7, 0.95),))
    turned = kept[4].boxes[0].mask
    assert (turned.width, turned.height) == (640, 480)
    np.testing.assert_allclose(
        turned.polygons[0],
        (64, 48, 64 + 64 * 3**0.5, 112, 16 + 64 * 3**0.5, 112 + 48 * 3**0.5, 16, 48 + 48 * 3**0.5),
    )
    left_out = rows(path, RowRules(label_mode="detection", leave_out={"masks"}))
    assert not any(box.mask for row in left_out for box in getattr(row, "boxes", ()))


def test_what_no_box_holds_is_left_out_region_by_region(tmp_path):
    """Keypoints, brushes, ellipses, relations and a region's transcription are left out,
    each by its type, the task's boxes kept; a task of such regions alone is not an image
    without objects. A type no one names is a dead letter."""
    path = export(
        tmp_path,
        [
            task(
                1,
                "a.jpg",
                rectangle("r1", "cat", 10, 20, 30, 40),
                region(
                    "r1", "textarea", {"x": 10, "y": 20, "width": 30, "height": 40, "text": ["Tom"]}
                ),
                region(
                    "e1",
                    "ellipselabels",
                    {"x": 50, "y": 50, "radiusX": 5, "radiusY": 3, "ellipselabels": ["ball"]},
                ),
                {"from_id": "r1", "to_id": "e1", "type": "relation", "direction": "right"},
            ),
            task(
                2,
                "b.jpg",
                region(
                    "b1", "brushlabels", {"format": "rle", "rle": [1, 2], "brushlabels": ["grass"]}
                ),
                region("x1", "splinelabels", {"points": [[1, 1], [2, 2]]}),
            ),
        ],
    )
    found = rows(path, RowRules(label_mode="detection"))
    assert [
        row.labels
        if isinstance(row, ManifestRow)
        else row.reason
        if isinstance(row, DeadLetter)
        else (row.line, row.shape)
        for row in found
    ] == [
        ("cat",),
        (1, "textarea"),
        (1, "ellipselabels"),
        (1, "relation"),
        (2, "brushlabels"),
        reasons.UNSUPPORTED_ANNOTATION,
    ]


def test_choices_are_classification_labels(tmp_path):
    path = export(
        tmp_path,
        [
            task(1, "a.jpg", choices("cat")),
            task(2, "b.jpg", choices("cat", "indoor")),
            task(3, "c.jpg", rectangle("r", "cat", 1, 1, 5, 5)),
            task(4, "d.jpg"),
        ],
    )
    single = rows(path, RowRules())
    assert single[0].labels == ("cat",)
    assert [row.reason for row in single[1:]] == [
        reasons.MULTIPLE_LABELS,
        reasons.MISSING_LABEL,
        reasons.MISSING_LABEL,
    ]
    assert single[2].message.endswith("pass --label_mode detection")
    multi = rows(path, RowRules(label_mode="multi"))
    assert multi[1].labels == ("cat", "indoor")


def test_a_label_studio_export_converts_end_to_end(tmp_path):
    for seed, name in enumerate(("a.jpg", "b.jpg")):
        (tmp_path / name).write_bytes(encode(photo_like(64, 48, seed), "JPEG"))
    path = export(
        tmp_path,
        [
            task(
                1,
                "a.jpg",
                rectangle("r1", "cat", 10, 20, 30, 40),
                rectangle("r2", "dog", 50, 50, 25, 25),
            ),
            task(2, "b.jpg", rectangle("r3", "cat", 0, 0, 50, 50)),
        ],
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
            ]
        )
        == 0
    )
    summary = json.loads((output / "summary.json").read_text())
    assert (
        summary["rows_read"],
        summary["examples_written"],
        summary["splits"]["train"]["labels"],
    ) == (3, 2, {"cat": 2, "dog": 1})


def test_a_json_list_that_is_not_label_studios_is_not_read_as_it(tmp_path):
    """A list of other objects is read as JSON Lines (the name's first format), whose
    line is then a dead letter, not a task without annotations."""
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"image": "a.jpg", "label": "cat"}]))
    (source,) = find_manifests([str(path)])
    assert source.format == "vertex_jsonl"
    (dead,) = read_source(source, RowRules())
    assert (dead.reason, dead.message) == (reasons.MALFORMED_ROW, "expected a JSON object")


def test_a_rotated_rectangle_without_the_images_size_is_a_dead_letter(tmp_path):
    """Label Studio turns a rectangle in pixels: without original_width and
    original_height its corners are unknown (turned in percent it is no rectangle)."""
    sized = rectangle("r1", "cat", 10, 10, 20, 20, rotation=30)
    unsized = {key: value for key, value in sized.items() if key != "original_width"}
    path = export(
        tmp_path,
        [
            task(
                1,
                "a.jpg",
                dict(unsized, id="r2"),
                rectangle("r3", "cat", 10, 10, 20, 20, rotation=360),
                rectangle("r4", "cat", 10, 10, 20, 20, rotation="nan"),
            )
        ],
    )
    found = rows(path, RowRules(label_mode="detection"))
    assert [
        (row.reason, row.message) if isinstance(row, DeadLetter) else row.boxes[0].mask
        for row in found
    ] == [
        (
            reasons.INVALID_SIZE,
            "task 1: region r2: a rotated rectangle is turned in pixels: "
            "the declared image width and height must be positive whole numbers of pixels, "
            "found None x 480",
        ),
        None,  # a whole turn: the box as drawn
        (reasons.INVALID_BOX, "task 1: region r4: the rotation is not a number of degrees: nan"),
    ]
    np.testing.assert_allclose(found[1].boxes[0][:4], (0.1, 0.1, 0.3, 0.3))


PUBLIC = Path(__file__).parent / "data" / "public" / "label_studio"


def turned_corners(value, width, height):
    """The corners of a rotated rectangle in pixels, as label-studio-converter's
    convert_annotation_to_yolo_obb computes them (about x, y, in pixels)."""
    x, y = value["x"] / 100 * width, value["y"] / 100 * height
    w, h = value["width"] / 100 * width, value["height"] / 100 * height
    cos, sin = np.cos(np.radians(value["rotation"])), np.sin(np.radians(value["rotation"]))
    return np.array(
        [
            (x, y),
            (x + w * cos, y + w * sin),
            (x + w * cos - h * sin, y + w * sin + h * cos),
            (x - h * sin, y + h * cos),
        ]
    )


@pytest.mark.parametrize(
    "name", ["rect_yolo_data.json", "rect_rotated_obb_data.json", "rect_poly_coco_data.json"]
)
def test_label_studios_own_test_exports_read_region_by_region(name, tmp_path):
    """Label Studio's converter's and SDK's fixtures: every rectangle of the first
    annotation a box of x/100, y/100, (x + width)/100, (y + height)/100, or for a rotated
    one (25 in rect_rotated_obb_data) the extent of the corners Label Studio's YOLO OBB
    export computes; a polygon its extent; keypoints left out."""
    path = tmp_path / name
    shutil.copy(PUBLIC / name, path)
    found = rows(path, OUTSIDE_ALLOWED)  # data.image "/image1": a path at the disk's root
    expected = []
    for task_ in json.loads(path.read_text()):
        for region_ in task_["annotations"][0]["result"]:
            value = region_["value"]
            if region_["type"] == "keypointlabels":
                expected.append(DiscardedRow(str(path), 1, "keypointlabels"))
            elif value.get("rotation"):
                corners = turned_corners(
                    value, region_["original_width"], region_["original_height"]
                )
                corners /= (region_["original_width"], region_["original_height"])
                expected.append((*corners.min(axis=0), *corners.max(axis=0)))
            elif region_["type"] == "polygonlabels":
                xs, ys = zip(*value["points"])
                expected.append((min(xs) / 100, min(ys) / 100, max(xs) / 100, max(ys) / 100))
            else:
                x, y, w, h = (value[key] / 100 for key in ("x", "y", "width", "height"))
                expected.append((x, y, x + w, y + h))
    assert len(found) == len(expected) > 1
    for row, want in zip(found, expected, strict=True):
        if isinstance(want, DiscardedRow):
            assert row._replace(line=1) == want
        else:
            np.testing.assert_allclose(row.boxes[0][:4], want, atol=1e-12)


def test_label_studios_rotated_rectangles_are_masks_of_their_area(tmp_path):
    """Each of the 25 rotated rectangles of Label Studio's OBB fixture (23 on its first
    image) is a mask drawn at the image's size whose pixels are the rectangle's area
    (width x height in pixels) within half a pixel along its perimeter (what rasterising
    its edges may give; measured, at most a tenth of that), its box the extent of the
    mask's polygon."""
    path = tmp_path / "rect_rotated_obb_data.json"
    shutil.copy(PUBLIC / path.name, path)
    regions = [
        region_
        for task_ in json.loads(path.read_text())
        for region_ in task_["annotations"][0]["result"]
    ]
    found = rows(path, OUTSIDE_ALLOWED)
    assert len(found) == len(regions) == 25
    rotated = [
        (row, region_)
        for row, region_ in zip(found, regions, strict=True)
        if region_["value"]["rotation"] % 360
    ]
    assert len(rotated) == 25
    for row, region_ in rotated:
        width, height = region_["original_width"], region_["original_height"]
        value, mask = region_["value"], row.boxes[0].mask
        np.testing.assert_allclose(
            np.reshape(mask.polygons[0], (4, 2)), turned_corners(value, width, height)
        )
        w, h = value["width"] / 100 * width, value["height"] / 100 * height
        pixels = int(mask_pixels(mask, width, height).sum())
        assert abs(pixels - w * h) <= w + h, (region_["id"], pixels, w * h)
        corners = np.reshape(mask.polygons[0], (4, 2)) / (width, height)
        np.testing.assert_allclose(row.boxes[0][:4], (*corners.min(axis=0), *corners.max(axis=0)))


def test_images_outside_the_exports_folder_are_dead_letters_as_label_studio_serves_none(tmp_path):
    """Label Studio serves local files only under LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT;
    data.image stays in the export's folder (or --image_dir) likewise: `?d=` climbing out
    or absolute, an upload path climbing out, a URL or another bucket are
    path_outside_dataset naming the task; --allow_paths_outside_dataset reads them."""
    images = [
        "/data/local-files/?d=photos/a.jpg",
        "/data/local-files/?d=../../etc/passwd",
        "/data/local-files/?d=/etc/passwd",
        "/data/upload/../../x.jpg",
        "http://169.254.169.254/latest/meta-data",
        "gs://other-bucket/x.jpg",
    ]
    path = export(
        tmp_path,
        [
            task(number, image, rectangle(f"r{number}", "cat", 0, 0, 9, 9))
            for number, image in enumerate(images, 1)
        ],
    )
    found = rows(path, RowRules(label_mode="detection"))
    assert [row.reason if isinstance(row, DeadLetter) else row.uri for row in found] == [
        str(tmp_path / "photos" / "a.jpg")
    ] + [reasons.PATH_OUTSIDE_DATASET] * 5
    assert found[1].message == (
        "task 2: data.image '/data/local-files/?d=../../etc/passwd' leaves the dataset's "
        f"folder {tmp_path}: pass --allow_paths_outside_dataset to read files outside it"
    )
    assert all(isinstance(row, ManifestRow) for row in rows(path, OUTSIDE_ALLOWED))
