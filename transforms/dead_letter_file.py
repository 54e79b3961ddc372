"""The dead letters' file: every rejected row, one JSON line each, in the manifest's order."""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.dead_letters import DeadLetter

DEAD_LETTER_FILE = "errors-00000-of-00001.jsonl"


class WriteDeadLetters(beam.PTransform):
    """Writes FOLDER/errors-00000-of-00001.jsonl, none when no row was rejected; yields its
    path.

    The lines are sorted by manifest and line (then by the rest of each), so every runner writes the same
    bytes (Flink and Spark finish their bundles in other orders than the DirectRunner).
    Sorting holds the dead letters in one worker's memory, a few hundred bytes each: a
    run that publishes has at most --max_error_fraction of its rows rejected.
    """

    def __init__(self, folder: str) -> None:
        super().__init__()
        self._folder = folder

    def expand(self, dead_letters: beam.PCollection) -> beam.PCollection:
        return (dead_letters
                | "AllDeadLetters" >> beam.combiners.ToList()
                | "WriteSorted" >> beam.FlatMap(_write_sorted,
                                                FileSystems.join(self._folder,
                                                                 DEAD_LETTER_FILE)))


def _write_sorted(dead_letters: list[DeadLetter], path: str) -> Iterator[str]:
    if not dead_letters:
        return
    with FileSystems.create(path, mime_type="application/json") as file:
        for dead_letter in sorted(dead_letters):
            file.write(dead_letter.to_json().encode("utf-8") + b"\n")
    yield path
