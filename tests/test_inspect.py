"""`image-tfrecords inspect`: the first records as image files, a CSV and box overlays."""

import csv
import hashlib

import numpy as np
import pytest
from conftest import BOX_ROWS, copy_output, read_examples, rewrite_records, shard_pattern
from PIL import Image

from image_tfrecords.core.imaging.overlays import COLOURS
from image_tfrecords.pipeline.cli import inspect_main


def inspect(output, out, *flags):
    assert inspect_main([str(output), "--out", str(out), *flags]) == 0
    with (out / "records.csv").open(newline="") as file:
        return list(csv.DictReader(file))


def test_first_records_become_their_stored_files_and_a_csv_row_each(sample_output, tmp_path):
    rows = inspect(sample_output, tmp_path / "look", "--split", "train", "-n", "20")
    stored = read_examples(shard_pattern(sample_output, "train"))[:20]  # shard 0, then 1
    assert len(rows) == 20
    for index, (row, example) in enumerate(zip(rows, stored)):
        keys = example.features.feature
        image = tmp_path / "look" / row["image/encoded"]
        assert image.read_bytes() == keys["image/encoded"].bytes_list.value[0]
        assert hashlib.sha256(image.read_bytes()).hexdigest() == row["image/key/sha256"]
        assert image.suffix == {"jpeg": ".jpg", "png": ".png"}[row["image/format"]]
        assert image.name.startswith(f"{index:05d}-")
        assert row["image/class/text"] == keys["image/class/text"].bytes_list.value[0].decode()
        assert int(row["image/height"]) == Image.open(image).height
    assert [row["shard"] for row in rows] == sorted(row["shard"] for row in rows)
    assert {row["record"] for row in rows} == {str(i) for i in range(20)}


@pytest.mark.parametrize("split", ["validation", "VALIDATION", "val", "Dev"])
def test_asking_for_more_records_than_the_split_has_writes_them_all(
    tfrecord_output, tmp_path, split
):
    rows = inspect(tfrecord_output, tmp_path / "look", "--split", split, "-n", "100")
    assert len(rows) == 6 and len(list((tmp_path / "look").glob("0*"))) == 6


def test_an_unknown_split_is_a_usage_error(tfrecord_output, tmp_path, capsys):
    assert inspect_main([str(tfrecord_output), "--split", "holdout", "--out", str(tmp_path)]) == 2
    assert "unknown split 'holdout': give one of train, validation, test" in (
        capsys.readouterr().err
    )


def test_detection_records_get_an_overlay_with_their_boxes(boxes_output, tmp_path):
    rows = inspect(boxes_output, tmp_path / "look", "-n", "5")
    assert len(rows) == 3
    for row in rows:
        boxes = BOX_ROWS[row["image/filename"]][1]
        assert row["image/object/class/text"] == "|".join(text for text, _ in boxes)
        overlay = np.asarray(Image.open(tmp_path / "look" / row["overlay"]).convert("RGB"))
        image = np.asarray(Image.open(tmp_path / "look" / row["image/encoded"]).convert("RGB"))
        assert overlay.shape == image.shape
        if not boxes:
            np.testing.assert_array_equal(overlay, image)
        for (_, (xmin, _, xmax, ymax)), label in zip(
            boxes, row["image/object/class/label"].split("|")
        ):
            colour = COLOURS[(int(label) - 1) % len(COLOURS)]  # the vocabulary id's
            height, width = image.shape[:2]
            x, y = round((xmin + xmax) / 2 * width), round(ymax * height)
            edge = overlay[y - 2 : y + 2, x]  # the bottom edge, below the label text
            assert any(tuple(pixel) == colour for pixel in edge), (row["overlay"], edge)


def test_the_csv_quotes_texts_with_commas(tfrecord_output, tmp_path):
    rows = inspect(tfrecord_output, tmp_path / "look", "--split", "validation")
    assert "fleur, été 01.jpg" in {row["image/filename"] for row in rows}
    assert [row["image/encoded"][6:] for row in rows if "été" in row["image/encoded"]] == [
        "fleur_été_01.jpg"
    ]  # a usable file name


def test_inspecting_again_into_the_same_folder_leaves_no_stale_file(tfrecord_output, tmp_path):
    """The earlier inspect's files (those its records.csv names) are replaced."""
    inspect(tfrecord_output, tmp_path / "look", "--split", "train", "-n", "5")
    rows = inspect(tfrecord_output, tmp_path / "look", "--split", "validation", "-n", "2")
    named = {row["image/encoded"] for row in rows} | {"records.csv"}
    assert {path.name for path in (tmp_path / "look").iterdir()} == named


def test_inspecting_into_a_folder_of_other_files_is_a_usage_error(
    tfrecord_output, tmp_path, capsys
):
    (tmp_path / "mine.txt").write_text("not inspect's")
    assert inspect_main([str(tfrecord_output), "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path} holds files inspect did not write" in capsys.readouterr().err
    assert [path.name for path in tmp_path.iterdir()] == ["mine.txt"]


def test_texts_a_spreadsheet_would_take_for_formulas_are_neutralised(tfrecord_output, tmp_path):
    """OWASP's CSV injection guidance: a cell starting with =, +, -, @, a tab or a carriage
    return gets a leading ' (the dataset's texts are a stranger's)."""
    output = copy_output(tfrecord_output, tmp_path / "out")
    formulas = ['=HYPERLINK("http://x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1)", "\t=1", "\r=1"]
    texts = iter(formulas)
    for shard in sorted(output.glob("validation-*.tfrecord")):
        rewrite_records(
            shard,
            lambda _, example: example.features.feature[
                "image/filename"
            ].bytes_list.value.__setitem__(0, next(texts).encode()),
        )
    rows = inspect(output, tmp_path / "look", "--split", "validation")
    assert [row["image/filename"] for row in rows] == ["'" + text for text in formulas]
    assert all(not row["image/height"].startswith("'") for row in rows)  # numbers as they are
