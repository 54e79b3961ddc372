"""What one conversion does, settled once: `RunSettings`, built from the command line by
`ConvertOptions.run_settings()` and passed whole to the transforms pipeline/graph.py
wires, which read what they need from it (as TFDS passes a `ShardConfig`).

The choices are choices.py's enums. Free of TensorFlow: the command line checks its
options before it starts.
"""

from __future__ import annotations

import dataclasses
import functools

from image_tfrecords.core.file_formats import DEFAULT_FORMAT, ShardFormat, shard_format
from image_tfrecords.core.records.choices import (
    DEFAULT_LABEL_SEPARATOR,
    Dedupe,
    LabelMode,
    LabelOrder,
    UnseenLabel,
)
from image_tfrecords.core.records.copies import DEFAULT_NEAR_DISTANCE
from image_tfrecords.core.records.example_index import settings_digest
from image_tfrecords.core.records.image_settings import ImageSettings
from image_tfrecords.core.records.schema import ExtraColumn
from image_tfrecords.core.records.workers import Workers
from image_tfrecords.core.storage.downloads import DownloadSettings
from image_tfrecords.core.storage.filesystem_options import FilesystemOptions


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """How rows become examples and shards. Plain values given for the choices (as tests
    do) become their enums."""

    label_mode: LabelMode = LabelMode.SINGLE
    label_separator: str = DEFAULT_LABEL_SEPARATOR  # joins several labels in one field (multi)
    unseen_label: UnseenLabel = UnseenLabel.ERROR
    label_order: LabelOrder = LabelOrder.SORTED  # the ids of vocabularies learnt from TRAIN
    extra_columns: tuple[ExtraColumn, ...] = ()  # from --schema
    shard_format: ShardFormat = dataclasses.field(
        default_factory=lambda: shard_format(DEFAULT_FORMAT)
    )  # --file_format, --compression
    image: ImageSettings = dataclasses.field(default_factory=ImageSettings)
    workers: Workers = dataclasses.field(default_factory=Workers)
    downloads: DownloadSettings = dataclasses.field(default_factory=DownloadSettings)
    dedupe: Dedupe = Dedupe.NONE
    near_distance: int = DEFAULT_NEAR_DISTANCE  # bits of pHash that make a near-copy
    # Beam's filesystems' options, for workers Beam's harness gave none (a worker pool)
    filesystems: FilesystemOptions = dataclasses.field(default_factory=FilesystemOptions)

    def __post_init__(self) -> None:
        for name, choice in (
            ("label_mode", LabelMode),
            ("unseen_label", UnseenLabel),
            ("label_order", LabelOrder),
            ("dedupe", Dedupe),
        ):
            object.__setattr__(self, name, choice(getattr(self, name)))
        object.__setattr__(self, "extra_columns", tuple(self.extra_columns))

    @property
    def oov_bucket(self) -> bool:
        """Whether unseen labels get an id of their own (len(vocabulary))."""
        return self.unseen_label is UnseenLabel.OOV

    @functools.cached_property
    def example_digest(self) -> str:
        """What of these settings shapes an example's bytes, as a digest
        (core/records/example_index.py keys each example with it)."""
        return settings_digest(self.label_mode, self.image, self.extra_columns)

    @property
    def writes_index(self) -> bool:
        """Whether each shard's example index is written: not when --dedupe drops copies,
        which rewrites shards after it (an index of the shards as first written would
        misplace their examples)."""
        return self.dedupe is Dedupe.NONE

    @property
    def keeps_content(self) -> bool:
        """Whether the shard writer keeps what each example holds, for --dedupe to drop
        copies and correct the counts."""
        return self.dedupe is not Dedupe.NONE
