"""Which temp folder a run writes into: a new one, or with --resume a stopped run's.

Every run first writes OUTPUT/.tmp-<run id>/run.json, the fingerprint of what it is made
from: the manifests' contents (or the image folder's listing), the pinned vocabulary (or
the classes the input declares), the options that change what is written, and the
versions. `--resume` reuses the newest stopped run's folder whose fingerprint is this
run's, and the shard writer then reuses every shard whose receipt vouches for it
(core/records/receipts.py, which refuses a receipt naming a file outside the run's folder); a
folder whose name is not a run id is no stopped run's. A stopped run made from anything
else is refused, in one line that says what differs: its shards would not be this run's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import pydantic
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from image_tfrecords.core.inputs.sources import FORMATS, class_folders_source
from image_tfrecords.core.records import naming
from image_tfrecords.core.records.chunks import (
    LineCutter,
    LineRange,
    ManifestSource,
    RowChunk,
    chunk_bytes,
)
from image_tfrecords.core.records.naming import RUN_FILE, SUMMARY_FILE
from image_tfrecords.core.records.summary import Summary
from image_tfrecords.core.storage import storage
from image_tfrecords.pipeline.options import ConvertOptions
from image_tfrecords.transforms.outcome import read_summary
from image_tfrecords.transforms.vocabulary_file import PinnedVocabulary

# Options that change nothing a run writes, and may differ between a run and its resume;
# the sources (--manifest, --image_folder) are compared by their contents.
_NOT_COMPARED = frozenset(
    {
        "manifest",
        "image_folder",
        "output_dir",
        "overwrite",
        "resume",
        "reuse_from",
        "no_reuse",
        "quiet",
        "verbose",
        "worker_processes",
        "decode_timeout",
        "read_threads",
        "max_error_fraction",
        "worker_start_timeout",
    }
)
_BLOCK = 1 << 20


class ResumeRefused(ValueError):
    """--resume found a stopped run made from other inputs or settings."""


class Fingerprint(pydantic.BaseModel):
    """What a run is made from, as run.json holds it."""

    model_config = pydantic.ConfigDict(frozen=True)

    sources: dict[str, str]  # manifest, image folder or pinned vocabulary -> its SHA-256
    options: dict[str, Any]  # the options that change what is written
    versions: dict[str, str]

    def differences(self, stopped: Fingerprint) -> list[str]:
        """What differs from the `stopped` run's, in words."""
        found = []
        for name in sorted(self.sources.keys() | stopped.sources.keys()):
            if name not in stopped.sources:
                found.append(f"{name} is new")
            elif name not in self.sources:
                found.append(f"{name} is no longer given")
            elif self.sources[name] != stopped.sources[name]:
                found.append(f"{name} has changed")
        found += [
            f"--{name} {self.options.get(name)!r} (the stopped run's: "
            f"{stopped.options.get(name)!r})"
            for name in sorted(self.options.keys() | stopped.options.keys())
            if self.options.get(name) != stopped.options.get(name)
        ]
        found += [
            f"{name} {self.versions.get(name)} (the stopped run's: {stopped.versions.get(name)})"
            for name in sorted(self.versions.keys() | stopped.versions.keys())
            if self.versions.get(name) != stopped.versions.get(name)
        ]
        return found


class RunFolder(NamedTuple):
    """The temp folder a run writes into, OUTPUT/.tmp-<run_id>."""

    run_id: str
    resumed: bool  # a stopped run's, whose finished shards are reused


class SourceScan(NamedTuple):
    """What reading the sources once in the launcher gives: the run's fingerprint, and
    the chunks of rows the worker processes parse (core/records/chunks.py)."""

    fingerprint: Fingerprint
    chunks: list[RowChunk]


def scan_sources(
    convert: ConvertOptions,
    manifests: Sequence[ManifestSource],
    pinned: PinnedVocabulary | None,
    versions: dict[str, str],
    processes: int,
) -> SourceScan:
    """Reads each manifest once: its digest, and where its chunks begin and end (as many
    as keep `processes` worker processes busy)."""
    if convert.image_folder and not manifests:  # class folders, not the manifests it holds
        sources = {convert.image_folder: _listing_digest(convert.image_folder)}
        chunks = [RowChunk(class_folders_source(convert.image_folder))]
    else:
        sources, chunks = {}, []
        for source in manifests:
            sources[source.describe()], lines = _contents_digest(source, processes)
            chunks += [RowChunk(source, each) for each in lines] if lines else [RowChunk(source)]
    return SourceScan(_fingerprint(convert, sources, pinned, versions), chunks)


def _fingerprint(
    convert: ConvertOptions,
    sources: dict[str, str],
    pinned: PinnedVocabulary | None,
    versions: dict[str, str],
) -> Fingerprint:
    if pinned:  # a declaration beside the manifests (VOC's labelmap.txt) is read here alone
        kind = "declared classes" if pinned.declared else "--vocabulary"
        sources[f"{kind} {pinned.source}"] = hashlib.sha256(
            "\n".join(pinned.labels).encode()
        ).hexdigest()
    return Fingerprint(
        sources=sources,
        versions=versions,
        options={
            name: value for name, value in convert.values().items() if name not in _NOT_COMPARED
        },
    )


def choose_run_folder(convert: ConvertOptions, current: Fingerprint) -> RunFolder:
    """A new folder; with --resume the newest stopped run's with this fingerprint (a new
    one where there is none). Raises ResumeRefused when stopped runs are there but none
    was made from the same inputs and settings."""
    stopped = _stopped_runs(convert.output_dir) if convert.resume else []
    for run_id, recorded in stopped:
        if recorded == current:
            return RunFolder(run_id, resumed=True)
    if stopped:
        run_id, recorded = stopped[0]
        stopped_dir = naming.temp_dir(convert.output_dir, run_id)
        raise ResumeRefused(
            f"--resume: the stopped run in {stopped_dir} was made "
            f"from other inputs or settings: {'; '.join(current.differences(recorded))}. "
            "Run without --resume to start again from the first image"
        )
    return RunFolder(naming.new_run_id(), resumed=False)


def start(folder: str, current: Fingerprint, resumed: bool) -> None:
    """Records a new run's fingerprint; readies a stopped run's folder to be resumed:
    what it staged is made again (unless it was publishing, which the publish step
    finishes from what it prepared), its shards stay for their receipts."""
    if not resumed:
        with FileSystems.create(FileSystems.join(folder, RUN_FILE)) as out:
            out.write(current.model_dump_json(indent=2).encode())
        return
    staged = naming.staged_dir(folder)
    publishing = FileSystems.exists(
        FileSystems.join(folder, SUMMARY_FILE)
    ) and not FileSystems.exists(naming.failure_record(folder))
    if not publishing:
        leftovers = [
            metadata.path
            for result in FileSystems.match(
                [FileSystems.join(staged, "**"), FileSystems.join(folder, SUMMARY_FILE)]
            )
            for metadata in result.metadata_list
        ]
        if leftovers:
            FileSystems.delete(leftovers)


def unstart(folder: str) -> None:
    """Removes a new run's folder, stopped before its job started: it holds only the
    run.json start() wrote."""
    FileSystems.delete([FileSystems.join(folder, RUN_FILE)])
    if FileSystems.get_filesystem(folder).has_dirs():  # an object store has no folder
        FileSystems.delete([folder])


def finished_shards(folder: str) -> int:
    """How many shards a stopped run finished in `folder`: those with a receipt, which
    --resume reuses (their parts' receipts are not counted)."""
    receipts = FileSystems.match([naming.every_receipt(folder)])[0].metadata_list
    return sum(
        1
        for metadata in receipts
        if (piece := naming.receipted(metadata.path)) and piece.part is None
    )


def published_by(output_dir: str, run_id: str) -> Summary | None:
    """The output's summary.json when the run `run_id` published it (it was stopped
    while removing its temp folder), else None."""
    summary = read_summary(FileSystems.join(output_dir, SUMMARY_FILE))
    return summary if summary and summary.run_id == run_id else None


def _stopped_runs(output_dir: str) -> list[tuple[str, Fingerprint]]:
    """(run id, fingerprint) of the stopped runs in `output_dir`, newest first."""
    found = []
    for metadata in FileSystems.match(
        [FileSystems.join(naming.every_temp_dir(output_dir), RUN_FILE)]
    )[0].metadata_list:
        run_id = naming.run_id_of(metadata.path.rsplit("/", 1)[0])
        if not naming.is_run_id(run_id):  # not a run's folder: its id names other folders
            continue
        with FileSystems.open(metadata.path) as file:
            try:
                found.append(
                    (
                        metadata.last_updated_in_seconds,
                        run_id,
                        Fingerprint.model_validate_json(file.read()),
                    )
                )
            except pydantic.ValidationError:
                continue  # a run.json cut short: that run never started writing
    return [(run_id, recorded) for _, run_id, recorded in sorted(found, reverse=True)]


def _contents_digest(source: ManifestSource, processes: int) -> tuple[str, list[LineRange] | None]:
    """The digest of every file the source's path matches (one manifest, or a Pascal VOC
    glob), in order; and the file's line ranges where its format and compression let it
    be cut (else None: one chunk of all of it)."""
    digest = hashlib.sha256()
    matched = sorted(FileSystems.match([source.path])[0].metadata_list, key=lambda m: m.path)
    cutter = None
    if (
        FORMATS[source.format].cuts_by_lines
        and len(matched) == 1
        and not storage.is_compressed(source.path)
    ):
        cutter = LineCutter(chunk_bytes(matched[0].size_in_bytes, processes))
    for metadata in matched:
        digest.update(metadata.path.encode() + b"\0")
        with FileSystems.open(
            metadata.path, compression_type=CompressionTypes.UNCOMPRESSED
        ) as file:
            while block := file.read(_BLOCK):
                digest.update(block)
                if cutter:
                    cutter.feed(block)
    return digest.hexdigest(), cutter.ranges() if cutter else None


def _listing_digest(root: str) -> str:
    """Of an image folder's listing: every file's path and size (not its bytes)."""
    digest = hashlib.sha256()
    for metadata in sorted(
        FileSystems.match([storage.everything_under(root)])[0].metadata_list, key=lambda m: m.path
    ):
        digest.update(f"{metadata.path}\0{metadata.size_in_bytes}\n".encode())
    return digest.hexdigest()
