"""A split that does not leak: near-copies and declared groups kept in one split, each
split's labels close to the whole's, the same split on every run.

The launcher plans it from what a staging conversion of every row wrote (split_staging.py
in pipeline/): each image's SHA-256, perceptual hash and labels, from the example index,
so no image is read for it. Then:

1. Groups: images with the same bytes, images whose pHashes are at most the near-copy
   distance apart (found by bands, as transforms/near_duplicates.py finds them: two
   hashes within d bits agree on one of d + 1 bands), and rows of one declared group
   (--group_column), joined transitively (union-find).
2. Splits: groups that hold rows of the earlier output (--reuse_from, or the output
   --overwrite replaces) keep the earlier split of most of those rows, so a daily run
   moves no row unless a new near-copy joins groups of two splits (the moved rows are
   listed). The other groups are placed largest first, each in the split whose labels
   and size most lack what it holds (iterative stratification, as scikit-learn's
   StratifiedGroupKFold places groups), ties by split order; the order of groups is by
   size, then by a digest of their images, never the rows' order, so the plan is the
   same on every runner and for any number of workers.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from image_tfrecords.core.records.copies import HASH_BITS
from image_tfrecords.core.records.splits import SPLITS
from image_tfrecords.core.records.summary import MovedRow, SplitGroups

MOVED_LISTED = 20  # rows moved to another split, named in summary.json (all are counted)
# How far an achieved split fraction may be from the asked one before the run says so.
FRACTION_TOLERANCE = 0.05


class PlannedImage(NamedTuple):
    """One image as the staging conversion wrote it, with what groups it."""

    uri: str
    labels: tuple[str, ...]
    sha256: str
    perceptual_hash: int
    group: str | None = None  # its rows' --group_column value


class GroupedSplit(NamedTuple):
    """The plan: each image's split, and its account for summary.json. (Not the shard
    writer's SplitPlan, which places rows in a split's shards.)"""

    splits: dict[str, str]  # image URI -> split
    info: SplitGroups


def plan_splits(
    images: Sequence[PlannedImage],
    fractions: Sequence[float],
    max_distance: int,
    earlier: Mapping[str, str] | None = None,
) -> GroupedSplit:
    """Each image's split; `earlier`: the earlier output's split of each image URI."""
    earlier = earlier or {}
    groups = _groups(images, max_distance)
    label_totals = collections.Counter(label for image in images for label in image.labels)
    placed = _Placement(fractions, len(images), label_totals)
    splits: dict[str, str] = {}
    moved: list[MovedRow] = []
    unpinned = []
    for members in groups:
        before = collections.Counter(
            earlier[images[m].uri] for m in members if images[m].uri in earlier
        )
        if not before:
            unpinned.append(members)
            continue
        split = min(before, key=lambda s: (-before[s], SPLITS.index(s)))
        placed.add(split, [images[m] for m in members])
        joined_by = min(
            (images[m].uri for m in members if images[m].uri not in earlier), default=None
        )
        for m in members:
            splits[images[m].uri] = split
            was = earlier.get(images[m].uri)
            if was and was != split:
                moved.append(MovedRow(uri=images[m].uri, was=was, now=split, joined_by=joined_by))
    for members in sorted(unpinned, key=lambda g: (-len(g), _group_digest(images, g))):
        held = [images[m] for m in members]
        split = placed.best_split(held)
        placed.add(split, held)
        for image in held:
            splits[image.uri] = split
    kept = [members for members in groups if len(members) > 1]
    info = SplitGroups(
        images=len(images),
        groups_kept_together=len(kept),
        images_in_groups=sum(len(members) for members in kept),
        largest_group=max((len(members) for members in groups), default=0),
        fractions_asked=dict(zip(SPLITS, fractions, strict=True)),
        fractions=placed.fractions(),
        labels=placed.label_fractions(),
        labels_whole={
            label: count / max(1, sum(label_totals.values()))
            for label, count in sorted(label_totals.items())
        },
        moved=len(moved),
        moved_listed=tuple(sorted(moved, key=lambda row: row.uri)[:MOVED_LISTED]),
        problems=tuple(placed.problems(max(map(len, groups), default=0))),
    )
    return GroupedSplit(splits, info)


def _groups(images: Sequence[PlannedImage], max_distance: int) -> list[list[int]]:
    """The images' indexes, in groups joined by same bytes, near pHashes and declared
    group, each group in index order, the groups by their first index."""
    parent = list(range(len(images)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(i: int, j: int) -> None:
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)

    for key in ("sha256", "group"):
        first: dict[str, int] = {}
        for index, image in enumerate(images):
            value = getattr(image, key)
            if value is not None:
                join(first.setdefault(value, index), index)
    for i, j in _near_pairs([image.perceptual_hash for image in images], max_distance):
        join(i, j)
    grouped: dict[int, list[int]] = collections.defaultdict(list)
    for index in range(len(images)):
        grouped[root(index)].append(index)
    return list(grouped.values())


def _near_pairs(hashes: Sequence[int], max_distance: int) -> Iterable[tuple[int, int]]:
    """Every pair of hashes at most `max_distance` bits apart: two such agree exactly on
    at least one of max_distance + 1 bands (pigeonhole), so only hashes that share a
    band's value are compared."""
    values = np.array(hashes, dtype=np.uint64)
    bands = max_distance + 1
    edges = [round(band * HASH_BITS / bands) for band in range(bands + 1)]
    for low, high in zip(edges, edges[1:], strict=False):
        mask = np.uint64((1 << (high - low)) - 1)
        keys = (values >> np.uint64(low)) & mask
        order = np.argsort(keys, kind="stable")
        starts = np.flatnonzero(
            np.diff(keys[order], prepend=-1).astype(bool) | (np.arange(len(order)) == 0)
        )
        bounds = [*starts.tolist(), len(order)]
        for start, end in zip(bounds, bounds[1:], strict=False):
            if end - start < 2:
                continue
            members = order[start:end]
            distances = np.bitwise_count(values[members][:, None] ^ values[members][None, :])
            rows, cols = np.nonzero(np.triu(distances <= max_distance, k=1))
            yield from zip(members[rows].tolist(), members[cols].tolist(), strict=True)


def _group_digest(images: Sequence[PlannedImage], members: Sequence[int]) -> str:
    """A group's place among groups of its size: a digest of its images' URIs, which
    does not depend on the rows' order or on which run found the group."""
    digest = hashlib.sha256()
    for uri in sorted(images[m].uri for m in members):
        digest.update(uri.encode("utf-8", "surrogateescape") + b"\n")
    return digest.hexdigest()


class _Placement:
    """What each split holds so far, against what the asked fractions want of it."""

    def __init__(
        self, fractions: Sequence[float], images: int, label_totals: Mapping[str, int]
    ) -> None:
        self._fractions = dict(zip(SPLITS, fractions, strict=True))
        self._images = images
        self._label_totals = label_totals
        self._sizes: collections.Counter[str] = collections.Counter()
        self._labels = {split: collections.Counter() for split in SPLITS}

    def add(self, split: str, images: Sequence[PlannedImage]) -> None:
        self._sizes[split] += len(images)
        for image in images:
            self._labels[split].update(image.labels)

    def best_split(self, images: Sequence[PlannedImage]) -> str:
        """The split whose labels lack most of what `images` hold (each label's lack a
        share of that label's whole), then whose size lacks most; splits asked for none
        take nothing."""
        held = collections.Counter(label for image in images for label in image.labels)

        def lack(split: str) -> tuple[float, float]:
            want = self._fractions[split]
            labels = sum(
                count
                * (want * self._label_totals[label] - self._labels[split][label])
                / self._label_totals[label]
                for label, count in held.items()
            )
            return labels, (want * self._images - self._sizes[split]) / max(1, self._images)

        candidates = [split for split in SPLITS if self._fractions[split] > 0]
        return max(candidates, key=lambda split: (*lack(split), -SPLITS.index(split)))

    def fractions(self) -> dict[str, float]:
        return {split: self._sizes[split] / max(1, self._images) for split in SPLITS}

    def label_fractions(self) -> dict[str, dict[str, float]]:
        """Of each split, each label's share of its labels."""
        return {
            split: {
                label: count / max(1, sum(counts.values()))
                for label, count in sorted(counts.items())
            }
            for split, counts in self._labels.items()
        }

    def problems(self, largest_group: int) -> list[str]:
        said = []
        for split, achieved in self.fractions().items():
            asked = self._fractions[split]
            if abs(achieved - asked) > FRACTION_TOLERANCE:
                said.append(
                    f"{split} holds {achieved:.1%} of the images, not the {asked:.1%} asked: "
                    f"the groups kept together do not divide so (the largest holds "
                    f"{largest_group} of {self._images} images)"
                )
        return said
