"""JSON and YAML as every input format reads them: bounded, whoever wrote the file.

Nesting deeper than MAX_NESTING levels is refused (DocumentError, or a YAMLError; the
caller names the file or row): Python's json and PyYAML's composer recurse, so a few
kilobytes of `[[[[...` raise RecursionError, and ijson's prefixes grow with the depth
squared (10,000 levels take 250 MB). Real annotation files nest a handful of levels. YAML aliases (`*name`) are
refused as well: a few hundred bytes of anchors and aliases ("billion laughs") expand
into gigabytes, and no data.yaml or dataset card needs them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

import ijson
import yaml

# The deepest nesting of lists and objects (mappings, sequences) a document may have.
MAX_NESTING = 100

_OPENS = frozenset({"start_map", "start_array"})
_CLOSES = frozenset({"end_map", "end_array"})


class DocumentError(ValueError):
    """A JSON or YAML document nested too deep, or a YAML document holding an alias."""


def too_deep() -> DocumentError:
    return DocumentError(f"lists and objects nest deeper than {MAX_NESTING} levels")


def load_json(data: str | bytes) -> Any:
    """json.loads, with nesting beyond MAX_NESTING a DocumentError (a ValueError,
    as json's own errors are)."""
    try:
        document = json.loads(data)
    except RecursionError:
        raise too_deep() from None
    if _depth(document) > MAX_NESTING:
        raise too_deep()
    return document


def json_events(file: IO[bytes]) -> Iterator[tuple[str, str, Any]]:
    """ijson.parse's (prefix, event, value) events of a file, numbers as floats where not
    whole; DocumentError where it nests beyond MAX_NESTING."""
    return ijson.parse(_bounded(ijson.basic_parse(file, use_float=True)))


def json_items(file: IO[bytes], prefix: str) -> Iterator[Any]:
    """ijson.items of a file, bounded as json_events is."""
    return ijson.items(json_events(file), prefix)


def load_yaml(text: str | bytes) -> Any:
    """yaml.safe_load, refusing aliases and nesting beyond MAX_NESTING: a yaml.YAMLError
    (ComposerError) saying where, for the caller to name the file."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _bounded(events: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    depth = 0
    for event in events:
        if event[0] in _OPENS:
            depth += 1
            if depth > MAX_NESTING:
                raise too_deep()
        elif event[0] in _CLOSES:
            depth -= 1
        yield event


def _depth(document: Any) -> int:
    """How deep lists and objects nest in a parsed JSON document (walked without
    recursion: it may be as deep as json's own limit)."""
    deepest, pending = 0, [(document, 1)]
    while pending:
        value, depth = pending.pop()
        children = (value.values() if isinstance(value, dict)
                    else value if isinstance(value, list) else None)
        if children is not None:
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in children
                           if isinstance(child, (dict, list)))
    return deepest


class _BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader whose composer refuses aliases and counts nesting (it recurses)."""

    def __init__(self, text: str | bytes) -> None:
        super().__init__(text)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"found the alias *{event.anchor}: aliases are not read (a few "
                "bytes of them can expand into gigabytes)", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise yaml.composer.ComposerError(
                    None, None, f"lists and mappings nest deeper than {MAX_NESTING} levels",
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
