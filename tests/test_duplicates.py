"""Byte-identical images: always reported; with --dedupe sha256 written once, TRAIN first."""

import json

import apache_beam as beam
import pytest
from conftest import FILE_FORMATS, encode, feature, photo_like, read_examples, shard_pattern

from image_tfrecords.core.records.choices import Dedupe
from image_tfrecords.core.records.records import ExampleRef
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.pipeline import run
from image_tfrecords.transforms.duplicates import DuplicatesResult, ReportDuplicates, _copies


def ref(split, line):
    return ExampleRef(split, 0, line, "m.csv", line, f"{split}{line}.jpg", ("cat",), 0, None)


def test_the_copy_kept_is_in_the_earliest_split_then_the_earliest_row():
    copies = list(
        _copies("h", [ref("test", 1), ref("train", 9), ref("validation", 2), ref("train", 3)])
    )
    assert {(d.kept.split, d.kept.position) for d in copies} == {("train", 3)}
    assert [(d.copy.split, d.copy.position) for d in copies] == [
        ("train", 9),
        ("validation", 2),
        ("test", 1),
    ]


@pytest.mark.parametrize("dedupe", list(Dedupe))
def test_report_duplicates_gives_every_output_and_the_dropped_copies_where_it_drops(
    tmp_path, dedupe
):
    """Its outputs are typed: a name graph.py mistypes fails before a job is built."""
    p = beam.Pipeline()
    written = (p | "Shards" >> beam.Create([]), p | "ExampleKeys" >> beam.Create([]))
    found = written | ReportDuplicates(
        RunSettings(dedupe=dedupe), str(tmp_path), str(tmp_path / "staged")
    )
    assert isinstance(found, DuplicatesResult)
    assert all(
        isinstance(pcollection, beam.PCollection)
        for name, pcollection in found._asdict().items()
        if name != "dropped"
    )
    assert (found.dropped is None) == (dedupe is Dedupe.NONE)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    root = tmp_path_factory.mktemp("duplicates")
    (root / "img").mkdir()
    same = encode(photo_like(24, 16, 1), "JPEG")
    other = encode(photo_like(24, 16, 2), "PNG")
    files = {
        "a.jpg": same,
        "b.jpg": same,
        "c.png": other,
        "d.png": other,
        "e.jpg": encode(photo_like(24, 16, 3), "JPEG"),
    }
    for name, data in files.items():
        (root / "img" / name).write_bytes(data)
    rows = [
        "TEST,img/b.jpg,cat",
        "TRAIN,img/a.jpg,cat",
        "TRAIN,img/c.png,dog",
        "TRAIN,img/d.png,dog",
        "TRAIN,img/e.jpg,cat",
        "TEST,img/e.jpg,cat",
    ]
    (root / "m.csv").write_text("\n".join(rows) + "\n")
    return root / "m.csv"


def convert(manifest, output, *flags):
    assert (
        run.main(
            [
                "--manifest",
                str(manifest),
                "--output_dir",
                str(output),
                "--max_error_fraction",
                "0.5",
                *flags,
            ]
        )
        == 0
    )
    summary = json.loads((output / "summary.json").read_text())
    report = [json.loads(line) for line in (output / summary["duplicates"]["files"][0]).open()]
    names = {
        split: sorted(
            feature(e, "image/filename").decode()
            for e in read_examples(shard_pattern(output, split))
        )
        for split in ("train", "test")
    }
    return summary, report, names


def printed_duplicates(capsys) -> str:
    (line,) = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("byte-identical images")
    ]
    return line


def test_copies_are_reported_but_kept_by_default(manifest, tmp_path, capsys):
    summary, report, names = convert(manifest, tmp_path / "out")
    assert printed_duplicates(capsys) == (
        "byte-identical images: train/test 2 (leak), "
        "train/train 1  (duplicates-00000-of-00001.jsonl)"
    )
    assert names == {"train": ["a.jpg", "c.png", "d.png", "e.jpg"], "test": ["b.jpg", "e.jpg"]}
    assert summary["duplicates"] == {
        "copies": 3,
        "by_splits": {"train/test": 2, "train/train": 1},
        "dropped": False,
        "files": ["duplicates-00000-of-00001.jsonl"],
    }
    assert sorted(
        (d["kept"]["uri"].rsplit("/", 1)[1], d["copy"]["uri"].rsplit("/", 1)[1], d["copy"]["split"])
        for d in report
    ) == [("a.jpg", "b.jpg", "test"), ("c.png", "d.png", "train"), ("e.jpg", "e.jpg", "test")]


@pytest.mark.parametrize("file_format", FILE_FORMATS)
def test_dedupe_writes_each_image_once_and_dead_letters_the_copies(
    manifest, tmp_path, capsys, file_format
):
    """The shards holding copies are rewritten without them, in the output's format."""
    summary, report, names = convert(
        manifest, tmp_path / "out", "--dedupe", "sha256", "--file_format", file_format
    )
    assert printed_duplicates(capsys).endswith(
        "train/train 1; the copies dropped (--dedupe sha256)  (duplicates-00000-of-00001.jsonl)"
    )
    assert names == {"train": ["a.jpg", "c.png", "e.jpg"], "test": []}
    assert summary["empty_splits"] == ["validation", "test"]
    assert summary["errors"]["by_reason"] == {"duplicate_image": 3}
    assert summary["accounted"] and summary["rows_read"] == 6
    assert summary["splits"]["train"]["labels"] == {"cat": 2, "dog": 1}
    assert summary["splits"]["train"]["shards"][0]["records"] == 3
    assert all(d["dropped"] for d in report) and summary["duplicates"]["dropped"]
    dead = [json.loads(line) for line in (tmp_path / "out" / "errors-00000-of-00001.jsonl").open()]
    assert {d["line"] for d in dead} == {1, 4, 6}
    assert any("a.jpg (train, " in d["message"] for d in dead if d["line"] == 1)
