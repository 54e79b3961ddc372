"""label_map.pbtxt: the Object Detection API's StringIntLabelMap, in protobuf text format."""

from __future__ import annotations

import re
from collections.abc import Sequence

UNSEEN_LABEL_NAME = "[unseen label]"  # the OOV bucket's entry, with --unseen_label oov

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def label_map_text(vocabulary: Sequence[str], oov_bucket: bool) -> str:
    """One item per label; ids are vocabulary ids + 1, as the API reserves 0.

    With the OOV bucket, unseen labels get the id after the vocabulary's.
    """
    names = [*vocabulary, *([UNSEEN_LABEL_NAME] if oov_bucket else [])]
    return "".join(f"item {{\n  id: {number}\n  name: {_quoted(name)}\n}}\n"
                   for number, name in enumerate(names, start=1))


def _quoted(text: str) -> str:
    """A text-format string literal; other control characters as octal escapes."""
    escaped = re.sub(r'[\\"\n\r\t]', lambda match: _ESCAPES[match.group()], text)
    escaped = re.sub(r"[\x00-\x1f\x7f]", lambda match: f"\\{ord(match.group()):03o}", escaped)
    return f'"{escaped}"'
