"""Every name of a file or folder a run writes, in one place (as TFDS's core/records/naming.py):
each built here, and where it is read back or matched, parsed or globbed here too.

A run id is the 12 hex digits that name one run everywhere: its temp folder
OUTPUT/.tmp-<run id>, summary.json's run_id, tf.Transform's working folder and an engine's
job-server log. What a run publishes:

    OUTPUT/train-00000-of-00004.tfrecord   a shard (and its companions: .idx)
    OUTPUT/summary.json, report.html, errors-00000-of-00001.jsonl, duplicates-...,
    near_duplicates-..., label_map.pbtxt, dataset_info.json, features.json
    OUTPUT/transform_fn/assets/label       tf.Transform's SavedModel and the label ids
    OUTPUT/transformed_metadata/
    OUTPUT/sources/train-00000-of-00004.tfrecord.index.jsonl   where each example of the
    OUTPUT/sources/train-00000-of-00004.tfrecord.thumbnails    shard came from, and its
                                           thumbnails (core/records/example_index.py)

and, until it publishes, what it writes in its temp folder <temp> = OUTPUT/.tmp-<run id>:

    <temp>/run.json                        the run's fingerprint (pipeline/resume.py)
    <temp>/summary.json                    the summary, once prepared
    <temp>/staged/                         what is published besides the shards;
                                           a failed run's FAILED.json
    <temp>/train-00003.tfrecord            a shard, awaiting its published name
    <temp>/thumbnails/train-00003.records  its thumbnails, for report.html
    <temp>/index/train-00003.index.jsonl   its example index (core/records/example_index.py)
    <temp>/parts/train-00003-0001.records  a part of it (TFRecord-framed, uncompressed)
    <temp>/parts/thumbnails/train-00003-0001.records
    <temp>/receipts/train-00003.receipt.json        the shard's receipt
    <temp>/receipts/train-00003-0001.receipt.json   its part's

A name read back from a file in the output (summary.json's shards and lists, a receipt's
files) is confined to its folder (confined_name): the output folder may be a bucket
others can write to, and a name such as `../../elsewhere/x`, `/etc/x` or `http://host/x`
would have a reader read, or a resumed run write, outside it.
"""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

from image_tfrecords.core.file_formats import FORMATS
from image_tfrecords.core.storage import storage

TEMP_PREFIX = ".tmp-"
RUN_FILE = "run.json"
STAGED_DIR = "staged"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
FAILED_FILE = "FAILED.json"  # in a failed run's staged dir, beside its dead letters
LABEL_MAP_FILE = "label_map.pbtxt"
DATASET_INFO_FILE = "dataset_info.json"  # TFDS's
FEATURES_FILE = "features.json"  # TFDS's
# tf.Transform's folders (TFTransformOutput.TRANSFORM_FN_DIR and .TRANSFORMED_METADATA_DIR,
# tests/test_naming.py), published as they are; a SavedModel keeps its vocabularies, one
# value a line, in ASSETS_DIR: OUTPUT/transform_fn/assets/label.
TRANSFORM_FN_DIR = "transform_fn"
TRANSFORMED_METADATA_DIR = "transformed_metadata"
# What tf.Transform's WriteTransformFn writes, as tft.TFTransformOutput(OUTPUT) reads it.
TRANSFORM_FOLDERS = (TRANSFORM_FN_DIR, TRANSFORMED_METADATA_DIR)
ASSETS_DIR = "assets"
LABEL_VOCABULARY = "label"  # the labels' vocabulary, by the name tf.Transform gives it
PUBLISHED_LABEL_VOCABULARY = f"{TRANSFORM_FN_DIR}/{ASSETS_DIR}/{LABEL_VOCABULARY}"  # in OUTPUT
LABELS_SUFFIX = ".labels.txt"  # TFDS's <key>.labels.txt, the label names of a ClassLabel key
# The lists of JSON lines a run publishes, by their stems: <stem>-00000-of-00001.jsonl
ERRORS = "errors"
DUPLICATES = "duplicates"
NEAR_DUPLICATES = "near_duplicates"

SORTED_LINES_DIR = "sorted-lines"  # sorted runs of those lists' lines, merged into them
RECEIPTS_DIR = "receipts"
WORKER_STARTED_FILE = "worker-started"  # the first SDK worker of a cluster run writes it
THUMBNAILS_DIR = "thumbnails"
INDEX_DIR = "index"
SOURCES_DIR = "sources"  # published: each shard's example index and thumbnails
INDEX_SUFFIX = ".index.jsonl"
THUMBNAILS_SUFFIX = ".thumbnails"
PARTS_DIR = "parts"
PART_SUFFIX = ".records"  # TFRecord framing, whatever the shards' format
RECEIPT_SUFFIX = ".receipt.json"


# A URL's or another filesystem's scheme (http:, gs:, s3:, hdfs:...), or a Windows drive.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_RUN_ID = re.compile(r"^[0-9a-f]{12}$")  # new_run_id's


class UnconfinedName(ValueError):
    """A name read from a file in the output that would leave its folder."""


def confined_name(name: str) -> str:
    """`name` as it is, where it names a file under the folder it was read from: a
    relative path of plain names joined by `/`. UnconfinedName otherwise: an absolute
    path, a URL or other scheme, an empty, `.` or `..` part, a backslash (a separator on
    Windows) or a control character. The one rule for every name read from the output."""
    parts = name.split("/")
    if not name or name.startswith("/") or _SCHEME.match(name):
        raise UnconfinedName(f"{name!r} is not a name in the folder (an absolute path or a URL)")
    if any(part in ("", ".", "..") for part in parts) or any(
        char == "\\" or ord(char) < 0x20 or ord(char) == 0x7F for char in name
    ):
        raise UnconfinedName(
            f"{name!r} leaves the folder or is not a plain name "
            "(an empty, '.' or '..' part, a backslash or a control "
            "character)"
        )
    return name


class PublishedShard(NamedTuple):
    """A published shard's name, `<split>-<index>-of-<count><suffix>`, as TFDS's
    ShardedFileTemplate: `name` builds it, `parse` reads it back, `glob` matches every one
    of a split. The published lists of JSON lines are named alike (jsonl_list)."""

    split: str
    index: int
    count: int
    suffix: str  # the shard format's (.tfrecord, .tfrecord.gz, .array_record) or .jsonl

    @property
    def name(self) -> str:
        return f"{self.split}-{self.index:05d}-of-{self.count:05d}{self.suffix}"

    @classmethod
    def parse(cls, name: str) -> PublishedShard | None:
        """The shard `name` names, None for a name the template does not build."""
        match = _PUBLISHED_SHARD.fullmatch(name)
        return match and cls(
            match["split"], int(match["index"]), int(match["count"]), match["suffix"]
        )

    @staticmethod
    def glob(split: str, stem: str) -> str:
        """Matches every shard of `split` whose suffix starts with `stem` (`.tfrecord`
        matches compressed ones too)."""
        return f"{split}-*-of-*{stem}*"


def shard_globs(split: str) -> tuple[str, ...]:
    """Matches every shard file of `split` in an output folder, of any format, compressed
    or not."""
    return tuple(PublishedShard.glob(split, format_class.stem) for format_class in FORMATS.values())


_PUBLISHED_SHARD = re.compile(
    r"(?P<split>.+?)-(?P<index>\d{5,})-of-(?P<count>\d{5,})"
    r"(?P<suffix>\..*)"
)
# TFDS's template for the same names, in dataset_info.json: train-00000-of-00004.tfrecord.
TFDS_FILEPATH_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}"


class ShardPiece(NamedTuple):
    """A shard, or a part of it, as the run's temp folder names it: `stem` is
    `<split>-<shard>` or `<split>-<shard>-<part>` (train-00003, train-00003-0001), the stem
    of its file, its thumbnails and its receipt; `parse` reads a stem back."""

    split: str
    shard: int
    part: int | None = None

    @property
    def stem(self) -> str:
        return f"{self.split}-{self.shard:05d}" + ("" if self.part is None else f"-{self.part:04d}")

    @classmethod
    def parse(cls, stem: str) -> ShardPiece | None:
        match = _SHARD_PIECE.fullmatch(stem)
        return match and cls(
            match["split"],
            int(match["shard"]),
            None if match["part"] is None else int(match["part"]),
        )


_SHARD_PIECE = re.compile(r"(?P<split>[a-z]+)-(?P<shard>\d{5,})(?:-(?P<part>\d{4,}))?")


def _stem(split: str, shard: int, part: int | None) -> str:
    return ShardPiece(split, shard, part).stem


def shard_path(temp_dir: str, split: str, shard: int, suffix: str) -> str:
    """A shard as written, before the publish step gives it its final name."""
    return storage.join(temp_dir, _stem(split, shard, None) + suffix)


def part_path(temp_dir: str, split: str, shard: int, part: int) -> str:
    return storage.join(temp_dir, PARTS_DIR, _stem(split, shard, part) + PART_SUFFIX)


def thumbnails_path(temp_dir: str, split: str, shard: int, part: int | None = None) -> str:
    """A shard's (or a part's) thumbnails, a record per example in its order: TFRecord-
    framed, whatever the shards' format (a file of the run's own, read by report_content.py)."""
    folder = (THUMBNAILS_DIR,) if part is None else (PARTS_DIR, THUMBNAILS_DIR)
    return storage.join(temp_dir, *folder, _stem(split, shard, part) + ".records")


def index_path(temp_dir: str, split: str, shard: int) -> str:
    """A shard's example index, awaiting the shard's published name."""
    return storage.join(temp_dir, INDEX_DIR, _stem(split, shard, None) + INDEX_SUFFIX)


def published_index(output_dir: str, shard_name: str) -> str:
    """The example index of the published shard `shard_name` (PublishedShard.name)."""
    return storage.join(output_dir, SOURCES_DIR, shard_name + INDEX_SUFFIX)


def published_thumbnails(output_dir: str, shard_name: str) -> str:
    """The thumbnails of the published shard `shard_name`, a record per example."""
    return storage.join(output_dir, SOURCES_DIR, shard_name + THUMBNAILS_SUFFIX)


def every_published_index(output_dir: str) -> str:
    return storage.join(output_dir, SOURCES_DIR, "*" + INDEX_SUFFIX)


def indexed_shard(index_path: str) -> PublishedShard | None:
    """The published shard whose example index is at `index_path` (published_index's);
    None for a name that is not one (the output may be a bucket others write to)."""
    name = index_path.rstrip("/").rsplit("/", 1)[-1]
    if not name.endswith(INDEX_SUFFIX):
        return None
    return PublishedShard.parse(name.removesuffix(INDEX_SUFFIX))


def receipt_path(temp_dir: str, split: str, shard: int, part: int | None = None) -> str:
    return storage.join(temp_dir, RECEIPTS_DIR, _stem(split, shard, part) + RECEIPT_SUFFIX)


def every_receipt(temp_dir: str) -> str:
    """The pattern of every receipt in the run's temp folder, the shards' and the parts'."""
    return storage.join(temp_dir, RECEIPTS_DIR, "*" + RECEIPT_SUFFIX)


def receipted(path: str) -> ShardPiece | None:
    """The shard or part whose receipt is at `path` (receipt_path's), else None."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return (
        ShardPiece.parse(name.removesuffix(RECEIPT_SUFFIX))
        if name.endswith(RECEIPT_SUFFIX)
        else None
    )


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def temp_dir(output_dir: str, run_id: str) -> str:
    return storage.join(output_dir, TEMP_PREFIX + run_id)


def run_id_of(temp_dir: str) -> str:
    """The run id whose temp folder `temp_dir` is."""
    return temp_dir.rstrip("/").rsplit("/", 1)[-1].removeprefix(TEMP_PREFIX)


def is_run_id(text: str) -> bool:
    """Whether `text` is a run id new_run_id gives (a folder named otherwise is not a
    run's)."""
    return bool(_RUN_ID.match(text))


def temp_dir_of_receipt(path: str) -> str:
    """The temp folder of the run whose receipt is at `path` (receipt_path's)."""
    return path.rsplit("/", 2)[0]


def every_temp_dir(output_dir: str) -> str:
    """The pattern of every run's temp folder in `output_dir`."""
    return storage.join(output_dir, TEMP_PREFIX + "*")


def worker_started(temp_dir: str) -> str:
    """The marker the job's first step writes from the first SDK worker that starts, which
    the launcher waits for (--worker_start_timeout)."""
    return storage.join(temp_dir, WORKER_STARTED_FILE)


def staged_dir(temp_dir: str) -> str:
    """Where a run writes what it publishes besides the shards (transform_fn/, errors...)."""
    return storage.join(temp_dir, STAGED_DIR)


def failure_record(temp_dir: str) -> str:
    """The FAILED.json of the run with this temp folder (a pattern, for a pattern)."""
    return storage.join(staged_dir(temp_dir), FAILED_FILE)


def staged_report(temp_dir: str) -> str:
    """The report.html the run with this temp folder staged (a failed run's stays there)."""
    return storage.join(staged_dir(temp_dir), REPORT_FILE)


def split_staging_dir(parent: str, run_id: str) -> str:
    """The staging conversion of a grouped split (--split_by groups), under
    --temp_location or the local temp dir, with the split plan beside its output."""
    return storage.join(parent, f"image-tfrecords-split-{run_id}")


def split_plan_file(staging_dir: str) -> str:
    return storage.join(staging_dir, "split_plan.jsonl")


def staged_output(staging_dir: str) -> str:
    return storage.join(staging_dir, "output")


def transform_dir(parent: str, run_id: str) -> str:
    """tf.Transform's working folder for the run, under --temp_location or the local
    temp dir (tf.Transform writes through TensorFlow's filesystems, not Beam's)."""
    return storage.join(parent, f"image-tfrecords-{run_id}")


def job_server_log(folder: str, run_id: str, engine: str) -> str:
    return storage.join(folder, f"image-tfrecords-{run_id}-{engine.lower()}.log")


def jsonl_list(folder: str, stem: str) -> str:
    """One of the published lists of JSON lines (ERRORS, DUPLICATES, NEAR_DUPLICATES)."""
    return f"{folder}/{PublishedShard(stem, 0, 1, '.jsonl').name}"


def every_jsonl_list(stem: str) -> str:
    """The pattern of every published list of `stem` in a folder."""
    return f"{stem}-*.jsonl"


def vocabulary(transform_fn_dir: str, name: str) -> str:
    """The vocabulary `name` (a text asset) of the transform_fn at `transform_fn_dir`."""
    return storage.join(transform_fn_dir, ASSETS_DIR, name)


def sorted_lines_run(temp_dir: str, list_path: str) -> str:
    """A new file for a sorted run of the lines of the list at `list_path`: a name of its
    own per call, as a retried bundle writes its runs again."""
    name = list_path.rstrip("/").rsplit("/", 1)[-1]
    return storage.join(temp_dir, SORTED_LINES_DIR, f"{uuid.uuid4().hex}-{name}")
