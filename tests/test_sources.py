"""Manifest formats at parse level: the registry, --manifest SPLIT=PATH, --image_dir, the
Object Detection API's pixel CSV, COCO instances JSON and Pascal VOC XML."""

import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from conftest import voc_annotation

from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import (
    ManifestSource,
    check_sources,
    find_manifests,
    read_source,
    split_and_path,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.chunks import RowChunk
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import Box, ManifestRow
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.pipeline import run
from image_tfrecords.transforms.rows import SurveyRows

DETECTION = RowRules(label_mode="detection")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def read(path, rules=DETECTION, split=None):
    (source,) = find_manifests([f"{split}={path}" if split else str(path)])
    return list(read_source(source, rules))


def test_find_manifests_expands_globs_and_names_what_is_missing(tmp_path):
    write(tmp_path / "a.csv", "train,a.jpg,cat\n")
    write(tmp_path / "b.csv", "train,b.jpg,cat\n")
    assert find_manifests([str(tmp_path / "*.csv"), str(tmp_path / "a.csv")]) == [
        ManifestSource(str(tmp_path / "a.csv"), "csv"),
        ManifestSource(str(tmp_path / "b.csv"), "csv"),
    ]
    with pytest.raises(ManifestError, match="manifest not found: .*nope.csv"):
        find_manifests([str(tmp_path / "nope.csv")])
    with pytest.raises(ManifestError, match="manifest not found: train=.*nope.csv"):
        find_manifests([f"train={tmp_path / 'nope.csv'}"])


def test_split_path_needs_a_split_name_before_the_first_equals_sign():
    assert split_and_path("train=/d/m.csv") == ("train", "/d/m.csv")
    assert split_and_path("VAL=/d/m.csv") == ("validation", "/d/m.csv")
    assert split_and_path("Dev=gs://b/m.csv") == ("validation", "gs://b/m.csv")
    assert split_and_path("gs://b/x=1/m.csv") == (None, "gs://b/x=1/m.csv")
    assert split_and_path("/d/key=train/m.csv") == (None, "/d/key=train/m.csv")
    assert split_and_path("holdout=/d/m.csv") == (None, "holdout=/d/m.csv")


def test_each_format_is_found_by_its_path_and_a_few_bytes(tmp_path):
    coco = write(
        tmp_path / "instances.json",
        json.dumps({"info": {}, "images": [], "annotations": [], "categories": []}, indent=2),
    )
    vertex = write(tmp_path / "import.json", json.dumps({"imageGcsUri": "a.jpg"}) + "\n")
    write(tmp_path / "voc" / "Annotations" / "1.xml", "<annotation/>")
    write(tmp_path / "labelimg" / "a.xml", "<annotation/>")
    formats = {
        source.path: source.format
        for source in find_manifests(
            [coco, vertex, str(tmp_path / "voc"), str(tmp_path / "labelimg")]
        )
    }
    assert formats == {
        coco: "coco",
        vertex: "vertex_jsonl",
        str(tmp_path / "voc" / "Annotations" / "*.xml"): "pascal_voc",
        str(tmp_path / "labelimg" / "*.xml"): "pascal_voc",
    }


def test_a_file_two_formats_recognise_is_refused_until_input_format_names_one(tmp_path, capsys):
    """One line of JSON whose first key is COCO's and which holds Vertex AI's imageGcsUri:
    either reading would be a guess."""
    both = write(
        tmp_path / "both.json",
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "a.jpg", "width": 4, "height": 4}],
                "imageGcsUri": "a.jpg",
                "classificationAnnotation": {"displayName": "cat"},
            }
        )
        + "\n",
    )
    with pytest.raises(
        ManifestError,
        match=r"both.json could be read as a Vertex AI JSON "
        r"Lines import file or as a COCO instances JSON file: name its format "
        r"with --input_format \(vertex_jsonl or coco\)",
    ):
        find_manifests([both])
    assert run.main(["--manifest", both, "--output_dir", str(tmp_path / "o")]) == 2
    assert "--input_format" in capsys.readouterr().err
    (vertex,) = find_manifests([both], input_format="vertex_jsonl")
    assert [row.labels for row in read_source(vertex, RowRules())] == [("cat",)]
    (coco,) = find_manifests([both], input_format="coco")
    assert [row.uri for row in read_source(coco, DETECTION)] == [str(tmp_path / "a.jpg")]


def test_input_format_overrides_the_name_and_is_refused_for_an_image_folder(tmp_path, capsys):
    """A CSV manifest named .json (a name sniffing would read as JSON), read as CSV."""
    manifest = write(tmp_path / "rows.json", "TRAIN,a.jpg,cat\n")
    assert find_manifests([manifest])[0].format == "vertex_jsonl"
    (source,) = find_manifests([manifest], input_format="csv")
    assert [row.labels for row in read_source(source, RowRules())] == [("cat",)]
    assert (
        run.main(
            [
                "--image_folder",
                str(tmp_path),
                "--input_format",
                "csv",
                "--output_dir",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "--input_format names the format of a --manifest" in capsys.readouterr().err


def test_box_only_formats_need_detection_mode_before_the_job(tmp_path, capsys):
    coco = write(tmp_path / "instances.json", '{"images": [], "annotations": []}')
    xml = write(tmp_path / "a.xml", "<annotation/>")
    for path, title in ((coco, "COCO"), (xml, "Pascal VOC")):
        with pytest.raises(ManifestError, match=f"{title}.*pass --label_mode detection"):
            check_sources(find_manifests([path]), RowRules())
        assert run.main(["--manifest", path, "--output_dir", str(tmp_path / "o")]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("error: ") and "--label_mode detection" in line


def test_survey_rows_counts_rows_dead_letters_and_discarded_rows_of_every_chunk(tmp_path):
    first = write(tmp_path / "one.csv", "train,a.jpg,cat\nbad,b.jpg,cat\nDISCARD,d.jpg,cat\n")
    second = write(tmp_path / "two.csv", "image_uri,label,split\nc.jpg,dog,test\n")
    chunks = [RowChunk(source) for source in find_manifests([first, second])]
    with TestPipeline() as p:
        surveys = p | beam.Create(chunks) | SurveyRows(RowRules(), RunSettings())
        assert_that(
            surveys
            | "Counts"
            >> beam.Map(
                lambda s: (
                    s.rows,
                    [(d.line, d.reason) for d in s.dead_letters],
                    s.discarded,
                    s.rows_read,
                )
            ),
            equal_to([({"train": 1}, [(2, reasons.INVALID_SPLIT)], 1, 3), ({"test": 1}, [], 0, 1)]),
        )


def test_split_path_gives_rows_its_split_and_refuses_rows_naming_another(tmp_path):
    path = write(tmp_path / "m.csv", "train,a.jpg,cat\nTEST,b.jpg,dog\n,c.jpg,cat\n")
    rows = read(path, RowRules(), split="train")
    assert [(item.split, type(item)) for item in rows] == [
        ("train", ManifestRow),
        ("TEST", DeadLetter),
        ("train", ManifestRow),
    ]
    assert rows[1].reason == reasons.INVALID_SPLIT and "TRAIN=PATH" in rows[1].message
    jsonl = write(
        tmp_path / "m.jsonl",
        json.dumps({"imageGcsUri": "a.jpg", "classificationAnnotation": {"displayName": "cat"}})
        + "\n",
    )
    assert [row.split for row in read(jsonl, RowRules(), split="val")] == ["validation"]


def test_image_dir_replaces_the_manifests_folder_for_relative_names(tmp_path):
    path = write(tmp_path / "m.csv", "train,a.jpg,cat\ntrain,/abs/b.jpg,cat\n")
    rows = read(path, RowRules(image_dir="/images"))
    assert [row.uri for row in rows] == ["/images/a.jpg", "/abs/b.jpg"]


API_CSV = """filename,width,height,class,xmin,ymin,xmax,ymax
a.jpg,640,480,cat,64,48,320,240
a.jpg,640,480,dog,0,0,640,480
b.jpg,640,480,cat,10,10,700,20
b.jpg,640,zero,cat,10,10,20,20
b.jpg,640,480,cat,30,10,20,20
"""


def test_object_detection_api_csv_boxes_are_pixels_of_the_declared_size(tmp_path):
    rows = read(write(tmp_path / "train_labels.csv", API_CSV))
    assert [(row.labels, row.boxes, row.image_size) for row in rows[:2]] == [
        (("cat",), (Box(0.1, 0.1, 0.5, 0.5),), (640, 480)),
        (("dog",), (Box(0.0, 0.0, 1.0, 1.0),), (640, 480)),
    ]
    assert [row.reason for row in rows[2:]] == [
        reasons.BOX_OUT_OF_RANGE,
        reasons.INVALID_SIZE,
        reasons.EMPTY_BOX,
    ]
    assert "outside the declared 640x480 image" in rows[2].message


COCO = {
    # annotations before images: the reader must not depend on the keys' order
    "annotations": [
        {"id": 11, "image_id": 1, "category_id": 3, "bbox": [32, 24, 64, 48], "iscrowd": 0},
        {"id": 12, "image_id": 1, "category_id": 5, "bbox": [0, 0, 160, 120], "iscrowd": 1},
        {"id": 13, "image_id": 1, "category_id": 99, "bbox": [0, 0, 10, 10]},
        {"id": 14, "image_id": 42, "category_id": 3, "bbox": [0, 0, 10, 10]},
        {"id": 15, "image_id": 1, "category_id": 3, "bbox": [0, 0, 10]},
        {"id": 16, "image_id": 3, "category_id": 3, "bbox": [0, 0, 10, 10]},
    ],
    "images": [
        {"id": 1, "file_name": "a.jpg", "width": 160, "height": 120},
        {"id": 2, "file_name": "b.jpg", "width": 160, "height": 120},
        {"id": 3, "file_name": "c.jpg", "width": 0, "height": 120},
    ],
    "categories": [{"id": 3, "name": "cat"}, {"id": 5, "name": "person"}],
}


def test_coco_annotations_become_box_rows_and_bad_ones_name_their_id(tmp_path):
    rows = read(write(tmp_path / "instances_val.json", json.dumps(COCO)), split="val")
    cat, crowd, *dead, empty = rows
    assert (cat.labels, cat.boxes, cat.image_size, cat.uri, cat.split, cat.line) == (
        ("cat",),
        (Box(0.2, 0.2, 0.6, 0.6),),
        (160, 120),
        str(tmp_path / "a.jpg"),
        "validation",
        1,
    )
    assert crowd.boxes == (Box(0.0, 0.0, 1.0, 1.0, is_crowd=1),)
    assert [(d.reason, d.message.split(":")[0]) for d in dead] == [
        (reasons.UNKNOWN_CATEGORY_ID, "annotation id 13"),
        (reasons.UNKNOWN_IMAGE_ID, "annotation id 14"),
        (reasons.INVALID_BOX, "annotation id 15"),
        (reasons.INVALID_SIZE, "annotation id 16"),
    ]
    assert (empty.uri, empty.labels, empty.boxes) == (str(tmp_path / "b.jpg"), (), ())


def test_vocdevkit_splits_come_from_image_sets_and_images_from_jpegimages(tmp_path):
    root = tmp_path / "VOCdevkit" / "VOC2007"
    write(
        root / "Annotations" / "000001.xml",
        voc_annotation(
            "000001.jpg",
            (200, 100),
            [("dog", (20, 10, 120, 90), 0, 1), ("person", (0, 0, 200, 100), 1, 0)],
        ),
    )
    write(root / "Annotations" / "000002.xml", voc_annotation("000002.jpg", (200, 100), []))
    write(
        root / "Annotations" / "000003.xml",  # in no list
        voc_annotation("000003.jpg", (200, 100), []),
    )
    write(root / "Annotations" / "000004.xml", "<annotation><filename>x")
    write(root / "ImageSets" / "Main" / "train.txt", "000001\n000004\n")
    write(root / "ImageSets" / "Main" / "val.txt", "000002\n")
    dog, person, empty, broken = read(root)
    assert (dog.split, dog.uri, dog.labels, dog.boxes, dog.image_size) == (
        "train",
        str(root / "JPEGImages" / "000001.jpg"),
        ("dog",),
        (Box(0.1, 0.1, 0.6, 0.9, truncated=1),),
        (200, 100),
    )
    assert person.boxes == (Box(0.0, 0.0, 1.0, 1.0, difficult=1),)
    assert (empty.split, empty.boxes, empty.manifest) == (
        "validation",
        (),
        str(root / "Annotations" / "000002.xml"),
    )
    assert (broken.reason, broken.manifest) == (
        reasons.INVALID_ANNOTATION,
        str(root / "Annotations" / "000004.xml"),
    )
    # SPLIT=PATH reads only that split's list, and needs it.
    assert [row.labels for row in read(root, split="val")] == [()]
    with pytest.raises(ManifestError, match="Main has no list of test .*it lists train.txt, val"):
        check_sources(find_manifests([f"test={root}"]), DETECTION)
    # datumaro's and CVAT's project exports name each list after its subset; CVAT's
    # default.txt (a task without a subset), trainval.txt and a class's list name no split.
    for name in ("train", "val"):
        (root / "ImageSets" / "Main" / f"{name}.txt").unlink()
    write(root / "ImageSets" / "Main" / "Train.txt", "000001\n000004\n")
    write(root / "ImageSets" / "Main" / "Validation.txt", "000002\n")
    for other in ("default.txt", "trainval.txt", "dog_train.txt"):
        write(root / "ImageSets" / "Main" / other, "000003\n")
    assert [(row.split, row.manifest.rsplit("/", 1)[-1]) for row in read(root)] == [
        ("train", "000001.xml"),
        ("train", "000001.xml"),
        ("validation", "000002.xml"),
        ("train", "000004.xml"),
    ]


def test_labelimg_xml_beside_its_image_or_under_image_dir(tmp_path):
    path = write(
        tmp_path / "photos" / "cat.xml",
        voc_annotation("cat.jpg", (200, 100), [("cat", (0, 0, 50, 50), 0, 0)]),
    )
    write(tmp_path / "photos" / "nosize.xml", "<annotation><filename>n.jpg</filename></annotation>")
    row, nosize = read(tmp_path / "photos" / "*.xml", split="test")
    assert (row.uri, row.split, row.boxes) == (
        str(tmp_path / "photos" / "cat.jpg"),
        "test",
        (Box(0.0, 0.0, 0.25, 0.5),),
    )
    assert nosize.reason == reasons.INVALID_ANNOTATION and "<size>" in nosize.message
    (moved,) = read(path, RowRules(label_mode="detection", image_dir="/pictures"))
    assert moved.uri == "/pictures/cat.jpg"


def test_the_python_api_takes_a_voc_folder_as_a_manifest_not_an_image_folder(tmp_path):
    import image_tfrecords

    write(tmp_path / "labels" / "a.xml", voc_annotation("a.jpg", (10, 10), []))
    with pytest.raises(ValueError, match="Pascal VOC .* pass --label_mode detection"):
        image_tfrecords.convert(str(tmp_path / "labels"), str(tmp_path / "out"))


def test_an_image_listed_twice_in_a_split_gives_its_objects_once(tmp_path):
    """COCO, CVAT, Label Studio and Hugging Face list an image once with all its objects:
    a second entry would add them again to the one example. In another split it is the
    image's example there (a leak, which the copies report names)."""
    coco = write(
        tmp_path / "coco.json",
        json.dumps(
            {
                "images": [
                    {"id": 1, "file_name": "a.jpg", "width": 10, "height": 10},
                    {"id": 2, "file_name": "a.jpg", "width": 10, "height": 10},
                ],
                "annotations": [
                    {"id": 7, "image_id": 1, "category_id": 1, "bbox": [1, 1, 2, 2]},
                    {"id": 8, "image_id": 2, "category_id": 1, "bbox": [1, 1, 2, 2]},
                ],
                "categories": [{"id": 1, "name": "cat"}],
            }
        ),
    )
    hf = write(
        tmp_path / "hf" / "metadata.jsonl",
        "".join(
            json.dumps(line) + "\n"
            for line in [
                {"file_name": "a.jpg", "objects": {"bbox": [[1, 1, 2, 2]], "categories": ["cat"]}},
                {"file_name": "b.jpg", "objects": {"bbox": [], "categories": []}},
                {"file_name": "a.jpg", "objects": {"bbox": [[1, 1, 2, 2]], "categories": ["cat"]}},
            ]
        ),
    )
    label_studio = write(
        tmp_path / "ls.json",
        json.dumps(
            [
                {
                    "id": task,
                    "data": {"image": "a.jpg"},
                    "annotations": [
                        {
                            "result": [
                                {
                                    "id": "r",
                                    "type": "rectanglelabels",
                                    "value": {
                                        "x": 10,
                                        "y": 10,
                                        "width": 20,
                                        "height": 20,
                                        "rectanglelabels": ["cat"],
                                    },
                                }
                            ]
                        }
                    ],
                }
                for task in (1, 2)
            ]
        ),
    )
    cvat = write(
        tmp_path / "cvat.xml",
        "<annotations><version>1.1</version>"
        + "".join(
            f'<image id="{index}" name="a.jpg" subset="{subset}" width="10" height="10">'
            '<box label="cat" xtl="1" ytl="1" xbr="3" ybr="3"/></image>'
            for index, subset in enumerate(("Train", "Train", "Test"))
        )
        + "</annotations>",
    )
    for path, first, repeated in (
        (coco, "image id 1", "annotation id 8: image id 2"),
        (hf, "line 1", "line 3"),
        (label_studio, "task 1", "task 2"),
        (cvat, "image 0", "image 1"),
    ):
        found = read(path, split=None if path == cvat else "train")
        kept = [row for row in found if isinstance(row, ManifestRow) and row.boxes]
        dead = [row for row in found if isinstance(row, DeadLetter)]
        assert len(kept) == (2 if path == cvat else 1), (path, found)  # cvat: Test's too
        assert [row.reason for row in dead] == [reasons.DUPLICATE_ROW], (path, dead)
        assert dead[0].message.startswith(f"{repeated}: the same image as {first} in train")


def test_a_voc_filename_outside_the_dataset_folder_is_a_dead_letter(tmp_path):
    """<filename> stays in the VOCdevkit root, the XML's folder (labelImg) or --image_dir:
    `..` above it or an absolute path elsewhere is path_outside_dataset."""
    root = tmp_path / "VOC2007"
    for name, filename in [("1", "1.jpg"), ("2", "../../secret.jpg"), ("3", "/etc/hostname")]:
        write(
            root / "Annotations" / f"{name}.xml",
            voc_annotation(filename, (10, 10), [("cat", (1, 1, 5, 5), 0, 0)]),
        )
    found = read(root / "Annotations")
    assert [row.reason if isinstance(row, DeadLetter) else row.uri for row in found] == [
        str(root / "JPEGImages" / "1.jpg")
    ] + [reasons.PATH_OUTSIDE_DATASET] * 2
    assert found[1].message == (
        f"<filename> '../../secret.jpg' leaves the dataset's folder "
        f"{root}: pass --allow_paths_outside_dataset to read files "
        "outside it"
    )
    allowed = read(
        root / "Annotations", RowRules(label_mode="detection", allow_paths_outside_dataset=True)
    )
    assert [row.uri for row in allowed] == [
        str(root / "JPEGImages" / "1.jpg"),
        str(tmp_path / "secret.jpg"),
        "/etc/hostname",
    ]
