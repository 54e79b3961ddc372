"""The input formats, registered once, and what `--manifest` names: the sources to read,
each with its format, and the rows of a chunk of one (worker/chunks.py). Free of Beam, so
that worker processes parse the rows.

An input format is one module in worker/inputs/ with one InputFormat subclass
(input_format.py), listed in FORMATS. A source's format is the one --input_format names;
otherwise it is sniffed: the formats whose `suffixes` the file's name has, then, where
those are several, the ones that recognise its first bytes. Two that recognise it make
the input ambiguous: refused, naming both and --input_format. Adding a format is one
module, one line below and its tests. `--manifest SPLIT=PATH` gives every row of PATH
that split.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence

from worker import storage
from worker.chunks import ManifestSource, RowChunk
from worker.inputs.automl_csv import CsvFormat
from worker.inputs.coco import CocoFormat
from worker.inputs.cvat import CvatFormat
from worker.inputs.folder import ImageFolderFormat
from worker.inputs.folder_kinds import FolderReading, read_folder_as, relative_files
from worker.inputs.hf_imagefolder import HfMetadataFormat
from worker.inputs.input_format import FileHead, InputFormat, plain_name
from worker.inputs.label_studio import LabelStudioFormat
from worker.inputs.labelme import LabelMeFormat
from worker.inputs.rows import ManifestError, ManifestItem, RowRules
from worker.inputs.vertex_jsonl import VertexJsonlFormat
from worker.inputs.voc import VocFormat, xml_glob
from worker.inputs.yolo import YoloFormat
from worker.splits import normalise_split

# Where a file's name fits several formats and its content none, the first listed reads it.
FORMATS: dict[str, InputFormat] = {format.name: format for format in (
    VocFormat(),
    CvatFormat(),
    HfMetadataFormat(),
    VertexJsonlFormat(),
    CocoFormat(),
    LabelStudioFormat(),
    LabelMeFormat(),
    YoloFormat(),
    CsvFormat(),
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
    """--manifest values (paths, globs, SPLIT=PATH, VOC folders, folders that hold a
    dataset's files) -> the sources to read, each in `input_format` or its sniffed format;
    fails clearly for one that matches nothing or whose format is ambiguous. `say` is
    given the console's line for a folder read as the files it holds (folder_kinds.py)."""
    found: set[ManifestSource] = set()
    for argument in arguments:
        split, path = split_and_path(argument)
        # A folder or glob of VOC XMLs is one source; one XML file is sniffed (CVAT's too).
        voc = xml_glob(path) if input_format in (None, VocFormat.name) else None
        if voc == path and not _is_glob(path):
            voc = None
        labelme = [] if voc else _labelme_files(path, input_format)
        held = _held_sources(path, input_format) if not voc and not labelme else None
        if held:
            say(held.said + (f"; {argument.partition('=')[0]}= gives every row "
                             f"{split.upper()}" if split else ""))
            found.update(source._replace(split=split or source.split)
                         for source in held.sources)
            continue
        if not voc and not labelme and _is_folder(path):
            raise ManifestError(
                f"--manifest {argument} is a folder without LabelMe JSON or VOC XML files: "
                f"give a manifest file, or --image_folder {path} for images in class folders")
        paths = [voc] if voc else [found.path for found in labelme or storage.match(path)]
        if not paths or (voc and not storage.match(voc)):
            raise ManifestError(f"manifest not found: {argument}")
        found.update(ManifestSource(each, input_format or (VocFormat.name if voc
                                                           else format_of(each)), split)
                     for each in paths)
    return sorted(found, key=lambda source: (source.path, source.split or ""))


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
        if source.format != "csv" and (rules.uri_column or rules.label_column):
            raise ManifestError(f"{source.path}: --uri_column and --label_column name "
                                "columns of CSV manifests only")
        FORMATS[source.format].check(source, rules)


def read_source(source: ManifestSource, rules: RowRules = RowRules()
                ) -> Iterator[ManifestItem]:
    return read_chunk(RowChunk(source), rules)


def read_chunk(chunk: RowChunk, rules: RowRules) -> Iterator[ManifestItem]:
    return FORMATS[chunk.source.format].read(chunk.source, rules, chunk.lines)


def read_manifest(path: str, rules: RowRules = RowRules(), split: str | None = None
                  ) -> Iterator[ManifestItem]:
    """Every row of one manifest file, in its sniffed format, as read_source reads it.

    Rows without a split (UNASSIGNED, empty, or no split column) get `split` when given
    (--manifest SPLIT=PATH), else one from assign_split with the rules' split fractions.
    """
    return read_source(ManifestSource(path, format_of(path), split), rules)
