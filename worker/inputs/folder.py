"""Reads an image folder, `ROOT/<split>/<label>/<file>` or `ROOT/<label>/<file>`, as rows.

The folder is listed with Beam's FileSystems.match (`ROOT/**`: the same on local disks and
buckets, which have no real directories), as one chunk of rows (worker/chunks.py). Each
image becomes a ManifestRow, so the rest of the pipeline treats it like a CSV row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from worker import storage
from worker.dead_letters import DeadLetter
from worker.chunks import LineRange, ManifestSource
from worker.inputs.input_format import InputFormat
from worker.inputs.kitti import kitti_labels_beside
from worker.inputs.rows import DEFAULT_SPLIT_FRACTIONS, ManifestError, RowRules, assign_split
from worker.records import ManifestRow
from worker.splits import SPLIT_NAMES, normalise_split

IMAGE_FOLDER = "image_folder"  # a source's format (sources.FORMATS) for --image_folder

NOT_IN_LABEL_FOLDER = "not_in_label_folder"  # a file not at the depth of the layout
NOT_IN_SPLIT_FOLDER = "not_in_split_folder"  # split folders exist; this top folder is none
LABEL_IS_SPLIT_NAME = "label_is_split_name"  # e.g. train/val/x.jpg: a split is no class
# What Keras' image_dataset_from_directory reads too; other files (.DS_Store, notes) are
# not images a user meant to convert.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp")
_SPLIT_LAYOUT = "ROOT/<split>/<label>/<file>"


def check_folder(root: str) -> str:
    """The path of a file under `root` (the storage probe reads it); fails clearly when
    there is none, or when it is a YOLO or KITTI dataset's (whose labels are not folder
    names). Lists a few files at most."""
    found = storage.match(everything_under(root), limit=1)
    if not found:
        raise ManifestError(f"image folder not found or empty: {root}")
    labels = _yolo_labels_beside(root.rstrip("/"))
    if labels:
        raise ManifestError(
            f"{root} is an Ultralytics YOLO dataset: its labels are the .txt files in "
            f"{labels}, not folder names. Pass its data.yaml: --manifest DATA.yaml "
            "--label_mode detection")
    kitti = kitti_labels_beside(root)
    if kitti:
        raise ManifestError(
            f"{root} is a KITTI object dataset: its labels are the .txt files in {kitti}, "
            f"not folder names. Pass them: --manifest {kitti} --label_mode detection")
    return found[0].path


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


def folder_rows(root: str, split_fractions: Sequence[float] = DEFAULT_SPLIT_FRACTIONS
                ) -> Iterator[ManifestRow | DeadLetter]:
    """Every image file under `root` as a ManifestRow; a misplaced one as a DeadLetter.

    Once any top-level folder is a split name (normalise_split: `val`, `Train`...), the
    whole tree is read as ROOT/<split>/<label>/<file>, so a split never becomes a class;
    otherwise as ROOT/<label>/<file>, the split assigned from the path as for UNASSIGNED
    rows. `line` is 0 and `raw` the path relative to `root`: a folder has no lines.
    """
    root = root.rstrip("/")
    images = [(metadata.path, metadata.path[len(root) + 1:])
              for metadata in storage.match(everything_under(root))
              if _is_image_name(metadata.path)]
    split_layout = any("/" in relative and normalise_split(relative.split("/", 1)[0])
                       for _, relative in images)
    for path, relative in images:
        if split_layout:
            yield _split_layout_row(root, path, relative)
        else:
            yield _label_layout_row(root, path, relative, split_fractions)


def _is_image_name(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def _split_layout_row(root: str, path: str, relative: str) -> ManifestRow | DeadLetter:
    parts = relative.split("/")
    split = normalise_split(parts[0]) if len(parts) > 1 else None
    if len(parts) > 1 and split is None:
        return DeadLetter(root, 0, relative, path, "", NOT_IN_SPLIT_FOLDER,
                          f"the folder has split folders, so images go in {_SPLIT_LAYOUT}; "
                          f"{parts[0]!r} is not a split: {SPLIT_NAMES}")
    if len(parts) != 3:
        where = {1: "directly in ROOT", 2: f"directly in split folder {parts[0]!r}"}.get(
            len(parts), f"{len(parts) - 1} folders deep")
        return DeadLetter(root, 0, relative, path, split or "", NOT_IN_LABEL_FOLDER,
                          f"the image is {where}; expected {_SPLIT_LAYOUT}")
    if normalise_split(parts[1]):
        return DeadLetter(root, 0, relative, path, split, LABEL_IS_SPLIT_NAME,
                          f"label folder {parts[1]!r} is a split name, not a class; "
                          f"expected {_SPLIT_LAYOUT}")
    return ManifestRow(root, 0, relative, split, path, (parts[1],))


def _label_layout_row(root: str, path: str, relative: str,
                      split_fractions: Sequence[float]) -> ManifestRow | DeadLetter:
    parts = relative.split("/")
    if len(parts) != 2:
        return DeadLetter(root, 0, relative, path, "", NOT_IN_LABEL_FOLDER,
                          f"expected ROOT/<label>/<file>, or {_SPLIT_LAYOUT} with <split> "
                          f"one of {SPLIT_NAMES}")
    return ManifestRow(root, 0, relative, assign_split(relative, split_fractions), path,
                       (parts[0],))


def everything_under(root: str) -> str:
    """The pattern of every file under `root`, however deep."""
    return f"{root.rstrip('/')}/**"


class ImageFolderFormat(InputFormat):
    """--image_folder: chosen by the option, never sniffed from a path."""

    name = IMAGE_FOLDER
    title = "an image folder"
    in_worker = False

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        check_folder(source.path)

    def read(self, source: ManifestSource, rules: RowRules, lines: LineRange | None
             ) -> Iterator[ManifestRow | DeadLetter]:
        return folder_rows(source.path, rules.split_fractions)
