"""TFRecord shards: `.tfrecord`, or `.tfrecord.gz` with --compression gzip, each with an
index beside it, `<shard file>.idx`.

The framing is read and written here in plain Python with every CRC checked, so a damaged
record is named by its index and byte offset (tf.data names only the file), and no
private Beam helper is needed. A record is: length (uint64 LE), masked CRC32C of the
length, the data, masked CRC32C of the data. A gzip shard is one gzip stream around the
same framing (deterministic: no file name or time in its header).

The index has one line per record, `offset length` (where the record starts and its
bytes with the framing), as the `tfrecord` package's and NVIDIA DALI's `tfrecord2idx`
tools write it, so their readers can split a shard between workers without a pass of
their own. Offsets are into the uncompressed stream, as the `tfrecord` package seeks a
gzip shard (DALI reads uncompressed shards only).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO

import google_crc32c

from image_tfrecords.core.file_formats import Files, RecordError, ShardFormat, register

if TYPE_CHECKING:
    import tensorflow as tf

_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
_MASK_DELTA = 0xA282EAD8
INDEX_SUFFIX = ".idx"
_GZIP_LEVEL = 6  # zlib's default, as Beam's and TensorFlow's gzip writers use
_READ_BUFFER = 8 << 20  # tf.data's bytes per shard reader: large sequential reads suit gs:// too


@register
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


class FramedWriter:
    """Writes TFRecord-framed records to a stream."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.sizes: list[int] = []  # of each record written, for the index

    def write(self, record: bytes) -> None:
        write_record(self._stream, record)
        self.sizes.append(len(record))


def _write_index(path: str, record_sizes: Iterable[int], files: Files) -> None:
    with files.create(path + INDEX_SUFFIX) as index:
        index.write("".join(_index_lines(record_sizes)).encode("ascii"))


def _index_lines(record_sizes: Iterable[int]) -> Iterator[str]:
    """The index's `offset length` lines: where each record starts in the uncompressed
    stream, and its bytes with the framing."""
    offset = 0
    for size in record_sizes:
        framed = _HEADER.size + size + _CRC.size
        yield f"{offset} {framed}\n"
        offset += framed


def write_record(stream: BinaryIO, data: bytes) -> None:
    """Appends one TFRecord-framed record."""
    length = _LENGTH.pack(len(data))
    stream.write(
        b"".join((length, _CRC.pack(_masked_crc(length)), data, _CRC.pack(_masked_crc(data))))
    )


def read_records(file: BinaryIO, compressed: bool = False) -> Iterator[bytes]:
    """Yields each record's data; raises RecordError at the first bad one.

    Offsets are into the uncompressed stream.
    """
    stream = gzip.GzipFile(fileobj=file, mode="rb") if compressed else file
    index = offset = 0
    while True:
        try:
            header = stream.read(_HEADER.size)
            if not header:
                return
            length = _record_length(header, index, offset)
            body = stream.read(length + _CRC.size)
        except (OSError, EOFError, zlib.error) as problem:  # a damaged gzip stream
            raise RecordError(index, offset, f"gzip: {problem}") from problem
        if len(body) < length + _CRC.size:
            raise RecordError(
                index,
                offset,
                f"truncated: the file ends {len(body)} of "
                f"{length + _CRC.size} bytes into the record",
            )
        data = body[:length]
        if _masked_crc(data) != _CRC.unpack(body[length:])[0]:
            raise RecordError(index, offset, "data CRC mismatch")
        yield data
        index += 1
        offset += _HEADER.size + len(body)


def record_sizes(file: BinaryIO) -> Iterator[int]:
    """Each record's data size, from the headers of an uncompressed file alone (each
    length's CRC checked, the data skipped); raises RecordError where the framing breaks."""
    file.seek(0, io.SEEK_END)  # (GFile's seek gives no position)
    end = file.tell()
    file.seek(0)
    index = offset = 0
    while offset < end:
        length = _record_length(file.read(_HEADER.size), index, offset)
        file.seek(length + _CRC.size, io.SEEK_CUR)
        if file.tell() > end:
            raise RecordError(index, offset, "truncated: the file ends inside the record")
        yield length
        index += 1
        offset += _HEADER.size + length + _CRC.size


def _record_length(header: bytes, index: int, offset: int) -> int:
    """The data length a record's header gives, its CRC checked; RecordError naming the
    record at `index` (starting at byte `offset`) where the header is cut or damaged."""
    if len(header) < _HEADER.size:
        raise RecordError(
            index, offset, f"truncated: the file ends {len(header)} bytes into the record's header"
        )
    length, length_crc = _HEADER.unpack(header)
    if _masked_crc(header[:8]) != length_crc:
        raise RecordError(index, offset, "length CRC mismatch")
    return length


def _masked_crc(data: bytes) -> int:
    """TFRecord's CRC: CRC32C rotated right by 15 bits plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
