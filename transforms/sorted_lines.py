"""Files of JSON lines that every runner writes with the same bytes: the dead letters'
errors-*.jsonl and the copies' duplicates-*.jsonl and near_duplicates-*.jsonl."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems


class WriteSortedLines(beam.PTransform):
    """Writes the file at `path` (naming.jsonl_list), one line a element in the order of
    `sort_key` (ties by the line), no file when there is no element; yields its path.

    One file, sorted, so that Flink and Spark, which finish their bundles in other orders
    and write as many files as their parallelism, publish what the DirectRunner does. The
    lines are held in one worker's memory to sort, a few hundred bytes each: a run that
    publishes has at most --max_error_fraction of its rows rejected, and a line of copies
    per example at most (about 300 MB for a million).
    """

    def __init__(self, path: str, to_json: Callable[[Any], str],
                 sort_key: Callable[[Any], Any] = lambda element: ()) -> None:
        super().__init__()
        self._path = path
        self._to_json = to_json
        self._sort_key = sort_key

    def expand(self, elements: beam.PCollection) -> beam.PCollection:
        to_json, sort_key = self._to_json, self._sort_key
        return (elements
                | "ToLine" >> beam.Map(lambda element: (sort_key(element), to_json(element)))
                | "AllLines" >> beam.combiners.ToList()
                | "WriteSorted" >> beam.FlatMap(_write_sorted, self._path))


def _write_sorted(lines: list[tuple[Any, str]], path: str) -> Iterator[str]:
    if not lines:
        return
    with FileSystems.create(path, mime_type="application/json") as file:
        for _, line in sorted(lines):
            file.write(line.encode("utf-8") + b"\n")
    yield path
