"""Publishing shards under final names, and the accounting in summary.json."""

import json
import os

import apache_beam as beam
import pytest
import tensorflow_transform.beam as tft_beam
from apache_beam.testing.test_pipeline import TestPipeline

from transforms.labels import AnalyzeLabels
from transforms.manifest import ManifestRow
from transforms.publish import (AccountingError, PublishOutput, build_summary, move_into_place,
                                name_shards)
from transforms.shards import ShardWritten


def temp_shard(tmp_path, split, shard, examples, labels=None):
    """A shard as the writer leaves it: a temp file, or none when it got no example."""
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    path = temp / f"{split}-{shard:05d}.tfrecord"
    if examples:
        path.write_bytes(b"x" * examples)
    return ShardWritten(split, shard, str(path), examples, examples, examples,
                        labels or {"cat": examples}, {})


def test_shards_are_renumbered_without_empty_ones_and_stale_ones_go(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train-00000-of-00004.tfrecord").write_bytes(b"old")
    (out / "train-00003-of-00004.tfrecord").write_bytes(b"old")
    (out / "notes.txt").write_text("not ours")
    shards = [temp_shard(tmp_path, "train", 3, 2), temp_shard(tmp_path, "train", 0, 5),
              temp_shard(tmp_path, "train", 1, 0), temp_shard(tmp_path, "test", 0, 1)]

    published = name_shards(shards, "none")
    move_into_place(published, str(out))

    assert [(name, s.shard) for name, s in published["train"]] == [
        ("train-00000-of-00002.tfrecord", 0), ("train-00001-of-00002.tfrecord", 3)]
    assert sorted(os.listdir(out)) == ["notes.txt", "test-00000-of-00001.tfrecord",
                                       "train-00000-of-00002.tfrecord",
                                       "train-00001-of-00002.tfrecord"]
    assert (out / "train-00001-of-00002.tfrecord").read_bytes() == b"xx"
    assert os.listdir(tmp_path / "tmp") == []


def test_moving_again_after_a_retry_is_harmless(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    shards = [temp_shard(tmp_path, "train", 0, 3)]
    named = name_shards(shards, "none")
    move_into_place(named, str(out))
    move_into_place(named, str(out))
    assert [name for name, _ in named["train"]] == ["train-00000-of-00001.tfrecord"]
    assert (out / "train-00000-of-00001.tfrecord").read_bytes() == b"xxx"


def test_summary_accounts_for_every_row():
    files = {"train": [("train-00000-of-00001.tfrecord",
                        ShardWritten("train", 0, "t", 3, 30, 28, {"cat": 2, "dog": 1},
                                     {"format": 1}))],
             "test": [("test-00000-of-00001.tfrecord",
                       ShardWritten("test", 0, "t", 2, 20, 20, {"cat": 1, "bird": 1}, {}))]}
    summary = build_summary(files, {"file_not_found": 2}, rows_read=7,
                            vocabulary=["cat", "dog"], error_files=["errors.jsonl"],
                            run_info={"options": {}})
    assert (summary["examples_written"], summary["rows_dead_lettered"]) == (5, 2)
    assert summary["accounted"] is True
    assert summary["error_fraction"] == 2 / 7
    assert summary["splits"]["test"]["unseen_label_examples"] == 1
    assert summary["empty_splits"] == ["validation"]
    assert summary["splits"]["train"]["shards"] == [
        {"file": "train-00000-of-00001.tfrecord", "records": 3, "bytes": 30}]
    lost = build_summary(files, {}, rows_read=7, vocabulary=["cat"], error_files=[],
                         run_info={})
    assert lost["accounted"] is False


def test_a_run_that_lost_rows_publishes_no_shard(tmp_path):
    out, tft_dir = tmp_path / "out", tmp_path / "tft"
    with TestPipeline() as p:
        _ = (p | beam.Create([ManifestRow("m", 1, "r", "train", "/a.jpg", ("cat",))])
             | AnalyzeLabels(False, str(tft_dir)) | tft_beam.WriteTransformFn(str(tft_dir)))
    shards = [temp_shard(tmp_path, "train", 0, 3)]
    publish = PublishOutput(str(out), str(tmp_path / "tmp"), str(tft_dir), "none", run_info={})
    with pytest.raises(AccountingError, match="no shard was published"):
        publish._publish(None, shards, {"file_not_found": 1}, [5], [])
    assert not list(out.glob("train-*")) and not (out / "transform_fn").exists()
    assert (tmp_path / "tmp" / "train-00000.tfrecord").exists()
    assert json.loads((out / "summary.json").read_text())["accounted"] is False
