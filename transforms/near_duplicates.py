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

import collections
import hashlib
import json
import pickle
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
# An example in a band group: its near order, its pHash, the first 8 bytes of its
# SHA-256 (byte-identical pairs are left out) and its place. Each example is in
# max_distance + 1 groups: a few flat values pickle and sort several times faster than
# its ExampleRef, in a tenth of the memory.
_Member = tuple[bytes, int, bytes, Place]


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
        # copy's place -> (kept's split, distance, kept's near order, kept's place): the
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


def near_order(ref: ExampleRef) -> bytes:
    """Which of two near-copies is kept: the earliest split, then the earliest line, then
    the URI that hashes lowest (rows of image folders, equal lines of two manifests).
    17 bytes, as the band groups hold every example max_distance + 1 times; order()
    would hold the manifest and the URI. Not the absolute URI first: the choice would
    change with the folder the data is in."""
    digest = hashlib.sha256(ref.uri.encode("utf-8", "surrogateescape")).digest()
    return bytes([SPLITS.index(ref.split)]) + ref.line.to_bytes(8, "big") + digest[:8]


class _PackByBand(beam.DoFn):
    """(sha256, ref) -> ((band, band value), pickled members) per bundle, so the grouping
    moves a pack per band value, not max_distance + 1 elements per example."""

    def __init__(self, masks: tuple[int, ...]) -> None:
        self._masks = masks
        self._hashed = Metrics.counter("images", "near_duplicate_hashed")

    def start_bundle(self) -> None:
        self._held: dict[tuple[int, int], list[_Member]] = collections.defaultdict(list)
        self._held_examples = 0

    def process(self, keyed: Keyed) -> Iterator[tuple[tuple[int, int], bytes]]:
        sha256, ref = keyed
        member = (near_order(ref), ref.perceptual_hash, bytes.fromhex(sha256[:16]),
                  _place(ref))
        for band, mask in enumerate(self._masks):
            self._held[band, ref.perceptual_hash & mask].append(member)
        self._hashed.inc()
        self._held_examples += 1
        if self._held_examples >= _HELD_EXAMPLES:
            yield from self._packs()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for pack in self._packs():
            yield GlobalWindows.windowed_value(pack)

    def _packs(self) -> Iterator[tuple[tuple[int, int], bytes]]:
        # Pickled whole: Beam's coder would encode each member on its own, at several
        # times the cost.
        for key, members in self._held.items():
            yield key, pickle.dumps(members, pickle.HIGHEST_PROTOCOL)
        self._held = collections.defaultdict(list)
        self._held_examples = 0


def _close_earlier(group: tuple[tuple[int, int], Iterable[bytes]],
                   masks: tuple[int, ...], max_distance: int
                   ) -> Iterator[tuple[Place, tuple[int, int, bytes, Place]]]:
    """For each member of a band group with a close earlier member, the preferred one:
    (copy's place, (kept's split, distance, kept's near order, kept's place)).

    A pair is taken here only if this is the first band its hashes agree on, so a pair
    agreeing on several bands is weighed once.
    """
    (band, _), packs = group
    members = sorted(member for pack in packs for member in pickle.loads(pack))
    count = len(members)
    if count < 2:
        return
    orders, phashes, contents, places = zip(*members)
    hashes = np.array(phashes, dtype=np.uint64)
    splits = np.array([order_key[0] for order_key in orders], dtype=np.int64)
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
        keep = _no_earlier_band_agrees(pair_xor, masks[:band]) & np.array(
            [contents[r] != contents[c] for r, c in zip(row, column)], dtype=bool)
        row, column, pair_xor = row[keep], column[keep], pair_xor[keep]
        distance = np.bitwise_count(pair_xor).astype(np.int64)
        # Per copy: the earliest split first, then the closest, then the earliest.
        chosen = np.lexsort((column, distance, splits[column], row))
        first_of_row = np.ones(len(chosen), dtype=bool)
        first_of_row[1:] = row[chosen][1:] != row[chosen][:-1]
        for pick in chosen[first_of_row]:
            kept = column[pick]
            yield places[row[pick]], (int(splits[kept]), int(distance[pick]), orders[kept],
                                      places[kept])


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
