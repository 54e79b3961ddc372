"""The input formats, registered once, and what `--manifest` names: the sources to read,
each with its format, and the rows of a chunk of one (core/chunks.py). Free of Beam, so
that worker processes parse the rows.

An input format is one module in core/inputs/ with one InputFormat subclass
(input_format.py), listed in FORMATS. A source's format is the one --input_format names;
otherwise it is sniffed: the formats whose `suffixes` the file's name has, then, where
those are several, the ones that recognise its first bytes. Two that recognise it make
the input ambiguous: refused, naming both and --input_format. Adding a format is one
module, one line below and its tests. `--manifest SPLIT=PATH` gives every row of PATH
that split.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

from image_tfrecords.core import storage
from image_tfrecords.core.chunks import ManifestSource, RowChunk
from image_tfrecords.core.inputs.automl_csv import CsvFormat
from image_tfrecords.core.inputs.coco import CocoFormat
from image_tfrecords.core.inputs.coco_panoptic import CocoPanopticFormat
from image_tfrecords.core.inputs.cvat import CvatFormat
from image_tfrecords.core.inputs.folder import ImageFolderFormat
from image_tfrecords.core.inputs.folder_kinds import FolderReading, read_folder_as, relative_files
from image_tfrecords.core.inputs.hf_imagefolder import HfMetadataFormat
from image_tfrecords.core.inputs.input_format import DeclaredClasses, FileHead, InputFormat, plain_name
from image_tfrecords.core.inputs.kitti import KittiFormat, kitti_glob
from image_tfrecords.core.inputs.label_studio import LabelStudioFormat
from image_tfrecords.core.inputs.labelme import LabelMeFormat
from image_tfrecords.core.inputs.open_images import OpenImagesFormat
from image_tfrecords.core.inputs.rows import (ManifestError, ManifestItem, RowRules, label_problem,
                                labels_checked)
from image_tfrecords.core.inputs.vertex_jsonl import VertexJsonlFormat
from image_tfrecords.core.inputs.voc import VocFormat, xml_glob
from image_tfrecords.core.inputs.yolo import YoloFormat
from image_tfrecords.core.splits import normalise_split

# Where a file's name fits several formats and its content none, the first listed reads it.
FORMATS: dict[str, InputFormat] = {format.name: format for format in (
    VocFormat(),
    CvatFormat(),
    HfMetadataFormat(),
    VertexJsonlFormat(),
    CocoFormat(),
    CocoPanopticFormat(),
    LabelStudioFormat(),
    LabelMeFormat(),
    YoloFormat(),
    CsvFormat(),
    KittiFormat(),
    OpenImagesFormat(),
    ImageFolderFormat(),
)}
# What --input_format may name.
MANIFEST_FORMATS = tuple(name for name in FORMATS if name != ImageFolderFormat.name)
# Names of files, not folders, whatever else they are.
_FILE_SUFFIXES = (".csv", ".tsv", ".txt", ".json", ".jsonl", ".xml", ".yaml", ".yml")
# What a name no format's suffixes claim is read as.
_DEFAULT_FORMAT = CsvFormat.name


def split_and_path(argument: str) -> tuple[str | None, str]:
    """--manifest's value -> (the split SPLIT=PATH gives, or None; the path).

    Only a split name (any case; val, valid, eval, dev mean validation) before the first
    `=` makes SPLIT=PATH, so gs://b/x=1/m.csv stays a path.
    """
    name, equals, path = argument.partition("=")
    split = normalise_split(name) if equals and path else None
    return (split, path) if split else (None, argument)


def find_manifests(arguments: Iterable[str], input_format: str | None = None,
                   say: Callable[[str], None] = lambda line: None) -> list[ManifestSource]:
    """--manifest values (paths, globs, SPLIT=PATH, VOC and KITTI folders, folders that
    hold a dataset's files) -> the sources to read, each in `input_format` or its sniffed
    format; fails clearly for one that matches nothing or whose format is ambiguous. `say`
    is given the console's line for a folder read as the files it holds (folder_kinds.py)."""
    found: set[ManifestSource] = set()
    for argument in arguments:
        split, path = split_and_path(argument)
        globbed = _one_file_per_image(path, input_format)
        labelme = [] if globbed else _labelme_files(path, input_format)
        held = _held_sources(path, input_format) if not globbed and not labelme else None
        if held:
            say(held.said + (f"; {argument.partition('=')[0]}= gives every row "
                             f"{split.upper()}" if split else ""))
            for note in held.notes:
                say(note)
            found.update(source._replace(split=split or source.split)
                         for source in held.sources)
            continue
        if not globbed and not labelme and _is_folder(path):
            raise ManifestError(
                f"--manifest {argument} is a folder without LabelMe JSON or VOC XML files: "
                f"give a manifest file, or --image_folder {path} for images in class folders")
        if globbed:
            if not storage.match(globbed[1]):
                raise ManifestError(f"manifest not found: {argument}")
            found.add(ManifestSource(globbed[1], globbed[0], split))
            continue
        paths = [found.path for found in labelme or storage.match(path)]
        if not paths:
            raise ManifestError(f"manifest not found: {argument}")
        found.update(ManifestSource(each, input_format or format_of(each), split)
                     for each in paths)
    return sorted(found, key=lambda source: (source.path, source.split or ""))


def _one_file_per_image(path: str, input_format: str | None) -> tuple[str, str] | None:
    """(format, glob) where `path` names annotation files of one image each, read as one
    source: a folder or glob of VOC XMLs, or of KITTI label files (their folder, or a
    KITTI root). One file is sniffed as any other (a CVAT XML is one file too)."""
    if input_format in (None, VocFormat.name):
        voc = xml_glob(path)
        if voc and (voc != path or _is_glob(path)):
            return VocFormat.name, voc
    if input_format in (None, KittiFormat.name):
        kitti = kitti_glob(path, chosen=input_format == KittiFormat.name)
        if kitti:
            return KittiFormat.name, kitti
    return None


def _held_sources(path: str, input_format: str | None) -> FolderReading | None:
    """The sources a folder holds (a Hugging Face imagefolder's metadata, a YOLO folder's
    classes.txt) and the console's line; None for a file, a glob, a folder that holds
    neither, or one in another format than --input_format names."""
    if not _is_folder(path):
        return None
    reading = read_folder_as(path, relative_files(path))
    if not reading or input_format not in (None, *(s.format for s in reading.sources)):
        return None
    return reading


def _labelme_files(path: str, input_format: str | None) -> list:
    """A folder's LabelMe JSON files (one per image; any JSON with --input_format labelme);
    none for a file or a glob."""
    if _is_glob(path) or plain_name(path).endswith(_FILE_SUFFIXES):
        return []
    return [found for found in storage.match(storage.join(path, "*.json"))
            if (input_format or format_of(found.path)) == LabelMeFormat.name]


def _is_folder(path: str) -> bool:
    """Whether `path` names a folder (a name prefix with files below it, on a bucket)
    rather than a file."""
    if _is_glob(path):
        return False
    if storage.is_local(path):
        return os.path.isdir(path)
    return not storage.match(path) and bool(storage.match(storage.join(path, "**"), limit=1))


def _is_glob(path: str) -> bool:
    return any(char in path for char in "*?[")


def format_of(path: str) -> str:
    """The name of the format that reads the file at `path` (see the module's doc)."""
    name = plain_name(path)
    candidates = [format for format in FORMATS.values()
                  if format.suffixes and name.endswith(format.suffixes)]
    if len(candidates) < 2:
        return candidates[0].name if candidates else _DEFAULT_FORMAT
    head = FileHead.read(path)
    recognised = [format for format in candidates if format.recognises(head)]
    if len(recognised) > 1:
        raise ManifestError(
            f"{path} could be read as {' or as '.join(f.title for f in recognised)}: name "
            f"its format with --input_format ({' or '.join(f.name for f in recognised)})")
    return (recognised or candidates)[0].name


def check_sources(sources: Sequence[ManifestSource], rules: RowRules) -> None:
    """Each source's format's checks before the job; raises ManifestError."""
    for source in sources:
        if source.format != "csv" and (rules.uri_column or rules.label_column
                                       or rules.split_column):
            raise ManifestError(f"{source.path} is {FORMATS[source.format].title}: "
                                "--uri_column, --label_column and --split_column name "
                                "columns of CSV manifests only")
        FORMATS[source.format].check(source, rules)


def class_declarations(sources: Sequence[ManifestSource]) -> list[DeclaredClasses | None]:
    """What each source declares (None: no classes); ManifestError for a declaration
    that cannot give ids: no class, an empty name, a name that two ids share, or one no
    label can be (over the label limit, or breaking lines: see rows.label_problem)."""
    found = [FORMATS[source.format].declared_classes(source) for source in sources]
    for declared in filter(None, found):
        repeated = sorted(name for name, count in Counter(declared.labels).items() if count > 1)
        unlabelled = next(filter(None, map(label_problem, declared.labels)), None)
        problem = (unlabelled[1] if unlabelled  # first: it bounds what the others quote
                   else f"{', '.join(map(repr, repeated))} twice" if repeated
                   else "no class" if not declared.labels
                   else "an empty name" if not all(declared.labels) else None)
        if problem:
            raise ManifestError(f"{declared.declared_by} declares classes that cannot be "
                                f"ids: {problem}")
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
            "give the ids of both with --vocabulary FILE")
    (found,) = by_labels.values()
    others = len({declared.declared_by for declared in found}) - 1
    return found[0]._replace(declared_by=found[0].declared_by + (
        f" and {others} other file{'s' * (others > 1)}" if others else ""))


def _first_difference(first: Sequence[str], second: Sequence[str]) -> str:
    for class_id, (one, other) in enumerate(zip(first, second, strict=False)):
        if one != other:
            return f"class {class_id + 1} of the one is {one!r}, of the other {other!r}"
    return f"{len(first)} classes in one, {len(second)} in the other"


def read_source(source: ManifestSource, rules: RowRules = RowRules()
                ) -> Iterator[ManifestItem]:
    return read_chunk(RowChunk(source), rules)


def read_chunk(chunk: RowChunk, rules: RowRules) -> Iterator[ManifestItem]:
    return labels_checked(FORMATS[chunk.source.format].read(chunk.source, rules, chunk.lines),
                          rules)


def read_manifest(path: str, rules: RowRules = RowRules(), split: str | None = None
                  ) -> Iterator[ManifestItem]:
    """Every row of one manifest file, in its sniffed format, as read_source reads it.

    Rows without a split (UNASSIGNED, empty, or no split column) get `split` when given
    (--manifest SPLIT=PATH), else one from assign_split with the rules' split fractions.
    """
    return read_source(ManifestSource(path, format_of(path), split), rules)
