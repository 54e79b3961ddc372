"""A receipt beside each finished shard, so a stopped run's finished shards are reused
(`--resume`) without reading their images again, and the near-copy search names the
pairs it found from their shards' records (example_refs) instead of carrying every
example's through its groups.

The shard writer writes a shard's receipt only once the shard's files are closed (and on
a local disk flushed to it): what the shard holds and what it gave the rest of the
pipeline (its ShardWritten, its dead letters, its examples' keys for the duplicate
search), the digest of the rows it was made from, and the size of each of its files. A
resumed run reuses a shard only when its receipt reads whole, was made from the same
rows (the same digest: the same images, labels, ids and split), and every file it names
is there at its size; anything else (no receipt, a half-written one, a file missing or
cut short) and the shard is written again. Receipts are written under a temporary name
and renamed into place, so none is ever read half-written.

They are pickles of the pipeline's own records, read only by a run of the same version
(pipeline/resume.py refuses a resume across versions).
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

if TYPE_CHECKING:
    from transforms.dead_letters import DeadLetter
    from transforms.labels import LabelledRow

RECEIPTS_DIR = "receipts"  # in the run's temp dir


class ShardReceipt(NamedTuple):
    """What a finished shard holds and gave, and the files it is made of."""

    rows_digest: str  # rows_digest() of the rows it was written from
    written: Any  # its shards.ShardWritten
    dead_letters: tuple[DeadLetter, ...]  # its rows that became no example
    example_keys: tuple[tuple[str, Any], ...]  # (sha256, shards.ExampleRef) per example
    files: tuple[tuple[str, int], ...]  # (path, size in bytes): the shard, companions, thumbnails


def rows_digest(rows: Iterable[LabelledRow]) -> str:
    """The rows a shard is written from, in its write order, as one digest."""
    digest = hashlib.sha256()
    for item in rows:
        digest.update(item.to_json())
        digest.update(b"\n")
    return digest.hexdigest()


def receipt_path(temp_dir: str, split: str, shard: int) -> str:
    return FileSystems.join(temp_dir, RECEIPTS_DIR, f"{split}-{shard:05d}.receipt")


def file_sizes(paths: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """(path, size) of each file, flushed to the disk first where it is a local one: a
    receipt must not outlive what it vouches for through a power cut."""
    for path in paths:
        _flush_to_disk(path)
    return tuple((path, FileSystems.get_filesystem(path).metadata(path).size_in_bytes)
                 for path in paths)


def write_receipt(path: str, receipt: ShardReceipt) -> None:
    partial = path + ".partial"
    with FileSystems.create(partial, compression_type=CompressionTypes.UNCOMPRESSED) as out:
        out.write(pickle.dumps(receipt, protocol=pickle.HIGHEST_PROTOCOL))
    _flush_to_disk(partial)
    FileSystems.rename([partial], [path])


def read_receipt(path: str, digest: str) -> ShardReceipt | None:
    """The receipt at `path` when the shard it vouches for can be reused as it is: made
    from rows of this `digest`, every file there at its size. None otherwise."""
    try:
        receipt = _load(path)
    except Exception:  # none there, or not a whole receipt: the shard is written again
        return None
    if not isinstance(receipt, ShardReceipt) or receipt.rows_digest != digest:
        return None
    for file_path, size in receipt.files:
        try:
            if FileSystems.get_filesystem(file_path).metadata(file_path).size_in_bytes != size:
                return None
        except Exception:  # each filesystem's own "not found"
            return None
    return receipt


def example_refs(temp_dir: str, split: str, shard: int) -> dict[int, Any]:
    """A finished shard's ExampleRefs by position, from its receipt: where the near-copy
    search finds the refs of the pairs it found."""
    return {ref.position: ref for _, ref in _load(receipt_path(temp_dir, split, shard)).example_keys}


def _load(path: str) -> ShardReceipt:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as file:
        return pickle.loads(file.read())


def _flush_to_disk(path: str) -> None:
    """Plain local paths only: an object store holds an object once its upload closed."""
    if FileSystems.get_scheme(path) is None:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
