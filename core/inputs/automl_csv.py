"""AutoML Vision / TFRecorder CSV manifests: `[split,]image_uri,label`, single or
multi-label (several label fields, or labels joined by --label_separator, or one-hot
columns), or one bounding box per row (relative vertices, or the Object Detection API's
pixel boxes of a declared size); a header of known names, or the columns
--uri_column/--label_column/--split_column name, or AutoML's column order. Read a line
range at a time by worker processes.

What the first rows may say two ways is settled once, by the launcher, before any worker
reads (CsvFormat.settled_rules, asked by pipeline/read_choices.py): a header column under
a name of its own whose values are all split names (`picture,breed,fold`), or a
validation flag column holding only true/false (fastai's `is_valid`, core/records/splits.py), is
the split column, named in the console, or the run is refused naming the columns
(split_name_columns); with --label_mode multi, the separator most label fields hold
(`animal;indoor`) joins labels (common_separator).
Workers read by the RowRules that come of it, so no two chunks can choose apart."""

from __future__ import annotations

import collections
import csv
import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

from image_tfrecords.core.inputs.boxes import (
    VERTEX_FIELDS,
    box_row,
    declared_size,
    parse_box,
    pixel_box,
)
from image_tfrecords.core.inputs.input_format import InputFormat
from image_tfrecords.core.inputs.lines import LOOKAHEAD, LongLine, numbered_lines, short_lines
from image_tfrecords.core.inputs.rows import (
    DEFAULT_LABEL_SEPARATOR,
    DISCARD,
    DiscardedRow,
    ManifestError,
    ManifestItem,
    RowRules,
    has_undecodable_bytes,
    image_folder,
    invalid_split,
    is_split_value,
    rejecter,
    resolve_uri,
    row_split,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.choices import LabelMode, LeftOut
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import Box, ManifestRow
from image_tfrecords.core.records.schema import (
    IMAGE,
    SEGMENTATION,
    STRING,
    ExtraColumn,
    parse_value,
)
from image_tfrecords.core.records.splits import (
    is_validation_flag_column,
    normalise_split,
    split_word,
)

# Header names recognised for each column (compared lower-cased); AutoML order otherwise.
# Left out as ambiguous: "name" (a file name or a class name) and "id" (an image id or,
# in Kaggle's whale set `Image,Id`, the label: read as the label only beside an image
# column, see _LABEL_BESIDE_AN_IMAGE). "image_id" is Kaggle's name for the image; its
# values are file names, or names without an extension, which then are not found.
_COLUMN_NAMES = {
    "split": {"split", "set", "ml_use", "subset"},
    "uri": {
        "image_uri",
        "uri",
        "image",
        "image_path",
        "path",
        "file",
        "filename",
        "file_name",
        "file_path",
        "filepath",
        "fname",
        "img",
        "image_id",
        "image_name",
        "image_file",
        "gcs_file_path",
        "image_url",
        "url",
    },
    "label": {
        "label",
        "labels",
        "label_name",
        "class",
        "class_name",
        "category",
        "category_name",
        "target",
    },
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
    `extras`: the columns of RowRules.extra_columns, in their order;
    `split_flags`: whether the split column is a validation flag column (fastai's
    `is_valid`: true is validation, false train; core/records/splits.py split_word).
    """

    uri: int
    label: int | None
    split: int | None
    width: int
    box: tuple[int, int, int, int] | None = None
    extras: tuple[int, ...] = ()
    size: tuple[int, int] | None = None
    one_hot: tuple[OneHotColumn, ...] = ()
    split_flags: bool = False

    @classmethod
    def detect(
        cls,
        first_row: Sequence[str],
        source: str,
        rules: RowRules,
        next_rows: Sequence[Sequence[str]] = (),
    ) -> tuple[ColumnLayout, bool]:
        """Returns the layout and whether `first_row` is a header (to skip).

        `next_rows`: the rows after it (a few dozen are enough), which tell a header of
        unknown names from data and show one-hot label columns.
        """
        names = [field.strip().lower() for field in first_row]
        extra_names = {column.name.lower() for column in rules.extra_columns}
        found = _named_columns(names, extra_names)
        if rules.ignores_split_column:
            found.pop("split", None)
        if rules.names_columns:  # options name the columns of a header
            found |= _chosen_columns(first_row, names, source, rules)
        elif not _is_header(first_row, next_rows, found):
            if rules.extra_columns:
                raise ManifestError(
                    f"{source}: --schema needs a header row naming the "
                    "columns (e.g. split,image_uri,label,...)"
                )
            return AUTOML_LAYOUT, False
        one_hot = ()
        if "label" not in found and "uri" in found and not rules.detection:
            # A validation flag's true/false reads as 0/1 too: it is a split, not a class.
            taken = {
                index
                for index, name in enumerate(names)
                if name in extra_names
                or is_validation_flag_column(name)
                or any(name in known for known in _COLUMN_NAMES.values())
            }
            one_hot = _one_hot_columns(first_row, next_rows, taken | set(found.values()))
        required = (
            "uri",
            *(() if one_hot else ("label",)),
            *(_BOX_COLUMNS if rules.detection else ()),
        )
        for column in required:
            if column not in found:
                raise ManifestError(_unmapped_header(first_row, source, column, found))
        box = tuple(found[column] for column in _BOX_COLUMNS) if rules.detection else None
        size = (
            (found["width"], found["height"])
            if box and "width" in found and "height" in found
            else None
        )
        extras = []
        for column in rules.extra_columns:
            if column.name.lower() not in names:
                raise ManifestError(
                    f"{source}: the header {','.join(first_row)!r} has no "
                    f"column {column.name!r} named in --schema"
                )
            extras.append(names.index(column.name.lower()))
        split_flags = "split" in found and is_validation_flag_column(names[found["split"]])
        return cls(
            found["uri"],
            found.get("label"),
            found.get("split"),
            len(names),
            box,
            tuple(extras),
            size,
            one_hot,
            split_flags,
        ), True

    def mapped(self) -> set[int]:
        """The indexes of the columns this layout reads."""
        return {
            self.uri,
            *(column for column in (self.label, self.split) if column is not None),
            *(self.box or ()),
            *(self.size or ()),
            *self.extras,
            *(column.index for column in self.one_hot),
        }


def _named_columns(names: Sequence[str], extra_names: set[str]) -> dict[str, int]:
    """column -> the first index of a known name for it, not a --schema column's."""
    found: dict[str, int] = {}
    for index, name in enumerate(names):
        for column, known in _COLUMN_NAMES.items():
            if name in known and name not in extra_names:
                found.setdefault(column, index)
    if (
        "uri" in found
        and "label" not in found
        and _LABEL_BESIDE_AN_IMAGE in names
        and _LABEL_BESIDE_AN_IMAGE not in extra_names
    ):
        found["label"] = names.index(_LABEL_BESIDE_AN_IMAGE)
    return found


def _chosen_columns(
    first_row: Sequence[str], names: Sequence[str], source: str, rules: RowRules
) -> dict[str, int]:
    """The columns --uri_column, --label_column and --split_column name, found in the
    header's names."""
    chosen = {}
    split_column = None if rules.ignores_split_column else rules.split_column
    for column, option, name in (
        ("uri", "--uri_column", rules.uri_column),
        ("label", "--label_column", rules.label_column),
        ("split", "--split_column", split_column),
    ):
        if name is None:
            continue
        if name.strip().lower() not in names:
            raise ManifestError(
                f"{source}: {option} {name!r} is not a column of the first "
                f"row, whose columns are {_columns(first_row)}"
            )
        chosen[column] = names.index(name.strip().lower())
    return chosen


def _is_header(
    first_row: Sequence[str], next_rows: Sequence[Sequence[str]], found: dict[str, int]
) -> bool:
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
    return any(
        field.strip()
        and 2 * sum(_is_image_path(row[index]) for row in same_width) > len(same_width)
        for index, field in enumerate(first_row[:width])
    )


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


def _one_hot_columns(
    first_row: Sequence[str], next_rows: Sequence[Sequence[str]], taken: set[int]
) -> tuple[OneHotColumn, ...]:
    """The header's other columns, when there are at least two and more than half of the
    next rows of the header's width hold only 0 or 1 in them; else none. (A row holding
    something else there is then an invalid_value dead letter.)"""
    columns = tuple(
        OneHotColumn(index, name.strip())
        for index, name in enumerate(first_row)
        if index not in taken and name.strip()
    )
    rows = [row for row in next_rows if len(row) == len(first_row)]
    binary = sum(
        all(_one_hot_value(row[column.index]) is not None for column in columns) for row in rows
    )
    return columns if len(columns) >= 2 and 2 * binary > len(rows) else ()


def _one_hot_value(field: str) -> bool | None:
    """ "1" -> True, "0" -> False (also "1.0", as pandas writes floats); None otherwise."""
    try:
        value = float(field)
    except ValueError:
        return None
    return {0.0: False, 1.0: True}.get(value)


def _unmapped_header(
    first_row: Sequence[str], source: str, column: str, found: dict[str, int]
) -> str:
    """One line: the header, what it lacks, and the options that name its columns (or,
    for a header naming no box column at all, the label mode it fits)."""
    if column in _BOX_COLUMNS:
        no_box = not any(box in found for box in _BOX_COLUMNS)
        return (
            f"{source}: the header {','.join(first_row)!r} names no {column} column "
            f"(expected one of: {', '.join(sorted(_COLUMN_NAMES[column]))})"
            + (
                "; without boxes it is a classification manifest: pass --label_mode single or multi"
                if no_box
                else ""
            )
        )
    return (
        f"{source}: the header {','.join(first_row)!r} names no {column} column "
        f"(known names: {', '.join(sorted(_COLUMN_NAMES[column]))}); its columns are "
        f"{_columns(first_row)}: name them with --uri_column NAME and --label_column NAME"
    )


def _columns(fields: Sequence[str]) -> str:
    return ", ".join(repr(field.strip()) for field in fields)


AUTOML_LAYOUT = ColumnLayout(split=0, uri=1, label=2, width=3)
URI_LABEL_LAYOUT = ColumnLayout(split=None, uri=0, label=1, width=2)  # AutoML without a set


def read_header(path: str, rules: RowRules = RowRules()) -> ColumnLayout:
    """Reads only the first rows of a CSV manifest: lets the launcher reject a header it
    cannot map, or rows of another --label_mode's shape, before the job starts."""
    head = _parsed_rows(itertools.islice(short_lines(path), LOOKAHEAD))
    if not head:
        return AUTOML_LAYOUT
    layout, is_header = ColumnLayout.detect(head[0], path, rules, head[1:])
    problem = label_mode_problem(
        head[0] if is_header else None, head[1:] if is_header else head, rules
    )
    if problem:
        raise ManifestError(f"{path}: {problem}")
    return layout


def read_csv(
    path: str, rules: RowRules, split: str | None, lines: LineRange | None = None
) -> Iterator[ManifestItem]:
    """The rows of a CSV manifest, or of its `lines`; the header is told from the file's
    first lines either way."""
    folder = image_folder(path, rules)
    layout_line, layout, is_header = _csv_layout(path, rules)
    for line, raw in numbered_lines(path, lines):
        if isinstance(raw, LongLine):
            yield raw.dead_letter(path, line, split)
            continue
        if line == layout_line and is_header:
            continue
        yield _parse_row(
            path,
            folder,
            line,
            raw,
            _split_fields(raw),
            layout if line >= layout_line else AUTOML_LAYOUT,
            rules,
            split,
        )


def _csv_layout(path: str, rules: RowRules) -> tuple[float, ColumnLayout, bool]:
    """(the line that sets the layout: the first that parses as CSV, its layout, whether
    it is a header); the lines before it (unparseable) are read with AUTOML_LAYOUT."""
    lines = short_lines(path)
    head = list(itertools.islice(lines, LOOKAHEAD))  # the header is told by what follows
    for line, raw in itertools.chain(head, lines):
        fields = _split_fields(raw)
        if isinstance(fields, list):
            following = _parsed_rows(item for item in head if item[0] > line)
            return (line, *ColumnLayout.detect(fields, path, rules, following))
    return math.inf, AUTOML_LAYOUT, False


def _parsed_rows(lines: Iterable[tuple[int, str]]) -> list[list[str]]:
    """The fields of the lines that parse as CSV."""
    return [fields for _, raw in lines if isinstance(fields := _split_fields(raw), list)]


def label_mode_problem(
    header: Sequence[str] | None, rows: Sequence[Sequence[str]], rules: RowRules
) -> str | None:
    """Why a CSV manifest is clearly of another label mode than `rules`', naming the flag
    to pass; None when it may fit. Clearly: a header naming box columns without
    detection, or more than half of the first data rows shaped for the other mode (a
    few odd rows are dead letters, not another mode; an all-negative detection set,
    `TRAIN,a.jpg,`, is legal)."""
    if header is not None:
        names = _named_columns(
            [field.strip().lower() for field in header],
            {column.name.lower() for column in rules.extra_columns},
        )
        if not rules.detection and any(column in names for column in _BOX_COLUMNS):
            return "the header names box columns; pass --label_mode detection"
        return None
    shapes = collections.Counter(_row_shape(_trimmed(row)) for row in rows)
    total = sum(shapes.values())
    for shape, wrong, flag in (
        ("box", not rules.detection, "detection"),
        ("labels", rules.label_mode is LabelMode.SINGLE, "multi"),
        ("label", rules.detection, "single (or multi)"),
    ):
        if wrong and 2 * shapes[shape] > total:
            return (
                f"{shapes[shape]} of the first {total} rows {_SHAPES[shape]}; "
                f"pass --label_mode {flag}"
            )
    return None


_SHAPES = {
    "box": "end in box coordinates (label,x_min,y_min,...)",
    "labels": "have several label fields (split,image_uri,label1,label2,...)",
    "label": "have a label and no box",
}


def _row_shape(fields: Sequence[str]) -> str:
    """A headerless row's shape: "box" (a label then coordinates, in [0, 1] or not),
    "labels" (more fields after the label), "label" (uri and label only) or "other"."""
    label_at = 2 if fields and is_split_value(fields[0]) else 1
    if len(fields) <= label_at or not fields[label_at].strip():
        return "other"
    rest = [field.strip() for field in fields[label_at + 1 :]]
    if not rest:
        return "label"
    if len(rest) <= VERTEX_FIELDS:
        box = parse_box(rest + [""] * (VERTEX_FIELDS - len(rest)))
        if isinstance(box, Box) or box[0] in (reasons.BOX_OUT_OF_RANGE, reasons.EMPTY_BOX):
            return "box"
    return "labels"


def _split_fields(raw: str) -> list[str] | csv.Error:
    try:
        return next(csv.reader([raw], strict=True))
    except csv.Error as error:
        return error


def _parse_row(
    manifest: str,
    folder: str,
    line: int,
    raw: str,
    fields: list[str] | csv.Error,
    layout: ColumnLayout,
    rules: RowRules,
    forced_split: str | None = None,
) -> ManifestRow | DeadLetter | DiscardedRow:
    reject = rejecter(manifest, line, raw)
    if has_undecodable_bytes(raw):
        return reject(reasons.INVALID_ENCODING, "the row is not valid UTF-8")
    if isinstance(fields, csv.Error):
        return reject(reasons.MALFORMED_ROW, f"cannot parse the row as CSV: {fields}")
    fields = [field.strip() for field in fields]
    while len(fields) > layout.width and not fields[-1]:
        fields.pop()  # trailing commas are common in exported manifests
    layout = _row_layout(fields, layout, rules)
    if isinstance(layout, str):
        return reject(reasons.WRONG_COLUMN_COUNT, layout)
    written_uri = fields[layout.uri]
    written_split = (
        ""
        if layout.split is None or rules.ignores_split_column
        else split_word(fields[layout.split], layout.split_flags)
    )
    if written_split.lower() == DISCARD:
        return DiscardedRow(manifest, line)
    if not written_uri:
        return reject(reasons.MISSING_URI, "the image URI is empty", split=written_split)
    uri = resolve_uri(written_uri, folder)
    split = row_split(written_split, written_uri, rules, forced_split)
    if split is None:
        return reject(
            reasons.INVALID_SPLIT,
            invalid_split(written_split, forced_split),
            uri=uri,
            split=written_split,
        )
    if rules.detection:
        return _detection_row(
            ManifestRow(manifest, line, raw, split, uri, ()), fields, layout, reject
        )
    reject = functools.partial(reject, uri=uri, split=split)
    labels = _row_labels(fields, layout, rules, reject)
    if isinstance(labels, DeadLetter):
        return labels
    try:
        extras = tuple(
            _extra_value(column, fields[index], folder)
            for column, index in zip(rules.extra_columns, layout.extras, strict=True)
        )
    except ValueError as problem:
        return reject(reasons.INVALID_VALUE, str(problem))
    segmentation = next(
        (
            value
            for column, value in zip(rules.extra_columns, extras, strict=True)
            if column.type == SEGMENTATION and LeftOut.SEGMENTATION not in rules.leave_out
        ),
        None,
    )
    return ManifestRow(
        manifest, line, raw, split, uri, labels, extras=extras, segmentation=segmentation
    )


def _row_layout(fields: Sequence[str], layout: ColumnLayout, rules: RowRules) -> ColumnLayout | str:
    """The layout a row's `fields` are read by, or why their count fits none. A file
    without a header reads each row by its shape: `split,uri,...` or `uri,...`."""
    headerless = layout in (AUTOML_LAYOUT, URI_LABEL_LAYOUT)
    if headerless and rules.label_mode is not LabelMode.SINGLE:
        layout = AUTOML_LAYOUT if is_split_value(fields[0]) else URI_LABEL_LAYOUT
        # A negative detection row keeps its empty label field: `TRAIN,uri,`.
        least = layout.width if rules.detection else layout.uri + 1
        most = layout.width + VERTEX_FIELDS if rules.detection else None
        if len(fields) < least or (most and len(fields) > most):
            expected = f"{least} to {most}" if most else f"at least {least}"
            return f"expected {expected} fields, found {len(fields)}"
        return layout
    if layout is AUTOML_LAYOUT and len(fields) == 2:
        layout = URI_LABEL_LAYOUT
    if len(fields) != layout.width:
        hint = (
            "; for one bounding box per row pass --label_mode detection"
            if headerless and _are_numbers(fields[layout.width :])
            else ""
        )
        return f"expected {layout.width} fields, found {len(fields)}{hint}"
    return layout


def _detection_row(
    image: ManifestRow,
    fields: Sequence[str],
    layout: ColumnLayout,
    reject: Callable[..., DeadLetter],
) -> ManifestRow | DeadLetter:
    """A row of one box (or none: a negative image), as AutoML's vertices, the header's
    corner columns, or the Object Detection API's pixels of a declared size."""
    if layout.size is not None:
        return _pixel_box_row(image, fields, layout, reject)
    if layout.box is None:  # headerless: the fields after the label
        vertices = fields[layout.label + 1 :]
        vertices += [""] * (VERTEX_FIELDS - len(vertices))
    else:
        xmin, ymin, xmax, ymax = (fields[index] for index in layout.box)
        vertices = [xmin, ymin, "", "", xmax, ymax, "", ""]
    return box_row(
        image,
        fields[layout.label],
        any(vertices),
        functools.partial(parse_box, vertices),
        reject,
    )


def _row_labels(
    fields: Sequence[str],
    layout: ColumnLayout,
    rules: RowRules,
    reject: Callable[..., DeadLetter],
) -> tuple[str, ...] | DeadLetter:
    """A classification row's labels: from one-hot columns, its label field, or with
    multi-label every label field (headerless) split by the separator, each once."""
    if layout.one_hot:
        return _one_hot_labels(fields, layout.one_hot, rules.multi_label, reject)
    if not rules.multi_label:
        labels = tuple(filter(None, [fields[layout.label]]))
    else:
        headerless = layout in (AUTOML_LAYOUT, URI_LABEL_LAYOUT)
        label_fields = fields[layout.label :] if headerless else [fields[layout.label]]
        labels = tuple(
            dict.fromkeys(  # each label once, in order
                label.strip()
                for field in label_fields
                for label in _joined_labels(field, rules.label_separator)
                if label.strip()
            )
        )
    return labels or reject(reasons.MISSING_LABEL, "the label is empty")


def _joined_labels(field: str, separator: str | None) -> list[str]:
    """The labels `separator` joins in one field; the field whole without one."""
    return field.split(separator) if separator else [field]


def _one_hot_labels(
    fields: Sequence[str],
    columns: Sequence[OneHotColumn],
    multi_label: bool,
    reject: Callable[..., DeadLetter],
) -> tuple[str, ...] | DeadLetter:
    """The names of the columns holding 1; with single labels exactly one of them."""
    labels = []
    for column in columns:
        value = _one_hot_value(fields[column.index])
        if value is None:
            return reject(
                reasons.INVALID_VALUE,
                f"one-hot column {column.label!r} holds {fields[column.index]!r}, not 0 or 1",
            )
        if value:
            labels.append(column.label)
    if not labels:
        return reject(reasons.MISSING_LABEL, "no one-hot label column holds 1")
    if len(labels) > 1 and not multi_label:
        return reject(
            reasons.MULTIPLE_LABELS,
            f"{len(labels)} one-hot columns hold 1 "
            f"({', '.join(labels)}); pass --label_mode multi to keep them all",
        )
    return tuple(labels)


def _extra_value(column: ExtraColumn, text: str, folder: str) -> int | float | str:
    value = parse_value(column, text)
    return resolve_uri(value, folder) if column.type in (IMAGE, SEGMENTATION) else value


def _pixel_box_row(
    image: ManifestRow,
    fields: Sequence[str],
    layout: ColumnLayout,
    reject: Callable[..., DeadLetter],
) -> ManifestRow | DeadLetter:
    """A row of the Object Detection API's CSV: a box in pixels of the declared size."""
    size = declared_size(*(fields[index] for index in layout.size))
    if not isinstance(size[0], int):
        return reject(*size, uri=image.uri, split=image.split)
    corners = [fields[index] for index in layout.box]
    return box_row(
        image._replace(image_size=size),
        fields[layout.label],
        any(corners),
        functools.partial(pixel_box, corners, size),
        reject,
    )


def _are_numbers(fields: Sequence[str]) -> bool:
    try:
        return bool([float(field) for field in fields if field])
    except ValueError:
        return False


class CsvFormat(InputFormat):
    """What any manifest is whose name no other format claims: AutoML manifests are
    named .csv, .txt or nothing at all."""

    name = "csv"
    title = "an AutoML/TFRecorder CSV manifest"
    # Also what any other name is read as (sources.py); listed here, so that a format
    # that recognises its content among these names (KITTI's .txt, Open Images' .csv)
    # does not claim every file of that name.
    suffixes = (".csv", ".tsv", ".txt")
    reads_unclaimed_names = True
    named_columns = True
    cuts_by_lines = True

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        read_header(source.path, rules)

    def group_values(
        self, source: ManifestSource, rules: RowRules, name: str
    ) -> Iterator[tuple[str, str]]:
        """The column `name`'s value of each row that has one (the rows only: no image)."""
        rules = dataclasses.replace(
            rules, extra_columns=(*rules.extra_columns, ExtraColumn(name, STRING))
        )
        try:
            for item in self.checked_rows(source, rules):
                if isinstance(item, ManifestRow) and item.extras[-1] != "":
                    yield item.uri, str(item.extras[-1])
        except ManifestError as error:  # a header without the column, said as for --schema
            raise ManifestError(
                str(error).replace("named in --schema", "named by --group_column")
            ) from None

    def settled_rules(
        self, sources: Sequence[ManifestSource], rules: RowRules, say: Callable[[str], None]
    ) -> RowRules:
        """--split_column and --label_separator, where not given, from the manifests'
        first rows: a column under a name of its own that holds only split names, and
        the separator the label fields hold (multi)."""
        if rules.split_column is None:
            rules = dataclasses.replace(rules, split_column=_split_column(sources, rules, say))
        if rules.label_separator is None and rules.multi_label:
            rules = dataclasses.replace(
                rules, label_separator=self._label_separator(sources, rules, say)
            )
        return rules

    def _label_separator(
        self, sources: Sequence[ManifestSource], rules: RowRules, say: Callable[[str], None]
    ) -> str:
        """The separator the sampled label fields hold (common_separator), named in the
        console; the default where none holds one."""
        whole_fields = dataclasses.replace(rules, label_separator=None)
        fields = [
            label
            for source in sources
            for row in itertools.islice(self.checked_rows(source, whole_fields), ROWS_SAMPLED)
            if isinstance(row, ManifestRow)
            for label in row.labels
        ]
        choice = common_separator(fields)
        if choice is None:
            return DEFAULT_LABEL_SEPARATOR
        say(
            f"labels joined by {choice.separator!r} (in {choice.fields_with_it} of the "
            f"{choice.fields} label fields sampled); --label_separator TEXT chooses another"
        )
        return choice.separator

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestItem]:
        return read_csv(source.path, rules, source.split, lines)


# Data rows of each CSV manifest the read choices are made from (the label sample's size).
ROWS_SAMPLED = 200


def _split_column(
    sources: Sequence[ManifestSource], rules: RowRules, say: Callable[[str], None]
) -> str | None:
    """The one column of the CSVs' headers, under a name the reader does not know, that
    holds only split names; None where there is none."""
    found = {
        source.path: split_name_columns(source.path, rules, ROWS_SAMPLED) for source in sources
    }
    names = {column.name.lower() for columns in found.values() for column in columns}
    if not names:
        return None
    if len(names) > 1 or not all(found.values()):
        raise ManifestError(
            f"{_listed(found)}; a split column is chosen only where every CSV manifest has "
            "one such column, under one name: name it with --split_column NAME, or pass "
            "--split_column none to split every row by hash (--split_fractions)"
        )
    column = next(iter(found.values()))[0]  # every manifest's one, under one name
    say(
        f"splits from the column {column.name!r} ({', '.join(column.values)}); "
        "--split_column none splits by hash instead"
    )
    return column.name


def _listed(found: dict[str, tuple[SplitColumn, ...]]) -> str:
    """Each manifest's columns that hold only split names, or that it has none."""
    return "; ".join(f"{path}: {_described(columns)}" for path, columns in found.items())


def _described(columns: Sequence[SplitColumn]) -> str:
    if not columns:
        return "no column of another name holds only split names"
    if len(columns) > 1:
        return (
            f"the columns {', '.join(repr(column.name) for column in columns)} hold "
            "only split names"
        )
    return f"the column {columns[0].name!r} holds only split names ({', '.join(columns[0].values)})"


class SplitColumn(NamedTuple):
    """A header column, under a name that is not one of the known ones, whose values in
    the rows sampled are all split names: what the launcher names as the split column."""

    name: str  # as the header writes it
    values: tuple[str, ...]  # the split names it holds, lower-cased, in order; a flag's
    # with the split it gives ("true as VALIDATION")


def split_name_columns(path: str, rules: RowRules, rows: int) -> tuple[SplitColumn, ...]:
    """The columns of a CSV manifest's header that the layout leaves unread and whose
    non-empty values in the first `rows` data rows are all split names (UNASSIGNED and
    DISCARD too), at least one of them a split. None for a headerless manifest, for one
    whose header names a split column, or when --split_column is given."""
    if rules.split_column is not None:
        return ()
    head = _parsed_rows(itertools.islice(short_lines(path), rows + 1))
    if not head:
        return ()
    header, data = head[0], head[1:]
    layout, is_header = ColumnLayout.detect(header, path, rules, data[:LOOKAHEAD])
    if not is_header or layout.split is not None:
        return ()
    found = []
    for index, name in enumerate(header):
        flags = is_validation_flag_column(name)
        values = [row[index].strip() for row in data if len(row) > index]
        splits = tuple(
            dict.fromkeys(
                _described_split(value, flags)
                for value in values
                if normalise_split(split_word(value, flags))
            )
        )
        if (
            index not in layout.mapped()
            and name.strip()
            and splits
            and all(is_split_value(split_word(value, flags)) for value in values)
        ):
            found.append(SplitColumn(name.strip(), splits))
    return tuple(found)


def _described_split(value: str, flags: bool) -> str:
    """A split column's value as the console names it: `val`; a flag's with its split,
    `true as VALIDATION`."""
    word = split_word(value, flags)
    return value.lower() if word == value else f"{value.lower()} as {word.upper()}"


# What may join several labels in one field; a space only where none of these occurs
# (a label such as "golden retriever" holds one).
SEPARATORS = (";", ",", "|")
SPACE = " "


class SeparatorChoice(NamedTuple):
    """The separator chosen from sampled label fields: in how many of them it occurs."""

    separator: str
    fields_with_it: int
    fields: int


def common_separator(label_fields: Sequence[str]) -> SeparatorChoice | None:
    """The separator in the most `label_fields` (`animal;indoor`); a space only where no
    other occurs and more than half of them hold one (`animal indoor`). None where none
    occurs (nothing is joined). ManifestError where two occur in equally many fields:
    which joins labels, and which is part of one, only the user knows."""
    counts = collections.Counter(
        {separator: sum(separator in field for field in label_fields) for separator in SEPARATORS}
    )
    (first, most), (second, runner_up) = counts.most_common(2)
    if most == 0:
        with_space = sum(SPACE in field.strip() for field in label_fields)
        if 2 * with_space > len(label_fields):
            return SeparatorChoice(SPACE, with_space, len(label_fields))
        return None
    if runner_up == most:
        tied = [repr(separator) for separator, count in counts.items() if count == most]
        raise ManifestError(
            f"with --label_mode multi, {' and '.join(tied)} each occur in {most} of the "
            f"{len(label_fields)} label fields sampled: say which joins several labels with "
            f"--label_separator"
        )
    return SeparatorChoice(first, most, len(label_fields))
