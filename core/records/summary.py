"""summary.json as one typed record, as TFDS's DatasetInfo and SplitInfo describe a dataset.

The publish step builds a `Summary` and writes it with `to_json()`; every reader (the
console table, report.html, the TFDS metadata, `Output`, `verify`, the Python API) reads
it with `from_json()` and takes attributes, so no module reads the file by string keys.
A field an older output lacks reads as its default (no histograms, no copies counted,
TFRecord shards); a file that is not a summary raises pydantic's ValidationError (a
ValueError) naming the field. Every file name it lists is confined to the output folder
(naming.confined_name) and every split is one of splits.SPLITS, so a summary.json that
names `../elsewhere/x` or a URL is refused, naming the entry, before any reader opens it.

Free of Beam and TensorFlow: readers import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

import pydantic

from image_tfrecords.core.file_formats import DEFAULT_FORMAT, ShardFormat, shard_format
from image_tfrecords.core.records.choices import Dedupe, LabelMode, LabelOrder, UnseenLabel
from image_tfrecords.core.records.naming import confined_name
from image_tfrecords.core.records.splits import Split

# A split whose shards hold fewer examples than this on average is warned about (the
# console, summary.json's few_examples_per_shard): a reader then opens a file (and its
# index) for every few examples, and a shard placed by hash may be left with one.
MIN_EXAMPLES_PER_SHARD = 10

# A file of the output, by its name in the output folder; one that would leave it is refused.
FileName = Annotated[str, pydantic.AfterValidator(confined_name)]


class _Record(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True)


class FeatureInfo(_Record):
    """One key of the examples: its dtype, and whether it holds a list (multi-label ids
    and texts, every image/object/* key) rather than one value."""

    dtype: Literal["bytes", "int64", "float"]
    list: bool


class ShardInfo(_Record):
    file: FileName  # its name in the output folder
    records: int
    bytes: int
    companions: tuple[FileName, ...] = ()  # the files beside it (ShardFormat.companions)


class SplitInfo(_Record):
    """What one split's shards hold; the counts by name are of examples (detection:
    `labels` counts objects), the histograms of source images."""

    examples: int = 0
    bytes: int = 0  # of the shard files as written
    source_bytes: int = 0  # of the source image files
    labels: dict[str, int] = {}
    unseen_label_examples: int = 0  # with a label the vocabulary lacks (--unseen_label oov)
    reencoded: dict[str, int] = {}  # why -> images re-encoded
    longest_side: dict[str, int] = {}  # histograms.LONGEST_SIDE_BINS, smallest first
    file_bytes: dict[str, int] = {}  # histograms.FILE_BYTE_BINS, smallest first
    # examples.OBJECT_ANNOTATION_FEATURES kind (masks, keypoints...) -> examples holding it
    annotations: dict[str, int] = {}
    shards: tuple[ShardInfo, ...] = ()


class LabelWarning(_Record):
    """Labels that are probably a mistake (core/worker/label_checks.py), and where they are."""

    kind: Literal["separator", "variants", "numeric"]
    message: str
    labels: tuple[str, ...]
    rows: int  # the rows that carry them, in every split
    first_rows: tuple[str, ...]  # the first of them, as manifest:line


class LabelIdChange(_Record):
    """A label whose id is not the one the output this run replaced (--overwrite) gave it.
    Ids are places in the label vocabulary (detection's class ids are these plus 1)."""

    label: str
    old_id: int | None  # None: the replaced output had no such label
    new_id: int | None  # None: this run's vocabulary has no such label

    @classmethod
    def between(
        cls, replaced: Sequence[str], vocabulary: Sequence[str]
    ) -> tuple[LabelIdChange, ...]:
        """The labels whose ids differ: by new id, then those gone, by old id."""
        old = {label: place for place, label in enumerate(replaced)}
        new = {label: place for place, label in enumerate(vocabulary)}
        changed = [
            cls(label=label, old_id=old.get(label), new_id=place)
            for label, place in new.items()
            if old.get(label) != place
        ]
        return tuple(
            changed
            + [
                cls(label=label, old_id=place, new_id=None)
                for label, place in old.items()
                if label not in new
            ]
        )


class ErrorsInfo(_Record):
    """The dead letters: rows that could not become an example."""

    by_reason: dict[str, int] = {}
    files: tuple[FileName, ...] = ()  # errors-*.jsonl


class CopiesInfo(_Record):
    """Copies of an image found among the examples (each beyond the one kept)."""

    copies: int = 0
    by_splits: dict[str, int] = {}  # "kept split/copy split" -> copies; two splits: a leak
    dropped: bool = False  # whether --dedupe left them out of the shards
    files: tuple[FileName, ...] = ()  # duplicates-*.jsonl or near_duplicates-*.jsonl


class NearCopiesInfo(CopiesInfo):
    max_distance: int | None = None  # pHash bits; None: written before near-copies were sought


class RunOptions(_Record):
    """The command line, every option under its flag's name (and the runner's). The ones
    typed here are those readers act on; the others are kept as given, a relative local
    path made absolute (pipeline/options.py)."""

    model_config = pydantic.ConfigDict(frozen=True, extra="allow")

    runner: str = "DirectRunner"
    label_mode: LabelMode = LabelMode.SINGLE
    unseen_label: UnseenLabel = UnseenLabel.ERROR
    label_order: LabelOrder = LabelOrder.FREQUENCY  # absent: written before it, by frequency
    dedupe: Dedupe = Dedupe.NONE
    file_format: str = DEFAULT_FORMAT  # absent: written before --file_format
    compression: str = "none"
    leave_out: str = ""  # what the input held that the examples were written without

    @property
    def shard_format(self) -> ShardFormat:
        """How the shards are read."""
        return shard_format(self.file_format, self.compression)


class MovedRow(_Record):
    """An image a daily run moved to another split: a new near-copy joined its group
    to a group of another split (core/launcher/grouped_split.py)."""

    uri: str
    was: Split
    now: Split
    # A new image (not in the earlier output) whose near-copies or group joined the
    # splits' images; None: the earlier output had the group in two splits already (it
    # was not split by groups, or its rows' groups changed).
    joined_by: str | None = None


class SplitGroups(_Record):
    """The split made with --split_by groups: what was kept together and how close each
    split came to what was asked (core/launcher/grouped_split.py)."""

    images: int  # images the staging conversion wrote, which the plan placed
    groups_kept_together: int  # groups of more than one image: copies, near-copies, declared
    images_in_groups: int
    largest_group: int  # images
    fractions_asked: dict[Split, float]
    fractions: dict[Split, float]  # of the images, as placed
    labels: dict[Split, dict[str, float]]  # of each split, each label's share of its labels
    labels_whole: dict[str, float]  # each label's share of all the images' labels
    moved: int = 0  # images an earlier output had in another split
    moved_listed: tuple[MovedRow, ...] = ()  # the first of them, by URI
    problems: tuple[str, ...] = ()  # asked fractions the groups made impossible


class RunInfo(_Record):
    """What the launcher knows before the run starts: the sources, options and versions."""

    manifests: tuple[str, ...] | None = None  # SPLIT=path for a split's own; local: absolute
    image_folder: str | None = None
    options: RunOptions
    versions: dict[str, str] = {}
    started_at: str = ""
    # The output whose unchanged examples were copied (--reuse_from, or the one
    # --overwrite replaced); None: every image was read.
    reused_from: str | None = None
    # --split_by groups: the groups kept together and the split's balance; None otherwise.
    split_groups: SplitGroups | None = None


# Of each kind of change ExampleChanges.lines names, the first few (the record keeps more).
NAMES_SAID = 3
# ExampleChanges' tallies as a person reads them: the examples', then the labels'.
CHANGE_NAMES = (
    ("added", "examples_added"),
    ("removed", "examples_removed"),
    ("relabelled", "relabelled"),
    ("image changed", "images_changed"),
    ("split moved", "splits_moved"),
    ("labels new", "labels_new"),
    ("labels gone", "labels_gone"),
)


class Tally(pydantic.BaseModel):
    """How many there are, and the first of them (in sorted order) by name."""

    model_config = pydantic.ConfigDict(frozen=True)

    count: int = 0
    first: tuple[str, ...] = ()


class ExampleChanges(pydantic.BaseModel):
    """What changed from an old output's examples to a new one's. Examples are named by
    their image's URI (each `first` lists a URI once, by URI order); a paired example is
    counted under each way it changed, so old examples = removed + paired and new
    examples = added + paired, where paired is at least unchanged."""

    model_config = pydantic.ConfigDict(frozen=True)

    old_examples: int
    new_examples: int
    examples_added: Tally  # of an image the old output has no example of (in that split)
    examples_removed: Tally  # whose image the new output has no example of (in that split)
    relabelled: Tally  # paired, with other label texts (in any order: detection's objects)
    images_changed: Tally  # paired, storing another image (its bytes' SHA-256 differs)
    splits_moved: Tally  # paired, in another split
    unchanged: int  # paired, in the same split with the same labels and image
    labels_new: Tally  # label texts of the new output's examples the old's have none of
    labels_gone: Tally  # label texts of the old output's examples the new's have none of

    @property
    def changed(self) -> bool:
        """Whether anything changed."""
        return not self.unchanged == self.old_examples == self.new_examples

    def kinds(self) -> list[tuple[str, Tally]]:
        """Each kind of change as a person reads it (CHANGE_NAMES), with its tally; the
        unchanged examples after the examples' changes, before the labels'."""
        tallies = [(name, getattr(self, field)) for name, field in CHANGE_NAMES]
        return [*tallies[:5], ("unchanged", Tally(count=self.unchanged)), *tallies[5:]]

    def lines(self) -> list[str]:
        """What changed, for a person: the examples on each side, then a line per kind of
        change with its count and its first few names (the record holds more)."""
        kinds = self.kinds()
        width = len(str(max(self.old_examples, self.new_examples)))
        said = [f"examples: {self.old_examples} -> {self.new_examples}"]
        for name, tally in kinds:
            named = ", ".join(tally.first[:NAMES_SAID])
            if tally.first and tally.count > NAMES_SAID:
                named += ", ..."
            said.append(f"  {name:<14}{tally.count:>{width}}  {named}".rstrip())
        return said


class Summary(RunInfo):
    """summary.json: what one run wrote, and the accounting that every row read is an
    example, a dead letter or a row discarded on purpose. A FileName is a file's name in
    the output folder (one with a `..` or empty part, absolute, a URL, a backslash or a
    control character is refused when read); a Split is train, validation or test."""

    finished_at: str = ""
    run_id: str = ""  # the run's id (records/naming.py): a retried publish knows its output
    resumed_shards: int = 0  # shards reused from a stopped run (--resume), not written again
    examples_reused: int = 0  # copied from `reused_from`, their images not read again
    changes: ExampleChanges | None = None  # since `reused_from` (core/report/changes.py)
    rows_read: int
    examples_written: int
    rows_in_examples: int  # more than examples_written with detection boxes
    rows_dead_lettered: int
    rows_discarded: int = 0  # DISCARD rows and objects left out: read, left out on purpose
    # Objects of shapes the examples cannot hold (CVAT's polylines, LabelMe's points...):
    # each is one row, among rows_discarded; their images are written with their other objects.
    objects_left_out: dict[str, int] = {}  # shape, as its source names it -> objects left out
    objects_clipped: int = 0  # boxes read whose corners reached outside the image: clipped, kept
    accounted: bool
    error_fraction: float
    splits: dict[Split, SplitInfo]  # train, validation, test
    empty_splits: tuple[Split, ...] = ()
    vocabulary: dict[str, tuple[str, ...]]  # "label", and each categorical --schema column
    vocabulary_pinned_from: str | None = None  # --vocabulary's file; None: from TRAIN
    # What declares the input's classes (YOLO's names, COCO's categories...) where they
    # are the vocabulary: "data/coco8.yaml (names)"; None with either of the above.
    vocabulary_declared_by: str | None = None  # the declaration the ids follow
    label_id_changes: tuple[LabelIdChange, ...] = ()  # ids not --reuse_from's or --overwrite's
    # --label_order sorted: labels whose TRAIN rows were all dead-lettered, which keep their ids
    unwritten_labels: tuple[str, ...] = ()  # sorted ids no written TRAIN example carries
    # --label_order frequency: the labels in the order of their written TRAIN examples
    # (detection: objects), where it is not the ids' (docs/output/labels.md)
    frequency_order_of_examples: tuple[str, ...] = ()  # --label_order frequency, if not the ids'
    errors: ErrorsInfo = ErrorsInfo()
    features: dict[str, FeatureInfo] = {}
    duplicates: CopiesInfo = CopiesInfo()
    near_duplicates: NearCopiesInfo = NearCopiesInfo()
    label_map: FileName | None = None  # label_map.pbtxt, with --label_mode detection
    label_warnings: tuple[LabelWarning, ...] = ()
    # A --num_shards too large for the data: splits of 2+ shards under MIN_EXAMPLES_PER_SHARD
    few_examples_per_shard: tuple[Split, ...] = ()  # splits under 10 examples a shard, on average
    files: tuple[FileName, ...] = ()  # everything published besides the shards and summary.json

    @property
    def labels(self) -> tuple[str, ...]:
        """The label vocabulary: a label's id is its position (detection: plus 1)."""
        return self.vocabulary["label"]

    @property
    def examples(self) -> dict[str, int]:
        """split -> examples written."""
        return {split: info.examples for split, info in self.splits.items()}

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> Summary:
        return cls.model_validate_json(text)


def few_examples_per_shard(splits: dict[Split, SplitInfo]) -> tuple[Split, ...]:
    """The splits whose shards hold fewer than MIN_EXAMPLES_PER_SHARD examples on average
    (one shard is never too many)."""
    return tuple(
        split
        for split, info in splits.items()
        if len(info.shards) > 1 and info.examples < MIN_EXAMPLES_PER_SHARD * len(info.shards)
    )
