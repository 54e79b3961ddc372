"""The job's own flags, as a PipelineOptions subclass so every Beam runner flag passes through."""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

from apache_beam.options.pipeline_options import (
    DebugOptions,
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)

from image_tfrecords.core.file_formats import (
    DEFAULT_FORMAT,
    ShardFormat,
    compression_names,
    format_names,
    shard_format,
)
from image_tfrecords.core.inputs.rows import (
    DEFAULT_LABEL_SEPARATOR,
    DEFAULT_SPLIT_FRACTIONS,
    NO_SPLIT_COLUMN,
    RowRules,
)
from image_tfrecords.core.inputs.sources import MANIFEST_FORMATS, split_and_path
from image_tfrecords.core.records.choices import Dedupe, LabelMode, LabelOrder, LeftOut, UnseenLabel
from image_tfrecords.core.records.copies import DEFAULT_NEAR_DISTANCE, MAX_NEAR_DISTANCE
from image_tfrecords.core.records.image_settings import ImageSettings, InvalidImageSettings
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.schema import ExtraColumn, SchemaError, load_schema
from image_tfrecords.core.records.summary import MIN_EXAMPLES_PER_SHARD
from image_tfrecords.core.records.workers import Workers
from image_tfrecords.core.storage.downloads import DownloadSettings, is_url
from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
from image_tfrecords.core.storage.storage import is_local

_PILLOW_MAX_PIXELS = ImageSettings().max_pixels
# ImageSettings' fields whose option is named otherwise (its problems name the option).
_IMAGE_SETTING_OPTIONS = {"max_pixels": "max_image_pixels"}
# How long a Flink or Spark cluster may take to start the job's first SDK worker (a
# container image pulled, TensorFlow imported) before the launcher cancels the job.
WORKER_START_TIMEOUT_S = 600.0
# --split_by's choices: the hash of the URI (the default), or groups kept together.
SPLIT_BY = ("uri", "groups")


def folder_group_level(group_column: str) -> int | None:
    """--group_column folder or folder:N: how many folders up from an image its group is
    (1: its own); None for a column's name; 0 for a level that is not a number >= 1."""
    name, _, level = group_column.partition(":")
    if name != "folder":
        return None
    if not level:
        return 1
    return int(level) if level.isdigit() else 0


class Option(NamedTuple):
    """One flag: its help and argparse's keywords, or an off-by-default switch (a bare
    --flag, or --flag=true|false as a Flex Template passes it)."""

    flag: str
    help: str
    metavar: str | None = None
    type: Callable[[str], object] | None = None
    default: object = None
    choices: Sequence[str] | None = None
    action: str | None = None
    switch: bool = False

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--")

    def add_to(self, group: argparse._ActionsContainer) -> None:
        if self.switch:
            group.add_argument(
                self.flag,
                nargs="?",
                const=True,
                default=False,
                type=parse_flag,
                metavar="true|false",
                help=self.help,
            )
            return
        keywords = {
            name: value
            for name, value in self._asdict().items()
            if name not in ("flag", "switch") and value is not None
        }
        group.add_argument(self.flag, **keywords)


class OptionGroup(NamedTuple):
    """A group of options as --help shows it."""

    title: str
    description: str
    options: tuple[Option, ...]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group(self.title, self.description)
        for option in self.options:
            option.add_to(group)


# The job's own options, in --help's groups and order (each group: title, description).
OPTION_GROUPS: tuple[OptionGroup, ...] = (
    OptionGroup(
        "input",
        "What is read.",
        (
            Option(
                "--manifest",
                "A manifest or annotation file, folder or glob, local or remote (CSV, JSON "
                "Lines, COCO, VOC, KITTI, Open Images, CVAT, YOLO, Label Studio, LabelMe, "
                "Hugging Face), sniffed. SPLIT=PATH: all of PATH is that split. "
                "Repeatable. Image paths are relative to it (see --image_dir).",
                metavar="PATH",
                action="append",
            ),
            Option(
                "--image_folder",
                "Instead of --manifest: a folder of ROOT/[<split>/]<label>/<file> "
                "images, a Hugging Face imagefolder or a YOLO folder.",
                metavar="DIR",
            ),
            Option(
                "--input_format",
                "The format of every --manifest, where sniffing cannot tell.",
                choices=MANIFEST_FORMATS,
            ),
            Option(
                "--image_dir",
                "Resolve relative image names against this folder, not the manifest's.",
                metavar="DIR",
            ),
            Option(
                "--allow_paths_outside_dataset",
                "Let annotation files name images outside their dataset's folder "
                "(absolute paths, '..', URLs). Off: path_outside_dataset.",
                switch=True,
            ),
            Option(
                "--uri_column",
                "The column holding the image URI, over the known names (image_uri, filename...).",
                metavar="NAME",
            ),
            Option(
                "--label_column",
                "The column holding the label, over the known names (label, class...).",
                metavar="NAME",
            ),
            Option(
                "--split_column",
                "The column holding each row's split, over the known names (split, set, "
                "ml_use, is_valid...); 'none': all from --split_fractions.",
                metavar="NAME",
            ),
            Option(
                "--schema",
                "Extra columns to keep as typed features (integer, float, string, "
                "categorical, image, segmentation), inline or a file: "
                '\'{"age": "integer"}\'.',
                metavar="JSON",
            ),
            Option(
                "--leave_out",
                f"Leave these out of the examples, comma separated: "
                f"{', '.join(LeftOut.values())} (default: all an input holds are kept).",
                metavar="KINDS",
                default="",
            ),
            Option(
                "--split_fractions",
                "train,validation,test fractions for rows without a split, from a hash "
                "of the image URI.",
                metavar="FRACTIONS",
                default=",".join(map(str, DEFAULT_SPLIT_FRACTIONS)),
            ),
            Option(
                "--split_by",
                "uri: each row's split from a hash of its image URI. groups: byte copies "
                "and near-copies (--near_duplicate_distance) kept in one split, each "
                "split's labels close to the whole's, the same split every run; every "
                "row's split is made (a split column is not read). It reads each image "
                "once, in a staging pass (docs/output/splits.md).",
                choices=SPLIT_BY,
                default=SPLIT_BY[0],
            ),
            Option(
                "--group_column",
                "With --split_by groups: rows with the same value in this manifest column "
                "(a patient, subject, camera, video or product id), or images with the "
                "same value of this attribute of a COCO file's image entries (video_id), "
                "stay in one split; 'folder': images in the same folder do, 'folder:N': "
                "under the same folder N levels up.",
                metavar="NAME",
            ),
            # Set by --split_by groups for the run after its staging pass
            # (pipeline/split_staging.py), not by users: each image's split, and the
            # staged output its examples are copied from.
            Option("--split_plan", argparse.SUPPRESS),
            Option("--staged_output", argparse.SUPPRESS),
        ),
    ),
    OptionGroup(
        "labels",
        "How labels become ids.",
        (
            Option(
                "--label_mode",
                "multi: several labels per row (AutoML's columns, or joined by "
                "--label_separator). detection: one box per row (AutoML's), an image's "
                "boxes in one example, the Object Detection API's features and "
                "label_map.pbtxt.",
                choices=LabelMode.values(),
                default=LabelMode.SINGLE.value,
            ),
            Option(
                "--label_separator",
                "What joins several labels in one field (multi). Default: the most "
                "common of ';' ',' '|' in the first rows, as the console says.",
                metavar="TEXT",
            ),
            Option(
                "--unseen_label",
                "A VALIDATION/TEST label TRAIN never saw: 'error' dead-letters the "
                "row; 'oov' gives it id len(vocabulary).",
                choices=UnseenLabel.values(),
                default=UnseenLabel.ERROR.value,
            ),
            Option(
                "--label_order",
                "Ids of labels learnt from TRAIN: 'sorted' by text (as Keras, TFDS); "
                "'frequency', the most frequent first (as TFRecorder).",
                choices=LabelOrder.values(),
                default=LabelOrder.SORTED.value,
            ),
            Option(
                "--vocabulary",
                "Pin the label ids: a file of one label per line, a label_map.pbtxt, or "
                "an earlier output folder.",
                metavar="PATH",
            ),
            Option(
                "--strict_labels",
                "Fail the run on labels that are probably a mistake (otherwise "
                "warnings): a separator inside a label, labels differing only in case "
                "or spaces, number labels not their ids.",
                switch=True,
            ),
        ),
    ),
    OptionGroup(
        "images",
        "What is stored of each image.",
        (
            Option(
                "--image_format",
                "keep: store JPEG/PNG bytes as they are, re-encode only what TensorFlow "
                "cannot decode; jpeg/png: store every image so.",
                choices=("keep", "jpeg", "png"),
                default="keep",
            ),
            Option(
                "--max_side",
                "Resize images whose longer side exceeds this (aspect kept).",
                metavar="PIXELS",
                type=int,
            ),
            Option(
                "--jpeg_quality",
                "Quality of images re-encoded as JPEG (1-100).",
                metavar="Q",
                type=int,
                default=95,
            ),
            Option(
                "--max_image_pixels",
                "Larger images are rejected as decompression bombs.",
                metavar="N",
                type=int,
                default=_PILLOW_MAX_PIXELS,
            ),
            Option(
                "--keep_16_bit",
                "Store 16-bit greyscale images as 16-bit PNGs, not 8-bit (as "
                "tf.io.decode_image reads them; Pillow's convert('RGB') clips 16 bits "
                "to white).",
                switch=True,
            ),
            Option(
                "--dedupe",
                "Copies are always reported; sha256 also writes a byte-identical image "
                "once (in the earliest split), near also drops near-copies.",
                choices=Dedupe.values(),
                default=Dedupe.NONE.value,
            ),
            Option(
                "--near_duplicate_distance",
                f"Near-copies: perceptual hashes at most this many bits apart, 0 to "
                f"{MAX_NEAR_DISTANCE} (docs/output/copies.md).",
                metavar="BITS",
                type=int,
                default=DEFAULT_NEAR_DISTANCE,
            ),
        ),
    ),
    OptionGroup(
        "output",
        "What is written, and when a run counts as failed.",
        (
            Option(
                "--output_dir",
                "Where the shards, summary.json and report.html go (local or remote).",
                metavar="DIR",
            ),
            Option(
                "--overwrite",
                "Replace the outputs of a previous run in a non-empty --output_dir.",
                switch=True,
            ),
            Option(
                "--resume",
                "Continue a stopped run of the same command in this --output_dir, "
                "reusing the shards it finished; a run made from other inputs or "
                "options is refused, naming what differs.",
                switch=True,
            ),
            Option(
                "--reuse_from",
                "An earlier output of this dataset: each example whose rows, settings "
                "and image (by what storage says of it: size and time, a bucket's checksum) "
                "are unchanged is copied from it instead of read again, giving the bytes a "
                "full run gives. Default with --overwrite: the output being replaced.",
                metavar="DIR",
            ),
            Option(
                "--no_reuse",
                "Read every image again, even with --overwrite (a full run).",
                switch=True,
            ),
            Option(
                "--num_shards",
                f"Shards per split (at most one per example); under "
                f"{MIN_EXAMPLES_PER_SHARD} examples a shard is warned about. Default: from "
                f"--target_shard_mb.",
                metavar="N",
                type=int,
            ),
            Option(
                "--target_shard_mb",
                "Target shard size in MB, estimated from the source file sizes.",
                metavar="MB",
                type=float,
                default=128.0,
            ),
            Option(
                "--file_format",
                "tfrecord: .tfrecord shards with a .idx index each; array_record: random "
                "access (Grain, TFDS data sources).",
                choices=format_names(),
                default=DEFAULT_FORMAT,
            ),
            Option(
                "--compression",
                "tfrecord: gzip (.tfrecord.gz); array_record: zstd. Encoded images gain little.",
                choices=compression_names(),
                default="none",
            ),
            Option(
                "--max_error_fraction",
                "Exit non-zero when more than this fraction of rows is dead-lettered.",
                metavar="F",
                type=float,
                default=0.01,
            ),
        ),
    ),
    OptionGroup(
        "run",
        "The worker processes, image URLs, the console.",
        (
            Option(
                "--worker_processes",
                "Processes that read, check and encode images and write shards; 0: in "
                "the pipeline's own process. Default: one per core (fewer if memory is "
                "short), one on Dataflow.",
                metavar="N",
                type=int,
                default=None,
            ),
            Option(
                "--decode_timeout",
                "Seconds one image may take to decode, else decode_timeout.",
                metavar="S",
                type=float,
                default=120.0,
            ),
            Option(
                "--worker_start_timeout",
                "Flink and Spark: seconds the first SDK worker may take to start; 0: no limit.",
                metavar="S",
                type=float,
                default=WORKER_START_TIMEOUT_S,
            ),
            Option(
                "--read_threads",
                "Threads per shard writer reading images in buckets ahead of decoding.",
                metavar="N",
                type=int,
                default=4,
            ),
            Option(
                "--download_timeout",
                "Seconds an image URL may take to connect or between reads (3x for all "
                "of it), else http_timeout.",
                metavar="S",
                type=float,
                default=DownloadSettings.timeout_s,
            ),
            Option(
                "--download_retries",
                "Retries, with backoff, of an image URL that answers 5xx or 429 or whose "
                "connection fails.",
                metavar="N",
                type=int,
                default=DownloadSettings.retries,
            ),
            Option(
                "--max_download_mb",
                "A larger image file (a URL's body, an object, a local file) is dead-lettered "
                "as too_large, read no further.",
                metavar="MB",
                type=float,
                default=DownloadSettings.max_bytes / 2**20,
            ),
            Option(
                "--downloads_per_host",
                "Concurrent requests to one host from one worker process.",
                metavar="N",
                type=int,
                default=DownloadSettings.per_host,
            ),
            Option(
                "--download_threads",
                "Threads per shard writer downloading image URLs ahead of decoding.",
                metavar="N",
                type=int,
                default=DownloadSettings.threads,
            ),
            Option(
                "--quiet",
                "No live progress (by default a bar on a terminal, else a line every "
                "5%% at most every 5 s).",
                switch=True,
            ),
            Option(
                "--verbose",
                "Print all that TensorFlow's and Beam's libraries print, their start-up "
                "lines included.",
                switch=True,
            ),
        ),
    ),
)


class ConvertOptions(PipelineOptions):
    """Options of `image-tfrecords convert` / `python -m image_tfrecords`, in groups."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        for group in OPTION_GROUPS:
            group.add_to(parser)

    @classmethod
    def names(cls) -> list[str]:
        """The names of this job's own options (not Beam's) that a user gives, in --help
        order: not those a run sets for the run it starts, which --help does not show."""
        return [
            option.dest
            for group in OPTION_GROUPS
            for option in group.options
            if option.help != argparse.SUPPRESS
        ]

    def values(self) -> dict[str, object]:
        """The options a user gives, by name (summary.json's)."""
        return {name: getattr(self, name) for name in self.names()}

    def earlier_output(self) -> str | None:
        """The output this run follows: --reuse_from, else with --overwrite the output
        being replaced (the summary compares its label ids with this run's)."""
        return self.reuse_from or (self.output_dir if self.overwrite else None)

    def reuse_source(self) -> str | None:
        """The output whose unchanged examples are copied: the staging pass's of a grouped
        split, else the earlier output, unless --no_reuse."""
        if self.staged_output:
            return self.staged_output
        return None if self.no_reuse else self.earlier_output()

    @property
    def splits_by_groups(self) -> bool:
        return self.split_by == SPLIT_BY[1]

    def problems(self) -> list[str]:
        """What is wrong with the options, in words a user can act on."""
        found = []
        if bool(self.manifest) == bool(self.image_folder):
            found.append("give either --manifest or --image_folder")
        if not self.output_dir:
            found.append("--output_dir is required")
        found += self._url_problems()
        try:
            self.split_fraction_values()
        except ValueError as problem:
            found.append(f"--split_fractions {self.split_fractions!r}: {problem}")
        if self.image_folder and self.input_format:
            found.append("--input_format names the format of a --manifest, not of --image_folder")
        try:
            self.left_out()
        except ValueError as problem:
            found.append(str(problem))
        if self.image_folder and self.image_dir:
            found.append("--image_dir applies to --manifest, not --image_folder")
        if self.reuse_from and self.no_reuse:
            found.append("--reuse_from and --no_reuse: give one")
        try:
            if self.extra_columns() and (self.image_folder or self.label_mode == "detection"):
                found.append(
                    "--schema needs a classification manifest (not --image_folder "
                    "or --label_mode detection)"
                )
        except SchemaError as problem:
            found.append(str(problem))
        if self.splits_by_groups and self.view_as(StandardOptions).no_wait_until_finish:
            found.append(
                "--split_by groups waits for its staging run to plan the split: "
                "drop --no_wait_until_finish"
            )
        if self.group_column and not self.splits_by_groups:
            found.append(f"--group_column {self.group_column}: give --split_by groups too")
        if self.group_column and (folder := folder_group_level(self.group_column)) is not None:
            if folder < 1:
                found.append(f"--group_column {self.group_column}: folder:N takes N >= 1")
        # `--split_column none` names no column (it is how --split_by groups stages).
        names_a_column = self.split_column not in (None, NO_SPLIT_COLUMN)
        if (self.uri_column or self.label_column or names_a_column) and self.image_folder:
            found.append(
                "--uri_column, --label_column and --split_column name columns of "
                "a --manifest, not of --image_folder"
            )
        if self.label_separator == "":
            found.append("--label_separator must not be empty")
        try:
            self._image_settings()
        except InvalidImageSettings as invalid:
            found += [
                f"--{_IMAGE_SETTING_OPTIONS.get(field, field)} {wrong}"
                for field, wrong in invalid.problems
            ]
        if self.num_shards is not None and self.num_shards < 1:
            found.append("--num_shards must be at least 1")
        if self.target_shard_mb <= 0:
            found.append("--target_shard_mb must be positive")
        if not 0 <= self.max_error_fraction <= 1:
            found.append("--max_error_fraction must be between 0 and 1")
        if self.read_threads < 1:
            found.append("--read_threads must be at least 1")
        if self.download_timeout <= 0:
            found.append("--download_timeout must be positive")
        if self.download_retries < 0:
            found.append("--download_retries must be 0 or more")
        if self.max_download_mb <= 0:
            found.append("--max_download_mb must be positive")
        if self.downloads_per_host < 1 or self.download_threads < 1:
            found.append("--downloads_per_host and --download_threads must be at least 1")
        if self.worker_processes is not None and self.worker_processes < 0:
            found.append("--worker_processes must be 0 or more")
        if self.decode_timeout <= 0:
            found.append("--decode_timeout must be positive")
        if self.worker_start_timeout < 0:
            found.append("--worker_start_timeout must be 0 (no limit) or more")
        if not 0 <= self.near_duplicate_distance <= MAX_NEAR_DISTANCE:
            found.append(f"--near_duplicate_distance must be 0 to {MAX_NEAR_DISTANCE} bits")
        try:
            self._shard_format()
        except ValueError as problem:
            found.append(str(problem))
        return found

    def _url_problems(self) -> list[str]:
        """Images may be http(s) URLs; what is listed, or written, may not."""
        found = [
            f"--manifest {path}: a manifest at a URL is not read; download it first "
            "(the images it lists may be URLs)"
            for path in (split_and_path(argument)[1] for argument in self.manifest or ())
            if is_url(path)
        ]
        if self.image_folder and is_url(self.image_folder):
            found.append(
                f"--image_folder {self.image_folder}: a web server's folder cannot "
                "be listed; give a --manifest of the image URLs"
            )
        if self.output_dir and is_url(self.output_dir):
            found.append(
                f"--output_dir {self.output_dir}: cannot write to a URL; give a "
                "local folder or a bucket"
            )
        return found

    def left_out(self) -> frozenset[LeftOut]:
        """--leave_out's values; ValueError naming one that is not a choice."""
        names = [name.strip() for name in self.leave_out.split(",") if name.strip()]
        for name in names:
            if name not in LeftOut.values():
                raise ValueError(
                    f"--leave_out {name!r} is not one of {', '.join(LeftOut.values())}"
                )
        return frozenset(map(LeftOut, names))

    def split_fraction_values(self) -> tuple[float, float, float]:
        return parse_split_fractions(self.split_fractions)

    def row_rules(self) -> RowRules:
        return RowRules(
            self.split_fraction_values(),
            self.label_mode,
            self.label_separator,
            self.extra_columns(),
            image_dir=self.image_dir,
            uri_column=self.uri_column,
            label_column=self.label_column,
            split_column=self.split_column,
            leave_out=self.left_out(),
            allow_paths_outside_dataset=self.allow_paths_outside_dataset,
            max_pixels=self.max_image_pixels,
            split_plan=self.split_plan,
        )

    def extra_columns(self) -> tuple[ExtraColumn, ...]:
        return load_schema(self.schema)

    def run_settings(self) -> RunSettings:
        """What the conversion does, for the transforms: built once, passed whole."""
        return RunSettings(
            label_mode=LabelMode(self.label_mode),
            label_separator=self.label_separator or DEFAULT_LABEL_SEPARATOR,
            unseen_label=UnseenLabel(self.unseen_label),
            label_order=LabelOrder(self.label_order),
            extra_columns=self.extra_columns(),
            shard_format=self._shard_format(),
            image=self._image_settings(),
            workers=self._workers(),
            downloads=DownloadSettings(
                timeout_s=self.download_timeout,
                retries=self.download_retries,
                max_bytes=round(self.max_download_mb * 2**20),
                per_host=self.downloads_per_host,
                threads=self.download_threads,
            ),
            dedupe=Dedupe(self.dedupe),
            near_distance=self.near_duplicate_distance,
            filesystems=FilesystemOptions.of(self),
        )

    def _workers(self) -> Workers:
        """Where shards are written; the default process count depends on the runner."""
        processes = self.worker_processes
        if processes is None and _runs_a_process_per_core(self):
            processes = 1  # isolation, without more busy processes than cores
        return Workers(processes, self.read_threads, self.decode_timeout, self.max_image_pixels)

    def _image_settings(self) -> ImageSettings:
        return ImageSettings(
            image_format=self.image_format,
            max_side=self.max_side,
            jpeg_quality=self.jpeg_quality,
            max_pixels=self.max_image_pixels,
            keep_16_bit=self.keep_16_bit,
        )

    def _shard_format(self) -> ShardFormat:
        return shard_format(self.file_format, self.compression)


# The options that name a file or folder, by the options class that holds each. A
# cluster's workers (a worker pool beside each TaskManager, say) do not run in the
# launcher's working folder, so a relative path there is another file, or none.
_PATH_OPTIONS: dict[type[PipelineOptions], tuple[str, ...]] = {
    ConvertOptions: ("image_folder", "image_dir", "vocabulary", "output_dir"),
    GoogleCloudOptions: ("temp_location", "staging_location"),
}


def make_local_paths_absolute(options: PipelineOptions) -> None:
    """Makes each relative local path the options name absolute, from the launcher's
    working folder, before the launcher reads any of them or hands them to a runner:
    what the launcher checks is then what every worker opens, and what it reports is
    where the job wrote. Remote URIs (gs://, s3://, http://...) stay as they are, and so
    does an inline --schema."""
    for options_class, names in _PATH_OPTIONS.items():
        view = options.view_as(options_class)
        for name in names:
            setattr(view, name, _absolute(getattr(view, name)))
    convert = options.view_as(ConvertOptions)
    if convert.manifest:
        convert.manifest = [_absolute_manifest(argument) for argument in convert.manifest]
    if convert.schema and not convert.schema.lstrip().startswith("{"):
        convert.schema = _absolute(convert.schema)


def _absolute_manifest(argument: str) -> str:
    """A --manifest value with its path absolute: SPLIT= is kept as given."""
    path = split_and_path(argument)[1]
    return argument.removesuffix(path) + _absolute(path)


def _absolute(path: str | None) -> str | None:
    if not path or not is_local(path) or os.path.isabs(path):
        return path
    return os.path.abspath(path)


def options_classes() -> list[type[PipelineOptions]]:
    """ConvertOptions, then every PipelineOptions class Beam reads flags with (its own
    get_all_options takes the direct subclasses, once each), runners' included."""
    found = {str(cls): cls for cls in PipelineOptions.__subclasses__()}
    return [ConvertOptions, *(cls for cls in found.values() if cls is not ConvertOptions)]


class _ParseError(Exception):
    """A value a known option cannot take (argparse's own message)."""


class _RaisingParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting."""

    def error(self, message: str) -> None:
        raise _ParseError(message)


def unknown_option_problem(argv: Sequence[str]) -> str | None:
    """What Beam would drop from `argv` with no more than a log line, in words: an option
    no options class knows (the closest known one named), a word that is no option's
    value, or a value a known option cannot take. None when all is known."""
    try:
        known, unknown = _parse_known(argv)
        if unknown and known.runner not in (None, "DirectRunner"):
            # A runner's own options (Dask's, say) exist once its module is imported.
            from apache_beam.runners.runner import create_runner  # noqa: PLC0415

            try:
                create_runner(known.runner)
            except ValueError as problem:
                return f"--runner {known.runner}: {problem}"
            known, unknown = _parse_known(argv)
    except _ParseError as problem:
        return str(problem)
    problems = []
    for index, arg in enumerate(unknown):
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            close = difflib.get_close_matches(name, _option_names(), n=1)
            problems.append(
                f"unknown option {name}" + (f" (did you mean {close[0]}?)" if close else "")
            )
        elif index == 0 or not unknown[index - 1].startswith("-") or "=" in unknown[index - 1]:
            problems.append(f"unexpected argument {arg!r} (options are --name value)")
    return "; ".join(problems) or None


def _options_parser() -> _RaisingParser:
    """Every option Beam accepts, as Beam's own parser has them (no abbreviations)."""
    parser = _RaisingParser(allow_abbrev=False, conflict_handler="resolve", add_help=False)
    for options_class in options_classes():
        options_class._add_argparse_args(parser)  # noqa: SLF001 - Beam's own extension point
    return parser


def _parse_known(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    return _options_parser().parse_known_args(list(argv))


def _option_names() -> list[str]:
    return [
        flag
        for action in _options_parser()._actions  # noqa: SLF001
        for flag in action.option_strings
    ]


def parse_split_fractions(text: str) -> tuple[float, float, float]:
    """ "0.8,0.1,0.1" -> (0.8, 0.1, 0.1); ValueError unless three fractions summing to 1."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) < 0 or abs(sum(values) - 1) > 1e-6:
        raise ValueError("give three non-negative fractions that sum to 1, e.g. 0.8,0.1,0.1")
    return values


def parse_flag(text: str) -> bool:
    """ "true"/"false" (any case) -> bool; Flex Templates pass every parameter with a value."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return value == "true"


def runs_on_the_direct_runner(options: PipelineOptions) -> bool:
    return options.view_as(StandardOptions).runner in (None, "DirectRunner")


def writes_shards_in_this_process(options: PipelineOptions) -> bool:
    """Whether the shard writers run in the launcher's own process: on the DirectRunner's
    FnApiRunner, unless --direct_running_mode multi_processing gives it worker processes."""
    return (
        runs_on_the_direct_runner(options)
        and options.view_as(DirectOptions).direct_running_mode != "multi_processing"
    )


def _runs_a_process_per_core(options: PipelineOptions) -> bool:
    """Dataflow runs one SDK process per vCPU, each writing shards: more than one worker
    process each would only multiply the busy processes per core (the SDK process waits
    while its worker writes)."""
    runner = options.view_as(StandardOptions).runner
    runner_name = runner if isinstance(runner, str) or runner is None else type(runner).__name__
    return (runner_name or "").lower() in ("dataflowrunner", "dataflow") and not (
        options.view_as(DebugOptions).lookup_experiment("no_use_multiple_sdk_containers")
    )
