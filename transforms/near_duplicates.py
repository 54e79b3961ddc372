"""Near-copies: the same photo resized, recompressed, re-saved or slightly cropped.

Every example carries the 64-bit pHash of its pixels (images.perceptual_hash, from the
writer's own decode). Two hashes within `max_distance` bits of each other agree exactly
on at least one of max_distance + 1 bands of the hash (pigeonhole), so each example is
grouped under each of its bands' values, and distances are computed only inside a
group: no all-pairs comparison, and every close pair is found, in the first band it
agrees on and nowhere else.

Reported is, for each example with a close example earlier in the near order (split
TRAIN, VALIDATION, TEST, then line), the one it is a copy of: the closest in the
earliest split. That is one line per copy, however large a cluster of copies is (a
thousand blank frames give 999 lines, not half a million pairs), and what --dedupe near
drops. Byte-identical pairs are left to duplicates.py.
"""

import json
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from image_tfrecords.core.records.copies import HASH_BITS, MAX_NEAR_DISTANCE
from image_tfrecords.core.records.receipts import example_refs
from image_tfrecords.core.records.records import ExampleRef, ShardExamples
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.splits import SPLITS
from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
from image_tfrecords.core.worker.near_search import MEMBER, CloseEarlierTask, Link, Shard
from image_tfrecords.transforms.batch import Batch, batches_by_key
from image_tfrecords.transforms.in_workers import RunInWorkers
from image_tfrecords.transforms.storage_steps import StorageDoFn

_HELD_EXAMPLES = 4096  # examples a bundle holds before sending its band packs


class NearDuplicate(NamedTuple):
    """`copy` is within `distance` bits of `kept`, which comes first."""

    distance: int
    kept: ExampleRef
    copy: ExampleRef

    def to_json(self, dropped: bool) -> str:
        def where(ref: ExampleRef) -> dict:
            return described(ref) | {"perceptual_hash": f"{ref.perceptual_hash:016x}"}

        return json.dumps(
            {
                "distance": self.distance,
                "kept": where(self.kept),
                "copy": where(self.copy),
                "dropped": dropped,
            },
            ensure_ascii=False,
            sort_keys=True,
        )

    def why_dropped(self) -> str:
        return (
            f"a near-copy (perceptual hash {self.distance} bits away) of {self.kept.uri} "
            f"({self.kept.split}, {self.kept.manifest} line {self.kept.line})"
        )


def described(ref: ExampleRef) -> dict:
    """An example as the reports of copies name it."""
    return {
        "uri": ref.uri,
        "split": ref.split,
        "labels": list(ref.labels),
        "manifest": ref.manifest,
        "line": ref.line,
    }


def band_masks(max_distance: int) -> tuple[int, ...]:
    """max_distance + 1 contiguous bit masks, of near-equal widths, covering the hash."""
    count = max_distance + 1
    edges = [round(index * HASH_BITS / count) for index in range(count + 1)]
    return tuple(((1 << (high - low)) - 1) << low for low, high in zip(edges, edges[1:]))


def order(ref: ExampleRef) -> tuple:
    """Which of two copies comes first, and is kept: the earliest split, then row."""
    return SPLITS.index(ref.split), ref.manifest, ref.line, ref.uri


class FindNearDuplicates(beam.PTransform):
    """ShardExamples -> batches of NearDuplicates, one for every example with a near-copy
    earlier in the near order: its closest in the earliest split.

    The band groups carry places, not ExampleRefs (each example is in max_distance + 1
    of them); the pairs found get both ends' refs from their shards' receipts in
    `temp_dir` (core/records/receipts.py; the writer writes one before its shard's outputs leave
    the bundle), each receipt read at most twice, rather than from a join with every
    example's ref (half of this search's cost, bench/RESULTS.md). The distances inside
    each group are computed by the worker processes of `settings.workers`
    (core/worker/near_search.py). Links and copies travel in batches per shard: one element
    a copy would cost Beam's coders a few microseconds each, and most examples of a set
    of near-copies have one.
    """

    def __init__(self, max_distance: int, temp_dir: str, settings: RunSettings) -> None:
        super().__init__()
        if not 0 <= max_distance <= MAX_NEAR_DISTANCE:
            raise ValueError(f"max_distance must be 0 to {MAX_NEAR_DISTANCE} bits")
        self._max_distance = max_distance
        self._temp_dir = temp_dir
        self._settings = settings

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        masks = band_masks(self._max_distance)
        return (
            keyed
            | "PackByBand" >> beam.ParDo(_PackByBand(masks))
            | "ByBand" >> beam.GroupByKey()
            | "CloseEarlier" >> beam.ParDo(_CloseEarlier(self._settings, masks, self._max_distance))
            | "ByCopyShard" >> beam.GroupByKey()
            | "CopyRefs" >> beam.ParDo(_CopyRefs(self._temp_dir, self._settings.filesystems))
            | "ByKeptShard" >> beam.GroupByKey()
            | "Pairs" >> beam.ParDo(_Pairs(self._temp_dir, self._settings.filesystems))
        )


def near_order(sha256: str, ref: ExampleRef) -> tuple[int, int, int]:
    """Which of two near-copies is kept: the earliest split, then the earliest line, then
    the lowest SHA-256 (rows of image folders, equal lines of two manifests). Three
    numbers, as the band groups hold every example max_distance + 1 times; order() would
    hold the manifest and the URI. Not the URI: the choice would change with the folder
    the data is in."""
    return SPLITS.index(ref.split), ref.line, int(sha256[:16], 16)


class _PackByBand(beam.DoFn):
    """ShardExamples -> ((band, band value), packed members) per bundle, so the grouping
    moves a pack per band value, not max_distance + 1 elements per example."""

    def __init__(self, masks: tuple[int, ...]) -> None:
        self._masks = masks
        self._hashed = Metrics.counter("images", "near_duplicate_hashed")

    def start_bundle(self) -> None:
        self._held: list[tuple[int, ...]] = []  # rows of _MEMBER

    def process(self, examples: ShardExamples) -> Iterator[tuple[tuple[int, int], bytes]]:
        self._held.extend(
            (*near_order(sha256, ref), ref.perceptual_hash, ref.shard, ref.position)
            for sha256, ref in examples.keys
        )
        self._hashed.inc(len(examples.keys))
        if len(self._held) >= _HELD_EXAMPLES:
            yield from self._packs()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for pack in self._packs():
            yield GlobalWindows.windowed_value(pack)

    def _packs(self) -> Iterator[tuple[tuple[int, int], bytes]]:
        """For each band, the members of each of its values, as one array's bytes."""
        if not self._held:
            return
        members = np.array(self._held, dtype=MEMBER)
        self._held = []
        for band, mask in enumerate(self._masks):
            # As signed 64-bit values: Beam encodes an int key as a VarInt, which holds
            # -2**63 to 2**63 - 1, and the band values of the top bits reach 2**64 - 1.
            values = (members["hash"] & np.uint64(mask)).view(np.int64)
            by_value = np.argsort(values, kind="stable")
            values = values[by_value]
            starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
            for start, end in zip(starts, np.r_[starts[1:], len(values)]):
                yield (band, int(values[start])), members[by_value[start:end]].tobytes()


class _CloseEarlier(RunInWorkers):
    """A band group -> (copy's (split, shard), [(copy's position, Link)]) per shard, a link
    for each member with a close earlier member (near_search.close_earlier)."""

    def __init__(self, settings: RunSettings, masks: tuple[int, ...], max_distance: int) -> None:
        super().__init__(settings)
        self._masks = masks
        self._max_distance = max_distance

    def task(self, group: tuple[tuple[int, int], Iterable[bytes]]) -> CloseEarlierTask:
        (band, _), packs = group
        return CloseEarlierTask(band, tuple(packs), self._masks, self._max_distance)

    def outputs(self, links: list[tuple[Shard, tuple[int, Link]]]) -> Iterator[tuple[Shard, Batch]]:
        yield from batches_by_key(links)


class _CopyRefs(StorageDoFn):
    """(copy's shard, batches of its copies' links) -> (kept's shard, [(kept's position,
    distance, copy's ExampleRef)]) per kept shard, a copy each for the link preferred
    (the least: earliest split, closest, earliest)."""

    def __init__(self, temp_dir: str, filesystems: FilesystemOptions) -> None:
        super().__init__(filesystems)
        self._temp_dir = temp_dir

    def process(self, shard_links: tuple[Shard, Iterable[Batch]]) -> Iterator[tuple[Shard, Batch]]:
        (split, shard), batches = shard_links
        preferred: dict[int, Link] = {}
        for links in batches:
            for position, link in links:
                if position not in preferred or link < preferred[position]:
                    preferred[position] = link
        refs = example_refs(self._temp_dir, split, shard)
        yield from batches_by_key(
            (
                (SPLITS[link.kept_split], link.kept_shard),
                (link.kept_position, link.distance, refs[position]),
            )
            for position, link in sorted(preferred.items())
        )


class _Pairs(StorageDoFn):
    """(kept's shard, batches of its copies) -> one batch of NearDuplicates, with the kept
    ExampleRefs."""

    def __init__(self, temp_dir: str, filesystems: FilesystemOptions) -> None:
        super().__init__(filesystems)
        self._temp_dir = temp_dir

    def process(self, shard_copies: tuple[Shard, Iterable[Batch]]) -> Iterator[Batch]:
        (split, shard), batches = shard_copies
        refs = example_refs(self._temp_dir, split, shard)
        yield Batch(
            NearDuplicate(distance, refs[kept_position], copy)
            for copies in batches
            for kept_position, distance, copy in copies
        )
