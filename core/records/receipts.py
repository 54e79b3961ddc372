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
write to. It is read as typed records (ShardReceipt.from_json): every split one of the
known splits, every file it names a plain name under the run's temp folder (no `..`, no
absolute path, no URL: naming.confined_name), checked before any of them is looked at.
One that is there but is not a receipt stops the run, named (ReceiptError).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import pydantic

from image_tfrecords.core.records import naming
from image_tfrecords.core.records.documents import load_json
from image_tfrecords.core.records.records import ExampleRef, LabelledRow, ShardOutcome
from image_tfrecords.core.storage import storage

_VERSION = 4  # of the receipt's layout (4: file names relative to the temp folder, typed)


class ReceiptError(ValueError):
    """A receipt that is there but cannot be read as one."""


class ShardReceipt(NamedTuple):
    """What a finished shard (or part of one) gave, and the files it is made of."""

    # rows_digest() of the rows it was written from; of a joined shard, parts_digest()
    rows_digest: str
    outcome: ShardOutcome
    files: tuple[tuple[str, int], ...]  # (path, size in bytes): the shard, companions, thumbnails
    parts: tuple[str, ...] = ()  # a joined shard's: the rows_digest of each part, in order

    def to_json(self, temp_dir: str) -> bytes:
        """The receipt of a shard of the run whose temp folder is `temp_dir`: its files are
        named relative to it, so a resumed run finds them whatever the output folder's
        spelling, and a receipt names nothing outside it."""
        written = self.outcome.written
        outcome = self.outcome._replace(
            written=written._replace(temp_path=_relative(temp_dir, written.temp_path))
        )
        # ASCII: a URI may hold undecodable bytes as surrogates, which only escapes carry.
        return json.dumps(
            {
                "version": _VERSION,
                "rows_digest": self.rows_digest,
                "outcome": outcome,
                "files": [(_relative(temp_dir, path), size) for path, size in self.files],
                "parts": self.parts,
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, temp_dir: str) -> ShardReceipt:
        """The receipt of a shard in `temp_dir`, typed (every field of its kind, every
        split one of SPLITS), its files' names resolved in `temp_dir`; ValueError (its
        UnconfinedName included) otherwise."""
        fields = load_json(data)  # nesting beyond a limit: a ValueError, not RecursionError
        if not isinstance(fields, dict):
            raise ValueError("not a JSON object")
        if (version := fields.pop("version", None)) != _VERSION:
            raise ValueError(f"layout {version!r}, not {_VERSION}")
        receipt = _RECEIPT.validate_python(fields)
        written = receipt.outcome.written
        return receipt._replace(
            outcome=receipt.outcome._replace(
                written=written._replace(temp_path=_in_temp_dir(temp_dir, written.temp_path))
            ),
            files=tuple((_in_temp_dir(temp_dir, name), size) for name, size in receipt.files),
        )


# Validates a receipt's fields as the records they are (pydantic's lax mode: JSON's arrays
# are the tuples); a split is one of SPLITS (records.py types it).
_RECEIPT = pydantic.TypeAdapter(ShardReceipt)


def _relative(temp_dir: str, path: str) -> str:
    """`path` (storage.join(temp_dir, ...)'s) as a name relative to `temp_dir`."""
    prefix = temp_dir.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path} is not in the run's temp folder {temp_dir}")
    return path[len(prefix) :]


def _in_temp_dir(temp_dir: str, name: str) -> str:
    """A file a receipt names, in the run's temp folder; UnconfinedName for a name that
    would leave it (`..`, absolute, a URL): the folder may be a bucket others write to."""
    return storage.join(temp_dir, naming.confined_name(name))


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
        out.write(receipt.to_json(naming.temp_dir_of_receipt(path)))
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


def read_joined_part(
    temp_dir: str, split: str, shard: int, part: int, digest: str
) -> ShardReceipt | None:
    """The receipt of the part when it was made from rows of this `digest` and is in a
    finished shard (whose receipt names it, at its place, and whose files are all there):
    its own files were deleted once joined. None otherwise."""
    shard_receipt = _existing(naming.receipt_path(temp_dir, split, shard))
    part_receipt = _existing(naming.receipt_path(temp_dir, split, shard, part))
    if (
        shard_receipt is None
        or part_receipt is None
        or part_receipt.rows_digest != digest
        or digest not in shard_receipt.parts
        or not _files_there(shard_receipt)
    ):
        return None
    return part_receipt


def read_part_receipts(
    temp_dir: str, split: str, shard: int, parts: Sequence[int]
) -> list[ShardReceipt]:
    """The receipts of a shard's parts, which are all written; ReceiptError when one is
    missing or not a receipt."""
    found = []
    for part in parts:
        path = naming.receipt_path(temp_dir, split, shard, part)
        receipt = _existing(path)
        if receipt is None:
            raise ReceiptError(
                f"{path} is missing: the part it is the receipt of was "
                "written, and the receipt is written last"
            )
        found.append(receipt)
    return found


def _existing(path: str) -> ShardReceipt | None:
    try:
        with storage.open_read(path) as file:
            data = file.read()
    except Exception:  # noqa: BLE001 - none there (each filesystem's own "not found"): written again
        return None
    return _parsed(path, data)


def _files_there(receipt: ShardReceipt) -> bool:
    """Whether every file the receipt names is there, at the size it gives."""
    for file_path, size in receipt.files:
        try:
            if storage.size(file_path) != size:
                return False
        except Exception:  # noqa: BLE001 - each filesystem's own "not found"
            return False
    return True


def example_refs(temp_dir: str, split: str, shard: int) -> dict[int, ExampleRef]:
    """A finished shard's ExampleRefs by position, from its receipt: where the near-copy
    search finds the refs of the pairs it found, as a worker sends them (ShardOutcome.sent)."""
    path = naming.receipt_path(temp_dir, split, shard)
    with storage.open_read(path) as file:
        receipt = _parsed(path, file.read())
    return {ref.position: ref for _, ref in receipt.outcome.sent().example_keys}


def _parsed(path: str, data: bytes) -> ShardReceipt:
    """The receipt at `path`; ReceiptError naming it when it is not one, or names a file
    outside its run's temp folder (then nothing it names is requested or written)."""
    try:
        return ShardReceipt.from_json(data, naming.temp_dir_of_receipt(path))
    except naming.UnconfinedName as error:
        raise ReceiptError(
            f"{path} names a file outside its run's temp folder ({error}); a receipt "
            "names only the files of its shard there. Delete the run's folder to write "
            "its shards again"
        ) from None
    except Exception as error:  # noqa: BLE001 - malformed JSON, fields missing or of the wrong kind
        raise ReceiptError(
            f"{path} is not a shard receipt of this version ({type(error).__name__}: "
            f"{error}); delete it, or the run's folder, to write its shard again"
        ) from None
