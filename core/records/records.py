"""The typed records that cross between the pipeline's process and the worker processes
that write shards, and into the shards' receipts: the rows a shard is written from (as
the manifest readers make them and the label step labels them) and what writing it gave.
Plain NamedTuples, free of Beam and TensorFlow."""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Iterable
from typing import NamedTuple

from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.histograms import file_bytes_bin, longest_side_bin
from image_tfrecords.core.records.splits import Split
from image_tfrecords.core.storage.redaction import redact_urls, redacted


class Mask(NamedTuple):
    """An object's instance mask as its source gives it, drawn at the image's size by the
    shard writer (core/imaging/masks.py): polygons, or COCO's run-length encoding.

    The frame is what the coordinates are measured in: the declared image size in
    pixels, 1 x 1 for coordinates relative to the image, 100 x 100 for percentages. An
    RLE's frame is its own size, which must be the image's.
    """

    width: float
    height: float
    polygons: tuple[tuple[float, ...], ...] = ()  # each x0, y0, x1, y1, ...: 3 points or more
    counts: str | tuple[int, ...] | None = None  # COCO RLE, compressed (str) or not

    @classmethod
    def from_fields(cls, fields: list) -> Mask:
        width, height, polygons, counts = fields
        return cls(
            width,
            height,
            tuple(map(tuple, polygons)),
            counts if counts is None or isinstance(counts, str) else tuple(counts),
        )


class Keypoints(NamedTuple):
    """An object's keypoints relative to the image, as COCO gives them: per point x, y and
    its visibility (0 not labelled, 1 labelled but hidden, 2 visible), the points' names
    where the source names them, and the count the source declares (COCO's
    `num_keypoints`) where it declares one."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    visibility: tuple[int, ...]
    names: tuple[str, ...] = ()
    declared_num: int | None = None

    @property
    def num(self) -> int:
        """image/object/keypoint/num: the count the source declares, as
        create_coco_tf_record copies `num_keypoints`; where it declares none, the points
        with a place (visibility above 0), which is what COCO's count means."""
        if self.declared_num is not None:
            return self.declared_num
        return sum(1 for flag in self.visibility if flag > 0)

    @classmethod
    def from_fields(cls, fields: list) -> Keypoints:
        xs, ys, visibility, names, *declared_num = fields  # a receipt may predate it
        return cls(tuple(xs), tuple(ys), tuple(visibility), tuple(names), *declared_num)


class Box(NamedTuple):
    """A bounding box in coordinates relative to the image's width and height, in [0, 1],
    with the Object Detection API's per-object flags (0 when the source does not say),
    and the object's mask and keypoints where the source has them."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float
    difficult: int = 0  # Pascal VOC's <difficult>
    truncated: int = 0  # Pascal VOC's <truncated>
    is_crowd: int = 0  # COCO's iscrowd
    mask: Mask | None = None
    keypoints: Keypoints | None = None
    # Its source's corners (or points) reached outside the image and were moved onto it:
    # counted in summary.json's objects_clipped.
    clipped: bool = False

    @classmethod
    def from_fields(cls, fields: list) -> Box:
        *corners_and_flags, mask, keypoints, clipped = fields
        return cls(
            *corners_and_flags,
            mask and Mask.from_fields(mask),
            keypoints and Keypoints.from_fields(keypoints),
            clipped,
        )


class ManifestRow(NamedTuple):
    """One valid manifest row; `uri` is resolved against the manifest's folder."""

    manifest: str
    line: int
    raw: str
    split: str
    uri: str
    labels: tuple[str, ...]  # one label, or several with multi-label rules
    # Detection: the labels' boxes, one per label; a row with neither is an image
    # without objects.
    boxes: tuple[Box, ...] = ()
    extras: tuple[int | float | str, ...] = ()  # typed values of RowRules.extra_columns
    # (width, height) the annotation declares for boxes given in pixels; the shard writer
    # dead-letters the row when the image's own size differs.
    image_size: tuple[int, int] | None = None
    # The boxes are in pixels of the image's own size, which the annotation does not
    # declare (Hugging Face's objects): the shard writer divides them by it.
    boxes_in_pixels: bool = False
    # The boxes were drawn on the image turned upright by its EXIF orientation, as the
    # tool showed it (CVAT, Label Studio, LabelMe, Ultralytics), not on its stored pixels
    # (what TensorFlow decodes, and the Object Detection API's converters assume). A
    # declared size that fits only one of the two says which, whatever this says.
    drawn_upright: bool = False
    # The image's semantic segmentation map (class indices per pixel), where the input
    # has one: VOC's SegmentationClass PNG, or a --schema column of type segmentation.
    segmentation: str | None = None
    # The row's file lists the image once with all its objects (COCO, VOC, CVAT, Label
    # Studio, LabelMe, Hugging Face): rows of the image from another such file are its
    # objects again, not more of them (the shard writer keeps the first file's).
    listed_whole: bool = False
    # The RGB colour of each class index its segmentation map draws, index 0 first (CVAT's
    # and datumaro's VOC export: an RGB map, labelmap.txt's colours); None: the map holds
    # the indices (a palette or greyscale PNG).
    segmentation_colours: tuple[tuple[int, int, int], ...] | None = None

    def shown(self) -> ManifestRow:
        """The row as outputs keep it (receipts, reports of copies): its URLs without
        credentials (core/storage/redaction.py). The image is read from the row as written."""
        return self._replace(raw=redact_urls(self.raw), uri=redacted(self.uri))

    def dead_letter(self, reason: str, message: str) -> DeadLetter:
        return DeadLetter(self.manifest, self.line, self.raw, self.uri, self.split, reason, message)

    @classmethod
    def from_fields(cls, fields: list) -> ManifestRow:
        """The row from its JSON array (a LabelledRow's or a receipt's, parsed)."""
        (
            *scalars,
            labels,
            boxes,
            extras,
            image_size,
            boxes_in_pixels,
            drawn_upright,
            segmentation,
            listed_whole,
            colours,
        ) = fields
        return cls(
            *scalars,
            tuple(labels),
            tuple(map(Box.from_fields, boxes)),
            tuple(extras),
            tuple(image_size) if image_size else None,
            boxes_in_pixels,
            drawn_upright,
            segmentation,
            listed_whole,
            tuple(map(tuple, colours)) if colours else None,
        )


class LabelledRow(NamedTuple):
    row: ManifestRow
    label_ids: tuple[int, ...]  # one per row.labels, in the same order
    category_ids: tuple[int, ...] = ()  # one per categorical extra column, in schema order

    def to_json(self) -> bytes:
        return json.dumps(self).encode()

    @classmethod
    def from_json(cls, text: bytes) -> LabelledRow:
        row, label_ids, category_ids = json.loads(text)
        return cls(ManifestRow.from_fields(row), tuple(label_ids), tuple(category_ids))


class ShardWritten(NamedTuple):
    """One shard file written to the temp dir, awaiting its final name."""

    split: Split
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
    # examples.OBJECT_ANNOTATION_FEATURES kind (masks, keypoints...) -> examples holding it
    annotations: dict[str, int]
    resumed: bool = False  # reused from a stopped run (--resume), its images not read again
    reused: int = 0  # examples copied from the output of --reuse_from, their images not read


@dataclasses.dataclass
class ShardTally:
    """What a shard's examples add up to, counted as each is written (shard_writer.py) or
    as its parts are joined (shard_parts.py): the numbers of its ShardWritten."""

    examples: int = 0
    rows: int = 0
    source_bytes: int = 0
    reused: int = 0
    labels: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    reencoded: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    longest_side: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    file_bytes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    annotations: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def add_example(
        self,
        *,
        rows: int,
        labels: Iterable[str],
        content: ExampleContent,
        annotations: Iterable[str],
        reused: bool,
    ) -> None:
        self.examples += 1
        self.rows += rows
        self.source_bytes += content.source_bytes
        self.reused += reused
        self.labels.update(labels)
        if content.reencoded:
            self.reencoded[content.reencoded] += 1
        self.longest_side[longest_side_bin(content.longest_side)] += 1
        self.file_bytes[file_bytes_bin(content.source_bytes)] += 1
        self.annotations.update(annotations)

    def add_part(self, part: ShardWritten) -> None:
        """A part of the shard, joined after those added before it."""
        self.examples += part.examples
        self.rows += part.rows
        self.source_bytes += part.source_bytes
        self.reused += part.reused
        for counter, counts in (
            (self.labels, part.labels),
            (self.reencoded, part.reencoded),
            (self.longest_side, part.longest_side),
            (self.file_bytes, part.file_bytes),
            (self.annotations, part.annotations),
        ):
            counter.update(counts)

    def written(self, split: Split, shard: int, temp_path: str, size: int) -> ShardWritten:
        """The shard's record, its file at `temp_path` of `size` bytes."""
        return ShardWritten(
            split=split,
            shard=shard,
            temp_path=temp_path,
            examples=self.examples,
            rows=self.rows,
            bytes=size,
            source_bytes=self.source_bytes,
            labels=dict(self.labels),
            reencoded=dict(self.reencoded),
            longest_side=dict(self.longest_side),
            file_bytes=dict(self.file_bytes),
            annotations=dict(self.annotations),
            reused=self.reused,
        )


class ExampleContent(NamedTuple):
    """What a written example came from and counted for: what dropping it takes back."""

    rows: tuple[ManifestRow, ...]
    source_bytes: int
    reencoded: str | None
    longest_side: int  # of the source image, in pixels


class ExampleSource(NamedTuple):
    """What reading an example's image gave beside the example: what a later run needs
    to copy the example instead of reading the image again (core/records/example_index.py)."""

    identity: str | None  # storage.identity of the image when it was read
    key: str | None  # example_index.example_key of its rows and settings; None: not reusable
    source_bytes: int
    reencoded: str | None
    longest_side: int  # of the source image, in pixels
    # example_proto.features_digest of the record's features but its image bytes and
    # label fields (which a copy checks apart); None where no index is written.
    features_digest: str | None = None


class ExampleRef(NamedTuple):
    """Where one written example is, and the first of the rows it came from."""

    split: Split
    shard: int
    position: int  # record index in the shard's temp file
    manifest: str
    line: int
    uri: str
    labels: tuple[str, ...]  # label texts (detection: one per object)
    perceptual_hash: int  # images.PreparedImage.perceptual_hash
    content: ExampleContent | None  # only where RunSettings.keeps_content
    # None once sent to the pipeline's process (ShardOutcome.sent), or where no index is
    # written (tests).
    source: ExampleSource | None = None


class ShardOutcome(NamedTuple):
    """What a shard gave the rest of the pipeline; its receipt holds the same."""

    written: ShardWritten
    dead_letters: tuple[DeadLetter, ...]  # its rows that became no example
    example_keys: tuple[tuple[str, ExampleRef], ...]  # (sha256, where) per example

    def sent(self) -> ShardOutcome:
        """What a worker process sends the pipeline's process: each example without its
        ExampleSource, which only the example index that the worker writes keeps (the
        pipeline's process would only unpickle and pickle it again, per example)."""
        return self._replace(
            example_keys=tuple(
                (sha256, ref._replace(source=None)) for sha256, ref in self.example_keys
            )
        )


class ShardExamples(NamedTuple):
    """A shard's examples as the copy search and the report take them: one element per
    shard, not one per example."""

    split: str
    shard: int
    keys: tuple[tuple[str, ExampleRef], ...]  # ShardOutcome.example_keys
