"""Reads an image folder, `ROOT/<split>/<label>/<file>` or `ROOT/<label>/<file>`, as rows.

The folder is listed with Beam's FileSystems.match (`ROOT/**`: the same on local disks and
buckets, which have no real directories), as one chunk of rows (core/records/chunks.py). Each
image becomes a ManifestRow, so the rest of the pipeline treats it like a CSV row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from image_tfrecords.core.inputs.input_format import InputFormat
from image_tfrecords.core.inputs.kitti import kitti_labels_beside
from image_tfrecords.core.inputs.rows import (
    DEFAULT_SPLIT_FRACTIONS,
    ManifestError,
    RowRules,
    assign_split,
)
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.core.records.splits import SPLIT_NAMES, normalise_split
from image_tfrecords.core.storage import storage

IMAGE_FOLDER = "image_folder"  # a source's format (sources.FORMATS) for --image_folder

NOT_IN_LABEL_FOLDER = "not_in_label_folder"  # a file not at the depth of the layout
NOT_IN_SPLIT_FOLDER = "not_in_split_folder"  # split folders exist; this top folder is none
LABEL_IS_SPLIT_NAME = "label_is_split_name"  # e.g. train/val/x.jpg: a split is no class
# What Keras' image_dataset_from_directory reads too; other files (.DS_Store, notes) are
# not images a user meant to convert.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp")
_SPLIT_LAYOUT = "ROOT/<split>/<label>/<file>"
# The names COCO's annotation downloads give their files (annotations/<kind>_val2017.json).
_COCO_ANNOTATION_FILES = ("instances", "person_keypoints", "panoptic")


def check_folder(root: str) -> str:
    """The path of a file under `root` (the storage probe reads it); fails clearly when
    there is none, or when the folder is an annotation dataset (YOLO, KITTI, Pascal VOC,
    COCO), whose labels are not folder names, naming the command that reads it. Lists a
    few files at most."""
    found = storage.match(storage.everything_under(root), limit=1)
    if not found:
        raise ManifestError(f"image folder not found or empty: {root}")
    root = root.rstrip("/")
    for refusal in (_yolo_refusal, _kitti_refusal, _voc_refusal, _coco_refusal):
        problem = refusal(root)
        if problem:
            raise ManifestError(problem)
    return found[0].path


def class_folders(
    root: str, relatives: list[str], rules: RowRules, say: Callable[[str], None]
) -> str:
    """--image_folder of class folders, before the job: the path of a file under `root`
    for the storage probe (check_folder). Refused for detection, and where the layout
    reads two ways or fits none; a split folder under another name is said
    (layout_said). `relatives`: every file's path under `root`."""
    first_image = check_folder(root)
    if rules.detection:
        raise ManifestError(
            "--label_mode detection needs a manifest of boxes, not "
            f"--image_folder {root} of class folders"
        )
    said = layout_said(root, relatives)
    if said:
        say(said)
    return first_image


def _yolo_refusal(root: str) -> str | None:
    labels = _yolo_labels_beside(root)
    if not labels:
        return None
    said = (
        f"{root} is a YOLO dataset: its labels are the .txt files in {labels}, not folder names. "
    )
    dataset = labels.rpartition("/labels")[0]  # the folder holding images/ and labels/
    yaml_file = _first(storage.join(dataset, "*.yaml"), storage.join(dataset, "*.yml"))
    if yaml_file:
        return said + f"Pass its data.yaml: --manifest {yaml_file} --label_mode detection"
    return said + (
        "No data.yaml or classes.txt names its classes: write classes.txt in "
        f"{dataset} (a class name a line, line i naming class id i), then "
        f"--image_folder {dataset} --label_mode detection"
    )


def _kitti_refusal(root: str) -> str | None:
    kitti = kitti_labels_beside(root)
    if not kitti:
        return None
    return (
        f"{root} is a KITTI object dataset: its labels are the .txt files in {kitti}, "
        f"not folder names. Pass them: --manifest {kitti} --label_mode detection"
    )


def _voc_refusal(root: str) -> str | None:
    """ROOT/Annotations/*.xml (a VOCdevkit year folder), or a VOCdevkit holding those."""
    xml = _first(
        storage.join(root, "Annotations", "*.xml"), storage.join(root, "*", "Annotations", "*.xml")
    )
    if not xml:
        return None
    year_folder = xml.rsplit("/Annotations/", 1)[0]
    return (
        f"{root} is a Pascal VOC dataset (its boxes are in {year_folder}/Annotations), "
        f"not class folders: --manifest {year_folder} --label_mode detection"
    )


def _coco_refusal(root: str) -> str | None:
    """ROOT/annotations/instances_*.json (or the keypoints' or the panoptic segmentation's
    file, each a download of its own), as COCO's downloads unpack."""
    annotations = _first(
        *(storage.join(root, "annotations", f"{kind}_*.json") for kind in _COCO_ANNOTATION_FILES)
    )
    if not annotations:
        return None
    return (
        f"{root} is a COCO dataset ({annotations}), not class folders: --manifest "
        f"{annotations} --label_mode detection (and --image_dir the images' folder)"
    )


def _first(*patterns: str) -> str | None:
    """The first file any of `patterns` matches."""
    for pattern in patterns:
        found = storage.match(pattern, limit=1)
        if found:
            return found[0].path
    return None


def _yolo_labels_beside(root: str) -> str | None:
    """The folder of YOLO label files for `root`, if there is one: ROOT/labels, or, for
    ROOT an `images` folder or one inside it, the same path with `images` made `labels`
    (Ultralytics' layout)."""
    head, images, tail = f"{root}/".rpartition("/images/")
    candidates = [storage.join(root, "labels")]
    if images:
        candidates.append(f"{head}/labels/{tail}".rstrip("/"))
    for labels in candidates:
        if storage.match(storage.join(labels, "**.txt"), limit=1):
            return labels
    return None


def folder_rows(
    root: str, split_fractions: Sequence[float] = DEFAULT_SPLIT_FRACTIONS
) -> Iterator[ManifestRow | DeadLetter]:
    """Every image file under `root` as a ManifestRow; a misplaced one as a DeadLetter.

    Once a top-level folder named like a split (normalise_split: `val`, `Train`,
    `training_set`...) holds a folder of images, the whole tree is read as
    ROOT/<split>/<label>/<file>, so a split never becomes a class; otherwise as
    ROOT/<label>/<file>, the split assigned from the path as for UNASSIGNED rows.
    `line` is 0 and `raw` the path relative to `root`: a folder has no lines.
    """
    root = root.rstrip("/")
    images = _image_files(root)
    split_layout = bool(split_folders(relative for _, relative in images))
    for path, relative in images:
        if split_layout:
            yield _split_layout_row(root, path, relative)
        else:
            yield _label_layout_row(root, path, relative, split_fractions)


def _image_files(root: str) -> list[tuple[str, str]]:
    """(path, path relative to `root`) of every image file under `root`."""
    root = root.rstrip("/")
    return [
        (metadata.path, metadata.path[len(root) + 1 :])
        for metadata in storage.match(storage.everything_under(root))
        if _is_image_name(metadata.path)
    ]


def split_folders(relatives: Iterable[str]) -> dict[str, str]:
    """Top-level folder -> its split, for each folder named like a split that holds a
    folder of images (ROOT/<split>/<label>/<file>): what makes the split layout."""
    found = {}
    for relative in relatives:
        parts = relative.split("/")
        split = normalise_split(parts[0]) if len(parts) > 2 else None
        if split:
            found[parts[0]] = split
    return found


def layout_said(root: str, files: Sequence[str]) -> str | None:
    """Before the job: what the console says of how the folder's tree is read, where a
    folder is read as a split under another name (`training_set` as TRAIN); None where
    there is nothing to say. A tree that reads two ways, or that fits no layout, raises
    a ManifestError naming the readings. `files`: the paths under `root`."""
    relatives = [relative for relative in files if _is_image_name(relative)]
    folders = split_folders(relatives)
    if folders:
        return _split_folders_said(root, folders, relatives)
    tops = sorted({relative.split("/")[0] for relative in relatives if "/" in relative})
    named_like_splits = [top for top in tops if normalise_split(top)]
    if named_like_splits:
        listed = ", ".join(f"{top}/" for top in named_like_splits)
        raise ManifestError(
            f"{root} reads two ways: {listed} as split folders, which hold class folders "
            f"({_SPLIT_LAYOUT}), but they hold images; or as classes named like splits. "
            f"Put the images in class folders ({root.rstrip('/')}/{named_like_splits[0]}/"
            "<label>/<file>), or rename the folders if they are classes"
        )
    if relatives and all(relative.count("/") > 1 for relative in relatives):
        raise ManifestError(
            f"{root}: no image is in ROOT/<label>/<file>, and no top folder "
            f"({', '.join(tops[:5])}{', ...' if len(tops) > 5 else ''}) is a split name for "
            f"{_SPLIT_LAYOUT}: split folders are named {SPLIT_NAMES}"
        )
    return None


def _split_folders_said(root: str, folders: dict[str, str], relatives: Sequence[str]) -> str | None:
    doubled = sorted(
        {
            parts[0]
            for relative in relatives
            if len(parts := relative.split("/")) == 4 and _is_doubled(parts)
        }
    )
    if all(folder == split for folder, split in folders.items()) and not doubled:
        return None
    said = f"reading {root} as {_SPLIT_LAYOUT}: " + ", ".join(
        f"{folder}/ as {split.upper()}" for folder, split in sorted(folders.items())
    )
    if doubled:
        said += (
            f"; {', '.join(f'{folder}/{folder}/' for folder in doubled)} read as one "
            "split folder (a split folder inside its namesake, as a zip unpacks)"
        )
    return said


def _is_doubled(parts: list[str]) -> bool:
    """ROOT/training_set/training_set/<label>/<file>: Kaggle's zips unpack a split folder
    inside one of the same name."""
    return parts[1].lower() == parts[0].lower()


def _is_image_name(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def _split_layout_row(root: str, path: str, relative: str) -> ManifestRow | DeadLetter:
    parts = relative.split("/")
    if len(parts) == 4 and _is_doubled(parts):
        del parts[1]
    split = normalise_split(parts[0]) if len(parts) > 1 else None
    if len(parts) > 1 and split is None:
        return DeadLetter.in_file(
            root,
            NOT_IN_SPLIT_FOLDER,
            f"the folder has split folders, so images go in {_SPLIT_LAYOUT}; "
            f"{parts[0]!r} is not a split: {SPLIT_NAMES}",
            raw=relative,
            uri=path,
        )
    if len(parts) != 3:
        where = {1: "directly in ROOT", 2: f"directly in split folder {parts[0]!r}"}.get(
            len(parts), f"{len(parts) - 1} folders deep"
        )
        return DeadLetter.in_file(
            root,
            NOT_IN_LABEL_FOLDER,
            f"the image is {where}; expected {_SPLIT_LAYOUT}",
            raw=relative,
            uri=path,
            split=split or "",
        )
    if normalise_split(parts[1]):
        return DeadLetter.in_file(
            root,
            LABEL_IS_SPLIT_NAME,
            f"label folder {parts[1]!r} is a split name, not a class; expected {_SPLIT_LAYOUT}",
            raw=relative,
            uri=path,
            split=split,
        )
    return ManifestRow(root, 0, relative, split, path, (parts[1],))


def _label_layout_row(
    root: str, path: str, relative: str, split_fractions: Sequence[float]
) -> ManifestRow | DeadLetter:
    parts = relative.split("/")
    if len(parts) != 2:
        return DeadLetter.in_file(
            root,
            NOT_IN_LABEL_FOLDER,
            f"expected ROOT/<label>/<file>, or {_SPLIT_LAYOUT} with <split> one of {SPLIT_NAMES}",
            raw=relative,
            uri=path,
        )
    return ManifestRow(
        root, 0, relative, assign_split(relative, split_fractions), path, (parts[0],)
    )


class ImageFolderFormat(InputFormat):
    """--image_folder: chosen by the option, never sniffed from a path."""

    name = IMAGE_FOLDER
    title = "an image folder"
    chosen_by_input_format = False
    in_worker = False

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        check_folder(source.path)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return folder_rows(source.path, rules.split_fractions)
