"""A manifest's lines: the whole file, or a range of it (core/records/chunks.py) checked against
the digest the launcher took, decompressed by the name's suffix. A row is one physical
line: a stray quote then costs only its own row instead of swallowing the rest of the
file (image manifests have no multi-line fields), and a line range holds whole rows.

A line over text_limits.MAX_LINE_BYTES is never held whole: it is read a bounded piece at
a time, counted, and given as a LongLine (its start and length), which the row readers
make a dead letter and the files read whole before the job refuse."""

from __future__ import annotations

import codecs
import io
import lzma
import zlib
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

from image_tfrecords.core.inputs.rows import ManifestError, printable
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.chunks import LineRange, range_digest
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.text_limits import EXCERPT_CHARS, MAX_LINE_BYTES, excerpt
from image_tfrecords.core.storage import storage

# Lines read ahead of the first: to tell a header from data, and the label mode's
# shape.
LOOKAHEAD = 50
# What one read may take: a line of MAX_LINE_BYTES and its "\r\n".
_READ_LIMIT = MAX_LINE_BYTES + 2


class LongLine(NamedTuple):
    """A line over MAX_LINE_BYTES: its first bytes decoded, and its length in bytes."""

    start: str
    length: int

    def dead_letter(
        self, path: str, line: int, split: str | None = None, uri: str = ""
    ) -> DeadLetter:
        return DeadLetter.in_file(
            path,
            reasons.TEXT_TOO_LONG,
            f"line of {self.length:,} bytes, over the limit of {MAX_LINE_BYTES:,}",
            position=line,
            raw=excerpt(self.start, self.length, "bytes"),
            uri=uri,
            split=split or "",
        )


def numbered_lines(
    path: str, lines: LineRange | None = None
) -> Iterator[tuple[int, str | LongLine]]:
    """(1-based line number, text without line end) for every non-blank line, of the
    whole file or of `lines` (a range of an uncompressed file); a LongLine in place of
    the text of a line over MAX_LINE_BYTES.

    surrogateescape keeps undecodable bytes so that row alone can be rejected.
    """
    number = lines.first_line if lines else 1
    try:
        with _line_range(path, lines) if lines else open_manifest(path) as binary:
            while data := binary.readline(_READ_LIMIT):
                if number == 1 and data.startswith(codecs.BOM_UTF8):
                    data = data[len(codecs.BOM_UTF8) :]
                if (
                    len(data) == _READ_LIMIT
                    and not data.endswith(b"\n")
                    or len(data.rstrip(b"\r\n")) > MAX_LINE_BYTES
                ):
                    yield number, _long_line(data, binary)
                else:
                    line = data.decode("utf-8", "surrogateescape").rstrip("\r\n")
                    if line.strip():
                        yield number, line
                number += 1
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as error:
        raise ManifestError(f"{path}: cannot read the manifest: {error}") from error


def short_lines(path: str) -> Iterator[tuple[int, str]]:
    """numbered_lines of the whole file without its long lines: what the launcher looks
    at to tell a header or a format (the row readers dead-letter the long ones)."""
    for number, line in numbered_lines(path):
        if not isinstance(line, LongLine):
            yield number, line


def whole_lines(path: str) -> Iterator[tuple[int, str]]:
    """numbered_lines of a file read whole before the job (a class list, a split list),
    where a long line refuses the file, naming it."""
    for number, line in numbered_lines(path):
        if isinstance(line, LongLine):
            raise ManifestError(
                f"{path} line {number}: {line.length:,} bytes, over the "
                f"limit of {MAX_LINE_BYTES:,} for one line"
            )
        yield number, line


def _long_line(start: bytes, binary: BinaryIO) -> LongLine:
    """The LongLine that begins with `start`, the rest of it read and counted a bounded
    piece at a time, so the line is never held whole."""
    length, piece = len(start), start
    start = start[: EXCERPT_CHARS * 4]  # UTF-8: at most 4 bytes a character
    while not piece.endswith(b"\n") and (piece := binary.readline(_READ_LIMIT)):
        length += len(piece)
    text = printable(start.decode("utf-8", "surrogateescape"))
    return LongLine(text, length - len(piece) + len(piece.rstrip(b"\r\n")))


def _line_range(path: str, lines: LineRange) -> BinaryIO:
    with storage.open_read(path) as file:
        file.seek(lines.start)
        data = file.read(lines.end - lines.start)
    if len(data) != lines.end - lines.start:
        raise ManifestError(
            f"{path} is shorter than when the run was planned: it changed while the run read it"
        )
    if lines.digest and range_digest(data) != lines.digest:
        raise ManifestError(
            f"{path} changed while the run read it: its lines "
            f"{lines.first_line} on (bytes {lines.start}-{lines.end}) are not "
            "what they were when the run was planned. Run again once it "
            "stays put"
        )
    return io.BytesIO(data)


def open_manifest(path: str):
    """The manifest's bytes, decompressed by its name's suffix; a cut-off stream raises."""
    return storage.open_decompressed(path)
