"""What `--manifest` names, read with Beam: one small class per manifest format, found by
the path (as TFDS's file_adapters does for file formats).

Formats: AutoML/TFRecorder CSV (and the Object Detection API's pixel-box CSV), Vertex AI
JSON Lines, COCO instances JSON and Pascal VOC XML. `--manifest SPLIT=PATH` gives every
row of PATH that split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple, Protocol

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms.coco import is_coco, read_coco
from transforms.dead_letters import DeadLetter
from transforms.manifest import (DEAD_LETTERS, DISCARDED, DiscardedRow, ManifestError,
                                 ManifestItem, ManifestRow, RowRules, check_jsonl, is_jsonl, read_csv,
                                 read_header, read_jsonl)
from transforms.splits import normalise_split
from transforms.voc import check_voc, read_voc, xml_glob


class ManifestSource(NamedTuple):
    """One manifest to read: a file, or for Pascal VOC a glob of annotation XMLs."""

    path: str
    format: str  # a FORMATS key
    split: str | None = None  # from --manifest SPLIT=PATH: every row's split

    def describe(self) -> str:
        return f"{self.split.upper()}={self.path}" if self.split else self.path


class ManifestFormat(Protocol):
    """One manifest format: whether it reads a path, its checks before the job (a
    ManifestError of one line), and its rows."""

    name: str

    def reads(self, path: str) -> bool: ...

    def check(self, source: ManifestSource, rules: RowRules) -> None: ...

    def read(self, source: ManifestSource, rules: RowRules
             ) -> Iterator[ManifestItem]: ...


@dataclasses.dataclass(frozen=True)
class _CsvFormat:
    name: str = "csv"

    def reads(self, path: str) -> bool:
        return True  # what no other format claims

    def check(self, source: ManifestSource, rules: RowRules) -> None:
        read_header(source.path, rules)

    def read(self, source: ManifestSource, rules: RowRules
             ) -> Iterator[ManifestItem]:
        return read_csv(source.path, rules, source.split)


@dataclasses.dataclass(frozen=True)
class _JsonlFormat:
    name: str = "vertex_jsonl"

    def reads(self, path: str) -> bool:
        return is_jsonl(path)

    def check(self, source: ManifestSource, rules: RowRules) -> None:
        if rules.extra_columns:
            raise ManifestError(f"{source.path}: --schema columns are read from CSV "
                                "manifests only")
        check_jsonl(source.path, rules)

    def read(self, source: ManifestSource, rules: RowRules
             ) -> Iterator[ManifestItem]:
        return read_jsonl(source.path, rules, source.split)


@dataclasses.dataclass(frozen=True)
class _BoxesOnlyFormat:
    """COCO and Pascal VOC hold only boxes: they need --label_mode detection."""

    name: str
    title: str
    claims: Callable[[str], bool]
    reader: Callable[[str, RowRules, str | None], Iterator[ManifestItem]]
    checker: Callable[[str, str | None], None] = lambda path, split: None

    def reads(self, path: str) -> bool:
        return self.claims(path)

    def check(self, source: ManifestSource, rules: RowRules) -> None:
        if not rules.detection:
            raise ManifestError(f"{source.path} is {self.title}, which holds bounding "
                                "boxes: pass --label_mode detection")
        self.checker(source.path, source.split)

    def read(self, source: ManifestSource, rules: RowRules
             ) -> Iterator[ManifestItem]:
        return self.reader(source.path, rules, source.split)


# In the order they are asked: the first whose reads() is true reads the path.
FORMATS: dict[str, ManifestFormat] = {format.name: format for format in (
    _BoxesOnlyFormat("pascal_voc", "Pascal VOC annotation XML",
                     lambda path: path.lower().endswith(".xml"), read_voc, check_voc),
    _BoxesOnlyFormat("coco", "a COCO instances JSON file", is_coco, read_coco),
    _JsonlFormat(),
    _CsvFormat(),
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
        paths = [voc] if voc else [m.path for m in FileSystems.match([path])[0].metadata_list]
        if not paths or (voc and not FileSystems.match([voc])[0].metadata_list):
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
    return FORMATS[source.format].read(source, rules)


class _ParseManifestFile(beam.DoFn):
    """Streams one manifest; valid rows to the main output, the rest as DeadLetters or,
    for DISCARD rows, DiscardedRows."""

    def __init__(self, rules: RowRules) -> None:
        self._rules = rules
        self._rows_read = Metrics.counter("manifest", "rows_read")
        self._rows_rejected = Metrics.counter("manifest", "rows_rejected")
        self._rows_discarded = Metrics.counter("manifest", "rows_discarded")

    def process(self, source: ManifestSource
                ) -> Iterator[ManifestRow | beam.pvalue.TaggedOutput]:
        for item in read_source(source, self._rules):
            self._rows_read.inc()
            if isinstance(item, DeadLetter):
                self._rows_rejected.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTERS, item)
            elif isinstance(item, DiscardedRow):
                self._rows_discarded.inc()
                yield beam.pvalue.TaggedOutput(DISCARDED, item)
            else:
                yield item


class ReadManifest(beam.PTransform):
    """ManifestSources -> ManifestRows (main output), DeadLetters (DEAD_LETTERS) and the
    DISCARD rows (DISCARDED)."""

    def __init__(self, sources: Sequence[ManifestSource], rules: RowRules = RowRules()
                 ) -> None:
        super().__init__()
        self._sources = list(sources)
        self._rules = rules

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        return (pbegin
                | "ManifestFiles" >> beam.Create(self._sources)
                | "ParseRows" >> beam.ParDo(
                    _ParseManifestFile(self._rules)).with_outputs(
                    DEAD_LETTERS, DISCARDED, main="rows"))
