"""Folders as people download and export them, given as --image_folder (or --manifest
FOLDER): Kaggle's training_set/test_set, a Hugging Face imagefolder, Label Studio's YOLO
export; and annotation datasets given as class folders, refused naming their format."""

import json
from pathlib import Path

import pytest
import tensorflow_transform as tft
from conftest import before_the_job, encode, feature, photo_like, read_examples

from image_tfrecords.core.inputs.folder import NOT_IN_LABEL_FOLDER, folder_rows
from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import (
    FORMATS,
    check_sources,
    find_manifests,
    read_folder_as,
    read_source,
    relative_files,
    split_and_path,
)
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.pipeline import run

DETECTION = RowRules(label_mode="detection")


def jpeg(path, seed, size=(24, 18)):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(photo_like(*size, seed), "JPEG"))
    return path


def text(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


def convert(*flags):
    """run.main's exit status."""
    return run.main(list(flags))


def split_labels(output, key="image/class/text"):
    """{split: sorted labels of its examples}."""
    return {
        split: sorted(
            feature(example, key).decode()
            for example in read_examples(f"{output}/{split}-*.tfrecord")
        )
        for split in ("train", "validation", "test")
    }


def rows_read(*flags):
    """The rows convert's job would read (conftest.before_the_job), for findings made
    before it: each a ManifestRow whose image is there (no dead letter), the label ids
    pinned before it (None: learnt from TRAIN)."""
    pinned, rows = before_the_job(*flags)
    assert all(isinstance(row, ManifestRow) and Path(row.uri).is_file() for row in rows), rows
    return pinned, rows


def split_labels_read(rows):
    """split_labels of the examples `rows` give: {split: sorted labels of its rows}."""
    return {
        split: sorted(label for row in rows if row.split == split for label in row.labels)
        for split in ("train", "validation", "test")
    }


# --- Kaggle's split folders --------------------------------------------------------------


def test_kaggle_training_set_and_test_set_convert_with_their_splits(tmp_path, capsys):
    """Kaggle's cats-and-dogs layout: every image was dead-lettered not_in_label_folder,
    and the run failed pointing at --vocabulary."""
    root = tmp_path / "dataset"
    for seed, relative in enumerate(
        [
            "training_set/cats/1.jpg",
            "training_set/cats/2.jpg",
            "training_set/dogs/3.jpg",
            "test_set/cats/4.jpg",
            "test_set/dogs/5.jpg",
        ]
    ):
        jpeg(root / relative, seed)
    output = tmp_path / "out"
    assert convert("--image_folder", str(root), "--output_dir", str(output)) == run.EXIT_OK
    out = capsys.readouterr().out
    assert "test_set/ as TEST, training_set/ as TRAIN" in out
    assert split_labels(output) == {
        "train": ["cats", "cats", "dogs"],
        "validation": [],
        "test": ["cats", "dogs"],
    }
    assert [
        label.decode() for label in tft.TFTransformOutput(str(output)).vocabulary_by_name("label")
    ] == ["cats", "dogs"]


def test_a_split_folder_unpacked_inside_its_namesake_reads_as_one(tmp_path):
    """Kaggle's zips unpack training_set/training_set/cats/...: the class is `cats`."""
    for relative in (
        "training_set/training_set/cats/1.jpg",
        "Test_Set/Test_Set/dogs/2.jpg",
        "valid/cats/3.jpg",
    ):
        jpeg(tmp_path / relative, 0)
    rows = sorted(folder_rows(str(tmp_path)), key=lambda row: row.raw)
    assert [(row.split, row.labels) for row in rows] == [
        ("test", ("dogs",)),
        ("train", ("cats",)),
        ("validation", ("cats",)),
    ]


def test_a_folder_named_like_a_split_that_holds_images_is_refused_naming_both_readings(
    tmp_path, capsys
):
    """`test/` could be the TEST split (whose images then need class folders) or a class
    named test: the run says both, and writes nothing."""
    jpeg(tmp_path / "photos" / "test" / "1.jpg", 0)
    jpeg(tmp_path / "photos" / "cat" / "2.jpg", 1)
    assert (
        convert("--image_folder", str(tmp_path / "photos"), "--output_dir", str(tmp_path / "out"))
        == run.EXIT_USAGE
    )
    (line,) = capsys.readouterr().err.splitlines()
    assert "reads two ways: test/ as split folders" in line
    assert "or as classes named like splits" in line


def test_top_folders_that_are_no_split_names_are_refused_naming_the_split_names(tmp_path, capsys):
    """Intel's seg_train/seg_test: no image in ROOT/<label>/<file>. The error names the
    split folder names, not --vocabulary (which the run pointed at when no row was TRAIN)."""
    jpeg(tmp_path / "intel" / "seg_train" / "forest" / "1.jpg", 0)
    jpeg(tmp_path / "intel" / "seg_test" / "sea" / "2.jpg", 1)
    assert (
        convert("--image_folder", str(tmp_path / "intel"), "--output_dir", str(tmp_path / "out"))
        == run.EXIT_USAGE
    )
    err = capsys.readouterr().err
    assert "no top folder (seg_test, seg_train) is a split name" in err
    assert "training_set" in err and "--vocabulary" not in err


@pytest.mark.parametrize(
    "argument, split",
    [
        ("training_set=m.csv", "train"),
        ("valid=m.csv", "validation"),
        ("Dev=m.csv", "validation"),
        ("testing=m.csv", "test"),
        ("seg_train=m.csv", None),
    ],
)
def test_split_equals_path_takes_the_same_split_names_as_folders(argument, split):
    assert split_and_path(argument) == (split, "m.csv" if split else argument)


# --- Hugging Face imagefolder ------------------------------------------------------------


def hf_imagefolder(root, prefix=""):
    """train/ and validation/ (under `prefix`), each with its metadata.jsonl and images."""
    for seed, (split, name, label) in enumerate(
        [("train", "a", "cat"), ("train", "b", "dog"), ("validation", "c", "dog")]
    ):
        folder = root / prefix / split
        jpeg(folder / f"{name}.jpg", seed)
        with (folder / "metadata.jsonl").open("a") as metadata:
            metadata.write(json.dumps({"file_name": f"{name}.jpg", "label": label}) + "\n")
    return root


def test_a_hugging_face_imagefolder_given_as_an_image_folder_reads_its_metadata(tmp_path, capsys):
    """It failed: its split folders hold images, not class folders ("no TRAIN row")."""
    root = hf_imagefolder(tmp_path / "hf")
    output = tmp_path / "out"
    assert convert("--image_folder", str(root), "--output_dir", str(output)) == run.EXIT_OK
    out = capsys.readouterr().out
    assert (
        f"reading {root} as a Hugging Face imagefolder: its metadata.jsonl "
        "(train/metadata.jsonl as TRAIN, validation/metadata.jsonl as VALIDATION)"
    ) in out
    assert split_labels(output) == {"train": ["cat", "dog"], "validation": ["dog"], "test": []}
    summary = json.loads((output / "summary.json").read_text())
    assert summary["image_folder"] == str(root)
    assert sorted(summary["manifests"]) == [
        f"TRAIN={root}/train/metadata.jsonl",
        f"VALIDATION={root}/validation/metadata.jsonl",
    ]


def test_a_hugging_face_imagefolder_given_as_manifest_folder_reads_the_same(tmp_path):
    root = hf_imagefolder(tmp_path / "hf")
    said = []
    sources = find_manifests([str(root)], say=said.append)
    assert [(source.path, source.format, source.split) for source in sources] == [
        (str(root / "train" / "metadata.jsonl"), "hf_imagefolder", "train"),
        (str(root / "validation" / "metadata.jsonl"), "hf_imagefolder", "validation"),
    ]
    assert said == [
        f"reading {root} as a Hugging Face imagefolder: its metadata.jsonl "
        "(train/metadata.jsonl as TRAIN, validation/metadata.jsonl as VALIDATION)"
    ]


def test_the_hubs_data_prefix_and_a_root_metadata_file(tmp_path):
    """data/train/metadata.csv is TRAIN; a metadata file at the root names no split."""
    root = tmp_path / "hub"
    text(root / "data" / "train" / "metadata.csv", "file_name,label\na.jpg,cat\n")
    text(root / "data" / "test" / "metadata.csv", "file_name,label\nb.jpg,dog\n")
    reading = read_folder_as(str(root), relative_files(str(root)))
    assert sorted(
        (source.path[len(str(root)) + 1 :], source.format, source.split)
        for source in reading.sources
    ) == [
        ("data/test/metadata.csv", "hf_imagefolder", "test"),
        ("data/train/metadata.csv", "hf_imagefolder", "train"),
    ]
    nested = tmp_path / "nested"
    text(nested / "pets" / "validation_set" / "metadata.jsonl", '{"file_name": "a.jpg"}\n')
    assert [
        source.split for source in read_folder_as(str(nested), relative_files(str(nested))).sources
    ] == ["validation"]
    flat = tmp_path / "flat"
    text(flat / "metadata.jsonl", '{"file_name": "a.jpg", "label": "cat"}\n')
    reading = read_folder_as(str(flat), relative_files(str(flat)))
    assert [source.split for source in reading.sources] == [None]
    assert "splits drawn by a hash of each image" in reading.said


def test_metadata_of_two_kinds_or_only_parquet_is_refused_naming_it(tmp_path):
    text(tmp_path / "train" / "metadata.jsonl", '{"file_name": "a.jpg", "label": "cat"}\n')
    text(tmp_path / "test" / "metadata.csv", "file_name,label\nb.jpg,dog\n")
    with pytest.raises(ManifestError, match="both metadata.csv and metadata.jsonl"):
        read_folder_as(str(tmp_path), relative_files(str(tmp_path)))
    other = tmp_path / "parquet"
    text(other / "train" / "metadata.parquet", "")
    with pytest.raises(
        ManifestError, match="metadata is train/metadata.parquet, which is not read"
    ):
        read_folder_as(str(other), relative_files(str(other)))


def test_images_no_metadata_file_names_are_counted_and_the_first_named(tmp_path, capsys):
    """The datasets library leaves out an image its metadata does not name; so does the
    conversion, but not silently: the console counts them and names the first 3."""
    root = hf_imagefolder(tmp_path / "hf")
    # Named as ./b.jpg: listed all the same. Not images: no note.
    text(
        root / "train" / "metadata.jsonl",
        '{"file_name": "a.jpg", "label": "cat"}\n{"file_name": "./b.jpg", "label": "dog"}\n',
    )
    text(root / "README.md", "# pets\n")
    for seed, name in enumerate(["train/cats/x.jpg", "train/y.PNG", "validation/z.jpg", "w.jpg"]):
        jpeg(root / name, seed)
    reading = read_folder_as(str(root), relative_files(str(root)))
    assert reading.notes == (
        f"4 images under {root} are in no metadata file and were not "
        f"read: {root}/train/cats/x.jpg, {root}/train/y.PNG, "
        f"{root}/validation/z.jpg, ...",
    )
    (root / "train" / "cats" / "x.jpg").unlink()
    (root / "train" / "y.PNG").unlink()
    (root / "w.jpg").unlink()
    said = []
    find_manifests([str(root)], say=said.append)
    assert said[1:] == [
        f"1 image under {root} is in no metadata file and was not read: {root}/validation/z.jpg"
    ]
    _, rows = rows_read("--image_folder", root, "--output_dir", tmp_path / "out")
    assert (
        f"image-tfrecords: 1 image under {root} is in no metadata file and was not "
        f"read: {root}/validation/z.jpg"
    ) in capsys.readouterr().out
    assert split_labels_read(rows) == {"train": ["cat", "dog"], "validation": ["dog"], "test": []}


def test_a_hugging_face_imagefolder_whose_metadata_names_every_image_says_nothing_more(tmp_path):
    root = hf_imagefolder(tmp_path / "hf")
    assert read_folder_as(str(root), relative_files(str(root))).notes == ()


# --- YOLO folders with classes.txt -------------------------------------------------------


def label_studio_yolo_export(root):
    """What Label Studio's "YOLO" export unzips to: classes.txt (one class a line, in id
    order), notes.json, images/ and labels/ (a .txt per image, class cx cy w h)."""
    text(root / "classes.txt", "Airplane\nCar\nPerson\n")
    text(
        root / "notes.json",
        json.dumps(
            {
                "categories": [
                    {"id": 0, "name": "Airplane"},
                    {"id": 1, "name": "Car"},
                    {"id": 2, "name": "Person"},
                ],
                "info": {"year": 2024, "version": "1.0", "contributor": "Label Studio"},
            }
        ),
    )
    jpeg(root / "images" / "0a1b2c3d-street.jpg", 0, (40, 30))
    text(root / "labels" / "0a1b2c3d-street.txt", "1 0.5 0.5 0.5 0.4\n2 0.25 0.75 0.1 0.2\n")
    jpeg(root / "images" / "4e5f6a7b-sky.jpg", 1, (40, 30))
    text(root / "labels" / "4e5f6a7b-sky.txt", "0 0.5 0.5 0.2 0.2\n")
    jpeg(root / "images" / "8c9d0e1f-empty.jpg", 2, (40, 30))
    return root


def test_label_studios_yolo_export_converts_with_the_classes_of_classes_txt(tmp_path, capsys):
    """It was refused without naming YOLO. Class ids are classes.txt's lines; the export
    has no split folders, so the splits are drawn by hash, and the console says so."""
    root = label_studio_yolo_export(tmp_path / "export")
    pinned, rows = rows_read(
        "--image_folder",
        root,
        "--label_mode",
        "detection",
        "--output_dir",
        tmp_path / "out",
        "--split_fractions",
        "1,0,0",
    )
    out = capsys.readouterr().out
    assert f"reading {root} as a YOLO dataset: the 3 classes of classes.txt" in out
    assert "no split folders: each image's split is drawn from a hash" in out
    # The ids: classes.txt's lines (the job's label map of pinned ids is checked on the
    # shards in test_declared_classes.py).
    assert pinned.labels == ("Airplane", "Car", "Person")
    objects = {}
    for row in rows:
        assert row.split == "train"
        objects.setdefault(Path(row.uri).name, []).extend(row.labels)
    assert {name: sorted(labels) for name, labels in objects.items()} == {
        "0a1b2c3d-street.jpg": ["Car", "Person"],
        "4e5f6a7b-sky.jpg": ["Airplane"],
        "8c9d0e1f-empty.jpg": [],
    }


def test_a_yolo_export_declares_the_classes_of_classes_txt_and_reads_as_a_manifest(tmp_path):
    root = label_studio_yolo_export(tmp_path / "export")
    said = []
    (source,) = find_manifests([str(root)], say=said.append)
    assert (source.path, source.format) == (str(root / "classes.txt"), "yolo")
    assert said and "YOLO dataset" in said[0]
    declared = FORMATS["yolo"].declared_classes(source)
    assert (declared.declared_by, declared.labels) == (
        str(root / "classes.txt"),
        ("Airplane", "Car", "Person"),
    )
    check_sources([source], DETECTION)
    rows = list(read_source(source, DETECTION))
    assert sorted(label for row in rows for label in row.labels) == ["Airplane", "Car", "Person"]
    (forced,) = find_manifests([f"VAL={root}"], say=said.append)
    assert said[1].endswith("; VAL= gives every row VALIDATION")
    assert {row.split for row in read_source(forced, DETECTION)} == {"validation"}


def test_split_folders_of_a_classes_txt_folder_give_the_splits(tmp_path):
    """Roboflow's train/images + valid/images, and labelImg's classes.txt in labels/."""
    root = tmp_path / "roboflow"
    text(root / "classes.txt", "ball\n")
    for seed, split in enumerate(("train", "valid", "test")):
        jpeg(root / split / "images" / f"{seed}.jpg", seed)
        text(root / split / "labels" / f"{seed}.txt", "0 0.5 0.5 0.2 0.2\n")
    (source,) = read_folder_as(str(root), relative_files(str(root))).sources
    assert [(row.split, row.labels) for row in read_source(source, DETECTION)] == [
        ("train", ("ball",)),
        ("validation", ("ball",)),
        ("test", ("ball",)),
    ]
    labelimg = tmp_path / "labelimg"
    text(labelimg / "labels" / "classes.txt", "dog\ncat\n")
    jpeg(labelimg / "images" / "a.jpg", 0)
    text(labelimg / "labels" / "a.txt", "1 0.5 0.5 0.2 0.2\n")
    (source,) = read_folder_as(str(labelimg), relative_files(str(labelimg))).sources
    assert [row.labels for row in read_source(source, DETECTION)] == [("cat",)]


def test_a_classes_txt_beside_class_folders_is_no_yolo_folder(tmp_path):
    """Only a label file where YOLO looks for one (labels/ for images/, or beside the
    image) makes a YOLO folder; a README.txt does not."""
    text(tmp_path / "classes.txt", "cat\ndog\n")
    text(tmp_path / "README.txt", "photos of pets\n")
    jpeg(tmp_path / "cat" / "a.jpg", 0)
    assert read_folder_as(str(tmp_path), relative_files(str(tmp_path))) is None


def test_images_both_in_split_folders_and_outside_them_are_refused(tmp_path):
    text(tmp_path / "classes.txt", "ball\n")
    for relative in ("images/train/a", "images/b"):
        jpeg(tmp_path / f"{relative}.jpg", 0)
        text(tmp_path / f"{relative.replace('images', 'labels')}.txt", "0 0.5 0.5 0.2 0.2\n")
    with pytest.raises(
        ManifestError,
        match=r"images are in split folders \(images/train\) "
        r"and outside them \(images/b.jpg\)",
    ):
        read_folder_as(str(tmp_path), relative_files(str(tmp_path)))


def test_a_yolo_export_without_label_mode_detection_is_refused_naming_yolo(tmp_path, capsys):
    root = label_studio_yolo_export(tmp_path / "export")
    assert (
        convert("--image_folder", str(root), "--output_dir", str(tmp_path / "out"))
        == run.EXIT_USAGE
    )
    err = capsys.readouterr().err
    assert "is a YOLO dataset" in err and "pass --label_mode detection" in err


def test_a_class_id_outside_classes_txt_is_a_dead_letter_naming_it(tmp_path):
    root = label_studio_yolo_export(tmp_path / "export")
    text(root / "labels" / "4e5f6a7b-sky.txt", "3 0.5 0.5 0.2 0.2\n")
    (source,) = find_manifests([str(root)])
    (bad,) = [row for row in read_source(source, DETECTION) if not isinstance(row, ManifestRow)]
    assert bad.reason == "unknown_category_id"
    assert "not one of the 3 classes of" in bad.message and "classes.txt" in bad.message


# --- annotation datasets given as class folders ------------------------------------------


@pytest.mark.parametrize(
    "files, named",
    [
        (
            ("VOC2007/Annotations/1.xml", "VOC2007/JPEGImages/1.jpg"),
            "is a Pascal VOC dataset (its boxes are in {root}/VOC2007/Annotations), not class "
            "folders: --manifest {root}/VOC2007 --label_mode detection",
        ),
        (
            ("annotations/instances_val2017.json", "val2017/1.jpg"),
            "is a COCO dataset ({root}/annotations/instances_val2017.json), not class folders: "
            "--manifest {root}/annotations/instances_val2017.json --label_mode detection",
        ),
        # COCO's panoptic and keypoint annotations are downloads of their own: one unpacked
        # alone beside val2017/ made val2017 a class, exit 0.
        (
            ("annotations/panoptic_val2017.json", "val2017/1.jpg"),
            "is a COCO dataset ({root}/annotations/panoptic_val2017.json), not class folders: "
            "--manifest {root}/annotations/panoptic_val2017.json --label_mode detection",
        ),
        (
            ("annotations/person_keypoints_val2017.json", "val2017/1.jpg"),
            "is a COCO dataset ({root}/annotations/person_keypoints_val2017.json)",
        ),
    ],
)
def test_an_annotation_dataset_given_as_an_image_folder_is_refused_naming_its_format(
    files, named, tmp_path, capsys
):
    root = tmp_path / "ds"
    for relative in files:
        if relative.endswith(".jpg"):
            jpeg(root / relative, 0)
        else:
            text(root / relative, "{}")
    assert (
        convert("--image_folder", str(root), "--output_dir", str(tmp_path / "out"))
        == run.EXIT_USAGE
    )
    assert named.format(root=root) in capsys.readouterr().err


def test_a_misplaced_image_of_a_split_layout_still_names_the_layout(tmp_path):
    jpeg(tmp_path / "training_set" / "cats" / "1.jpg", 0)
    jpeg(tmp_path / "training_set" / "2.jpg", 1)
    (letter,) = [row for row in folder_rows(str(tmp_path)) if not isinstance(row, ManifestRow)]
    assert letter.reason == NOT_IN_LABEL_FOLDER and "'training_set'" in letter.message
