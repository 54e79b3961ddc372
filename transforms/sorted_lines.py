"""Files of JSON lines that every runner writes with the same bytes: the dead letters'
errors-*.jsonl and the copies' duplicates-*.jsonl and near_duplicates-*.jsonl."""

import heapq
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from image_tfrecords.core.records import naming
from image_tfrecords.core.storage import storage
from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
from image_tfrecords.transforms.storage_steps import StorageDoFn, with_filesystems

# Lines a writer holds before it writes them out as one sorted run: a few MB.
_RUN_LINES = 10_000
# Runs open at once while merging (each holds a file's buffer and, on a bucket, a
# connection); more runs than this are merged in passes.
_MAX_OPEN_RUNS = 128


class WriteSortedLines(beam.PTransform):
    """Writes the file at `path` (naming.jsonl_list), one line an item in the order of
    `sort_key` (ties by the line), no file when there is no item; yields its path. An
    element is one item, or with `batched` a batch of them (the copies come in batches:
    one element a copy would cost Beam's coders a few microseconds each, and a run may
    find one for most of its examples).

    One file, sorted, so that Flink and Spark, which finish their bundles in other orders
    and write as many files as their parallelism, publish what the DirectRunner does. The
    lines are written in sorted runs of at most _RUN_LINES into `temp_dir` (an external
    merge sort), and the runs merged into the file, a line of each at a time, at most
    _MAX_OPEN_RUNS at once: memory does not grow with the lines (a run may find a copy for
    most of its examples). The runs stay until the temp folder goes, so that a retried
    merge finds them. Both steps apply `filesystems` before they touch storage.
    """

    def __init__(
        self,
        path: str,
        to_json: Callable[[Any], str],
        temp_dir: str,
        sort_key: Callable[[Any], Any] = lambda item: (),
        batched: bool = False,
        *,
        filesystems: FilesystemOptions,
    ) -> None:
        super().__init__()
        self._filesystems = filesystems
        self._path = path
        self._to_json = to_json
        self._temp_dir = temp_dir
        self._sort_key = sort_key
        self._batched = batched

    def expand(self, elements: beam.PCollection) -> beam.PCollection:
        items = elements if not self._batched else elements | "Items" >> beam.FlatMap(iter)
        return (
            items
            | "SortedRuns"
            >> beam.ParDo(
                _WriteSortedRuns(
                    self._path, self._to_json, self._sort_key, self._temp_dir, self._filesystems
                )
            )
            | "AllRuns" >> beam.combiners.ToList()
            | "Merge"
            >> beam.FlatMap(
                with_filesystems(_merge_runs, self._filesystems), self._path, self._temp_dir
            )
        )


class _WriteSortedRuns(StorageDoFn):
    """Items -> the paths of files of their lines, each sorted: a line is the sort key's
    JSON, a tab (which JSON text never holds unescaped) and the item's JSON."""

    def __init__(
        self,
        path: str,
        to_json: Callable[[Any], str],
        sort_key: Callable[[Any], Any],
        temp_dir: str,
        filesystems: FilesystemOptions,
    ) -> None:
        super().__init__(filesystems)
        self._path = path
        self._to_json = to_json
        self._sort_key = sort_key
        self._temp_dir = temp_dir

    def start_bundle(self) -> None:
        self._held: list[tuple[Any, str]] = []

    def process(self, item: Any) -> Iterator[str]:
        self._held.append((self._sort_key(item), self._to_json(item)))
        if len(self._held) >= _RUN_LINES:
            yield self._write_run()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._held:
            yield GlobalWindows.windowed_value(self._write_run())

    def _write_run(self) -> str:
        self._held.sort()
        path = _write_run(self._temp_dir, self._path, self._held)
        self._held = []
        return path


def _write_run(temp_dir: str, path: str, pairs: Iterable[tuple[Any, str]]) -> str:
    """Writes (sort key, line) pairs, in their order, to a new run; returns its path."""
    run = naming.sorted_lines_run(temp_dir, path)
    with storage.create(run) as file:
        for key, line in pairs:
            file.write(f"{json.dumps(key)}\t{line}\n".encode())
    return run


def _merge_runs(runs: list[str], path: str, temp_dir: str) -> Iterator[str]:
    if not runs:
        return
    while len(runs) > _MAX_OPEN_RUNS:
        runs = [
            _write_run(temp_dir, path, _merged(runs[start : start + _MAX_OPEN_RUNS]))
            for start in range(0, len(runs), _MAX_OPEN_RUNS)
        ]
    with FileSystems.create(path, mime_type="application/json") as file:
        for _, line in _merged(runs):
            file.write(line.encode() + b"\n")
    yield path


def _merged(runs: list[str]) -> Iterator[tuple[list, str]]:
    return heapq.merge(*(_run_lines(run) for run in runs))


def _run_lines(run: str) -> Iterable[tuple[list, str]]:
    """A sorted run's (sort key, line) pairs, read a line at a time; the key is a list,
    which compares as the tuple it was."""
    with storage.open_read(run) as file:
        for text in file:
            key, line = text.decode().rstrip("\n").split("\t", 1)
            yield json.loads(key), line
