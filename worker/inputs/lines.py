"""A manifest's lines: the whole file, or a range of it (worker/chunks.py) checked against
the digest the launcher took, decompressed by the name's suffix. A row is one physical
line: a stray quote then costs only its own row instead of swallowing the rest of the
file (image manifests have no multi-line fields), and a line range holds whole rows."""

from __future__ import annotations

import codecs
import io
import lzma
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from worker import storage
from worker.chunks import LineRange, range_digest
from worker.inputs.rows import ManifestError

# Lines read ahead of the first: to tell a header from data, and the label mode's
# shape.
LOOKAHEAD = 50


def numbered_lines(path: str, lines: LineRange | None = None) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without line end) for every non-blank line, of the
    whole file or of `lines` (a range of an uncompressed file).

    surrogateescape keeps undecodable bytes so that row alone can be rejected.
    """
    number = lines.first_line if lines else 1
    try:
        with (_line_range(path, lines) if lines else open_manifest(path)) as binary:
            for data in iter(binary.readline, b""):
                if number == 1 and data.startswith(codecs.BOM_UTF8):
                    data = data[len(codecs.BOM_UTF8):]
                line = data.decode("utf-8", "surrogateescape").rstrip("\r\n")
                if line.strip():
                    yield number, line
                number += 1
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as error:
        raise ManifestError(f"{path}: cannot read the manifest: {error}") from error


def _line_range(path: str, lines: LineRange) -> BinaryIO:
    with storage.open_read(path) as file:
        file.seek(lines.start)
        data = file.read(lines.end - lines.start)
    if len(data) != lines.end - lines.start:
        raise ManifestError(f"{path} is shorter than when the run was planned: it changed "
                            "while the run read it")
    if lines.digest and range_digest(data) != lines.digest:
        raise ManifestError(f"{path} changed while the run read it: its lines "
                            f"{lines.first_line} on (bytes {lines.start}-{lines.end}) are not "
                            "what they were when the run was planned. Run again once it "
                            "stays put")
    return io.BytesIO(data)


def open_manifest(path: str):
    """The manifest's bytes, decompressed by its name's suffix; a cut-off stream raises."""
    return storage.open_decompressed(path)

