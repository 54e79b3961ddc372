"""JSON and YAML as every input format reads them: bounded, whoever wrote the file.

Nesting deeper than MAX_NESTING levels is refused (DocumentError, or a YAMLError; the
caller names the file or row): Python's json and PyYAML's composer recurse, so a few
kilobytes of `[[[[...` raise RecursionError, and ijson keeps a prefix per level, its
memory growing with the depth squared (10,000 levels take 250 MB). Real annotation files
nest a handful of levels. JSON's depth is measured on the bytes as they are read
(NestingScanner), with bytes' and numpy's own loops, before a parser sees them, so ijson
keeps its C backend (counting its events in Python took a COCO file's passes 8 times as
long); sniffing, which must see a file's first key even where deep nesting follows it,
counts events (json_events).
YAML aliases (`*name`) are refused as well: a few hundred bytes of anchors and aliases
("billion laughs") expand into gigabytes, and no data.yaml or dataset card needs them.
A whole XML file (Pascal VOC's) is parsed here too, its elements' nesting bounded alike:
ElementTree builds deep trees, but serialises and copies them by recursion.
Every JSON or YAML file an input format reads goes through here.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Iterator
from typing import IO, Any

import ijson
import numpy as np
import yaml

# The deepest nesting of lists and objects (mappings, sequences) a document may have.
MAX_NESTING = 100

_ESCAPED = re.compile(rb"\\.", re.DOTALL)  # a backslash and the character it escapes
_STRING = re.compile(rb'"[^"]*"')  # a whole string, once escapes are gone
# Every byte but a quote and brackets: what JSON's nesting does not depend on.
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_OPENING = np.frombuffer(b"[{", np.uint8)
_OPENS = frozenset({"start_map", "start_array"})  # ijson's events
_CLOSES = frozenset({"end_map", "end_array"})


class DocumentError(ValueError):
    """A JSON or YAML document nested too deep, a YAML document holding an alias, or a
    streamed JSON file that is not JSON."""


def too_deep(what: str = "lists and objects") -> DocumentError:
    return DocumentError(f"{what} nest deeper than {MAX_NESTING} levels")


def parse_xml(data: bytes) -> ElementTree.Element:
    """ElementTree.fromstring of `data`; DocumentError where elements nest deeper than
    MAX_NESTING (ElementTree.ParseError where it is not XML)."""
    parser = ElementTree.XMLPullParser(events=("start", "end"))
    parser.feed(data)
    parser.close()  # ParseError where the document is cut short or holds no element
    depth, root = 0, None
    for event, element in parser.read_events():
        root = element if root is None else root
        depth += 1 if event == "start" else -1
        if depth > MAX_NESTING:
            raise too_deep("elements")
    return root


class NestingScanner:
    """JSON's nesting depth, fed its bytes in pieces: DocumentError past MAX_NESTING.

    Brackets inside strings do not count; a piece may end anywhere (within a string, after
    a backslash). Each piece is scanned with bytes' and numpy's own loops."""

    def __init__(self) -> None:
        self._depth = 0
        self._in_string = False
        self._escape_next = False  # the piece before ended in a backslash

    def feed(self, piece: bytes) -> None:
        if self._escape_next:
            piece, self._escape_next = piece[1:], False
        piece = _ESCAPED.sub(b"", piece)
        if piece.endswith(b"\\"):  # the one backslash left can only be the last byte
            piece, self._escape_next = piece[:-1], True
        structure = piece.translate(None, _NOT_STRUCTURE)
        if self._in_string:
            end = structure.find(b'"')
            if end < 0:
                return
            structure, self._in_string = structure[end + 1 :], False
        structure = _STRING.sub(b"", structure)
        start = structure.find(b'"')  # a string this piece does not end
        if start >= 0:
            structure, self._in_string = structure[:start], True
        brackets = np.frombuffer(structure, np.uint8)
        if not brackets.size:
            return
        depths = self._depth + np.cumsum(np.where(np.isin(brackets, _OPENING), 1, -1))
        if depths.max() > MAX_NESTING:
            raise too_deep()
        self._depth = int(depths[-1])


class _ScannedFile:
    """A binary file whose bytes pass through a NestingScanner as they are read."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file, self._scanner = file, NestingScanner()

    def read(self, size: int = -1) -> bytes:
        piece = self._file.read(size)
        self._scanner.feed(piece)
        return piece


def load_json(data: str | bytes) -> Any:
    """json.loads, with nesting beyond MAX_NESTING a DocumentError (a ValueError,
    as json's own errors are), found before json recurses."""
    NestingScanner().feed(data.encode() if isinstance(data, str) else data)
    return json.loads(data)


def json_items(file: IO[bytes], prefix: str) -> Iterator[Any]:
    """ijson.items of a binary file (its C backend), numbers as floats where not whole;
    DocumentError as soon as a piece read nests beyond MAX_NESTING, or where the file is
    not JSON (ijson's error, on one line, for the caller to name the file)."""
    try:
        yield from ijson.items(_ScannedFile(file), prefix, use_float=True)
    except ijson.JSONError as error:
        raise DocumentError(f"not JSON: {' '.join(str(error).split())}") from None


def json_events(file: IO[bytes]) -> Iterator[tuple[str, str, Any]]:
    """ijson.parse's (prefix, event, value) events of a binary file, numbers as floats
    where not whole, DocumentError at the first event past MAX_NESTING: the events
    before it come through (counted one by one, for sniffing a file's first key or item
    where what follows may be too deep)."""
    return ijson.parse(_counted(ijson.basic_parse(file, use_float=True)))


def _counted(events: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    depth = 0
    for event in events:
        if event[0] in _OPENS:
            depth += 1
            if depth > MAX_NESTING:
                raise too_deep()
        elif event[0] in _CLOSES:
            depth -= 1
        yield event


def load_yaml(text: str | bytes) -> Any:
    """yaml.safe_load, refusing aliases and nesting beyond MAX_NESTING: a yaml.YAMLError
    (ComposerError) saying where, for the caller to name the file."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class _BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader whose composer refuses aliases and counts nesting (it recurses)."""

    def __init__(self, text: str | bytes) -> None:
        super().__init__(text)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"found the alias *{event.anchor}: aliases are not read (a few "
                "bytes of them can expand into gigabytes)",
                event.start_mark,
            )
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"lists and mappings nest deeper than {MAX_NESTING} levels",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
