"""Reads image manifests with Beam: AutoML Vision / TFRecorder CSV (`[split,]image_uri,label`,
single or multi-label, or one bounding box per row) and Vertex AI JSON Lines import files.

Each manifest file is streamed by one DoFn call, line by line, so no process ever holds
the whole manifest. A row is one physical line: a stray quote then costs only its own
row instead of swallowing the rest of the file (image manifests have no multi-line fields).
"""

from __future__ import annotations

import bz2
import codecs
import csv
import dataclasses
import functools
import gzip
import hashlib
import json
import lzma
import posixpath
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes, FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms import dead_letters as reasons
from transforms.dead_letters import DeadLetter
from transforms.schema import IMAGE, ExtraColumn, parse_value
from transforms.splits import SPLITS, normalise_split  # noqa: F401 - shared by all readers

DEFAULT_SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
DEAD_LETTERS = "dead_letters"

# Header names recognised for each column (compared lower-cased); AutoML order otherwise.
_COLUMN_NAMES = {
    "split": {"split", "set", "ml_use", "subset"},
    "uri": {"image_uri", "uri", "image", "image_path", "path", "file", "filename",
            "file_path", "gcs_file_path", "image_url", "url"},
    "label": {"label", "class", "category", "class_name"},
    "xmin": {"xmin", "x_min", "x_relative_min"},
    "ymin": {"ymin", "y_min", "y_relative_min"},
    "xmax": {"xmax", "x_max", "x_relative_max"},
    "ymax": {"ymax", "y_max", "y_relative_max"},
}
_MAIN_COLUMNS = ("split", "uri", "label")
_BOX_COLUMNS = ("xmin", "ymin", "xmax", "ymax")
# AutoML detection rows end in eight coordinate fields: x_min,y_min,,,x_max,y_max,, or
# the four vertices x_min,y_min,x_max,y_min,x_max,y_max,x_min,y_max.
_VERTEX_FIELDS = 8


LABEL_MODES = ("single", "multi", "detection")


@dataclasses.dataclass(frozen=True)
class RowRules:
    """How rows are read: split fractions for rows without one, and what a row labels.

    label_mode "multi": every non-empty field after the URI of a headerless row is a
    label (AutoML's `split,uri,label1,label2,...`), and any label field may also hold
    several labels joined by `label_separator`.
    label_mode "detection": a row is one bounding box (AutoML's
    `split,uri,label,x_min,y_min,,,x_max,y_max,,` or four vertices), see parse_box.
    """

    split_fractions: tuple[float, float, float] = DEFAULT_SPLIT_FRACTIONS
    label_mode: str = "single"
    label_separator: str = "|"
    extra_columns: tuple[ExtraColumn, ...] = ()  # from --schema; need a header

    @property
    def multi_label(self) -> bool:
        return self.label_mode == "multi"

    @property
    def detection(self) -> bool:
        return self.label_mode == "detection"


class ManifestError(ValueError):
    """A manifest that cannot be read at all (as opposed to a bad row in it)."""


class Box(NamedTuple):
    """A bounding box in coordinates relative to the image's width and height, in [0, 1]."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float


class ManifestRow(NamedTuple):
    """One valid manifest row; `uri` is resolved against the manifest's folder."""

    manifest: str
    line: int
    raw: str
    split: str
    uri: str
    labels: tuple[str, ...]  # one label, or several with multi-label rules
    # Detection: the labels' boxes, one per label; a row with neither is an image
    # without objects.
    boxes: tuple[Box, ...] = ()
    extras: tuple[int | float | str, ...] = ()  # typed values of RowRules.extra_columns

    def dead_letter(self, reason: str, message: str) -> DeadLetter:
        return DeadLetter(self.manifest, self.line, self.raw, self.uri, self.split,
                          reason, message)

    def to_json(self) -> str:
        return json.dumps(self)

    @classmethod
    def from_json(cls, text: str | bytes) -> ManifestRow:
        return cls.from_fields(json.loads(text))

    @classmethod
    def from_fields(cls, fields: list) -> ManifestRow:
        """The row from its JSON array (to_json's, parsed)."""
        *scalars, labels, boxes, extras = fields
        return cls(*scalars, tuple(labels), tuple(Box(*box) for box in boxes), tuple(extras))


@dataclasses.dataclass(frozen=True)
class ColumnLayout:
    """Where each column is in a row; `width` is the number of fields a row must have.

    `box`: the xmin, ymin, xmax, ymax columns of a detection manifest with a header;
    `extras`: the columns of RowRules.extra_columns, in their order.
    """

    uri: int
    label: int
    split: int | None
    width: int
    box: tuple[int, int, int, int] | None = None
    extras: tuple[int, ...] = ()

    @classmethod
    def detect(cls, first_row: Sequence[str], source: str, rules: RowRules
               ) -> tuple[ColumnLayout, bool]:
        """Returns the layout and whether `first_row` is a header (to skip)."""
        names = [field.strip().lower() for field in first_row]
        extra_names = {column.name.lower() for column in rules.extra_columns}
        found: dict[str, int] = {}  # the first column of each known name, not a --schema one
        for index, name in enumerate(names):
            for column, known in _COLUMN_NAMES.items():
                if name in known and name not in extra_names:
                    found.setdefault(column, index)
        if len([column for column in found if column in _MAIN_COLUMNS]) < 2:
            if rules.extra_columns:
                raise ManifestError(f"{source}: --schema needs a header row naming the "
                                    "columns (e.g. split,image_uri,label,...)")
            return AUTOML_LAYOUT, False
        required = ("uri", "label", *(_BOX_COLUMNS if rules.detection else ()))
        for column in required:
            if column not in found:
                raise ManifestError(
                    f"{source}: the header {','.join(first_row)!r} names no {column} column "
                    f"(expected one of: {', '.join(sorted(_COLUMN_NAMES[column]))})")
        box = tuple(found[column] for column in _BOX_COLUMNS) if rules.detection else None
        extras = []
        for column in rules.extra_columns:
            if column.name.lower() not in names:
                raise ManifestError(f"{source}: the header {','.join(first_row)!r} has no "
                                    f"column {column.name!r} named in --schema")
            extras.append(names.index(column.name.lower()))
        return cls(found["uri"], found["label"], found.get("split"), len(names), box,
                   tuple(extras)), True


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


def read_header(path: str, rules: RowRules = RowRules()) -> ColumnLayout:
    """Reads only the first line of `path`: lets the launcher reject a bad header up front."""
    for _, raw in _numbered_lines(path):
        fields = _split_fields(raw)
        if isinstance(fields, list):
            return ColumnLayout.detect(fields, path, rules)[0]
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
            yield from _parse_jsonl_line(path, folder, line, raw, rules)
        return
    layout = None
    for line, raw in _numbered_lines(path):
        fields = _split_fields(raw)
        if layout is None and isinstance(fields, list):
            layout, is_header = ColumnLayout.detect(fields, path, rules)
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
    """Relative paths are relative to the manifest's folder; every path is normalised
    (`a/./b`, `a/x/../b` and `a//b` name `a/b`), so repeated rows, shards and
    image/source_id see one name per file. A URL's path is normalised after its bucket."""
    if not (uri.startswith("/") or "://" in uri):
        uri = _filesystem_of(folder).join(folder, uri)
    return normalise_path(uri)


def normalise_path(uri: str) -> str:
    """posixpath.normpath of a local path, or of a URL's path after scheme://bucket/."""
    scheme, separator, rest = uri.partition("://")
    if not separator:
        return _normpath(uri)
    bucket, slash, path = rest.partition("/")
    if not path:
        return uri
    # Rooted, so ".." cannot climb above the bucket.
    return f"{scheme}://{bucket}{slash}{_normpath('/' + path)[1:]}"


def _normpath(path: str) -> str:
    # normpath keeps exactly two leading slashes (POSIX leaves their meaning open); on
    # Linux and in buckets they mean one.
    return posixpath.normpath("/" + path.lstrip("/") if path.startswith("//") else path)


@functools.lru_cache(maxsize=64)
def _filesystem_of(folder: str) -> FileSystem:
    # FileSystems.join looks the filesystem up among Beam's plugins on every call, which
    # cost more than parsing the row itself.
    return FileSystems.get_filesystem(folder)


def _numbered_lines(path: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without line end) for every non-blank line.

    surrogateescape keeps undecodable bytes so that row alone can be rejected.
    """
    try:
        with _open_manifest(path) as binary:
            for number, data in enumerate(iter(binary.readline, b""), start=1):
                if number == 1 and data.startswith(codecs.BOM_UTF8):
                    data = data[len(codecs.BOM_UTF8):]
                line = data.decode("utf-8", "surrogateescape").rstrip("\r\n")
                if line.strip():
                    yield number, line
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as error:
        raise ManifestError(f"{path}: cannot read the manifest: {error}") from error


# Beam's own decompression ends quietly where a cut-off stream ends; these raise EOFError,
# so a truncated manifest fails the run instead of losing its last rows.
_DECOMPRESSORS = {CompressionTypes.GZIP: gzip.open, CompressionTypes.BZIP2: bz2.open,
                  CompressionTypes.LZMA: lzma.open}


def _open_manifest(path: str):
    decompress = _DECOMPRESSORS.get(CompressionTypes.detect_compression_type(path))
    if decompress is None:
        return FileSystems.open(path)
    return decompress(FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED))


def _split_fields(raw: str) -> list[str] | csv.Error:
    try:
        return next(csv.reader([raw], strict=True))
    except csv.Error as error:
        return error


def _rejecter(manifest: str, line: int, raw: str, where: str = ""
              ) -> Callable[..., DeadLetter]:
    """reject(reason, message, uri="", split="") for one row; `where` starts the message."""
    def reject(reason: str, message: str, uri: str = "", split: str = "") -> DeadLetter:
        return DeadLetter(manifest, line, _printable(raw), uri, split, reason, where + message)
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
    if headerless and rules.label_mode != "single":  # split,uri,... or uri,...
        layout = (AUTOML_LAYOUT if fields[0].lower() in (*SPLITS, "unassigned", "")
                  else URI_LABEL_LAYOUT)
        # A negative detection row keeps its empty label field: `TRAIN,uri,`.
        least = layout.width if rules.detection else layout.uri + 1
        most = layout.width + _VERTEX_FIELDS if rules.detection else None
        if len(fields) < least or (most and len(fields) > most):
            expected = f"{least} to {most}" if most else f"at least {least}"
            return reject(reasons.WRONG_COLUMN_COUNT,
                          f"expected {expected} fields, found {len(fields)}")
    else:
        if layout is AUTOML_LAYOUT and len(fields) == 2:
            layout = URI_LABEL_LAYOUT
        if len(fields) != layout.width:
            hint = ("; for one bounding box per row pass --label_mode detection"
                    if headerless and _are_numbers(fields[layout.width:]) else "")
            return reject(reasons.WRONG_COLUMN_COUNT,
                          f"expected {layout.width} fields, found {len(fields)}{hint}")

    written_uri = fields[layout.uri]
    written_split = fields[layout.split] if layout.split is not None else ""
    if not written_uri:
        return reject(reasons.MISSING_URI, "the image URI is empty", split=written_split)
    uri = resolve_uri(written_uri, folder)
    split = _split(written_split, written_uri, rules)
    if split is None:
        return reject(reasons.INVALID_SPLIT, _invalid_split(written_split), uri=uri,
                      split=written_split)
    if rules.detection:
        if layout.box is None:  # headerless: the fields after the label
            vertices = fields[layout.label + 1:]
            vertices += [""] * (_VERTEX_FIELDS - len(vertices))
        else:
            xmin, ymin, xmax, ymax = (fields[index] for index in layout.box)
            vertices = [xmin, ymin, "", "", xmax, ymax, "", ""]
        return _box_row(ManifestRow(manifest, line, raw, split, uri, ()),
                        fields[layout.label], vertices, reject)
    if not rules.multi_label:
        labels: tuple[str, ...] = tuple(filter(None, [fields[layout.label]]))
    else:
        label_fields = fields[layout.label:] if headerless else [fields[layout.label]]
        labels = tuple(dict.fromkeys(  # each label once, in order
            label.strip() for field in label_fields
            for label in field.split(rules.label_separator) if label.strip()))
    if not labels:
        return reject(reasons.MISSING_LABEL, "the label is empty", uri=uri, split=split)
    try:
        extras = tuple(_extra_value(column, fields[index], folder)
                       for column, index in zip(rules.extra_columns, layout.extras, strict=True))
    except ValueError as problem:
        return reject(reasons.INVALID_VALUE, str(problem), uri=uri, split=split)
    return ManifestRow(manifest, line, raw, split, uri, labels, extras=extras)


def _extra_value(column: ExtraColumn, text: str, folder: str) -> int | float | str:
    value = parse_value(column, text)
    return resolve_uri(value, folder) if column.type == IMAGE else value


def parse_box(vertices: Sequence[str]) -> Box | tuple[str, str]:
    """AutoML's eight coordinate fields -> a Box, or (dead-letter reason, message).

    Two vertices (`x_min,y_min,,,x_max,y_max,,`) are taken as they are; four vertices
    give their bounding rectangle, whatever their order.
    """
    present = [bool(vertex) for vertex in vertices]
    if present == [True, True, False, False, True, True, False, False]:
        written = [vertices[0], vertices[1], vertices[4], vertices[5]]
    elif all(present) and len(vertices) == _VERTEX_FIELDS:
        written = list(vertices)
    else:
        return (reasons.INVALID_BOX, "expected x_min,y_min,,,x_max,y_max,, or four x,y "
                f"vertices, found {','.join(vertices)!r}")
    try:
        values = [float(value) for value in written]
    except ValueError:
        return reasons.INVALID_BOX, f"a coordinate is not a number: {','.join(written)!r}"
    if not all(0.0 <= value <= 1.0 for value in values):  # also false for NaN
        return (reasons.BOX_OUT_OF_RANGE, "coordinates must be relative to the image size, "
                f"between 0 and 1: {','.join(written)}")
    if len(values) == 4:
        box = Box(*values)
    else:
        xs, ys = values[0::2], values[1::2]
        box = Box(min(xs), min(ys), max(xs), max(ys))
    if box.xmin >= box.xmax or box.ymin >= box.ymax:
        return (reasons.EMPTY_BOX, f"x_min must be below x_max and y_min below y_max: "
                f"{','.join(written)}")
    return box


def _box_row(image: ManifestRow, label: str, vertices: Sequence[str],
             reject: Callable[..., DeadLetter]) -> ManifestRow | DeadLetter:
    """One detection row: a labelled box, or with no label and no box an image without
    objects (a negative example)."""
    if not label and not any(vertices):
        return image
    if not label:
        return reject(reasons.MISSING_LABEL, "the box has no label", uri=image.uri,
                      split=image.split)
    box = parse_box(vertices)
    if not isinstance(box, Box):
        return reject(*box, uri=image.uri, split=image.split)
    return image._replace(labels=(label,), boxes=(box,))


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


def _parse_jsonl_line(manifest: str, folder: str, line: int, raw: str,
                      rules: RowRules) -> Iterator[ManifestRow | DeadLetter]:
    """One line of a Vertex AI image import file: one row, or with detection rules one
    row per bounding box (so that a bad box costs only itself)."""
    reject = _rejecter(manifest, line, raw)
    if _has_undecodable_bytes(raw):
        yield reject(reasons.INVALID_ENCODING, "the line is not valid UTF-8")
        return
    try:
        item = json.loads(raw)
    except ValueError as error:
        yield reject(reasons.MALFORMED_ROW, f"cannot parse the line as JSON: {error}")
        return
    if not isinstance(item, dict):
        yield reject(reasons.MALFORMED_ROW, "expected a JSON object")
        return
    written_uri = item.get("imageGcsUri")
    if not isinstance(written_uri, str) or not written_uri.strip():
        yield reject(reasons.MISSING_URI, "imageGcsUri is missing or empty")
        return
    written_uri = written_uri.strip()
    uri = resolve_uri(written_uri, folder)
    ml_use = str((item.get("dataItemResourceLabels") or {}).get(_VERTEX_ML_USE, ""))
    split = _split(_VERTEX_SPLITS.get(ml_use.lower(), ml_use), written_uri, rules)
    if split is None:
        yield reject(reasons.INVALID_SPLIT, _invalid_split(ml_use), uri=uri, split=ml_use)
        return
    image = ManifestRow(manifest, line, raw, split, uri, ())
    if rules.detection:
        yield from _jsonl_box_rows(image, item.get("boundingBoxAnnotations") or [])
    else:
        yield _jsonl_classification_row(image, item, rules, reject)


def _jsonl_classification_row(image: ManifestRow, item: dict, rules: RowRules,
                              reject: Callable[..., DeadLetter]) -> ManifestRow | DeadLetter:
    annotations = item.get("classificationAnnotations") or [
        item.get("classificationAnnotation") or {}]
    labels = tuple(dict.fromkeys(
        str(annotation.get("displayName", "")).strip() for annotation in annotations
        if isinstance(annotation, dict) and str(annotation.get("displayName", "")).strip()))
    where = {"uri": image.uri, "split": image.split}
    if not labels and item.get("boundingBoxAnnotations"):
        return reject(reasons.UNSUPPORTED_ANNOTATION, "boundingBoxAnnotations without a "
                      "classification annotation; pass --label_mode detection", **where)
    if not labels:
        return reject(reasons.MISSING_LABEL, "no classification annotation with a "
                      "displayName", **where)
    if len(labels) > 1 and not rules.multi_label:
        return reject(reasons.MULTIPLE_LABELS, f"{len(labels)} labels; pass --label_mode "
                      "multi to keep them all", **where)
    return image._replace(labels=labels)


_VERTEX_BOX_KEYS = ("xMin", "yMin", "", "", "xMax", "yMax", "", "")  # as parse_box reads them


def _jsonl_box_rows(image: ManifestRow, annotations: object
                    ) -> Iterator[ManifestRow | DeadLetter]:
    """A row per bounding box annotation; a line without any is an image without objects."""
    if not isinstance(annotations, list):
        yield _rejecter(image.manifest, image.line, image.raw)(
            reasons.MALFORMED_ROW, "boundingBoxAnnotations is not a list",
            uri=image.uri, split=image.split)
        return
    if not annotations:
        yield image
    for index, annotation in enumerate(annotations):
        raw = json.dumps(annotation, ensure_ascii=False)
        reject = _rejecter(image.manifest, image.line, raw, f"boundingBoxAnnotations[{index}]: ")
        if not isinstance(annotation, dict):
            yield reject(reasons.MALFORMED_ROW, "expected a JSON object", uri=image.uri,
                         split=image.split)
            continue
        vertices = [_json_text(annotation.get(key)) if key else "" for key in _VERTEX_BOX_KEYS]
        yield _box_row(image._replace(raw=raw), _json_text(annotation.get("displayName")),
                       vertices, reject)


def _json_text(value: object) -> str:
    return "" if value is None else str(value).strip()


def _are_numbers(fields: Sequence[str]) -> bool:
    try:
        return bool([float(field) for field in fields if field])
    except ValueError:
        return False


_UNDECODABLE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of bad bytes


def _has_undecodable_bytes(text: str) -> bool:
    return _UNDECODABLE.search(text) is not None


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
