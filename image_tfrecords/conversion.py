"""`convert()`, its `ConversionResult`, and the DataFrame accessor `df.tfrecords` that calls
it: the Python API's conversions, which run the pipeline (image_tfrecords/__init__.py
imports this module on first use)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from image_tfrecords.core.records.naming import REPORT_FILE
from image_tfrecords.core.records.summary import Summary


@dataclasses.dataclass(frozen=True)
class ConversionResult:
    """What one conversion wrote; `problem` is why it failed, or None.

    A failed run published nothing (the output is as it was): `summary` is what it would
    have published, `files` is empty, and `error_files` are its dead letters in the run's
    temp folder, OUTPUT/.tmp-<run id>/staged/, kept until the next run publishes.
    """

    output_dir: str
    summary: Summary
    problem: str | None
    unpublished_error_files: tuple[str, ...] = ()  # where a failed run left its dead letters

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def rows_read(self) -> int:
        return self.summary.rows_read

    @property
    def examples_written(self) -> int:
        return self.summary.examples_written

    @property
    def rows_dead_lettered(self) -> int:
        return self.summary.rows_dead_lettered

    @property
    def examples(self) -> dict[str, int]:
        return self.summary.examples

    @property
    def files(self) -> dict[str, list[str]]:
        """The shard paths of each split (none when the run failed)."""
        from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415 - see top

        if not self.ok:
            return {}
        return {
            split: [FileSystems.join(self.output_dir, shard.file) for shard in stats.shards]
            for split, stats in self.summary.splits.items()
        }

    @property
    def report(self) -> str | None:
        """The path of report.html, the page to look at before training (None when the
        run failed: its report is in the run's temp folder, with its dead letters)."""
        from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

        return FileSystems.join(self.output_dir, REPORT_FILE) if self.ok else None

    @property
    def error_files(self) -> list[str]:
        from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

        if not self.ok:
            return list(self.unpublished_error_files)
        return [FileSystems.join(self.output_dir, name) for name in self.summary.errors.files]


def convert(
    source: str | os.PathLike | Sequence[str | os.PathLike] | pd.DataFrame,
    output_dir: str,
    **options: Any,
) -> ConversionResult:
    """Converts a manifest (a path or glob; a folder of annotation files, such as Pascal
    VOC XMLs, is one), a list of
    them, an image folder, or a DataFrame.

    A DataFrame is read as a CSV manifest with its columns as the header: the same column
    names, the same options (uri_column, label_column, split_column, label_separator,
    schema...), the same rows; relative paths in it are relative to the current
    directory (or image_dir), and rows without a split get one from a hash of the URI as
    given. `schema` may be a dict (see --schema). Raises ValueError for an unusable source
    or options, or a missing source.
    """
    if isinstance(options.get("schema"), Mapping):
        options["schema"] = json.dumps(options["schema"])
    if isinstance(source, pd.DataFrame):
        return _convert_dataframe(source, output_dir, options)
    paths = _source_paths(source)
    if len(paths) == 1 and _is_image_folder(paths[0]):
        return _convert({"image_folder": paths[0], **options}, output_dir)
    return _convert({"manifest": paths, **options}, output_dir)


def _convert_dataframe(
    frame: pd.DataFrame, output_dir: str, options: dict[str, Any]
) -> ConversionResult:
    """The DataFrame written as a CSV manifest, converted as one; errors about that file
    name the DataFrame, and its rows by their image paths (their lines in that file are
    not its rows' positions where a value holds a line break)."""
    from image_tfrecords.pipeline.run import ROWS_NAMED, ImagesNotFound  # noqa: PLC0415 - see _convert

    with _dataframe_manifest(frame, options.get("temp_location")) as manifest:
        try:
            return _convert(
                {
                    **options,
                    "manifest": manifest,
                    "image_dir": options.get("image_dir") or os.getcwd(),
                },
                output_dir,
            )
        except ImagesNotFound as missing:
            folder = "image_dir" if options.get("image_dir") else "the current directory"
            rows = ", ".join(repr(missing.name(row)) for row in missing.rows[:ROWS_NAMED])
            raise ValueError(
                f"the DataFrame: not one image of its first {len(missing.rows)} rows is in "
                f"{folder} {missing.image_dir}, which relative paths are read from: {rows}"
                + (", ..." if len(missing.rows) > ROWS_NAMED else "")
                + "; give absolute paths, or image_dir= the folder they are in"
            ) from None
        except ValueError as problem:
            raise ValueError(str(problem).replace(manifest, "the DataFrame")) from None


def _source_paths(source: object) -> list[str]:
    """A path or a list (or tuple) of paths as strings; ValueError for anything else."""
    sources = list(source) if isinstance(source, (list, tuple)) else [source]
    if not sources or not all(
        isinstance(item, (str, os.PathLike)) and os.fspath(item) for item in sources
    ):
        raise ValueError(
            f"source {source!r}: give a manifest path or glob, a list of them, "
            "an image folder or a pandas DataFrame"
        )
    paths = [os.fspath(item) for item in sources]
    if len(paths) > 1 and any(_is_image_folder(path) for path in paths):
        raise ValueError(
            f"source {source!r}: a list holds manifests; convert an image folder on its own"
        )
    return paths


@pd.api.extensions.register_dataframe_accessor("tfrecords")
class TFRecordsAccessor:
    """`df.tfrecords.to_tfrecords(output_dir, **options)`, as TFRecorder users know it."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame

    def to_tfrecords(self, output_dir: str, **options: Any) -> ConversionResult:
        return convert(self._frame, output_dir, **options)


def _convert(options: dict[str, Any], output_dir: str) -> ConversionResult:
    """A failed run is returned, not raised, as the command line reports it and exits 1."""
    started = time.time()  # the report's wall time: Beam's import is counted in
    from image_tfrecords.pipeline.run import convert_and_report  # noqa: PLC0415
    from image_tfrecords.transforms.outcome import RunFailed  # noqa: PLC0415

    if options.get("no_wait_until_finish"):
        raise ValueError(
            "no_wait_until_finish: convert() returns the finished run's "
            "result; submit without waiting from the command line"
        )
    try:
        summary = convert_and_report(["--output_dir", output_dir, *_flags(options)], started)
    except RunFailed as failed:
        return ConversionResult(
            output_dir, failed.failure.summary, str(failed), failed.failure.dead_letters
        )
    return ConversionResult(output_dir, summary, None)


def _flags(options: dict[str, Any]) -> Iterator[str]:
    """Keyword arguments as command-line flags: True -> --flag, a list -> repeated.

    Flags, not PipelineOptions(**options): Beam's options exist only as flags its parser
    reads (a runner's own appear once its module is imported), and going through the
    command line's parser gives the API every check and message the command line has
    (an unknown keyword named with the closest option, a value an option cannot take).
    Each as `--name=value`, so a value that starts with '-' is not read as a flag."""
    for name, value in options.items():
        if value is None or value is False:
            continue
        if value is True:
            yield f"--{name}"
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            yield f"--{name}={item}"


@contextlib.contextmanager
def _dataframe_manifest(frame: pd.DataFrame, folder: str | None) -> Iterator[str]:
    """A DataFrame written as a CSV manifest, its columns the header, where the workers
    can read it: the CSV reader's rules then read it (automl_csv.py), not a copy of them.

    That is --temp_location when given (a bucket, for Dataflow), else the local temp dir;
    the file is removed afterwards.
    """
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

    path = FileSystems.join(
        folder or tempfile.gettempdir(), f"manifest-{uuid.uuid4().hex[:12]}.csv"
    )
    with FileSystems.create(path) as out:
        out.write(frame.to_csv(index=False).encode())
    try:
        yield path
    finally:
        FileSystems.delete([path])


def _is_image_folder(source: str) -> bool:
    """A folder, but not one of a format's annotation files (Pascal VOC XMLs, KITTI
    label files), which is a manifest."""
    from image_tfrecords.core.inputs.sources import is_annotation_folder  # noqa: PLC0415

    is_folder = os.path.isdir(source) or (("://" in source) and source.endswith("/"))
    return is_folder and not is_annotation_folder(source)
