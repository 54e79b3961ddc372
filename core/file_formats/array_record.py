"""ArrayRecord shards: `.array_record` files, which Grain (JAX) and TFDS's data sources
read by record index.

Written as TFDS writes them, one record per chunk (`group_size:1`), which is what
random access needs: Grain reads one record without decoding its neighbours. Each chunk
carries a hash of its data, so a damaged record is named when it is read. The
compression is the chunks' own (zstd with --compression zstd); the files keep their
name either way.

The array_record library opens local paths only. A shard for gs://, s3:// or any other
filesystem is written to a local temporary file and then copied through the `Files` it
is given; one read from there is copied to a local temporary file first.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO

from image_tfrecords.core.file_formats.shard_format import (
    Files,
    GFiles,
    RecordError,
    ShardFormat,
)

if TYPE_CHECKING:
    import tensorflow as tf
    from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

# One record per chunk (TFDS's and Grain's setting): random access reads one chunk.
_WRITER_OPTIONS = {"none": "group_size:1,uncompressed", "zstd": "group_size:1,zstd:3"}
_READ_BATCH = 64  # records read at once: a few MB of images, whatever the shard's size
_COPY_BUFFER = 8 << 20  # bytes per read when staging a shard: large reads suit buckets


class ArrayRecordFormat(ShardFormat):
    name = "array_record"
    tfds_name = "array_record"
    stem = ".array_record"
    compressions = tuple(_WRITER_OPTIONS)

    @contextlib.contextmanager
    def create(self, path: str, files: Files) -> Iterator[ArrayRecordWriter]:
        from array_record.python.array_record_module import ArrayRecordWriter

        with _on_local_disk(path, files, writing=True) as local:
            writer = ArrayRecordWriter(local, _WRITER_OPTIONS[self.compression])
            try:
                yield writer
            finally:
                writer.close()

    def read(self, path: str, files: Files) -> Iterator[bytes]:
        with _opened(path, files) as reader:
            count = reader.num_records()
            for start in range(0, count, _READ_BATCH):
                yield from _checked(reader, range(start, min(start + _READ_BATCH, count)))

    def read_at(
        self, path: str, positions: Sequence[int], files: Files
    ) -> Iterator[tuple[int, bytes]]:
        """The records at `positions` read by index, as Grain reads them: the chunks of
        the records between are not read."""
        with _opened(path, files) as reader:
            count = reader.num_records()
            present = bisect.bisect_left(positions, count)
            for start in range(0, present, _READ_BATCH):
                batch = positions[start : min(start + _READ_BATCH, present)]
                yield from zip(batch, _checked(reader, batch), strict=True)
            if present < len(positions):
                raise RecordError(positions[present], None, f"the shard ends after {count} records")

    def dataset(self, path: tf.Tensor) -> tf.data.Dataset:
        import tensorflow as tf

        def records(shard: bytes) -> Iterator[bytes]:
            return self.read(shard.decode(), GFiles())

        return tf.data.Dataset.from_generator(
            records, args=(path,), output_signature=tf.TensorSpec([], tf.string)
        )


@contextlib.contextmanager
def _opened(path: str, files: Files) -> Iterator[ArrayRecordReader]:
    """A reader of the shard at `path`; RecordError for a file the library cannot read."""
    from array_record.python.array_record_module import ArrayRecordReader

    with _on_local_disk(path, files, writing=False) as local:
        reader = ArrayRecordReader(local)
        try:
            if not reader.ok():
                raise RecordError(0, None, _reader_error(reader))
            yield reader
        finally:
            # Closing a reader that met a damaged file raises that damage again: it is
            # reported by _checked, as a RecordError naming the record.
            with contextlib.suppress(RuntimeError):
                reader.close()


def _reader_error(reader) -> str:
    """What the library says is wrong with a file it opened as not ok."""
    try:
        reader.read_all()
    except RuntimeError as problem:
        return f"not a readable ArrayRecord file: {problem}"
    return "not a readable ArrayRecord file"


def _checked(reader, indices: Sequence[int]) -> list[bytes]:
    """The records at `indices`, read at once; a RecordError naming the first that fails
    to read alone, with the library's words, where a chunk's hash does not match."""
    try:
        if isinstance(indices, range):  # the library's read of a range of records
            return reader.read(indices.start, indices.stop)
        return reader.read(list(indices))
    except RuntimeError as problem:
        for index in indices:
            try:
                reader.read([index])
            except RuntimeError as alone:
                raise RecordError(index, None, str(alone)) from problem
        raise RecordError(indices[0], None, str(problem)) from problem


def _local_path(path: str) -> str | None:
    """`path` as the local filesystem names it, or None for a bucket or other filesystem."""
    if path.startswith("file://"):
        return path[len("file://") :]
    return None if "://" in path else path


@contextlib.contextmanager
def _on_local_disk(path: str, files: Files, *, writing: bool) -> Iterator[str]:
    """`path` itself where it is on the local disk; else a local temporary file, filled
    from `path` through `files` first, or when `writing`, copied to it once the block exits."""
    local = _local_path(path)
    if local is not None and writing:  # as Beam's LocalFileSystem and core/storage/storage.py do
        os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
        yield local
        return
    if local is not None:
        from image_tfrecords.core.storage import storage

        # The reader opens a name: it gets the file this process opened and checked (a
        # FIFO there would hang the C++ reader; a name may be swapped after a check).
        with storage.open_local(local) as opened:
            yield f"/proc/self/fd/{opened.fileno()}" if os.path.isdir("/proc/self/fd") else local
        return
    with tempfile.TemporaryDirectory(prefix="image-tfrecords-") as folder:
        staged = os.path.join(folder, "shard.array_record")
        if not writing:
            _copy(files.open(path), open(staged, "wb"))
        yield staged
        if writing:
            _copy(open(staged, "rb"), files.create(path))


def _copy(source: BinaryIO, target: BinaryIO) -> None:
    with source, target:
        shutil.copyfileobj(source, target, _COPY_BUFFER)
