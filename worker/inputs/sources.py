"""What `--manifest` names: one small class per manifest format, found by the path (as
TFDS's file_adapters does for file formats), each reading a chunk of a manifest's rows
(worker/chunks.py). Free of Beam, so that worker processes parse the rows.

Formats: AutoML/TFRecorder CSV (and the Object Detection API's pixel-box CSV), Vertex AI
JSON Lines, COCO instances JSON, Pascal VOC XML, and --image_folder's folders.
`--manifest SPLIT=PATH` gives every row of PATH that split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from worker import storage
from worker.chunks import LineRange, ManifestSource, RowChunk
from worker.inputs.coco import is_coco, read_coco
from worker.inputs.folder import IMAGE_FOLDER, check_folder, folder_rows
from worker.inputs.manifest import (ManifestError, ManifestItem, RowRules, check_jsonl, is_jsonl,
                                 read_csv, read_header, read_jsonl)
from worker.inputs.voc import check_voc, read_voc, xml_glob
from worker.splits import normalise_split


class ManifestFormat(Protocol):
    """One source format: whether it reads a path, its checks before the job (a
    ManifestError of one line), and the rows of a chunk of it.

    cuts_by_lines: its uncompressed files may be cut into line ranges (worker/chunks.py);
    in_worker: a worker process reads it. Pascal VOC and image folders are listed with
    Beam's FileSystems.match, which the pipeline's process has loaded and a worker would
    pay ~2 s and ~200 MB to load: they are read in the pipeline's process.
    """

    name: str
    cuts_by_lines: bool
    in_worker: bool

    def reads(self, path: str) -> bool: ...

    def check(self, source: ManifestSource, rules: RowRules) -> None: ...

    def read(self, source: ManifestSource, rules: RowRules, lines: LineRange | None
             ) -> Iterator[ManifestItem]: ...


@dataclasses.dataclass(frozen=True)
class _CsvFormat:
    name: str = "csv"
    cuts_by_lines: bool = True
    in_worker: bool = True

    def reads(self, path: str) -> bool:
        return True  # what no other format claims

    def check(self, source: ManifestSource, rules: RowRules) -> None:
        read_header(source.path, rules)

    def read(self, source: ManifestSource, rules: RowRules, lines: LineRange | None
             ) -> Iterator[ManifestItem]:
        return read_csv(source.path, rules, source.split, lines)


@dataclasses.dataclass(frozen=True)
class _JsonlFormat:
    name: str = "vertex_jsonl"
    cuts_by_lines: bool = True
    in_worker: bool = True

    def reads(self, path: str) -> bool:
        return is_jsonl(path)

    def check(self, source: ManifestSource, rules: RowRules) -> None:
        if rules.extra_columns:
            raise ManifestError(f"{source.path}: --schema columns are read from CSV "
                                "manifests only")
        check_jsonl(source.path, rules)

    def read(self, source: ManifestSource, rules: RowRules, lines: LineRange | None
             ) -> Iterator[ManifestItem]:
        return read_jsonl(source.path, rules, source.split, lines)


@dataclasses.dataclass(frozen=True)
class _BoxesOnlyFormat:
    """COCO and Pascal VOC hold only boxes: they need --label_mode detection."""

    name: str
    title: str
    claims: Callable[[str], bool]
    reader: Callable[[str, RowRules, str | None], Iterator[ManifestItem]]
    in_worker: bool
    checker: Callable[[str, str | None], None] = lambda path, split: None
    cuts_by_lines: bool = False

    def reads(self, path: str) -> bool:
        return self.claims(path)

    def check(self, source: ManifestSource, rules: RowRules) -> None:
        if not rules.detection:
            raise ManifestError(f"{source.path} is {self.title}, which holds bounding "
                                "boxes: pass --label_mode detection")
        self.checker(source.path, source.split)

    def read(self, source: ManifestSource, rules: RowRules, lines: LineRange | None
             ) -> Iterator[ManifestItem]:
        return self.reader(source.path, rules, source.split)


@dataclasses.dataclass(frozen=True)
class _ImageFolder:
    """--image_folder: ROOT/<label>/<file> or ROOT/<split>/<label>/<file> (folder.py);
    chosen by the option, never by a path."""

    name: str = IMAGE_FOLDER
    cuts_by_lines: bool = False
    in_worker: bool = False

    def reads(self, path: str) -> bool:
        return False

    def check(self, source: ManifestSource, rules: RowRules) -> None:
        check_folder(source.path)

    def read(self, source: ManifestSource, rules: RowRules, lines: LineRange | None
             ) -> Iterator[ManifestItem]:
        return folder_rows(source.path, rules.split_fractions)


# In the order they are asked: the first whose reads() is true reads the path.
FORMATS: dict[str, ManifestFormat] = {format.name: format for format in (
    _BoxesOnlyFormat("pascal_voc", "Pascal VOC annotation XML",
                     lambda path: path.lower().endswith(".xml"), read_voc, in_worker=False,
                     checker=check_voc),
    _BoxesOnlyFormat("coco", "a COCO instances JSON file", is_coco, read_coco,
                     in_worker=True),
    _JsonlFormat(),
    _CsvFormat(),
    _ImageFolder(),
)}


def split_and_path(argument: str) -> tuple[str | None, str]:
    """--manifest's value -> (the split SPLIT=PATH gives, or None; the path).

    Only a split name (any case; val, valid, eval, dev mean validation) before the first
    `=` makes SPLIT=PATH, so gs://b/x=1/m.csv stays a path.
    """
    name, equals, path = argument.partition("=")
    split = normalise_split(name) if equals and path else None
    return (split, path) if split else (None, argument)


def find_manifests(arguments: Iterable[str]) -> list[ManifestSource]:
    """--manifest values (paths, globs, SPLIT=PATH, VOC folders) -> the sources to read,
    failing clearly for one that matches nothing."""
    found: set[ManifestSource] = set()
    for argument in arguments:
        split, path = split_and_path(argument)
        voc = xml_glob(path)
        paths = [voc] if voc else [found.path for found in storage.match(path)]
        if not paths or (voc and not storage.match(voc)):
            raise ManifestError(f"manifest not found: {argument}")
        found.update(ManifestSource(each, "pascal_voc" if voc else format_of(each), split)
                     for each in paths)
    return sorted(found, key=lambda source: (source.path, source.split or ""))


def format_of(path: str) -> str:
    return next(name for name, format in FORMATS.items() if format.reads(path))


def check_sources(sources: Sequence[ManifestSource], rules: RowRules) -> None:
    """Each source's format's checks before the job; raises ManifestError."""
    for source in sources:
        if source.format != "csv" and (rules.uri_column or rules.label_column):
            raise ManifestError(f"{source.path}: --uri_column and --label_column name "
                                "columns of CSV manifests only")
        FORMATS[source.format].check(source, rules)


def read_source(source: ManifestSource, rules: RowRules = RowRules()
                ) -> Iterator[ManifestItem]:
    return read_chunk(RowChunk(source), rules)


def read_chunk(chunk: RowChunk, rules: RowRules) -> Iterator[ManifestItem]:
    return FORMATS[chunk.source.format].read(chunk.source, rules, chunk.lines)
