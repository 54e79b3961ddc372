"""A written output folder as readers see it: summary.json, shard paths, the label vocabulary
and the parse spec, all from the output's own metadata (local paths or gs:// alike).

Reading needs TensorFlow only: this module (and every reader) imports neither Beam nor
tf.Transform, so `load`, `verify` and `inspect` start as fast as TensorFlow does.

A folder without summary.json where a run failed (it published nothing) is no output,
and reading it says so: why, from that run's FAILED.json, and where that and its staged
report are; never only that summary.json is missing.
"""

from __future__ import annotations

import dataclasses
import functools
import posixpath
from collections.abc import Iterator

import pydantic
import tensorflow as tf

from image_tfrecords.core.file_formats import GFiles, ShardFormat
from image_tfrecords.core.records import naming
from image_tfrecords.core.records.choices import LabelMode, UnseenLabel
from image_tfrecords.core.records.failure import Failure
from image_tfrecords.core.records.feature_keys import is_image_key
from image_tfrecords.core.records.naming import SUMMARY_FILE, confined_name
from image_tfrecords.core.records.splits import SPLIT_NAMES, normalise_split
from image_tfrecords.core.records.summary import FeatureInfo, Summary
from image_tfrecords.core.records.text_limits import file_lines
from image_tfrecords.core.storage import storage

_DTYPES = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}


class NotAnOutput(FileNotFoundError):
    """The folder has no summary.json: a usage error, not a bad output."""


class FailedRunFolder(ValueError):
    """The folder has no summary.json, but a run failed in it: not an output, and why."""


def output_folder(path: str) -> str:
    """The output folder `path` names: itself, or the folder of the summary.json it names
    (`verify out/summary.json`, gs:// and s3:// alike; `out/summary.json/` is a folder)."""
    if path.endswith("/") or posixpath.basename(path) != SUMMARY_FILE:
        return path.rstrip("/")
    return posixpath.dirname(path) or "."


@dataclasses.dataclass(frozen=True)
class FailedRun:
    """A run that failed its outcome check in an output folder and published nothing:
    why (its FAILED.json, core/records/failure.py's Failure) and where its files are."""

    problems: tuple[str, ...]
    record: str  # its FAILED.json
    staged_report: str | None  # the report.html it staged, where there is one
    started_at: str  # ISO 8601; empty where FAILED.json cannot be read

    def said(self) -> str:
        """Why it failed, and where to look, in one line."""
        report = f"; its report: {self.staged_report}" if self.staged_report else ""
        return f"{'; '.join(self.problems)}; see {self.record}{report}"


def last_failed_run(directory: str) -> FailedRun | None:
    """The run that failed last in `directory` (its temp folder holds FAILED.json), or
    None. A run that publishes removes every run's temp folder, so a failed run beside a
    published output is one that came after it."""
    found = [
        _failed_run(temp)
        for temp in tf.io.gfile.glob(naming.every_temp_dir(directory))
        if tf.io.gfile.exists(naming.failure_record(temp))
    ]
    return max(found, key=lambda failed: failed.started_at, default=None)


def _failed_run(temp_dir: str) -> FailedRun:
    record, report = naming.failure_record(temp_dir), naming.staged_report(temp_dir)
    staged_report = report if tf.io.gfile.exists(report) else None
    with tf.io.gfile.GFile(record, "rb") as file:
        text = file.read()
    try:  # the folder may be a bucket others write to: its FAILED.json is read as untrusted
        failure = Failure.from_json(text, record)
    except ValueError:
        return FailedRun(
            ("the run's FAILED.json does not say why (it is not one this version reads)",),
            record,
            staged_report,
            "",
        )
    return FailedRun(failure.problems, record, staged_report, failure.summary.started_at)


@dataclasses.dataclass(frozen=True)
class Output:
    """An output folder and its summary.json."""

    directory: str
    summary: Summary

    @classmethod
    def read(cls, directory: str) -> Output:
        """`directory` may name its summary.json. Raises FailedRunFolder when the folder
        has no summary.json but a failed run's files, NotAnOutput when it has neither,
        ValueError when summary.json is not one (naming what is wrong) or lists no
        features (written before summary.json did)."""
        directory = output_folder(directory)
        path = f"{directory}/{SUMMARY_FILE}"
        if not tf.io.gfile.exists(path):
            failed = last_failed_run(directory)
            if failed:
                raise FailedRunFolder(
                    f"no output: {SUMMARY_FILE} was not published, as the "
                    f"last run failed: {failed.said()}"
                )
            raise NotAnOutput(f"{path} not found: not an image-tfrecords output")
        with tf.io.gfile.GFile(_within(path, directory), "rb") as file:
            try:
                summary = Summary.from_json(file.read())
            except pydantic.ValidationError as problem:
                raise ValueError(
                    f"{path} is not a summary.json image-tfrecords reads: {problem}"
                ) from None
        if not summary.features:
            raise ValueError(
                f"{path} lists no features: written by an older "
                "image-tfrecords, convert again to read it"
            )
        for name in _published(summary):  # before any reader opens one (a stat each)
            _within(f"{directory}/{name}", directory)
        return cls(directory, summary)

    def path(self, name: str) -> str:
        """A file in the output folder (a local path or a gs:// URI); UnconfinedName for
        a name that would leave it (summary.json's names are checked as it is read), or a
        local file that is a link out of it (planted where others can write)."""
        return _within(f"{self.directory}/{confined_name(name)}", self.directory)

    @property
    def features(self) -> dict[str, FeatureInfo]:
        """key -> its dtype and whether it is a list, as the examples hold them."""
        return self.summary.features

    @property
    def image_keys(self) -> list[str]:
        return [key for key, feature in self.features.items() if is_image_key(key, feature)]

    @property
    def label_mode(self) -> LabelMode:
        return self.summary.options.label_mode

    @functools.cached_property
    def shard_format(self) -> ShardFormat:
        """How its shards are read."""
        return self.summary.options.shard_format

    @functools.cached_property
    def vocabulary(self) -> list[str]:
        """The label vocabulary, read from the transform_fn's asset file (id = line)."""
        path = self.path(naming.PUBLISHED_LABEL_VOCABULARY)
        with tf.io.gfile.GFile(path, "rb") as file:
            return file_lines(file.read().decode())

    @property
    def num_classes(self) -> int:
        """Label ids a classifier must cover: the vocabulary, plus the OOV id (len of the
        vocabulary) that `--unseen_label oov` gives unseen labels."""
        return len(self.vocabulary) + (self.summary.options.unseen_label is UnseenLabel.OOV)

    def split_name(self, split: str) -> str:
        """The output's name for `split` as a user writes it ("TRAIN", "Validation",
        "val"...); ValueError when it is no split or the output has none of it."""
        name = normalise_split(split)
        if name is None:
            raise ValueError(f"unknown split {split!r}: give one of {SPLIT_NAMES}")
        if name not in self.summary.splits:
            raise ValueError(
                f"split {split!r}: the output has only {', '.join(self.summary.splits)}"
            )
        return name

    def shards(self, split: str) -> list[tuple[str, int]]:
        """(path, records) of each shard of `split` (any case, see split_name), in
        shard order."""
        return [
            (self.path(shard.file), shard.records)
            for shard in self.summary.splits[self.split_name(split)].shards
        ]

    def read_shard(self, path: str) -> Iterator[bytes]:
        """The records of one shard, in order, each checked as its format can; raises
        file_formats.RecordError at the first that cannot be read."""
        return self.shard_format.read(path, GFiles())

    def parse_spec(self) -> dict[str, tf.io.FixedLenFeature | tf.io.RaggedFeature]:
        """tf.io.parse_example's spec for every key: lists as RaggedFeature (1-D per example)."""
        return {
            key: tf.io.RaggedFeature(_DTYPES[feature.dtype])
            if feature.list
            else tf.io.FixedLenFeature([], _DTYPES[feature.dtype])
            for key, feature in self.features.items()
        }


def _within(path: str, directory: str) -> str:
    """`path`, where links lead within `directory`; else UnconfinedName."""
    if not storage.stays_in(path, directory):
        raise naming.UnconfinedName(f"{path} is a link out of {directory}: it is not read")
    return path


def _published(summary: Summary) -> Iterator[str]:
    """The name of every file summary.json lists: the shards, their companions, and the
    rest of what the run published."""
    for split in summary.splits.values():
        for shard in split.shards:
            yield shard.file
            yield from shard.companions
    yield from summary.files
