"""What every input format makes of what it reads: ManifestRows (core/records/records.py), dead
letters, and rows left out on purpose; the rules they are read by (RowRules), and the
rules every format shares: a row's split, an image name resolved to a URI, a dead letter
that names its row. Free of Beam: worker processes parse the rows."""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.choices import DEFAULT_LABEL_SEPARATOR, LabelMode, LeftOut
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.image_settings import ImageSettings
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.core.records.schema import ExtraColumn
from image_tfrecords.core.records.splits import SPLITS, normalise_split
from image_tfrecords.core.records.text_limits import (
    MAX_LABEL_CHARS,
    MAX_LABELS_PER_ROW,
    excerpt,
    line_break_in,
)
from image_tfrecords.core.storage import storage

DISCARD = "discard"  # TFRecorder's split value for rows to leave out
DEFAULT_SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
# --split_column's value for "no split column": every row's split from the hash.
NO_SPLIT_COLUMN = "none"
DEAD_LETTERS = "dead_letters"
DISCARDED = "discarded"  # ReadManifest's output of DiscardedRows


@dataclasses.dataclass(frozen=True)
class RowRules:
    """How rows are read: split fractions for rows without one, and what a row labels.

    label_mode "multi": every non-empty field after the URI of a headerless row is a
    label (AutoML's `split,uri,label1,label2,...`), and any label field may also hold
    several labels joined by `label_separator` (None: a field is one label, as the
    launcher samples them to choose the separator).
    label_mode "detection": a row is one bounding box (AutoML's
    `split,uri,label,x_min,y_min,,,x_max,y_max,,` or four vertices), see parse_box.
    """

    split_fractions: tuple[float, float, float] = DEFAULT_SPLIT_FRACTIONS
    label_mode: LabelMode = LabelMode.SINGLE
    label_separator: str | None = DEFAULT_LABEL_SEPARATOR
    extra_columns: tuple[ExtraColumn, ...] = ()  # from --schema; need a header
    # --image_dir: relative image names are relative to it instead of the manifest's folder.
    image_dir: str | None = None
    # --uri_column / --label_column: header names that override the known ones
    uri_column: str | None = None
    label_column: str | None = None
    # --split_column: the header's column holding the split (it overrides the known
    # names), or NO_SPLIT_COLUMN: none, every row split by hash; None: the known names.
    split_column: str | None = None
    # --leave_out: annotations the input may hold that the examples are written without
    leave_out: frozenset[LeftOut] = frozenset()
    # --allow_paths_outside_dataset: annotation files may name images and label files
    # outside their dataset's folder (core/inputs/dataset_root.py).
    allow_paths_outside_dataset: bool = False
    # --max_image_pixels: the largest image size an annotation may declare (its masks are
    # drawn on it as it is read).
    max_pixels: int = ImageSettings.max_pixels
    # --split_plan: a file of each image's split (core/records/split_plan.py), which every
    # row of the image takes over any split written or hashed; None: no plan.
    split_plan: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "label_mode", LabelMode(self.label_mode))
        object.__setattr__(self, "leave_out", frozenset(map(LeftOut, self.leave_out)))

    @property
    def names_columns(self) -> bool:
        """Whether options name a header's columns (so the first row is a header)."""
        return bool(
            self.uri_column or self.label_column or self.split_column not in (None, NO_SPLIT_COLUMN)
        )

    @property
    def ignores_split_column(self) -> bool:
        return self.split_column == NO_SPLIT_COLUMN

    @property
    def multi_label(self) -> bool:
        return self.label_mode is LabelMode.MULTI

    @property
    def detection(self) -> bool:
        return self.label_mode is LabelMode.DETECTION


class ManifestError(ValueError):
    """A manifest that cannot be read at all (as opposed to a bad row in it)."""


class DiscardedRow(NamedTuple):
    """A row read and left out on purpose, counted apart from dead letters: a row whose
    split is DISCARD, or (with `shape`) an object of a shape the examples cannot hold."""

    manifest: str
    line: int
    # The left-out object's shape as its source names it (CVAT's "polyline", LabelMe's
    # "linestrip"...); empty for a DISCARD row.
    shape: str = ""


def left_out(row: ManifestRow, shape: str) -> DiscardedRow:
    """An object of a shape the Object Detection API's examples cannot hold (a line, points,
    a cuboid...): left out by itself, so its image is written with its other objects, and
    counted by shape in summary.json's objects_left_out. One object is one row, so it is a
    row discarded on purpose: rows read = in examples + dead-lettered + discarded holds."""
    return DiscardedRow(row.manifest, row.line, shape)


# What reading a manifest yields for each row.
ManifestItem = ManifestRow | DeadLetter | DiscardedRow


def image_folder(path: str, rules: RowRules) -> str:
    """What relative image names in the manifest at `path` are relative to."""
    return rules.image_dir or storage.split(path)[0]


def folder_split(path: str) -> str | None:
    """The split the folder holding the file at `path` names (`train/`, Roboflow's `valid/`,
    Hugging Face's `validation/`), or None."""
    return normalise_split(storage.split(storage.split(path)[0])[1])


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
    """posixpath.normpath of a local path, or of a bucket URL's path after scheme://bucket/.
    An http(s) URL is kept as written: its server, not a file system, says what its path
    and query name."""
    scheme, separator, rest = uri.partition("://")
    if not separator:
        return _normpath(uri)
    if scheme.lower() in ("http", "https"):
        return uri
    bucket, slash, path = rest.partition("/")
    if not path:
        return uri
    # Rooted, so ".." cannot climb above the bucket.
    return f"{scheme}://{bucket}{slash}{_normpath('/' + path)[1:]}"


def _normpath(path: str) -> str:
    # normpath keeps exactly two leading slashes (POSIX leaves their meaning open); on
    # Linux and in buckets they mean one.
    return posixpath.normpath("/" + path.lstrip("/") if path.startswith("//") else path)


def rejecter(manifest: str, line: int, raw: str, where: str = "") -> Callable[..., DeadLetter]:
    """reject(reason, message, uri="", split="") for one row; `where` starts the message."""

    def reject(reason: str, message: str, uri: str = "", split: str = "") -> DeadLetter:
        return DeadLetter(manifest, line, printable(raw), uri, split, reason, where + message)

    return reject


def is_split_value(field: str) -> bool:
    """Whether a headerless row's first field is a split column (not an image URI)."""
    return normalise_split(field) is not None or field.strip().lower() in (
        "",
        "unassigned",
        DISCARD,
    )


def row_split(written: str, uri: str, rules: RowRules, forced: str | None = None) -> str | None:
    """The row's split: `forced` (--manifest SPLIT=PATH) or one assigned when UNASSIGNED
    or empty; None when it is invalid or disagrees with `forced`."""
    split = normalise_split(written)
    if split is None and written.strip().lower() in ("", "unassigned"):
        return forced or assign_split(uri, rules.split_fractions)
    if split is not None and forced in (None, split):
        return split
    return None


def invalid_split(written: str, forced: str | None = None) -> str:
    if forced and normalise_split(written):
        return (
            f"split {written!r} disagrees with the {forced.upper()} that --manifest "
            f"{forced.upper()}=PATH gives every row of this file"
        )
    # The common names only (core/records/splits.py SPLIT_NAMES has them all): the golden
    # outputs' dead letters hold this text.
    return (
        f"split {written!r} is not one of TRAIN, VALIDATION (or VAL, VALID, EVAL, DEV), "
        "TEST, UNASSIGNED or DISCARD"
    )


def json_id(entry: dict, key: str) -> object:
    """The id an entry gives under `key`, to look up: a list or an object (which cannot
    be a dict's key) is no id, None, so the entry names nothing."""
    found = entry.get(key)
    return None if isinstance(found, (list, dict)) else found


def json_text(value: object) -> str:
    return "" if value is None else str(value).strip()


_UNDECODABLE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of bad bytes


def has_undecodable_bytes(text: str) -> bool:
    return _UNDECODABLE.search(text) is not None


def printable(raw: str) -> str:
    """Undecodable bytes as \\xNN escapes, so the dead letter itself is valid UTF-8."""
    return raw.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def labels_checked(items: Iterable[ManifestItem], rules: RowRules) -> Iterator[ManifestItem]:
    """`items` with every row whose labels cannot be written a dead letter instead (see
    labels_problem): one check for every input format."""
    for item in items:
        problem = isinstance(item, ManifestRow) and labels_problem(item.labels, rules.multi_label)
        yield item.dead_letter(*problem) if problem else item


def label_problem(label: str) -> tuple[str, str] | None:
    """(dead-letter reason, message) where `label` (or a declared class name) cannot be
    one; None where it can."""
    if len(label) > MAX_LABEL_CHARS:
        return reasons.TEXT_TOO_LONG, (
            f"a label of {len(label):,} characters, over the "
            f"limit of {MAX_LABEL_CHARS:,}: {excerpt(label)!r}"
        )
    breaking = line_break_in(label)
    if breaking:
        return reasons.LABEL_BREAKS_LINES, (
            f"label {label!r} holds {breaking}: the vocabulary file holds a label a line, "
            "so no label can break lines"
        )
    return None


def labels_problem(labels: Sequence[str], per_row_limit: bool) -> tuple[str, str] | None:
    """(dead-letter reason, message) where a row's `labels` cannot be written, or None;
    `per_row_limit`: whether MAX_LABELS_PER_ROW applies (--label_mode multi)."""
    if per_row_limit and len(labels) > MAX_LABELS_PER_ROW:
        return reasons.TOO_MANY_LABELS, (
            f"{len(labels):,} labels in one row, over the limit of {MAX_LABELS_PER_ROW:,}"
        )
    return next(filter(None, map(label_problem, dict.fromkeys(labels))), None)


class ImageEntries:
    """The images a file has listed so far, by split: in a format that lists an image
    once with all its objects (COCO, CVAT, Label Studio, Hugging Face), a second entry
    for the same image and split would add its objects again to the one example."""

    def __init__(self) -> None:
        self._first: dict[tuple[str, str], str] = {}

    def repeated(self, image: ManifestRow, where: str) -> DeadLetter | None:
        """None for the image's first entry in its split; for a later one, a dead letter
        naming the first (`where`: how the file names an entry, e.g. "line 3")."""
        first = self._first.setdefault((image.split, image.uri), where)
        if first == where:
            return None
        return image.dead_letter(
            reasons.DUPLICATE_ROW,
            f"{where}: the same image as {first} "
            f"in {image.split}; its objects are read from there once",
        )
