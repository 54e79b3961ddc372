"""Manifest rows, and the line formats: AutoML Vision / TFRecorder CSV
(`[split,]image_uri,label`, single or multi-label, or one bounding box per row, relative
or in pixels of a declared size) and Vertex AI JSON Lines import files. sources.py finds
each manifest's format (COCO and Pascal VOC have their own modules).

A manifest is read in chunks of whole lines (worker/chunks.py), each streamed line by line
by a worker process, so no process ever holds the whole manifest. A row is one physical
line: a stray quote then costs only its own row instead of swallowing the rest of the
file (image manifests have no multi-line fields), and a line range holds whole rows.
Free of Beam: worker processes parse the rows (storage.py reaches buckets for them).
"""

from __future__ import annotations

import codecs
import collections
import csv
import dataclasses
import functools
import hashlib
import io
import itertools
import json
import lzma
import math
import posixpath
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import BinaryIO, NamedTuple

from worker import dead_letters as reasons
from worker import storage
from worker.choices import LabelMode
from worker.chunks import LineRange, range_digest
from worker.dead_letters import DeadLetter
from worker.records import Box, ManifestRow
from worker.schema import IMAGE, ExtraColumn, parse_value
from worker.splits import SPLITS, normalise_split

DISCARD = "discard"  # TFRecorder's split value for rows to leave out
DEFAULT_SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
DEAD_LETTERS = "dead_letters"
DISCARDED = "discarded"  # ReadManifest's output of DiscardedRows

# Header names recognised for each column (compared lower-cased); AutoML order otherwise.
# Left out as ambiguous: "name" (a file name or a class name) and "id" (an image id or,
# in Kaggle's whale set `Image,Id`, the label: read as the label only beside an image
# column, see _LABEL_BESIDE_AN_IMAGE). "image_id" is Kaggle's name for the image; its
# values are file names, or names without an extension, which then are not found.
_COLUMN_NAMES = {
    "split": {"split", "set", "ml_use", "subset"},
    "uri": {"image_uri", "uri", "image", "image_path", "path", "file", "filename",
            "file_name", "file_path", "filepath", "fname", "img", "image_id", "image_name",
            "image_file", "gcs_file_path", "image_url", "url"},
    "label": {"label", "labels", "label_name", "class", "class_name", "category",
              "category_name", "target"},
    "xmin": {"xmin", "x_min", "x_relative_min"},
    "ymin": {"ymin", "y_min", "y_relative_min"},
    "xmax": {"xmax", "x_max", "x_relative_max"},
    "ymax": {"ymax", "y_max", "y_relative_max"},
    # The Object Detection API's CSV (xml_to_csv.py): boxes in pixels of this declared size.
    "width": {"width", "image_width"},
    "height": {"height", "image_height"},
}
_LABEL_BESIDE_AN_IMAGE = "id"
_MAIN_COLUMNS = ("split", "uri", "label")
_BOX_COLUMNS = ("xmin", "ymin", "xmax", "ymax")
# AutoML detection rows end in eight coordinate fields: x_min,y_min,,,x_max,y_max,, or
# the four vertices x_min,y_min,x_max,y_min,x_max,y_max,x_min,y_max.
_VERTEX_FIELDS = 8


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
    label_mode: LabelMode = LabelMode.SINGLE
    label_separator: str = "|"
    extra_columns: tuple[ExtraColumn, ...] = ()  # from --schema; need a header
    # --image_dir: relative image names are relative to it instead of the manifest's folder.
    image_dir: str | None = None
    # --uri_column / --label_column: header names that override the known ones
    uri_column: str | None = None
    label_column: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "label_mode", LabelMode(self.label_mode))

    @property
    def multi_label(self) -> bool:
        return self.label_mode is LabelMode.MULTI

    @property
    def detection(self) -> bool:
        return self.label_mode is LabelMode.DETECTION


class ManifestError(ValueError):
    """A manifest that cannot be read at all (as opposed to a bad row in it)."""


class DiscardedRow(NamedTuple):
    """A row whose split is DISCARD: left out on purpose, counted apart from dead letters."""

    manifest: str
    line: int


# What reading a manifest yields for each row.
ManifestItem = ManifestRow | DeadLetter | DiscardedRow


class OneHotColumn(NamedTuple):
    """A label column of a one-hot manifest: the label is the column's name, 1 sets it."""

    index: int
    label: str


@dataclasses.dataclass(frozen=True)
class ColumnLayout:
    """Where each column is in a row; `width` is the number of fields a row must have.

    `label` is None for one-hot label columns (`one_hot`, `image_id,cat,dog` with 0/1);
    `box`: the xmin, ymin, xmax, ymax columns of a detection manifest with a header;
    `size`: its width and height columns, when its boxes are in pixels of that size;
    `extras`: the columns of RowRules.extra_columns, in their order.
    """

    uri: int
    label: int | None
    split: int | None
    width: int
    box: tuple[int, int, int, int] | None = None
    extras: tuple[int, ...] = ()
    size: tuple[int, int] | None = None
    one_hot: tuple[OneHotColumn, ...] = ()

    @classmethod
    def detect(cls, first_row: Sequence[str], source: str, rules: RowRules,
               next_rows: Sequence[Sequence[str]] = ()) -> tuple[ColumnLayout, bool]:
        """Returns the layout and whether `first_row` is a header (to skip).

        `next_rows`: the rows after it (a few dozen are enough), which tell a header of
        unknown names from data and show one-hot label columns.
        """
        names = [field.strip().lower() for field in first_row]
        extra_names = {column.name.lower() for column in rules.extra_columns}
        found = _named_columns(names, extra_names)
        if rules.uri_column or rules.label_column:  # they name the columns of a header
            found |= _chosen_columns(first_row, names, source, rules)
        elif not _is_header(first_row, next_rows, found):
            if rules.extra_columns:
                raise ManifestError(f"{source}: --schema needs a header row naming the "
                                    "columns (e.g. split,image_uri,label,...)")
            return AUTOML_LAYOUT, False
        one_hot = ()
        if "label" not in found and "uri" in found and not rules.detection:
            taken = {index for index, name in enumerate(names)
                     if name in extra_names or any(name in known
                                                   for known in _COLUMN_NAMES.values())}
            one_hot = _one_hot_columns(first_row, next_rows, taken | {found["uri"]})
        required = ("uri", *(() if one_hot else ("label",)),
                    *(_BOX_COLUMNS if rules.detection else ()))
        for column in required:
            if column not in found:
                raise ManifestError(_unmapped_header(first_row, source, column, found))
        box = tuple(found[column] for column in _BOX_COLUMNS) if rules.detection else None
        size = ((found["width"], found["height"])
                if box and "width" in found and "height" in found else None)
        extras = []
        for column in rules.extra_columns:
            if column.name.lower() not in names:
                raise ManifestError(f"{source}: the header {','.join(first_row)!r} has no "
                                    f"column {column.name!r} named in --schema")
            extras.append(names.index(column.name.lower()))
        return cls(found["uri"], found.get("label"), found.get("split"), len(names), box,
                   tuple(extras), size, one_hot), True


def _named_columns(names: Sequence[str], extra_names: set[str]) -> dict[str, int]:
    """column -> the first index of a known name for it, not a --schema column's."""
    found: dict[str, int] = {}
    for index, name in enumerate(names):
        for column, known in _COLUMN_NAMES.items():
            if name in known and name not in extra_names:
                found.setdefault(column, index)
    if ("uri" in found and "label" not in found and _LABEL_BESIDE_AN_IMAGE in names
            and _LABEL_BESIDE_AN_IMAGE not in extra_names):
        found["label"] = names.index(_LABEL_BESIDE_AN_IMAGE)
    return found


def _chosen_columns(first_row: Sequence[str], names: Sequence[str], source: str,
                    rules: RowRules) -> dict[str, int]:
    """The columns --uri_column and --label_column name, found in the header's names."""
    chosen = {}
    for column, option, name in (("uri", "--uri_column", rules.uri_column),
                                 ("label", "--label_column", rules.label_column)):
        if name is None:
            continue
        if name.strip().lower() not in names:
            raise ManifestError(f"{source}: {option} {name!r} is not a column of the first "
                                f"row, whose columns are {_columns(first_row)}")
        chosen[column] = names.index(name.strip().lower())
    return chosen


def _is_header(first_row: Sequence[str], next_rows: Sequence[Sequence[str]],
               found: dict[str, int]) -> bool:
    """Two known names; or, in a row without any image path, one known name
    (`image_id,healthy,rust` over ids without an extension) or a column where most of
    the next rows of its width hold an image path (a header of unknown names)."""
    known = [column for column in found if column in _MAIN_COLUMNS]
    if len(known) >= 2:
        return True
    if any(_is_image_path(field) for field in first_row):
        return False
    if known:
        return True
    width = len(_trimmed(first_row))
    same_width = [row for row in next_rows if len(_trimmed(row)) == width]
    return any(field.strip() and 2 * sum(_is_image_path(row[index]) for row in same_width)
               > len(same_width) for index, field in enumerate(first_row[:width]))


_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


def _is_image_path(field: str) -> bool:
    """What an image URI looks like: an image file extension, or a folder or scheme."""
    text = field.strip().lower()
    return text.endswith(_IMAGE_EXTENSIONS) or "/" in text or "\\" in text


def _trimmed(fields: Sequence[str]) -> list[str]:
    """The fields without trailing empty ones (exported manifests often end in commas)."""
    fields = list(fields)
    while fields and not fields[-1].strip():
        fields.pop()
    return fields


def _one_hot_columns(first_row: Sequence[str], next_rows: Sequence[Sequence[str]],
                     taken: set[int]) -> tuple[OneHotColumn, ...]:
    """The header's other columns, when there are at least two and more than half of the
    next rows of the header's width hold only 0 or 1 in them; else none. (A row holding
    something else there is then an invalid_value dead letter.)"""
    columns = tuple(OneHotColumn(index, name.strip()) for index, name in enumerate(first_row)
                    if index not in taken and name.strip())
    rows = [row for row in next_rows if len(row) == len(first_row)]
    binary = sum(all(_one_hot_value(row[column.index]) is not None for column in columns)
                 for row in rows)
    return columns if len(columns) >= 2 and 2 * binary > len(rows) else ()


def _one_hot_value(field: str) -> bool | None:
    """"1" -> True, "0" -> False (also "1.0", as pandas writes floats); None otherwise."""
    try:
        value = float(field)
    except ValueError:
        return None
    return {0.0: False, 1.0: True}.get(value)


def _unmapped_header(first_row: Sequence[str], source: str, column: str,
                     found: dict[str, int]) -> str:
    """One line: the header, what it lacks, and the options that name its columns (or,
    for a header naming no box column at all, the label mode it fits)."""
    if column in _BOX_COLUMNS:
        no_box = not any(box in found for box in _BOX_COLUMNS)
        return (f"{source}: the header {','.join(first_row)!r} names no {column} column "
                f"(expected one of: {', '.join(sorted(_COLUMN_NAMES[column]))})"
                + ("; without boxes it is a classification manifest: pass --label_mode "
                   "single or multi" if no_box else ""))
    return (f"{source}: the header {','.join(first_row)!r} names no {column} column "
            f"(known names: {', '.join(sorted(_COLUMN_NAMES[column]))}); its columns are "
            f"{_columns(first_row)}: name them with --uri_column NAME and --label_column NAME")


def _columns(fields: Sequence[str]) -> str:
    return ", ".join(repr(field.strip()) for field in fields)


AUTOML_LAYOUT = ColumnLayout(split=0, uri=1, label=2, width=3)
URI_LABEL_LAYOUT = ColumnLayout(split=None, uri=0, label=1, width=2)  # AutoML without a set


# Rows read ahead of the first: to tell a header from data, and the label mode's shape.
_LOOKAHEAD = 50


def read_header(path: str, rules: RowRules = RowRules()) -> ColumnLayout:
    """Reads only the first rows of a CSV manifest: lets the launcher reject a header it
    cannot map, or rows of another --label_mode's shape, before the job starts."""
    head = _parsed_rows(itertools.islice(numbered_lines(path), _LOOKAHEAD))
    if not head:
        return AUTOML_LAYOUT
    layout, is_header = ColumnLayout.detect(head[0], path, rules, head[1:])
    problem = label_mode_problem(head[0] if is_header else None,
                                 head[1:] if is_header else head, rules)
    if problem:
        raise ManifestError(f"{path}: {problem}")
    return layout


def read_manifest(path: str, rules: RowRules = RowRules(), split: str | None = None
                  ) -> Iterator[ManifestItem]:
    """Yields every data row of one CSV or JSON Lines manifest file as a ManifestRow, a
    DeadLetter, or a DiscardedRow for a DISCARD row.

    Rows without a split (UNASSIGNED, empty, or no split column) get `split` when given
    (--manifest SPLIT=PATH), else one from assign_split with the rules' split fractions.
    A row naming a split other than `split` is dead-lettered.
    """
    return (read_jsonl if is_jsonl(path) else read_csv)(path, rules, split)


def read_csv(path: str, rules: RowRules, split: str | None, lines: LineRange | None = None
             ) -> Iterator[ManifestItem]:
    """The rows of a CSV manifest, or of its `lines`; the header is told from the file's
    first lines either way."""
    folder = image_folder(path, rules)
    layout_line, layout, is_header = _csv_layout(path, rules)
    for line, raw in numbered_lines(path, lines):
        if line == layout_line and is_header:
            continue
        yield _parse_row(path, folder, line, raw, _split_fields(raw),
                         layout if line >= layout_line else AUTOML_LAYOUT, rules, split)


def _csv_layout(path: str, rules: RowRules) -> tuple[float, ColumnLayout, bool]:
    """(the line that sets the layout: the first that parses as CSV, its layout, whether
    it is a header); the lines before it (unparseable) are read with AUTOML_LAYOUT."""
    lines = numbered_lines(path)
    head = list(itertools.islice(lines, _LOOKAHEAD))  # the header is told by what follows
    for line, raw in itertools.chain(head, lines):
        fields = _split_fields(raw)
        if isinstance(fields, list):
            following = _parsed_rows(item for item in head if item[0] > line)
            return (line, *ColumnLayout.detect(fields, path, rules, following))
    return math.inf, AUTOML_LAYOUT, False


def read_jsonl(path: str, rules: RowRules, split: str | None, lines: LineRange | None = None
               ) -> Iterator[ManifestRow | DeadLetter]:
    folder = image_folder(path, rules)
    for line, raw in numbered_lines(path, lines):
        yield from _parse_jsonl_line(path, folder, line, raw, rules, split)


def _parsed_rows(lines: Iterable[tuple[int, str]]) -> list[list[str]]:
    """The fields of the lines that parse as CSV."""
    return [fields for _, raw in lines if isinstance(fields := _split_fields(raw), list)]


def check_jsonl(path: str, rules: RowRules = RowRules()) -> None:
    """The launcher's look at a JSON Lines manifest's first lines: raises ManifestError
    for lines of another --label_mode's shape (see jsonl_label_mode_problem). CSV
    manifests get theirs from read_header."""
    items = []
    for _, raw in itertools.islice(numbered_lines(path), _LOOKAHEAD):
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if isinstance(item, dict):
            items.append(item)
    problem = jsonl_label_mode_problem(items, rules)
    if problem:
        raise ManifestError(f"{path}: {problem}")


def label_mode_problem(header: Sequence[str] | None, rows: Sequence[Sequence[str]],
                       rules: RowRules) -> str | None:
    """Why a CSV manifest is clearly of another label mode than `rules`', naming the flag
    to pass; None when it may fit. Clearly: a header naming box columns without
    detection, or more than half of the first data rows shaped for the other mode (a
    few odd rows are dead letters, not another mode; an all-negative detection set,
    `TRAIN,a.jpg,`, is legal)."""
    if header is not None:
        names = _named_columns([field.strip().lower() for field in header],
                               {column.name.lower() for column in rules.extra_columns})
        if not rules.detection and any(column in names for column in _BOX_COLUMNS):
            return "the header names box columns; pass --label_mode detection"
        return None
    shapes = collections.Counter(_row_shape(_trimmed(row)) for row in rows)
    total = sum(shapes.values())
    for shape, wrong, flag in (("box", not rules.detection, "detection"),
                               ("labels", rules.label_mode is LabelMode.SINGLE, "multi"),
                               ("label", rules.detection, "single (or multi)")):
        if wrong and 2 * shapes[shape] > total:
            return (f"{shapes[shape]} of the first {total} rows {_SHAPES[shape]}; "
                    f"pass --label_mode {flag}")
    return None


_SHAPES = {"box": "end in box coordinates (label,x_min,y_min,...)",
           "labels": "have several label fields (split,image_uri,label1,label2,...)",
           "label": "have a label and no box"}


def _row_shape(fields: Sequence[str]) -> str:
    """A headerless row's shape: "box" (a label then coordinates, in [0, 1] or not),
    "labels" (more fields after the label), "label" (uri and label only) or "other"."""
    label_at = 2 if fields and _is_split_value(fields[0]) else 1
    if len(fields) <= label_at or not fields[label_at].strip():
        return "other"
    rest = [field.strip() for field in fields[label_at + 1:]]
    if not rest:
        return "label"
    if len(rest) <= _VERTEX_FIELDS:
        box = parse_box(rest + [""] * (_VERTEX_FIELDS - len(rest)))
        if isinstance(box, Box) or box[0] in (reasons.BOX_OUT_OF_RANGE, reasons.EMPTY_BOX):
            return "box"
    return "labels"


def jsonl_label_mode_problem(items: Sequence[dict], rules: RowRules) -> str | None:
    """label_mode_problem for Vertex AI JSON Lines: several classification labels on any
    line without multi (that is unambiguous), or more than half of the lines shaped for
    the other mode (boxes and no classification, or the reverse)."""
    boxes_only = sum(bool(item.get("boundingBoxAnnotations")) and not _classified(item)
                     for item in items)
    classified_only = sum(_classified(item) and not item.get("boundingBoxAnnotations")
                          for item in items)
    several = sum(isinstance(item.get("classificationAnnotations"), list)
                  and len(item["classificationAnnotations"]) > 1 for item in items)
    if rules.detection and 2 * classified_only > len(items):
        return (f"{classified_only} of the first {len(items)} lines have a classification "
                "annotation and no boundingBoxAnnotations; pass --label_mode single (or multi)")
    if not rules.detection and 2 * boxes_only > len(items):
        return (f"{boxes_only} of the first {len(items)} lines have only "
                "boundingBoxAnnotations; pass --label_mode detection")
    if rules.label_mode is LabelMode.SINGLE and several:
        return (f"{several} of the first {len(items)} lines have several "
                "classificationAnnotations; pass --label_mode multi")
    return None


def _classified(item: dict) -> bool:
    return bool(item.get("classificationAnnotation") or item.get("classificationAnnotations"))


def is_jsonl(path: str) -> bool:
    """Vertex AI import files are JSON Lines (a COCO .json is told apart in sources.py)."""
    return path.lower().removesuffix(".gz").endswith((".jsonl", ".json"))


def image_folder(path: str, rules: RowRules) -> str:
    """What relative image names in the manifest at `path` are relative to."""
    return rules.image_dir or storage.split(path)[0]


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
        uri = storage.join(folder, uri)
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
               rules: RowRules, forced_split: str | None = None
               ) -> ManifestRow | DeadLetter | DiscardedRow:
    reject = _rejecter(manifest, line, raw)
    if _has_undecodable_bytes(raw):
        return reject(reasons.INVALID_ENCODING, "the row is not valid UTF-8")
    if isinstance(fields, csv.Error):
        return reject(reasons.MALFORMED_ROW, f"cannot parse the row as CSV: {fields}")
    fields = [field.strip() for field in fields]
    while len(fields) > layout.width and not fields[-1]:
        fields.pop()  # trailing commas are common in exported manifests
    headerless = layout in (AUTOML_LAYOUT, URI_LABEL_LAYOUT)
    if headerless and rules.label_mode is not LabelMode.SINGLE:  # split,uri,... or uri,...
        layout = AUTOML_LAYOUT if _is_split_value(fields[0]) else URI_LABEL_LAYOUT
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
    if written_split.lower() == DISCARD:
        return DiscardedRow(manifest, line)
    if not written_uri:
        return reject(reasons.MISSING_URI, "the image URI is empty", split=written_split)
    uri = resolve_uri(written_uri, folder)
    split = _split(written_split, written_uri, rules, forced_split)
    if split is None:
        return reject(reasons.INVALID_SPLIT, _invalid_split(written_split, forced_split),
                      uri=uri, split=written_split)
    if rules.detection:
        image = ManifestRow(manifest, line, raw, split, uri, ())
        if layout.size is not None:
            return _pixel_box_row(image, fields, layout, reject)
        if layout.box is None:  # headerless: the fields after the label
            vertices = fields[layout.label + 1:]
            vertices += [""] * (_VERTEX_FIELDS - len(vertices))
        else:
            xmin, ymin, xmax, ymax = (fields[index] for index in layout.box)
            vertices = [xmin, ymin, "", "", xmax, ymax, "", ""]
        return box_row(image, fields[layout.label], any(vertices),
                       functools.partial(parse_box, vertices), reject)
    if layout.one_hot:
        labels = _one_hot_labels(fields, layout.one_hot, rules.multi_label,
                                 functools.partial(reject, uri=uri, split=split))
        if isinstance(labels, DeadLetter):
            return labels
    elif not rules.multi_label:
        labels = tuple(filter(None, [fields[layout.label]]))
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


def _one_hot_labels(fields: Sequence[str], columns: Sequence[OneHotColumn], multi_label: bool,
                    reject: Callable[..., DeadLetter]) -> tuple[str, ...] | DeadLetter:
    """The names of the columns holding 1; with single labels exactly one of them."""
    labels = []
    for column in columns:
        value = _one_hot_value(fields[column.index])
        if value is None:
            return reject(reasons.INVALID_VALUE, f"one-hot column {column.label!r} holds "
                          f"{fields[column.index]!r}, not 0 or 1")
        if value:
            labels.append(column.label)
    if not labels:
        return reject(reasons.MISSING_LABEL, "no one-hot label column holds 1")
    if len(labels) > 1 and not multi_label:
        return reject(reasons.MULTIPLE_LABELS, f"{len(labels)} one-hot columns hold 1 "
                      f"({', '.join(labels)}); pass --label_mode multi to keep them all")
    return tuple(labels)


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


def declared_size(width: object, height: object) -> tuple[int, int] | tuple[str, str]:
    """The image size an annotation declares: (width, height) as positive integers, or
    (dead-letter reason, message)."""
    try:
        size = (int(str(width).strip()), int(str(height).strip()))
    except ValueError:
        size = (0, 0)
    if min(size) < 1:
        return (reasons.INVALID_SIZE, "the declared image width and height must be positive "
                f"whole numbers of pixels, found {width!r} x {height!r}")
    return size


def pixel_box(corners: Sequence[object], size: tuple[int, int], difficult: int = 0,
              truncated: int = 0, is_crowd: int = 0) -> Box | tuple[str, str]:
    """x_min, y_min, x_max, y_max in pixels of the declared (width, height) -> a Box
    relative to that size (pixel / size, as the Object Detection API's generate_tfrecord.py,
    create_pascal_tf_record.py and create_coco_tf_record.py compute it), or
    (dead-letter reason, message)."""
    written = ",".join(map(str, corners))
    try:
        xmin, ymin, xmax, ymax = (float(value) for value in corners)
    except (TypeError, ValueError):
        return reasons.INVALID_BOX, f"a pixel coordinate is not a number: {written!r}"
    width, height = size
    if not (0 <= xmin <= width and 0 <= xmax <= width and 0 <= ymin <= height
            and 0 <= ymax <= height):  # also false for NaN
        return (reasons.BOX_OUT_OF_RANGE, f"pixel coordinates {written} lie outside the "
                f"declared {width}x{height} image")
    if xmin >= xmax or ymin >= ymax:
        return (reasons.EMPTY_BOX, f"x_min must be below x_max and y_min below y_max: "
                f"{written}")
    return Box(xmin / width, ymin / height, xmax / width, ymax / height, difficult,
               truncated, is_crowd)


def _pixel_box_row(image: ManifestRow, fields: Sequence[str], layout: ColumnLayout,
                   reject: Callable[..., DeadLetter]) -> ManifestRow | DeadLetter:
    """A row of the Object Detection API's CSV: a box in pixels of the declared size."""
    size = declared_size(*(fields[index] for index in layout.size))
    if not isinstance(size[0], int):
        return reject(*size, uri=image.uri, split=image.split)
    corners = [fields[index] for index in layout.box]
    return box_row(image._replace(image_size=size), fields[layout.label], any(corners),
                   functools.partial(pixel_box, corners, size), reject)


def box_row(image: ManifestRow, label: str, has_box: bool,
            make_box: Callable[[], Box | tuple[str, str]], reject: Callable[..., DeadLetter]
            ) -> ManifestRow | DeadLetter:
    """One detection row: a labelled box, or with no label and no box an image without
    objects (a negative example). `make_box`: the Box, or (dead-letter reason, message)."""
    if not label and not has_box:
        return image
    if not label:
        return reject(reasons.MISSING_LABEL, "the box has no label", uri=image.uri,
                      split=image.split)
    box = make_box()
    if not isinstance(box, Box):
        return reject(*box, uri=image.uri, split=image.split)
    return image._replace(labels=(label,), boxes=(box,))


def _is_split_value(field: str) -> bool:
    """Whether a headerless row's first field is a split column (not an image URI)."""
    return (normalise_split(field) is not None
            or field.strip().lower() in ("", "unassigned", DISCARD))


def _split(written: str, uri: str, rules: RowRules, forced: str | None = None) -> str | None:
    """The row's split: `forced` (--manifest SPLIT=PATH) or one assigned when UNASSIGNED
    or empty; None when it is invalid or disagrees with `forced`."""
    split = normalise_split(written)
    if split is None and written.strip().lower() in ("", "unassigned"):
        return forced or assign_split(uri, rules.split_fractions)
    if split is not None and forced in (None, split):
        return split
    return None


def _invalid_split(written: str, forced: str | None = None) -> str:
    if forced and normalise_split(written):
        return (f"split {written!r} disagrees with the {forced.upper()} that --manifest "
                f"{forced.upper()}=PATH gives every row of this file")
    return (f"split {written!r} is not one of TRAIN, VALIDATION (or VAL, VALID, EVAL, DEV), "
            "TEST, UNASSIGNED or DISCARD")


_VERTEX_ML_USE = "aiplatform.googleapis.com/ml_use"
_VERTEX_SPLITS = {"training": "train"}  # Vertex AI's ml_use values, where they differ


def _parse_jsonl_line(manifest: str, folder: str, line: int, raw: str,
                      rules: RowRules, forced_split: str | None = None
                      ) -> Iterator[ManifestRow | DeadLetter]:
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
    written_split = _VERTEX_SPLITS.get(ml_use.lower(), ml_use)
    split = _split(written_split, written_uri, rules, forced_split)
    if split is None:
        yield reject(reasons.INVALID_SPLIT, _invalid_split(written_split, forced_split),
                     uri=uri, split=ml_use)
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
        yield box_row(image._replace(raw=raw), _json_text(annotation.get("displayName")),
                      any(vertices), functools.partial(parse_box, vertices), reject)


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
