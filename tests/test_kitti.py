"""KITTI object labels (core/inputs/kitti.py): training/label_2/*.txt beside image_2/,
read as create_kitti_tf_record.py reads them; the layouts people give it recognised."""

import json
import logging
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

PUBLIC = Path(__file__).parent / "data" / "public" / "kitti"
DETECTION = RowRules(label_mode="detection")
# A line of KITTI's training set (000000.txt), and a DontCare region.
PEDESTRIAN = (
    "Pedestrian 0.00 0 -0.20 712.40 143.00 810.73 307.92 1.89 0.48 1.20 1.84 1.47 8.41 0.01"
)
DONT_CARE = "DontCare -1 -1 -10 503.89 169.71 590.61 190.13 -1 -1 -1 -1000 -1000 -1000 -10"


def kitti_root(root: Path, labels: dict[str, str], size=(1242, 375)) -> Path:
    """ROOT/training/label_2/<id>.txt with `labels`, and a PNG of `size` per id in
    ROOT/training/image_2."""
    for folder in ("label_2", "image_2"):
        (root / "training" / folder).mkdir(parents=True, exist_ok=True)
    for stem, text in labels.items():
        (root / "training" / "label_2" / f"{stem}.txt").write_text(text)
        (root / "training" / "image_2" / f"{stem}.png").write_bytes(
            encode(photo_like(*size, seed=len(stem)), "PNG")
        )
    return root


def rows(argument, rules=DETECTION, input_format=None):
    sources = find_manifests([str(argument)], input_format)
    assert [source.format for source in sources] == ["kitti"]
    check_sources(sources, rules)
    return [row for source in sources for row in read_source(source, rules)]


def test_datumaros_kitti_files_give_lower_cased_types_pixel_boxes_and_truncation(tmp_path):
    """openvinotoolkit/datumaro's kitti_detection asset: Truck and Van lines, truncated
    1.0 or 0.0, boxes in pixels of the image's own size."""
    labels = tmp_path / "kitti" / "training" / "label_2"
    labels.mkdir(parents=True)
    for file in PUBLIC.glob("*.txt"):
        shutil.copy(file, labels)
    found = rows(tmp_path / "kitti")
    images = tmp_path / "kitti" / "training" / "image_2"
    assert [
        (row.uri, row.labels, (*row.boxes[0][:4], row.boxes[0].truncated)) for row in found
    ] == [
        (str(images / "000030_10.png"), ("truck",), (0, 1, 2, 3, 1)),
        (str(images / "000030_10.png"), ("van",), (0, 5, 1, 8, 0)),
        (str(images / "000030_11.png"), ("van",), (0, 0, 2, 2, 1)),
        (str(images / "000030_11.png"), ("van",), (4, 4, 6, 6, 0)),
        (str(images / "000030_11.png"), ("van",), (6, 6, 7, 9, 0)),
    ]
    assert all(row.boxes_in_pixels for row in found)
    # No splits in KITTI: each image's from a hash of its name, the same for its objects.
    assert [row.split for row in found] == [
        assign_split(Path(row.uri).name, DETECTION.split_fractions) for row in found
    ]


@pytest.mark.parametrize(
    "given", ["kitti", "kitti/training", "kitti/training/label_2", "kitti/training/label_2/*.txt"]
)
def test_every_way_of_naming_the_labels_is_one_kitti_source(tmp_path, given):
    kitti_root(tmp_path / "kitti", {"000000": PEDESTRIAN + "\n"}, size=(8, 8))
    (source,) = find_manifests([str(tmp_path / given)])
    assert source == (str(tmp_path / "kitti/training/label_2/*.txt"), "kitti", None)


def test_a_single_label_file_and_a_txt_csv_are_each_sniffed_by_their_content(tmp_path):
    kitti_root(tmp_path, {"000000": PEDESTRIAN + "\n"}, size=(8, 8))
    (tmp_path / "list.txt").write_text("TRAIN,a.jpg,cat\n")
    (label,) = find_manifests([str(tmp_path / "training/label_2/000000.txt")])
    (csv,) = find_manifests([str(tmp_path / "list.txt")])
    assert (label.format, csv.format) == ("kitti", "csv")


def test_dont_care_regions_are_left_out_and_counted_and_bad_lines_dead_lettered(tmp_path, caplog):
    kitti_root(
        tmp_path,
        {
            "000000": f"{PEDESTRIAN}\n{DONT_CARE}\n{DONT_CARE}\n",
            "000001": f"{DONT_CARE}\n",  # only DontCare: an image without objects
            "000002": "",  # an empty label file: the same
            "000003": "Car 0.5 0 0 10 20 5 30 1 1 1 1 1 1 0\nCar 0 0 0 1 2 3\n"
            "Car x 0 0 1 2 3 4 1 1 1 1 1 1 0\n",
        },
    )
    with caplog.at_level(logging.WARNING):
        found = rows(tmp_path / "training" / "label_2")
    assert "3 DontCare regions (areas nobody labelled, not objects) were left out" in caplog.text
    kept = [(Path(row.uri).stem, row.labels) for row in found if isinstance(row, ManifestRow)]
    assert kept == [("000000", ("pedestrian",)), ("000001", ()), ("000002", ())]
    assert [
        (Path(row.manifest).stem, row.line, row.reason)
        for row in found
        if not isinstance(row, ManifestRow)
    ] == [
        ("000003", 1, reasons.EMPTY_BOX),
        ("000003", 2, reasons.WRONG_COLUMN_COUNT),
        ("000003", 3, reasons.MALFORMED_ROW),
    ]


def test_a_kitti_dataset_converts_end_to_end_boxes_divided_by_the_images_size(tmp_path, caplog):
    root = kitti_root(
        tmp_path / "kitti",
        {
            "000000": f"{PEDESTRIAN}\n{DONT_CARE}\n",
            "000001": "Car 0.25 1 1.85 387.63 181.54 423.81 203.12 1.67 1.87 3.69 -16.53 2.39 "
            "58.49 1.57\nCyclist 0.00 3 -1.65 676.60 163.95 688.98 193.93 1.86 0.60 "
            "2.02 4.59 1.32 45.84 -1.55\n",
        },
    )
    output = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        assert (
            run.main(
                [
                    "--manifest",
                    f"train={root}",
                    "--label_mode",
                    "detection",
                    "--output_dir",
                    str(output),
                ]
            )
            == 0
        )
    # Said once, though the label files are read before the job and by each pass.
    assert caplog.text.count("1 DontCare regions") == 1
    examples = {
        example.features.feature["image/filename"].bytes_list.value[0].decode(): (
            example.features.feature
        )
        for example in read_examples(f"{output}/train-*.tfrecord")
    }
    assert sorted(examples) == ["000000.png", "000001.png"]
    car = examples["000001.png"]
    assert car["image/object/class/text"].bytes_list.value == [b"car", b"cyclist"]
    np.testing.assert_allclose(
        [
            car[f"image/object/bbox/{side}"].float_list.value
            for side in ("xmin", "ymin", "xmax", "ymax")
        ],
        [
            [387.63 / 1242, 676.60 / 1242],
            [181.54 / 375, 163.95 / 375],
            [423.81 / 1242, 688.98 / 1242],
            [203.12 / 375, 193.93 / 375],
        ],
        rtol=1e-6,
    )
    assert list(car["image/object/truncated"].int64_list.value) == [1, 0]
    assert examples["000000.png"]["image/object/class/text"].bytes_list.value == [b"pedestrian"]
    summary = json.loads((output / "summary.json").read_text())
    assert (summary["rows_read"], summary["examples_written"]) == (3, 2)


def test_a_box_beyond_the_images_own_size_is_dead_lettered(tmp_path):
    root = kitti_root(
        tmp_path / "kitti",
        {
            "000000": "Car 0 0 0 10 10 80 20 1 1 1 1 1 1 0\n",
            "000001": "Car 0 0 0 1 1 5 5 1 1 1 1 1 1 0\n",
        },
        size=(64, 48),
    )
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                f"train={root}",
                "--label_mode",
                "detection",
                "--output_dir",
                str(output),
                "--max_error_fraction",
                "0.9",
            ]
        )
        == 0
    )
    letters = [
        json.loads(line)
        for error in output.glob("errors-*.jsonl")
        for line in error.read_text().splitlines()
    ]
    assert [(Path(letter["uri"]).name, letter["reason"]) for letter in letters] == [
        ("000000.png", reasons.BOX_OUT_OF_RANGE)
    ]


def test_a_kitti_image_folder_is_refused_naming_the_labels_and_the_command(tmp_path, capsys):
    """It used to become a one-class classifier of the class `image_2`, exit 0."""
    root = kitti_root(tmp_path / "kitti", {"000000": PEDESTRIAN + "\n"}, size=(8, 8))
    labels = root / "training" / "label_2"
    for folder in (root, root / "training", root / "training" / "image_2"):
        assert run.main(["--image_folder", str(folder), "--output_dir", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert f"is a KITTI object dataset: its labels are the .txt files in {labels}" in err
        assert f"--manifest {labels} --label_mode detection" in err


def test_kitti_labels_need_detection_mode(tmp_path, capsys):
    root = kitti_root(tmp_path / "kitti", {"000000": PEDESTRIAN + "\n"}, size=(8, 8))
    assert run.main(["--manifest", str(root), "--output_dir", str(tmp_path / "out")]) == 2
    assert (
        "is KITTI object labels, which holds bounding boxes: pass --label_mode "
        "detection" in capsys.readouterr().err
    )


def test_image_dir_names_where_the_images_are(tmp_path):
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "000000.txt").write_text(PEDESTRIAN + "\n")
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "000000.jpg").write_bytes(encode(photo_like(8, 8, 0), "JPEG"))
    found = rows(
        labels / "*.txt", RowRules(label_mode="detection", image_dir=str(tmp_path / "pictures"))
    )
    assert [row.uri for row in found] == [str(tmp_path / "pictures" / "000000.jpg")]


def test_a_datumaro_export_declares_its_classes_in_dataset_meta(tmp_path):
    """datumaro's KITTI export writes `dataset_meta.json` (label_map, id -> type) in the
    root; KITTI itself ships no class list."""
    root = kitti_root(tmp_path / "kitti", {"000000": PEDESTRIAN + "\n"}, size=(8, 8))
    (source,) = find_manifests([str(root)])
    assert FORMATS["kitti"].declared_classes(source) is None
    meta = root / "dataset_meta.json"
    meta.write_text(json.dumps({"label_map": {"1": "Pedestrian", "0": "Car", "2": "DontCare"}}))
    assert FORMATS["kitti"].declared_classes(source) == DeclaredClasses(
        f"{meta} (label_map)", ("car", "pedestrian", "dontcare")
    )
    meta.write_text(json.dumps({"label_map": {"0": "Car", "2": "Van"}}))
    with pytest.raises(ManifestError, match="label_map must map the ids 0 to n-1"):
        check_sources([source], DETECTION)


def test_an_image_that_is_a_link_leading_out_of_its_folder_is_a_dead_letter(tmp_path):
    """The image is the label file's name in image_2, so only a link leads out: that one
    is path_outside_dataset; the option reads it."""
    root = kitti_root(tmp_path / "kitti", {"000001": PEDESTRIAN, "000002": PEDESTRIAN}, size=(8, 8))
    secret = tmp_path / "secret.png"
    (root / "training" / "image_2" / "000002.png").rename(secret)
    (root / "training" / "image_2" / "000002.png").symlink_to(secret)
    found = rows(root / "training" / "label_2")
    assert [row.reason if not isinstance(row, ManifestRow) else "read" for row in found] == [
        "read",
        reasons.PATH_OUTSIDE_DATASET,
    ]
    assert found[1].message.startswith(
        "the image '000002' of the label file leaves the "
        f"dataset's folder {root / 'training' / 'image_2'}"
    )
    assert all(
        isinstance(row, ManifestRow)
        for row in rows(
            root / "training" / "label_2",
            RowRules(label_mode="detection", allow_paths_outside_dataset=True),
        )
    )
