"""Rows travel in chunks: the unit of rows a worker process parses.

A chunk is a manifest's newline-aligned byte range (its line numbers known, so dead
letters still name their lines), or a whole source where ranges cannot be cut: a
compressed file, a COCO JSON, a Pascal VOC glob, an image folder. The launcher plans them
while it reads each manifest for the run's fingerprint (pipeline/resume.py), so the
manifest is read once there and once per pass in the worker processes, and the pipeline's
process handles one element per chunk, never one per row.

Which rows land in which chunk changes nothing written: a row's split, shard and place
in its shard come from its URI, and every list the run writes is sorted.
"""

from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

_MIN_CHUNK_BYTES = 64 << 10  # ~1,000 rows: a task's round trip is a few ms
_MAX_CHUNK_BYTES = 16 << 20  # ~200,000 rows: what one worker holds packed at most
_CHUNKS_PER_PROCESS = 2  # so that the processes finish together


class ManifestSource(NamedTuple):
    """One source of rows: a manifest file, for Pascal VOC a glob of annotation XMLs, or
    an image folder."""

    path: str
    format: str  # a image_tfrecords.core.inputs.sources.FORMATS key
    split: str | None = None  # from --manifest SPLIT=PATH: every row's split

    def describe(self) -> str:
        return f"{self.split.upper()}={self.path}" if self.split else self.path


class LineRange(NamedTuple):
    """Bytes [start, end) of an uncompressed manifest, whole lines, the first numbered
    `first_line` (1-based, blank lines counted), and the digest of those bytes as the
    launcher read them: a worker that reads other bytes there (the file was rewritten or
    appended to since) would cut lines in two, and fails the run instead."""

    start: int
    end: int
    first_line: int
    digest: str = ""


def range_digest(data: bytes) -> str:
    return _hasher(data).hexdigest()


def _hasher(data: bytes = b""):
    return hashlib.blake2b(data, digest_size=16)


class RowChunk(NamedTuple):
    """Some of a source's rows: `lines` of it, or all of it (None)."""

    source: ManifestSource
    lines: LineRange | None = None

    @property
    def name(self) -> str:
        where = f" from line {self.lines.first_line}" if self.lines else ""
        return f"{self.source.path}{where}"


def chunk_bytes(file_bytes: int, processes: int) -> int:
    """The size of a file's chunks: two per process, within the bounds."""
    wanted = math.ceil(file_bytes / max(1, processes * _CHUNKS_PER_PROCESS))
    return min(_MAX_CHUNK_BYTES, max(_MIN_CHUNK_BYTES, wanted))


class LineCutter:
    """Cuts a file, fed its bytes in order, into LineRanges of about `target` bytes
    each, every one ending with a line's end (the last with the file's)."""

    def __init__(self, target: int) -> None:
        self._target = target
        self._ranges: list[LineRange] = []
        self._start = 0  # of the range being filled
        self._first_line = 1  # its first line's number
        self._position = 0  # bytes fed so far
        self._newlines = 0  # line ends fed so far
        self._digest = _hasher()  # of the range being filled, so far

    def feed(self, data: bytes) -> None:
        offset = 0  # in data: what is counted so far
        while True:
            # The range ends with the first line end at or past its target size.
            search_from = max(offset, self._start + self._target - 1 - self._position)
            newline = data.find(b"\n", search_from) if search_from < len(data) else -1
            if newline < 0:
                break
            self._newlines += data.count(b"\n", offset, newline + 1)
            self._digest.update(data[offset : newline + 1])
            end = self._position + newline + 1
            self._ranges.append(
                LineRange(self._start, end, self._first_line, self._digest.hexdigest())
            )
            self._start, self._first_line, self._digest = end, self._newlines + 1, _hasher()
            offset = newline + 1
        self._newlines += data.count(b"\n", offset)
        self._digest.update(data[offset:])
        self._position += len(data)

    def ranges(self) -> list[LineRange]:
        """The ranges of everything fed (one empty range for an empty file)."""
        if self._position > self._start or not self._ranges:
            return [
                *self._ranges,
                LineRange(self._start, self._position, self._first_line, self._digest.hexdigest()),
            ]
        return list(self._ranges)
