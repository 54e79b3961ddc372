"""Hugging Face `imagefolder` metadata: a `metadata.jsonl` (or `metadata.csv`) beside the
images, a line per image, `file_name` relative to the metadata's folder (or --image_dir)
and inside it (core/inputs/dataset_root.py).

Rows: with --label_mode single or multi, one per line, its labels the `label` (or
`labels`, a list) field; with detection, one per object of `objects` (the layout of the
datasets library's object-detection guide: `bbox`, a list of COCO-style [x, y, width,
height] in pixels, and `categories`, or `category`, one per box, names or class ids),
the boxes divided by the line's `width` and `height` where it has them, else by the
image's own size once the shard writer has read it. Class ids stay ids as text ("0",
"1"): pin their order with --vocabulary. The split is the metadata's folder where that is
a split name (`train/metadata.jsonl`, as the datasets library reads it), else --manifest
SPLIT=PATH or a hashed one. A line naming an image an earlier line named is a
duplicate_row. A file is read whole by one worker process.

A folder (--manifest FOLDER or --image_folder FOLDER) is a Hugging Face imagefolder
where it holds `metadata.jsonl` or `metadata.csv` files, at its root or in its split
folders (HfMetadataFormat.folder_reading). The datasets library's folder_based_builder
reads every metadata file among a split's files, and then takes the labels from the
metadata, not from the folder names; its split folders are `train/`, `validation/`,
`test/` (or another split keyword, core/records/splits.py), maybe under `data/`. Read as those
metadata files, each with the split of its folder. An image that no metadata file names
is not read (its label would be the metadata's); the console says how many there are,
and the first few.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import yaml

from image_tfrecords.core.inputs.boxes import box_row, declared_size, pixel_box
from image_tfrecords.core.inputs.dataset_root import DatasetRoot, quoted
from image_tfrecords.core.inputs.folder import IMAGE_EXTENSIONS
from image_tfrecords.core.inputs.input_format import (
    DeclaredClasses,
    FileHead,
    FolderReading,
    InputFormat,
    plain_name,
)
from image_tfrecords.core.inputs.lines import LongLine, numbered_lines, whole_lines
from image_tfrecords.core.inputs.rows import (
    ImageEntries,
    ManifestError,
    RowRules,
    folder_split,
    has_undecodable_bytes,
    json_text,
    normalise_path,
    printable,
    rejecter,
    resolve_uri,
    row_split,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.documents import load_json, load_yaml
from image_tfrecords.core.records.records import Box, ManifestRow
from image_tfrecords.core.records.splits import normalise_split
from image_tfrecords.core.storage import storage

_FILE_NAME = "file_name"
_METADATA_FILES = ("metadata.jsonl", "metadata.csv")
# The datasets library reads these too; this converter does not.
_UNREAD_METADATA_FILES = ("metadata.parquet",)
# The images not in a metadata file that the console names (it counts them all).
_UNLISTED_SHOWN = 3
_LABEL_KEYS = ("label", "labels")
# The features whose class_label names are the classes: the label, or each object's.
_CLASS_FEATURES = (*_LABEL_KEYS, "category", "categories")
_DATASET_CARD = "README.md"
_CARD_FOLDERS_UP = 2  # train/metadata.jsonl, data/train/metadata.jsonl under the card


def read_metadata(
    path: str, rules: RowRules, split: str | None, lines: LineRange | None = None
) -> Iterator[ManifestRow | DeadLetter]:
    root = DatasetRoot.of(path, rules)
    split = split or folder_split(path)
    declared = declared_class_labels(path)
    classes = _ClassNames(declared.labels if declared else ())
    entries = ImageEntries()
    for line, raw, item in _metadata_items(path, lines):
        if isinstance(item, LongLine):
            yield item.dead_letter(path, line, split)
            continue
        reject = rejecter(path, line, raw)
        if has_undecodable_bytes(raw):
            yield reject(reasons.INVALID_ENCODING, "the line is not valid UTF-8")
            continue
        if isinstance(item, str):
            yield reject(reasons.MALFORMED_ROW, item)
            continue
        yield from _item_rows(
            path, line, printable(raw), item, root, rules, split, entries, classes
        )


def listed_images(path: str) -> set[str]:
    """The images a metadata file's lines name, as read_metadata resolves them (without
    --image_dir); lines it cannot read name none."""
    folder = storage.split(path)[0]
    return {
        resolve_uri(written, folder)
        for _, _, item in _metadata_items(path)
        if isinstance(item, dict) and (written := json_text(item.get(_FILE_NAME)))
    }


def _metadata_items(
    path: str, lines: LineRange | None = None
) -> Iterator[tuple[int, str, dict | str | LongLine]]:
    """(line, text, item) for each line of a metadata file, a metadata.csv's header left
    out; the item is why it cannot be read, where it cannot (a LongLine, with itself as
    its text, where it is too long to be read)."""
    csv_header = _csv_header(path) if _is_csv(path) else None
    for line, raw in numbered_lines(path, lines):
        if csv_header is not None and line == csv_header[0]:
            continue
        if isinstance(raw, LongLine):
            yield line, raw, raw
        else:
            yield line, raw, _csv_item(raw, csv_header[1]) if csv_header else _json_item(raw)


class _ClassNames:
    """The declared class names (none: every value is its own label), and what a value
    names: itself where it is a declared name, else a whole number's class (str2int)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names
        self._declared = frozenset(names)

    def label(self, value: object) -> str:
        text = json_text(value)
        if not self._names or text in self._declared or not text.isdigit():
            return text
        index = int(text)
        return self._names[index] if index < len(self._names) else text


def _item_rows(
    path: str,
    line: int,
    raw: str,
    item: dict,
    root: DatasetRoot,
    rules: RowRules,
    forced: str | None,
    entries: ImageEntries,
    classes: _ClassNames,
) -> Iterator[ManifestRow | DeadLetter]:
    reject = rejecter(path, line, raw)
    written = json_text(item.get(_FILE_NAME))
    if not written:
        yield reject(reasons.MISSING_URI, f"{_FILE_NAME} is missing or empty")
        return
    split = row_split("", written, rules, forced)
    image = ManifestRow(path, line, raw, split, root.resolve(written), (), listed_whole=True)
    outside = root.outside(image.uri, f"{_FILE_NAME} {quoted(written)}")
    if outside:
        yield image.dead_letter(*outside)
        return
    repeated = entries.repeated(image, f"line {line}")
    if repeated:
        yield repeated
        return
    if not rules.detection:
        yield _labelled(image, item, rules, classes)
        return
    objects = item.get("objects")
    if isinstance(objects, str):  # metadata.csv holds it as JSON text
        try:
            objects = load_json(objects)
        except ValueError:
            objects = None
    if not isinstance(objects, dict):
        yield image.dead_letter(
            reasons.MALFORMED_ROW, "objects must be a JSON object of bbox and categories lists"
        )
        return
    boxes = objects.get("bbox") or []
    names = objects.get("categories", objects.get("category")) or []
    if not (isinstance(boxes, list) and isinstance(names, list)) or len(boxes) != len(names):
        yield image.dead_letter(
            reasons.MALFORMED_ROW,
            f"objects holds {_count(boxes)} bbox "
            f"and {_count(names)} categories: one each per object",
        )
        return
    size = None
    if item.get("width") is not None or item.get("height") is not None:
        size = declared_size(item.get("width"), item.get("height"))
        if not isinstance(size[0], int):
            yield image.dead_letter(*size)
            return
    image = image._replace(image_size=size, boxes_in_pixels=size is None)
    if not boxes:
        yield image  # an image without objects
    for index, (bbox, name) in enumerate(zip(boxes, names, strict=True)):
        yield _object_row(image, index, bbox, classes.label(name), size)


def _object_row(
    image: ManifestRow, index: int, bbox: object, label: str, size: tuple[int, int] | None
) -> ManifestRow | DeadLetter:
    where = f"objects[{index}]: "

    def reject(reason: str, message: str, **_: str) -> DeadLetter:
        return image.dead_letter(reason, where + message)

    if not (
        isinstance(bbox, list)
        and len(bbox) == 4
        and all(isinstance(value, (int, float)) for value in bbox)
    ):
        return reject(
            reasons.INVALID_BOX, f"bbox must be [x, y, width, height] in pixels, found {bbox!r}"
        )
    x, y, width, height = bbox
    corners = [x, y, x + width, y + height]
    if size is not None:
        return box_row(image, label, True, lambda: pixel_box(corners, size), reject)
    # Checked against the image's own size by the shard writer; here only the shape.
    if not (0 <= x and 0 <= y and width > 0 and height > 0):
        return reject(
            reasons.INVALID_BOX if min(width, height) > 0 else reasons.EMPTY_BOX,
            f"bbox {bbox} must start inside the image and have a width and height",
        )
    return box_row(image, label, True, lambda: Box(*map(float, corners)), reject)


def _labelled(
    image: ManifestRow, item: dict, rules: RowRules, classes: _ClassNames
) -> ManifestRow | DeadLetter:
    value = next((item[key] for key in _LABEL_KEYS if key in item), None)
    labels = tuple(
        dict.fromkeys(
            text
            for each in (value if isinstance(value, list) else [value])
            if (text := classes.label(each))
        )
    )
    if not labels:
        return image.dead_letter(
            reasons.MISSING_LABEL,
            "no label (or labels) field"
            + (
                "; its objects are boxes: pass --label_mode detection"
                if item.get("objects")
                else ""
            ),
        )
    if len(labels) > 1 and rules.label_mode is LabelMode.SINGLE:
        return image.dead_letter(
            reasons.MULTIPLE_LABELS,
            f"{len(labels)} labels; pass --label_mode multi to keep them all",
        )
    return image._replace(labels=labels)


def declared_class_labels(path: str) -> DeclaredClasses | None:
    """The class names the dataset card declares for the label or the objects' category
    (its YAML header's dataset_info features, a class_label's names); None where no card
    declares any. ManifestError for a card that declares two different lists."""
    for card in _dataset_cards(path):
        try:
            found = {
                names
                for name, names in _class_labels(_card_features(card))
                if name in _CLASS_FEATURES
            }
        except ManifestError as problem:
            raise ManifestError(f"{card}: {problem}") from None
        if len(found) > 1:
            raise ManifestError(
                f"{card}: dataset_info declares several class_label lists "
                f"({'; '.join(', '.join(names) for names in sorted(found))})"
            )
        if found:
            return DeclaredClasses(f"{card} (dataset_info class_label)", found.pop())
    return None


def _dataset_cards(path: str) -> Iterator[str]:
    """The README.md files in the metadata's folder and up to _CARD_FOLDERS_UP above."""
    folder = storage.split(path)[0]
    for _ in range(_CARD_FOLDERS_UP + 1):
        card = storage.join(folder, _DATASET_CARD)
        if storage.exists(card):
            yield card
        parent = storage.split(folder)[0]
        if parent in ("", folder):
            return
        folder = parent


def _card_features(card: str) -> list:
    """The features of the card's YAML header (`---` lines around it): dataset_info's, or
    each config's where dataset_info is a list of configs."""
    with storage.open_read(card) as file:
        text = file.read().decode("utf-8-sig")
    header, marker, _ = text.removeprefix("---\n").partition("\n---")
    if not text.startswith("---\n") or not marker:
        return []
    try:
        info = (load_yaml(header) or {}).get("dataset_info")
    except (yaml.YAMLError, AttributeError) as error:
        raise ManifestError(f"cannot read its YAML header: {error}") from None
    configs = info if isinstance(info, list) else [info]
    return [
        feature
        for config in configs
        if isinstance(config, dict)
        for feature in config.get("features") or []
    ]


def _class_labels(features: object, name: str = "") -> Iterator[tuple[str, tuple[str, ...]]]:
    """(feature name, its class names) for each class_label in features, nested ones
    (an objects sequence or struct's category) included."""
    if isinstance(features, list):
        for feature in features:
            yield from _class_labels(feature, name)
    elif isinstance(features, dict):
        name = str(features.get("name", name))
        dtype = features.get("dtype")
        class_label = (dtype if isinstance(dtype, dict) else features).get("class_label")
        if isinstance(class_label, dict) and class_label.get("names"):
            yield name, _names(class_label["names"])
        for key in ("sequence", "struct", "list", "feature"):
            if key in features:
                yield from _class_labels(features[key], name)


def _names(written: object) -> tuple[str, ...]:
    """class_label names: a list, or a mapping of the ids 0 to n - 1 to names ("0": cat)."""
    if isinstance(written, dict):
        ids = {int(key): name for key, name in written.items() if str(key).isdigit()}
        if sorted(ids) != list(range(len(written))):
            raise ManifestError(
                f"class_label names must be keyed by the ids 0 to "
                f"{len(written) - 1}, found {list(written)}"
            )
        written = [ids[key] for key in range(len(ids))]
    return tuple(str(name).strip() for name in written)


def _json_item(raw: str) -> dict | str:
    try:
        item = load_json(raw)
    except ValueError as error:
        return f"cannot parse the line as JSON: {error}"
    return item if isinstance(item, dict) else "expected a JSON object"


def _is_csv(path: str) -> bool:
    return path.lower().removesuffix(".gz").endswith(".csv")


def _csv_header(path: str) -> tuple[int, list[str]]:
    """(its line, its column names): the first line of a metadata.csv."""
    for line, raw in whole_lines(path):
        return line, [name.strip() for name in next(csv.reader([raw]))]
    raise ManifestError(f"{path} is empty")


def _csv_item(raw: str, header: list[str]) -> dict | str:
    try:
        fields = next(csv.reader(io.StringIO(raw), strict=True))
    except csv.Error as error:
        return f"cannot parse the row as CSV: {error}"
    if len(fields) != len(header):
        return f"expected {len(header)} fields, found {len(fields)}"
    return dict(zip(header, fields, strict=True))


def _count(value: object) -> int | str:
    return len(value) if isinstance(value, list) else "no list of"


def _imagefolder_reading(root: str, relatives: list[str]) -> FolderReading | None:
    metadata = [relative for relative in relatives if plain_name(relative) in _METADATA_FILES]
    unread = [relative for relative in relatives if plain_name(relative) in _UNREAD_METADATA_FILES]
    if unread and not metadata:
        raise ManifestError(
            f"{root} is a Hugging Face imagefolder whose metadata is "
            f"{unread[0]}, which is not read: write it as metadata.jsonl"
        )
    if not metadata:
        return None
    kinds = sorted({plain_name(relative) for relative in metadata})
    if len(kinds) > 1:  # the datasets library refuses this too
        raise ManifestError(
            f"{root} is a Hugging Face imagefolder with both {kinds[0]} and "
            f"{kinds[1]} files: keep one kind"
        )
    sources = tuple(
        ManifestSource(
            storage.join(root, relative), HfMetadataFormat.name, _metadata_split(root, relative)
        )
        for relative in metadata
    )
    return FolderReading(
        sources,
        f"reading {root} as a Hugging Face imagefolder: its "
        f"{kinds[0]} ({_splits_said(root, sources)})",
        _unlisted_images_said(root, relatives, sources),
    )


def _unlisted_images_said(
    root: str, relatives: list[str], sources: tuple[ManifestSource, ...]
) -> tuple[str, ...]:
    """The console's line on the images under `root` that no metadata file names: they
    are not read, so a user who added images without metadata lines learns it."""
    listed = set().union(*(listed_images(source.path) for source in sources))
    images = (
        normalise_path(storage.join(root, relative))
        for relative in relatives
        if relative.lower().endswith(IMAGE_EXTENSIONS)
    )
    unlisted = [image for image in images if image not in listed]
    if not unlisted:
        return ()
    first = ", ".join(unlisted[:_UNLISTED_SHOWN]) + (
        ", ..." if len(unlisted) > _UNLISTED_SHOWN else ""
    )
    many = len(unlisted) != 1
    return (
        f"{len(unlisted)} image{'s' * many} under {root} {'are' if many else 'is'} in "
        f"no metadata file and {'were' if many else 'was'} not read: {first}",
    )


def _metadata_split(root: str, relative: str) -> str | None:
    """The split of the folders a metadata file is in: the first of them named like a
    split (`train/`, `data/train/`, as the datasets library's `**/train/**` patterns find
    them), or for one at the root the root's own name (`--image_folder ds/train`); None
    (a split per row, by hash) where none is."""
    folders = relative.split("/")[:-1] or [storage.split(root)[1]]
    return next((split for folder in folders if (split := normalise_split(folder))), None)


def _splits_said(root: str, sources: tuple[ManifestSource, ...]) -> str:
    return ", ".join(
        f"{source.path[len(root) + 1 :]} as "
        + (
            source.split.upper()
            if source.split
            else "splits drawn by a hash of each image (it is in no split folder)"
        )
        for source in sources
    )


class HfMetadataFormat(InputFormat):
    name = "hf_imagefolder"
    title = "a Hugging Face imagefolder metadata file"
    suffixes = _METADATA_FILES
    # Read whole, by one worker: a line naming an image that an earlier line named is a
    # duplicate, wherever in the file it is.
    cuts_by_lines = False

    def recognises(self, head: FileHead) -> bool:
        item = head.first_line_object
        return item is not None and _FILE_NAME in item

    def folder_reading(self, root: str, relatives: list[str]) -> FolderReading | None:
        return _imagefolder_reading(root.rstrip("/"), relatives)

    def declared_classes(self, source: ManifestSource) -> DeclaredClasses | None:
        return declared_class_labels(source.path)

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        if _is_csv(source.path):
            fields = _csv_header(source.path)[1]
            if _FILE_NAME not in fields:
                raise ManifestError(
                    f"{source.path}: a Hugging Face metadata.csv needs a "
                    f"{_FILE_NAME} column; for another CSV pass --input_format csv"
                )
        else:
            fields = list(FileHead.read(source.path).first_line_object or {})
        if not rules.detection and "objects" in fields and not set(_LABEL_KEYS) & set(fields):
            # Else every row would be missing_label, and the run fail wanting TRAIN rows.
            raise ManifestError(
                f"{source.path} holds objects (boxes) and no label or labels: pass "
                "--label_mode detection"
            )

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return read_metadata(source.path, rules, source.split, lines)
