"""The interface every input format implements (one module each in core/inputs/, found
through the registry in sources.py), and the first bytes of a file that sniffing reads.

A format says which file names it may be (`suffixes`), how its content is recognised
when a name could be several formats (`recognises`), which folders and globs given to
--manifest are its files (`annotation_glob`, `folder_glob`, `folder_reading`), its checks
before the job (a ManifestError of one line), what the launcher learns of it up front
(`settled_rules`, `declared_classes`, `labels_sampled`), and the rows it reads:
ManifestRows, DeadLetters naming the row and the reason, and DiscardedRows. Every hook
has a default that does nothing special, so a format declares only what it needs: as
datumaro's importers each find and detect their own files.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import ijson

from image_tfrecords.core.inputs.lines import open_manifest
from image_tfrecords.core.inputs.rows import ManifestError, ManifestItem, RowRules, labels_checked
from image_tfrecords.core.records import documents
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.documents import DocumentError, json_events, load_json
from image_tfrecords.core.records.records import ManifestRow

# Enough of a file to see its first JSON key, its first line or its XML root element.
_HEAD_BYTES = 64 * 1024
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".deflate")
_XML_ROOT = re.compile(rb"<([A-Za-z_][\w.-]*)")
_XML_PREAMBLE = re.compile(rb"\s*(<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>]*>)", re.S)


@dataclasses.dataclass(frozen=True)
class FileHead:
    """A file's name and first bytes (decompressed), read once for every format asked."""

    path: str
    data: bytes

    @classmethod
    def read(cls, path: str) -> FileHead:
        try:
            with open_manifest(path) as file:
                return cls(path, file.read(_HEAD_BYTES))
        except (OSError, EOFError) as error:
            raise ManifestError(f"{path}: cannot read the manifest: {error}") from error

    @property
    def first_json_key(self) -> str | None:
        """The first key of the JSON object the file starts with, if it starts with one."""
        try:
            for _, event, value in json_events(io.BytesIO(self.data)):
                if event != "start_map":
                    return value if event == "map_key" else None
        except (ijson.JSONError, DocumentError):
            return None
        return None

    @property
    def first_list_item(self) -> object:
        """The first item of the JSON list the file is, if it is one and the item ends
        within the first bytes."""
        try:
            return next(ijson.items(json_events(io.BytesIO(self.data)), "item"), None)
        except (ijson.JSONError, DocumentError):
            return None

    @property
    def first_line_object(self) -> dict | None:
        """The first non-blank line, parsed, when it is a JSON object (JSON Lines)."""
        for line in self.data.splitlines():
            if line.strip():
                try:
                    item = load_json(line)
                except ValueError:
                    return None
                return item if isinstance(item, dict) else None
        return None

    @property
    def xml_root(self) -> str | None:
        """The name of the root element of an XML file."""
        data = self.data.removeprefix(b"\xef\xbb\xbf")
        while preamble := _XML_PREAMBLE.match(data):
            data = data[preamble.end() :]
        root = _XML_ROOT.match(data.lstrip())
        return root.group(1).decode() if root else None


class DeclaredClasses(NamedTuple):
    """The classes an input declares (YOLO's `names`, COCO's `categories`, CVAT's
    `<labels>`...), which the output's ids follow as a pinned --vocabulary's do:
    `labels[i]` gets vocabulary id i (classification's label id; detection's class label
    is i + 1, the Object Detection API keeping 0 for the background). An id the
    declaration skips is a gap entry (core/records/label_map.py's gap name) no label matches."""

    declared_by: str  # what messages name: "coco8.yaml (names)", "instances.json (categories)"
    labels: tuple[str, ...]
    note: str = ""  # what the console adds, where the ids are not plainly the declared ones


class FolderReading(NamedTuple):
    """How a folder is read, where it is not class folders: its sources, and the line
    the console says it in."""

    sources: tuple[ManifestSource, ...]
    said: str
    notes: tuple[str, ...] = ()  # the console's further lines: what the reading leaves out


def is_glob(path: str) -> bool:
    return any(char in path for char in "*?[")


def plain_name(path: str) -> str:
    """The file's name in lower case, without a compression suffix."""
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix in _COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    return name


def json_items(path: str, prefix: str) -> Iterator[Any]:
    """The items at `prefix`, streamed; ManifestError naming the file where it is no JSON
    (cut off, a stray byte, a number past 64 bits: yajl's limit) or nests beyond
    documents.MAX_NESTING."""
    with open_manifest(path) as file:
        try:
            yield from documents.json_items(file, prefix)
        except DocumentError as error:
            raise ManifestError(f"{path}: {error}") from None


class InputFormat:
    """One input format. Subclasses set the attributes and implement `read`; the other
    methods are hooks whose defaults suit a format of plain manifest files.

    name: what --input_format calls it; title: what messages call it.
    suffixes: the file names it may be (lower case, without a compression suffix); a
    format with none is never sniffed, only chosen.
    reads_unclaimed_names: it reads a file whose name no format's suffixes claim (one
    format does: CSV).
    chosen_by_input_format: --input_format may name it (not so --image_folder's folders).
    named_columns: its rows are columns that --uri_column, --label_column and
    --split_column name.
    cuts_by_lines: its uncompressed files may be cut into line ranges (core/records/chunks.py).
    in_worker: a worker process reads it. Formats listed with Beam's FileSystems.match
    (Pascal VOC, image folders) are read in the pipeline's process, which has it loaded:
    a worker would pay ~2 s and ~200 MB to load it.
    boxes_only: it holds only bounding boxes, so it needs --label_mode detection.
    first_rows_early: its first rows come without reading the whole file, so the launcher
    reads them before the job (the storage probe reads their images); False where the
    first row comes only after a table of the whole dataset (COCO's images).
    folder_glob: the files, in a folder given to --manifest, that may each be one of its
    files (one per image), each read as a source where it is this format's.
    folder_files: what the refusal of a folder that holds none of the formats' files
    calls a folder of its files.
    """

    name: str
    title: str
    suffixes: tuple[str, ...] = ()
    reads_unclaimed_names = False
    chosen_by_input_format = True
    named_columns = False
    cuts_by_lines = False
    in_worker = True
    boxes_only = False
    first_rows_early = True
    folder_glob = ""
    folder_files = ""

    def recognises(self, head: FileHead) -> bool:
        """Whether the content is this format's, where the name could be several."""
        return False

    def annotation_glob(self, path: str, chosen: bool) -> str | None:
        """The glob of this format's files (one per image) that `path`, a folder or a glob
        given to --manifest, names as one source; None where it names none. `chosen`:
        --input_format names this format."""
        return None

    def folder_reading(self, root: str, relatives: list[str]) -> FolderReading | None:
        """The sources a folder (--manifest FOLDER or --image_folder FOLDER) holds in this
        format, told by the files in it, and the console's line; None where it holds
        none. `relatives`: every file's path under `root` (sources.relative_files)."""
        return None

    def given_in_part(self, path: str, relatives: list[str] | None) -> str | None:
        """Where `path`, given to --manifest (a folder, `relatives` its files, or a file:
        None), is a part of a dataset in this format that is read through another file
        (a YOLO labels/ folder or label file, read through its data.yaml): what to pass
        instead, for the error; None where it is not."""
        return None

    def check(self, source: ManifestSource, rules: RowRules) -> None:
        """The checks before the job; raises ManifestError."""
        # `--split_column none` (every split from the hash, as --split_by groups sets for
        # its staging run) names no column, so any format takes it.
        if not self.named_columns and rules.names_columns:
            raise ManifestError(
                f"{source.path} is {self.title}: --uri_column, "
                "--label_column and --split_column name columns of CSV "
                "manifests only"
            )
        if self.boxes_only and not rules.detection:
            raise ManifestError(
                f"{source.path} is {self.title}, which holds bounding "
                "boxes: pass --label_mode detection"
            )
        self.check_file(source, rules)

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        """The format's own checks of the file, after the label mode's."""

    def settled_rules(
        self, sources: Sequence[ManifestSource], rules: RowRules, say: Callable[[str], None]
    ) -> RowRules:
        """`rules` with what the options leave open (None) and this format's `sources`
        decide, each choice named by `say` (CSV's split column and label separator);
        ManifestError where the files say it two ways. Read in the launcher."""
        return rules

    def declared_classes(self, source: ManifestSource) -> DeclaredClasses | None:
        """The classes `source` declares, with their ids; None where it declares none
        (the ids are then learnt from TRAIN). Read in the launcher, before the job."""
        return None

    def group_values(
        self, source: ManifestSource, rules: RowRules, name: str
    ) -> Iterator[tuple[str, str]]:
        """(image URI, its group) for each image of `source` that has a value under `name`
        (--group_column NAME: a manifest's column, an attribute of an annotation file's
        image entries); ManifestError where the format has no such thing or the file has
        no `name`. Read in the launcher, before any image is."""
        raise ManifestError(
            f"--group_column {name}: {source.path} is {self.title}, which has neither columns "
            "nor image attributes to group by; give folder or folder:N for the images' folders"
        )

    def labels_sampled(self, source: ManifestSource, rules: RowRules, rows: int) -> set[str]:
        """Labels `source` holds, from its first `rows` rows: what tells a label map's
        names from its display names (--vocabulary). Read in the launcher."""
        return {
            label
            for row in itertools.islice(self.checked_rows(source, rules), rows)
            if isinstance(row, ManifestRow)
            for label in row.labels
        }

    def checked_rows(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None = None
    ) -> Iterator[ManifestItem]:
        """The rows `read` gives, with labels no output can hold made dead letters."""
        return labels_checked(self.read(source, rules, lines), rules)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestItem]:
        raise NotImplementedError


class RefusedFormat(InputFormat):
    """A format people hold that is recognised to be refused by name, not read: read as a
    manifest, every row of it would be a dead letter pointing elsewhere. Refused before
    the job (exit 2); `refusal` says what to export or write instead."""

    chosen_by_input_format = False
    refusal = ""

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        raise ManifestError(f"{source.path} is {self.title}, which is not read: {self.refusal}")

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestItem]:
        raise ManifestError(f"{source.path} is {self.title}, which is not read: {self.refusal}")
