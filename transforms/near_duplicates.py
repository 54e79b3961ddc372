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

import hashlib
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
from transforms.shards import ExampleRef

_HELD_EXAMPLES = 4096  # examples a bundle holds before sending its band packs
_BLOCK_CELLS = 1 << 20  # distances computed at once inside a group, bounding its memory

Keyed = tuple[str, ExampleRef]  # (sha256, where the example is), as WriteShards gives
Place = tuple[str, int, int]  # (split, shard, position): where an example was written
# An example in a band group: its near order (split, line, URI rank), its pHash, the
# first 8 bytes of its SHA-256 (byte-identical pairs are left out) and where it is (split,
# shard, position). Each example is in max_distance + 1 groups: as 41 bytes of an array,
# a bundle's members pack per band value, and a group unpacks, without a Python object
# per member (as pickled tuples, packing alone took ~1 s of 10,000 images' run).
_MEMBER = np.dtype([("split", "u1"), ("line", "<u8"), ("uri_rank", "<u8"), ("hash", "<u8"),
                    ("content", "<u8"), ("shard", "<u4"), ("position", "<u4")])
# A group's members are sorted by these, the last first: the near order, then the rest,
# so that the order is total.
_MEMBER_ORDER = ("position", "shard", "content", "hash", "uri_rank", "line", "split")


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
    """(sha256, ExampleRef) -> a NearDuplicate for every example with a near-copy
    earlier in the near order: its closest in the earliest split."""

    def __init__(self, max_distance: int) -> None:
        super().__init__()
        if not 0 <= max_distance <= MAX_NEAR_DISTANCE:
            raise ValueError(f"max_distance must be 0 to {MAX_NEAR_DISTANCE} bits")
        self._max_distance = max_distance

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        masks = band_masks(self._max_distance)
        # copy's place -> (kept's split, distance, kept's line and URI rank, kept's place): the
        # least of them is the one preferred.
        links = (keyed
                 | "PackByBand" >> beam.ParDo(_PackByBand(masks))
                 | "ByBand" >> beam.GroupByKey()
                 | "CloseEarlier" >> beam.FlatMap(_close_earlier, masks, self._max_distance)
                 | "ClosestPerCopy" >> beam.CombinePerKey(min))
        # The band groups carry places, not ExampleRefs (each example is in
        # max_distance + 1 of them): the pairs found get theirs here.
        return ({"ref": keyed | "ByPlace" >> beam.Map(lambda k: (_place(k[1]), k[1])),
                 "copy_of": links,
                 "kept_for": links | "ByKept" >> beam.MapTuple(
                     lambda copy, link: (link[3], (copy, link[1])))}
                | "WithRefs" >> beam.CoGroupByKey()
                | "Ends" >> beam.FlatMapTuple(_pair_ends)
                | "ByCopy" >> beam.GroupByKey()
                | "Pairs" >> beam.MapTuple(_pair))


def _place(ref: ExampleRef) -> Place:
    return ref.split, ref.shard, ref.position


def near_order(ref: ExampleRef) -> tuple[int, int, int]:
    """Which of two near-copies is kept: the earliest split, then the earliest line, then
    the URI that hashes lowest (rows of image folders, equal lines of two manifests).
    Three numbers, as the band groups hold every example max_distance + 1 times; order()
    would hold the manifest and the URI. Not the absolute URI first: the choice would
    change with the folder the data is in."""
    digest = hashlib.sha256(ref.uri.encode("utf-8", "surrogateescape")).digest()
    return SPLITS.index(ref.split), ref.line, int.from_bytes(digest[:8], "big")


class _PackByBand(beam.DoFn):
    """(sha256, ref) -> ((band, band value), packed members) per bundle, so the grouping
    moves a pack per band value, not max_distance + 1 elements per example."""

    def __init__(self, masks: tuple[int, ...]) -> None:
        self._masks = masks
        self._hashed = Metrics.counter("images", "near_duplicate_hashed")

    def start_bundle(self) -> None:
        self._held: list[tuple[int, ...]] = []  # rows of _MEMBER

    def process(self, keyed: Keyed) -> Iterator[tuple[tuple[int, int], bytes]]:
        sha256, ref = keyed
        self._held.append((*near_order(ref), ref.perceptual_hash, int(sha256[:16], 16),
                           ref.shard, ref.position))
        self._hashed.inc()
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
                   ) -> Iterator[tuple[Place, tuple[int, int, bytes, Place]]]:
    """For each member of a band group with a close earlier member, the preferred one:
    (copy's place, (kept's split, distance, kept's line and URI rank, kept's place)).

    A pair is taken here only if this is the first band its hashes agree on, so a pair
    agreeing on several bands is weighed once.
    """
    (band, _), packs = group
    members = np.concatenate([np.frombuffer(pack, _MEMBER) for pack in packs])
    count = len(members)
    if count < 2:
        return
    members = members[np.lexsort([members[field] for field in _MEMBER_ORDER])]
    hashes, contents = members["hash"], members["content"]
    splits = members["split"].astype(np.int64)
    block = max(1, _BLOCK_CELLS // count)
    for start in range(1, count, block):
        # Each member's distances to the members before it (the lower triangle).
        rows = np.arange(start, min(count, start + block))
        xor = hashes[rows, None] ^ hashes[None, :rows[-1]]
        row_at, column = np.nonzero((np.bitwise_count(xor) <= max_distance)
                                    & (np.arange(rows[-1])[None, :] < rows[:, None]))
        # The few close pairs left: first agreeing on this band (each earlier band
        # differs in at least one bit), and not byte-identical.
        pair_xor = xor[row_at, column]
        row = rows[row_at]
        keep = (_no_earlier_band_agrees(pair_xor, masks[:band])
                & (contents[row] != contents[column]))
        row, column, pair_xor = row[keep], column[keep], pair_xor[keep]
        distance = np.bitwise_count(pair_xor).astype(np.int64)
        # Per copy: the earliest split first, then the closest, then the earliest.
        chosen = np.lexsort((column, distance, splits[column], row))
        first_of_row = np.ones(len(chosen), dtype=bool)
        first_of_row[1:] = row[chosen][1:] != row[chosen][:-1]
        for pick in chosen[first_of_row]:
            kept = members[column[pick]]
            kept_order = int(kept["line"]), int(kept["uri_rank"])
            yield _member_place(members[row[pick]]), (
                int(kept["split"]), int(distance[pick]), kept_order, _member_place(kept))


def _member_place(member: np.void) -> Place:
    return SPLITS[member["split"]], int(member["shard"]), int(member["position"])


def _pair_ends(place: Place, grouped: dict[str, list]
               ) -> Iterator[tuple[Place, tuple[str, int, ExampleRef]]]:
    """An example's ref, to each pair it is an end of, keyed by the pair's copy."""
    (ref,) = grouped["ref"]
    for _, distance, _, _ in grouped["copy_of"]:
        yield place, ("copy", distance, ref)
    for copy, distance in grouped["kept_for"]:
        yield copy, ("kept", distance, ref)


def _pair(_: Place, ends: Iterable[tuple[str, int, ExampleRef]]) -> NearDuplicate:
    refs = {end: (distance, ref) for end, distance, ref in ends}
    distance, copy = refs["copy"]
    return NearDuplicate(distance, refs["kept"][1], copy)


def _no_earlier_band_agrees(xor: np.ndarray, earlier_masks: tuple[int, ...]) -> np.ndarray:
    agrees = np.zeros(len(xor), dtype=bool)
    for mask in earlier_masks:
        agrees |= (xor & np.uint64(mask)) == 0
    return ~agrees
