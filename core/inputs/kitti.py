"""KITTI object detection labels: the benchmark's `training/label_2/<id>.txt`, one file per
image of `training/image_2/<id>.png`, a line per object:

    type truncated occluded alpha left top right bottom height width length x y z rot_y [score]

Read as the Object Detection API's create_kitti_tf_record.py reads it: the label is the
type lower-cased (`car`, `pedestrian`, `person_sitting`...), the box is left, top, right,
bottom in pixels of the image's own size (the file does not declare it: the shard writer
divides by it, as the script divides by the decoded image's), `truncated` is written
(1 where the file's fraction is above 0, as datumaro reads it: image/object/truncated is
the int64 flag VOC's <truncated> fills). `DontCare` lines mark regions nobody labelled,
not objects: they are left out and counted in the console. Not kept: occluded, alpha,
the 3D box and a results file's score. An empty label file (or one of DontCare lines
only) is an image without objects.

The user names the label files: `--manifest ROOT/training/label_2` (or ROOT, or
ROOT/training), a glob of them, or one file. The images are the sibling `image_2` folder
(a file of any image suffix with the label file's name), or --image_dir; a link there
leading out of that folder is path_outside_dataset (core/inputs/dataset_root.py). KITTI's
training set declares no splits and no class list: each image gets the --manifest
SPLIT=PATH split or one from a hash of its name; the ids are the run's, unless a
datumaro export's `dataset_meta.json` (its `label_map`, id -> type) stands in the KITTI
root, which then declares them (lower-cased, as the labels are). Listed with
Beam's FileSystems.match, so read in the pipeline's process, one file after another.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from image_tfrecords.core.inputs.dataset_root import DatasetRoot
from image_tfrecords.core.inputs.input_format import DeclaredClasses, FileHead, InputFormat, is_glob
from image_tfrecords.core.inputs.lines import LongLine, numbered_lines, short_lines
from image_tfrecords.core.inputs.rows import (
    ManifestError,
    RowRules,
    assign_split,
    has_undecodable_bytes,
    printable,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.documents import load_json
from image_tfrecords.core.records.records import Box, ManifestRow
from image_tfrecords.core.storage import storage

LABELS = "label_2"
IMAGES = "image_2"
_DONT_CARE = "dontcare"
_DATUMARO_META = "dataset_meta.json"  # datumaro's class list, in the root it exports
_FILES_SNIFFED = 20  # label files read to tell KITTI's (empty ones say nothing)
_FIELDS = (15, 16)  # the 16th is a detector's score, in results files
# What datumaro's find_images reads in image_2 (KITTI's own are PNGs).
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


def is_kitti_line(line: str) -> bool:
    """Whether a line has KITTI's shape: a type, then 14 or 15 numbers."""
    fields = line.split()
    if len(fields) not in _FIELDS or _is_number(fields[0]):
        return False
    return all(_is_number(field) for field in fields[1:])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _first_file_is_kitti(pattern: str) -> bool:
    """Whether the first non-empty file of a few `pattern` matches starts with a KITTI
    line (an empty label file, an image without objects, says nothing)."""
    for metadata in storage.match(pattern, limit=_FILES_SNIFFED):
        for _, line in short_lines(metadata.path):
            return is_kitti_line(line)
    return False


def kitti_glob(path: str, chosen: bool = False) -> str | None:
    """The KITTI label files `path` names as one source: a glob of .txt files, a folder
    of them (`label_2`), or a KITTI root holding `label_2` or `training/label_2`; None
    for anything else (one file is sniffed as any other). `chosen` (--input_format
    kitti): the files are not sniffed."""
    if is_glob(path):
        candidates = [path] if chosen or path.lower().endswith(".txt") else []
    elif path.lower().endswith(".txt") or not _is_folder(path):
        return None
    else:
        candidates = [
            storage.join(path, *below, "*.txt") for below in ((), (LABELS,), ("training", LABELS))
        ]
    for pattern in candidates:
        if storage.match(pattern, limit=1) and (chosen or _first_file_is_kitti(pattern)):
            return pattern
    return None


def _is_folder(path: str) -> bool:
    return bool(storage.match(storage.join(path, "**"), limit=1))


def kitti_labels_beside(root: str) -> str | None:
    """The KITTI label folder of an image folder given to --image_folder: ROOT/label_2,
    ROOT/training/label_2, or for ROOT an `image_2` folder its sibling `label_2`."""
    root = root.rstrip("/")
    parent, name = storage.split(root)
    candidates = [storage.join(root, LABELS), storage.join(root, "training", LABELS)]
    if name == IMAGES:
        candidates.append(storage.join(parent, LABELS))
    for labels in candidates:
        if kitti_glob(labels):
            return labels
    return None


def read_kitti(
    pattern: str, rules: RowRules, split: str | None
) -> Iterator[ManifestRow | DeadLetter]:
    """A row per object line of every label file `pattern` matches, in path order (a file
    without objects: an image without objects); a DeadLetter per line that cannot be one."""
    images: dict[str, dict[str, str]] = {}  # image folder -> {name without suffix: path}
    dont_care = 0
    for metadata in sorted(storage.match(pattern), key=lambda found: found.path):
        folder, name = storage.split(metadata.path)
        image_folder = rules.image_dir or _image_folder(folder)
        if image_folder not in images:
            images[image_folder] = _list_images(image_folder)
        stem = name.rsplit(".", 1)[0]
        uri = images[image_folder].get(stem, storage.join(image_folder, f"{stem}.png"))
        image = ManifestRow(
            metadata.path,
            0,
            "",
            split or assign_split(storage.split(uri)[1], rules.split_fractions),
            uri,
            (),
            boxes_in_pixels=True,
        )
        # Named by the label file's name, the image is in its folder unless a link leads out.
        outside = DatasetRoot(image_folder, rules.allow_paths_outside_dataset).outside(
            uri, f"the image {stem!r} of the label file"
        )
        if outside:
            yield image.dead_letter(*outside)
            continue
        objects = 0
        for line, raw in numbered_lines(metadata.path):
            row = (
                raw.dead_letter(metadata.path, line, image.split, uri)
                if isinstance(raw, LongLine)
                else _object_row(image._replace(line=line, raw=printable(raw)), raw)
            )
            if row is None:
                dont_care += 1
                continue
            objects += 1
            yield row
        if not objects:
            yield image
    if dont_care:
        logging.warning(
            "%s: %d DontCare regions (areas nobody labelled, not objects) were left out",
            pattern,
            dont_care,
        )


def _image_folder(label_folder: str) -> str:
    """`image_2` beside a `label_2` folder; the label folder itself otherwise."""
    parent, name = storage.split(label_folder)
    return storage.join(parent, IMAGES) if name == LABELS else label_folder


def _list_images(folder: str) -> dict[str, str]:
    """The folder's images by name without suffix: listed once, not looked up per file."""
    found: dict[str, list[str]] = {}
    for metadata in storage.match(storage.join(folder, "*")):
        stem, dot, suffix = storage.split(metadata.path)[1].rpartition(".")
        if dot and f".{suffix.lower()}" in _IMAGE_SUFFIXES:
            found.setdefault(stem, []).append(metadata.path)
    # Where two files share a name (000001.png, 000001.jpg), KITTI's own PNG, then in
    # _IMAGE_SUFFIXES' order.
    return {stem: min(paths, key=_suffix_rank) for stem, paths in found.items()}


def _suffix_rank(path: str) -> int:
    return _IMAGE_SUFFIXES.index("." + path.rsplit(".", 1)[1].lower())


def _object_row(row: ManifestRow, raw: str) -> ManifestRow | DeadLetter | None:
    """The line's object, a DeadLetter saying why it cannot be one, or None for DontCare."""
    if has_undecodable_bytes(raw):
        return row.dead_letter(reasons.INVALID_ENCODING, "the line is not valid UTF-8")
    fields = raw.split()
    if len(fields) not in _FIELDS:
        return row.dead_letter(
            reasons.WRONG_COLUMN_COUNT,
            "expected 15 fields (type "
            "truncated occluded alpha left top right bottom, then the 3D "
            f"box) or 16 (and a score), found {len(fields)}",
        )
    label = fields[0].lower()
    if label == _DONT_CARE:
        return None
    try:
        truncated, left, top, right, bottom = (float(fields[index]) for index in (1, 4, 5, 6, 7))
    except ValueError:
        return row.dead_letter(
            reasons.MALFORMED_ROW,
            f"truncated and the box (fields 2 and 5 to 8) must be numbers: {raw!r}",
        )
    # Checked against the image's own size by the shard writer; here only the shape.
    if not (0 <= left < right and 0 <= top < bottom):  # also false for NaN
        return row.dead_letter(
            reasons.EMPTY_BOX if left >= right or top >= bottom else reasons.INVALID_BOX,
            f"left must be below right and top below bottom, from 0: {' '.join(fields[4:8])}",
        )
    return row._replace(
        labels=(label,), boxes=(Box(left, top, right, bottom, truncated=int(truncated > 0)),)
    )


def datumaro_classes(pattern: str) -> DeclaredClasses | None:
    """The classes datumaro's `dataset_meta.json` declares in the KITTI root of the label
    files `pattern` matches (ROOT/training/label_2/*.txt): `label_map`, "0" to "n-1"
    -> the type; None where there is no such file."""
    label_folder = storage.split(pattern)[0]
    root = storage.split(storage.split(label_folder)[0])[0]
    path = storage.join(root, _DATUMARO_META)
    if not storage.exists(path):
        return None
    try:
        with storage.open_read(path) as file:
            label_map = load_json(file.read()).get("label_map")
    except (OSError, ValueError, AttributeError) as error:
        raise ManifestError(f"{path}: cannot read datumaro's label_map: {error}") from error
    if not (
        isinstance(label_map, dict)
        and label_map
        and sorted(label_map) == sorted(map(str, range(len(label_map))))
    ):
        raise ManifestError(
            f"{path}: label_map must map the ids 0 to n-1 to types, found {label_map!r}"
        )
    labels = tuple(str(label_map[str(index)]).strip().lower() for index in range(len(label_map)))
    if len(set(labels)) != len(labels) or not all(labels):
        raise ManifestError(
            f"{path}: label_map names a type twice (in any case) or none: {list(labels)}"
        )
    return DeclaredClasses(f"{path} (label_map)", labels)


class KittiFormat(InputFormat):
    """A glob of label files (kitti_glob: a folder, a KITTI root), or one file."""

    name = "kitti"
    title = "KITTI object labels"
    suffixes = (".txt",)
    in_worker = False
    boxes_only = True

    def recognises(self, head: FileHead) -> bool:
        line = next(
            (line for line in head.data.decode("utf-8", "replace").splitlines() if line.strip()), ""
        )
        return is_kitti_line(line)

    def annotation_glob(self, path: str, chosen: bool) -> str | None:
        return kitti_glob(path, chosen)

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        if not storage.match(source.path, limit=1):
            raise ManifestError(f"no KITTI label files at {source.path}")
        datumaro_classes(source.path)  # refused here, not in the job, where it is unreadable
        if source.split is None:
            logging.warning(
                "%s: KITTI declares no splits: each image gets one from a hash of "
                "its name (--split_fractions), or pass --manifest SPLIT=PATH",
                source.path,
            )

    def declared_classes(self, source: ManifestSource) -> DeclaredClasses | None:
        return datumaro_classes(source.path)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return read_kitti(source.path, rules, source.split)
