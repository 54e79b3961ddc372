"""One shard, written whole by one process: its rows in, its files and a small outcome out.

A shard is a pure function of its rows and the run's settings: the rows are put in the
write order (a hash of each URI), the rows naming one image make one example, and each
image is read, checked, re-encoded where needed and encoded as an Example in that order.
The shard file, its companions (`.idx`), its thumbnails (for report.html) and its receipt
(for --resume) are written here; what goes back to the pipeline is the ShardOutcome:
counts, label counts, dead letters and each example's key for the copy search. So which
process writes a shard, and how many write at once, changes no byte.

Where a split has too few shards to keep the workers busy, its shards are written in
parts: each part is a contiguous range of the write order (transforms/shards.py cuts
it), written by the same code into a plain TFRecord-framed file, and shard_parts.py joins
the parts in order through the shard's format, which gives the bytes of the shard
written whole.

Runs in a worker process (core/worker/pool.py) or, with no worker processes, in the pipeline's
own; either way free of Beam's runner and of TensorFlow.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from image_tfrecords.core.file_formats import PipelineFiles, RecordWriter, ShardFormat
from image_tfrecords.core.file_formats.framing import FramedWriter, records_at, write_record
from image_tfrecords.core.imaging.image_files import read_image_bytes
from image_tfrecords.core.imaging.images import (
    ImageRejected,
    PreparedImage,
    load_plugins,
    prepare_image,
)
from image_tfrecords.core.imaging.masks import class_map_png
from image_tfrecords.core.imaging.overlays import drawn_thumbnail
from image_tfrecords.core.inputs.boxes import pixel_box, turned_box
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records import example_index, naming, receipts
from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.example_index import IndexEntry, PreviousShard
from image_tfrecords.core.records.feature_keys import IMAGE as IMAGE_BYTES
from image_tfrecords.core.records.feature_keys import IMAGE_SHA256, SOURCE_ID
from image_tfrecords.core.records.records import (
    Box,
    ExampleContent,
    ExampleRef,
    ExampleSource,
    LabelledRow,
    ManifestRow,
    ShardOutcome,
    ShardTally,
)
from image_tfrecords.core.records.schema import IMAGE, SEGMENTATION
from image_tfrecords.core.storage import storage
from image_tfrecords.core.storage.downloads import DownloadSettings, is_url
from image_tfrecords.core.storage.redaction import redacted
from image_tfrecords.core.worker.example_proto import features_digest, first_bytes_values
from image_tfrecords.core.worker.examples import (
    RELABELLED_FEATURES,
    encode_example,
    example_annotations,
    example_labels,
    relabelled,
)

if TYPE_CHECKING:
    from image_tfrecords.core.records.run_settings import RunSettings
    from image_tfrecords.core.worker.pool import Lost

_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """One shard to write: its rows, packed (pack_rows), and where its files go.

    `part`: the rows are one part of the shard (its place in the shard), written as a
    part for shard_parts.join_parts; None: they are the whole shard.
    `lost`: images (by place in the task's image order) that crashed or hung their
    worker process on an earlier attempt (leaving_out), each with the reason and message
    of its dead letter; they are not read again.
    `previous`: examples of the output this run reuses (--reuse_from) that its rows may
    copy instead of reading their images (core/records/example_index.py).
    """

    split: str
    shard: int
    packs: tuple[bytes, ...]
    temp_dir: str
    resuming: bool = False
    part: int | None = None
    lost: tuple[tuple[int, str, str], ...] = ()
    previous: tuple[PreviousShard, ...] = ()

    in_worker = True  # (transforms/in_workers.py's WorkerTask) any process may write a shard

    @property
    def name(self) -> str:
        return f"shard {self.split} {self.shard}" + (
            "" if self.part is None else f" (part {self.part})"
        )

    def run(self, settings: RunSettings, progress: Progress) -> ShardOutcome:
        return write_shard(self, settings, progress).sent()

    def leaving_out(self, lost: Lost) -> ShardTask:
        """This task again, without the image its worker process died or overran on
        (core/worker/pool.py), which becomes a dead letter."""
        if lost.death is None:
            rejected = ImageRejected(
                "decode_timeout",
                (
                    f"reading and decoding took longer than {lost.timeout_s:g} s "
                    "(--decode_timeout); the "
                    "process was stopped and the shard written again without this image"
                ),
            )
        else:
            rejected = ImageRejected(
                "decode_crash",
                (
                    f"the process writing its shard died ({lost.death}) decoding this image; "
                    "the shard was written again without it"
                ),
            )
        return dataclasses.replace(
            self, lost=(*self.lost, (lost.place, rejected.reason, rejected.message))
        )


class Progress(Protocol):
    """What a task tells whoever watches it, as it goes: a worker process's pool
    (core/worker/pool.py), or the live display of the pipeline's process."""

    def on_item(self, place: int | None) -> None:
        """The writer is decoding the image at this place in the shard's image order
        (None: it is not decoding); the pool leaves out one it dies or overruns on."""

    def handled(self, rows: int, dead_letters: int) -> None:
        """`rows` more of its rows are done with, `dead_letters` of them rejected."""


class Unwatched:
    def on_item(self, place: int | None) -> None:
        pass

    def handled(self, rows: int, dead_letters: int) -> None:
        pass


def prepare_worker(storage_options: dict[str, Any]) -> None:
    """What a worker process (core/worker/pool.py) does before it says it is ready, given with
    this module imported: Beam's filesystems get the run's options (storage.py), and
    Pillow imports its format plugins now, not within an image's time limit."""
    storage.configure(storage_options)
    load_plugins()


def pack_rows(lines: Iterable[bytes]) -> bytes:
    """LabelledRow JSON lines -> one pack. Level 1: rows share most of their bytes."""
    return zlib.compress(b"\n".join(lines), 1)


def unpack_rows(pack: bytes) -> Iterator[LabelledRow]:
    return map(LabelledRow.from_json, zlib.decompress(pack).split(b"\n"))


def uri_digest(uri: str) -> bytes:
    return hashlib.sha256(uri.encode("utf-8", "surrogateescape")).digest()


class SplitPlan(NamedTuple):
    """How a split is written: its number of shards, and of parts in each shard."""

    shards: int
    parts: int = 1

    def place(self, uri: str) -> tuple[int, int]:
        """The row's shard, and its part of that shard, from one hash of its URI.

        The shard is the first 8 bytes of the digest modulo the shards; the part is
        their range, and as they lead the write order (write_order), a
        shard's parts in order are its rows in order."""
        leading = int.from_bytes(uri_digest(uri)[:8], "big")
        return leading % self.shards, (leading * self.parts) >> 64


def write_order(row: ManifestRow) -> tuple[bytes, str, int]:
    """A fixed pseudo-random order: shards do not keep the manifest's class-sorted runs."""
    return uri_digest(row.uri), row.manifest, row.line


def write_shard(
    task: ShardTask,
    settings: RunSettings,
    progress: Progress = Unwatched(),  # noqa: B008 - stateless
) -> ShardOutcome:
    """Writes the shard (or part) of `task`, or with `task.resuming` reuses what its
    receipt vouches for; returns what it gave."""
    ordered = sorted(
        itertools.chain.from_iterable(map(unpack_rows, task.packs)),
        key=lambda item: write_order(item.row),
    )
    digest = receipts.rows_digest(ordered)
    receipt_at = naming.receipt_path(task.temp_dir, task.split, task.shard, task.part)
    if task.resuming and (
        receipt := (
            receipts.read_receipt(receipt_at, digest)
            or task.part is not None
            and receipts.read_joined_part(task.temp_dir, task.split, task.shard, task.part, digest)
        )
    ):
        progress.handled(len(ordered), len(receipt.outcome.dead_letters))
        return resumed(receipt.outcome)
    outcome = _ShardWriter(task, settings, progress).write(ordered)
    written = outcome.written
    companions = settings.shard_format.companions if task.part is None else ()
    files = (
        (
            written.temp_path,
            *(written.temp_path + suffix for suffix in companions),
            naming.thumbnails_path(task.temp_dir, task.split, task.shard, task.part),
            *(write_index(outcome, task.temp_dir, settings) if task.part is None else ()),
        )
        if written.examples
        else ()
    )
    receipts.write_receipt(
        receipt_at, receipts.ShardReceipt(digest, outcome, receipts.file_sizes(files))
    )
    return outcome


def write_index(outcome: ShardOutcome, temp_dir: str, settings: RunSettings) -> tuple[str, ...]:
    """Writes the example index of a whole shard with examples, where the run keeps one
    (RunSettings.writes_index); its path, or none."""
    if not settings.writes_index:
        return ()
    written = outcome.written
    path = naming.index_path(temp_dir, written.split, written.shard)
    example_index.write_index(path, example_index.entries(outcome))
    return (path,)


def resumed(outcome: ShardOutcome) -> ShardOutcome:
    return outcome._replace(written=outcome.written._replace(resumed=True))


class _Encoded(NamedTuple):
    """One image's outcome: the example of `rows` (None when no row is left), and the
    rows dead-lettered because the size they declare is not the image's; `fitted`:
    whether the rows are the ones given (none dead-lettered, no box turned or converted
    to the image's size), which a later run's copy of the example relies on."""

    record: bytes | None
    # What is kept of the PreparedImage, whose bytes are in `record` already.
    sha256: str
    perceptual_hash: int
    thumbnail: bytes
    reencoded: str | None
    longest_side: int  # of the source image, in pixels
    source_bytes: int
    rows: list[LabelledRow]
    wrong_size: list[DeadLetter]
    fitted: bool = True
    features_digest: str | None = None  # a copy's, checked: no need to digest it again


class _Read(NamedTuple):
    """What a reader thread gave for an image: its identity before it was read
    (storage.identity; None when storage says none), and its bytes, why it was rejected,
    or None where the previous output's example of it is the one to copy."""

    identity: str | None
    data: bytes | ImageRejected | None


class _ShardWriter:
    """Rows naming the same image in the same split are next to each other in the write
    order. They make one example, the image loaded once for all of them: with detection
    one box per row, with multi-label the union of the rows' labels; with single labels
    the first row (by manifest and line) makes the example and the others are
    dead-lettered as duplicate_row.

    Files in buckets and at URLs are read ahead on a few threads through a bounded window
    (reading waits on the network, decoding needs the core), local files as they come;
    images are decoded one at a time, in order, in this thread. An image whose example the
    previous output holds, made from the same rows and settings (its key) out of the same
    bytes (its identity, which the read asks storage for), is not read: its record and
    thumbnail are copied from the previous shard, read in order alongside
    (_PreviousExamples).
    """

    def __init__(self, task: ShardTask, settings: RunSettings, progress: Progress) -> None:
        self._task = task
        self._settings = settings
        self._progress = progress
        self._lost = {place: ImageRejected(reason, message) for place, reason, message in task.lost}
        self._keys: list[str | None] = []  # each image's example_key, by place
        self._reusable: dict[int, tuple[PreviousShard, IndexEntry]] = {}  # by place

    def write(self, ordered: list[LabelledRow]) -> ShardOutcome:
        task, settings, progress = self._task, self._settings, self._progress
        dead_letters: list[DeadLetter] = []
        example_keys: list[tuple[str, ExampleRef]] = []
        images = self._images(ordered, dead_letters)
        self._plan_reuse(images)
        temp_path = (
            naming.shard_path(task.temp_dir, task.split, task.shard, settings.shard_format.suffix)
            if task.part is None
            else naming.part_path(task.temp_dir, task.split, task.shard, task.part)
        )
        tally = ShardTally()
        with contextlib.ExitStack() as opened:
            # Created with the first example: a shard whose images were all rejected
            # leaves no file (and Beam's S3 filesystem cannot write an empty one).
            out = thumbnails = None
            previous = opened.enter_context(
                _PreviousExamples(self._reusable, settings.shard_format)
            )
            read = self._read_ahead(images, opened)
            for place, (image_rows, got) in enumerate(zip(images, read, strict=True)):
                copied = previous.take(place) if place in self._reusable else None
                reused = got.data is None and copied is not None
                if reused:
                    outcome = self._copied(image_rows, *copied)
                else:  # no copy to take, or the previous shard would not give it
                    data = got.data if got.data is not None else self._read_now(image_rows)
                    outcome = self._encode(place, image_rows, data)
                if isinstance(outcome, ImageRejected):
                    dead_letters.extend(
                        item.row.dead_letter(outcome.reason, outcome.message) for item in image_rows
                    )
                    progress.handled(len(image_rows), len(image_rows))
                    continue
                dead_letters.extend(outcome.wrong_size)
                progress.handled(len(image_rows), len(outcome.wrong_size))
                record, image_rows = outcome.record, outcome.rows
                if record is None:
                    continue
                if out is None:
                    out = opened.enter_context(self._create(temp_path))
                    thumbnails = opened.enter_context(
                        storage.create(
                            naming.thumbnails_path(task.temp_dir, task.split, task.shard, task.part)
                        )
                    )
                out.write(record)
                write_record(thumbnails, outcome.thumbnail)
                content = ExampleContent(
                    rows=tuple(item.row.shown() for item in image_rows),
                    source_bytes=outcome.source_bytes,
                    reencoded=outcome.reencoded,
                    longest_side=outcome.longest_side,
                )
                labels = example_labels(image_rows, settings.label_mode)
                ref = self._example_ref(
                    tally.examples, place, outcome, labels, content, got.identity
                )
                example_keys.append((outcome.sha256, ref))
                tally.add_example(
                    rows=len(image_rows),
                    labels=labels,
                    content=content,
                    annotations=example_annotations(content.rows),
                    reused=reused,
                )
        size = storage.size(temp_path) if tally.examples else 0
        written = tally.written(task.split, task.shard, temp_path, size)
        return ShardOutcome(written, tuple(dead_letters), tuple(example_keys))

    def _images(
        self, ordered: list[LabelledRow], dead_letters: list[DeadLetter]
    ) -> list[list[LabelledRow]]:
        """The rows of each image, in write order, less the rows that repeat another row's
        image where they may not (added to `dead_letters` as duplicate_row)."""
        images = []
        for _, group in itertools.groupby(ordered, key=lambda item: item.row.uri):
            first, *others = group
            if self._settings.label_mode is LabelMode.SINGLE and others:
                repeated = others
            else:
                repeated = [
                    other
                    for other in others
                    if other.row.manifest != first.row.manifest
                    and (other.row.listed_whole or first.row.listed_whole)
                ]
            if repeated:
                dead_letters.extend(_duplicate_row(other, first) for other in repeated)
                self._progress.handled(len(repeated), len(repeated))
                others = [other for other in others if other not in repeated]
            images.append([first, *others])
        return images

    def _example_ref(
        self,
        position: int,
        place: int,
        outcome: _Encoded,
        labels: list[str],
        content: ExampleContent,
        identity: str | None,
    ) -> ExampleRef:
        """Where the example of the image at `place` is written, at `position` in the
        shard, with what a later run needs to copy it (its ExampleSource)."""
        settings = self._settings
        first = outcome.rows[0].row
        source = ExampleSource(
            identity=identity,
            key=self._keys[place] if outcome.fitted else None,
            source_bytes=outcome.source_bytes,
            reencoded=outcome.reencoded,
            longest_side=outcome.longest_side,
            features_digest=(
                outcome.features_digest or features_digest(outcome.record, _CHECKED_APART)
                if settings.writes_index
                else None
            ),
        )
        return ExampleRef(
            split=self._task.split,
            shard=self._task.shard,
            position=position,
            manifest=first.manifest,
            line=first.line,
            uri=redacted(first.uri),
            labels=tuple(labels),
            perceptual_hash=outcome.perceptual_hash,
            content=content if settings.keeps_content else None,
            source=source,
        )

    def _plan_reuse(self, images: list[list[LabelledRow]]) -> None:
        """Each image's example key, and which images the previous output's examples of
        the same key may stand for (if storage then says their bytes are the same)."""
        previous = {
            entry.uri: (shard, entry) for shard in self._task.previous for entry in shard.unpacked()
        }
        for place, rows in enumerate(images):
            key = self._key(place, rows)
            self._keys.append(key)
            found = previous.get(redacted(rows[0].row.uri))
            if (
                key is not None
                and found
                and found[1].key == key
                and found[1].identity
                and found[1].features_digest
            ):
                self._reusable[place] = found

    def _key(self, place: int, rows: list[LabelledRow]) -> str | None:
        """The rows' example_key, or None where the example depends on more than the
        image and the rows: another file (a segmentation map, an image column) whose
        identity is not kept, or a crash of its earlier attempt."""
        if not (self._settings.writes_index or self._task.previous) or place in self._lost:
            return None
        if any(item.row.segmentation for item in rows) or any(
            column.type in (IMAGE, SEGMENTATION) for column in self._settings.extra_columns
        ):
            return None
        return example_index.example_key(
            rows, self._settings.label_mode, self._settings.example_digest
        )

    def _copied(
        self, rows: list[LabelledRow], entry: IndexEntry, record: bytes, thumbnail: bytes
    ) -> _Encoded:
        """The example copied from the previous output, with what its index recorded and
        the label fields its rows give now."""
        return _Encoded(
            relabelled(record, rows, self._settings.label_mode),
            entry.sha256,
            entry.perceptual_hash,
            thumbnail,
            entry.reencoded,
            entry.longest_side,
            entry.source_bytes,
            rows,
            [],
            features_digest=entry.features_digest,
        )

    @contextlib.contextmanager
    def _create(self, path: str) -> Iterator[RecordWriter]:
        """The shard in its format, or a part in plain framing (joined in the format)."""
        if self._task.part is None:
            with self._settings.shard_format.create(path, PipelineFiles()) as out:
                yield out
        else:
            with storage.create(path) as raw:
                yield FramedWriter(raw)

    def _read_ahead(
        self, images: list[list[LabelledRow]], opened: contextlib.ExitStack
    ) -> Iterator[_Read]:
        """Each image's _Read, in order. Local files are read here, as they are needed: a
        read from the page cache takes microseconds, and handing it to a thread costs more
        than it (GIL hand-offs, ~35 us an image: bench/RESULTS.md, issue 53). Buckets and
        URLs are read ahead on threads; a URL waits on the network far longer than
        decoding takes, so many more of them keep the process busy (img2dataset's design)."""
        uris = [group[0].row.uri for group in images]
        if all(storage.is_local(uri) for uri in uris):
            return map(self._read_watched, enumerate(images))
        threads = (
            self._settings.downloads.threads
            if any(is_url(uri) for uri in uris)
            else self._settings.workers.read_threads
        )
        readers = opened.enter_context(concurrent.futures.ThreadPoolExecutor(threads))
        return _ordered_map(readers, self._read, enumerate(images), 2 * threads)

    def _read_watched(self, placed: tuple[int, list[LabelledRow]]) -> _Read:
        """_read, under the item's time limit: a local read that hangs (a stalled network
        mount) costs the image, not the run."""
        self._progress.on_item(placed[0])
        try:
            return self._read(placed)
        finally:
            self._progress.on_item(None)

    def _read(self, placed: tuple[int, list[LabelledRow]]) -> _Read:
        """The image's identity, then its bytes unless the previous output's example of
        it can be copied (a reader thread)."""
        place, rows = placed
        if place in self._lost:
            return _Read(None, self._lost[place])
        identity = None
        if self._keys[place] is not None:
            try:
                identity = storage.identity(rows[0].row.uri)
            except Exception:  # noqa: BLE001 - each filesystem's own; reading it says why
                identity = None
            if place in self._reusable and self._reusable[place][1].reusable_for(
                self._keys[place], identity
            ):
                return _Read(identity, None)
        return _Read(identity, self._read_now(rows))

    def _read_now(self, rows: list[LabelledRow]) -> bytes | ImageRejected:
        try:
            return read_image_bytes(rows[0].row.uri, self._settings.downloads)
        except ImageRejected as rejected:
            return rejected

    def _encode(
        self, place: int, rows: list[LabelledRow], data: bytes | ImageRejected
    ) -> _Encoded | ImageRejected:
        if isinstance(data, ImageRejected):
            return data
        self._progress.on_item(place)
        try:
            image = prepare_image(data, self._settings.image)
            extra_images = self._extra_images(rows[0].row)
            class_map = _class_map(rows, image, self._settings.downloads)
        except ImageRejected as rejected:
            return rejected
        finally:
            self._progress.on_item(None)
        given = rows
        rows, wrong_size = _fit_boxes_to_image(rows, image)
        try:
            record = (
                encode_example(
                    rows,
                    image,
                    self._settings.label_mode,
                    self._settings.extra_columns,
                    extra_images,
                    class_map,
                )
                if rows
                else None
            )
        except ImageRejected as rejected:  # what its objects' annotations would make
            return rejected
        thumbnail = image.thumbnail
        boxes = [
            (box, label_id)
            for item in rows
            if item.row.boxes
            for box, label_id in zip(item.row.boxes, item.label_ids, strict=True)
        ]
        if boxes:  # report.html shows the objects drawn over the thumbnail
            thumbnail = drawn_thumbnail(thumbnail, *zip(*boxes))
        return _Encoded(
            record,
            image.sha256,
            image.perceptual_hash,
            thumbnail,
            image.reencoded,
            max(image.source_size),
            len(data),
            rows,
            wrong_size,
            fitted=not wrong_size and rows == given,
        )

    def _extra_images(self, row: ManifestRow) -> dict[str, PreparedImage]:
        """The images of the row's image extra columns; a failure names its column."""
        images = {}
        for column, uri in zip(self._settings.extra_columns, row.extras, strict=True):
            if column.type == IMAGE:
                try:
                    images[column.name] = prepare_image(
                        read_image_bytes(uri, self._settings.downloads), self._settings.image
                    )
                except ImageRejected as rejected:
                    raise ImageRejected(
                        rejected.reason, f"column {column.name!r}: {rejected.message}"
                    ) from None
        return images


class _PreviousExamples:
    """The records and thumbnails of the previous output's examples that a shard may
    copy (by place in its image order), each previous shard read front to back as they
    are taken: its examples are in the write order too, so those a shard needs come in
    the order it needs them. A previous shard that cannot give one (gone, cut short,
    a bad CRC) gives no more: their images are read instead."""

    def __init__(
        self, reusable: dict[int, tuple[PreviousShard, IndexEntry]], shard_format: ShardFormat
    ) -> None:
        self._reusable = reusable
        self._format = shard_format
        self._streams: dict[str, Iterator[tuple[int, bytes, bytes]]] = {}
        self._broken: set[str] = set()
        self._opened = contextlib.ExitStack()

    def __enter__(self) -> _PreviousExamples:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._opened.close()

    def take(self, place: int) -> tuple[IndexEntry, bytes, bytes] | None:
        """The entry, record and thumbnail of the example at `place`; None when its
        previous shard cannot give it."""
        shard, entry = self._reusable[place]
        if shard.shard in self._broken:
            return None
        try:
            if shard.shard not in self._streams:
                self._streams[shard.shard] = self._opened.enter_context(
                    contextlib.closing(self._records(shard))
                )
            position, record, thumbnail = next(self._streams[shard.shard])
            if position != entry.position:
                raise ValueError(f"gave position {position} for {entry.position}")
            _check_copied(record, entry)
        except Exception as error:  # noqa: BLE001 - each filesystem's and format's own
            logging.warning(
                "%s: its examples are read again, not copied (%s: %s)",
                shard.shard,
                type(error).__name__,
                error,
            )
            self._broken.add(shard.shard)
            return None
        return entry, record, thumbnail

    def _records(self, shard: PreviousShard) -> Iterator[tuple[int, bytes, bytes]]:
        """The wanted examples of `shard`, in order; the format and the thumbnails'
        framing skip the others without reading their bytes where they can (read_at)."""
        positions = sorted(
            entry.position for each, entry in self._reusable.values() if each.shard == shard.shard
        )
        with storage.open_read(shard.thumbnails) as thumbnails:
            pairs = zip(
                self._format.read_at(shard.shard, positions, PipelineFiles()),
                records_at(thumbnails, positions),
                strict=True,
            )
            for (position, record), (_, thumbnail) in pairs:
                yield position, record, thumbnail


def _check_copied(record: bytes, entry: IndexEntry) -> None:
    """ValueError unless the record is the example of the image its index entry names
    (an index out of step with its shard would give rows another image's example), its
    image bytes are the ones the entry's SHA-256 names (a record whose image was swapped
    in the reused folder, its stated hash left as it was, is not copied), and its other
    features (boxes, masks, keypoints, extra columns) are the ones the entry's digest
    names. Its label fields are this run's anyway: relabelled."""
    stated = first_bytes_values(record, _COPY_CHECKED)
    if stated.get(SOURCE_ID) != entry.uri.encode("utf-8", "surrogateescape") or stated.get(
        IMAGE_SHA256
    ) != entry.sha256.encode("ascii", "replace"):
        raise ValueError(
            f"record {entry.position} is not the example of {entry.uri} its index names"
        )
    if hashlib.sha256(stated.get(IMAGE_BYTES, b"")).hexdigest() != entry.sha256:
        raise ValueError(
            f"record {entry.position}'s image is not the bytes its index names for {entry.uri}"
        )
    if features_digest(record, _CHECKED_APART) != entry.features_digest:
        raise ValueError(
            f"record {entry.position}'s features are not the ones its index names for {entry.uri}"
        )


_COPY_CHECKED = frozenset({SOURCE_ID, IMAGE_SHA256, IMAGE_BYTES})
# What a copy's features digest leaves out: the image (hashed by itself) and the label
# fields (examples.relabelled writes this run's).
_CHECKED_APART = frozenset({IMAGE_BYTES, *RELABELLED_FEATURES})


def _class_map(
    rows: list[LabelledRow], image: PreparedImage, downloads: DownloadSettings
) -> bytes | None:
    """The image's segmentation map as stored (masks.class_map_png), where its rows name
    one; a failure names the map."""
    row = next((item.row for item in rows if item.row.segmentation), None)
    if row is None:
        return None
    uri = row.segmentation
    try:
        return class_map_png(read_image_bytes(uri, downloads), image, row.segmentation_colours)
    except ImageRejected as rejected:
        raise ImageRejected(
            rejected.reason, f"the segmentation map {uri}: {rejected.message}"
        ) from None


def _fit_boxes_to_image(
    rows: list[LabelledRow], image: PreparedImage
) -> tuple[list[LabelledRow], list[DeadLetter]]:
    """The rows whose boxes fit the image as written, and a dead letter for each of the
    others: a declared image size (pixel boxes) that is not the image's own (size_mismatch:
    the boxes would be misplaced), or boxes in pixels of the image's own size that reach
    out of it (box_out_of_range).

    Sizes are the source's, before any --max_side resize. An image turned upright by its
    EXIF orientation is written upright; boxes drawn on its stored pixels (a declared size
    that is the stored one, or a row not drawn_upright) are turned with it.
    """
    kept, wrong = [], []
    stored, upright = image.source_size, image.upright_source_size
    for item in rows:
        row, declared = item.row, item.row.image_size
        drawn_upright = row.drawn_upright
        if declared is not None and stored != upright and tuple(declared) in (stored, upright):
            drawn_upright = tuple(declared) == upright  # the size says which it was
        actual = upright if drawn_upright else stored
        if declared is not None and tuple(declared) != actual:
            wrong.append(
                row.dead_letter(
                    reasons.SIZE_MISMATCH,
                    (
                        f"the annotation declares a {declared[0]}x{declared[1]} image but the "
                        f"image is {actual[0]}x{actual[1]} pixels"
                    ),
                )
            )
            continue
        if not row.boxes:
            kept.append(item)  # classification, or an image without objects
            continue
        boxes = row.boxes
        if row.boxes_in_pixels:  # corners and flags alone (Hugging Face's objects)
            boxes = [pixel_box(box[:4], actual, *box[4:7], declared=False) for box in boxes]
            problem = next((box for box in boxes if not isinstance(box, Box)), None)
            if problem:
                wrong.append(row.dead_letter(*problem))
                continue
        mask_size = next(
            (
                (box.mask.width, box.mask.height)
                for box in boxes
                if box.mask
                and box.mask.counts is not None
                and (box.mask.width, box.mask.height) != actual
            ),
            None,
        )
        if mask_size:
            wrong.append(
                row.dead_letter(
                    reasons.SIZE_MISMATCH,
                    (
                        f"a mask is {mask_size[0]}x{mask_size[1]} pixels but the image is "
                        f"{actual[0]}x{actual[1]}"
                    ),
                )
            )
            continue
        if not drawn_upright:
            boxes = [turned_box(box, image.turned) for box in boxes]
        kept.append(item._replace(row=row._replace(boxes=tuple(boxes), boxes_in_pixels=False)))
    return kept, wrong


def _duplicate_row(duplicate: LabelledRow, first: LabelledRow) -> DeadLetter:
    """A row naming the image a kept row names: with single labels any other row; else a
    row of another file where one of them lists the image whole (listed_whole)."""
    if duplicate.row.manifest != first.row.manifest and (
        duplicate.row.listed_whole or first.row.listed_whole
    ):
        return duplicate.row.dead_letter(
            reasons.DUPLICATE_ROW,
            f"the same image as {first.row.manifest}, which lists it "
            "with its objects; written once, from that file",
        )
    labels = (
        ""
        if duplicate.row.labels == first.row.labels
        else f", with label {'|'.join(first.row.labels)!r} there"
    )
    return duplicate.row.dead_letter(
        reasons.DUPLICATE_ROW,
        f"the same image as {first.row.manifest} line "
        f"{first.row.line}{labels}; written once, from that row",
    )


def _ordered_map(
    executor: concurrent.futures.Executor, fn: Callable[[_T], _R], items: Iterable[_T], window: int
) -> Iterator[_R]:
    """executor.map with at most `window` results pending, so memory stays bounded."""
    pending: collections.deque[concurrent.futures.Future] = collections.deque()
    for item in items:
        pending.append(executor.submit(fn, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
