"""What a folder given as --image_folder (or as --manifest FOLDER) holds, told by the files
in it, where that is not class folders:

- a Hugging Face imagefolder: `metadata.jsonl` or `metadata.csv` files, at its root or in
  its split folders. The datasets library's folder_based_builder reads every metadata
  file among a split's files, and then takes the labels from the metadata, not from the
  folder names; its split folders are `train/`, `validation/`, `test/` (or another split
  keyword, core/splits.py), maybe under `data/`. Read as those metadata files
  (core/inputs/hf_imagefolder.py), each with the split of its folder. An image that
  no metadata file names is not read (its label would be the metadata's); the console
  says how many there are, and the first few.
- a YOLO folder without data.yaml, whose classes a `classes.txt` names: Label Studio's
  YOLO export (`classes.txt`, `notes.json`, `images/`, `labels/`), labelImg's. Read as
  that classes.txt (core/inputs/yolo.py). A folder with a data.yaml is refused by
  folder.check_folder, naming the data.yaml.

Each is named in the console (`said`), with the splits it gives, so a folder is never
read one way while the user meant another.
"""

from __future__ import annotations

from typing import NamedTuple

from image_tfrecords.core import storage
from image_tfrecords.core.chunks import ManifestSource
from image_tfrecords.core.inputs.folder import IMAGE_EXTENSIONS, everything_under
from image_tfrecords.core.inputs.hf_imagefolder import HfMetadataFormat, listed_images
from image_tfrecords.core.inputs.input_format import plain_name
from image_tfrecords.core.inputs.rows import ManifestError, normalise_path
from image_tfrecords.core.inputs.yolo import CLASSES_FILE, YoloDataset, YoloFormat, label_path
from image_tfrecords.core.splits import normalise_split

_METADATA_FILES = ("metadata.jsonl", "metadata.csv")
# The datasets library reads these too; this converter does not.
_UNREAD_METADATA_FILES = ("metadata.parquet",)
# Where a YOLO folder's classes.txt stands: its root (Label Studio's export, labelImg
# beside the images), or its labels folder (labelImg's save folder).
_CLASSES_FILE_PLACES = (CLASSES_FILE, f"labels/{CLASSES_FILE}")
# The images not in a metadata file that the console names (it counts them all).
_UNLISTED_SHOWN = 3


class FolderReading(NamedTuple):
    """How a folder is read, where it is not class folders: its sources, and the line
    the console says it in."""

    sources: tuple[ManifestSource, ...]
    said: str
    notes: tuple[str, ...] = ()  # the console's further lines: what the reading leaves out


def read_folder_as(root: str, relatives: list[str]) -> FolderReading | None:
    """The sources a folder holds, with the console's line; None for class folders.
    `relatives`: every file's path under `root` (folder.relative_files)."""
    for reading in (_hf_imagefolder, _yolo_classes_folder):
        found = reading(root.rstrip("/"), relatives)
        if found:
            return found
    return None


def relative_files(root: str) -> list[str]:
    """Every file under `root`, its path relative to `root`, hidden ones left out (as the
    datasets library leaves them out)."""
    root = root.rstrip("/")
    relatives = (metadata.path[len(root) + 1:]
                 for metadata in storage.match(everything_under(root)))
    return sorted(relative for relative in relatives
                  if not any(part.startswith(".") for part in relative.split("/")))


def _hf_imagefolder(root: str, relatives: list[str]) -> FolderReading | None:
    metadata = [relative for relative in relatives if plain_name(relative) in _METADATA_FILES]
    unread = [relative for relative in relatives
              if plain_name(relative) in _UNREAD_METADATA_FILES]
    if unread and not metadata:
        raise ManifestError(f"{root} is a Hugging Face imagefolder whose metadata is "
                            f"{unread[0]}, which is not read: write it as metadata.jsonl")
    if not metadata:
        return None
    kinds = sorted({plain_name(relative) for relative in metadata})
    if len(kinds) > 1:  # the datasets library refuses this too
        raise ManifestError(f"{root} is a Hugging Face imagefolder with both {kinds[0]} and "
                            f"{kinds[1]} files: keep one kind")
    sources = tuple(ManifestSource(storage.join(root, relative), HfMetadataFormat.name,
                                   _metadata_split(root, relative)) for relative in metadata)
    return FolderReading(sources, f"reading {root} as a Hugging Face imagefolder: its "
                         f"{kinds[0]} ({_splits_said(root, sources)})",
                         _unlisted_images_said(root, relatives, sources))


def _unlisted_images_said(root: str, relatives: list[str],
                          sources: tuple[ManifestSource, ...]) -> tuple[str, ...]:
    """The console's line on the images under `root` that no metadata file names: they
    are not read, so a user who added images without metadata lines learns it."""
    listed = set().union(*(listed_images(source.path) for source in sources))
    images = (normalise_path(storage.join(root, relative)) for relative in relatives
              if relative.lower().endswith(IMAGE_EXTENSIONS))
    unlisted = [image for image in images if image not in listed]
    if not unlisted:
        return ()
    first = ", ".join(unlisted[:_UNLISTED_SHOWN]) + (
        ", ..." if len(unlisted) > _UNLISTED_SHOWN else "")
    many = len(unlisted) != 1
    return (f"{len(unlisted)} image{'s' * many} under {root} {'are' if many else 'is'} in "
            f"no metadata file and {'were' if many else 'was'} not read: {first}",)


def _metadata_split(root: str, relative: str) -> str | None:
    """The split of the folders a metadata file is in: the first of them named like a
    split (`train/`, `data/train/`, as the datasets library's `**/train/**` patterns find
    them), or for one at the root the root's own name (`--image_folder ds/train`); None
    (a split per row, by hash) where none is."""
    folders = relative.split("/")[:-1] or [storage.split(root)[1]]
    return next((split for folder in folders if (split := normalise_split(folder))), None)


def _yolo_classes_folder(root: str, relatives: list[str]) -> FolderReading | None:
    places = [place for place in _CLASSES_FILE_PLACES if place in relatives]
    if not places or not _has_yolo_labels(root, relatives):
        return None
    yaml_files = [relative for relative in relatives
                  if "/" not in relative and relative.endswith((".yaml", ".yml"))]
    if yaml_files:
        raise ManifestError(f"{root} is a YOLO dataset whose classes both {places[0]} and "
                            f"{yaml_files[0]} may name: pass the data.yaml, --manifest "
                            f"{storage.join(root, yaml_files[0])} --label_mode detection")
    classes_file = storage.join(root, places[0])
    dataset = YoloDataset.load(classes_file)
    if None in dataset.entries:
        splits = ("it has no split folders: each image's split is drawn from a hash of "
                  "its path (--split_fractions)")
    else:
        splits = ", ".join(f"{entry}/ as {split.upper()}"
                           for split, entries in dataset.entries.items() for entry in entries)
    return FolderReading(
        (ManifestSource(classes_file, YoloFormat.name),),
        f"reading {root} as a YOLO dataset: the {len(dataset.names)} classes of {places[0]} "
        f"(line i is class id i), labels in labels/ or beside the images; {splits}")


def _has_yolo_labels(root: str, relatives: list[str]) -> bool:
    """Whether an image has a label file where YOLO looks for it (yolo.label_path): not
    only some README.txt beside a classes.txt."""
    files = set(relatives)
    return any(label_path(storage.join(root, relative))[len(root) + 1:] in files
               for relative in relatives if relative.lower().endswith(IMAGE_EXTENSIONS))


def _splits_said(root: str, sources: tuple[ManifestSource, ...]) -> str:
    return ", ".join(
        f"{source.path[len(root) + 1:]} as "
        + (source.split.upper() if source.split else "splits drawn by a hash of each image "
           "(it is in no split folder)")
        for source in sources)
