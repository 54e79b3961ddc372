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

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from transforms.copies import HASH_BITS, MAX_NEAR_DISTANCE
from transforms.manifest import SPLITS
from worker.receipts import example_refs
from worker.records import ExampleRef, ShardExamples

_HELD_EXAMPLES = 4096  # examples a bundle holds before sending its band packs
_BLOCK_CELLS = 1 << 20  # distances computed at once inside a group, bounding its memory

Shard = tuple[str, int]  # (split, shard)
# An example in a band group: its near order (split, line, the first 8 bytes of its
# SHA-256, which also leave byte-identical pairs out), its pHash and where it is (split,
# shard, position). Each example is in max_distance + 1 groups: as 33 bytes of an array,
# a bundle's members pack per band value, and a group unpacks, without a Python object
# per member (as pickled tuples, packing alone took ~1 s of 10,000 images' run).
_MEMBER = np.dtype([("split", "u1"), ("line", "<u8"), ("content", "<u8"), ("hash", "<u8"),
                    ("shard", "<u4"), ("position", "<u4")])
# A group's members are sorted by these, the last first: the near order, then the rest,
# so that the order is total.
_MEMBER_ORDER = ("position", "shard", "hash", "content", "line", "split")


class Link(NamedTuple):
    """A copy's close earlier example, as a band group found it; of a copy's links, the
    least is preferred: the earliest split, then the closest, then the earliest."""

    kept_split: int  # SPLITS' index
    distance: int
    kept_line: int
    kept_content: int
    kept_shard: int
    kept_position: int


class NearDuplicate(NamedTuple):
    """`copy` is within `distance` bits of `kept`, which comes first."""

    distance: int
    kept: ExampleRef
    copy: ExampleRef

    def to_json(self, dropped: bool) -> str:
        def where(ref: ExampleRef) -> dict:
            return described(ref) | {"perceptual_hash": f"{ref.perceptual_hash:016x}"}
        return json.dumps({"distance": self.distance, "kept": where(self.kept),
                           "copy": where(self.copy), "dropped": dropped},
                          ensure_ascii=False, sort_keys=True)

    def why_dropped(self) -> str:
        return (f"a near-copy (perceptual hash {self.distance} bits away) of {self.kept.uri} "
                f"({self.kept.split}, {self.kept.manifest} line {self.kept.line})")


def described(ref: ExampleRef) -> dict:
    """An example as the reports of copies name it."""
    return {"uri": ref.uri, "split": ref.split, "labels": list(ref.labels),
            "manifest": ref.manifest, "line": ref.line}


def band_masks(max_distance: int) -> tuple[int, ...]:
    """max_distance + 1 contiguous bit masks, of near-equal widths, covering the hash."""
    count = max_distance + 1
    edges = [round(index * HASH_BITS / count) for index in range(count + 1)]
    return tuple(((1 << (high - low)) - 1) << low for low, high in zip(edges, edges[1:]))


def order(ref: ExampleRef) -> tuple:
    """Which of two copies comes first, and is kept: the earliest split, then row."""
    return SPLITS.index(ref.split), ref.manifest, ref.line, ref.uri


class FindNearDuplicates(beam.PTransform):
    """ShardExamples -> a NearDuplicate for every example with a near-copy earlier in the
    near order: its closest in the earliest split.

    The band groups carry places, not ExampleRefs (each example is in max_distance + 1
    of them); the pairs found get both ends' refs from their shards' receipts in
    `temp_dir` (shard_receipts.py; the writer writes one before its shard's outputs leave
    the bundle), each receipt read at most twice, rather than from a join with every
    example's ref (half of this search's cost, bench/RESULTS.md).
    """

    def __init__(self, max_distance: int, temp_dir: str) -> None:
        super().__init__()
        if not 0 <= max_distance <= MAX_NEAR_DISTANCE:
            raise ValueError(f"max_distance must be 0 to {MAX_NEAR_DISTANCE} bits")
        self._max_distance = max_distance
        self._temp_dir = temp_dir

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        masks = band_masks(self._max_distance)
        return (keyed
                | "PackByBand" >> beam.ParDo(_PackByBand(masks))
                | "ByBand" >> beam.GroupByKey()
                | "CloseEarlier" >> beam.FlatMap(_close_earlier, masks, self._max_distance)
                | "ByCopyShard" >> beam.GroupByKey()
                | "CopyRefs" >> beam.ParDo(_CopyRefs(self._temp_dir))
                | "ByKeptShard" >> beam.GroupByKey()
                | "Pairs" >> beam.ParDo(_Pairs(self._temp_dir)))


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
        self._held.extend((*near_order(sha256, ref), ref.perceptual_hash, ref.shard,
                           ref.position) for sha256, ref in examples.keys)
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
        members = np.array(self._held, dtype=_MEMBER)
        self._held = []
        for band, mask in enumerate(self._masks):
            values = members["hash"] & np.uint64(mask)
            by_value = np.argsort(values, kind="stable")
            values = values[by_value]
            starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
            for start, end in zip(starts, np.r_[starts[1:], len(values)]):
                yield (band, int(values[start])), members[by_value[start:end]].tobytes()


def _close_earlier(group: tuple[tuple[int, int], Iterable[bytes]],
                   masks: tuple[int, ...], max_distance: int
                   ) -> Iterator[tuple[Shard, tuple[int, Link]]]:
    """For each member of a band group with a close earlier member, the preferred one:
    ((copy's split, shard), (copy's position, Link)).

    A pair is taken here only if this is the first band its hashes agree on, so a pair
    agreeing on several bands is weighed once.
    """
    (band, _), packs = group
    members = np.concatenate([np.frombuffer(pack, _MEMBER) for pack in packs])
    count = len(members)
    if count < 2:
        return
    members = members[np.lexsort([members[field] for field in _MEMBER_ORDER])]
    hashes = members["hash"]
    block = max(1, _BLOCK_CELLS // count)
    for start in range(0, count, block):
        stop = min(count, start + block)
        # Distances from members start:stop to every member up to them; the pairs kept
        # are the few close ones with the other member earlier (the lower triangle).
        close = np.bitwise_count(hashes[start:stop, None] ^ hashes[None, :stop]) <= max_distance
        row, column = np.divmod(np.flatnonzero(close), stop)
        row += start
        earlier = column < row
        row, column = row[earlier], column[earlier]
        pair_xor = hashes[row] ^ hashes[column]
        # First agreeing on this band (each earlier band differs in at least one bit),
        # and not byte-identical.
        keep = (_no_earlier_band_agrees(pair_xor, masks[:band])
                & (members["content"][row] != members["content"][column]))
        row, column, pair_xor = row[keep], column[keep], pair_xor[keep]
        distance = np.bitwise_count(pair_xor).astype(np.int64)
        # Per copy: the earliest split first, then the closest, then the earliest.
        chosen = np.lexsort((column, distance, members["split"][column], row))
        first_of_row = np.ones(len(chosen), dtype=bool)
        first_of_row[1:] = row[chosen][1:] != row[chosen][:-1]
        picks = chosen[first_of_row]
        # As Python tuples all at once: an element of a structured array costs
        # microseconds a field, and a clustered set has a link for most examples.
        for copy, kept, apart in zip(members[row[picks]].tolist(),
                                     members[column[picks]].tolist(), distance[picks].tolist()):
            split, _, _, _, shard, position = copy
            kept_split, kept_line, kept_content, _, kept_shard, kept_position = kept
            yield (SPLITS[split], shard), (position, Link(
                kept_split, apart, kept_line, kept_content, kept_shard, kept_position))


class _CopyRefs(beam.DoFn):
    """(copy's shard, its copies' links) -> (kept's shard, (kept's position, distance,
    copy's ExampleRef)) per copy, for the link preferred (the least: earliest split,
    closest, earliest)."""

    def __init__(self, temp_dir: str) -> None:
        self._temp_dir = temp_dir

    def process(self, shard_links: tuple[Shard, Iterable[tuple[int, Link]]]
                ) -> Iterator[tuple[Shard, tuple[int, int, ExampleRef]]]:
        (split, shard), links = shard_links
        preferred: dict[int, Link] = {}
        for position, link in links:
            if position not in preferred or link < preferred[position]:
                preferred[position] = link
        refs = example_refs(self._temp_dir, split, shard)
        for position, link in sorted(preferred.items()):
            yield ((SPLITS[link.kept_split], link.kept_shard),
                   (link.kept_position, link.distance, refs[position]))


class _Pairs(beam.DoFn):
    """(kept's shard, its copies) -> a NearDuplicate per copy, with the kept ExampleRef."""

    def __init__(self, temp_dir: str) -> None:
        self._temp_dir = temp_dir

    def process(self, shard_copies: tuple[Shard, Iterable[tuple[int, int, ExampleRef]]]
                ) -> Iterator[NearDuplicate]:
        (split, shard), copies = shard_copies
        refs = example_refs(self._temp_dir, split, shard)
        for kept_position, distance, copy in copies:
            yield NearDuplicate(distance, refs[kept_position], copy)


def _no_earlier_band_agrees(xor: np.ndarray, earlier_masks: tuple[int, ...]) -> np.ndarray:
    agrees = np.zeros(len(xor), dtype=bool)
    for mask in earlier_masks:
        agrees |= (xor & np.uint64(mask)) == 0
    return ~agrees
