"""Shards planned on the small manifest rows; one DoFn per shard loads its images and writes it.

Why not `WriteToTFRecord`: with a fixed shard count it keys every record randomly and
groups the encoded images (a full shuffle of the image bytes that the DirectRunner holds
in memory, in an order that changes per run); with a runner-chosen count the number and
size of files follow the bundling. Grouping the small rows by shard instead (packed, about
20 bytes a row) keeps image bytes out of any shuffle, keeps shard sizes near the target
and makes the output deterministic: a row's shard is a hash of its URI and rows are
written in hash order.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import hashlib
import itertools
import math
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple, TypeVar

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from transforms import dead_letters as reasons
from transforms import decode_pool, live_progress
from transforms.dead_letters import DeadLetter
from transforms.deadline import within_deadline
from transforms.examples import encode_example, example_labels
from transforms.file_formats import BeamFiles
from transforms.histograms import file_bytes_bin, longest_side_bin
from transforms.image_files import read_image_bytes
from transforms.images import ImageRejected, PreparedImage
from transforms.labels import LabelledRow
from transforms.manifest import DEAD_LETTERS, ManifestRow
from transforms.choices import LabelMode
from transforms.run_settings import RunSettings
from transforms.schema import IMAGE
from transforms.shard_receipts import (ShardReceipt, file_sizes, read_receipt, receipt_path,
                                       rows_digest, write_receipt)
from transforms.tfrecord_format import write_record

_SIZE_SAMPLE = 32  # files per split whose sizes estimate the split's total bytes
_SIZE_SECONDS = 10.0  # for statting a split's sample, all files at once
_PACK_BYTES = 4 << 20  # row JSON a packer holds before packing what it has
# Images a writer thread reads and hands to a decoder at once: with the window of
# batches in flight, up to 8 x (threads + 1) images are in memory per shard writer.
_BATCH_IMAGES = 8
_T = TypeVar("_T")
_R = TypeVar("_R")


def shard_of(uri: str, num_shards: int) -> int:
    return int.from_bytes(_uri_digest(uri)[:8], "big") % num_shards


def shards_for(rows: int, mean_file_bytes: float, target_shard_bytes: int) -> int:
    """Enough shards that none exceeds the target, never more shards than rows."""
    return max(1, min(rows, math.ceil(rows * mean_file_bytes / target_shard_bytes)))


class ShardWritten(NamedTuple):
    """One shard file written to the temp dir, awaiting its final name."""

    split: str
    shard: int
    temp_path: str  # no file there when examples is 0
    examples: int
    rows: int  # manifest rows in the examples: more than examples with detection boxes
    bytes: int  # of the file as written (compressed with --compression gzip)
    source_bytes: int  # of the source image files
    labels: dict[str, int]  # label text -> examples carrying it (detection: objects)
    reencoded: dict[str, int]  # why -> examples whose image was re-encoded
    longest_side: dict[str, int]  # histograms.LONGEST_SIDE_BINS -> source images
    file_bytes: dict[str, int]  # histograms.FILE_BYTE_BINS -> source files
    resumed: bool = False  # reused from a stopped run (--resume), its images not read again


EXAMPLE_KEYS = "example_keys"  # WriteShards' output of (sha256, ExampleRef) per example


class _Encoded(NamedTuple):
    """One image's outcome: the example of `rows` (None when no row is left), and the
    rows dead-lettered because the size they declare is not the image's."""

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


class ExampleContent(NamedTuple):
    """What a written example came from and counted for: what dropping it takes back."""

    rows: tuple[ManifestRow, ...]
    source_bytes: int
    reencoded: str | None
    longest_side: int  # of the source image, in pixels


def thumbnails_path(temp_dir: str, split: str, shard: int) -> str:
    """Where WriteShards puts a shard's thumbnails (images.thumbnail_of), a record per
    example in the shard's order, for report.html: TFRecord-framed, whatever the shards'
    format (a file of the run's own, read back by report_content.py)."""
    return FileSystems.join(temp_dir, "thumbnails", f"{split}-{shard:05d}.records")


class ExampleRef(NamedTuple):
    """Where one written example is, and the first of the rows it came from."""

    split: str
    shard: int
    position: int  # record index in the shard's temp file
    manifest: str
    line: int
    uri: str
    labels: tuple[str, ...]  # label texts (detection: one per object)
    perceptual_hash: int  # images.PreparedImage.perceptual_hash
    content: ExampleContent | None  # only where RunSettings.keeps_content


class PlanShards(beam.PTransform):
    """ManifestRows -> (split, number of shards), from --num_shards or the target size.

    The size estimate stats a fixed, hash-chosen sample of files per split, all at once
    and within a bound (a split's files that did not answer in time are left out), so
    the plan is the same on every run of the same manifest whose storage answers.
    """

    def __init__(self, num_shards: int | None, target_shard_bytes: int) -> None:
        super().__init__()
        self._num_shards = num_shards
        self._target_shard_bytes = target_shard_bytes

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        uris = rows | "BySplit" >> beam.Map(lambda row: (row.split, row.uri))
        counts = uris | "CountRows" >> beam.combiners.Count.PerKey()
        if self._num_shards:
            return counts | "FixedCount" >> beam.MapTuple(
                lambda split, count: (split, min(count, self._num_shards)))
        mean_sizes = (uris
                      | "SampleFiles" >> beam.combiners.Top.PerKey(
                          _SIZE_SAMPLE, key=_uri_digest, reverse=True)
                      | "MeanFileSize" >> beam.MapTuple(
                          lambda split, sample: (split, mean_file_size(sample))))
        return ({"rows": counts, "mean_bytes": mean_sizes}
                | "Join" >> beam.CoGroupByKey()
                | "ShardCount" >> beam.MapTuple(lambda split, stats: (split, shards_for(
                    stats["rows"][0], stats["mean_bytes"][0], self._target_shard_bytes))))


class WriteShards(beam.PTransform):
    """LabelledRows -> ShardWritten per file; failed images -> DEAD_LETTERS; every
    example's (sha256, ExampleRef) -> EXAMPLE_KEYS, with its content where
    `settings.keeps_content`.

    `plan` is PlanShards' output: (split, number of shards). Each shard leaves a receipt
    (shard_receipts.py); with `resuming`, a shard whose receipt vouches for it is not
    written again.
    """

    def __init__(self, plan: beam.PCollection, temp_dir: str, settings: RunSettings,
                 resuming: bool = False) -> None:
        super().__init__()
        self._plan = plan
        self._writer = _WriteShardFile(temp_dir, settings, resuming)

    def expand(self, labelled: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return (labelled
                | "PackByShard" >> beam.ParDo(_PackByShard(), plan=beam.pvalue.AsDict(self._plan))
                | "GroupByShard" >> beam.GroupByKey()
                | "LoadAndWrite" >> beam.ParDo(self._writer).with_outputs(
                    DEAD_LETTERS, EXAMPLE_KEYS, main="shards"))


class _PackByShard(beam.DoFn):
    """LabelledRows -> ((split, shard), pack): the rows as compressed JSON lines, a pack per
    shard per bundle, or per _PACK_BYTES of rows held.

    The DirectRunner keeps everything a GroupByKey groups in memory, in several copies,
    until the shards are written: packed, a manifest row costs about 20 bytes there, not
    about 240 as its own JSON value or 800 as Python objects (peak RSS of the 100,000-row
    bench: 902 MB, against 959 MB with a JSON value per row).
    """

    def start_bundle(self) -> None:
        self._held: dict[tuple[str, int], list[bytes]] = collections.defaultdict(list)
        self._held_bytes = 0

    def process(self, item: LabelledRow, plan: dict[str, int]
                ) -> Iterator[tuple[tuple[str, int], bytes]]:
        line = item.to_json()
        self._held[item.row.split, shard_of(item.row.uri, plan[item.row.split])].append(line)
        self._held_bytes += len(line)
        if self._held_bytes >= _PACK_BYTES:
            yield from self._packs()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for keyed_pack in self._packs():
            yield GlobalWindows.windowed_value(keyed_pack)

    def _packs(self) -> Iterator[tuple[tuple[str, int], bytes]]:
        for key, lines in self._held.items():
            live_progress.planned(len(lines))
            yield key, pack_rows(lines)
        self._held.clear()
        self._held_bytes = 0


def pack_rows(lines: Iterable[bytes]) -> bytes:
    """LabelledRow JSON lines -> one pack. Level 1: rows share most of their bytes."""
    return zlib.compress(b"\n".join(lines), 1)


def unpack_rows(pack: bytes) -> Iterator[LabelledRow]:
    return map(LabelledRow.from_json, zlib.decompress(pack).split(b"\n"))


class _WriteShardFile(beam.DoFn):
    """Loads, checks and encodes one shard's images in order and writes its TFRecord file.

    Rows naming the same image in the same split are next to each other in the write
    order. They make one example, the image loaded once for all of them: with detection
    one box per row, with multi-label the union of the rows' labels; with single labels
    the first row (by manifest and line) makes the example and the others are
    dead-lettered as duplicate_row.
    Images are read in batches on a small thread pool through a bounded window, so at
    most a few batches are in memory at once, and each batch is decoded by one of the
    process's decoding processes (decode_pool.py), or in its thread with
    --decode_processes 0. Either way the file is written in the rows' order, so its bytes
    do not depend on where or how many at once images were decoded.
    """

    def __init__(self, temp_dir: str, settings: RunSettings, resuming: bool = False) -> None:
        self._temp_dir = temp_dir
        self._resuming = resuming
        self._format = settings.shard_format
        self._image = settings.image
        self._decoding = settings.decoding
        self._label_mode = settings.label_mode
        self._extra_columns = settings.extra_columns
        self._keep_content = settings.keeps_content
        self._written = Metrics.counter("images", "written")
        self._rejected = Metrics.counter("images", "rejected")
        self._resumed = Metrics.counter("shards", "resumed")
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def setup(self) -> None:
        self._prepare_all = decode_pool.acquire(self._decoding)
        self._executor = concurrent.futures.ThreadPoolExecutor(self._decoding.thread_count())

    def teardown(self) -> None:
        if self._executor:
            self._executor.shutdown()
            self._executor = None
            decode_pool.release(self._decoding)

    def process(self, shard_packs: tuple[tuple[str, int], Iterable[bytes]]
                ) -> Iterator[ShardWritten | beam.pvalue.TaggedOutput]:
        (split, shard), packs = shard_packs
        ordered = sorted(itertools.chain.from_iterable(map(unpack_rows, packs)),
                         key=lambda item: _write_order(item.row))
        digest = rows_digest(ordered)
        receipt_at = receipt_path(self._temp_dir, split, shard)
        receipt = read_receipt(receipt_at, digest) if self._resuming else None
        if receipt is None:
            receipt = yield from self._write(split, shard, ordered, digest)
            write_receipt(receipt_at, receipt)
            return
        self._resumed.inc()
        live_progress.handled(len(ordered), len(receipt.dead_letters))
        for dead in receipt.dead_letters:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, dead)
        for keyed in receipt.example_keys:
            yield beam.pvalue.TaggedOutput(EXAMPLE_KEYS, keyed)
        yield receipt.written._replace(resumed=True)

    def _write(self, split: str, shard: int, ordered: list[LabelledRow], digest: str
               ) -> Iterator[ShardWritten | beam.pvalue.TaggedOutput]:
        """Writes the shard, yielding what it gives; returns its receipt."""
        dead_letters: list[DeadLetter] = []
        example_keys: list[tuple[str, ExampleRef]] = []
        for output in self._write_files(split, shard, ordered):
            if isinstance(output, ShardWritten):
                written = output
            elif output.tag == DEAD_LETTERS:
                dead_letters.append(output.value)
            else:
                example_keys.append(output.value)
            yield output
        files = ((written.temp_path, *(written.temp_path + suffix
                                       for suffix in self._format.companions),
                  thumbnails_path(self._temp_dir, split, shard))
                 if written.examples else ())
        return ShardReceipt(digest, written, tuple(dead_letters), tuple(example_keys),
                            file_sizes(files))

    def _write_files(self, split: str, shard: int, ordered: list[LabelledRow]
                     ) -> Iterator[ShardWritten | beam.pvalue.TaggedOutput]:
        """The shard's file, its companions and thumbnails, closed before the ShardWritten
        that comes last."""
        images = []
        for _, group in itertools.groupby(ordered, key=lambda item: item.row.uri):
            first, *others = group
            if self._label_mode is LabelMode.SINGLE and others:
                for other in others:
                    yield beam.pvalue.TaggedOutput(DEAD_LETTERS, _duplicate_row(other, first))
                live_progress.handled(len(others), len(others))
                others = []
            images.append([first, *others])
        temp_path = FileSystems.join(
            self._temp_dir, f"{split}-{shard:05d}{self._format.suffix}")
        examples = rows_written = source_bytes = 0
        labels: collections.Counter[str] = collections.Counter()
        reencoded: collections.Counter[str] = collections.Counter()
        longest_sides: collections.Counter[str] = collections.Counter()
        file_bytes: collections.Counter[str] = collections.Counter()
        with contextlib.ExitStack() as opened:
            # Created with the first example: a shard whose images were all rejected
            # leaves no file (and Beam's S3 filesystem cannot write an empty one).
            out = thumbnails = None
            threads = self._decoding.thread_count()
            # Images go to a thread, and on to a decoding process, a batch at a time: small
            # enough that every thread gets work in a small shard.
            size = max(1, min(_BATCH_IMAGES, len(images) // threads))
            batches = [images[start:start + size] for start in range(0, len(images), size)]
            outcomes = itertools.chain.from_iterable(
                _ordered_map(self._executor, self._encode_batch, batches, threads + 1))
            for image_rows, outcome in zip(images, outcomes, strict=True):
                if isinstance(outcome, ImageRejected):
                    self._rejected.inc()
                    for item in image_rows:
                        yield beam.pvalue.TaggedOutput(DEAD_LETTERS, item.row.dead_letter(
                            outcome.reason, outcome.message))
                    live_progress.handled(len(image_rows), len(image_rows))
                    continue
                for dead in outcome.wrong_size:
                    yield beam.pvalue.TaggedOutput(DEAD_LETTERS, dead)
                live_progress.handled(len(image_rows), len(outcome.wrong_size))
                record, image_rows = outcome.record, outcome.rows
                if record is None:
                    self._rejected.inc()
                    continue
                if out is None:
                    out = opened.enter_context(
                        self._format.create(temp_path, BeamFiles()))
                    thumbnails = opened.enter_context(FileSystems.create(
                        thumbnails_path(self._temp_dir, split, shard)))
                out.write(record)
                write_record(thumbnails, outcome.thumbnail)
                self._written.inc()
                image_labels = example_labels(image_rows, self._label_mode)
                first = image_rows[0].row
                content = ExampleContent(tuple(item.row for item in image_rows),
                                         outcome.source_bytes, outcome.reencoded,
                                         outcome.longest_side)
                yield beam.pvalue.TaggedOutput(EXAMPLE_KEYS, (outcome.sha256, ExampleRef(
                    split, shard, examples, first.manifest, first.line, first.uri,
                    tuple(image_labels), outcome.perceptual_hash,
                    content if self._keep_content else None)))
                examples += 1
                rows_written += len(image_rows)
                source_bytes += outcome.source_bytes
                labels.update(image_labels)
                if outcome.reencoded:
                    reencoded[outcome.reencoded] += 1
                longest_sides[longest_side_bin(outcome.longest_side)] += 1
                file_bytes[file_bytes_bin(outcome.source_bytes)] += 1
        file_size = _file_size(temp_path) if examples else 0
        yield ShardWritten(split, shard, temp_path, examples, rows_written, file_size,
                           source_bytes, dict(labels), dict(reencoded), dict(longest_sides),
                           dict(file_bytes))

    def _encode_batch(self, batch: list[list[LabelledRow]]) -> list[_Encoded | ImageRejected]:
        """Each image's outcome: its files read here, decoded together by one decoder."""
        read = [_read(rows[0].row.uri) for rows in batch]
        decoded = iter(self._prepare_all(
            [data for data in read if isinstance(data, bytes)], self._image))
        return [self._encode(rows, data, next(decoded)) if isinstance(data, bytes) else data
                for rows, data in zip(batch, read)]

    def _encode(self, rows: list[LabelledRow], data: bytes, image: PreparedImage | ImageRejected
                ) -> _Encoded | ImageRejected:
        if isinstance(image, ImageRejected):
            return image
        try:
            extra_images = self._extra_images(rows[0].row)
        except ImageRejected as rejected:
            return rejected
        rows, wrong_size = _check_declared_size(rows, image.source_size)
        record = encode_example(rows, image, self._label_mode, self._extra_columns,
                                extra_images) if rows else None
        return _Encoded(record, image.sha256, image.perceptual_hash, image.thumbnail,
                        image.reencoded, max(image.source_size), len(data), rows, wrong_size)

    def _extra_images(self, row: ManifestRow) -> dict[str, PreparedImage]:
        """The images of the row's image extra columns; a failure names its column."""
        images = {}
        for column, uri in zip(self._extra_columns, row.extras, strict=True):
            if column.type == IMAGE:
                try:
                    (image,) = self._prepare_all([read_image_bytes(uri)], self._image)
                    if isinstance(image, ImageRejected):
                        raise image
                    images[column.name] = image
                except ImageRejected as rejected:
                    raise ImageRejected(rejected.reason,
                                        f"column {column.name!r}: {rejected.message}") from None
        return images


def _read(uri: str) -> bytes | ImageRejected:
    try:
        return read_image_bytes(uri)
    except ImageRejected as rejected:
        return rejected


def _check_declared_size(rows: list[LabelledRow], actual: tuple[int, int]
                         ) -> tuple[list[LabelledRow], list[DeadLetter]]:
    """The rows whose declared image size (pixel boxes) is the image's own, and a
    size_mismatch dead letter for each of the others: their boxes would be misplaced.

    Compared with the source file's size, before any --max_side resize or EXIF rotation,
    which is the size the pixels were annotated on (and what generate_tfrecord.py divides by).
    """
    kept, wrong = [], []
    for item in rows:
        declared = item.row.image_size
        if declared is None or tuple(declared) == actual:
            kept.append(item)
        else:
            wrong.append(item.row.dead_letter(reasons.SIZE_MISMATCH, (
                f"the annotation declares a {declared[0]}x{declared[1]} image but the image "
                f"is {actual[0]}x{actual[1]} pixels")))
    return kept, wrong


def _duplicate_row(duplicate: LabelledRow, first: LabelledRow) -> DeadLetter:
    labels = ("" if duplicate.row.labels == first.row.labels else
              f", with label {'|'.join(first.row.labels)!r} there")
    return duplicate.row.dead_letter(
        reasons.DUPLICATE_ROW, f"the same image as {first.row.manifest} line "
        f"{first.row.line}{labels}; written once, from that row")


def _ordered_map(executor: concurrent.futures.Executor, fn: Callable[[_T], _R],
                 items: Iterable[_T], window: int) -> Iterator[_R]:
    """executor.map with at most `window` results pending, so memory stays bounded."""
    pending: collections.deque[concurrent.futures.Future] = collections.deque()
    for item in items:
        pending.append(executor.submit(fn, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _uri_digest(uri: str) -> bytes:
    return hashlib.sha256(uri.encode("utf-8", "surrogateescape")).digest()


def _write_order(row: ManifestRow) -> tuple[bytes, str, int]:
    """A fixed pseudo-random order: shards do not keep the manifest's class-sorted runs."""
    return _uri_digest(row.uri), row.manifest, row.line


def mean_file_size(uris: Iterable[str], seconds: float = _SIZE_SECONDS) -> float:
    """The mean size of the files that could be statted, all at once, within `seconds`.

    A missing file, or one whose storage did not answer in time, only leaves the sample
    smaller; with no size at all the mean is 0 (one shard per split).
    """
    found = within_deadline([functools.partial(_file_size, uri) for uri in uris], seconds,
                            "size-estimate")
    sizes = [size for size in found if size is not None]
    return sum(sizes) / len(sizes) if sizes else 0.0


def _file_size(path: str) -> int:
    # One request on a remote filesystem, where FileSystems.match of a path takes two.
    return FileSystems.get_filesystem(path).metadata(path).size_in_bytes
