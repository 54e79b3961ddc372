"""Each shard's example index: where every example came from and what was learnt reading
its image, published beside the shards (core/records/naming.py's OUTPUT/sources/), so that a later
run over the grown dataset copies an unchanged example from this output instead of
reading its image again (`--reuse_from`), and `diff` says what changed between outputs.

One JSON line per example, in the shard's order (the thumbnails file beside it holds a
record per example in the same order). An example is a pure function of its rows, its
image's bytes and the settings that shape examples: `example_key` digests the rows and
the settings (a classification example's labels aside: a copy gets its label fields
from its rows now), `storage.identity` says cheaply whether the bytes can have changed
since (size, time and inode; a bucket's CRC32C or ETag). A later run copies the example
when both are what the index recorded; any doubt (no identity, a key left out, another
value) and the image is read again, so the copy is the bytes a full run writes.

An index is read back as data, never code: the output folder may be a bucket others can
write to. Each line is validated as an IndexEntry, and one over MAX_LINE_BYTES is refused
unread rather than held whole; an index that is not one is named (ExampleIndexError): a
reusing run reads that shard's images again, `diff` refuses it. A copied record is checked
by its format's reader (TFRecord's CRCs).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import logging
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import pydantic

from image_tfrecords.core.records import naming
from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.records.records import LabelledRow, ShardOutcome
from image_tfrecords.core.records.splits import Split
from image_tfrecords.core.records.text_limits import MAX_LINE_BYTES as _MAX_ROW_LINE_BYTES
from image_tfrecords.core.storage import storage

# Of the key's layout: a new one makes every recorded key differ (a full run).
_KEY_VERSION = 3  # 2: a classification example's labels left out; 3: its split too
# The libraries whose output is in an example's bytes: this package's encoder, and
# Pillow's, which re-encodes and resizes.
_SHAPING_DISTRIBUTIONS = ("image-tfrecords", "pillow")
# No line is read beyond this: a manifest line's limit. An entry holds what its example's
# rows say (a detection example's labels, one per object: ~40,000 objects of 20-character
# labels fit), and an index comes from a folder others may write to: a crafted 16 MiB line
# of one-character labels took ~400 MB to parse (issue 55). A longer line is refused, and
# its shard's images are read again.
MAX_LINE_BYTES = _MAX_ROW_LINE_BYTES


class ExampleIndexError(ValueError):
    """An example index that is there but cannot be read as one."""


class IndexEntry(pydantic.BaseModel):
    """One example of a published shard, at `position` in it."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", strict=False)

    position: int = pydantic.Field(ge=0)
    uri: str  # the first row's image, as the example's source_id holds it
    split: Split
    labels: tuple[str, ...]  # the example's label texts (detection: one per object)
    sha256: str
    perceptual_hash: int
    source_bytes: int = pydantic.Field(ge=0)
    reencoded: str | None
    longest_side: int = pydantic.Field(ge=0)
    identity: str | None  # storage.identity of the image when it was read; None: unknown
    key: str | None  # example_key of its rows and settings; None: never reused
    # ExampleSource.features_digest; None in an index written before it was kept: such
    # an example is read again, not copied.
    features_digest: str | None = None

    def reusable_for(self, key: str, identity: str | None) -> bool:
        """Whether this example is the one rows of `key` make from a source of
        `identity` now."""
        return (
            self.key is not None
            and self.key == key
            and identity == self.identity is not None
            and self.features_digest is not None
        )


def example_key(rows: Sequence[LabelledRow], label_mode: LabelMode, settings_digest: str) -> str:
    """The digest of what shapes an example besides its image's bytes and, for
    classification, its labels: its rows (their boxes, extra values; not where in which
    manifest they were, nor their split) and the settings (`settings_digest`). A copied
    classification example gets its label fields from its rows now (examples.relabelled):
    a new class that moves every id, or a relabelled row, reads no image again. Detection
    keeps its labels in the key: report.html's thumbnail draws each object in its id's
    colour."""
    digest = hashlib.sha256(settings_digest.encode())
    for item in rows:
        # An example holds no split: a row moved to another split copies it.
        placeless = item.row._replace(manifest="", line=0, raw="", split="")
        if label_mode != LabelMode.DETECTION:
            item, placeless = item._replace(label_ids=()), placeless._replace(labels=())
        digest.update(json.dumps(item._replace(row=placeless)).encode())
    return digest.hexdigest()


def settings_digest(label_mode: str, image: object, extra_columns: Iterable[object]) -> str:
    """The digest of the settings and libraries that shape examples (ImageSettings is a
    dataclass; the schema's columns are tuples)."""
    return hashlib.sha256(
        json.dumps(
            [
                _KEY_VERSION,
                _library_versions(),
                str(label_mode),
                dataclasses.asdict(image),
                list(extra_columns),
            ]
        ).encode()
    ).hexdigest()


@functools.cache
def _library_versions() -> list[str]:
    return [importlib.metadata.version(name) for name in _SHAPING_DISTRIBUTIONS]


def entries(outcome: ShardOutcome) -> Iterator[IndexEntry]:
    """The index of a shard, from its outcome."""
    for sha256, ref in outcome.example_keys:
        yield IndexEntry(
            position=ref.position,
            uri=ref.uri,
            split=ref.split,
            labels=ref.labels,
            sha256=sha256,
            perceptual_hash=ref.perceptual_hash,
            **ref.source._asdict(),
        )


def write_index(path: str, index: Iterable[IndexEntry]) -> None:
    with storage.create(path) as out:
        for entry in index:
            out.write(entry.model_dump_json().encode() + b"\n")


def read_index(path: str) -> Iterator[IndexEntry]:
    """The entries of the index at `path`, in order; ExampleIndexError naming the line
    that is not one, or an entry out of its place."""
    with storage.open_read(path) as file:
        # A line of MAX_LINE_BYTES and its "\n" is read whole; a longer one is cut there.
        lines = iter(lambda: file.readline(MAX_LINE_BYTES + 1), b"")
        for number, line in enumerate(lines, 1):
            if len(line.rstrip(b"\n")) > MAX_LINE_BYTES:
                raise ExampleIndexError(
                    f"{path} line {number} is over {MAX_LINE_BYTES:,} bytes: not an example "
                    "index entry"
                )
            try:
                entry = IndexEntry.model_validate_json(line)
            except pydantic.ValidationError as error:
                raise ExampleIndexError(
                    f"{path} line {number} is not an example index entry: "
                    f"{error.errors()[0]['msg']}"
                ) from None
            if entry.position != number - 1:
                raise ExampleIndexError(
                    f"{path} line {number} says position {entry.position}: the index "
                    "lists its shard's examples in order"
                )
            yield entry


class PreviousShard(NamedTuple):
    """Examples of one shard of the output a run reuses (--reuse_from) that rows of one
    shard (or part) of this run name: where they are, and their index entries."""

    shard: str  # the shard file's path
    thumbnails: str  # its thumbnails file's path
    entries: bytes  # their IndexEntry JSON lines, in position order, compressed

    @classmethod
    def packed(cls, shard: str, thumbnails: str, found: Iterable[IndexEntry]) -> PreviousShard:
        return cls(
            shard,
            thumbnails,
            zlib.compress(b"\n".join(entry.model_dump_json().encode() for entry in found), 1),
        )

    def unpacked(self) -> Iterator[IndexEntry]:
        for line in zlib.decompress(self.entries).split(b"\n"):
            yield IndexEntry.model_validate_json(line)


class PreviousShardFiles(NamedTuple):
    """A shard of an earlier output and the files beside it that let it be reused."""

    index: str
    shard: str
    thumbnails: str


class PreviousOutput(NamedTuple):
    """The earlier output a run reuses examples from (--reuse_from), as it was found
    before the run: its shards of this run's format with their indexes."""

    folder: str
    shards: tuple[PreviousShardFiles, ...]


def previous_output(folder: str, shard_suffix: str) -> PreviousOutput:
    """The reusable shards of the output in `folder`: those of a whole output (its
    summary.json there: a half-published or failed folder gives none) in this run's
    shard format (`shard_suffix`), with an example index. Names are read from a listing,
    each parsed as a published shard's, so none leads outside `folder`."""
    if not storage.exists(storage.join(folder, naming.SUMMARY_FILE)):
        return PreviousOutput(folder, ())
    shards = []
    for metadata in sorted(
        storage.match(naming.every_published_index(folder)), key=lambda m: m.path
    ):
        shard = naming.indexed_shard(metadata.path)
        if shard is None or shard.suffix != shard_suffix:
            continue
        files = PreviousShardFiles(
            metadata.path,
            storage.join(folder, shard.name),
            naming.published_thumbnails(folder, shard.name),
        )
        if all(storage.stays_in(path, folder) for path in files):
            shards.append(files)
        else:  # a file planted as a link to one elsewhere is not this output's to copy
            logging.warning(
                "%s: a file of it is a link out of %s: its examples are read again",
                shard.name,
                folder,
            )
    return PreviousOutput(folder, tuple(shards))
