"""Hostile annotation files: memory follows the image, not the annotation.

A mask's declared size, an image's declared canvas and an object's point count are checked
against --max_image_pixels and the image before anything is allocated; YAML aliases are
refused; JSON and YAML nested deeper than documents.MAX_NESTING is an error naming the
file (whole-file formats) or a dead letter naming the line (line formats), never a
RecursionError. Memory findings are measured as a cap (tracemalloc's peak).
"""

import base64
import io
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from conftest import encode, photo_like
from PIL import Image

from image_tfrecords.core.imaging.masks import MAX_KEYPOINTS
from image_tfrecords.core.inputs.boxes import polygon_mask
from image_tfrecords.core.inputs.coco import declared_categories, read_coco
from image_tfrecords.core.inputs.input_format import FileHead
from image_tfrecords.core.inputs.kitti import datumaro_classes
from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import read_manifest
from image_tfrecords.core.inputs.yolo import YoloDataset
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records import documents
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.pipeline import run

DETECTION = RowRules(label_mode="detection")
MB = 2**20


def peak_bytes(action) -> int:
    """The most memory Python allocated while `action()` ran."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# --- YAML aliases -------------------------------------------------------------------------


def alias_bomb(levels: int) -> str:
    """A "billion laughs" data.yaml: each level a list of nine aliases of the one before,
    9**levels strings once expanded, in a few hundred bytes."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [
        f"l{level}: &l{level} [{','.join([f'*l{level - 1}'] * 9)}]" for level in range(1, levels)
    ]
    return "\n".join([*lines, f"names: [*l{levels - 1}]", "train: images/train", ""])


def test_a_yaml_alias_bomb_is_refused_naming_the_file_without_expanding_it(tmp_path):
    """The review's 364-byte data.yaml expanded into a 35 MB class name (3.8 GB in all);
    six levels (9**6 strings, a 4 MB name) show it here."""
    data_yaml = tmp_path / "data.yaml"
    data_yaml.write_text(alias_bomb(6))
    assert len(data_yaml.read_bytes()) < 400

    def load():
        with pytest.raises(ManifestError) as refused:
            YoloDataset.load(str(data_yaml)).names
        assert str(refused.value).startswith(f"{data_yaml}: cannot parse the YAML: ")
        assert "found the alias *l0: aliases are not read" in str(refused.value)

    assert peak_bytes(load) < 1 * MB


def test_yaml_without_aliases_loads_as_safe_load_does():
    text = "path: ../data\nnames:\n  0: person\n  1: bicycle\nkpt_shape: [17, 3]\n"
    assert documents.load_yaml(text) == {
        "path": "../data",
        "names": {0: "person", 1: "bicycle"},
        "kpt_shape": [17, 3],
    }


# --- nesting ------------------------------------------------------------------------------


def test_nesting_up_to_the_limit_is_read_and_one_level_more_is_refused():
    limit = documents.MAX_NESTING
    assert documents.load_json(nested(limit)) == json.loads(nested(limit))
    assert documents.load_yaml(nested(limit)) == json.loads(nested(limit))
    for load in (documents.load_json, documents.load_yaml):
        with pytest.raises(
            (ValueError, documents.yaml.YAMLError), match=f"nest deeper than {limit} levels"
        ):
            load(nested(limit + 1))


@pytest.mark.parametrize("piece", [1, 2, 3, 5, 64 * 1024])
def test_nesting_is_counted_on_the_bytes_wherever_they_are_cut(piece):
    """Brackets, quotes and backslashes inside strings do not count, a piece ending in a
    string or after a backslash included (ijson reads 64 KiB at a time)."""
    tricky = ['[{"\\"', "\\", '\\"]}', 'x"[', "]]]"]

    def document(depth):
        value = tricky  # a level, and one per wrapping, and {"a": ...}
        for level in range(depth - 2):
            value = {'k["': value} if level % 2 else [value, "\\"]
        return json.dumps({"a": value}).encode()

    for depth, deep in ((documents.MAX_NESTING, False), (documents.MAX_NESTING + 1, True)):
        data, scanner = document(depth), documents.NestingScanner()
        fed = lambda: [scanner.feed(data[i : i + piece]) for i in range(0, len(data), piece)]
        if deep:
            with pytest.raises(documents.DocumentError):
                fed()
        else:
            fed()


def coco_nested_in_info(path: Path, depth: int) -> Path:
    path.write_text(
        json.dumps(
            {
                "info": "NESTED",
                "images": [],
                "annotations": [],
                "categories": [{"id": 1, "name": "cat"}],
            }
        ).replace('"NESTED"', nested(depth))
    )
    return path


def test_a_deep_coco_file_is_refused_naming_it_in_bounded_memory(tmp_path):
    """ijson's prefixes grow with the depth squared (3,000 levels: 45 MB): the file is
    refused at the limit's depth instead."""
    coco = coco_nested_in_info(tmp_path / "instances.json", 3000)
    message = f"{coco}: lists and objects nest deeper than {documents.MAX_NESTING} levels"

    def read():
        with pytest.raises(ManifestError, match=message):
            declared_categories(str(coco))
        with pytest.raises(ManifestError, match=message):
            list(read_coco(str(coco), DETECTION, "train"))

    assert peak_bytes(read) < 2 * MB


def test_a_coco_file_that_is_not_json_is_refused_naming_it_not_a_traceback(tmp_path, capsys):
    """ijson's own error escaped as a traceback (a NaN, a file cut short)."""
    coco = tmp_path / "instances.json"
    coco.write_text('{"images": [{"id": 1, "file_name": "a.jpg", "width": NaN}]')
    assert (
        run.main(
            [
                "--manifest",
                f"train={coco}",
                "--label_mode",
                "detection",
                "--output_dir",
                str(tmp_path / "out"),
            ]
        )
        == run.EXIT_USAGE
    )
    assert capsys.readouterr().err.startswith(f"error: {coco}: not JSON: lexical error: ")


def test_a_deep_label_studio_export_is_refused_naming_it(tmp_path):
    export = tmp_path / "export.json"
    task = {"data": {"image": "a.jpg"}, "annotations": []}
    export.write_text(
        json.dumps([task, {**task, "annotations": "NESTED"}]).replace('"NESTED"', nested(3000))
    )
    with pytest.raises(ManifestError, match=f"{export}: lists and objects nest deeper"):
        list(read_manifest(str(export), DETECTION))


def test_a_deep_line_is_a_dead_letter_naming_it_and_the_other_lines_are_read(tmp_path):
    """A Vertex AI JSON Lines line (and a Hugging Face metadata.jsonl line) nested 100,000
    deep raised RecursionError, which failed the whole job."""
    (tmp_path / "a.jpg").write_bytes(encode(photo_like(8, 8, 0), "JPEG"))
    good = json.dumps(
        {"imageGcsUri": str(tmp_path / "a.jpg"), "classificationAnnotation": {"displayName": "cat"}}
    )
    deep = '{"imageGcsUri": "b.jpg", "classificationAnnotation": ' + nested(100_000) + "}"
    manifest = tmp_path / "vertex.jsonl"
    manifest.write_text(f"{good}\n{deep}\n")
    rows = list(read_manifest(str(manifest)))
    assert [row.line for row in rows] == [1, 2]
    assert (rows[1].reason, rows[1].message) == (
        reasons.MALFORMED_ROW,
        "cannot parse the line as JSON: lists and objects nest "
        f"deeper than {documents.MAX_NESTING} levels",
    )


def test_a_deep_hugging_face_metadata_line_is_a_dead_letter(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "a.jpg").write_bytes(encode(photo_like(8, 8, 0), "JPEG"))
    (tmp_path / "train" / "metadata.jsonl").write_text(
        '{"file_name": "a.jpg", "label": ' + nested(100_000) + "}\n"
    )
    (row,) = read_manifest(str(tmp_path / "train" / "metadata.jsonl"))
    assert isinstance(row, DeadLetter) and row.line == 1
    assert f"nest deeper than {documents.MAX_NESTING} levels" in row.message


def test_a_deep_labelme_file_is_a_dead_letter_naming_it(tmp_path):
    labelme = tmp_path / "a.json"
    labelme.write_text(
        '{"version": "5.4.1", "flags": {}, "shapes": ' + nested(100_000) + ', "imagePath": "a.jpg"}'
    )
    (row,) = read_manifest(str(labelme), DETECTION)
    assert (row.manifest, row.reason) == (str(labelme), reasons.INVALID_ANNOTATION)
    assert row.message == (
        f"cannot read the JSON: lists and objects nest deeper than {documents.MAX_NESTING} levels"
    )


def test_a_deep_kitti_meta_file_is_refused_naming_it(tmp_path):
    labels = tmp_path / "train" / "label_2"
    labels.mkdir(parents=True)
    (labels / "000000.txt").write_text("Car 0 0 0 1 1 5 5 0 0 0 0 0 0 0\n")
    meta = tmp_path / "dataset_meta.json"
    meta.write_text('{"label_map": ' + nested(100_000) + "}")
    with pytest.raises(
        ManifestError,
        match=f"{meta}: cannot read datumaro's label_map: lists and objects nest deeper",
    ):
        datumaro_classes(str(labels / "*.txt"))


def test_sniffing_a_deep_file_is_no_recursion_and_no_quadratic_memory(tmp_path):
    """The first 64 KiB are sniffed for a JSON key, a list item, a JSON line."""
    deep = tmp_path / "deep.json"
    deep.write_text(nested(20_000))
    head = FileHead.read(str(deep))

    def sniff():
        assert (head.first_json_key, head.first_list_item, head.first_line_object) == (
            None,
            None,
            None,
        )

    assert peak_bytes(sniff) < 8 * MB


def test_a_deep_manifest_stops_the_run_naming_the_file_not_the_storage(tmp_path, capsys):
    """Deep nesting in the first line was reported as "cannot use the storage"."""
    coco = coco_nested_in_info(tmp_path / "instances.json", 100_000)
    assert (
        run.main(
            [
                "--manifest",
                f"train={coco}",
                "--label_mode",
                "detection",
                "--output_dir",
                str(tmp_path / "out"),
            ]
        )
        == run.EXIT_USAGE
    )
    error = capsys.readouterr().err
    assert error == (
        f"error: {coco}: lists and objects nest deeper than {documents.MAX_NESTING} levels\n"
    )


# --- masks: declared sizes against the image and --max_image_pixels -----------------------

# 12,000 x 12,000: 144 Mpx, over --max_image_pixels' default (Pillow's 89 Mpx); decoded,
# such a mask took 144 MB here (the review's 40,000 x 40,000 took 4-8 GB).
HUGE = 12_000


def coco_with_rle(path: Path, size: tuple[int, int], counts) -> Path:
    width, height = size
    path.write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "a.jpg", "width": width, "height": height}],
                "categories": [{"id": 1, "name": "cat"}],
                "annotations": [
                    {
                        "id": 7,
                        "image_id": 1,
                        "category_id": 1,
                        "bbox": [0, 0, 5, 5],
                        "iscrowd": 1,
                        "segmentation": {"size": [height, width], "counts": counts},
                    }
                ],
            }
        )
    )
    return path


@pytest.mark.parametrize(
    "side, counts",
    [
        (HUGE, [0, HUGE * HUGE]),  # uncompressed run lengths, as crowd annotations hold them
        (100_000, "0" * 8),  # pycocotools' OverflowError failed the whole job
    ],
)
def test_a_coco_rle_on_a_canvas_over_the_limit_is_a_dead_letter_before_decoding(
    tmp_path, side, counts
):
    coco = coco_with_rle(tmp_path / "instances.json", (side, side), counts)

    def read():
        return list(read_coco(str(coco), DETECTION, "train"))

    rows = []
    assert peak_bytes(lambda: rows.extend(read())) < 2 * MB
    (row,) = rows
    assert (row.line, row.reason) == (1, "decompression_bomb")
    assert row.message == (
        f"annotation id 7: image id 1: the declared image size {side}x{side} "
        "exceeds the limit of 89478485 pixels (--max_image_pixels)"
    )


def test_the_declared_canvas_follows_max_image_pixels(tmp_path):
    coco = coco_with_rle(tmp_path / "instances.json", (100, 100), [0, 100 * 100])
    (row,) = read_coco(str(coco), RowRules(label_mode="detection", max_pixels=9_999), "train")
    assert row.reason == "decompression_bomb"
    (row,) = read_coco(str(coco), RowRules(label_mode="detection", max_pixels=10_000), "train")
    assert row.boxes[0].mask.counts == (0, 100 * 100)


def cvat_with_mask(path: Path, canvas: int, mask: int) -> Path:
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<annotations><version>1.1</version>'
        f'<image id="0" name="a.jpg" width="{canvas}" height="{canvas}">'
        f'<mask label="cat" source="manual" occluded="0" rle="0,{mask * mask}" '
        f'left="0" top="0" width="{mask}" height="{mask}" z_order="0"></mask>'
        "</image></annotations>\n"
    )
    return path


@pytest.mark.parametrize(
    "canvas, reason, message",
    [
        (
            100,
            reasons.SIZE_MISMATCH,
            f"image 0: <mask>: the mask is {HUGE}x{HUGE} pixels, which "
            "does not fit the image declared 100x100",
        ),
        (
            HUGE,
            "decompression_bomb",
            f"image 0: the declared image size {HUGE}x{HUGE} "
            "exceeds the limit of 89478485 pixels (--max_image_pixels)",
        ),
    ],
)
def test_a_cvat_mask_larger_than_its_image_is_a_dead_letter_before_allocating(
    tmp_path, canvas, reason, message
):
    cvat = cvat_with_mask(tmp_path / "annotations.xml", canvas, HUGE)
    rows = []
    assert peak_bytes(lambda: rows.extend(read_manifest(str(cvat), DETECTION))) < 2 * MB
    (row,) = rows
    assert (row.reason, row.message) == (reason, message)


def test_a_labelme_mask_larger_than_its_image_is_a_dead_letter_before_decoding(tmp_path):
    """The mask PNG's own size is read from its header; 6,000 x 6,000 of 1-bit pixels is a
    few kilobytes of PNG and 72 MB decoded."""
    png = io.BytesIO()
    Image.new("1", (6000, 6000)).save(png, format="PNG")
    mask = {
        "label": "cat",
        "points": [[0, 0], [10, 10]],
        "group_id": None,
        "shape_type": "mask",
        "flags": {},
        "mask": base64.b64encode(png.getvalue()).decode(),
    }
    labelme = tmp_path / "a.json"
    labelme.write_text(
        json.dumps(
            {
                "version": "5.4.1",
                "flags": {},
                "shapes": [mask],
                "imagePath": "a.jpg",
                "imageHeight": 100,
                "imageWidth": 100,
            }
        )
    )
    rows = []
    assert peak_bytes(lambda: rows.extend(read_manifest(str(labelme), DETECTION))) < 2 * MB
    (row,) = rows
    assert (row.reason, row.message) == (
        reasons.SIZE_MISMATCH,
        "object 1: the mask is 6000x6000 pixels, which does not fit the image declared 100x100",
    )


# --- polygons and keypoints: point counts and outlines against the image -----------------


def coco_with_segmentation(path: Path, segmentation, keypoints=None) -> Path:
    annotation = {
        "id": 7,
        "image_id": 1,
        "category_id": 1,
        "bbox": [0, 0, 5, 5],
        "segmentation": segmentation,
    }
    if keypoints is not None:
        annotation["keypoints"] = keypoints
    path.write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "a.jpg", "width": 1000, "height": 1000}],
                "categories": [{"id": 1, "name": "cat"}],
                "annotations": [annotation],
            }
        )
    )
    return path


def zigzag(points: int, far: float) -> list[float]:
    """A polygon running between x = 0 and x = `far`, down a 1000-pixel image: its outline
    `points` * `far` pixels long."""
    return [
        value for number in range(points) for value in (far * (number % 2), 1000 * number / points)
    ]


@pytest.mark.parametrize(
    "polygon, message",
    [
        # pycocotools walked 100 edges of 10,000,000 pixels: 50 GB.
        (
            zigzag(100, 1e7),
            "a polygon's point lies farther outside the image than the image's own width or height",
        ),
        # 10,000 edges across a 1000-pixel image: 500 MB.
        (
            zigzag(10_000, 1000),
            "the object's polygons are 10000 times the image's side long, "
            "more than the 100 a mask may draw",
        ),
    ],
)
def test_a_polygon_whose_outline_does_not_follow_the_image_is_a_dead_letter(
    tmp_path, polygon, message
):
    coco = coco_with_segmentation(tmp_path / "instances.json", [polygon])
    (row,) = read_coco(str(coco), DETECTION, "train")
    assert (row.reason, row.message) == (reasons.INVALID_MASK, f"annotation id 7: {message}")


def test_a_polygon_coordinate_that_is_no_number_is_a_dead_letter():
    """CVAT's points="nan,1;..." are floats; pycocotools would cast NaN to an int."""
    polygon = [(0.0, 0.0), (10.0, 0.0), (float("nan"), 10.0)]
    assert polygon_mask([polygon], (1000, 1000), DETECTION) == (
        reasons.INVALID_MASK,
        "a polygon's coordinate is not a number",
    )


DRAW_PEAK = """
import resource, sys
from image_tfrecords.core.imaging.masks import mask_png
from image_tfrecords.core.records.records import Mask
polygons = eval(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
mask_png(Mask(1000, 1000, polygons), 2000, 2000)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.parametrize(
    "polygons",
    [
        "(tuple(float(v) for n in range(100) for v in (1000 * (n % 2), 10 * n)),)",  # the limit
        # 200 polygons of one object: decoded apart, 200 masks of 2000 x 2000 (800 MB).
        "tuple((0.0, 5.0 * n, 10.0, 5.0 * n, 10.0, 5.0 * n + 4) for n in range(200))",
    ],
)
def test_drawing_the_polygons_an_object_may_have_takes_memory_of_the_images_order(polygons):
    """ru_maxrss of a child process: pycocotools allocates outside Python's allocator."""
    grown = subprocess.run(
        [sys.executable, "-c", DRAW_PEAK, polygons],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": "."},
    ).stdout
    assert int(grown) < 64 * MB


def test_an_image_whose_padded_keypoints_are_over_the_limit_is_a_dead_letter(tmp_path):
    """One object of 1,000 keypoints beside 150 of one (issue 55: 30,000 such objects took
    over 2 GB): every object would be padded to 1,000 points, 151,000 in all, so the image
    is a dead letter before any padding is allocated; another image converts."""
    for name in ("a.jpg", "b.jpg"):
        (tmp_path / name).write_bytes(encode(photo_like(100, 100, 3), "JPEG"))

    def person(number, image, points):
        return {
            "id": number,
            "image_id": image,
            "category_id": 1,
            "bbox": [10, 10, 20, 20],
            "keypoints": [15, 15, 2] * points,
            "num_keypoints": points,
        }

    annotations = [person(1, 1, MAX_KEYPOINTS)]
    annotations += [person(2 + n, 1, 1) for n in range(150)]
    annotations += [person(500, 2, 3)]
    (tmp_path / "instances.json").write_text(
        json.dumps(
            {
                "images": [
                    {"id": 1, "file_name": "a.jpg", "width": 100, "height": 100},
                    {"id": 2, "file_name": "b.jpg", "width": 100, "height": 100},
                ],
                "categories": [{"id": 1, "name": "person"}],
                "annotations": annotations,
            }
        )
    )
    output = tmp_path / "out"
    code = run.main(
        [
            "--manifest",
            f"train={tmp_path / 'instances.json'}",
            "--label_mode",
            "detection",
            "--output_dir",
            str(output),
            "--max_error_fraction",
            "1",
        ]
    )
    assert code == 0
    letters = [
        json.loads(line)
        for errors in output.glob("errors-*.jsonl")
        for line in errors.read_text().splitlines()
    ]
    assert {(letter["reason"], letter["message"]) for letter in letters} == {
        (
            reasons.INVALID_KEYPOINTS,
            "151 objects x 1,000 keypoints (every object is padded to the most any has) is "
            "151,000 points, more than the 100,000 one image may hold",
        )
    }
    assert len(letters) == 151  # a row per object, each dead-lettered with its image
    assert json.loads((output / "summary.json").read_text())["examples_written"] == 1


def test_keypoints_beyond_the_limit_are_a_dead_letter(tmp_path):
    """Every object of an example is padded to the most keypoints any has."""
    coco = coco_with_segmentation(
        tmp_path / "instances.json", None, [0, 0, 0] * (MAX_KEYPOINTS + 1)
    )
    (row,) = read_coco(str(coco), DETECTION, "train")
    assert (row.reason, row.message) == (
        reasons.INVALID_KEYPOINTS,
        "annotation id 7: "
        f"{MAX_KEYPOINTS + 1} keypoints, more than the "
        f"{MAX_KEYPOINTS} an object may have",
    )
