"""Ultralytics YOLO datasets (detect, segment, pose, OBB), read from their `data.yaml`,
and YOLO folders whose classes a `classes.txt` names instead.

The layout is Ultralytics' own (ultralytics/data/utils.py, check_det_dataset and
img2label_paths):
- `data.yaml`: `names` (a list, or a dict of class id -> name; without it `nc` classes
  named class_0...), `path` (the root: absolute, or relative to the YAML's folder, or
  where it is not there, to the current directory, as check_det_dataset reads it; absent,
  the YAML's folder), and `train`/`val`/`test`, each a folder of images, a .txt
  list of image paths, or a list of those; `val` and `test` are optional. An entry that
  is not there and starts with `../` is also looked for without it, as Ultralytics does
  for Roboflow's exports. `kpt_shape: [K, 2 or 3]` makes it a pose dataset.
- An image's labels are the .txt at its path with the last `/images/` made `/labels/`;
  an image without one is an image without objects.
- A label line is `class cx cy w h` (a box, normalised to the image size), `class x1 y1 x2
  y2 ...` (a polygon: segmentation, or OBB's four corners, which the file does not tell
  apart), or with kpt_shape `class cx cy w h` then K keypoints.
- Without a data.yaml, a `classes.txt` names the classes, line i class id i: Label
  Studio's YOLO export (`classes.txt`, `notes.json`, `images/`, `labels/`), labelImg's
  (classes.txt in its labels folder, or beside the images and their .txt files), and
  Roboflow-style folders. The source is then the classes.txt (found where it stands by
  --manifest FOLDER or --image_folder FOLDER: YoloFormat.folder_reading), the root
  the folder holding it (its parent where that folder is `labels/`), and the splits the
  folders under the root: `images/<split>/` (labels in `labels/<split>/`) or
  `<split>/images/`, a split named as core/records/splits.py reads it; with none, every image
  under the root, each split assigned by a hash of its path as for UNASSIGNED rows.
- Darknet's `obj.data` (CVAT's "YOLO 1.1" export, datumaro's YOLO): `names` a class
  file (obj.names), `train`/`valid`/`test` .txt lists, each image's labels beside it;
  the paths are darknet's, from the folder above the dataset (YoloDataset.from_darknet).
  A folder holding obj.data is read as it.

Each line is one detection row: its box converted to the Object Detection API's
xmin/ymin/xmax/ymax (Ultralytics' xywhn2xyxy; a polygon's box is its points' extent, as
segments2boxes makes it). A polygon is also the object's mask; a pose line's keypoints
are written, named where the YAML's `kpt_names` names them. A box's corners up to 1% of
the image's side outside it are clipped to it, as Ultralytics accepts them
(verify_image_label's "1% tolerance") and clips boxes (Instances.clip); a polygon's
points (OBB corners included) are clipped wherever they lie while its extent's centre
and size are within that tolerance, which is what verify_image_label checks of a polygon
(its segments2boxes); farther out, the line is box_out_of_range. Clipped objects are
counted (Box.clipped: summary.json's objects_clipped).
Listed with Beam's FileSystems.match, so read in the pipeline's process, one label file
after another. `names` (or `nc`) declares the classes: YOLO id i is the vocabulary's id
i (declared_classes; pipeline/run.py pins them).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator

import yaml

from image_tfrecords.core.imaging.masks import MAX_KEYPOINTS
from image_tfrecords.core.inputs.boxes import clipped_box, extent, polygon_mask, with_mask
from image_tfrecords.core.inputs.dataset_root import OPTION, DatasetRoot, bounded, quoted
from image_tfrecords.core.inputs.folder import IMAGE_EXTENSIONS
from image_tfrecords.core.inputs.input_format import (
    DeclaredClasses,
    FolderReading,
    InputFormat,
    plain_name,
)
from image_tfrecords.core.inputs.lines import LongLine, numbered_lines, whole_lines
from image_tfrecords.core.inputs.rows import (
    ManifestError,
    RowRules,
    assign_split,
    has_undecodable_bytes,
    normalise_path,
    printable,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.choices import LeftOut
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.documents import load_yaml
from image_tfrecords.core.records.records import Box, Keypoints, ManifestRow
from image_tfrecords.core.records.splits import SPLITS, normalise_split
from image_tfrecords.core.storage import storage

# data.yaml's key for each split.
_SPLIT_KEYS = dict(zip(SPLITS, ("train", "val", "test"), strict=True))
# How far (a fraction of the image's side) a corner or polygon point may lie outside the
# image and be clipped to it: Ultralytics' own check allows 1% (ultralytics/data/utils.py,
# verify_image_label: coordinates within -0.01 and 1.01) before Instances.clip clips them.
_ULTRALYTICS_TOLERANCE = 0.01
CLASSES_FILE = "classes.txt"  # a YOLO folder's class names without a data.yaml
_DARKNET_SUFFIX = ".data"  # darknet's obj.data (CVAT's YOLO 1.1 export)
_DARKNET_FILE = "obj.data"
# obj.data's lines that are not an image list (darknet's own keys); every other line is a
# subset's list, its name the split (datumaro writes a CVAT project's subsets so:
# `Validation = data/Validation.txt`), as datumaro's YOLO importer reads them.
_DARKNET_SETTINGS = frozenset(
    {"classes", "names", "backup", "eval", "results", "map", "labels", "top"}
)
# Where a YOLO folder's classes.txt stands: its root (Label Studio's export, labelImg
# beside the images), or its labels folder (labelImg's save folder).
_CLASSES_FILE_PLACES = (CLASSES_FILE, f"labels/{CLASSES_FILE}")


def read_yolo(path: str, rules: RowRules, split: str | None) -> Iterator[ManifestRow | DeadLetter]:
    """A row per label line, and per image without one; a DeadLetter per line (or image)
    that cannot be one. With `split` (--manifest SPLIT=data.yaml) only that split's
    entry is read."""
    dataset = YoloDataset.load(path)
    home = dataset.home(rules)
    for split_name, images in dataset.images(home, split):
        seen: set[str] = set()
        labels = _LabelFolders()
        for image in images:
            if isinstance(image, DeadLetter):
                yield image._replace(split=split_name or "")
                continue
            if image in seen:
                yield DeadLetter.in_file(
                    path,
                    reasons.DUPLICATE_ROW,
                    f"the image is listed twice in {_SPLIT_KEYS[split_name]!r}; "
                    "its labels were read once",
                    raw=image,
                    uri=image,
                    split=split_name,
                )
                continue
            seen.add(image)
            image_split = split_name or assign_split(dataset.relative(image), rules.split_fractions)
            label_file = label_path(image)
            if not labels.holds(label_file):
                yield ManifestRow(path, 0, image, image_split, image, (), drawn_upright=True)
                continue
            outside = home.outside(  # a link leading out
                label_file, f"the label file {quoted(dataset.relative(label_file))}"
            )
            if outside:
                yield DeadLetter.in_file(path, *outside, raw=image, uri=image, split=image_split)
                continue
            yield from _label_rows(label_file, image, image_split, dataset, rules)


class YoloDataset:
    """data.yaml (or classes.txt), read: the class names, the root and the splits'
    entries."""

    def __init__(
        self,
        path: str,
        names: tuple[str, ...],
        root: str,
        entries: dict[str | None, list[str]],
        keypoints: tuple[int, int] | None,
        keypoint_names: dict[int, tuple[str, ...]],
        names_key: str = "names",
        folder: str | None = None,
        written_root: str = "",
        found_here: str | None = None,
        list_prefix: str = "",
    ) -> None:
        self.path = path
        self.names = names
        self.names_key = names_key  # where the names come from: "names", or "nc" alone
        self.root = root
        # What every path stays in (core/inputs/dataset_root.py): the YAML's folder, or
        # a classes.txt's root.
        self.folder = folder or root
        self.written_root = written_root  # `path` as the YAML writes it
        self.found_here = found_here  # what the console says of a root found in "."
        # split -> its entries, as written; None: a folder without splits (classes.txt's),
        # its images' splits assigned by hash.
        self.entries = entries
        self.keypoints = keypoints  # kpt_shape: (K, 2 or 3)
        self.keypoint_names = keypoint_names  # class id -> its K points' names, where known
        # Darknet's lists and obj.data name the root's files under the folder darknet keeps
        # the dataset in (`data/`): that prefix is the root (from_darknet).
        self.list_prefix = list_prefix

    @classmethod
    def load(cls, path: str) -> YoloDataset:
        if plain_name(path) == CLASSES_FILE:
            return cls.from_classes_file(path)
        if path.lower().endswith(_DARKNET_SUFFIX):
            return cls.from_darknet(path)
        with storage.open_read(path) as file:
            try:
                data = load_yaml(file.read())
            except yaml.YAMLError as error:
                problem = " ".join(str(error).split())
                raise ManifestError(f"{path}: cannot parse the YAML: {problem}") from error
        if not isinstance(data, dict):
            raise ManifestError(f"{path}: expected a YAML mapping (names, train, val...)")
        folder = storage.split(path)[0]
        written_root = str(data.get("path") or "")
        root, found_here = (
            _dataset_root(path, written_root, folder) if written_root else (folder, None)
        )
        entries = {}
        for split, key in _SPLIT_KEYS.items():
            value = data.get(key)
            if value in (None, ""):
                continue
            written = value if isinstance(value, list) else [value]
            if not all(isinstance(entry, str) and entry.strip() for entry in written):
                raise ManifestError(
                    f"{path}: {key!r} must be a path or a list of paths, found {value!r}"
                )
            entries[split] = [entry.strip() for entry in written]
        if not entries:
            raise ManifestError(
                f"{path}: names no split: expected 'train' (and 'val', "
                "'test') as a folder of images or a .txt list of them"
            )
        names, keypoints = _class_names(path, data), _keypoint_shape(path, data)
        return cls(
            path,
            names,
            root,
            entries,
            keypoints,
            _keypoint_names(path, data, len(names), keypoints),
            "names" if "names" in data else "nc",
            folder,
            written_root,
            found_here,
        )

    @classmethod
    def from_darknet(cls, path: str) -> YoloDataset:
        """Darknet's `obj.data` (CVAT's "YOLO 1.1" export): `key = value` lines, `names` its
        class file (a name a line), `train`, `valid` (and `test`, or a subset's own name:
        `Validation`) .txt lists of images, each image's labels beside it. Darknet reads
        the paths from the folder above the dataset's own (`data/obj.names`, CVAT's;
        `yolo_dataset/obj.names`): where a path is not there from the obj.data's folder,
        its first folder is that one, and left out (as datumaro's localize_path leaves out
        `data/`)."""
        root = storage.split(path)[0]
        settings = {}
        for _, line in whole_lines(path):
            key, equals, value = line.partition("=")
            if equals and value.strip():
                settings[key.strip().lower()] = value.strip()
        if "names" not in settings:
            raise ManifestError(f"{path}: a darknet obj.data names its class file (names = ...)")
        first, slash, rest = settings["names"].partition("/")
        prefix = (
            first + slash
            if slash
            and not storage.exists(_resolve(settings["names"], root))
            and storage.exists(_resolve(rest, root))
            else ""
        )
        entries: dict[str, list[str]] = {}
        for key, value in settings.items():
            if key in _DARKNET_SETTINGS:
                continue
            split = normalise_split(key)
            if split is None:
                raise ManifestError(
                    f"{path}: {key} = {value}: a darknet obj.data's other lines are image "
                    f"lists of a split (train, valid, test; {', '.join(SPLITS)}); {key!r} "
                    "is none of them"
                )
            entries.setdefault(split, []).append(value.removeprefix(prefix))
        if not entries:
            raise ManifestError(
                f"{path}: a darknet obj.data names its image lists (train = ..., valid = "
                f"...), found {sorted(settings)}"
            )
        names_file = _resolve(settings["names"].removeprefix(prefix), root)
        if not storage.exists(names_file):
            raise ManifestError(f"{path}: names = {settings['names']} is not there ({names_file})")
        return cls(
            path,
            _listed_class_names(names_file),
            root,
            entries,
            None,
            {},
            names_key="names",
            list_prefix=prefix,
        )

    @classmethod
    def from_classes_file(cls, path: str) -> YoloDataset:
        """A YOLO folder without data.yaml: the classes.txt at `path`, the splits its
        folders (see the module's doc)."""
        folder, name = storage.split(path)
        parent, folder_name = storage.split(folder)
        root = parent if folder_name == "labels" else folder
        return cls(path, _listed_class_names(path), root, _folder_entries(root), None, {})

    def home(self, rules: RowRules) -> DatasetRoot:
        """The folder the dataset's paths stay in; ManifestError where its root (`path`)
        leaves it."""
        home = DatasetRoot(self.folder, rules.allow_paths_outside_dataset)
        if not home.admits(self.root):
            raise ManifestError(
                f"{self.path}: path {quoted(self.written_root)} leaves the "
                f"YAML's folder {self.folder}: keep the YAML in the "
                f"dataset's folder, or pass {OPTION} to read it there"
            )
        if self.found_here:
            logging.warning("%s", self.found_here)
        return home

    def images(
        self, home: DatasetRoot, only: str | None = None
    ) -> Iterator[tuple[str | None, Iterator[str | DeadLetter]]]:
        """(split, the URIs of its images, in the order listed, or dead letters for those
        outside `home`) per split entry; the split is None for a folder without splits
        (`only`, --manifest SPLIT=..., where given)."""
        if only is not None and only not in self.entries and None not in self.entries:
            raise ManifestError(
                f"{self.path} has no {_SPLIT_KEYS[only]!r} entry for "
                f"--manifest {only.upper()}=...; it names "
                f"{', '.join(_SPLIT_KEYS[split] for split in self.entries)}"
            )
        for split, entries in self.entries.items():
            if split is None or only in (None, split):
                yield (
                    split or only,
                    (image for entry in entries for image in self._entry_images(entry, home)),
                )

    def relative(self, image: str) -> str:
        """The image's path under the root: what its hashed split is drawn from, the same
        wherever the folder is moved."""
        return image.removeprefix(self.root.rstrip("/") + "/")

    def _entry_images(self, entry: str, home: DatasetRoot) -> Iterator[str | DeadLetter]:
        """The images of a split entry, each a dead letter where it leaves `home` (a list's
        line naming a file elsewhere, a link leading out)."""
        found = self.locate(entry, home)
        if found.lower().endswith(".txt"):
            folder = storage.split(found)[0]
            for number, line in whole_lines(found):
                written = line.strip()
                image = (
                    _resolve(written.removeprefix(self.list_prefix), self.root)
                    if self.list_prefix and written.startswith(self.list_prefix)
                    else _resolve(written, folder)
                )
                outside = home.outside(image, f"the image {quoted(line.strip())}")
                yield (
                    DeadLetter.in_file(
                        found, *outside, position=number, raw=printable(line), uri=image
                    )
                    if outside
                    else image
                )
            return
        for image in sorted(
            metadata.path for metadata in storage.match(f"{found}/**") if _is_image(metadata.path)
        ):
            outside = home.outside(image, f"the image {quoted(self.relative(image))}")
            yield (
                DeadLetter.in_file(self.path, *outside, raw=image, uri=image) if outside else image
            )

    def locate(self, entry: str, home: DatasetRoot) -> str:
        """A split entry's path, in `home`; one that is not there fails naming it, and one
        that is there only outside `home` fails naming the option."""
        candidates = [_resolve(entry, self.root)]
        if entry.startswith("../"):
            candidates.append(_resolve(entry[3:], self.root))
        admitted = [candidate for candidate in candidates if home.admits(candidate)]
        for candidate in admitted:
            if candidate.lower().endswith(".txt"):
                if storage.exists(candidate):
                    return candidate
            elif storage.match(f"{candidate}/**", limit=1):
                return candidate
        if len(admitted) < len(candidates):
            raise ManifestError(
                f"{self.path}: {quoted(entry)} names no folder of images or "
                f".txt list in the YAML's folder {self.folder}: keep the "
                f"YAML in the dataset's folder, or pass {OPTION} to read "
                f"the dataset there (looked for {_looked_for(candidates)})"
            )
        raise ManifestError(
            f"{self.path}: {quoted(entry)} is neither a folder of images nor "
            f"a .txt list of them (looked for {_looked_for(candidates)})"
        )


def _looked_for(candidates: list[str]) -> str:
    return " and ".join(map(bounded, candidates))


def _listed_class_names(path: str) -> tuple[str, ...]:
    """classes.txt: a class name a line, line i naming class id i (Label Studio's and
    labelImg's); blank lines at its end are no classes."""
    names = [line.strip() for _, line in whole_lines(path)]
    while names and not names[-1]:
        names.pop()
    if not names:
        raise ManifestError(f"{path} names no class: expected a class name a line")
    if not all(names) or len(set(names)) != len(names):
        raise ManifestError(
            f"{path}: class names must be non-empty and distinct, a line "
            f"each (line i naming class id i): {names}"
        )
    return tuple(names)


def _folder_entries(root: str) -> dict[str | None, list[str]]:
    """The split entries of a YOLO folder without data.yaml: its `images/<split>/` or
    `<split>/images/` folders; without any, {None: the folder of every image}. Images both
    in split folders and outside them are refused: some would have no split."""
    entries: dict[str | None, set[str]] = {}
    outside = []
    for image in (
        metadata.path for metadata in storage.match(f"{root}/**") if _is_image(metadata.path)
    ):
        parts = image[len(root) + 1 :].split("/")
        if len(parts) > 2 and parts[0] == "images" and normalise_split(parts[1]):
            entries.setdefault(normalise_split(parts[1]), set()).add(f"images/{parts[1]}")
        elif len(parts) > 2 and parts[1] == "images" and normalise_split(parts[0]):
            entries.setdefault(normalise_split(parts[0]), set()).add(f"{parts[0]}/images")
        else:
            outside.append("/".join(parts))
    if entries and outside:
        folders = sorted(set().union(*entries.values()))
        raise ManifestError(
            f"{root}: images are in split folders ({', '.join(folders)}) and "
            f"outside them ({outside[0]}): put every image in a split "
            "folder, or none"
        )
    if not entries:
        return (
            {None: ["images" if all(each.startswith("images/") for each in outside) else "."]}
            if outside
            else {}
        )
    return {split: sorted(entries[split]) for split in SPLITS if split in entries}


def label_path(image: str) -> str:
    """Ultralytics' img2label_paths: the last /images/ made /labels/, the suffix .txt."""
    head, images, tail = image.rpartition("/images/")
    stem = f"{head}/labels/{tail}" if images else image
    return stem.rsplit(".", 1)[0] + ".txt"


class _LabelFolders:
    """Which label files exist, a folder listed once (one listing, not a call per image)."""

    def __init__(self) -> None:
        self._listed: dict[str, set[str]] = {}

    def holds(self, label_file: str) -> bool:
        folder = storage.split(label_file)[0]
        if folder not in self._listed:
            self._listed[folder] = {
                metadata.path for metadata in storage.match(storage.join(folder, "*.txt"))
            }
        return label_file in self._listed[folder]


def _label_rows(
    label_file: str, image: str, split: str, dataset: YoloDataset, rules: RowRules
) -> Iterator[ManifestRow | DeadLetter]:
    # Ultralytics reads an image's size and pixels turned upright (exif_size, cv2.imread).
    row = ManifestRow(label_file, 0, "", split, image, (), drawn_upright=True)
    seen: dict[str, int] = {}
    any_line = False
    for line, raw in numbered_lines(label_file):
        any_line = True
        if isinstance(raw, LongLine):
            yield raw.dead_letter(label_file, line, split, image)
            continue
        labelled = row._replace(line=line, raw=printable(raw))
        key = " ".join(raw.split())
        if key in seen:
            yield labelled.dead_letter(
                reasons.DUPLICATE_ROW,
                f"the same object as line {seen[key]}; Ultralytics drops such a copy too",
            )
            continue
        seen[key] = line
        yield _label_row(labelled, raw, dataset, rules)
    if not any_line:  # an empty label file: an image without objects
        yield row


def _label_row(
    row: ManifestRow, raw: str, dataset: YoloDataset, rules: RowRules
) -> ManifestRow | DeadLetter:
    if has_undecodable_bytes(raw):
        return row.dead_letter(reasons.INVALID_ENCODING, "the line is not valid UTF-8")
    fields = raw.split()
    try:
        values = [float(field) for field in fields]
    except ValueError:
        return row.dead_letter(reasons.MALFORMED_ROW, f"a field is not a number: {raw!r}")
    if not all(math.isfinite(value) for value in values):
        return row.dead_letter(reasons.MALFORMED_ROW, f"a field is not a finite number: {raw!r}")
    shape = _line_shape(len(values), dataset.keypoints)
    if shape is None:
        return row.dead_letter(
            reasons.WRONG_COLUMN_COUNT, _expected_fields(len(values), dataset.keypoints)
        )
    class_id = values[0]
    if class_id != int(class_id) or not 0 <= class_id < len(dataset.names):
        return row.dead_letter(
            reasons.UNKNOWN_CATEGORY_ID,
            f"class {fields[0]} is not one "
            f"of the {len(dataset.names)} classes of {dataset.path} "
            f"(0 to {len(dataset.names) - 1})",
        )
    coordinates = values[1:]
    if shape == "polygon":
        box = _polygon_box(coordinates, rules)
    else:
        box = _centre_box(coordinates[:4])
    if not isinstance(box, Box):
        return row.dead_letter(*box)
    if shape == "pose" and LeftOut.KEYPOINTS not in rules.leave_out:
        keypoints = _keypoints(coordinates[4:], dataset, int(class_id))
        if not isinstance(keypoints, Keypoints):
            return row.dead_letter(*keypoints)
        box = box._replace(keypoints=keypoints)
    return row._replace(labels=(dataset.names[int(class_id)],), boxes=(box,))


def _keypoints(
    values: list[float], dataset: YoloDataset, class_id: int
) -> Keypoints | tuple[str, str]:
    """A pose line's K points (x y, or x y visibility) -> Keypoints. Without a visibility
    a point is unlabelled where a coordinate is negative (as Ultralytics masks it), else
    visible."""
    count, dimensions = dataset.keypoints
    points = [values[place : place + dimensions] for place in range(0, len(values), dimensions)]
    visibility = []
    for number, point in enumerate(points, start=1):
        flag = point[2] if dimensions == 3 else (0 if min(point) < 0 else 2)
        if flag not in (0, 1, 2):
            return (
                reasons.INVALID_KEYPOINTS,
                f"keypoint {number}'s visibility is "
                f"{point[2]:g}: 0 (not labelled), 1 (hidden) or 2 (visible)",
            )
        if flag and not all(0.0 <= value <= 1.0 for value in point[:2]):
            return (
                reasons.INVALID_KEYPOINTS,
                f"keypoint {number} ({point[0]:g}, "
                f"{point[1]:g}) is outside the image: coordinates are normalised to 0..1",
            )
        visibility.append(int(flag))
    return Keypoints(
        tuple(point[0] for point in points),
        tuple(point[1] for point in points),
        tuple(visibility),
        dataset.keypoint_names.get(class_id, ()),
    )


def _is_label_line(line: str) -> bool:
    """A YOLO label line: a class id, then four or more numbers (a box, a polygon, a pose)."""
    fields = line.split()
    if len(fields) < 5 or not fields[0].isdigit():
        return False
    try:
        list(map(float, fields[1:]))
    except ValueError:
        return False
    return True


def _line_shape(count: int, keypoints: tuple[int, int] | None) -> str | None:
    """ "box", "pose" or "polygon" by the number of fields; None when it fits none."""
    if keypoints is not None:
        return (
            "pose" if count == 5 + keypoints[0] * keypoints[1] else ("box" if count == 5 else None)
        )
    if count == 5:
        return "box"
    if count >= 7 and count % 2 == 1:
        return "polygon"
    return None


def _expected_fields(count: int, keypoints: tuple[int, int] | None) -> str:
    if keypoints is not None:
        return (
            f"expected 5 fields (class cx cy w h) or {5 + keypoints[0] * keypoints[1]} "
            f"(and {keypoints[0]} keypoints of {keypoints[1]}, the YAML's kpt_shape), "
            f"found {count}"
        )
    if count >= 3 and count % 2 == 1:
        return (
            f"a polygon needs at least 3 points (class x1 y1 x2 y2 x3 y3), found {(count - 1) // 2}"
        )
    return (
        f"expected class cx cy w h (5 fields) or a polygon class x1 y1 x2 y2 ... (an "
        f"odd number of 7 or more), found {count}"
    )


def _centre_box(values: list[float]) -> Box | tuple[str, str]:
    cx, cy, width, height = values
    return clipped_box(
        cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2, _ULTRALYTICS_TOLERANCE
    )


def _polygon_box(coordinates: list[float], rules: RowRules) -> Box | tuple[str, str]:
    """A polygon line's (segmentation, or OBB's four corners) points -> the Box of their
    extent, clipped to the image, the clipped polygon its mask. As Ultralytics checks it
    (verify_image_label checks a polygon's segments2boxes, its extent's centre and size,
    within its 1% tolerance; Instances.clip then clips the points), points may lie outside
    the image where the extent's centre is on it and its size no larger than it: a turned
    box at the edge (17 of the 133 objects of Ultralytics' dota8). Farther out (pixels, not
    normalised coordinates) the line is box_out_of_range."""
    xs, ys = coordinates[0::2], coordinates[1::2]
    xmin, ymin, xmax, ymax = extent(xs, ys)
    centre_and_size = ((xmin + xmax) / 2, (ymin + ymax) / 2, xmax - xmin, ymax - ymin)
    if not all(
        -_ULTRALYTICS_TOLERANCE <= value <= 1 + _ULTRALYTICS_TOLERANCE for value in centre_and_size
    ):
        far = max(coordinates, key=lambda value: abs(value - 0.5))
        return (
            reasons.BOX_OUT_OF_RANGE,
            "the polygon's extent lies outside the image (its centre or size past "
            f"{_ULTRALYTICS_TOLERANCE:.0%} of its side beyond it): coordinates must be "
            f"normalised to the image size, between 0 and 1, found {far:g}",
        )
    clipped = [min(max(value, 0.0), 1.0) for value in coordinates]
    xs, ys = clipped[0::2], clipped[1::2]
    box = clipped_box(*extent(xs, ys))
    if isinstance(box, Box) and clipped != coordinates:
        box = box._replace(clipped=True)
    return with_mask(box, polygon_mask([list(zip(xs, ys, strict=True))], (1.0, 1.0), rules))


def _class_names(path: str, data: dict) -> tuple[str, ...]:
    """`names` as a list, or a dict whose keys are 0 to n-1; or nc names class_<i>."""
    names, count = data.get("names"), data.get("nc")
    if names is None:
        if isinstance(count, int) and count > 0:
            return tuple(f"class_{index}" for index in range(count))
        raise ManifestError(
            f"{path}: has no 'names' (a list of class names, or a dict of class id -> name)"
        )
    if isinstance(names, dict):
        try:
            by_id = {int(key): value for key, value in names.items()}
        except (TypeError, ValueError):
            raise ManifestError(f"{path}: 'names' keys must be class ids 0, 1, 2...") from None
        if sorted(by_id) != list(range(len(by_id))):
            raise ManifestError(
                f"{path}: 'names' keys must be the class ids 0 to "
                f"{len(by_id) - 1}, found {sorted(by_id)}"
            )
        names = [by_id[index] for index in range(len(by_id))]
    if not isinstance(names, list) or not names:
        raise ManifestError(
            f"{path}: 'names' must be a list of class names or a dict of "
            f"class id -> name, found {names!r}"
        )
    texts = tuple(str(name).strip() for name in names)
    if not all(texts) or len(set(texts)) != len(texts):
        raise ManifestError(f"{path}: 'names' must be non-empty and distinct: {list(texts)}")
    if count is not None and count != len(texts):
        raise ManifestError(f"{path}: nc is {count} but 'names' holds {len(texts)} names")
    return texts


def _keypoint_shape(path: str, data: dict) -> tuple[int, int] | None:
    shape = data.get("kpt_shape")
    if shape is None:
        return None
    if not (
        isinstance(shape, list)
        and len(shape) == 2
        and isinstance(shape[0], int)
        and 0 < shape[0] <= MAX_KEYPOINTS
        and shape[1] in (2, 3)
    ):
        raise ManifestError(
            f"{path}: kpt_shape must be [number of keypoints (1 to "
            f"{MAX_KEYPOINTS}), 2 or 3], found {shape!r}"
        )
    return shape[0], shape[1]


def _keypoint_names(
    path: str, data: dict, classes: int, shape: tuple[int, int] | None
) -> dict[int, tuple[str, ...]]:
    """`kpt_names` (Ultralytics' pose YAMLs: class id -> the names of its K points)."""
    written = data.get("kpt_names")
    if written is None or shape is None:
        return {}
    if not (
        isinstance(written, dict)
        and all(isinstance(names, list) and len(names) == shape[0] for names in written.values())
        and set(written) <= set(range(classes))
    ):
        raise ManifestError(
            f"{path}: kpt_names must map class ids to lists of "
            f"{shape[0]} names (kpt_shape), found {written!r}"
        )
    return {class_id: tuple(map(str, names)) for class_id, names in written.items()}


def _dataset_root(yaml_path: str, written: str, folder: str) -> tuple[str, str | None]:
    """`path`: relative to the YAML's folder; where it is not there but is relative to
    the current directory, there, with what the console says of it. Ultralytics' own YAMLs
    (`path: ../datasets/coco8` in ultralytics/cfg/datasets/) mean the current directory:
    check_det_dataset takes `path` as it stands where it exists."""
    root = _resolve(written, folder)
    if storage.exists(root) or not (storage.is_local(yaml_path) and storage.is_local(written)):
        return root, None
    here = normalise_path(os.path.abspath(written))
    if not os.path.isdir(here):
        return root, None
    return here, (
        f"{yaml_path}: path {quoted(written)} is not a folder beside the YAML "
        f"({bounded(root)}); read from the current directory, as Ultralytics reads "
        f"it: {bounded(here)}"
    )


def _resolve(path: str, folder: str) -> str:
    if path.startswith("/") or "://" in path:
        return normalise_path(path)
    return normalise_path(storage.join(folder, path))


def _is_image(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def check_yolo(path: str, split: str | None, rules: RowRules) -> None:
    """Before the job: data.yaml reads, its root and entries are there, in its folder."""
    dataset = YoloDataset.load(path)
    if not dataset.entries:
        raise ManifestError(f"{dataset.root}: no image under it for {path}'s classes")
    home = dataset.home(rules)
    for each, entries in dataset.entries.items():
        if split is None or each in (None, split):
            for entry in entries:
                dataset.locate(entry, home)
    if split is not None:
        next(dataset.images(home, split))


def _classes_folder_reading(root: str, relatives: list[str]) -> FolderReading | None:
    """A YOLO folder without data.yaml, whose classes a classes.txt names, read as that
    classes.txt; a folder with a data.yaml too is refused, naming the data.yaml. A darknet
    export (CVAT's YOLO 1.1: obj.data at its top) is read as its obj.data."""
    darknet = [relative for relative in relatives if relative == _DARKNET_FILE]
    if darknet:
        obj_data = storage.join(root, darknet[0])
        dataset = YoloDataset.load(obj_data)
        return FolderReading(
            (ManifestSource(obj_data, YoloFormat.name),),
            f"reading {root} as a darknet YOLO dataset (CVAT's YOLO 1.1): its obj.data, the "
            f"{len(dataset.names)} classes of its names file, "
            + ", ".join(
                f"{entry} as {split.upper()}" for split, (entry,) in dataset.entries.items()
            ),
        )
    places = [place for place in _CLASSES_FILE_PLACES if place in relatives]
    if not places or not _has_yolo_labels(root, relatives):
        return None
    yaml_files = [
        relative
        for relative in relatives
        if "/" not in relative and relative.endswith((".yaml", ".yml"))
    ]
    if yaml_files:
        raise ManifestError(
            f"{root} is a YOLO dataset whose classes both {places[0]} and "
            f"{yaml_files[0]} may name: pass the data.yaml, --manifest "
            f"{storage.join(root, yaml_files[0])} --label_mode detection"
        )
    classes_file = storage.join(root, places[0])
    dataset = YoloDataset.load(classes_file)
    if None in dataset.entries:
        splits = (
            "it has no split folders: each image's split is drawn from a hash of "
            "its path (--split_fractions)"
        )
    else:
        splits = ", ".join(
            f"{entry}/ as {split.upper()}"
            for split, entries in dataset.entries.items()
            for entry in entries
        )
    return FolderReading(
        (ManifestSource(classes_file, YoloFormat.name),),
        f"reading {root} as a YOLO dataset: the {len(dataset.names)} classes of {places[0]} "
        f"(line i is class id i), labels in labels/ or beside the images; {splits}",
    )


def _has_yolo_labels(root: str, relatives: list[str]) -> bool:
    """Whether an image has a label file where YOLO looks for it (label_path): not only
    some README.txt beside a classes.txt."""
    files = set(relatives)
    return any(
        label_path(storage.join(root, relative))[len(root) + 1 :] in files
        for relative in relatives
        if relative.lower().endswith(IMAGE_EXTENSIONS)
    )


class YoloFormat(InputFormat):
    name = "yolo"
    title = "a YOLO dataset file (data.yaml, classes.txt or darknet's obj.data)"
    suffixes = (".yaml", ".yml", _DARKNET_SUFFIX)
    in_worker = False
    boxes_only = True

    def folder_reading(self, root: str, relatives: list[str]) -> FolderReading | None:
        return _classes_folder_reading(root.rstrip("/"), relatives)

    def given_in_part(self, path: str, relatives: list[str] | None) -> str | None:
        """A folder of label .txt files (`labels/`, `labels/train/`), or one of them:
        read through the dataset's data.yaml (or its classes.txt's folder)."""
        label_files = [
            file
            for file in (
                [storage.join(path, relative) for relative in relatives]
                if relatives is not None
                else [path]
            )
            if file.lower().endswith(".txt") and plain_name(file) != CLASSES_FILE
        ]
        if not label_files:
            return None
        if not _is_label_line(next((line for _, line in whole_lines(label_files[0])), "")):
            return None
        head, found, tail = path.rstrip("/").rpartition("/labels")
        root = head if found and (not tail or tail.startswith("/")) else None
        yamls = storage.match(storage.join(root, "*.yaml"), limit=2) if root else []
        instead = (
            f"--manifest {yamls[0].path}"
            if len(yamls) == 1
            else f"--manifest {root}/data.yaml (or the folder holding classes.txt)"
            if root
            else "--manifest DATA.yaml, the dataset's YAML (or the folder holding classes.txt)"
        )
        return (
            f"{'a folder of' if relatives is not None else 'a'} YOLO label "
            f"file{'s' if relatives is not None else ''} (`class x_center y_center width "
            f"height` lines), which are read through the dataset: pass {instead}, with "
            "--label_mode detection"
        )

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        check_yolo(source.path, source.split, rules)

    def declared_classes(self, source: ManifestSource) -> DeclaredClasses:
        """`names` (or `nc`'s class_<i>), or classes.txt's lines: class id i is YOLO's class
        id i."""
        dataset = YoloDataset.load(source.path)
        if plain_name(source.path) == CLASSES_FILE:
            return DeclaredClasses(source.path, dataset.names)
        return DeclaredClasses(f"{source.path} ({dataset.names_key})", dataset.names)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return read_yolo(source.path, rules, source.split)
