"""What a worker process does with a chunk of rows (core/records/chunks.py), once in each pass.

Pass 1, SurveyTask: parse the chunk and sum up what planning needs: rows per split, the
split's size sample, TRAIN's labels with their row counts (for tf.Transform's
vocabulary) and the rows that are dead letters. Pass 2, PackTask: parse it again, give
each row its label ids, and pack the rows by the shard and part they go to. Either way
what goes back is small (counts, packs of ~20 bytes a row), and the pipeline's process
handles one element per chunk, not one per row.

Runs in a worker process (core/worker/pool.py) or, with no worker processes or for a source
read with Beam's listing, in the pipeline's own; free of Beam's runner and TensorFlow.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from image_tfrecords.core.inputs.rows import DiscardedRow, ManifestItem, RowRules
from image_tfrecords.core.inputs.sources import FORMATS, read_chunk
from image_tfrecords.core.records.chunks import RowChunk
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import LabelledRow, ManifestRow
from image_tfrecords.core.records.splits import SPLITS
from image_tfrecords.core.worker.label_checks import FIRST_ROWS, LabelSeen
from image_tfrecords.core.worker.label_ids import LabelLookup
from image_tfrecords.core.worker.shard_writer import Progress, SplitPlan, pack_rows, uri_digest

if TYPE_CHECKING:
    from image_tfrecords.core.records.run_settings import RunSettings

TRAIN = SPLITS[0]


class TrainLabels(NamedTuple):
    """TRAIN rows that carry the same labels and categorical values, and how many."""

    labels: tuple[str, ...]
    categories: tuple[str, ...]  # str() of each categorical extra column's value
    rows: int


class ChunkSurvey(NamedTuple):
    """What pass 1 learns from a chunk."""

    rows: dict[str, int]  # split -> valid rows
    size_sample: dict[str, list[str]]  # split -> its sample's URIs (sample_of)
    train_labels: list[TrainLabels]
    dead_letters: list[DeadLetter]
    discarded: int  # DISCARD rows and objects left out: read, and left out on purpose
    objects_left_out: dict[str, int]  # shape -> objects of it left out (among discarded)
    labels_seen: dict[str, LabelSeen]  # every split's labels, for core/worker/label_checks.py
    objects_clipped: int = 0  # boxes whose source reached outside the image (Box.clipped)

    @property
    def rows_read(self) -> int:
        return sum(self.rows.values()) + len(self.dead_letters) + self.discarded


def sample_of(uris: list[str], size: int) -> list[str]:
    """The `size` URIs of least SHA-256 (a row's each time it is named): a sample that
    does not depend on the rows' order or chunks, as the sample of the samples of any
    cut of the rows is the sample of them all."""
    return heapq.nsmallest(size, uris, key=uri_digest)


@dataclasses.dataclass(frozen=True)
class _ChunkTask:
    """A chunk's rows to read, and how (in_worker, for transforms/in_workers.py's WorkerTask: by
    its source's format)."""

    chunk: RowChunk
    rules: RowRules

    @property
    def in_worker(self) -> bool:
        return FORMATS[self.chunk.source.format].in_worker


@dataclasses.dataclass(frozen=True)
class SurveyTask(_ChunkTask):
    sample_size: int
    categorical: tuple[int, ...]  # places of the categorical columns in ManifestRow.extras

    @property
    def name(self) -> str:
        return f"the survey of {self.chunk.name}"

    def run(self, settings: RunSettings, progress: Progress) -> ChunkSurvey:
        return survey(read_chunk(self.chunk, self.rules), self.sample_size, self.categorical)


def survey(
    items: Iterable[ManifestItem], sample_size: int, categorical: Sequence[int] = ()
) -> ChunkSurvey:
    """What pass 1 needs of these rows; `categorical`: the places in ManifestRow.extras of
    the categorical extra columns."""
    rows: collections.Counter[str] = collections.Counter()
    uris: dict[str, list[str]] = collections.defaultdict(list)
    train: collections.Counter[tuple[tuple[str, ...], tuple[str, ...]]] = collections.Counter()
    dead_letters: list[DeadLetter] = []
    discarded = 0
    left_out: collections.Counter[str] = collections.Counter()
    labels_seen: dict[str, LabelSeen] = {}
    clipped = 0
    for item in items:
        if isinstance(item, DeadLetter):
            dead_letters.append(item)
        elif isinstance(item, DiscardedRow):
            discarded += 1
            if item.shape:
                left_out[item.shape] += 1
        else:
            rows[item.split] += 1
            clipped += sum(box.clipped for box in item.boxes)
            sample = uris[item.split]
            sample.append(item.uri)
            if len(sample) > 64 * sample_size:  # memory stays flat
                sample[:] = sample_of(sample, sample_size)
            if item.split == TRAIN:
                train[item.labels, tuple(str(item.extras[index]) for index in categorical)] += 1
            for label in item.labels:
                seen = labels_seen.get(label)
                row = f"{item.manifest}:{item.line}"
                labels_seen[label] = (
                    LabelSeen(1, (row,))
                    if seen is None
                    else LabelSeen(
                        seen.rows + 1,
                        seen.first_rows + (row,) * (len(seen.first_rows) < FIRST_ROWS),
                    )
                )
    return ChunkSurvey(
        dict(rows),
        {split: sample_of(found, sample_size) for split, found in uris.items()},
        [TrainLabels(*key, count) for key, count in train.items()],
        dead_letters,
        discarded,
        dict(left_out),
        labels_seen,
        clipped,
    )


class ChunkPacks(NamedTuple):
    """What pass 2 makes of a chunk: its labelled rows packed by (split, shard, part), and
    the rows that are dead letters now (unseen labels)."""

    packs: list[tuple[tuple[str, int], tuple[int, bytes]]]  # ((split, shard), (part, pack))
    rows: int  # packed
    dead_letters: list[DeadLetter]


@dataclasses.dataclass(frozen=True)
class PackTask(_ChunkTask):
    plan: dict[str, SplitPlan]
    labels: LabelLookup

    @property
    def name(self) -> str:
        return f"the packing of {self.chunk.name}"

    def run(self, settings: RunSettings, progress: Progress) -> ChunkPacks:
        return pack(read_chunk(self.chunk, self.rules), self.plan, self.labels.labelled)


def pack(
    items: Iterable[ManifestItem],
    plan: dict[str, SplitPlan],
    label: Callable[[ManifestRow], LabelledRow | DeadLetter],
) -> ChunkPacks:
    """These rows labelled (LabelLookup.labelled) and packed by where they are written;
    the rows pass 1 counted as dead letters or DISCARD are left out."""
    held: dict[tuple[str, int, int], list[bytes]] = collections.defaultdict(list)
    dead_letters = []
    for item in items:
        if not isinstance(item, ManifestRow):
            continue
        labelled = label(item)
        if isinstance(labelled, DeadLetter):
            dead_letters.append(labelled)
        else:
            held[item.split, *plan[item.split].place(item.uri)].append(labelled.to_json())
    return ChunkPacks(
        [
            ((split, shard), (part, pack_rows(lines)))
            for (split, shard, part), lines in held.items()
        ],
        sum(map(len, held.values())),
        dead_letters,
    )
