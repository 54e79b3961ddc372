"""CVAT for images 1.1 XML (core/inputs/cvat.py): boxes, polygons and masks in pixels of
each image's declared size, tags as classification labels, subsets as splits, and every
shape that is not a box left out by itself, by name, its image written with the rest."""

import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, feature, photo_like, read_examples, shard_pattern
from PIL import Image

from image_tfrecords.core.imaging.masks import decode_rle, mask_pixels
from image_tfrecords.core.inputs.rows import DiscardedRow, RowRules
from image_tfrecords.core.inputs.sources import check_sources, find_manifests, read_source
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import ManifestRow, Mask
from image_tfrecords.pipeline import run

HEADER = """<?xml version="1.0" encoding="utf-8"?>
<annotations>
  <version>1.1</version>
  <meta>
    <task><id>7</id><name>pets</name><size>4</size><mode>annotation</mode>
      <labels><label><name>cat</name><color>#fa3253</color><type>any</type><attributes/></label>
        <label><name>dog</name><color>#33ddff</color><type>any</type><attributes/></label>
      </labels>
    </task>
    <dumped>2024-05-01 10:00:00.000000+00:00</dumped>
  </meta>
"""

IMAGES = """
  <image id="0" name="a.jpg" subset="Train" width="64" height="48">
    <box label="cat" source="manual" occluded="0" xtl="6.40" ytl="4.80" xbr="32.00" ybr="24.00" z_order="0">
      <attribute name="breed">tabby</attribute>
    </box>
    <polygon label="dog" source="manual" occluded="1" points="32.0,24.0;64.0,30.0;40.0,48.0" z_order="0"/>
    <tag label="indoor" source="manual"/>
  </image>
  <image id="1" name="b.jpg" subset="Validation" width="64" height="48">
  </image>
  <image id="2" name="c.jpg" subset="default" width="64" height="48">
    <box label="cat" source="manual" occluded="0" xtl="0" ytl="0" xbr="10" ybr="10" rotation="45.0" z_order="0"/>
    <polyline label="cat" source="manual" occluded="0" points="1,1;5,5" z_order="0"/>
    <box label="dog" source="manual" occluded="0" xtl="50" ytl="0" xbr="70" ybr="10" z_order="0"/>
    <mask label="dog" source="manual" occluded="0" rle="3, 3, 2" left="10" top="20" width="4" height="2" z_order="0"/>
  </image>
  <image id="3" name="d.jpg" subset="Test" width="64" height="48">
    <tag label="outdoor" source="manual"/>
    <tag label="dog" source="manual"/>
  </image>
  <track id="0" label="cat" source="manual"><box frame="0" outside="0" occluded="0" keyframe="1" xtl="1" ytl="1" xbr="5" ybr="5" z_order="0"/></track>
"""


def annotations(tmp_path, images=IMAGES):
    path = tmp_path / "annotations.xml"
    path.write_text(HEADER + images + "</annotations>\n")
    return path


def rows(path, rules, split=None):
    (source,) = find_manifests([f"{split}={path}" if split else str(path)])
    assert source.format == "cvat"
    check_sources([source], rules)
    return list(read_source(source, rules))


def test_shapes_are_boxes_in_pixels_of_the_declared_size(tmp_path):
    (tmp_path / "images").mkdir()  # CVAT's export with images: names are under images/
    (tmp_path / "images" / "a.jpg").write_bytes(encode(photo_like(64, 48, 0), "JPEG"))
    found = rows(annotations(tmp_path), RowRules(label_mode="detection"))
    kept = [row for row in found if isinstance(row, ManifestRow)]
    assert [(row.split, row.uri.rsplit("/", 2)[-2:], row.labels) for row in kept] == [
        ("train", ["images", "a.jpg"], ("cat",)),
        ("train", ["images", "a.jpg"], ("dog",)),
        ("validation", ["images", "b.jpg"], ()),
        (kept[3].split, ["images", "c.jpg"], ("dog",)),
        ("test", ["images", "d.jpg"], ()),
    ]
    np.testing.assert_allclose(kept[0].boxes[0][:4], (0.1, 0.1, 0.5, 0.5))
    np.testing.assert_allclose(kept[1].boxes[0][:4], (0.5, 0.5, 1, 1))
    np.testing.assert_allclose(kept[3].boxes[0][:4], (10 / 64, 20 / 48, 14 / 64, 22 / 48))
    assert kept[0].image_size == (64, 48)
    dead = [(row.line, row.reason, row.message) for row in found if isinstance(row, DeadLetter)]
    # The box turned 45 degrees about its centre (5, 5) reaches 2.07 pixels past the edge.
    assert dead == [
        (
            3,
            reasons.BOX_OUT_OF_RANGE,
            "image 2: <box>: the box reaches outside the image by "
            "more than 0.1% of its side: corners -0.0323604, -0.0431472, 0.18861, 0.251481",
        ),
        (
            3,
            reasons.BOX_OUT_OF_RANGE,
            "image 2: <box>: pixel coordinates 50,0,70,10 lie outside the declared 64x48 image",
        ),
        (
            0,
            reasons.UNSUPPORTED_ANNOTATION,
            "track 0: a video's track (CVAT for video 1.1); export the task as CVAT for images 1.1",
        ),
    ]
    assert [row for row in found if isinstance(row, DiscardedRow)] == [
        DiscardedRow(str(tmp_path / "annotations.xml"), 3, "polyline")
    ]
    # A polygon is its mask; a <mask>'s RLE runs over its region row by row, from a run of
    # background, placed at left, top (as CVAT's own tools decode it).
    assert kept[0].boxes[0].mask is None
    assert kept[1].boxes[0].mask == Mask(64, 48, ((32, 24, 64, 30, 40, 48),))
    expected = np.zeros((48, 64), np.uint8)
    expected[20:22, 10:14] = [[0, 0, 0, 1], [1, 1, 0, 0]]
    np.testing.assert_array_equal(decode_rle(kept[3].boxes[0].mask), expected)
    left_out = rows(annotations(tmp_path), RowRules(label_mode="detection", leave_out={"masks"}))
    assert not any(box.mask for row in left_out for box in getattr(row, "boxes", ()))


# A 20x10 box centred on (30, 15) of a 64x48 image, turned clockwise: the extent of its
# corners (half width 10 cos + 5 sin, half height 10 sin + 5 cos), worked out by hand.
TURNED = {
    0: (20, 10, 40, 20),
    30: (30 - 11.160254, 15 - 9.330127, 30 + 11.160254, 15 + 9.330127),
    90: (25, 5, 35, 25),
    180: (20, 10, 40, 20),
    -90: (25, 5, 35, 25),
}


@pytest.mark.parametrize("degrees", TURNED)
def test_a_rotated_box_is_its_turned_corners_extent_and_their_polygon_its_mask(degrees, tmp_path):
    """CVAT turns a <box> `rotation` degrees clockwise about its centre (its exporters'
    RotatedBoxesToPolygons): the box written is the turned corners' extent, the mask the
    turned rectangle (its 200 pixels); unturned, a box without a mask."""
    cvat = annotations(
        tmp_path,
        f"""
  <image id="0" name="a.jpg" width="64" height="48">
    <box label="cat" occluded="0" xtl="20" ytl="10" xbr="40" ybr="20" rotation="{degrees}" z_order="0"/>
  </image>""",
    )
    (row,) = rows(cvat, RowRules(label_mode="detection"))
    box = row.boxes[0]
    np.testing.assert_allclose(np.multiply(box[:4], (64, 48, 64, 48)), TURNED[degrees], atol=1e-5)
    if degrees == 0:
        assert box.mask is None
    else:
        assert box.mask.width == 64 and box.mask.height == 48
        corners = np.reshape(box.mask.polygons[0], (4, 2))
        # Each side keeps its length: the rectangle is turned, not stretched.
        np.testing.assert_allclose(
            np.hypot(*(corners - np.roll(corners, -1, axis=0)).T), (20, 10, 20, 10)
        )
        assert abs(int(mask_pixels(box.mask, 64, 48).sum()) - 200) <= 30  # its edges' pixels
    (bare,) = rows(cvat, RowRules(label_mode="detection", leave_out={"masks"}))
    assert bare.boxes[0].mask is None and bare.boxes[0][:4] == box[:4]


def test_a_rotated_box_with_a_rotation_that_is_not_a_number_is_a_dead_letter(tmp_path):
    cvat = annotations(
        tmp_path,
        """
  <image id="0" name="a.jpg" width="64" height="48">
    <box label="cat" occluded="0" xtl="20" ytl="10" xbr="40" ybr="20" rotation="north" z_order="0"/>
    <box label="cat" occluded="0" xtl="20" ytl="10" xbr="40" ybr="20" rotation="nan" z_order="0"/>
  </image>""",
    )
    assert [(row.reason, row.message) for row in rows(cvat, RowRules(label_mode="detection"))] == [
        (reasons.INVALID_BOX, "image 0: <box>: a coordinate is not a number"),
        (reasons.INVALID_BOX, "image 0: <box>: the rotation is not a number of degrees: nan"),
    ]


def test_a_rotated_box_is_written_with_its_mask(tmp_path):
    """End to end: the example holds the turned corners' extent as its box and the turned
    rectangle as its mask PNG (a quarter turn of a 20x10 box: 10x20 pixels)."""
    (tmp_path / "a.jpg").write_bytes(encode(photo_like(64, 48, 0), "JPEG"))
    cvat = annotations(
        tmp_path,
        """
  <image id="0" name="a.jpg" subset="Train" width="64" height="48">
    <box label="cat" occluded="0" xtl="20" ytl="10" xbr="40" ybr="20" rotation="90" z_order="0"/>
  </image>""",
    )
    output = tmp_path / "out"
    assert (
        run.main(
            ["--manifest", str(cvat), "--label_mode", "detection", "--output_dir", str(output)]
        )
        == 0
    )
    (example,) = read_examples(shard_pattern(output, "train"))
    assert [
        round(feature(example, f"image/object/bbox/{side}") * size, 4)
        for side, size in (("xmin", 64), ("ymin", 48), ("xmax", 64), ("ymax", 48))
    ] == [25, 5, 35, 25]
    mask = Image.open(io.BytesIO(feature(example, "image/object/mask")))  # its only object's
    ys, xs = np.nonzero(np.asarray(mask))
    assert (xs.min(), xs.max() + 1, ys.min(), ys.max() + 1, len(xs)) == (25, 35, 5, 25, 200)


@pytest.mark.parametrize("rle", ["3, 3", "3, x, 2", "3, -3, 8", ""])
def test_a_mask_whose_rle_does_not_fill_its_region_is_a_dead_letter(rle, tmp_path):
    cvat = annotations(tmp_path, IMAGES.replace('rle="3, 3, 2"', f'rle="{rle}"'))
    (dead,) = [
        row
        for row in rows(cvat, RowRules(label_mode="detection"))
        if isinstance(row, DeadLetter) and row.reason == reasons.INVALID_MASK
    ]
    assert (dead.line, dead.message) == (3, "image 2: <mask>: its rle does not make a 4x2 mask")


def test_tags_are_classification_labels_and_subsets_splits(tmp_path):
    found = rows(annotations(tmp_path), RowRules(label_mode="multi"))
    assert [
        (row.line, row.reason if isinstance(row, DeadLetter) else row.labels) for row in found
    ] == [
        (1, ("indoor",)),
        (2, reasons.MISSING_LABEL),
        (3, reasons.MISSING_LABEL),
        (4, ("outdoor", "dog")),
        (0, reasons.UNSUPPORTED_ANNOTATION),
    ]
    assert found[2].message.endswith("its shapes are boxes: pass --label_mode detection")
    single = rows(annotations(tmp_path), RowRules())
    assert single[3].reason == reasons.MULTIPLE_LABELS
    # SPLIT=PATH: an image whose subset names another split is invalid_split.
    forced = rows(annotations(tmp_path), RowRules(label_mode="multi"), split="train")
    assert [row.reason for row in forced if isinstance(row, DeadLetter)] == [
        reasons.INVALID_SPLIT,
        reasons.MISSING_LABEL,
        reasons.INVALID_SPLIT,
        reasons.UNSUPPORTED_ANNOTATION,
    ]


def test_a_cvat_export_converts_end_to_end_beside_a_voc_xml(tmp_path):
    """Both are .xml: each is told by its root element."""
    for seed, name in enumerate(("a.jpg", "b.jpg")):
        (tmp_path / name).write_bytes(encode(photo_like(64, 48, seed), "JPEG"))
    cvat = annotations(tmp_path, IMAGES.split('  <image id="2"')[0])
    output = tmp_path / "out"
    assert (
        run.main(
            ["--manifest", str(cvat), "--label_mode", "detection", "--output_dir", str(output)]
        )
        == 0
    )
    summary = json.loads((output / "summary.json").read_text())
    assert (summary["rows_read"], summary["examples_written"]) == (3, 2)
    assert summary["splits"]["train"]["labels"] == {"cat": 1, "dog": 1}


LINES_AND_POINTS = """
  <image id="0" name="a.jpg" subset="Train" width="64" height="48">
    <box label="cat" source="manual" occluded="0" xtl="6.40" ytl="4.80" xbr="32.00" ybr="24.00" z_order="0"/>
    <polyline label="cat" source="manual" occluded="0" points="1,1;5,5;9,2" z_order="0"/>
    <points label="dog" source="manual" occluded="0" points="10,10" z_order="0"/>
    <skeleton label="cat" source="manual" z_order="0">
      <points label="nose" source="manual" outside="0" occluded="0" points="3,3"/>
    </skeleton>
  </image>
  <image id="1" name="b.jpg" subset="Train" width="64" height="48">
    <points label="dog" source="manual" occluded="0" points="20,20;30,30" z_order="0"/>
  </image>
"""


def test_lines_and_points_are_left_out_by_object_not_by_image(tmp_path, capsys):
    """A task whose image holds a polyline, points and a skeleton beside a box: the image is
    written with its box, each shape that is no box counted by name as a row discarded on
    purpose, in the console, summary.json and report.html; an image holding only points
    is not written (it is not an image without objects)."""
    for seed, name in enumerate(("a.jpg", "b.jpg")):
        (tmp_path / name).write_bytes(encode(photo_like(64, 48, seed), "JPEG"))
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                str(annotations(tmp_path, LINES_AND_POINTS)),
                "--label_mode",
                "detection",
                "--output_dir",
                str(output),
            ]
        )
        == 0
    )
    summary = json.loads((output / "summary.json").read_text())
    assert summary["objects_left_out"] == {"points": 2, "polyline": 1, "skeleton": 1}
    assert (
        summary["rows_read"],
        summary["rows_in_examples"],
        summary["examples_written"],
        summary["rows_dead_lettered"],
        summary["rows_discarded"],
        summary["accounted"],
    ) == (5, 1, 1, 0, 4, True)
    assert summary["splits"]["train"]["labels"] == {"cat": 1}
    out = capsys.readouterr().out
    assert (
        "rows read 5 = 1 example written + 0 dead-lettered (0.0%) + 4 discarded (4 "
        "objects left out)" in out
    )
    assert (
        "objects left out (shapes the examples cannot hold; their images are written "
        "with their other objects): points 2, polyline 1, skeleton 1" in out
    )
    page = (output / "report.html").read_text()
    assert (
        "polyline <b data-summary='[&#34;objects_left_out&#34;, &#34;polyline&#34;]'>1</b>"
    ) in page


PUBLIC = Path(__file__).parent / "data" / "public" / "cvat"


def test_datumaros_cvat_exports_read_as_cvat_writes_them(tmp_path):
    """datumaro's task export: a box with attributes, a polyline, a polygon with an
    empty label (a partial annotation: left out by itself), points; its project export:
    each image under Train, Validation, Test."""
    task_file = tmp_path / "train.xml"
    shutil.copy(PUBLIC / "datumaro_task_train.xml", task_file)
    found = rows(task_file, RowRules(label_mode="detection"))
    assert [
        row.reason
        if isinstance(row, DeadLetter)
        else row.labels
        if isinstance(row, ManifestRow)
        else row.shape
        for row in found
    ] == [("label1",), "polyline", "polygon without a label", "points"]
    np.testing.assert_allclose(found[0].boxes[0][:4], (0, 2 / 8, 4 / 8, 4 / 8))
    assert found[0].image_size == (8, 8)
    project = tmp_path / "annotations.xml"
    shutil.copy(PUBLIC / "datumaro_project_annotations.xml", project)
    found = rows(project, RowRules(label_mode="detection"))
    boxes = [row for row in found if isinstance(row, ManifestRow)]
    assert [(row.split, row.uri.rsplit("/", 1)[-1], row.labels) for row in boxes] == [
        (split, name, ("label1",))
        for split in ("test", "train", "validation")
        for name in ("img0.jpg", "img1.jpg")
    ]
    np.testing.assert_allclose(boxes[1].boxes[0][:4], (1 / 10, 2 / 10, 6 / 10, 5 / 10))


def test_datumaros_cvat_task_export_with_unlabelled_shapes_converts_end_to_end(tmp_path):
    """End to end on datumaro's public task export: the polygon without a label is left
    out by itself, counted as such, not a missing_label dead letter; img0 is written with
    its box beside its left-out polyline. img1 holds nothing an example can (the unlabelled
    polygon, and points): as any image whose objects are all left out, its rows are
    discarded, counted, and it is not written as an image without objects."""
    shutil.copy(PUBLIC / "datumaro_task_train.xml", tmp_path / "train.xml")
    (tmp_path / "images").mkdir()
    for name, side in (("img0.jpg", 8), ("img1.jpg", 10)):
        (tmp_path / "images" / name).write_bytes(encode(photo_like(side, side, side), "JPEG"))
    output = tmp_path / "out"
    flags = ["--manifest", str(tmp_path / "train.xml"), "--label_mode", "detection"]
    assert run.main([*flags, "--output_dir", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert (
        summary["rows_read"],
        summary["examples_written"],
        summary["rows_dead_lettered"],
        summary["rows_discarded"],
        summary["accounted"],
    ) == (4, 1, 0, 3, True)
    assert summary["objects_left_out"] == {
        "points": 1,
        "polygon without a label": 1,
        "polyline": 1,
    }
    (example,) = read_examples(shard_pattern(output, "train"))
    assert feature(example, "image/source_id").decode().endswith("img0.jpg")
    assert feature(example, "image/object/class/text") == b"label1"


def test_an_image_name_outside_the_xmls_folder_is_a_dead_letter_naming_the_image(tmp_path):
    """`name` stays in the XML's folder (or --image_dir), images/ or not: `..` above it
    and an absolute path elsewhere are path_outside_dataset; the option reads them."""
    (tmp_path / "dataset").mkdir()
    path = annotations(
        tmp_path / "dataset",
        "".join(
            f'<image id="{number}" name="{name}" width="64" height="48"></image>'
            for number, name in enumerate(["images/../a.jpg", "../secret.jpg", "/etc/hostname"])
        ),
    )
    found = rows(path, RowRules(label_mode="detection"))
    assert [row.reason if isinstance(row, DeadLetter) else row.uri for row in found] == [
        str(tmp_path / "dataset" / "a.jpg")
    ] + [reasons.PATH_OUTSIDE_DATASET] * 2
    assert found[1].message == (
        f"image 1: name '../secret.jpg' leaves the dataset's folder {tmp_path / 'dataset'}: "
        "pass --allow_paths_outside_dataset to read files outside it"
    )
    assert all(
        isinstance(row, ManifestRow)
        for row in rows(path, RowRules(label_mode="detection", allow_paths_outside_dataset=True))
    )


@pytest.mark.parametrize("kind", ["task", "job"])
def test_a_task_or_jobs_subset_is_the_split_of_its_images_without_one_of_their_own(kind, tmp_path):
    """CVAT writes a task's (or a job's) subset once, in <meta>; a project's export says
    each image's. `default` declares none (a hashed split)."""
    export = (PUBLIC / "datumaro_task_train.xml").read_text()
    assert "<subset>" not in export and 'subset="' not in export
    for subset, expected in (("Test", {"test"}), ("Validation", {"validation"})):
        path = tmp_path / f"{kind}-{subset}.xml"
        path.write_text(
            export.replace("<task>", f"<{kind}>\n      <subset>{subset}</subset>", 1).replace(
                "</task>", f"</{kind}>", 1
            )
        )
        found = [
            row
            for row in rows(path, RowRules(label_mode="detection"))
            if isinstance(row, ManifestRow)
        ]
        assert found and {row.split for row in found} == expected
    own = annotations(tmp_path, IMAGES.split('  <image id="2"')[0])
    own.write_text(own.read_text().replace("<mode>annotation</mode>", "<subset>Test</subset>"))
    assert [row.split for row in rows(own, RowRules(label_mode="detection"))] == [
        "train",
        "train",
        "validation",
    ]


def test_a_shape_without_a_label_is_left_out_and_its_image_written_with_the_rest(tmp_path):
    for seed, name in enumerate(("a.jpg", "b.jpg")):
        (tmp_path / name).write_bytes(encode(photo_like(64, 48, seed), "JPEG"))
    unlabelled = (
        IMAGES.split('  <image id="2"')[0]
        .replace('<polygon label="dog"', '<polygon label=""')
        .replace('<box label="cat"', '<box label=" "')
    )
    unlabelled = unlabelled.replace(
        "</image>",
        '<box label="dog" source="manual" occluded="0" xtl="1" ytl="1" xbr="9" ybr="9" z_order="0"/></image>',
        1,
    )
    output = tmp_path / "out"
    argv = ["--manifest", str(annotations(tmp_path, unlabelled)), "--label_mode", "detection"]
    assert run.main([*argv, "--output_dir", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert summary["objects_left_out"] == {"box without a label": 1, "polygon without a label": 1}
    assert (summary["rows_read"], summary["examples_written"], summary["rows_dead_lettered"]) == (
        4,
        2,
        0,
    )
    assert summary["splits"]["train"]["labels"] == {"dog": 1}


def test_a_cvat_task_exports_subset_is_the_split_of_every_image(tmp_path):
    """A real CVAT task export (anishgoyal1108/ConcreteNet, app.cvat.ai, 2026): its task's
    `<subset>Train</subset>` in <meta> is the split of all its 48 images, none of which
    says a subset of its own; the 21 with boxes are written with them, the 27 without as
    images without objects, and the one <label> of <meta> declares the ids."""
    export = tmp_path / "annotations.xml"
    shutil.copy(PUBLIC / "concretenet_task_train.xml", export)
    text = export.read_text()
    assert "<subset>Train</subset>" in text and 'subset="' not in text
    for number, name in enumerate(sorted(set(re.findall(r'name="(image\d+\.png)"', text)))):
        image = Image.new("RGB", (2445, 1485), (number, 90, 160))
        (tmp_path / name).write_bytes(encode(image, "PNG", compress_level=1))
    output = tmp_path / "out"
    argv = ["--manifest", str(export), "--label_mode", "detection", "--output_dir", str(output)]
    assert run.main(argv) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert (
        summary["rows_read"],
        summary["rows_in_examples"],
        summary["examples_written"],
        summary["rows_dead_lettered"],
        summary["rows_discarded"],
    ) == (1030 + 27, 1030 + 27, 48, 0, 0)
    assert {split: counts["examples"] for split, counts in summary["splits"].items()} == {
        "train": 48,
        "validation": 0,
        "test": 0,
    }
    assert summary["splits"]["train"]["labels"] == {"rebar": 1030}
    assert summary["vocabulary"]["label"] == ["rebar"]
    assert summary["vocabulary_declared_by"] == f"{export} (<labels>)"
    examples = {
        feature(example, "image/filename"): example
        for example in read_examples(shard_pattern(output, "train"))
    }
    assert len(examples) == 48 and not feature(examples[b"image8.png"], "image/object/bbox/xmin")
    first = examples[b"image10.png"]  # <box label="rebar" xtl="1201.20" ytl="121.59" ...
    assert feature(first, "image/object/class/label") == [1] * 49
    np.testing.assert_allclose(
        [
            feature(first, f"image/object/bbox/{side}")[0]
            for side in ("xmin", "ymin", "xmax", "ymax")
        ],
        (1201.20 / 2445, 121.59 / 1485, 1227.33 / 2445, 237.12 / 1485),
        rtol=1e-6,
    )
