"""WriteSortedLines: one file, every line once, in the order of its sort key then its text,
written through sorted runs that are merged (in passes, when they are many) and kept for
a retried merge until the run's temp folder goes."""

import json
import random

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from image_tfrecords.core.records import naming
from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
from image_tfrecords.transforms import sorted_lines
from image_tfrecords.transforms.sorted_lines import WriteSortedLines


def items(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    # Keys that tie often (so the text decides) and text that is not ASCII.
    return [
        {
            "manifest": rng.choice(["b.csv", "a.csv", "é.csv"]),
            "line": rng.randrange(20),
            "uri": f"gs://bucket/{rng.randrange(10**6)}-ü.jpg",
        }
        for _ in range(count)
    ]


def to_json(item: dict) -> str:
    return json.dumps(item, ensure_ascii=False, sort_keys=True)


def key(item: dict) -> tuple:
    return item["manifest"], item["line"]


@pytest.mark.parametrize("batched", [False, True])
def test_the_lines_come_out_sorted_through_many_runs(batched, tmp_path, monkeypatch):
    monkeypatch.setattr(sorted_lines, "_RUN_LINES", 7)  # 300 items: dozens of runs
    monkeypatch.setattr(sorted_lines, "_MAX_OPEN_RUNS", 5)  # merged in three passes
    runs = []
    new_run = naming.sorted_lines_run
    monkeypatch.setattr(naming, "sorted_lines_run", lambda *args: runs.append(1) or new_run(*args))
    given = items(300, seed=int(batched))
    path = naming.jsonl_list(str(tmp_path / "staged"), naming.ERRORS)
    elements = (
        [given[start : start + 11] for start in range(0, len(given), 11)] if batched else given
    )
    with beam.Pipeline() as p:
        written = (
            p
            | beam.Create(elements, reshuffle=False)
            | WriteSortedLines(
                path, to_json, str(tmp_path), key, batched=batched, filesystems=FilesystemOptions()
            )
        )
        assert_that(written, equal_to([path]))
    expected = [to_json(item) for item in sorted(given, key=lambda i: (key(i), to_json(i)))]
    assert open(path, encoding="utf-8").read().splitlines() == expected
    # The runs were many, merged in passes: 43 or more, then 9 or more, then 2; all of
    # them are still there for a retry of the merge (publishing deletes the temp folder).
    first = 300 // 7
    assert len(runs) >= first + first // 5 + 2
    assert len(list((tmp_path / naming.SORTED_LINES_DIR).iterdir())) == len(runs)


def test_no_item_writes_no_file(tmp_path):
    path = naming.jsonl_list(str(tmp_path / "staged"), naming.DUPLICATES)
    with beam.Pipeline() as p:
        written = (
            p
            | beam.Create([], reshuffle=False)
            | WriteSortedLines(path, to_json, str(tmp_path), filesystems=FilesystemOptions())
        )
        assert_that(written, equal_to([]))
    assert not (tmp_path / "staged").exists()
