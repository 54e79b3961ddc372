"""A receipt beside each finished shard, so a stopped run's finished shards are reused
(`--resume`) without reading their images again, and the near-copy search names the
pairs it found from their shards' records (example_refs) instead of carrying every
example's through its groups.

The shard writer writes a shard's receipt only once the shard's files are closed (and on
a local disk flushed to it): what the shard gave the rest of the pipeline (its
ShardOutcome), the digest of the rows it was made from, and the size of each of its
files. A resumed run reuses a shard only when it was made from the same rows (the same
digest: the same images, labels, ids and split) and every file it names is there at its
size; otherwise the shard is written again. Receipts are written under a temporary name
and renamed into place, so none is ever read half-written.

A shard written in parts (shard_parts.py) has a receipt per part as well, and its own
receipt names the digests of the parts it was joined from: a resumed run reuses a part
that is in a finished shard, or a finished part, without writing it again.

A receipt is JSON: data, never code, since the output folder may be a bucket others can
write to. One that is there but is not a receipt stops the run, named (ReceiptError).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from worker import naming, storage
from worker.dead_letters import DeadLetter
from worker.records import (ExampleContent, ExampleRef, LabelledRow, ManifestRow, ShardOutcome,
                            ShardWritten)

_VERSION = 3  # of the receipt's layout (3: boxes with masks and keypoints)


class ReceiptError(ValueError):
    """A receipt that is there but cannot be read as one."""


class ShardReceipt(NamedTuple):
    """What a finished shard (or part of one) gave, and the files it is made of."""

    # rows_digest() of the rows it was written from; of a joined shard, parts_digest()
    rows_digest: str
    outcome: ShardOutcome
    files: tuple[tuple[str, int], ...]  # (path, size in bytes): the shard, companions, thumbnails
    parts: tuple[str, ...] = ()  # a joined shard's: the rows_digest of each part, in order

    def to_json(self) -> bytes:
        # ASCII: a URI may hold undecodable bytes as surrogates, which only escapes carry.
        return json.dumps({"version": _VERSION, "rows_digest": self.rows_digest,
                           "outcome": self.outcome, "files": self.files,
                           "parts": self.parts}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ShardReceipt:
        fields = json.loads(data)
        if fields.get("version") != _VERSION:
            raise ValueError(f"layout {fields.get('version')!r}, not {_VERSION}")
        written, dead_letters, example_keys = fields["outcome"]
        outcome = ShardOutcome(
            ShardWritten(*written), tuple(DeadLetter(*letter) for letter in dead_letters),
            tuple((sha256, _example_ref(ref)) for sha256, ref in example_keys))
        return cls(fields["rows_digest"], outcome,
                   tuple((path, size) for path, size in fields["files"]),
                   tuple(fields["parts"]))


def _example_ref(fields: list) -> ExampleRef:
    *where, labels, perceptual_hash, content = fields
    if content is not None:
        rows, *counts = content
        content = ExampleContent(tuple(map(ManifestRow.from_fields, rows)), *counts)
    return ExampleRef(*where, tuple(labels), perceptual_hash, content)


def rows_digest(rows: Iterable[LabelledRow]) -> str:
    """The rows a shard is written from, in its write order, as one digest."""
    digest = hashlib.sha256()
    for item in rows:
        digest.update(item.to_json())
        digest.update(b"\n")
    return digest.hexdigest()


def parts_digest(part_digests: Iterable[str]) -> str:
    """A joined shard's digest: of its parts' rows_digests, in order."""
    return hashlib.sha256("\n".join(part_digests).encode()).hexdigest()


def file_sizes(paths: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """(path, size) of each file, flushed to the disk first where it is a local one: a
    receipt must not outlive what it vouches for through a power cut."""
    for path in paths:
        storage.flush_to_disk(path)
    return tuple((path, storage.size(path)) for path in paths)


def write_receipt(path: str, receipt: ShardReceipt) -> None:
    partial = path + ".partial"
    with storage.create(partial) as out:
        out.write(receipt.to_json())
    storage.flush_to_disk(partial)
    storage.rename(partial, path)


def read_receipt(path: str, digest: str) -> ShardReceipt | None:
    """The receipt at `path` when the shard it vouches for can be reused as it is: made
    from rows of this `digest`, every file there at its size. None otherwise; ReceiptError
    when what is at `path` is not a receipt."""
    receipt = _existing(path)
    if receipt is None or receipt.rows_digest != digest or not _files_there(receipt):
        return None
    return receipt


def read_joined_part(temp_dir: str, split: str, shard: int, part: int, digest: str
                     ) -> ShardReceipt | None:
    """The receipt of the part when it was made from rows of this `digest` and is in a
    finished shard (whose receipt names it, at its place, and whose files are all there):
    its own files were deleted once joined. None otherwise."""
    shard_receipt = _existing(naming.receipt_path(temp_dir, split, shard))
    part_receipt = _existing(naming.receipt_path(temp_dir, split, shard, part))
    if (shard_receipt is None or part_receipt is None or part_receipt.rows_digest != digest
            or digest not in shard_receipt.parts or not _files_there(shard_receipt)):
        return None
    return part_receipt


def read_part_receipts(temp_dir: str, split: str, shard: int, parts: Sequence[int]
                       ) -> list[ShardReceipt]:
    """The receipts of a shard's parts, which are all written; ReceiptError when one is
    missing or not a receipt."""
    found = []
    for part in parts:
        path = naming.receipt_path(temp_dir, split, shard, part)
        receipt = _existing(path)
        if receipt is None:
            raise ReceiptError(f"{path} is missing: the part it is the receipt of was "
                               "written, and the receipt is written last")
        found.append(receipt)
    return found


def _existing(path: str) -> ShardReceipt | None:
    try:
        with storage.open_read(path) as file:
            data = file.read()
    except Exception:  # none there (each filesystem's own "not found"): written again
        return None
    return _parsed(path, data)


def _files_there(receipt: ShardReceipt) -> bool:
    """Whether every file the receipt names is there, at the size it gives."""
    for file_path, size in receipt.files:
        try:
            if storage.size(file_path) != size:
                return False
        except Exception:  # each filesystem's own "not found"
            return False
    return True


def example_refs(temp_dir: str, split: str, shard: int) -> dict[int, ExampleRef]:
    """A finished shard's ExampleRefs by position, from its receipt: where the near-copy
    search finds the refs of the pairs it found."""
    path = naming.receipt_path(temp_dir, split, shard)
    with storage.open_read(path) as file:
        receipt = _parsed(path, file.read())
    return {ref.position: ref for _, ref in receipt.outcome.example_keys}


def _parsed(path: str, data: bytes) -> ShardReceipt:
    try:
        return ShardReceipt.from_json(data)
    except Exception as error:  # malformed JSON, fields missing or of the wrong kind
        raise ReceiptError(
            f"{path} is not a shard receipt of this version ({type(error).__name__}: "
            f"{error}); delete it, or the run's folder, to write its shard again") from None
