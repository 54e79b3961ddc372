"""TFRecord framing read in plain Python with every CRC checked, so a damaged record is
named by its index and byte offset (tf.data names only the file).

A record is: length (uint64 LE), masked CRC32C of the length, the data, masked CRC32C of
the data. A gzip shard is one gzip stream around the same framing.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterator
from typing import BinaryIO

import google_crc32c

_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


class RecordError(ValueError):
    """A record that cannot be read back as written; `index` counts from 0."""

    def __init__(self, index: int, offset: int, reason: str) -> None:
        super().__init__(f"record {index} (byte {offset}): {reason}")
        self.index = index
        self.offset = offset


def _masked_crc(data: bytes) -> int:
    """TFRecord's CRC: CRC32C rotated right by 15 bits plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


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
            if len(header) < _HEADER.size:
                raise RecordError(index, offset, f"truncated: the file ends {len(header)} "
                                                 f"bytes into the record's header")
            length, length_crc = _HEADER.unpack(header)
            if _masked_crc(header[:8]) != length_crc:
                raise RecordError(index, offset, "length CRC mismatch")
            body = stream.read(length + _CRC.size)
        except (OSError, EOFError, zlib.error) as problem:  # a damaged gzip stream
            raise RecordError(index, offset, f"gzip: {problem}") from problem
        if len(body) < length + _CRC.size:
            raise RecordError(index, offset, f"truncated: the file ends {len(body)} of "
                                             f"{length + _CRC.size} bytes into the record")
        data = body[:length]
        if _masked_crc(data) != _CRC.unpack(body[length:])[0]:
            raise RecordError(index, offset, "data CRC mismatch")
        yield data
        index += 1
        offset += _HEADER.size + len(body)
