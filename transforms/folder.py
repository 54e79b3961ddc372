"""Reads an image folder, `ROOT/<SPLIT>/<label>/<file>` or `ROOT/<label>/<file>`, as rows.

The folder is listed by a worker with Beam's FileSystems.match (`ROOT/**`: the same on
local disks and buckets, which have no real directories), never walked by the launcher.
Each image becomes a ManifestRow, so the rest of the pipeline treats it like a CSV row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms.dead_letters import DeadLetter
from transforms.manifest import (DEAD_LETTERS, DEFAULT_SPLIT_FRACTIONS, SPLITS, ManifestError,
                                 ManifestRow, assign_split)

NOT_IN_LABEL_FOLDER = "not_in_label_folder"
# What Keras' image_dataset_from_directory reads too; other files (.DS_Store, notes) are
# not images a user meant to convert.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp")


def check_folder(root: str) -> None:
    """Fails clearly when `root` holds no file at all; lists at most one file to tell."""
    if not FileSystems.match([_everything_under(root)], limits=[1])[0].metadata_list:
        raise ManifestError(f"image folder not found or empty: {root}")


def folder_rows(root: str, split_fractions: Sequence[float] = DEFAULT_SPLIT_FRACTIONS
                ) -> Iterator[ManifestRow | DeadLetter]:
    """Every image file under `root` as a ManifestRow; a file at the wrong depth as a DeadLetter.

    `line` is 0 and `raw` the path relative to `root`: a folder has no lines.
    """
    root = root.rstrip("/")
    for metadata in FileSystems.match([_everything_under(root)])[0].metadata_list:
        relative = metadata.path[len(root) + 1:]
        name = relative.rsplit("/", 1)[-1]
        if name.startswith(".") or not name.lower().endswith(IMAGE_EXTENSIONS):
            continue
        parts = relative.split("/")
        if len(parts) == 3 and parts[0].lower() in SPLITS:
            yield ManifestRow(root, 0, relative, parts[0].lower(), metadata.path, (parts[1],))
        elif len(parts) == 2:
            yield ManifestRow(root, 0, relative, assign_split(relative, split_fractions),
                              metadata.path, (parts[0],))
        else:
            yield DeadLetter(root, 0, relative, metadata.path, "", NOT_IN_LABEL_FOLDER,
                             "expected ROOT/<label>/<file> or ROOT/<split>/<label>/<file> "
                             f"with <split> one of {', '.join(SPLITS)}")


def _everything_under(root: str) -> str:
    return f"{root.rstrip('/')}/**"


class _ListFolder(beam.DoFn):
    def __init__(self, split_fractions: Sequence[float]) -> None:
        self._split_fractions = tuple(split_fractions)
        self._rows_read = Metrics.counter("folder", "images_listed")

    def process(self, root: str) -> Iterator[ManifestRow | beam.pvalue.TaggedOutput]:
        for item in folder_rows(root, self._split_fractions):
            self._rows_read.inc()
            if isinstance(item, DeadLetter):
                yield beam.pvalue.TaggedOutput(DEAD_LETTERS, item)
            else:
                yield item


class ReadImageFolder(beam.PTransform):
    """An image folder -> ManifestRows (main output) and DeadLetters (DEAD_LETTERS)."""

    def __init__(self, root: str,
                 split_fractions: Sequence[float] = DEFAULT_SPLIT_FRACTIONS) -> None:
        super().__init__()
        self._root = root
        self._split_fractions = split_fractions

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        return (pbegin
                | "Folder" >> beam.Create([self._root])
                | "ListImages" >> beam.ParDo(_ListFolder(self._split_fractions)).with_outputs(
                    DEAD_LETTERS, main="rows"))
