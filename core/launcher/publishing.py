"""The files of publishing: shards named, what is staged listed and swapped into the
output folder whole, and the run's temp folders removed (as Beam's FileBasedSink holds
the file operations that its WriteImpl, a PTransform, calls in order).

transforms/publish.py's PublishOutput decides when each runs; nothing here knows the
pipeline. Everything goes through Beam's FileSystems, so it works alike on local disks,
gs://, s3:// and hdfs://; the worker processes never import this module (Beam's import
is what core/storage/storage.py spares them). Object stores have no directories (a "directory"
is a name prefix) and no atomic rename of several files: summary.json, which readers
start from, is therefore removed first and written last (move_into_place, publish).
"""

from __future__ import annotations

import collections
import re
import shutil
from collections.abc import Iterable, Sequence

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from image_tfrecords.core.file_formats import ShardFormat
from image_tfrecords.core.records import naming
from image_tfrecords.core.records.naming import (
    DATASET_INFO_FILE,
    DUPLICATES,
    ERRORS,
    FEATURES_FILE,
    LABEL_MAP_FILE,
    LABELS_SUFFIX,
    NEAR_DUPLICATES,
    REPORT_FILE,
    SUMMARY_FILE,
    staged_dir,
)
from image_tfrecords.core.records.records import ShardWritten
from image_tfrecords.core.records.splits import SPLITS

_RAW = CompressionTypes.UNCOMPRESSED  # copies keep bytes as they are, whatever the name


def name_shards(
    shards: Iterable[ShardWritten], shard_format: ShardFormat
) -> dict[str, list[tuple[str, ShardWritten]]]:
    """split -> [(final file name, shard)] for the non-empty shards, in shard order.

    Names follow the shards actually written (`split-IIIII-of-NNNNN`), so a planned
    shard that got no image leaves no gap.
    """
    suffix = shard_format.suffix
    by_split: dict[str, list[ShardWritten]] = collections.defaultdict(list)
    for shard in sorted(shards, key=lambda s: (s.split, s.shard)):
        if shard.examples:
            by_split[shard.split].append(shard)
    return {
        split: [
            (naming.PublishedShard(split, index, len(split_shards), suffix).name, shard)
            for index, shard in enumerate(split_shards)
        ]
        for split, split_shards in by_split.items()
    }


def staged_files(temp_dir: str) -> list[str]:
    """The files under staged_dir(temp_dir), by their paths relative to it."""
    staged = staged_dir(temp_dir)
    # (match may give the paths in another form than `staged`: absolute, say)
    marker = "/{}/{}/".format(*staged.rstrip("/").rsplit("/", 2)[-2:])  # <temp>/staged/
    return [
        m.path[m.path.index(marker) + len(marker) :]
        for m in FileSystems.match([FileSystems.join(staged, "**")])[0].metadata_list
    ]


def written_names(written: Iterable[object], stem: str) -> list[str]:
    """The names of the lists of `stem` (naming.jsonl_list) among the paths `written`."""
    return sorted(
        name
        for name in (FileSystems.split(str(path))[1] for path in written)
        if name.startswith(f"{stem}-")
    )


def write_text(path: str, text: str) -> None:
    with FileSystems.create(path) as out:
        out.write(text.encode())


# Everything a run publishes but summary.json; what matches and is not replaced is stale.
_PUBLISHED = (
    *(glob for split in SPLITS for glob in naming.shard_globs(split)),
    *(f"{folder}/**" for folder in naming.TRANSFORM_FOLDERS),
    *(naming.every_jsonl_list(stem) for stem in (ERRORS, DUPLICATES, NEAR_DUPLICATES)),
    REPORT_FILE,
    LABEL_MAP_FILE,
    DATASET_INFO_FILE,
    FEATURES_FILE,
    f"*{LABELS_SUFFIX}",
    f"{naming.SOURCES_DIR}/*",
)
# What readers start from: removed first, so none takes a half-swapped folder for whole
# (summary.json is written again last; the TFDS files come with the others).
_ENTRY_POINTS = (SUMMARY_FILE, DATASET_INFO_FILE)


def move_into_place(
    files: dict[str, list[tuple[str, ShardWritten]]],
    temp_dir: str,
    staged_files: Sequence[str],
    output_dir: str,
    companions: Sequence[str] = (),
) -> dict[str, str]:
    """Swaps this run's files into `output_dir`: the named temp shards, the files
    beside each named as it plus one of `companions` (ShardFormat.companions), and the
    `staged_files` (paths relative to staged_dir(temp_dir)).

    In this order: summary.json and dataset_info.json go, so no reader takes the folder
    for a whole output until the caller writes the new summary.json; then every file of
    an earlier run that this one does not replace, so none stands beside this run's;
    then the renames, undone if one fails. Safe to repeat after a retry: a file no longer
    in the temp folder was moved by the first try. Listings, not a request per file, say
    what is where. Returns what it moved (temp path -> final path), for move_back.
    """
    staged = staged_dir(temp_dir)
    destinations = {
        shard.temp_path + companion: FileSystems.join(output_dir, name + companion)
        for named in files.values()
        for name, shard in named
        for companion in ("", *companions)
    }
    in_temp_dir = {
        m.path for m in FileSystems.match([FileSystems.join(temp_dir, "**")])[0].metadata_list
    }
    # Each shard's example index with its thumbnails, where the run wrote one (not after
    # --dedupe rewrote the shards: RunSettings.writes_index).
    for named in files.values():
        for name, shard in named:
            index = naming.index_path(temp_dir, shard.split, shard.shard)
            if index in in_temp_dir:
                destinations[index] = naming.published_index(output_dir, name)
                destinations[naming.thumbnails_path(temp_dir, shard.split, shard.shard)] = (
                    naming.published_thumbnails(output_dir, name)
                )
    destinations |= {
        FileSystems.join(staged, name): FileSystems.join(output_dir, name) for name in staged_files
    }
    waiting = sorted(in_temp_dir & destinations.keys())
    arriving = {destinations[path] for path in waiting}
    present = {
        m.path
        for pattern in _PUBLISHED + _ENTRY_POINTS
        for m in FileSystems.match([FileSystems.join(output_dir, pattern)])[0].metadata_list
    }
    # The entry points (unless a retry moved the new one in already), then the stale.
    entry_points = {FileSystems.join(output_dir, name) for name in _ENTRY_POINTS}
    first = sorted(
        path
        for path in present & entry_points
        if path in arriving or path not in destinations.values()
    )
    stale = sorted(present - entry_points - set(destinations.values()))
    for paths in (first, stale):
        if paths:
            FileSystems.delete(paths)
    if FileSystems.get_filesystem(output_dir).has_dirs():  # local disks need the folders
        for folder in sorted({FileSystems.split(path)[0] for path in arriving}):
            if not FileSystems.exists(folder):
                FileSystems.mkdirs(folder)
    if not waiting:
        return {}
    moved = {path: destinations[path] for path in waiting}
    try:
        FileSystems.rename(waiting, list(moved.values()))
    except Exception:
        # Undo a partial swap: no split stands half-published, and a retry starts over.
        move_back(moved, temp_dir, output_dir)
        raise
    return moved


def publish(
    files: dict[str, list[tuple[str, ShardWritten]]],
    temp_dir: str,
    staged_files: Sequence[str],
    output_dir: str,
    companions: Sequence[str],
    summary_json: str,
) -> None:
    """move_into_place, then summary.json, which readers start from, written last. Where
    that write fails, the swap is undone as a failed rename undoes it: this run's files go
    back to the temp folder (a retry or --resume starts from them), none stays in
    `output_dir` under a name a reader or a later run would take for its own."""
    moved = move_into_place(files, temp_dir, staged_files, output_dir, companions)
    summary = FileSystems.join(output_dir, SUMMARY_FILE)
    try:
        write_text(summary, summary_json)
    except Exception:
        # A store may answer an error for a write it made: none may stand without its files.
        if FileSystems.exists(summary):
            FileSystems.delete([summary])
        move_back(moved, temp_dir, output_dir)
        raise


def move_back(moved: dict[str, str], temp_dir: str, output_dir: str) -> None:
    """Undoes a swap, or the part of it that was made: each file of `moved` (temp path
    -> final path) that left the temp folder is renamed back. What arrived is what left
    the temp folder: a file of the earlier output under the same name is not this run's
    to move."""
    still_waiting = {
        m.path: m.last_updated_in_seconds
        for m in FileSystems.match([FileSystems.join(temp_dir, "**")])[0].metadata_list
    }
    back = [path for path in moved if path not in still_waiting]
    if back:
        FileSystems.rename([moved[path] for path in back], back)
    if not FileSystems.get_filesystem(output_dir).has_dirs():
        _remove_landed_copies(
            {moved[path]: still_waiting[path] for path in moved if path in still_waiting},
            output_dir,
        )


def _remove_landed_copies(sources_updated: dict[str, float], output_dir: str) -> None:
    """Deletes the destinations (given with their source's time of writing) that were
    written after their source though the source is still in the temp folder: on an
    object store a rename is a copy and then a delete, and a copy that landed before its
    delete failed left this run's file under its final name.

    A file written before is an earlier output's, not this run's to touch. (Times, not
    checksums: a copy of an object uploaded in parts gets another S3 ETag.)
    """
    listed = FileSystems.match([FileSystems.join(output_dir, "**")])[0].metadata_list
    landed = [
        m.path
        for m in listed
        if m.path in sources_updated and m.last_updated_in_seconds >= sources_updated[m.path]
    ]
    if landed:
        FileSystems.delete(landed)


def remove_temp_dirs(output_dir: str, *folders: str) -> None:
    """Deletes `folders` (a published run's temp dirs) and the temp dirs of runs that
    crashed before publishing in `output_dir`."""
    # match lists files, not folders: a temp dir is found by the files in it
    crashed = {
        re.match(rf".*?/{re.escape(naming.TEMP_PREFIX)}[^/]+", m.path).group()
        for m in FileSystems.match([FileSystems.join(naming.every_temp_dir(output_dir), "**")])[
            0
        ].metadata_list
    }
    for folder in sorted({*folders, *crashed}):
        delete_tree(folder)


def copy_tree(source: str, destination: str) -> None:
    """Copies every file under `source` to the same place under `destination`, which may
    be on another filesystem (Beam's FileSystems.copy needs both on the same one)."""
    for metadata in FileSystems.match([FileSystems.join(source, "**")])[0].metadata_list:
        relative = metadata.path[len(source.rstrip("/")) + 1 :]
        with (
            FileSystems.open(metadata.path, compression_type=_RAW) as data,
            FileSystems.create(
                FileSystems.join(destination, relative), compression_type=_RAW
            ) as out,
        ):
            shutil.copyfileobj(data, out)


def delete_tree(folder: str) -> None:
    """Deletes `folder` and everything under it; nothing happens when there is none."""
    if FileSystems.get_filesystem(folder).has_dirs():  # local disks, HDFS
        if FileSystems.exists(folder):
            FileSystems.delete([folder])
    else:
        # An object store's folder is only a name prefix: with a trailing "/" Beam deletes
        # every object under it (none: nothing to do); without, it would look for one object.
        FileSystems.delete([folder.rstrip("/") + "/"])
