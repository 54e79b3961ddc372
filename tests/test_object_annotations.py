"""Instance masks and keypoints (core/imaging/masks.py, core/worker/examples.py): written as the
Object Detection API's create_coco_tf_record writes them, following the image when it is
resized or turned upright, with hostile masks and keypoints dead letters; read back by
load(), verify, inspect and TFDS, and drawn over report.html's thumbnails. Semantic
segmentation maps, as DeepLab's build_voc2012_data writes them."""

import io
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, photo_like, printing, read_examples, row_accounting
from PIL import Image
from pycocotools import mask as coco_mask

from image_tfrecords import load
from image_tfrecords.core.imaging.images import ImageRejected, prepare_image
from image_tfrecords.core.imaging.masks import class_map_png
from image_tfrecords.core.imaging.overlays import COLOURS, drawn_thumbnail
from image_tfrecords.core.inputs.rows import RowRules
from image_tfrecords.core.inputs.sources import check_sources, find_manifests, read_source
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.image_settings import ImageSettings
from image_tfrecords.core.records.records import Box, Keypoints, Mask
from image_tfrecords.inspection import inspect_split
from image_tfrecords.pipeline import run
from image_tfrecords.verify import verify

PUBLIC = Path(__file__).parent / "data" / "public" / "coco"


def reference_mask_png(segmentation, iscrowd, height, width):
    """create_coco_tf_record.py --include_masks, step by step: pycocotools' RLE of the
    segmentation at the image's size, decoded, the polygons' union, saved by Pillow."""
    binary = coco_mask.decode(coco_mask.frPyObjects(segmentation, height, width))
    if not iscrowd:
        binary = np.amax(binary, axis=2)
    out = io.BytesIO()
    Image.fromarray(binary).save(out, format="PNG")
    return out.getvalue()


def pixels(png):
    return np.asarray(Image.open(io.BytesIO(png)))


def convert(tmp_path, manifest, *flags, code=0):
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                str(manifest),
                "--label_mode",
                "detection",
                "--output_dir",
                str(output),
                "--overwrite",
                *flags,
            ]
        )
        == code
    )
    return output


def only_example(output):
    (example,) = read_examples(f"{output}/train-*.tfrecord")
    return example.features.feature


def coco_file(
    tmp_path,
    annotations,
    categories=({"id": 1, "name": "cat"},),
    size=(40, 20),
    name="p.jpg",
    image=None,
):
    (tmp_path / name).write_bytes(image or encode(photo_like(*size, 3), "JPEG"))
    path = tmp_path / "instances.json"
    path.write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": name, "width": size[0], "height": size[1]}],
                "annotations": [
                    {"id": number, "image_id": 1, "category_id": 1, "iscrowd": 0, **annotation}
                    for number, annotation in enumerate(annotations, 1)
                ],
                "categories": list(categories),
            }
        )
    )
    return f"train={path}"


def public_coco(tmp_path, name, *flags):
    """One of datumaro's public COCO assets (annotations of b.jpg, 5x10) converted as
    TRAIN: its JSON, and the output."""
    source = json.loads((PUBLIC / name).read_text())
    (tmp_path / "b.jpg").write_bytes(encode(photo_like(5, 10, 1), "JPEG"))
    (tmp_path / name).write_text(json.dumps(source))
    return source, convert(tmp_path, f"train={tmp_path / name}", *flags)


@pytest.fixture(scope="module")
def public_keypoints(tmp_path_factory):
    """datumaro's person keypoints asset converted once (public_coco), for the tests that
    read the same run: its JSON, the output and what the run printed."""
    (source, output), console = printing(
        public_coco,
        tmp_path_factory.mktemp("public_keypoints"),
        "datumaro_person_keypoints_val.json",
    )
    return source, output, console


def test_public_coco_masks_are_the_bytes_create_coco_tf_record_writes(tmp_path):
    """datumaro's COCO asset: a polygon and an uncompressed-RLE crowd mask, on a 5x10 image."""
    source, output = public_coco(tmp_path, "datumaro_instances_val.json")
    feature = only_example(output)
    texts = [text.decode() for text in feature["image/object/class/text"].bytes_list.value]
    by_name = {annotation["category_id"]: annotation for annotation in source["annotations"]}
    names = {category["id"]: category["name"] for category in source["categories"]}
    expected = {
        names[key]: reference_mask_png(value["segmentation"], value["iscrowd"], 10, 5)
        for key, value in by_name.items()
    }
    assert list(feature["image/object/mask"].bytes_list.value) == [expected[text] for text in texts]
    assert list(feature["image/object/is_crowd"].int64_list.value) == [
        1 if text == "b" else 0 for text in texts
    ]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["features"]["image/object/mask"] == {"dtype": "bytes", "list": True}
    assert "image/object/keypoint/x" not in summary["features"]
    assert summary["splits"]["train"]["annotations"] == {"masks": 1}
    assert verify(str(output)).examples["train"] == 1


def test_public_coco_keypoints_are_written_as_create_coco_tf_record_writes_them(public_keypoints):
    """x / width, y / height, the visibilities as they are, num_keypoints per object;
    datumaro's categories name no keypoints, so there is no keypoint/text."""
    source, output, _ = public_keypoints
    feature = only_example(output)
    texts = [text.decode() for text in feature["image/object/class/text"].bytes_list.value]
    names = {category["id"]: category["name"] for category in source["categories"]}
    ordered = sorted(source["annotations"], key=lambda a: texts.index(names[a["category_id"]]))
    points = [value for annotation in ordered for value in annotation["keypoints"]]
    np.testing.assert_array_equal(
        feature["image/object/keypoint/x"].float_list.value,
        np.float32([x / 5 for x in points[0::3]]),
    )
    np.testing.assert_array_equal(
        feature["image/object/keypoint/y"].float_list.value,
        np.float32([y / 10 for y in points[1::3]]),
    )
    assert list(feature["image/object/keypoint/visibility"].int64_list.value) == points[2::3]
    assert list(feature["image/object/keypoint/num"].int64_list.value) == [
        annotation["num_keypoints"] for annotation in ordered
    ]
    assert "image/object/keypoint/text" not in feature
    element = next(iter(load(str(output), "train", batch_size=None)))
    assert element["image/object/mask"].shape == (2, 10, 5)
    assert element["image/object/keypoint/x"].shape == (6,)


def test_named_keypoints_an_object_without_any_and_one_without_a_mask(tmp_path):
    """Every object gets K keypoints (unlabelled zeros where it has none) and a mask (its
    box, filled, where it has none) once one object of the example has them."""
    manifest = coco_file(
        tmp_path,
        [
            {
                "bbox": [4, 2, 20, 10],
                "segmentation": [[4, 2, 24, 2, 24, 12, 4, 12]],
                "keypoints": [10, 5, 2, 0, 0, 0],
                "num_keypoints": 1,
            },
            {"bbox": [20, 10, 10, 10]},
        ],
        categories=[{"id": 1, "name": "cat", "keypoints": ["nose", "tail"]}],
    )
    feature = only_example(convert(tmp_path, manifest))
    assert list(feature["image/object/keypoint/text"].bytes_list.value) == [
        b"nose",
        b"tail",
        b"",
        b"",
    ]
    assert list(feature["image/object/keypoint/visibility"].int64_list.value) == [2, 0, 0, 0]
    assert list(feature["image/object/keypoint/num"].int64_list.value) == [1, 0]
    boxes = np.transpose(
        [
            feature[f"image/object/bbox/{side}"].float_list.value
            for side in ("xmin", "ymin", "xmax", "ymax")
        ]
    )
    without = int(np.argmax(boxes[:, 0]))  # the box at x 20..30
    mask = pixels(feature["image/object/mask"].bytes_list.value[without])
    assert mask.shape == (20, 40)
    ys, xs = np.nonzero(mask)
    assert (xs.min(), xs.max() + 1, ys.min(), ys.max() + 1) == (20, 30, 10, 20)


def test_keypoint_num_is_the_num_keypoints_the_annotation_declares(tmp_path):
    """create_coco_tf_record copies num_keypoints as the annotation gives it, even where it
    is not the count of points with a place (CrowdPose counts its own way); an annotation
    without one gets that count. A crowd's keypoints are written as any object's."""
    manifest = coco_file(
        tmp_path,
        [
            {
                "bbox": [4, 2, 20, 10],
                "keypoints": [10, 5, 2, 12, 6, 1, 0, 0, 0],
                "num_keypoints": 1,
            },
            {"bbox": [20, 10, 10, 10], "keypoints": [22, 12, 1, 0, 0, 0, 25, 15, 2]},
            {
                "bbox": [1, 1, 5, 5],
                "keypoints": [0, 0, 0, 0, 0, 0, 0, 0, 0],
                "num_keypoints": 0,
                "iscrowd": 1,
                "segmentation": {"size": [20, 40], "counts": [21, 5, 774]},
            },
        ],
        categories=[{"id": 1, "name": "cat", "keypoints": ["nose", "eye", "tail"]}],
    )
    output = convert(tmp_path, manifest)
    feature = only_example(output)
    assert list(feature["image/object/is_crowd"].int64_list.value) == [0, 0, 1]
    assert list(feature["image/object/keypoint/num"].int64_list.value) == [1, 2, 0]
    assert verify(str(output)).examples["train"] == 1  # a declared num is no damage


def test_mmposes_crowdpose_file_converts_with_its_declared_counts_and_reads_back(tmp_path):
    """mmpose's public CrowdPose annotations (COCO keypoints: 14 named points, no
    segmentation, a num_keypoints that is not the count of labelled points), converted as
    the docs say: boxes and points / the declared size, num as declared, the points'
    names; verify passes the output."""
    source = json.loads((PUBLIC / "mmpose_crowdpose_test.json").read_text())
    (tmp_path / "mmpose_crowdpose_test.json").write_text(json.dumps(source))
    for image in source["images"]:
        (tmp_path / image["file_name"]).write_bytes(
            encode(photo_like(image["width"], image["height"], 3), "JPEG")
        )
    output = convert(tmp_path, f"train={tmp_path / 'mmpose_crowdpose_test.json'}")
    examples = {
        example.features.feature["image/filename"]
        .bytes_list.value[0]
        .decode(): example.features.feature
        for example in read_examples(f"{output}/train-*.tfrecord")
    }
    names = source["categories"][0]["keypoints"]
    for image in source["images"]:
        feature = examples[image["file_name"]]
        people = [a for a in source["annotations"] if a["image_id"] == image["id"]]
        width, height = image["width"], image["height"]
        assert list(feature["image/object/keypoint/num"].int64_list.value) == [
            person["num_keypoints"] for person in people
        ]
        np.testing.assert_allclose(
            feature["image/object/keypoint/x"].float_list.value,
            [x / width for person in people for x in person["keypoints"][0::3]],
            rtol=1e-6,
        )
        np.testing.assert_allclose(
            feature["image/object/bbox/ymax"].float_list.value,
            [(p["bbox"][1] + p["bbox"][3]) / height for p in people],
            rtol=1e-6,
        )
        assert list(feature["image/object/keypoint/visibility"].int64_list.value) == [
            v for person in people for v in person["keypoints"][2::3]
        ]
        assert [
            name.decode() for name in feature["image/object/keypoint/text"].bytes_list.value
        ] == names * len(people)
    assert verify(str(output)).examples["train"] == 2


def test_an_example_without_masks_beside_one_with_them_reads_back(tmp_path):
    """An example none of whose objects has a mask, in an output whose other examples have
    them (X-AnyLabeling rectangles in one file, a rotated box in another), has no masks:
    verify passes it and load() gives it [0, height, width] masks."""
    for name, size in (("a.jpg", (40, 20)), ("b.jpg", (30, 10))):
        (tmp_path / name).write_bytes(encode(photo_like(*size, 3), "JPEG"))
    path = tmp_path / "instances.json"
    path.write_text(
        json.dumps(
            {
                "images": [
                    {"id": 1, "file_name": "a.jpg", "width": 40, "height": 20},
                    {"id": 2, "file_name": "b.jpg", "width": 30, "height": 10},
                ],
                "annotations": [
                    {
                        "id": 1,
                        "image_id": 1,
                        "category_id": 1,
                        "bbox": [4, 2, 20, 10],
                        "segmentation": [[4, 2, 24, 2, 24, 12, 4, 12]],
                    },
                    {"id": 2, "image_id": 2, "category_id": 1, "bbox": [1, 1, 5, 5]},
                ],
                "categories": [{"id": 1, "name": "cat"}],
            }
        )
    )
    output = convert(tmp_path, f"train={path}")
    assert verify(str(output)).examples["train"] == 2
    masks = {
        tuple(example["image/object/mask"].shape)
        for example in load(str(output), "train", batch_size=None, shuffle=False)
    }
    assert masks == {(1, 20, 40), (0, 10, 30)}
    resized = {
        tuple(example["image/object/mask"].shape)
        for example in load(str(output), "train", batch_size=None, shuffle=False, image_size=8)
    }
    assert resized == {(1, 8, 8), (0, 8, 8)}


def test_a_num_keypoints_that_is_no_count_is_a_dead_letter(tmp_path):
    manifest = coco_file(
        tmp_path,
        [
            {"bbox": [1, 1, 10, 10], "keypoints": [1, 2, 2], "num_keypoints": -1},
            {"bbox": [1, 1, 10, 10], "keypoints": [1, 2, 2], "num_keypoints": "1"},
        ],
    )
    rules = RowRules(label_mode="detection")
    sources = find_manifests([manifest])
    check_sources(sources, rules)
    dead = [row for row in read_source(sources[0], rules) if isinstance(row, DeadLetter)]
    assert [(row.reason, row.line, row.message) for row in dead] == [
        (
            reasons.INVALID_KEYPOINTS,
            line,
            f"annotation id {line}: num_keypoints must be a "
            f"whole number of 0 or more, found {written!r}",
        )
        for line, written in ((1, -1), (2, "1"))
    ]


def test_masks_are_drawn_at_the_written_size_and_turned_with_the_image(tmp_path):
    """--max_side: polygons drawn at the written size, an RLE resized (nearest); an EXIF
    orientation 6 image turned upright: its masks and keypoints turned with it."""
    rle = np.zeros((20, 40), np.uint8)
    rle[2:8, 30:38] = 1
    compressed = coco_mask.encode(np.asfortranarray(rle))["counts"].decode()
    annotations = [
        {"bbox": [2, 2, 20, 12], "segmentation": [[2, 2, 22, 2, 22, 14]]},
        {
            "bbox": [30, 2, 8, 6],
            "iscrowd": 1,
            "segmentation": {"size": [20, 40], "counts": compressed},
            "keypoints": [34, 4, 2],
            "num_keypoints": 1,
        },
    ]
    feature = only_example(convert(tmp_path, coco_file(tmp_path, annotations), "--max_side", "20"))
    crowds = list(feature["image/object/is_crowd"].int64_list.value)
    polygon, crowd = (
        pixels(feature["image/object/mask"].bytes_list.value[crowds.index(flag)]) for flag in (0, 1)
    )
    assert polygon.shape == crowd.shape == (10, 20)
    np.testing.assert_array_equal(
        polygon, pixels(reference_mask_png([[1, 1, 11, 1, 11, 7]], 0, 10, 20))
    )
    np.testing.assert_array_equal(
        crowd, np.asarray(Image.fromarray(rle).resize((20, 10), Image.Resampling.NEAREST))
    )

    turned = tmp_path / "turned"
    turned.mkdir()
    exif = Image.Exif()
    exif[0x0112] = 6  # stored 40x20 sideways; written 20x40, a quarter turn clockwise
    image = encode(photo_like(40, 20, 5), "JPEG", exif=exif.tobytes())
    feature = only_example(convert(turned, coco_file(turned, annotations, image=image)))
    assert (
        feature["image/width"].int64_list.value[0],
        feature["image/height"].int64_list.value[0],
    ) == (20, 40)
    crowd_at = list(feature["image/object/is_crowd"].int64_list.value).index(1)
    np.testing.assert_array_equal(
        pixels(feature["image/object/mask"].bytes_list.value[crowd_at]),
        np.asarray(Image.fromarray(rle).transpose(Image.Transpose.ROTATE_270)),
    )
    np.testing.assert_allclose(  # (x, y) -> (1 - y, x)
        [
            feature["image/object/keypoint/x"].float_list.value[crowd_at],
            feature["image/object/keypoint/y"].float_list.value[crowd_at],
        ],
        [1 - 4 / 20, 34 / 40],
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    "annotation, reason, message",
    [
        ({"segmentation": [[1, 1, 5, 1]]}, reasons.INVALID_MASK, "a polygon needs 3 or more"),
        ({"segmentation": [[1, 1, 5, "x", 5, 5]]}, reasons.INVALID_MASK, "a list of polygons"),
        (
            {"segmentation": {"size": [10, 40], "counts": [800]}},
            reasons.SIZE_MISMATCH,
            "the RLE mask is 40x10 but the image is declared 40x20",
        ),
        (
            {"segmentation": {"size": [20, 40], "counts": [700, 99]}},
            reasons.INVALID_MASK,
            "add up to 799 pixels, not 40x20",
        ),
        (
            {"segmentation": {"size": [20, 40], "counts": 7}},
            reasons.INVALID_MASK,
            "counts must be a string or a list",
        ),
        ({"keypoints": [1, 2, 2, 3]}, reasons.INVALID_KEYPOINTS, "[x, y, visibility] per point"),
        (
            {"keypoints": [1, 2, 3, 0, 0, 0]},
            reasons.INVALID_KEYPOINTS,
            "keypoint 1's visibility is 3",
        ),
        (
            {"keypoints": [0, 0, 0, 41, 2, 1]},
            reasons.INVALID_KEYPOINTS,
            "keypoint 2 (41, 2) is outside the 40x20 image",
        ),
        (
            {"keypoints": [1, 2, 2]},
            reasons.INVALID_KEYPOINTS,
            "1 keypoints, but the category names 2",
        ),
    ],
)
def test_bad_masks_and_keypoints_are_dead_letters_naming_the_annotation(
    annotation, reason, message, tmp_path
):
    manifest = coco_file(
        tmp_path,
        [{"bbox": [1, 1, 10, 10], **annotation}],
        categories=[{"id": 1, "name": "cat", "keypoints": ["a", "b"]}],
    )
    rules = RowRules(label_mode="detection")
    sources = find_manifests([manifest])
    check_sources(sources, rules)
    dead = [row for row in read_source(sources[0], rules) if isinstance(row, DeadLetter)]
    assert [(row.reason, row.line) for row in dead] == [(reason, 1)]
    assert dead[0].message.startswith("annotation id 1: ") and message in dead[0].message


def test_leave_out_writes_the_boxes_alone_and_says_so(public_keypoints, tmp_path, capsys):
    assert "examples with instance masks 1, keypoints 1" in public_keypoints[2]
    _, output = public_coco(
        tmp_path, "datumaro_person_keypoints_val.json", "--leave_out", "masks,keypoints"
    )
    features = json.loads((output / "summary.json").read_text())["features"]
    assert not [key for key in features if "mask" in key or "keypoint" in key]
    assert not [key for key in only_example(output) if "mask" in key or "keypoint" in key]
    out = capsys.readouterr().out
    assert (
        "left out (--leave_out masks,keypoints): the examples hold the boxes without "
        "the input's masks or keypoints" in out
    )
    assert "examples with" not in out
    assert (
        run.main(
            [
                "--manifest",
                f"train={tmp_path / 'datumaro_person_keypoints_val.json'}",
                "--label_mode",
                "detection",
                "--output_dir",
                str(tmp_path / "x"),
                "--leave_out",
                "mask",
            ]
        )
        == 2
    )
    assert "--leave_out 'mask' is not one of masks, keypoints" in capsys.readouterr().err


def test_yolo_polygons_and_pose_lines_convert_end_to_end(tmp_path):
    """A segmentation polygon's mask is pycocotools' of its points times the image size."""
    root = tmp_path / "seg"
    (root / "images" / "train").mkdir(parents=True)
    (root / "labels" / "train").mkdir(parents=True)
    (root / "images" / "train" / "a.jpg").write_bytes(encode(photo_like(40, 20, 2), "JPEG"))
    polygon = [0.1, 0.2, 0.6, 0.25, 0.3, 0.9]
    (root / "labels" / "train" / "a.txt").write_text("0 " + " ".join(map(str, polygon)) + "\n")
    (root / "data.yaml").write_text("train: images/train\nnames: [leaf]\n")
    feature = only_example(convert(tmp_path, root / "data.yaml"))
    scaled = [value * (40 if place % 2 == 0 else 20) for place, value in enumerate(polygon)]
    assert feature["image/object/mask"].bytes_list.value[0] == reference_mask_png(
        [scaled], 0, 20, 40
    )


def test_inspect_writes_each_mask_and_draws_the_objects(tmp_path):
    manifest = coco_file(
        tmp_path,
        [
            {
                "bbox": [4, 2, 20, 10],
                "segmentation": [[4, 2, 24, 2, 24, 12, 4, 12]],
                "keypoints": [30, 15, 2],
                "num_keypoints": 1,
            }
        ],
    )
    output = convert(tmp_path, manifest)
    written = inspect_split(str(output), "train", 1, str(tmp_path / "look"))
    names = [Path(path).name for path in written]
    assert "00000-p-mask-0.png" in names and "00000-p-boxes.png" in names
    mask = pixels((tmp_path / "look" / "00000-p-mask-0.png").read_bytes())
    assert mask[5, 10] == 1 and mask[15, 30] == 0
    image = np.asarray(
        Image.open(io.BytesIO((tmp_path / "look" / "00000-p.jpg").read_bytes())).convert("RGB"),
        np.int16,
    )
    overlay = np.asarray(Image.open(tmp_path / "look" / "00000-p-boxes.png"), np.int16)
    assert np.abs(overlay[7, 12] - image[7, 12]).sum() > 30  # inside the mask: tinted
    assert np.abs(overlay[17, 36] - image[17, 36]).sum() < 10  # outside every object
    records = (tmp_path / "look" / "records.csv").read_text()
    assert "00000-p-mask-0.png" in records


def test_report_thumbnails_show_the_masks_and_keypoints():
    thumbnail = encode(Image.new("RGB", (48, 24), (128, 128, 128)), "JPEG", quality=95)
    box = Box(
        0.0,
        0.0,
        0.5,
        1.0,
        mask=Mask(1.0, 1.0, ((0.0, 0.0, 0.5, 0.0, 0.5, 1.0, 0.0, 1.0),)),
        keypoints=Keypoints((0.75,), (0.5,), (2,)),
    )
    drawn = np.asarray(Image.open(io.BytesIO(drawn_thumbnail(thumbnail, [box], [2]))), np.int16)
    colour = np.array(COLOURS[2])
    tinted = drawn[12, 10]
    assert np.abs(tinted - 128).sum() > 40
    assert np.abs(tinted - colour).sum() < np.abs(np.array([128] * 3) - colour).sum()
    assert np.abs(drawn[12, 36] - colour).sum() < 120  # the keypoint, in the class colour
    assert np.abs(drawn[3, 44] - 128).sum() < 20  # nothing drawn there


def palette_map(indices):
    """A VOC-style map: a palette PNG whose pixels are class indices (255: void)."""
    image = Image.fromarray(np.asarray(indices, np.uint8), "P")
    image.putpalette(
        [
            value
            for index in range(256)
            for value in ((index * 37) % 256, (index * 91) % 256, (index * 53) % 256)
        ]
    )
    return encode(image, "PNG")


def voc_with_maps(root, maps, size=(30, 20), image=None):
    """VOCdevkit/VOC2012 with an image, its XML (<segmented>1) and SegmentationClass map
    per name."""
    for folder in ("Annotations", "JPEGImages", "SegmentationClass"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for seed, (name, data) in enumerate(maps.items()):
        (root / "JPEGImages" / f"{name}.jpg").write_bytes(
            image or encode(photo_like(*size, seed), "JPEG")
        )
        if data is not None:
            (root / "SegmentationClass" / f"{name}.png").write_bytes(data)
        (root / "Annotations" / f"{name}.xml").write_text(
            f"<annotation><filename>{name}.jpg</filename><segmented>1</segmented><size>"
            f"<width>{size[0]}</width><height>{size[1]}</height><depth>3</depth></size>"
            "<object><name>person</name><bndbox><xmin>2</xmin><ymin>2</ymin><xmax>12</xmax>"
            "<ymax>10</ymax></bndbox></object></annotation>"
        )
    return root


def test_voc_segmentation_maps_are_written_as_deeplab_writes_them(tmp_path):
    """The palette's indices, not its colours (DeepLab's remove_gt_colormap), at the written
    size (nearest); read back as height x width class indices."""
    indices = np.zeros((20, 30), np.uint8)
    indices[4:12, 3:20] = 15
    indices[0] = 255
    root = voc_with_maps(tmp_path / "VOC2012", {"a": palette_map(indices)})
    output = convert(tmp_path, f"train={root}")
    feature = only_example(output)
    assert feature["image/segmentation/class/format"].bytes_list.value == [b"png"]
    written = Image.open(
        io.BytesIO(feature["image/segmentation/class/encoded"].bytes_list.value[0])
    )
    assert written.mode == "L"
    np.testing.assert_array_equal(np.asarray(written), indices)
    summary = json.loads((output / "summary.json").read_text())
    assert summary["features"]["image/segmentation/class/encoded"] == {
        "dtype": "bytes",
        "list": False,
    }
    assert summary["splits"]["train"]["annotations"] == {"segmentation": 1}
    assert verify(str(output)).examples["train"] == 1
    element = next(iter(load(str(output), "train", batch_size=None)))
    np.testing.assert_array_equal(element["image/segmentation/class/encoded"], indices)

    resized = convert(tmp_path, f"train={root}", "--max_side", "15")
    np.testing.assert_array_equal(
        pixels(only_example(resized)["image/segmentation/class/encoded"].bytes_list.value[0]),
        np.asarray(Image.fromarray(indices).resize((15, 10), Image.Resampling.NEAREST)),
    )
    left_out = convert(tmp_path, f"train={root}", "--leave_out", "segmentation")
    assert not [key for key in only_example(left_out) if "segmentation" in key]


def test_a_map_drawn_on_the_stored_pixels_is_turned_with_the_image(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # stored 30x20 sideways, written 20x30
    image = encode(photo_like(30, 20, 4), "JPEG", exif=exif.tobytes())
    indices = np.zeros((20, 30), np.uint8)
    indices[2:6, 20:28] = 3
    root = voc_with_maps(tmp_path / "VOC", {"a": palette_map(indices)}, image=image)
    feature = only_example(convert(tmp_path, f"train={root}"))
    np.testing.assert_array_equal(
        pixels(feature["image/segmentation/class/encoded"].bytes_list.value[0]),
        np.asarray(Image.fromarray(indices).transpose(Image.Transpose.ROTATE_270)),
    )


@pytest.mark.parametrize(
    "data, reason, message",
    [
        (
            encode(Image.new("RGB", (30, 20), (128, 0, 0)), "PNG"),
            reasons.INVALID_MASK,
            "its pixels are RGB, not class indices",
        ),
        (
            encode(Image.new("L", (30, 20), 1), "JPEG"),
            reasons.INVALID_MASK,
            "it is a JPEG, whose pixels are not exact class indices",
        ),
        (
            palette_map(np.zeros((10, 30))),
            reasons.SIZE_MISMATCH,
            "it is 30x10 but the image is 30x20",
        ),
        (b"not an image", reasons.INVALID_MASK, "it is not an image"),
    ],
)
def test_a_map_that_cannot_be_one_is_refused_saying_why(data, reason, message):
    image = prepare_image(encode(photo_like(30, 20, 1), "JPEG"), ImageSettings())
    with pytest.raises(ImageRejected) as refused:
        class_map_png(data, image)
    assert (refused.value.reason, refused.value.message[: len(message)]) == (reason, message)


def test_bad_and_missing_maps_are_dead_letters_naming_the_map(tmp_path):
    root = voc_with_maps(
        tmp_path / "VOC",
        {
            "good": palette_map(np.ones((20, 30))),
            "rgb": encode(Image.new("RGB", (30, 20)), "PNG"),
            "missing": None,
        },
    )
    output = convert(tmp_path, f"train={root}", "--max_error_fraction", "1")
    letters = [
        json.loads(line)
        for path in sorted(output.glob("errors-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    found = {Path(letter["uri"]).stem: (letter["reason"], letter["message"]) for letter in letters}
    assert found["rgb"][0] == reasons.INVALID_MASK
    assert found["rgb"][1].startswith(f"the segmentation map {root}/SegmentationClass/rgb.png: ")
    assert found["missing"][0] == "file_not_found"
    assert "SegmentationClass/missing.png" in found["missing"][1]
    assert set(found) == {"rgb", "missing"}


def test_an_rgb_map_of_cvats_voc_export_is_read_through_labelmap_txt(tmp_path, capsys):
    """CVAT's (and datumaro's) Pascal VOC 1.1 export draws SegmentationClass in the colours
    of labelmap.txt (`name:r,g,b::`, background first): each pixel is written as its
    colour's class index, as a palette map's index is; a colour no class has is an
    invalid_mask naming it, and a labelmap.txt whose colours cannot be read is refused
    before the job."""
    cat, dog = (250, 50, 83), (51, 221, 255)
    drawn = np.zeros((20, 30, 3), np.uint8)
    drawn[2:8, 3:12] = cat
    drawn[10:18, 15:25] = dog
    stray = drawn.copy()
    stray[0, 0] = (1, 2, 3)
    root = voc_with_maps(
        tmp_path / "export",
        {"a": encode(Image.fromarray(drawn), "PNG"), "b": encode(Image.fromarray(stray), "PNG")},
    )
    (root / "labelmap.txt").write_text(
        "# label:color_rgb:parts:actions\nbackground:0,0,0::\ncat:250,50,83::\n"
        "dog:51,221,255::\nperson:255,0,0::\n"
    )
    output = convert(tmp_path, f"train={root}", "--max_error_fraction", "1")
    (example,) = read_examples(str(output / "train-*.tfrecord"))
    expected = np.zeros((20, 30), np.uint8)
    expected[2:8, 3:12] = 1
    expected[10:18, 15:25] = 2
    np.testing.assert_array_equal(
        pixels(example.features.feature["image/segmentation/class/encoded"].bytes_list.value[0]),
        expected,
    )
    (letter,) = [
        json.loads(line)
        for path in output.glob("errors-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert letter["message"].endswith("its colour 1,2,3 is no class's in labelmap.txt")
    (root / "labelmap.txt").write_text("background:0,0,0::\ncat:0,0,0::\n")
    convert(tmp_path, f"train={root}", code=run.EXIT_USAGE)
    assert "'cat' has 'background''s colour 0,0,0" in capsys.readouterr().err


def test_a_csv_column_of_type_segmentation(tmp_path):
    indices = np.arange(6 * 8, dtype=np.uint8).reshape(6, 8) % 4
    (tmp_path / "a.jpg").write_bytes(encode(photo_like(8, 6, 2), "JPEG"))
    (tmp_path / "a.png").write_bytes(encode(Image.fromarray(indices), "PNG"))
    (tmp_path / "m.csv").write_text("split,image,label,map\nTRAIN,a.jpg,street,a.png\n")
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                str(tmp_path / "m.csv"),
                "--output_dir",
                str(output),
                "--schema",
                '{"map": "segmentation"}',
            ]
        )
        == 0
    )
    feature = only_example(output)
    np.testing.assert_array_equal(
        pixels(feature["image/segmentation/class/encoded"].bytes_list.value[0]), indices
    )
    assert "map" not in feature and not [key for key in feature if key.startswith("map/")]


def test_file_names_outside_the_dataset_folder_are_dead_letters_naming_the_image(tmp_path):
    """COCO's file_name stays in the JSON's folder (or --image_dir, a bucket's compared as
    its normalised path): `..` above it, an absolute path elsewhere, a URL and a link
    leading out are path_outside_dataset for each of the image's annotations, naming the
    image id and at most 200 characters of the name; --allow_paths_outside_dataset reads
    them all."""
    dataset, secret = tmp_path / "dataset", tmp_path / "secret.jpg"
    secret.write_bytes(b"not an image of the dataset")
    (dataset / "images").mkdir(parents=True)
    (dataset / "images" / "link.jpg").symlink_to(secret)
    names = [
        "images/a.jpg",
        "images/../b.jpg",
        "../secret.jpg",
        str(tmp_path / "other.jpg"),
        "http://169.254.169.254/latest/meta-data",
        "images/link.jpg",
        "../" * 5000 + "x.jpg",
    ]
    path = dataset / "instances.json"
    path.write_text(
        json.dumps(
            {
                "images": [
                    {"id": number, "file_name": name, "width": 4, "height": 4}
                    for number, name in enumerate(names, 1)
                ],
                "annotations": [
                    {
                        "id": number,
                        "image_id": number,
                        "category_id": 1,
                        "iscrowd": 0,
                        "bbox": [0, 0, 2, 2],
                    }
                    for number in range(1, len(names) + 1)
                ],
                "categories": [{"id": 1, "name": "cat"}],
            }
        )
    )

    def outcomes(**rules):
        (source,) = find_manifests([str(path)])
        found = list(read_source(source, RowRules(label_mode="detection", **rules)))
        return found, [row.reason if isinstance(row, DeadLetter) else "read" for row in found]

    found, reasons_found = outcomes()
    outside = reasons.PATH_OUTSIDE_DATASET
    assert reasons_found == ["read", "read", outside, outside, outside, outside, outside]
    assert found[2].message == (
        f"annotation id 3: image id 3: file_name '../secret.jpg' leaves the dataset's "
        f"folder {dataset}: pass --allow_paths_outside_dataset to read files outside it"
    )
    assert len(found[-1].message) < 400 + len(str(dataset))
    assert "(15,005 characters)" in found[-1].message
    assert outcomes(image_dir="gs://bucket/images")[1] == [
        "read",
        "read",
        outside,
        outside,
        outside,
        "read",
        outside,
    ]
    allowed, reasons_found = outcomes(allow_paths_outside_dataset=True)
    assert set(reasons_found) == {"read"} and allowed[2].uri == str(secret)


def test_fastais_coco_tiny_declares_no_image_sizes_and_converts_against_their_own(tmp_path, capsys):
    """fastai's COCO_TINY train.json (URLs.COCO_TINY, as a public repository vendors it):
    its 200 images give only `id` and `file_name` (no width, height, info or licenses), its
    688 annotations only `image_id`, `bbox` and `category_id` (no id, area or iscrowd), in
    pixels of its 128x128 JPEGs, and its 6 categories keep COCO's ids (62 chair to 86
    vase). Laid out as fastai unpacks it (coco_tiny/train.json beside coco_tiny/train/),
    each box is divided by its own image's size, which the console says once; the label
    ids are the categories' ids."""
    root = tmp_path / "coco_tiny"
    (root / "train").mkdir(parents=True)
    coco = root / "train.json"
    coco.write_bytes((PUBLIC / "coco_tiny_train.json").read_bytes())
    data = json.loads(coco.read_text())
    assert not any({"width", "height"} & set(entry) for entry in data["images"])
    for seed, entry in enumerate(data["images"]):
        (root / "train" / entry["file_name"]).write_bytes(
            encode(photo_like(128, 128, seed), "JPEG")
        )
    output = convert(tmp_path, f"train={coco}", "--image_dir", str(root / "train"))
    assert capsys.readouterr().out.count("its images declare no width and height") == 1
    summary = json.loads((output / "summary.json").read_text())
    assert row_accounting(summary) == [688, 200, 688, 0, 0]
    names = {category["id"]: category["name"] for category in data["categories"]}
    assert summary["splits"]["train"]["examples"] == 200
    assert summary["splits"]["train"]["labels"] == {
        "book": 254,
        "chair": 284,
        "couch": 40,
        "remote": 20,
        "tv": 26,
        "vase": 64,
    }
    assert summary["vocabulary_declared_by"] == f"{coco} (categories)"
    assert {
        index + 1: label
        for index, label in enumerate(summary["vocabulary"]["label"])
        if not label.startswith("[")
    } == names
    (first,) = [
        example.features.feature
        for example in read_examples(f"{output}/train-*.tfrecord")
        if example.features.feature["image/filename"].bytes_list.value[0] == b"000000542959.jpg"
    ]
    boxes = [box["bbox"] for box in data["annotations"] if box["image_id"] == 542959]
    assert boxes[0] == [32.52, 86.34, 8.53, 9.41]  # a chair
    assert list(first["image/object/class/label"].int64_list.value) == [62, 86, 86, 62, 62, 62]
    np.testing.assert_allclose(
        [
            first[f"image/object/bbox/{side}"].float_list.value
            for side in ("xmin", "ymin", "xmax", "ymax")
        ],
        np.transpose([(x / 128, y / 128, (x + w) / 128, (y + h) / 128) for x, y, w, h in boxes]),
        rtol=1e-6,
    )
