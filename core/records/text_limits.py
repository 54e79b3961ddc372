"""How much text the data may hold, in one place: a line, a label, a class name, labels
per row, and what a dead letter keeps of text over its limit.

Every input file comes from strangers, so text from it is bounded before it is copied:
a row over a limit is a dead letter holding an excerpt (its first characters and its
full length), never the whole text; a declared class name over the label limit refuses
the run naming its file. docs/guides/csv-manifests.md lists the limits.

Labels are written into line-based files (tf.Transform's vocabulary asset, the
--vocabulary file, label maps, TFDS's label names): a label holding a character that
breaks lines (any str.splitlines splits on) would be two lines there, or be left out by
tf.Transform, so such a label is refused, and every reader of those files splits on
"\\n" only.
"""

from __future__ import annotations

import re

MAX_LINE_BYTES = 1 << 20  # one line of a manifest, JSON Lines, metadata or label file
MAX_LABEL_CHARS = 1_000  # one label, or one class name a file declares
MAX_LABELS_PER_ROW = 1_000  # the labels of one row with --label_mode multi
MAX_KEPT_CHARS = 1 << 16  # a dead letter's row text and message; longer ones -> an excerpt
EXCERPT_CHARS = 300  # what an excerpt keeps of text over its limit

# What str.splitlines splits on, named: a label holding any of them is refused.
LINE_BREAKS = {
    "\n": "LINE FEED",
    "\r": "CARRIAGE RETURN",
    "\v": "LINE TABULATION",
    "\f": "FORM FEED",
    "\x1c": "FILE SEPARATOR",
    "\x1d": "GROUP SEPARATOR",
    "\x1e": "RECORD SEPARATOR",
    "\x85": "NEXT LINE",
    "\u2028": "LINE SEPARATOR",
    "\u2029": "PARAGRAPH SEPARATOR",
}
_LINE_BREAK = re.compile(f"[{''.join(LINE_BREAKS)}]")  # every row's labels are searched


def excerpt(text: str, length: int | None = None, unit: str = "characters") -> str:
    """`text`'s first EXCERPT_CHARS characters and its full `length` in `unit`s
    (len(text) where not given: the caller may hold only the start of the text)."""
    length = len(text) if length is None else length
    return f"{text[:EXCERPT_CHARS]}... ({length:,} {unit} in all)"


def kept(text: str) -> str:
    """`text` where it is within MAX_KEPT_CHARS, else its excerpt."""
    return text if len(text) <= MAX_KEPT_CHARS else excerpt(text)


def line_break_in(text: str) -> str | None:
    """The first line-breaking character of `text`, named (U+2028 LINE SEPARATOR); None
    where it has none."""
    found = _LINE_BREAK.search(text)
    if found is None:
        return None
    return f"U+{ord(found.group()):04X} {LINE_BREAKS[found.group()]}"


def file_lines(text: str) -> list[str]:
    """The lines of a file written a line per value (a vocabulary, label names): split
    on "\\n" only, as tf.Transform writes and reads its vocabulary, where str.splitlines
    would also split on U+2028, "\\v"... (the last line's end ends no empty line)."""
    lines = text.split("\n")
    if not lines[-1]:
        lines.pop()
    return lines
