"""Open Images box CSVs (core/inputs/open_images.py): recognised by the header, a row
per box, the rows of one ImageID one example, labels from the class descriptions."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, photo_like, read_examples

from image_tfrecords.core.inputs.input_format import DeclaredClasses
from image_tfrecords.core.inputs.rows import ManifestError, RowRules, assign_split
from image_tfrecords.core.inputs.sources import FORMATS, check_sources, find_manifests, read_source
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.pipeline import run

PUBLIC = Path(__file__).parent / "data" / "public" / "open_images"
DETECTION = RowRules(label_mode="detection")
HEADER = (
    "ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,"
    "IsGroupOf,IsDepiction,IsInside\n"
)
# The first classes of oidv7-class-descriptions-boxable.csv, as v4 to v6 write them.
DESCRIPTIONS = "/m/011k07,Tortoise\n/m/011q46kg,Container\n/m/012074,Magpie\n"


def rows(path, rules=DETECTION):
    sources = find_manifests([str(path)])
    assert [source.format for source in sources] == ["open_images"]
    check_sources(sources, rules)
    return [row for source in sources for row in read_source(source, rules)]


def test_datumaros_open_images_files_give_display_names_splits_and_images(tmp_path):
    """openvinotoolkit/datumaro's open_images_dataset v6 asset: annotations/ holding the
    box CSVs of train and test and a class descriptions file with v7's header; the images
    in images/<split>/."""
    shutil.copytree(PUBLIC, tmp_path / "annotations")
    for split, image in (("train", "b"), ("test", "c")):
        (tmp_path / "images" / split).mkdir(parents=True)
        (tmp_path / "images" / split / f"{image}.jpg").write_bytes(
            encode(photo_like(8, 2, 0), "JPEG")
        )
    train = rows(tmp_path / "annotations" / "oidv6-train-annotations-bbox.csv")
    test = rows(tmp_path / "annotations" / "test-annotations-bbox.csv")
    assert [(row.split, row.uri, row.labels, row.boxes[0][:4]) for row in train + test] == [
        (
            "train",
            str(tmp_path / "images/train/b.jpg"),
            ("Generic label #0",),
            (0.2, 0.3, 1.0, 0.5),
        ),
        ("test", str(tmp_path / "images/test/c.jpg"), ("Generic label #3",), (0.7, 0.0, 0.8, 0.5)),
    ]
    # c: IsGroupOf 1 (is_crowd), IsTruncated 0, Confidence 0.7 kept; b: -1 is not 1.
    assert [(row.boxes[0].is_crowd, row.boxes[0].truncated) for row in train + test] == [
        (0, 0),
        (1, 0),
    ]
    source = find_manifests([str(tmp_path / "annotations" / "test-annotations-bbox.csv")])[0]
    assert FORMATS["open_images"].declared_classes(source) == DeclaredClasses(
        str(tmp_path / "annotations" / "oidv6-class-descriptions.csv") + " (DisplayName)",
        ("Generic label #0", "Generic label #1", "Generic label #2", "Generic label #3"),
    )


def test_rows_of_one_image_id_become_one_example_with_its_boxes(tmp_path):
    (tmp_path / "class-descriptions-boxable.csv").write_text(DESCRIPTIONS)
    csv = tmp_path / "train-annotations-bbox.csv"
    csv.write_text(
        HEADER
        + "000002b66c9c498e,xclick,/m/011k07,1,0.1,0.5,0.2,0.6,0,1,0,0,0\n"
        + "000002b97e5471a0,xclick,/m/012074,1,0,1,0,1,0,0,1,0,0\n"
        + "000002b66c9c498e,activemil,/m/012074,1,0.5,1,0.25,0.75,1,0,0,1,0\n"
        + "000002b66c9c498e,xclick,/m/0unknown,1,0.5,1,0.25,0.75,1,0,0,1,0\n"
        + "000002b97e5471a0,xclick,/m/011k07,1,0.6,0.4,0,1,0,0,0,0,0\n"
        # Kept whatever its Confidence, as create_oid_tf_record.py keeps it.
        + "000002b97e5471a0,xclick,/m/011k07,0,0.2,0.4,0.2,0.4,0,0,0,0,0\n"
        + "000002b97e5471a0,verification,/m/011q46kg,1,,,,,,,,,\n"
    )
    for image in ("000002b66c9c498e", "000002b97e5471a0"):
        (tmp_path / f"{image}.jpg").write_bytes(encode(photo_like(40, 30, 1), "JPEG"))
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                str(csv),
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
    examples = {
        example.features.feature["image/filename"].bytes_list.value[0].decode(): (
            example.features.feature
        )
        for example in read_examples(f"{output}/train-*.tfrecord")
    }
    assert sorted(examples) == ["000002b66c9c498e.jpg", "000002b97e5471a0.jpg"]
    tortoise = examples["000002b66c9c498e.jpg"]
    assert tortoise["image/object/class/text"].bytes_list.value == [b"Tortoise", b"Magpie"]
    np.testing.assert_allclose(
        [
            tortoise[f"image/object/bbox/{side}"].float_list.value
            for side in ("xmin", "ymin", "xmax", "ymax")
        ],
        [[0.1, 0.5], [0.2, 0.25], [0.5, 1.0], [0.6, 0.75]],
    )
    assert list(tortoise["image/object/truncated"].int64_list.value) == [1, 0]
    magpie = examples["000002b97e5471a0.jpg"]
    assert magpie["image/object/class/text"].bytes_list.value == [b"Magpie", b"Tortoise"]
    assert list(magpie["image/object/is_crowd"].int64_list.value) == [1, 0]
    letters = [
        json.loads(line)
        for error in output.glob("errors-*.jsonl")
        for line in error.read_text().splitlines()
    ]
    assert sorted((letter["line"], letter["reason"]) for letter in letters) == [
        (5, reasons.UNKNOWN_CATEGORY_ID),
        (6, reasons.EMPTY_BOX),
        (8, reasons.UNSUPPORTED_ANNOTATION),
    ]
    assert f"LabelName '/m/0unknown' is not in {tmp_path}/class-descriptions-boxable.csv" in [
        letter["message"] for letter in letters
    ]


def test_without_class_descriptions_the_labels_are_the_mids_and_the_split_hashed(tmp_path):
    csv = tmp_path / "boxes.csv"
    csv.write_text(HEADER + "abc,xclick,/m/011k07,1,0.1,0.5,0.2,0.6,0,0,0,0,0\n")
    (row,) = rows(csv)
    assert (row.labels, row.split, row.uri) == (
        ("/m/011k07",),
        assign_split("abc", DETECTION.split_fractions),
        str(tmp_path / "abc.jpg"),
    )
    assert FORMATS["open_images"].declared_classes(find_manifests([str(csv)])[0]) is None


def test_image_dir_names_where_the_images_are(tmp_path):
    csv = tmp_path / "validation-annotations-bbox.csv"
    csv.write_text(HEADER + "abc,xclick,/m/011k07,1,0.1,0.5,0.2,0.6,0,0,0,0,0\n")
    (row,) = rows(csv, RowRules(label_mode="detection", image_dir=str(tmp_path / "pics")))
    assert (row.split, row.uri) == ("validation", str(tmp_path / "pics" / "abc.jpg"))


def test_a_class_descriptions_file_that_names_a_class_twice_is_refused(tmp_path):
    (tmp_path / "class-descriptions-boxable.csv").write_text(DESCRIPTIONS + "/m/0aaa,Tortoise\n")
    csv = tmp_path / "train-annotations-bbox.csv"
    csv.write_text(HEADER + "abc,xclick,/m/011k07,1,0.1,0.5,0.2,0.6,0,0,0,0,0\n")
    with pytest.raises(
        ManifestError,
        match="line 4: 'Tortoise' is listed twice "
        r"\(first for /m/011k07\)",
    ):
        rows(csv)


def test_other_csv_manifests_are_still_csv(tmp_path):
    (tmp_path / "m.csv").write_text("image,label\na.jpg,cat\n")
    (source,) = find_manifests([str(tmp_path / "m.csv")])
    assert source.format == "csv"
    assert isinstance(next(read_source(source, RowRules())), ManifestRow)


def test_csv_column_options_on_an_open_images_file_are_refused_naming_it(tmp_path):
    """With the columns the CSV reader suggested, every row used to be file_not_found
    (ImageIDs carry no extension)."""
    csv = tmp_path / "train-annotations-bbox.csv"
    csv.write_text(HEADER + "abc,xclick,/m/011k07,1,0.1,0.5,0.2,0.6,0,0,0,0,0\n")
    with pytest.raises(
        ManifestError,
        match="is an Open Images box CSV: --uri_column, "
        "--label_column and --split_column name columns of CSV manifests only",
    ):
        check_sources(
            find_manifests([str(csv)]),
            RowRules(label_mode="detection", uri_column="ImageID", label_column="LabelName"),
        )


def test_an_image_id_naming_a_file_outside_the_image_folder_is_a_dead_letter(tmp_path):
    """`<ImageID>.jpg` stays in the image folder: an ImageID of `../../secret` is
    path_outside_dataset naming it."""
    (tmp_path / "dataset").mkdir()
    csv = tmp_path / "dataset" / "train-annotations-bbox.csv"
    csv.write_text(
        HEADER + "000002b66c9c498e,xclick,/m/011k07,1,0.1,0.5,0.2,0.6,0,1,0,0,0\n"
        "../../secret,xclick,/m/011k07,1,0.1,0.5,0.2,0.6,0,1,0,0,0\n"
    )
    found = rows(csv)
    assert [row.reason if not isinstance(row, ManifestRow) else row.uri for row in found] == [
        str(tmp_path / "dataset" / "000002b66c9c498e.jpg"),
        reasons.PATH_OUTSIDE_DATASET,
    ]
    assert found[1].message == (
        f"ImageID '../../secret' leaves the dataset's folder {tmp_path / 'dataset'}: pass "
        "--allow_paths_outside_dataset to read files outside it"
    )
