"""TFRecord shards: `.tfrecord`, or `.tfrecord.gz` with --compression gzip, each with an
index beside it, `<shard file>.idx`.

The records are TFRecord-framed (framing.py, in plain Python with every CRC checked). A
gzip shard is one gzip stream around the same framing (deterministic: no file name or
time in its header).

The index has one line per record, `offset length` (where the record starts and its
bytes with the framing), as the `tfrecord` package's and NVIDIA DALI's `tfrecord2idx`
tools write it, so their readers can split a shard between workers without a pass of
their own. Offsets are into the uncompressed stream, as the `tfrecord` package seeks a
gzip shard (DALI reads uncompressed shards only).
"""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO

from image_tfrecords.core.file_formats.framing import (
    FramedWriter,
    framed_size,
    read_records,
    record_sizes,
    records_at,
)
from image_tfrecords.core.file_formats.shard_format import Files, ShardFormat

if TYPE_CHECKING:
    import tensorflow as tf

INDEX_SUFFIX = ".idx"
_GZIP_LEVEL = 6  # zlib's default, as Beam's and TensorFlow's gzip writers use
_READ_BUFFER = 8 << 20  # tf.data's bytes per shard reader: large sequential reads suit gs:// too
# A shard's .idx read for copies: 1 million records of 40-byte lines at the most.
_MAX_LISTED = 1_000_000
_INDEX_LINE_BYTES = 40


class TFRecordFormat(ShardFormat):
    name = "tfrecord"
    tfds_name = "tfrecord"
    stem = ".tfrecord"
    compressions = ("none", "gzip")
    companions = (INDEX_SUFFIX,)

    @property
    def suffix(self) -> str:
        return self.stem + (".gz" if self.compression == "gzip" else "")

    @property
    def tfds_reads(self) -> bool:
        return self.compression == "none"

    @contextlib.contextmanager
    def create(self, path: str, files: Files) -> Iterator[FramedWriter]:
        with files.create(path) as raw, self._compressing(raw) as stream:
            writer = FramedWriter(stream)
            yield writer
        _write_index(path, writer.sizes, files)

    def join(self, path: str, parts: Sequence[str], files: Files) -> None:
        # The parts are framed as the shard is: their bytes one after another (compressed
        # as one stream) are the shard, copied without reading a record into Python, and
        # the index follows from their records' headers.
        from image_tfrecords.core.storage import storage

        sizes: list[int] = []
        with files.create(path) as raw, self._compressing(raw) as stream:
            for part in parts:
                with files.open(part) as source:
                    sizes.extend(record_sizes(source))
                    source.seek(0)
                    storage.append(source, stream)
        _write_index(path, sizes, files)

    def read(self, path: str, files: Files) -> Iterator[bytes]:
        with files.open(path) as raw:
            yield from read_records(raw, self.compression == "gzip")

    def read_at(
        self, path: str, positions: Sequence[int], files: Files
    ) -> Iterator[tuple[int, bytes]]:
        """Each record sought at its offset in the shard's .idx (skipped to by the headers
        where the index cannot be read); a gzip stream is read through."""
        if self.compression == "gzip":
            yield from super().read_at(path, positions, files)
            return
        with files.open(path) as raw:
            yield from records_at(raw, positions, _listed_starts(path, files))

    def check_companions(self, path: str, files: Files, record_sizes: Sequence[int]) -> None:
        # The index follows from the records' sizes alone: no second read of the shard.
        with files.open(path + INDEX_SUFFIX) as index:
            listed = index.read().decode("ascii", "replace").splitlines(keepends=True)
        expected = list(_index_lines(record_sizes))
        for line_number, (line, right) in enumerate(zip(listed, expected), start=1):
            if line != right:
                raise ValueError(
                    f"line {line_number} is {line.rstrip()!r}, the record "
                    f"there is '{right.rstrip()}'"
                )
        if len(listed) != len(expected):
            raise ValueError(f"{len(listed)} lines for {len(expected)} records")

    def dataset(self, path: tf.Tensor) -> tf.data.Dataset:
        import tensorflow as tf

        return tf.data.TFRecordDataset(
            path,
            compression_type="GZIP" if self.compression == "gzip" else "",
            buffer_size=_READ_BUFFER,
        )

    @contextlib.contextmanager
    def _compressing(self, raw: BinaryIO) -> Iterator[BinaryIO]:
        if self.compression != "gzip":
            yield raw
            return
        with gzip.GzipFile(
            filename="", fileobj=raw, mode="wb", mtime=0, compresslevel=_GZIP_LEVEL
        ) as stream:
            yield stream


def _write_index(path: str, record_sizes: Iterable[int], files: Files) -> None:
    with files.create(path + INDEX_SUFFIX) as index:
        index.write("".join(_index_lines(record_sizes)).encode("ascii"))


def _listed_starts(path: str, files: Files) -> list[int] | None:
    """Where each record starts, as the shard's .idx lists it; None where it cannot be
    read, or is longer than an index of _MAX_LISTED records (an earlier output is not
    trusted: memory follows the records copied, not the file). Not trusted either way:
    records_at checks what it finds at each offset."""
    try:
        with files.open(path + INDEX_SUFFIX) as index:
            listed = index.read(_MAX_LISTED * _INDEX_LINE_BYTES + 1)
        if len(listed) > _MAX_LISTED * _INDEX_LINE_BYTES:
            return None
        return [int(line.split(maxsplit=1)[0]) for line in listed.splitlines()]
    except Exception:  # noqa: BLE001 - each filesystem's own (gfile's NotFoundError), a bad line
        return None


def _index_lines(record_sizes: Iterable[int]) -> Iterator[str]:
    """The index's `offset length` lines: where each record starts in the uncompressed
    stream, and its bytes with the framing."""
    offset = 0
    for size in record_sizes:
        framed = framed_size(size)
        yield f"{offset} {framed}\n"
        offset += framed
