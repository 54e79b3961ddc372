"""The interface every shard file format implements (one small class per module in this
folder, listed in the registry, __init__.py), and the filesystems a format opens files
through.

A format opens files through the `Files` it is given, not through one filesystem: the
pipeline passes PipelineFiles (Beam's FileSystems for gs://, s3://, the test servers), readers pass
TensorFlow's gfile (they import no Beam). Importing this module imports neither.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO, ClassVar, Protocol

if TYPE_CHECKING:
    import tensorflow as tf


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

    def read_at(
        self, path: str, positions: Sequence[int], files: Files
    ) -> Iterator[tuple[int, bytes]]:
        """(position, record) of the records at `positions` (ascending) of the shard at
        `path`, each checked as `read` checks it. Here every record up to the last wanted
        is read; a format that can reach a record without reading those before it does."""
        wanted = iter(positions)
        position_wanted = next(wanted, None)
        if position_wanted is None:
            return
        position = -1
        for position, record in enumerate(self.read(path, files)):
            if position == position_wanted:
                yield position, record
                position_wanted = next(wanted, None)
                if position_wanted is None:
                    return
        raise RecordError(position_wanted, None, f"the shard ends after {position + 1} records")

    def check_companions(  # noqa: B027 - a format without companions has none to check
        self, path: str, files: Files, record_sizes: Sequence[int]
    ) -> None:
        """Raises ValueError saying where a companion of the shard at `path` disagrees
        with the shard, whose records, as `read` gave them, have `record_sizes` bytes."""

    @abc.abstractmethod
    def dataset(self, path: tf.Tensor) -> tf.data.Dataset:
        """The records of one shard as tf.data reads them (in a Dataset.interleave)."""
