"""What one conversion does, settled once: `RunSettings`, built from the command line by
`ConvertOptions.run_settings()` and passed whole to the transforms pipeline/graph.py
wires, which read what they need from it (as TFDS passes a `ShardConfig`).

The choices are enums whose members equal, and print as, the values the command line
takes, so summary.json and messages show them as the user wrote them. Free of Beam and
TensorFlow: the command line checks its options before either starts.
"""

from __future__ import annotations

import dataclasses
import enum

from transforms.copies import DEFAULT_NEAR_DISTANCE
from transforms.decode_pool import Decoding
from transforms.file_formats import DEFAULT_FORMAT, ShardFormat, shard_format
from transforms.images import ImageSettings
from transforms.schema import ExtraColumn


class _Choice(str, enum.Enum):
    """A command-line choice: equal to its value, and formatted as it."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)


class LabelMode(_Choice):
    """--label_mode: what a row labels."""

    SINGLE = "single"  # one label per image
    MULTI = "multi"  # every label of an image, as a list
    DETECTION = "detection"  # boxes, a label each


class UnseenLabel(_Choice):
    """--unseen_label: a VALIDATION/TEST label that TRAIN never saw."""

    ERROR = "error"  # dead-letters its row
    OOV = "oov"  # keeps it, with the id len(vocabulary)


class Dedupe(_Choice):
    """--dedupe: which copies of an image are written only once."""

    NONE = "none"  # copies are reported, all written
    SHA256 = "sha256"  # byte-identical copies are dropped
    NEAR = "near"  # near-copies too


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """How rows become examples and shards. Plain values given for the choices (as tests
    do) become their enums."""

    label_mode: LabelMode = LabelMode.SINGLE
    unseen_label: UnseenLabel = UnseenLabel.ERROR
    extra_columns: tuple[ExtraColumn, ...] = ()  # from --schema
    shard_format: ShardFormat = dataclasses.field(
        default_factory=lambda: shard_format(DEFAULT_FORMAT))  # --file_format, --compression
    image: ImageSettings = dataclasses.field(default_factory=ImageSettings)
    decoding: Decoding = dataclasses.field(default_factory=Decoding)
    dedupe: Dedupe = Dedupe.NONE
    near_distance: int = DEFAULT_NEAR_DISTANCE  # bits of pHash that make a near-copy

    def __post_init__(self) -> None:
        for name, choice in (("label_mode", LabelMode), ("unseen_label", UnseenLabel),
                             ("dedupe", Dedupe)):
            object.__setattr__(self, name, choice(getattr(self, name)))
        object.__setattr__(self, "extra_columns", tuple(self.extra_columns))

    @property
    def oov_bucket(self) -> bool:
        """Whether unseen labels get an id of their own (len(vocabulary))."""
        return self.unseen_label is UnseenLabel.OOV

    @property
    def keeps_content(self) -> bool:
        """Whether the shard writer keeps what each example holds, for --dedupe to drop
        copies and correct the counts."""
        return self.dedupe is not Dedupe.NONE
