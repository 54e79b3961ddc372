"""What changed between two outputs' examples, from their example indexes
(core/records/example_index.py): what `image-tfrecords diff OLD NEW` prints, and what a run says
of the output it was built from (the console, summary.json, report.html).

Examples are matched by their image's URI. An image's examples on the two sides are
paired so that each pair differs in as few ways as possible (split, label texts, stored
image): first those equal in all three, then in two, then in one, then any. A URI is in
one example per split in an output (the shard writer makes one example of an image's
rows in a split), but in several splits where the input put it there (a leak between
splits), and an index may hold it twice; the pairing says the same of all of these. Of a
pair, each way it differs is counted (an example can be relabelled and moved); an
example of a URI left unpaired on one side is added or removed. An image changed where
the image an example stores did (its SHA-256), not where its source's storage identity
did alone: a file touched or copied again makes the same example.

Ten million examples a side must compare in little memory: the entries are spilled to an
sqlite3 database in a temporary folder (TMPDIR's) and read back in the order of an index
on the URI, one image at a time. sqlite's B-tree sorts on disk in a bounded page cache,
so this is the external sort a sort-merge would need (sorted runs written and merged)
without that code; both sides come back interleaved by URI from one query. It takes about
300 bytes of disk an example (6 GB for ten million a side; measured: 120 MB for 200,000),
and memory only for the label texts: as many as the vocabulary, which the run holds anyway.

Free of Beam and TensorFlow: `diff` and the publish step import it.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import operator
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import pydantic

from image_tfrecords.core.records import naming
from image_tfrecords.core.records.choices import Dedupe
from image_tfrecords.core.records.example_index import IndexEntry, read_index
from image_tfrecords.core.records.summary import ExampleChanges, Summary, Tally
from image_tfrecords.core.storage import storage

URIS_LISTED = 10  # of each kind of change of examples, the first URIs named
LABELS_LISTED = 100  # of the labels new or gone, the first named


class NotComparable(ValueError):
    """An output whose examples cannot be compared: it is not an output, or it has no
    example indexes (written before outputs kept them, or with --dedupe)."""


class _Example(NamedTuple):
    """What the pairing compares of an example (labels: a sorted JSON list)."""

    split: str
    labels: str
    sha256: str


# The ExampleChanges count of a pair that differs in each aspect of _Example.
_CHANGE_OF = {"split": "splits_moved", "labels": "relabelled", "sha256": "images_changed"}
# The keys that pair an image's examples, those of the most aspects first.
_PAIRING_KEYS: tuple[Callable[[_Example], object], ...] = tuple(
    operator.itemgetter(*places) if places else lambda _: ()
    for size in range(len(_Example._fields), -1, -1)
    for places in itertools.combinations(range(len(_Example._fields)), size)
)
_OLD, _NEW = 0, 1


def compare(old: Iterable[IndexEntry], new: Iterable[IndexEntry]) -> ExampleChanges:
    """What changed from the examples `old` lists to those `new` does (each in any order)."""
    with (
        tempfile.TemporaryDirectory(prefix="image-tfrecords-diff-") as folder,
        contextlib.closing(sqlite3.connect(f"{folder}/examples.sqlite3")) as database,
    ):
        return _compare(database, old, new)


def _compare(
    database: sqlite3.Connection, old: Iterable[IndexEntry], new: Iterable[IndexEntry]
) -> ExampleChanges:
    # A scratch file: nothing to recover after a crash, so no journal and no syncing.
    database.execute("PRAGMA journal_mode = OFF")
    database.execute("PRAGMA synchronous = OFF")
    database.execute("CREATE TABLE example (uri BLOB, side INT, split, labels, sha256)")
    labels: tuple[set[str], set[str]] = (set(), set())
    for side, entries in ((_OLD, old), (_NEW, new)):
        database.executemany(
            "INSERT INTO example VALUES (?, ?, ?, ?, ?)", _rows(side, entries, labels[side])
        )
    # Built once all is in (faster than kept up while inserting), and covering: the
    # query reads the index alone, in order.
    database.execute("CREATE INDEX by_uri ON example (uri, side, split, labels, sha256)")
    counts: collections.Counter[str] = collections.Counter()
    named: dict[str, list[str]] = collections.defaultdict(list)
    rows = database.execute("SELECT uri, side, split, labels, sha256 FROM example ORDER BY uri")
    for uri, examples in itertools.groupby(rows, key=operator.itemgetter(0)):
        sides: tuple[list[_Example], list[_Example]] = ([], [])
        for _, side, *aspects in examples:
            sides[side].append(_Example(*aspects))
        counts["old_examples"] += len(sides[_OLD])
        counts["new_examples"] += len(sides[_NEW])
        for change, count in _changes(*sides).items():
            counts[change] += count
            if change != "unchanged" and len(named[change]) < URIS_LISTED:
                named[change].append(uri.decode("utf-8", "surrogatepass"))

    def tally(change: str) -> Tally:
        return Tally(count=counts[change], first=tuple(named[change]))

    return ExampleChanges(
        old_examples=counts["old_examples"],
        new_examples=counts["new_examples"],
        **{change: tally(change) for change in ("examples_added", "examples_removed")},
        **{change: tally(change) for change in _CHANGE_OF.values()},
        unchanged=counts["unchanged"],
        labels_new=_first_labels(labels[_NEW] - labels[_OLD]),
        labels_gone=_first_labels(labels[_OLD] - labels[_NEW]),
    )


def _rows(side: int, entries: Iterable[IndexEntry], labels: set[str]) -> Iterator[tuple]:
    """The table's rows of `entries`, adding their label texts to `labels`."""
    for entry in entries:
        labels.update(entry.labels)
        yield (
            # Bytes, not text: a local path's undecodable bytes are surrogates in a str,
            # which sqlite cannot hold as text; the order is UTF-8's either way.
            entry.uri.encode("utf-8", "surrogatepass"),
            side,
            str(entry.split),
            json.dumps(sorted(entry.labels)),
            entry.sha256,
        )


def _changes(old: list[_Example], new: list[_Example]) -> collections.Counter[str]:
    """The changes between one image's examples in the old output and in the new, by
    ExampleChanges' names; a change it does not make is absent."""
    counts: collections.Counter[str] = collections.Counter()
    for key in _PAIRING_KEYS:
        if not (old and new):
            break
        pairs, old, new = _pairs(old, new, key)
        for before, after in pairs:
            differ = [
                _CHANGE_OF[aspect]
                for aspect, a, b in zip(_Example._fields, before, after)
                if a != b
            ]
            counts.update(differ or ["unchanged"])
    counts.update(examples_removed=len(old), examples_added=len(new))
    return +counts


def _pairs(
    old: list[_Example], new: list[_Example], key: Callable[[_Example], object]
) -> tuple[list[tuple[_Example, _Example]], list[_Example], list[_Example]]:
    """The examples of `old` and `new` paired by an equal `key`, in order, and those of
    each side left unpaired."""
    waiting: dict[object, collections.deque[_Example]] = collections.defaultdict(collections.deque)
    for example in new:
        waiting[key(example)].append(example)
    pairs, old_left = [], []
    for example in old:
        match = waiting.get(key(example))
        if match:
            pairs.append((example, match.popleft()))
        else:
            old_left.append(example)
    return pairs, old_left, [example for left in waiting.values() for example in left]


def _first_labels(labels: set[str]) -> Tally:
    return Tally(count=len(labels), first=tuple(sorted(labels)[:LABELS_LISTED]))


def output_changes(old_dir: str, new_dir: str) -> ExampleChanges:
    """What changed from the output in `old_dir` to the one in `new_dir` (local or not)."""
    return compare(published_entries(old_dir), published_entries(new_dir))


def published_entries(output_dir: str) -> Iterator[IndexEntry]:
    """The example index entries of every shard the output's summary.json lists (an
    index a run left beside others is not the output's). NotComparable, at once, for
    a folder that is not an output or an output without example indexes;
    ExampleIndexError naming the file and line of an index that cannot be read."""
    summary = _summary(output_dir)
    indexes = [
        naming.published_index(output_dir, shard.file)
        for split in summary.splits.values()
        for shard in split.shards
    ]
    if indexes and not storage.exists(indexes[0]):
        why = (
            f"it was written with --dedupe {summary.options.dedupe}, which keeps none"
            if summary.options.dedupe is not Dedupe.NONE
            else "it was written before outputs kept them; convert it again to compare it"
        )
        raise NotComparable(
            f"{indexes[0]} not found: {output_dir} has no example indexes "
            f"({naming.SOURCES_DIR}/*{naming.INDEX_SUFFIX}): {why}"
        )
    if leading_out := next(
        (index for index in indexes if not storage.stays_in(index, output_dir)), None
    ):
        raise NotComparable(f"{leading_out} is a link out of {output_dir}: it is not read")
    return itertools.chain.from_iterable(map(read_index, indexes))


def _summary(output_dir: str) -> Summary:
    path = storage.join(output_dir, naming.SUMMARY_FILE)
    if not storage.stays_in(path, output_dir):
        raise NotComparable(f"{path} is a link out of {output_dir}: it is not read")
    try:
        with storage.open_read(path) as file:
            return Summary.from_json(file.read())
    except FileNotFoundError:
        raise NotComparable(f"{path} not found: not an image-tfrecords output") from None
    except pydantic.ValidationError as error:
        raise NotComparable(f"{path} is not a summary.json: {error.errors()[0]['msg']}") from None
