"""Shard file formats: the registry every writer and reader of shards looks a format up in.

As TFDS's tensorflow_datasets/core/file_adapters.py: each format is a small class in its
own module (the interface is shard_format.py) that says its name, its files' suffix, how
records are written into a shard and read back, and how tf.data reads its shards.
Adding a format is one new module and its class in `FORMATS`, as an input format is one
module in core/inputs/ and its instance in core/inputs/sources.py's `FORMATS`.
Importing this package imports neither Beam nor TensorFlow.
"""

from __future__ import annotations

from image_tfrecords.core.file_formats.array_record import ArrayRecordFormat
from image_tfrecords.core.file_formats.shard_format import (
    Files,
    GFiles,
    PipelineFiles,
    RecordError,
    RecordWriter,
    ShardFormat,
)
from image_tfrecords.core.file_formats.tfrecord import TFRecordFormat

__all__ = [
    "DEFAULT_FORMAT",
    "FORMATS",
    "Files",
    "GFiles",
    "PipelineFiles",
    "RecordError",
    "RecordWriter",
    "ShardFormat",
    "compression_names",
    "format_names",
    "shard_format",
]

DEFAULT_FORMAT = "tfrecord"
# What --file_format may name, in the order help and errors list them.
FORMATS: dict[str, type[ShardFormat]] = {
    format_class.name: format_class for format_class in (TFRecordFormat, ArrayRecordFormat)
}


def format_names() -> tuple[str, ...]:
    return tuple(FORMATS)


def compression_names() -> tuple[str, ...]:
    """Every --compression value some format takes, "none" first."""
    return tuple(
        dict.fromkeys(
            name for format_class in FORMATS.values() for name in format_class.compressions
        )
    )


def shard_format(name: str, compression: str = "none") -> ShardFormat:
    """The format called `name`, writing or reading with `compression`; ValueError when
    there is none of that name or it does not take that compression."""
    if name not in FORMATS:
        raise ValueError(f"unknown file format {name!r}: give one of {', '.join(FORMATS)}")
    return FORMATS[name](compression)
