"""What changed between two outputs (core/report/changes.py): compare on hand-made index entries,
one kind of change at a time, a URI in two splits and twice in one; output_changes and
`image-tfrecords diff` on hand-made outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import convert, encode, photo_like

from image_tfrecords.core.records import naming
from image_tfrecords.core.records.example_index import IndexEntry, write_index
from image_tfrecords.core.records.summary import ExampleChanges, Tally
from image_tfrecords.core.report.changes import (
    LABELS_LISTED,
    URIS_LISTED,
    NotComparable,
    compare,
    output_changes,
)
from image_tfrecords.pipeline import cli


def entry(uri: str, split: str = "train", labels=("cat",), sha256: str = "a") -> IndexEntry:
    return IndexEntry(
        position=0,
        uri=uri,
        split=split,
        labels=tuple(labels),
        sha256=sha256,
        perceptual_hash=0,
        source_bytes=1,
        reencoded=None,
        longest_side=1,
        identity=None,
        key=None,
    )


def counts(changes: ExampleChanges) -> dict[str, int]:
    """Every count of `changes` by its name (a Tally's too)."""
    return {name: getattr(value, "count", value) for name, value in changes}


def test_same_examples_in_another_order_are_unchanged():
    old = [entry("a.jpg"), entry("b.jpg", "test", ("dog", "cat"))]
    new = [entry("b.jpg", "test", ("cat", "dog")), entry("a.jpg")]
    changes = compare(old, new)
    assert not changes.changed
    assert counts(changes) == {
        "old_examples": 2,
        "new_examples": 2,
        "examples_added": 0,
        "examples_removed": 0,
        "relabelled": 0,
        "images_changed": 0,
        "splits_moved": 0,
        "unchanged": 2,
        "labels_new": 0,
        "labels_gone": 0,
    }


@pytest.mark.parametrize(
    ("new", "change"),
    [
        (entry("a.jpg", labels=("dog",)), "relabelled"),
        (entry("a.jpg", sha256="b"), "images_changed"),
        (entry("a.jpg", "validation"), "splits_moved"),
    ],
)
def test_each_change_of_an_example_is_counted_and_named(new, change):
    changes = compare([entry("a.jpg"), entry("b.jpg")], [new, entry("b.jpg")])
    assert changes.changed
    assert getattr(changes, change) == Tally(count=1, first=("a.jpg",))
    assert changes.unchanged == 1
    assert changes.examples_added.count == changes.examples_removed.count == 0


def test_an_example_changed_in_every_way_is_counted_under_each():
    changes = compare([entry("a.jpg")], [entry("a.jpg", "test", ("dog",), "b")])
    assert (changes.relabelled.count, changes.images_changed.count) == (1, 1)
    assert (changes.splits_moved.count, changes.unchanged) == (1, 0)
    assert changes.examples_added.count == changes.examples_removed.count == 0


def test_examples_added_and_removed_and_the_labels_that_came_and_went():
    changes = compare(
        [entry("a.jpg"), entry("gone.jpg", labels=("owl",))],
        [entry("a.jpg"), entry("new.jpg", labels=("cat", "zebra"))],
    )
    assert changes.examples_added == Tally(count=1, first=("new.jpg",))
    assert changes.examples_removed == Tally(count=1, first=("gone.jpg",))
    assert changes.labels_new == Tally(count=1, first=("zebra",))
    assert changes.labels_gone == Tally(count=1, first=("owl",))
    assert (changes.old_examples, changes.new_examples, changes.unchanged) == (2, 2, 1)


def test_a_uri_in_two_splits_pairs_each_split_with_its_own():
    """A leak kept on both sides is unchanged; one of its splits dropped is a removal, not
    a move; one split moved elsewhere is a move of that one."""
    leak = [entry("a.jpg", "train"), entry("a.jpg", "test")]
    assert compare(leak, list(reversed(leak))).unchanged == 2

    dropped = compare(leak, [entry("a.jpg", "train")])
    assert (dropped.examples_removed.count, dropped.splits_moved.count) == (1, 0)
    assert dropped.unchanged == 1

    moved = compare(leak, [entry("a.jpg", "train"), entry("a.jpg", "validation")])
    assert moved.splits_moved == Tally(count=1, first=("a.jpg",))
    assert (moved.unchanged, moved.examples_added.count, moved.examples_removed.count) == (1, 0, 0)


def test_a_uri_twice_in_a_split_pairs_the_closest_examples():
    """Each example pairs with the one it differs least from: here the relabelled one and
    the one whose image changed, not the other way round (two changes each)."""
    old = [entry("a.jpg", labels=("cat",), sha256="1"), entry("a.jpg", labels=("dog",), sha256="2")]
    new = [entry("a.jpg", labels=("dog",), sha256="3"), entry("a.jpg", labels=("owl",), sha256="1")]
    changes = compare(old, new)
    assert (changes.relabelled.count, changes.images_changed.count) == (1, 1)
    assert changes.relabelled.first == changes.images_changed.first == ("a.jpg",)

    extra = compare(old[:1], [old[0], old[0]])
    assert (extra.unchanged, extra.examples_added) == (1, Tally(count=1, first=("a.jpg",)))


def test_names_are_the_first_by_uri_and_capped():
    many = [entry(f"{number:03d}.jpg", labels=(f"label{number:03d}",)) for number in range(150)]
    changes = compare([], reversed(many))
    assert changes.examples_added.count == 150
    assert changes.examples_added.first == tuple(f"{n:03d}.jpg" for n in range(URIS_LISTED))
    assert changes.labels_new.count == 150
    assert changes.labels_new.first == tuple(f"label{n:03d}" for n in range(LABELS_LISTED))


def test_a_uri_sqlite_cannot_hold_as_text_is_compared():
    undecodable = b"caf\xe9.jpg".decode("utf-8", "surrogateescape")
    changes = compare([entry(undecodable)], [entry(undecodable, sha256="b")])
    assert changes.images_changed.first == (undecodable,)


def test_lines_say_each_count_and_its_first_names():
    old = [entry(f"{number}.jpg") for number in range(12)]
    assert compare(old, [entry("0.jpg", labels=("dog",))]).lines() == [
        "examples: 12 -> 1",
        "  added          0",
        "  removed       11  1.jpg, 10.jpg, 11.jpg, ...",
        "  relabelled     1  0.jpg",
        "  image changed  0",
        "  split moved    0",
        "  unchanged      0",
        "  labels new     1  dog",
        "  labels gone    1  cat",
    ]


def published(folder, entries: list[IndexEntry] | None, dedupe: str = "none") -> str:
    """An output as the publish step leaves it, as far as the comparison reads it: its
    summary.json listing one shard, and that shard's example index of `entries` (None:
    none, as before outputs kept them or with --dedupe)."""
    shard = naming.PublishedShard("train", 0, 1, ".tfrecord").name
    folder.mkdir()
    summary = _SUMMARY.replace("SHARD", shard).replace("DEDUPE", dedupe)
    (folder / naming.SUMMARY_FILE).write_text(summary)
    if entries is not None:
        write_index(
            naming.published_index(str(folder), shard),
            (item.model_copy(update={"position": n}) for n, item in enumerate(entries)),
        )
    return str(folder)


_SUMMARY = json.dumps(
    {
        "options": {"dedupe": "DEDUPE"},
        "rows_read": 0,
        "examples_written": 0,
        "rows_in_examples": 0,
        "rows_dead_lettered": 0,
        "accounted": True,
        "error_fraction": 0.0,
        "splits": {"train": {"shards": [{"file": "SHARD", "records": 0, "bytes": 0}]}},
        "vocabulary": {"label": []},
    }
)


def test_output_changes_reads_each_outputs_indexes(tmp_path):
    old = published(tmp_path / "old", [entry("a.jpg"), entry("b.jpg")])
    new = published(tmp_path / "new", [entry("b.jpg", labels=("dog",))])
    changes = output_changes(old, new)
    assert (changes.examples_removed.first, changes.relabelled.first) == (("a.jpg",), ("b.jpg",))


def test_an_output_without_indexes_or_summary_is_not_comparable(tmp_path):
    old = published(tmp_path / "old", None)
    new = published(tmp_path / "new", [])
    with pytest.raises(NotComparable, match="it was written before outputs kept them"):
        output_changes(old, new)
    with pytest.raises(NotComparable, match="summary.json not found: not an image-tfrecords"):
        output_changes(new, str(tmp_path))
    deduplicated = published(tmp_path / "deduplicated", None, dedupe="sha256")
    with pytest.raises(NotComparable, match="written with --dedupe sha256, which keeps none"):
        output_changes(new, deduplicated)


def test_diff_prints_the_changes_or_their_record_and_exits_0(tmp_path, capsys):
    old = published(tmp_path / "old", [entry("a.jpg")])
    new = published(tmp_path / "new", [entry("a.jpg", "test")])
    assert cli.diff_main([old, new]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == [f"{old} -> {new}", "examples: 1 -> 1"]
    assert "  split moved   1  a.jpg" in printed
    assert cli.diff_main([old, new, "--json"]) == 0
    assert ExampleChanges.model_validate_json(capsys.readouterr().out) == output_changes(old, new)


def test_diff_exits_2_naming_the_file_it_cannot_read(tmp_path, capsys):
    old = published(tmp_path / "old", [entry("a.jpg")])
    new = published(tmp_path / "new", [])
    index = naming.published_index(new, "train-00000-of-00001.tfrecord")
    with open(index, "w") as damaged:
        damaged.write("{not json\n")
    assert cli.diff_main([old, new]) == 2
    assert capsys.readouterr().err == (
        f"error: {index} line 1 is not an example index entry: Invalid JSON: key must be a "
        "string at line 1 column 2\n"
    )


def test_diff_reads_no_link_out_of_an_output_and_waits_on_no_fifo(tmp_path, capsys):
    """An index or a summary.json planted as a link to a file elsewhere is refused, not
    read; an index that is a FIFO ends the command, it does not wait (issue 55)."""
    old = published(tmp_path / "old", [entry("a.jpg")])
    new = published(tmp_path / "new", [entry("a.jpg")])
    index = Path(naming.published_index(new, "train-00000-of-00001.tfrecord"))
    elsewhere = tmp_path / "elsewhere.index.jsonl"
    index.rename(elsewhere)
    index.symlink_to(elsewhere)
    assert cli.diff_main([old, new]) == 2
    assert capsys.readouterr().err == f"error: {index} is a link out of {new}: it is not read\n"
    index.unlink()
    os.mkfifo(index)
    assert cli.diff_main([old, new]) == 2
    assert "is a FIFO (named pipe), not a file" in capsys.readouterr().err
    summary = Path(old) / naming.SUMMARY_FILE
    summary.rename(tmp_path / "summary.json")
    summary.symlink_to(tmp_path / "summary.json")
    assert cli.diff_main([old, new]) == 2
    assert capsys.readouterr().err == f"error: {summary} is a link out of {old}: it is not read\n"


def test_diff_says_what_changed_between_two_runs(tmp_path, capsys):
    """Day two's manifest adds a row, relabels one and removes one; it reuses day one."""
    for number in range(4):
        image = encode(photo_like(32, 24, seed=number), "JPEG")
        (tmp_path / f"{number}.jpg").write_bytes(image)
    rows = {number: f"train,{number}.jpg,cat\n" for number in range(3)}
    day_one = tmp_path / "day1.csv"
    day_one.write_text("".join(rows.values()))
    rows |= {0: "train,0.jpg,dog\n", 3: "train,3.jpg,cat\n"}
    del rows[1]
    day_two = tmp_path / "day2.csv"
    day_two.write_text("".join(rows.values()))
    quick = ("--num_shards", "1", "--worker_processes", "0")  # the shards written in-process
    old = convert(tmp_path / "old", "--manifest", str(day_one), *quick)
    new = convert(tmp_path / "new", "--manifest", str(day_two), *quick, "--reuse_from", str(old))
    capsys.readouterr()

    assert cli.diff_main([str(old), str(new)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "examples: 3 -> 3",
        "  added         1  " + str(tmp_path / "3.jpg"),
        "  removed       1  " + str(tmp_path / "1.jpg"),
        "  relabelled    1  " + str(tmp_path / "0.jpg"),
        "  image changed 0",
        "  split moved   0",
        "  unchanged     1",
        "  labels new    1  dog",
        "  labels gone   0",
    ]
