"""Publishing shards under final names, and the accounting in summary.json."""

import json
import os

import apache_beam as beam
import pytest
import tensorflow_transform.beam as tft_beam
from apache_beam.testing.test_pipeline import TestPipeline

from image_tfrecords.core.file_formats.tfrecord import TFRecordFormat
from image_tfrecords.core.launcher import publishing
from image_tfrecords.core.launcher.publishing import move_into_place, name_shards
from image_tfrecords.core.records.naming import FAILED_FILE, REPORT_FILE, staged_dir
from image_tfrecords.core.records.records import ManifestRow, ShardWritten
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.summary import RunInfo, RunOptions, ShardInfo, Summary
from image_tfrecords.core.records.summary_builder import build_summary
from image_tfrecords.core.report.report_page import ReportContent
from image_tfrecords.core.worker.row_tasks import survey
from image_tfrecords.pipeline.report import format_report
from image_tfrecords.transforms.labels import AnalyzeLabels
from image_tfrecords.transforms.outcome import PublishRules, RunFailed, read_failure
from image_tfrecords.transforms.publish import PublishOutput

RUN_INFO = RunInfo(
    options=RunOptions(compression="none", label_mode="single", unseen_label="error")
)
RULES = PublishRules(max_error_fraction=0.5)
NO_CONTENT = ReportContent(samples={}, duplicates=[], near_duplicates=[], dead_letters={})


def temp_shard(tmp_path, split, shard, examples, labels=None):
    """A shard as the writer leaves it: a temp file, or none when it got no example."""
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    path = temp / f"{split}-{shard:05d}.tfrecord"
    if examples:
        path.write_bytes(b"x" * examples)
    return ShardWritten(
        split,
        shard,
        str(path),
        examples,
        examples,
        examples,
        examples,
        labels or {"cat": examples},
        {},
        {},
        {},
        {},
    )


def test_shards_are_renumbered_without_empty_ones_and_stale_ones_go(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train-00000-of-00004.tfrecord").write_bytes(b"old")
    (out / "train-00003-of-00004.tfrecord").write_bytes(b"old")
    (out / "notes.txt").write_text("not ours")
    shards = [
        temp_shard(tmp_path, "train", 3, 2),
        temp_shard(tmp_path, "train", 0, 5),
        temp_shard(tmp_path, "train", 1, 0),
        temp_shard(tmp_path, "test", 0, 1),
    ]

    published = name_shards(shards, TFRecordFormat())
    move_into_place(published, str(tmp_path / "tmp"), [], str(out))

    assert [(name, s.shard) for name, s in published["train"]] == [
        ("train-00000-of-00002.tfrecord", 0),
        ("train-00001-of-00002.tfrecord", 3),
    ]
    assert sorted(os.listdir(out)) == [
        "notes.txt",
        "test-00000-of-00001.tfrecord",
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
    ]
    assert (out / "train-00001-of-00002.tfrecord").read_bytes() == b"xx"
    assert os.listdir(tmp_path / "tmp") == []


def test_moving_again_after_a_retry_is_harmless(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    shards = [temp_shard(tmp_path, "train", 0, 3)]
    named = name_shards(shards, TFRecordFormat())
    move_into_place(named, str(tmp_path / "tmp"), [], str(out))
    move_into_place(named, str(tmp_path / "tmp"), [], str(out))
    assert [name for name, _ in named["train"]] == ["train-00000-of-00001.tfrecord"]
    assert (out / "train-00000-of-00001.tfrecord").read_bytes() == b"xxx"


def test_a_summary_that_cannot_be_written_takes_the_run_s_files_back(tmp_path, monkeypatch):
    """The last write of a publish fails (a store's 503 past its retries): the moved files go
    back to the temp folder, so the output holds no file of the run and a retry (or
    --resume) starts from the temp folder whole."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("not ours")
    named = name_shards(
        [temp_shard(tmp_path, "train", 0, 3), temp_shard(tmp_path, "test", 0, 2)],
        TFRecordFormat(),
    )
    temp = tmp_path / "tmp"
    before = sorted(os.listdir(temp))
    written = publishing.write_text

    def landed_then_refused(path, text):
        written(path, text)  # as a store that made the write and answered an error
        raise OSError("injected 503")

    monkeypatch.setattr(publishing, "write_text", landed_then_refused)
    with pytest.raises(OSError, match="injected 503"):
        publishing.publish(named, str(temp), [], str(out), (), "{}")
    assert os.listdir(out) == ["notes.txt"]
    assert sorted(os.listdir(temp)) == before

    monkeypatch.setattr(publishing, "write_text", written)
    publishing.publish(named, str(temp), [], str(out), (), "{}")  # the retry
    assert sorted(os.listdir(out)) == [
        "notes.txt",
        "summary.json",
        "test-00000-of-00001.tfrecord",
        "train-00000-of-00001.tfrecord",
    ]


def test_summary_accounts_for_every_row():
    files = {
        "train": [
            (
                "train-00000-of-00001.tfrecord",
                ShardWritten(
                    "train",
                    0,
                    "t",
                    3,
                    3,
                    30,
                    28,
                    {"cat": 2, "dog": 1},
                    {"format": 1},
                    {"≤ 512 px": 3},
                    {"≤ 16 KB": 3},
                    {},
                ),
            )
        ],
        "test": [
            (
                "test-00000-of-00001.tfrecord",
                ShardWritten(
                    "test",
                    0,
                    "t",
                    2,
                    2,
                    20,
                    20,
                    {"cat": 1, "bird": 1},
                    {},
                    {"≤ 64 px": 1, "≤ 512 px": 1},
                    {"≤ 4 KB": 2},
                    {},
                ),
            )
        ],
    }
    summary = build_summary(
        files,
        {"file_not_found": 2},
        rows_read=7,
        vocabulary=["cat", "dog"],
        error_files=["errors.jsonl"],
        run_info=RUN_INFO,
    )
    assert (summary.examples_written, summary.rows_dead_lettered) == (5, 2)
    assert summary.accounted is True
    assert summary.error_fraction == 2 / 7
    assert summary.splits["test"].unseen_label_examples == 1
    assert summary.empty_splits == ("validation",)
    assert summary.splits["train"].shards == (
        ShardInfo(file="train-00000-of-00001.tfrecord", records=3, bytes=30),
    )
    assert summary.splits["test"].longest_side == {"≤ 64 px": 1, "≤ 512 px": 1}
    assert summary.splits["test"].file_bytes == {"≤ 4 KB": 2}
    lost = build_summary(
        files, {}, rows_read=7, vocabulary=["cat"], error_files=[], run_info=RUN_INFO
    )
    assert lost.accounted is False


def test_a_split_sharded_finer_than_its_examples_is_warned_about():
    """--num_shards 100000 on 301 examples wrote 197 shards of one or two, without a word."""

    def shards(split, records):
        return [
            (
                f"{split}-{index:05d}-of-{len(records):05d}.tfrecord",
                ShardWritten(
                    split, index, "t", count, count, 10, 10, {"cat": count}, {}, {}, {}, {}
                ),
            )
            for index, count in enumerate(records)
        ]

    files = {
        "train": shards("train", [2, 1, 1]),
        "validation": shards("validation", [10, 10]),
        "test": shards("test", [1]),
    }
    summary = build_summary(
        files, {}, rows_read=26, vocabulary=["cat"], error_files=[], run_info=RUN_INFO
    )
    assert summary.few_examples_per_shard == ("train",)  # one shard is never too many
    assert (
        "warning: train's 3 shards hold 1.3 examples each on average: readers open a "
        "file for every few; --num_shards 1 or fewer gives 10 or more a shard"
    ) in format_report(summary, "out", 1.0).splitlines()


def test_detection_summary_accounts_for_box_rows_not_examples():
    """Two examples made of five box rows, plus one dead-lettered box: 6 rows read."""
    files = {
        "train": [
            (
                "train-00000-of-00001.tfrecord",
                ShardWritten(
                    "train", 0, "t", 2, 5, 30, 28, {"cat": 4, "dog": 1}, {}, {}, {}, {"masks": 2}
                ),
            )
        ]
    }
    summary = build_summary(
        files,
        {"empty_box": 1},
        rows_read=6,
        vocabulary=["cat", "dog"],
        error_files=[],
        run_info=RUN_INFO,
    )
    assert (summary.examples_written, summary.rows_in_examples) == (2, 5)
    assert summary.splits["train"].annotations == {"masks": 2}
    assert summary.accounted is True
    counted_as_examples = build_summary(
        files,
        {"empty_box": 1},
        rows_read=3,
        vocabulary=["cat", "dog"],
        error_files=[],
        run_info=RUN_INFO,
    )
    assert counted_as_examples.accounted is False


def publisher(tmp_path):
    """The publish step of a run into tmp_path/out, with its temp dir tmp_path/tmp."""
    return PublishOutput(
        str(tmp_path / "out"),
        str(tmp_path / "tmp"),
        str(tmp_path / "tft"),
        RunSettings(),
        run_info=RUN_INFO,
        rules=RULES,
    )


def staged_transform_fn(tmp_path):
    with TestPipeline() as p:
        _ = (
            p
            | beam.Create([survey([ManifestRow("m", 1, "r", "train", "/a.jpg", ("cat",))], 1)])
            | AnalyzeLabels(RunSettings(), str(tmp_path / "tft"))
            | tft_beam.WriteTransformFn(str(tmp_path / "tft"))
        )


def test_a_run_that_lost_rows_publishes_nothing_and_leaves_the_old_output_whole(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train-00000-of-00001.tfrecord").write_bytes(b"old")
    (out / "summary.json").write_text('{"old": true}')
    staged_transform_fn(tmp_path)
    shards = [temp_shard(tmp_path, "train", 0, 3)]
    publish = publisher(tmp_path)
    with pytest.raises(RunFailed, match=r"rows read \(5\) != .*Nothing was published"):
        publish._publish(
            None,
            shards,
            {"file_not_found": 1},
            [5],
            0,
            {},
            0,
            {"cat": 4},
            {},
            {},
            {},
            NO_CONTENT,
            [],
        )
    assert sorted(os.listdir(out)) == ["summary.json", "train-00000-of-00001.tfrecord"]
    assert json.loads((out / "summary.json").read_text()) == {"old": True}
    assert (tmp_path / "tmp" / "train-00000.tfrecord").exists()
    evidence = json.loads((tmp_path / "tmp" / "summary.json").read_text())
    assert evidence["accounted"] is False
    # What the launcher reports: the same problem, read back from the staged FAILED.json.
    failure = read_failure(str(tmp_path / "tmp"))
    assert failure.record == os.path.join(staged_dir(str(tmp_path / "tmp")), FAILED_FILE)
    assert failure.problems[0].startswith("rows read (5) != ")
    assert failure.summary == Summary.model_validate(evidence)
    assert read_failure(str(tmp_path / "nowhere")) is None
    # The staged report, where the docs send the user, opens on the failure and its reason.
    page = (tmp_path / "tmp" / "staged" / REPORT_FILE).read_text()
    body = page[page.index("<body>") :]
    assert (
        body.index("This run FAILED")
        < body.index(failure.problems[0])
        < body.index(failure.record)
        < body.index("Rows read")
    )
    assert "accounted for" not in page


def test_publishing_swaps_in_every_file_and_removes_stale_ones_and_leftovers(tmp_path):
    out = tmp_path / "out"
    (out / "transform_fn" / "assets").mkdir(parents=True)
    (out / "transform_fn" / "assets" / "old_vocabulary").write_text("stale")
    (out / "label_map.pbtxt").write_text("stale: this run is not detection")
    (out / "errors-00000-of-00001.jsonl").write_text("old errors")
    (out / ".tmp-crashed").mkdir()  # a run that never published
    (out / ".tmp-crashed" / "train-00000.tfrecord").write_bytes(b"partial")
    staged_transform_fn(tmp_path)
    staged = staged_dir(str(tmp_path / "tmp"))
    os.makedirs(staged)
    with open(os.path.join(staged, "errors-00000-of-00001.jsonl"), "w") as file:
        file.write("new errors")
    shards = [temp_shard(tmp_path, "train", 0, 3)]
    publish = publisher(tmp_path)
    summary = publish._publish(
        None, shards, {"file_not_found": 1}, [4], 0, {}, 0, {"cat": 4}, {}, {}, {}, NO_CONTENT, []
    )
    assert summary.accounted and summary.labels == ("cat",)
    assert sorted(os.listdir(out)) == [
        "dataset_info.json",
        "errors-00000-of-00001.jsonl",
        "features.json",
        "image.class.label.labels.txt",
        "report.html",
        "summary.json",
        "train-00000-of-00001.tfrecord",
        "transform_fn",
        "transformed_metadata",
    ]
    assert (out / "errors-00000-of-00001.jsonl").read_text() == "new errors"
    assert not (out / "transform_fn" / "assets" / "old_vocabulary").exists()
    assert (out / "transform_fn" / "assets" / "label").read_text().split() == ["cat"]
    assert not (tmp_path / "tmp").exists()
    assert Summary.from_json((out / "summary.json").read_text()) == summary


def test_publish_retried_midway_or_after_the_end_gives_the_same_output(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    staged_transform_fn(tmp_path)
    shards = [temp_shard(tmp_path, "train", 0, 3)]
    publish = publisher(tmp_path)
    named = name_shards(shards, TFRecordFormat())
    prepared = publish._prepare(
        named, {}, 3, ({}, {}), {}, [], (0, {}, 0), (NO_CONTENT, {"cat": 3})
    )
    (tmp_path / "tmp" / "summary.json").write_text(prepared.to_json())
    move_into_place(named, str(tmp_path / "tmp"), prepared.files, str(out))  # then died
    first = publish._publish(
        None, shards, {}, [3], 0, {}, 0, {"cat": 3}, {}, {}, {}, NO_CONTENT, []
    )
    assert first.run_id == "tmp" and first == prepared
    assert (
        publish._publish(None, shards, {}, [3], 0, {}, 0, {"cat": 3}, {}, {}, {}, NO_CONTENT, [])
        == first
    )  # after the end
    assert (out / "train-00000-of-00001.tfrecord").read_bytes() == b"xxx"
    assert sorted(os.listdir(out)) == [
        "dataset_info.json",
        "features.json",
        "image.class.label.labels.txt",
        "report.html",
        "summary.json",
        "train-00000-of-00001.tfrecord",
        "transform_fn",
        "transformed_metadata",
    ]
    assert (out / "transform_fn" / "assets" / "label").read_text().split() == ["cat"]


def test_a_retry_prepares_again_the_summary_a_killed_try_left_half_written(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    staged_transform_fn(tmp_path)
    shards, publish = [temp_shard(tmp_path, "train", 0, 3)], publisher(tmp_path)
    whole = publish._prepare(
        name_shards(shards, TFRecordFormat()),
        {},
        3,
        ({}, {}),
        {},
        [],
        (0, {}, 0),
        (NO_CONTENT, {"cat": 3}),
    ).to_json()
    (tmp_path / "tmp" / "summary.json").write_text(whole[: len(whole) // 2])
    summary = publish._publish(
        None, shards, {}, [3], 0, {}, 0, {"cat": 3}, {}, {}, {}, NO_CONTENT, []
    )
    assert summary.accounted and summary.examples == {"train": 3, "validation": 0, "test": 0}
    assert Summary.from_json((out / "summary.json").read_text()) == summary
