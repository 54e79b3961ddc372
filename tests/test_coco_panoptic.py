"""COCO panoptic JSON (core/inputs/coco_panoptic.py): told from an instances file,
every segment an object with its box, iscrowd and its pixels in the PNG as its mask."""

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, photo_like, read_examples
from PIL import Image

from image_tfrecords.core.imaging.masks import decode_rle
from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import FORMATS, check_sources, find_manifests, read_source
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.label_map import is_gap
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.pipeline import run

PUBLIC = Path(__file__).parent / "data" / "public" / "coco"
DETECTION = RowRules(label_mode="detection")


def panopticapi_examples(folder: Path) -> Path:
    """panopticapi's sample_data: panoptic_examples.json beside panoptic_examples/*.png,
    and the two images (640x427, 640x360) it declares, made here."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(PUBLIC / "panoptic_examples.json", folder)
    shutil.copytree(PUBLIC / "panoptic_examples", folder / "panoptic_examples")
    for image in json.loads((folder / "panoptic_examples.json").read_text())["images"]:
        (folder / image["file_name"]).write_bytes(
            encode(photo_like(image["width"], image["height"], image["id"] % 7), "JPEG")
        )
    return folder / "panoptic_examples.json"


def rows(path, rules=DETECTION, input_format=None):
    sources = find_manifests([str(path)], input_format)
    check_sources(sources, rules)
    assert [source.format for source in sources] == [input_format or "coco_panoptic"]
    return [row for source in sources for row in read_source(source, rules)]


def segment_ids(png: Path) -> np.ndarray:
    rgb = np.asarray(Image.open(png).convert("RGB"), dtype=np.uint32)
    return rgb[..., 0] + 256 * rgb[..., 1] + 256 * 256 * rgb[..., 2]


def test_panopticapis_examples_give_every_segment_with_its_box_and_pixels(tmp_path):
    path = panopticapi_examples(tmp_path)
    document = json.loads(path.read_text())
    names = {category["id"]: category["name"] for category in document["categories"]}
    found = rows(path)
    segments = [
        (annotation, segment)
        for annotation in document["annotations"]
        for segment in annotation["segments_info"]
    ]
    assert len(found) == len(segments) == 50
    for row, (annotation, segment) in zip(found, segments, strict=True):
        image = next(image for image in document["images"] if image["id"] == annotation["image_id"])
        x, y, width, height = segment["bbox"]
        assert row.labels == (names[segment["category_id"]],)
        assert row.uri == str(tmp_path / image["file_name"])
        np.testing.assert_allclose(
            row.boxes[0][:4],
            (
                x / image["width"],
                y / image["height"],
                (x + width) / image["width"],
                (y + height) / image["height"],
            ),
        )
        assert row.boxes[0].is_crowd == segment["iscrowd"]
        pixels = decode_rle(row.boxes[0].mask)
        # The segment's area is its pixel count in the PNG: the mask is those pixels.
        assert pixels.sum() == segment["area"]
        ids = segment_ids(tmp_path / "panoptic_examples" / annotation["file_name"])
        assert np.array_equal(pixels.astype(bool), ids == segment["id"])
    assert {row.labels[0] for row in found} >= {"person", "sky-other-merged"}  # thing, stuff


def test_a_panoptic_file_converts_end_to_end_with_masks_and_crowds(tmp_path):
    path = panopticapi_examples(tmp_path)
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
    examples = {
        example.features.feature["image/filename"].bytes_list.value[0].decode(): (
            example.features.feature
        )
        for example in read_examples(f"{output}/train-*.tfrecord")
    }
    document = json.loads(path.read_text())
    for annotation in document["annotations"]:
        feature = examples[annotation["file_name"].replace(".png", ".jpg")]
        assert list(feature["image/object/is_crowd"].int64_list.value) == [
            segment["iscrowd"] for segment in annotation["segments_info"]
        ]
        masks = feature["image/object/mask"].bytes_list.value
        assert [int(np.asarray(Image.open(io.BytesIO(mask))).sum()) for mask in masks] == [
            segment["area"] for segment in annotation["segments_info"]
        ]


def test_an_instances_file_is_still_instances_and_coco_names_a_panoptic_one(tmp_path):
    (source,) = find_manifests([str(PUBLIC / "datumaro_instances_val.json")])
    assert source.format == "coco"
    path = panopticapi_examples(tmp_path)
    with pytest.raises(
        ManifestError,
        match="is a COCO panoptic file \\(segments_info\\), not "
        "instances: pass --input_format coco_panoptic",
    ):
        check_sources(find_manifests([str(path)], "coco"), DETECTION)


def test_leave_out_masks_reads_no_png_and_a_png_of_another_size_is_dead_lettered(tmp_path):
    path = panopticapi_examples(tmp_path)
    shutil.rmtree(tmp_path / "panoptic_examples")
    kept = rows(path, RowRules(label_mode="detection", leave_out=frozenset({"masks"})))
    assert len(kept) == 50 and all(row.boxes[0].mask is None for row in kept)
    (tmp_path / "panoptic_examples").mkdir()
    for name in ("000000142238.png", "000000439180.png"):
        Image.new("RGB", (64, 48)).save(tmp_path / "panoptic_examples" / name)
    letters = rows(path)
    assert len(letters) == 50
    assert {row.reason for row in letters} == {reasons.SIZE_MISMATCH}
    assert letters[0].message == (
        "annotation of image id 142238: segment id 3937500: the panoptic PNG "
        f"{tmp_path}/panoptic_examples/000000142238.png is 64x48 but the image is declared "
        "640x427"
    )


def test_a_missing_png_dead_letters_its_segments_naming_it(tmp_path):
    path = panopticapi_examples(tmp_path)
    (tmp_path / "panoptic_examples" / "000000439180.png").unlink()
    found = rows(path)
    letters = [row for row in found if not isinstance(row, ManifestRow)]
    assert len(letters) == 32 and {letter.reason for letter in letters} == {reasons.INVALID_MASK}
    assert "cannot read the panoptic PNG" in letters[0].message
    assert "000000439180.png" in letters[0].message


def test_the_categories_declare_the_classes_each_at_its_id(tmp_path):
    path = panopticapi_examples(tmp_path)
    (source,) = find_manifests([str(path)])
    declared = FORMATS["coco_panoptic"].declared_classes(source)
    categories = json.loads(path.read_text())["categories"]
    assert declared.declared_by == f"{path} (categories)"
    assert len(declared.labels) == max(category["id"] for category in categories) == 200
    assert all(declared.labels[category["id"] - 1] == category["name"] for category in categories)
    assert sum(map(is_gap, declared.labels)) == 200 - len(categories) == 67


def test_a_png_outside_the_png_folder_dead_letters_its_segments(tmp_path):
    """An annotation's `file_name` stays in the PNG folder: `../../secret.png` is
    path_outside_dataset for each of its segments."""
    path = panopticapi_examples(tmp_path / "dataset")
    data = json.loads(path.read_text())
    data["annotations"][0]["file_name"] = "../../secret.png"
    path.write_text(json.dumps(data))
    letters = [row for row in rows(path) if not isinstance(row, ManifestRow)]
    assert len(letters) == len(data["annotations"][0]["segments_info"])
    assert {letter.reason for letter in letters} == {reasons.PATH_OUTSIDE_DATASET}
    assert (
        f"the panoptic PNG '../../secret.png' leaves the dataset's folder "
        f"{tmp_path / 'dataset' / 'panoptic_examples'}: pass "
        "--allow_paths_outside_dataset"
    ) in letters[0].message
