"""Shard file formats: one interface that every writer and reader of shards goes through.

As TFDS's tensorflow_datasets/core/file_adapters.py: each format is a small class in its
own module that says its name, its files' suffix, how records are written into a shard
and read back, and how tf.data reads its shards; `register` adds it to the formats
`--file_format` takes. Adding a format is one new module and its name in `_MODULES`.

A format opens files through the `Files` it is given, not through one filesystem: the
pipeline passes PipelineFiles (Beam's FileSystems for gs://, s3://, the test servers), readers pass
TensorFlow's gfile (they import no Beam). Importing this module imports neither.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO, ClassVar, Protocol

from image_tfrecords.core.records import naming

if TYPE_CHECKING:
    import tensorflow as tf

DEFAULT_FORMAT = "tfrecord"
# The modules that register a format, imported when a format is first looked up.
_MODULES = (
    "image_tfrecords.core.file_formats.tfrecord",
    "image_tfrecords.core.file_formats.array_record",
)
_FORMATS: dict[str, type[ShardFormat]] = {}


class Files(Protocol):
    """Where shards are opened: the pipeline's PipelineFiles, or readers' GFiles."""

    def open(self, path: str) -> BinaryIO: ...

    def create(self, path: str) -> BinaryIO: ...


class PipelineFiles:
    """Where the pipeline and its worker processes write: local paths directly, other
    schemes through Beam's FileSystems (core/storage/storage.py); bytes as they are, whatever the
    name (Beam would gzip a `.gz` file itself)."""

    def open(self, path: str) -> BinaryIO:
        from image_tfrecords.core.storage import storage

        return storage.open_read(path)

    def create(self, path: str) -> BinaryIO:
        from image_tfrecords.core.storage import storage

        return storage.create(path)


class GFiles:
    """TensorFlow's gfile, as the readers (load, verify, inspect, report) open files."""

    def open(self, path: str) -> BinaryIO:
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "rb")

    def create(self, path: str) -> BinaryIO:
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "wb")


class RecordWriter(Protocol):
    def write(self, record: bytes) -> None: ...


class RecordError(ValueError):
    """A record that cannot be read back as written; `index` counts from 0, `offset` is
    the byte where it starts (in the uncompressed stream), where the format knows it."""

    def __init__(self, index: int, offset: int | None, reason: str) -> None:
        where = "" if offset is None else f" (byte {offset})"
        super().__init__(f"record {index}{where}: {reason}")
        self.index = index
        self.offset = offset


class ShardFormat(abc.ABC):
    """How shards of one format are named, written and read."""

    name: ClassVar[str]  # as --file_format and summary.json's options name it
    tfds_name: ClassVar[str]  # TFDS's tfds.core.FileFormat value for the same files
    stem: ClassVar[str]  # how its shards' names end, before any compression's suffix
    compressions: ClassVar[tuple[str, ...]] = ("none",)  # --compression values it takes
    # Files `create` writes beside each shard, named as the shard plus one of these; they
    # are staged, published and verified with it.
    companions: ClassVar[tuple[str, ...]] = ()

    def __init__(self, compression: str = "none") -> None:
        if compression not in self.compressions:
            raise ValueError(
                f"--compression {compression} is not available with "
                f"--file_format {self.name} (only {', '.join(self.compressions)})"
            )
        self.compression = compression

    @property
    def suffix(self) -> str:
        """Ends every shard's file name, e.g. `.tfrecord`."""
        return self.stem

    @property
    def tfds_reads(self) -> bool:
        """Whether TFDS reads these shards (it has no gzip TFRecord reader)."""
        return True

    @classmethod
    def shard_glob(cls, split: str) -> str:
        """Matches every shard file of `split` in an output folder, compressed or not."""
        return naming.PublishedShard.glob(split, cls.stem)

    @abc.abstractmethod
    def create(self, path: str, files: Files) -> contextlib.AbstractContextManager[RecordWriter]:
        """A writer of one shard at `path`; the shard is whole once the block exits."""

    def join(self, path: str, parts: Sequence[str], files: Files) -> None:
        """Writes the shard at `path` from `parts`, files of TFRecord-framed records
        (core/worker/shard_parts.py), in order: the bytes the shard has when written whole."""
        from image_tfrecords.core.file_formats.framing import read_records

        with self.create(path, files) as shard:
            for part in parts:
                with files.open(part) as source:
                    for record in read_records(source):
                        shard.write(record)

    @abc.abstractmethod
    def read(self, path: str, files: Files) -> Iterator[bytes]:
        """Every record of the shard at `path`, in order, each checked as the format
        can; raises RecordError at the first that cannot be read."""

    def check_companions(  # noqa: B027 - a format without companions has none to check
        self, path: str, files: Files, record_sizes: Sequence[int]
    ) -> None:
        """Raises ValueError saying where a companion of the shard at `path` disagrees
        with the shard, whose records, as `read` gave them, have `record_sizes` bytes."""

    @abc.abstractmethod
    def dataset(self, path: tf.Tensor) -> tf.data.Dataset:
        """The records of one shard as tf.data reads them (in a Dataset.interleave)."""


def register(format_class: type[ShardFormat]) -> type[ShardFormat]:
    """A class decorator: makes the format available under its `name`."""
    _FORMATS[format_class.name] = format_class
    return format_class


def format_names() -> tuple[str, ...]:
    _import_formats()
    return tuple(_FORMATS)


def compression_names() -> tuple[str, ...]:
    """Every --compression value some format takes, "none" first."""
    _import_formats()
    return tuple(
        dict.fromkeys(
            name for format_class in _FORMATS.values() for name in format_class.compressions
        )
    )


def shard_globs(split: str) -> tuple[str, ...]:
    """Matches every shard file of `split`, of any format."""
    _import_formats()
    return tuple(format_class.shard_glob(split) for format_class in _FORMATS.values())


def shard_format(name: str, compression: str = "none") -> ShardFormat:
    """The format called `name`, writing or reading with `compression`; ValueError when
    there is none of that name or it does not take that compression."""
    _import_formats()
    if name not in _FORMATS:
        raise ValueError(f"unknown file format {name!r}: give one of {', '.join(_FORMATS)}")
    return _FORMATS[name](compression)


def _import_formats() -> None:
    for module in _MODULES:
        importlib.import_module(module)
