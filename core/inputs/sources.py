"""The input formats, registered once, and what `--manifest` names: the sources to read,
each with its format, and the rows of a chunk of one (core/records/chunks.py). Free of Beam, so
that worker processes parse the rows.

An input format is one module in core/inputs/ with one InputFormat subclass
(input_format.py), listed in FORMATS; nothing else here or elsewhere names a format
(tests/test_format_modules.py checks it). A source's format is the one --input_format
names; otherwise it is sniffed: the formats whose `suffixes` the file's name has, then,
where those are several, the ones that recognise its first bytes. Two that recognise it
make the input ambiguous: refused, naming both and --input_format. A folder or a glob
is asked of the formats in turn, each in FORMATS' order: first for a glob of its files
(annotation_glob: VOC's XMLs, KITTI's label files), then for its files in the folder
(folder_glob: LabelMe's JSONs), then for the files its layout holds (folder_reading: a
Hugging Face imagefolder's metadata, a YOLO folder's classes.txt). Adding a format is one
module, one line below and its tests. `--manifest SPLIT=PATH` gives every row of PATH
that split.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

from image_tfrecords.core.inputs.automl_csv import CsvFormat
from image_tfrecords.core.inputs.coco import CocoFormat
from image_tfrecords.core.inputs.coco_panoptic import CocoPanopticFormat
from image_tfrecords.core.inputs.createml import CreateMlFormat
from image_tfrecords.core.inputs.cvat import CvatFormat
from image_tfrecords.core.inputs.folder import ImageFolderFormat, class_folders
from image_tfrecords.core.inputs.hf_imagefolder import HfMetadataFormat
from image_tfrecords.core.inputs.input_format import (
    DeclaredClasses,
    FileHead,
    FolderReading,
    InputFormat,
    is_glob,
    plain_name,
)
from image_tfrecords.core.inputs.kitti import KittiFormat
from image_tfrecords.core.inputs.label_studio import LabelStudioFormat
from image_tfrecords.core.inputs.labelme import LabelMeFormat
from image_tfrecords.core.inputs.list_file import ListFileFormat
from image_tfrecords.core.inputs.open_images import OpenImagesFormat
from image_tfrecords.core.inputs.retinanet_csv import RetinaNetCsvFormat
from image_tfrecords.core.inputs.rows import (
    ManifestError,
    ManifestItem,
    RowRules,
    assign_split,
    label_problem,
)
from image_tfrecords.core.inputs.vertex_jsonl import VertexJsonlFormat
from image_tfrecords.core.inputs.via import ViaFormat
from image_tfrecords.core.inputs.voc import VocFormat
from image_tfrecords.core.inputs.yolo import YoloFormat
from image_tfrecords.core.records import split_plan
from image_tfrecords.core.records.chunks import ManifestSource, RowChunk
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.core.records.splits import normalise_split
from image_tfrecords.core.storage import storage
from image_tfrecords.core.storage.redaction import redacted

# Where a file's name fits several formats and its content none, the first listed reads it.
FORMATS: dict[str, InputFormat] = {
    format.name: format
    for format in (
        VocFormat(),
        CvatFormat(),
        HfMetadataFormat(),
        VertexJsonlFormat(),
        CocoFormat(),
        CocoPanopticFormat(),
        CreateMlFormat(),
        LabelStudioFormat(),
        LabelMeFormat(),
        YoloFormat(),
        CsvFormat(),
        KittiFormat(),
        OpenImagesFormat(),
        RetinaNetCsvFormat(),
        ImageFolderFormat(),
        ViaFormat(),
        ListFileFormat(),
    )
}
# What --input_format may name.
MANIFEST_FORMATS = tuple(name for name, format in FORMATS.items() if format.chosen_by_input_format)
# Names of files, not folders, whatever else they are.
_FILE_SUFFIXES = tuple(
    sorted({suffix for format in FORMATS.values() for suffix in format.suffixes})
)
# What a name no format's suffixes claim is read as.
_DEFAULT_FORMAT = next(name for name, format in FORMATS.items() if format.reads_unclaimed_names)
# What a folder given to --manifest that holds no format's files is said to lack.
_FOLDER_FILES = " or ".join(
    sorted(format.folder_files for format in FORMATS.values() if format.folder_files)
)


def split_and_path(argument: str) -> tuple[str | None, str]:
    """--manifest's value -> (the split SPLIT=PATH gives, or None; the path).

    Only a split name (any case; val, valid, eval, dev mean validation) before the first
    `=` makes SPLIT=PATH, so gs://b/x=1/m.csv stays a path.
    """
    name, equals, path = argument.partition("=")
    split = normalise_split(name) if equals and path else None
    return (split, path) if split else (None, argument)


def find_manifests(
    arguments: Iterable[str],
    input_format: str | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> list[ManifestSource]:
    """--manifest values (paths, globs, SPLIT=PATH, folders of a format's files, folders
    that hold a dataset's files) -> the sources to read, each in `input_format` or its
    sniffed format; fails clearly for one that matches nothing or whose format is
    ambiguous. `say` is given the console's line for a folder read as the files it holds
    (InputFormat.folder_reading)."""
    found: set[ManifestSource] = set()
    for argument in arguments:
        split, path = split_and_path(argument)
        globbed = _one_file_per_image(path, input_format)
        files = [] if globbed else _files_in_folder(path, input_format)
        held = _held_sources(path, input_format) if not globbed and not files else None
        if held:
            say(
                held.said
                + (
                    f"; {argument.partition('=')[0]}= gives every row {split.upper()}"
                    if split
                    else ""
                )
            )
            for note in held.notes:
                say(note)
            found.update(source._replace(split=split or source.split) for source in held.sources)
            continue
        if not globbed and not files:  # claimed by no format: maybe a part of a dataset
            _refuse_a_part_of_a_dataset(argument, path, input_format)
        if not globbed and not files and _is_folder(path):
            raise ManifestError(
                f"--manifest {argument} is a folder without {_FOLDER_FILES} files: "
                f"give a manifest file, or --image_folder {path} for images in class folders"
            )
        if globbed:
            if not storage.match(globbed[1]):
                raise ManifestError(f"manifest not found: {argument}")
            found.add(ManifestSource(globbed[1], globbed[0], split))
            continue
        paths = [found.path for found in files or storage.match(path)]
        if not paths:
            raise ManifestError(f"manifest not found: {argument}")
        found.update(ManifestSource(each, input_format or format_of(each), split) for each in paths)
    return sorted(found, key=lambda source: (source.path, source.split or ""))


def _refuse_a_part_of_a_dataset(argument: str, path: str, input_format: str | None) -> None:
    """ManifestError where `path` is a part of a dataset that is read through another file
    (InputFormat.given_in_part), naming the format and what to pass instead: read as a
    manifest, each of its lines would be a dead letter pointing elsewhere."""
    if input_format is not None:
        return
    if is_glob(path):  # as its first file
        path = next((found.path for found in storage.match(path, limit=1)), None)
        if path is None:
            return
    relatives = relative_files(path) if _is_folder(path) else None
    for format in FORMATS.values():
        if instead := format.given_in_part(path, relatives):
            raise ManifestError(f"--manifest {argument}: {instead}")


def _asked(input_format: str | None) -> list[InputFormat]:
    """The formats a path may be in: the one --input_format names, else every one."""
    return [format for format in FORMATS.values() if input_format in (None, format.name)]


def _one_file_per_image(path: str, input_format: str | None) -> tuple[str, str] | None:
    """(format, glob) where `path` names annotation files of one image each, read as one
    source (InputFormat.annotation_glob)."""
    for format in _asked(input_format):
        glob = format.annotation_glob(path, chosen=input_format == format.name)
        if glob:
            return format.name, glob
    return None


def _held_sources(path: str, input_format: str | None) -> FolderReading | None:
    """The sources a folder holds (InputFormat.folder_reading) and the console's line;
    None for a file, a glob, a folder that holds none, or one in another format than
    --input_format names."""
    if not _is_folder(path):
        return None
    reading = read_folder_as(path, relative_files(path))
    if not reading or input_format not in (None, *(s.format for s in reading.sources)):
        return None
    return reading


def read_folder_as(root: str, relatives: list[str]) -> FolderReading | None:
    """The sources a folder holds, with the console's line; None for class folders.
    `relatives`: every file's path under `root` (relative_files)."""
    for format in FORMATS.values():
        found = format.folder_reading(root, relatives)
        if found:
            return found
    return None


def image_folder_sources(
    root: str, rules: RowRules, say: Callable[[str], None]
) -> tuple[list[ManifestSource], list[str]]:
    """--image_folder: (the manifests it holds (InputFormat.folder_reading: a Hugging
    Face imagefolder's metadata, a YOLO folder's classes.txt), said by `say`; or none
    for class folders, and the path of a file for the storage probe). Class folders
    whose layout reads two ways, or fits none, are refused (folder.class_folders)."""
    relatives = relative_files(root)
    reading = read_folder_as(root, relatives)
    if reading:
        for line in (reading.said, *reading.notes):
            say(line)
        return list(reading.sources), []
    return [], [class_folders(root, relatives, rules, say)]


def class_folders_source(root: str) -> ManifestSource:
    """The one source of --image_folder's class folders, as the job reads it."""
    return ManifestSource(root, ImageFolderFormat.name)


def relative_files(root: str) -> list[str]:
    """Every file under `root`, its path relative to `root`, hidden ones left out (as the
    datasets library leaves them out)."""
    root = root.rstrip("/")
    relatives = (
        metadata.path[len(root) + 1 :] for metadata in storage.match(storage.everything_under(root))
    )
    return sorted(
        relative
        for relative in relatives
        if not any(part.startswith(".") for part in relative.split("/"))
    )


def _files_in_folder(path: str, input_format: str | None) -> list:
    """A folder's files of a format whose files are one per image (InputFormat.folder_glob:
    LabelMe's JSONs; any such file of the format --input_format names); none for a file
    or a glob."""
    if is_glob(path) or plain_name(path).endswith(_FILE_SUFFIXES):
        return []
    for format in _asked(input_format):
        if format.folder_glob:
            files = [
                found
                for found in storage.match(storage.join(path, format.folder_glob))
                if (input_format or format_of(found.path)) == format.name
            ]
            if files:
                return files
    return []


def _is_folder(path: str) -> bool:
    """Whether `path` names a folder (a name prefix with files below it, on a bucket)
    rather than a file."""
    if is_glob(path):
        return False
    if storage.is_local(path):
        return os.path.isdir(path)
    return not storage.match(path) and bool(storage.match(storage.join(path, "**"), limit=1))


def is_annotation_folder(path: str) -> bool:
    """Whether the folder `path` is one some format reads as a glob of its annotation
    files (InputFormat.annotation_glob), so a manifest, not an image folder."""
    return any(format.annotation_glob(path, chosen=False) for format in FORMATS.values())


def format_of(path: str) -> str:
    """The name of the format that reads the file at `path` (see the module's doc)."""
    name = plain_name(path)
    candidates = [
        format for format in FORMATS.values() if format.suffixes and name.endswith(format.suffixes)
    ]
    if len(candidates) < 2:
        return candidates[0].name if candidates else _DEFAULT_FORMAT
    head = FileHead.read(path)
    recognised = [format for format in candidates if format.recognises(head)]
    if len(recognised) > 1:
        raise ManifestError(
            f"{path} could be read as {' or as '.join(f.title for f in recognised)}: name "
            f"its format with --input_format ({' or '.join(f.name for f in recognised)})"
        )
    return (recognised or candidates)[0].name


def check_sources(sources: Sequence[ManifestSource], rules: RowRules) -> None:
    """Each source's format's checks before the job; raises ManifestError."""
    for source in sources:
        FORMATS[source.format].check(source, rules)


def class_declarations(sources: Sequence[ManifestSource]) -> list[DeclaredClasses | None]:
    """What each source declares (None: no classes); ManifestError for a declaration
    that cannot give ids: no class, an empty name, a name that two ids share, or one no
    label can be (over the label limit, or breaking lines: see rows.label_problem)."""
    found = [FORMATS[source.format].declared_classes(source) for source in sources]
    for declared in filter(None, found):
        repeated = sorted(name for name, count in Counter(declared.labels).items() if count > 1)
        unlabelled = next(filter(None, map(label_problem, declared.labels)), None)
        problem = (
            unlabelled[1]
            if unlabelled  # first: it bounds what the others quote
            else f"{', '.join(map(repr, repeated))} twice"
            if repeated
            else "no class"
            if not declared.labels
            else "an empty name"
            if not all(declared.labels)
            else None
        )
        if problem:
            raise ManifestError(
                f"{declared.declared_by} declares classes that cannot be ids: {problem}"
            )
    return found


def one_declaration(declarations: Iterable[DeclaredClasses | None]) -> DeclaredClasses:
    """Declarations of the same classes as one, naming the first file and how many
    others; ManifestError naming two that differ."""
    by_labels: dict[tuple[str, ...], list[DeclaredClasses]] = {}
    for declared in filter(None, declarations):
        by_labels.setdefault(declared.labels, []).append(declared)
    if len(by_labels) > 1:
        first, second = (found[0] for found in by_labels.values())
        raise ManifestError(
            f"{first.declared_by} and {second.declared_by} declare different classes "
            f"({_first_difference(first.labels, second.labels)}): convert them apart, or "
            "give the ids of both with --vocabulary FILE"
        )
    (found,) = by_labels.values()
    others = len({declared.declared_by for declared in found}) - 1
    return found[0]._replace(
        declared_by=found[0].declared_by
        + (f" and {others} other file{'s' * (others > 1)}" if others else "")
    )


def _first_difference(first: Sequence[str], second: Sequence[str]) -> str:
    for class_id, (one, other) in enumerate(zip(first, second, strict=False)):
        if one != other:
            return f"class {class_id + 1} of the one is {one!r}, of the other {other!r}"
    return f"{len(first)} classes in one, {len(second)} in the other"


def read_source(source: ManifestSource, rules: RowRules = RowRules()) -> Iterator[ManifestItem]:
    return read_chunk(RowChunk(source), rules)


def read_chunk(chunk: RowChunk, rules: RowRules) -> Iterator[ManifestItem]:
    items = FORMATS[chunk.source.format].checked_rows(chunk.source, rules, chunk.lines)
    return items if rules.split_plan is None else _planned(items, rules.split_plan, rules)


def _planned(items: Iterable[ManifestItem], plan: str, rules: RowRules) -> Iterator[ManifestItem]:
    """The rows, each with its image's split in the grouped split's plan (--split_by
    groups); an image the plan does not hold (its staging pass wrote no example of it)
    keeps a split from the hash of its URI."""
    splits = split_plan.planned_splits(plan)
    for item in items:
        if isinstance(item, ManifestRow):
            uri = redacted(item.uri)
            item = item._replace(split=splits.get(uri) or assign_split(uri, rules.split_fractions))
        yield item


def read_manifest(
    path: str, rules: RowRules = RowRules(), split: str | None = None
) -> Iterator[ManifestItem]:
    """Every row of one manifest file, in its sniffed format, as read_source reads it.

    Rows without a split (UNASSIGNED, empty, or no split column) get `split` when given
    (--manifest SPLIT=PATH), else one from assign_split with the rules' split fractions.
    """
    return read_source(ManifestSource(path, format_of(path), split), rules)
