"""The near-copy search's heavy part, the distances inside each band group
(transforms/near_duplicates.py says how the groups are made), as a task a worker process
runs: the numpy work of a large set (quadratic in a group's size) stays out of the
pipeline's process. Free of Beam."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from image_tfrecords.core.records.splits import SPLITS

if TYPE_CHECKING:
    from image_tfrecords.core.records.run_settings import RunSettings
    from image_tfrecords.core.worker.shard_writer import Progress

_BLOCK_CELLS = 1 << 20  # distances computed at once inside a group, bounding its memory

Shard = tuple[str, int]  # (split, shard)
# An example in a band group: its near order (split, line, the first 8 bytes of its
# SHA-256, which also leave byte-identical pairs out), its pHash and where it is (split,
# shard, position). Each example is in max_distance + 1 groups: as 33 bytes of an array,
# a bundle's members pack per band value, and a group unpacks, without a Python object
# per member (as pickled tuples, packing alone took ~1 s of 10,000 images' run).
MEMBER = np.dtype(
    [
        ("split", "u1"),
        ("line", "<u8"),
        ("content", "<u8"),
        ("hash", "<u8"),
        ("shard", "<u4"),
        ("position", "<u4"),
    ]
)
# A group's members are sorted by these, the last first: the near order, then the rest,
# so that the order is total.
MEMBER_ORDER = ("position", "shard", "hash", "content", "line", "split")


class Link(NamedTuple):
    """A copy's close earlier example, as a band group found it; of a copy's links, the
    least is preferred: the earliest split, then the closest, then the earliest."""

    kept_split: int  # SPLITS' index
    distance: int
    kept_line: int
    kept_content: int
    kept_shard: int
    kept_position: int


def close_earlier(
    band: int, packs: Iterable[bytes], masks: tuple[int, ...], max_distance: int
) -> Iterator[tuple[Shard, tuple[int, Link]]]:
    """For each member of a band group with a close earlier member, the preferred one:
    ((copy's split, shard), (copy's position, Link)).

    A pair is taken here only if this is the first band its hashes agree on, so a pair
    agreeing on several bands is weighed once.
    """
    members = np.concatenate([np.frombuffer(pack, MEMBER) for pack in packs])
    count = len(members)
    if count < 2:
        return
    members = members[np.lexsort([members[field] for field in MEMBER_ORDER])]
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
        keep = _no_earlier_band_agrees(pair_xor, masks[:band]) & (
            members["content"][row] != members["content"][column]
        )
        row, column, pair_xor = row[keep], column[keep], pair_xor[keep]
        distance = np.bitwise_count(pair_xor).astype(np.int64)
        # Per copy: the earliest split first, then the closest, then the earliest.
        chosen = np.lexsort((column, distance, members["split"][column], row))
        first_of_row = np.ones(len(chosen), dtype=bool)
        first_of_row[1:] = row[chosen][1:] != row[chosen][:-1]
        picks = chosen[first_of_row]
        # As Python tuples all at once: an element of a structured array costs
        # microseconds a field, and a clustered set has a link for most examples.
        for copy, kept, apart in zip(
            members[row[picks]].tolist(), members[column[picks]].tolist(), distance[picks].tolist()
        ):
            split, _, _, _, shard, position = copy
            kept_split, kept_line, kept_content, _, kept_shard, kept_position = kept
            yield (
                (SPLITS[split], shard),
                (
                    position,
                    Link(kept_split, apart, kept_line, kept_content, kept_shard, kept_position),
                ),
            )


@dataclasses.dataclass(frozen=True)
class CloseEarlierTask:
    """One band group: its members, packed (MEMBER arrays' bytes)."""

    band: int
    packs: tuple[bytes, ...]
    masks: tuple[int, ...]
    max_distance: int
    in_worker = True  # (transforms/in_workers.py's WorkerTask)

    @property
    def name(self) -> str:
        return f"the near-copy search of a group of band {self.band}"

    def run(
        self, settings: RunSettings, progress: Progress
    ) -> list[tuple[Shard, tuple[int, Link]]]:
        return list(close_earlier(self.band, self.packs, self.masks, self.max_distance))


def _no_earlier_band_agrees(xor: np.ndarray, earlier_masks: tuple[int, ...]) -> np.ndarray:
    agrees = np.zeros(len(xor), dtype=bool)
    for mask in earlier_masks:
        agrees |= (xor & np.uint64(mask)) == 0
    return ~agrees
