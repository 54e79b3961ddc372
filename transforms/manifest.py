"""Reads image manifests with Beam: AutoML Vision / TFRecorder CSV (`[split,]image_uri,label`,
single or multi-label) and Vertex AI JSON Lines import files.

Each manifest file is streamed by one DoFn call, line by line, so no process ever holds
the whole manifest. A row is one physical line: a stray quote then costs only its own
row instead of swallowing the rest of the file (image manifests have no multi-line fields).
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms import dead_letters as reasons
from transforms.dead_letters import DeadLetter

SPLITS = ("train", "validation", "test")
DEFAULT_SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
DEAD_LETTERS = "dead_letters"

# Header names recognised for each column (compared lower-cased); AutoML order otherwise.
_COLUMN_NAMES = {
    "split": {"split", "set", "ml_use", "subset"},
    "uri": {"image_uri", "uri", "image", "image_path", "path", "file", "filename",
            "file_path", "gcs_file_path", "image_url", "url"},
    "label": {"label", "class", "category", "class_name"},
}


@dataclasses.dataclass(frozen=True)
class RowRules:
    """How rows are read: split fractions for rows without one, and multi-label rows.

    With `multi_label`, every non-empty field after the URI of a headerless row is a
    label (AutoML's `split,uri,label1,label2,...`), and any label field may also hold
    several labels joined by `label_separator`.
    """

    split_fractions: tuple[float, float, float] = DEFAULT_SPLIT_FRACTIONS
    multi_label: bool = False
    label_separator: str = "|"


class ManifestError(ValueError):
    """A manifest that cannot be read at all (as opposed to a bad row in it)."""


class ManifestRow(NamedTuple):
    """One valid manifest row; `uri` is resolved against the manifest's folder."""

    manifest: str
    line: int
    raw: str
    split: str
    uri: str
    labels: tuple[str, ...]  # one label, or several with multi-label rules

    def dead_letter(self, reason: str, message: str) -> DeadLetter:
        return DeadLetter(self.manifest, self.line, self.raw, self.uri, self.split,
                          reason, message)


@dataclasses.dataclass(frozen=True)
class ColumnLayout:
    """Where each column is in a row; `width` is the number of fields a row must have."""

    uri: int
    label: int
    split: int | None
    width: int

    @classmethod
    def detect(cls, first_row: Sequence[str], source: str) -> tuple[ColumnLayout, bool]:
        """Returns the layout and whether `first_row` is a header (to skip)."""
        names = [field.strip().lower() for field in first_row]
        found = {column: names.index(name)
                 for column, known in _COLUMN_NAMES.items()
                 for name in names if name in known}
        if len(found) < 2:
            return AUTOML_LAYOUT, False
        for column in ("uri", "label"):
            if column not in found:
                raise ManifestError(
                    f"{source}: the header {','.join(first_row)!r} names no {column} column "
                    f"(expected one of: {', '.join(sorted(_COLUMN_NAMES[column]))})")
        return cls(found["uri"], found["label"], found.get("split"), len(names)), True


AUTOML_LAYOUT = ColumnLayout(split=0, uri=1, label=2, width=3)
URI_LABEL_LAYOUT = ColumnLayout(split=None, uri=0, label=1, width=2)  # AutoML without a set


def find_manifests(patterns: Iterable[str]) -> list[str]:
    """Expands paths and globs to manifest files, failing clearly for one that matches nothing."""
    paths: set[str] = set()
    for pattern in patterns:
        matched = [m.path for m in FileSystems.match([pattern])[0].metadata_list]
        if not matched:
            raise ManifestError(f"manifest not found: {pattern}")
        paths.update(matched)
    return sorted(paths)


def read_header(path: str) -> ColumnLayout:
    """Reads only the first line of `path`: lets the launcher reject a bad header up front."""
    for _, raw in _numbered_lines(path):
        fields = _split_fields(raw)
        if isinstance(fields, list):
            return ColumnLayout.detect(fields, path)[0]
        break
    return AUTOML_LAYOUT


def read_manifest(path: str, rules: RowRules = RowRules()
                  ) -> Iterator[ManifestRow | DeadLetter]:
    """Yields every data row of one manifest file as a ManifestRow or a DeadLetter.

    Rows without a split (UNASSIGNED, empty, or no split column) get one from
    assign_split with the rules' split fractions (train, validation, test).
    """
    folder = FileSystems.split(path)[0]
    if is_jsonl(path):
        for line, raw in _numbered_lines(path):
            yield _parse_jsonl_row(path, folder, line, raw, rules)
        return
    layout = None
    for line, raw in _numbered_lines(path):
        fields = _split_fields(raw)
        if layout is None and isinstance(fields, list):
            layout, is_header = ColumnLayout.detect(fields, path)
            if is_header:
                continue
        yield _parse_row(path, folder, line, raw, fields, layout or AUTOML_LAYOUT, rules)


def is_jsonl(path: str) -> bool:
    """Vertex AI import files are JSON Lines; everything else is read as CSV."""
    return path.lower().removesuffix(".gz").endswith((".jsonl", ".json"))


def assign_split(uri: str, split_fractions: Sequence[float]) -> str:
    """A split from a hash of the URI as written in the manifest.

    The same row gets the same split on every run and runner, in any row order, and
    wherever the manifest is moved; the "split:" salt keeps this hash independent of the
    one that picks a shard.
    """
    digest = hashlib.sha256(b"split:" + uri.encode("utf-8", "surrogateescape")).digest()
    position = int.from_bytes(digest[:8], "big") / 2**64
    bound = 0.0
    for split, fraction in zip(SPLITS, split_fractions, strict=True):
        bound += fraction
        if position < bound:
            return split
    return SPLITS[-1]  # only reached through rounding of fractions summing to 1


def resolve_uri(uri: str, folder: str) -> str:
    """Absolute paths and URLs stay as they are; relative ones are relative to the manifest."""
    if uri.startswith("/") or "://" in uri:
        return uri
    return FileSystems.join(folder, uri)


def _numbered_lines(path: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without line end) for every non-blank line.

    surrogateescape keeps undecodable bytes so that row alone can be rejected.
    """
    with FileSystems.open(path) as binary:
        for number, data in enumerate(iter(binary.readline, b""), start=1):
            if number == 1 and data.startswith(codecs.BOM_UTF8):
                data = data[len(codecs.BOM_UTF8):]
            line = data.decode("utf-8", "surrogateescape").rstrip("\r\n")
            if line.strip():
                yield number, line


def _split_fields(raw: str) -> list[str] | csv.Error:
    try:
        return next(csv.reader([raw], strict=True))
    except csv.Error as error:
        return error


def _rejecter(manifest: str, line: int, raw: str) -> Callable[..., DeadLetter]:
    """reject(reason, message, uri="", split="") for one row."""
    def reject(reason: str, message: str, uri: str = "", split: str = "") -> DeadLetter:
        return DeadLetter(manifest, line, _printable(raw), uri, split, reason, message)
    return reject


def _parse_row(manifest: str, folder: str, line: int, raw: str,
               fields: list[str] | csv.Error, layout: ColumnLayout,
               rules: RowRules) -> ManifestRow | DeadLetter:
    reject = _rejecter(manifest, line, raw)
    if _has_undecodable_bytes(raw):
        return reject(reasons.INVALID_ENCODING, "the row is not valid UTF-8")
    if isinstance(fields, csv.Error):
        return reject(reasons.MALFORMED_ROW, f"cannot parse the row as CSV: {fields}")
    fields = [field.strip() for field in fields]
    while len(fields) > layout.width and not fields[-1]:
        fields.pop()  # trailing commas are common in exported manifests
    headerless = layout in (AUTOML_LAYOUT, URI_LABEL_LAYOUT)
    if headerless and rules.multi_label:  # split,uri,labels... or uri,labels...
        layout = (AUTOML_LAYOUT if fields[0].lower() in (*SPLITS, "unassigned", "")
                  else URI_LABEL_LAYOUT)
        if len(fields) <= layout.uri:
            return reject(reasons.WRONG_COLUMN_COUNT,
                          f"expected at least {layout.uri + 2} fields, found {len(fields)}")
    else:
        if layout is AUTOML_LAYOUT and len(fields) == 2:
            layout = URI_LABEL_LAYOUT
        if len(fields) != layout.width:
            return reject(reasons.WRONG_COLUMN_COUNT,
                          f"expected {layout.width} fields, found {len(fields)}")

    written_uri = fields[layout.uri]
    written_split = fields[layout.split] if layout.split is not None else ""
    if not written_uri:
        return reject(reasons.MISSING_URI, "the image URI is empty", split=written_split)
    uri = resolve_uri(written_uri, folder)
    split = _split(written_split, written_uri, rules)
    if split is None:
        return reject(reasons.INVALID_SPLIT, _invalid_split(written_split), uri=uri,
                      split=written_split)
    if not rules.multi_label:
        labels: tuple[str, ...] = tuple(filter(None, [fields[layout.label]]))
    else:
        label_fields = fields[layout.label:] if headerless else [fields[layout.label]]
        labels = tuple(dict.fromkeys(  # each label once, in order
            label.strip() for field in label_fields
            for label in field.split(rules.label_separator) if label.strip()))
    if not labels:
        return reject(reasons.MISSING_LABEL, "the label is empty", uri=uri, split=split)
    return ManifestRow(manifest, line, raw, split, uri, labels)


def _split(written: str, uri: str, rules: RowRules) -> str | None:
    """The row's split, assigned when UNASSIGNED or empty; None when it is invalid."""
    split = written.strip().lower()
    if split in SPLITS:
        return split
    if split in ("", "unassigned"):
        return assign_split(uri, rules.split_fractions)
    return None


def _invalid_split(written: str) -> str:
    return f"split {written!r} is not one of TRAIN, VALIDATION, TEST or UNASSIGNED"


_VERTEX_ML_USE = "aiplatform.googleapis.com/ml_use"
_VERTEX_SPLITS = {"training": "train"}  # Vertex AI's ml_use values, where they differ


def _parse_jsonl_row(manifest: str, folder: str, line: int, raw: str,
                     rules: RowRules) -> ManifestRow | DeadLetter:
    """One line of a Vertex AI image classification import file."""
    reject = _rejecter(manifest, line, raw)
    if _has_undecodable_bytes(raw):
        return reject(reasons.INVALID_ENCODING, "the line is not valid UTF-8")
    try:
        item = json.loads(raw)
    except ValueError as error:
        return reject(reasons.MALFORMED_ROW, f"cannot parse the line as JSON: {error}")
    if not isinstance(item, dict):
        return reject(reasons.MALFORMED_ROW, "expected a JSON object")
    written_uri = item.get("imageGcsUri")
    if not isinstance(written_uri, str) or not written_uri.strip():
        return reject(reasons.MISSING_URI, "imageGcsUri is missing or empty")
    written_uri = written_uri.strip()
    uri = resolve_uri(written_uri, folder)
    ml_use = str((item.get("dataItemResourceLabels") or {}).get(_VERTEX_ML_USE, ""))
    split = _split(_VERTEX_SPLITS.get(ml_use.lower(), ml_use), written_uri, rules)
    if split is None:
        return reject(reasons.INVALID_SPLIT, _invalid_split(ml_use), uri=uri, split=ml_use)
    annotations = item.get("classificationAnnotations") or [
        item.get("classificationAnnotation") or {}]
    labels = tuple(dict.fromkeys(
        str(annotation.get("displayName", "")).strip() for annotation in annotations
        if isinstance(annotation, dict) and str(annotation.get("displayName", "")).strip()))
    if not labels and item.get("boundingBoxAnnotations"):
        return reject(reasons.UNSUPPORTED_ANNOTATION, "boundingBoxAnnotations (object "
                      "detection) are not supported yet", uri=uri, split=split)
    if not labels:
        return reject(reasons.MISSING_LABEL, "no classification annotation with a "
                      "displayName", uri=uri, split=split)
    if len(labels) > 1 and not rules.multi_label:
        return reject(reasons.MULTIPLE_LABELS, f"{len(labels)} labels; pass --label_mode "
                      "multi to keep them all", uri=uri, split=split)
    return ManifestRow(manifest, line, raw, split, uri, labels)


def _has_undecodable_bytes(text: str) -> bool:
    return any("\udc80" <= char <= "\udcff" for char in text)


def _printable(raw: str) -> str:
    """Undecodable bytes as \\xNN escapes, so the dead letter itself is valid UTF-8."""
    return raw.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class _ParseManifestFile(beam.DoFn):
    """Streams one manifest file; valid rows to the main output, the rest as DeadLetters."""

    def __init__(self, rules: RowRules) -> None:
        self._rules = rules
        self._rows_read = Metrics.counter("manifest", "rows_read")
        self._rows_rejected = Metrics.counter("manifest", "rows_rejected")

    def process(self, path: str) -> Iterator[ManifestRow | beam.pvalue.TaggedOutput]:
        for item in read_manifest(path, self._rules):
            self._rows_read.inc()
            if isinstance(item, DeadLetter):
                self._rows_rejected.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTERS, item)
            else:
                yield item


class ReadManifest(beam.PTransform):
    """Manifest files -> ManifestRows (main output) and DeadLetters (DEAD_LETTERS)."""

    def __init__(self, paths: Sequence[str], rules: RowRules = RowRules()) -> None:
        super().__init__()
        self._paths = list(paths)
        self._rules = rules

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        return (pbegin
                | "ManifestFiles" >> beam.Create(self._paths)
                | "ParseRows" >> beam.ParDo(
                    _ParseManifestFile(self._rules)).with_outputs(
                    DEAD_LETTERS, main="rows"))
