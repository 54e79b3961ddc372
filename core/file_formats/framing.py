"""TFRecord's framing, read and written in plain Python with every CRC checked, so a
damaged record is named by its index and byte offset (tf.data names only the file), and
no private Beam helper is needed. A record is: length (uint64 LE), masked CRC32C of the
length, the data, masked CRC32C of the data.

The TFRecord shard format (tfrecord.py) frames its records so; so do the run's own
containers: a shard's parts (core/worker/shard_parts.py), whose files concatenated are
the shard, and each shard's thumbnails (core/records/naming.py).
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import BinaryIO

import google_crc32c

from image_tfrecords.core.file_formats.shard_format import RecordError

_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
_MASK_DELTA = 0xA282EAD8
_READ_THROUGH = 64 * 1024  # bytes a skip reads rather than seeks past (a thumbnail is ~4 KB)


def framed_size(size: int) -> int:
    """The bytes a record of `size` bytes of data takes, framed."""
    return _HEADER.size + size + _CRC.size


class FramedWriter:
    """Writes TFRecord-framed records to a stream."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.sizes: list[int] = []  # of each record written, for the index

    def write(self, record: bytes) -> None:
        write_record(self._stream, record)
        self.sizes.append(len(record))


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
        yield _checked_data(body, length, index, offset)
        index += 1
        offset += _HEADER.size + len(body)


def records_at(
    file: BinaryIO, positions: Iterable[int], starts: Sequence[int] | None = None
) -> Iterator[tuple[int, bytes]]:
    """(position, data) of the records at `positions` (ascending) of an uncompressed
    file, each checked as read_records checks it. A record `starts` gives the offset of
    (a shard's .idx) is sought; the others are reached by skipping the records before
    them by their headers (each length's CRC checked, the data not checked). A copy that
    wants a few records of each of many shards (a grouped split's run draws each of its
    shards from every staging shard) reads their bytes, not the whole files. An offset
    that is wrong gives a record whose CRCs fail, or another record, which the caller
    checks is the one it wants (shard_writer._check_copied)."""
    index = offset = 0
    for wanted in positions:
        if starts is not None and wanted != index and wanted < len(starts):
            index, offset = wanted, starts[wanted]
            file.seek(offset)
        while index < wanted:
            length = _record_length(file.read(_HEADER.size), index, offset)
            _skip(file, length + _CRC.size)
            offset += framed_size(length)
            index += 1
        length = _record_length(file.read(_HEADER.size), index, offset)
        yield index, _checked_data(file.read(length + _CRC.size), length, index, offset)
        offset += framed_size(length)
        index += 1


def _skip(file: BinaryIO, size: int) -> None:
    """Past `size` bytes: read where they are few (a seek drops the read buffer, and the
    next header would cost a read of its own), sought where they are many."""
    if size > _READ_THROUGH:
        file.seek(size, io.SEEK_CUR)
    else:
        file.read(size)


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


def _checked_data(body: bytes, length: int, index: int, offset: int) -> bytes:
    """The data of the record at `index` from `body`, the bytes after its header; RecordError
    where the file ends inside them or their CRC does not match."""
    if len(body) < length + _CRC.size:
        raise RecordError(
            index,
            offset,
            f"truncated: the file ends {len(body)} of {length + _CRC.size} bytes into the record",
        )
    data = body[:length]
    if _masked_crc(data) != _CRC.unpack(body[length:])[0]:
        raise RecordError(index, offset, "data CRC mismatch")
    return data


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
