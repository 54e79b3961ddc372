"""`rebuild_report(OUTPUT)`: report.html made again from an output that exists.

For an output written before there was a report, or to see one again after its files
changed. The numbers are summary.json's; the sample, the copies and the dead letters are
the ones the pipeline picks (report_page's ranks), read from the output's own files in
one pass over the shards. Thumbnails come from the stored images here, as the source
images may be gone; a copy that --dedupe dropped is not in the shards, and shows none.
Each line of the lists is read as the typed record the pipeline writes: a line that is
not one (not JSON, a field missing or of another kind) is a ValueError naming the file
and the line, never a traceback.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NotRequired, TypeVar

import pydantic
import tensorflow as tf
from typing_extensions import TypedDict

from image_tfrecords.core.imaging.images import THUMBNAIL_SIDE, open_image, thumbnail_of
from image_tfrecords.core.records.documents import DocumentError, load_json
from image_tfrecords.core.records.feature_keys import IMAGE, LABEL_TEXT, SOURCE_ID
from image_tfrecords.core.records.naming import REPORT_FILE
from image_tfrecords.core.report.report_page import (
    PAIRS_SHOWN,
    REJECTED_SHOWN,
    SAMPLE_PER_LABEL,
    CopyPair,
    Pictured,
    RejectedRow,
    ReportContent,
    copy_rank,
    distinct,
    first_copies,
    render_report,
    sample_rank,
)
from image_tfrecords.output import Output

_T = TypeVar("_T")
_Shown = tuple[str, str]  # (split, uri): an example the page pictures


# The fields of the lists' lines the page shows (the pipeline writes more), typed.
# (typing_extensions' TypedDict: pydantic needs it before Python 3.12.)
class _Example(TypedDict):
    uri: str
    split: str
    labels: list[str]
    manifest: str
    line: int


class _CopyLine(TypedDict):  # a line of duplicates-*.jsonl or near_duplicates-*.jsonl
    kept: _Example
    copy: _Example
    distance: NotRequired[int]  # near-copies'


class _DeadLetterLine(TypedDict):  # a line of errors-*.jsonl (core/records/dead_letters.py)
    manifest: str
    line: int
    uri: str
    reason: str
    message: str


_COPY_LINE = pydantic.TypeAdapter(_CopyLine)
_DEAD_LETTER_LINE = pydantic.TypeAdapter(_DeadLetterLine)


def rebuild_report(output_dir: str) -> str:
    """Writes OUTPUT/report.html and returns its path."""
    output = Output.read(output_dir)
    summary = output.summary
    copies = {
        kind: first_copies(map(_as_shown, _json_lines(output, found.files, _COPY_LINE)), _copy_rank)
        for kind, found in (
            ("duplicates", summary.duplicates),
            ("near_duplicates", summary.near_duplicates),
        )
    }
    wanted = {
        (image["split"], image["uri"])
        for pairs in copies.values()  # pictured
        for pair in pairs[:PAIRS_SHOWN]
        for image in (pair["kept"], pair["copy"])
    }
    samples, thumbnails = _sample(output, wanted)

    def pictured(image: dict[str, Any]) -> Pictured:
        shown = image["split"], image["uri"]
        return Pictured(image["uri"], image["split"], tuple(image["labels"]), thumbnails.get(shown))

    rejected: dict[str, list[dict[str, Any]]] = {}
    for dead in _json_lines(output, summary.errors.files, _DEAD_LETTER_LINE):
        rejected.setdefault(dead["reason"], []).append(dead)
    content = ReportContent(
        samples=samples,
        duplicates=[
            CopyPair(pictured(pair["kept"]), pictured(pair["copy"]), 0)
            for pair in copies["duplicates"]
        ],
        near_duplicates=[
            CopyPair(pictured(pair["kept"]), pictured(pair["copy"]), pair["distance"])
            for pair in copies["near_duplicates"]
        ],
        dead_letters={
            reason: [
                RejectedRow(dead["manifest"], dead["line"], dead["uri"], dead["message"])
                for dead in _first(rows, REJECTED_SHOWN, _row_rank)
            ]
            for reason, rows in sorted(rejected.items())
        },
    )
    path = output.path(REPORT_FILE)
    with tf.io.gfile.GFile(path, "wb") as out:
        out.write(render_report(summary, content, output.directory).encode())
    return path


def _sample(
    output: Output, wanted: set[_Shown]
) -> tuple[dict[str, dict[str, list[Pictured]]], dict[_Shown, bytes]]:
    """The sample of each split and label, and the thumbnails of the `wanted` examples:
    one pass over every shard, decoding only the images that are shown (or, for the
    sample, that are the lowest-ranked so far)."""
    (text_key,) = (key for key in LABEL_TEXT.values() if key in output.features)
    samples: dict[str, dict[str, list[Pictured]]] = {}
    thumbnails: dict[_Shown, bytes] = {}
    for split in output.summary.splits:
        lowest: dict[str, list[tuple[bytes, Pictured]]] = {}  # label -> a max-heap, negated
        for record in _records(output, split):
            example = tf.train.Example.FromString(record)
            features = example.features.feature
            uri = features[SOURCE_ID].bytes_list.value[0].decode()
            labels = tuple(text.decode() for text in features[text_key].bytes_list.value)
            rank = _negated(sample_rank(uri))
            thumbnail = None
            if (split, uri) in wanted:
                thumbnail = thumbnails[split, uri] = _thumbnail(features[IMAGE])
            for label in sorted(set(labels)):
                heap = lowest.setdefault(label, [])
                if len(heap) == SAMPLE_PER_LABEL and rank <= heap[0][0]:
                    continue
                thumbnail = thumbnail or _thumbnail(features[IMAGE])
                entry = (rank, Pictured(uri, split, labels, thumbnail))
                if len(heap) < SAMPLE_PER_LABEL:
                    heapq.heappush(heap, entry)
                else:
                    heapq.heapreplace(heap, entry)
        if lowest:
            samples[split] = {
                label: [pictured for _, pictured in sorted(heap, reverse=True)]
                for label, heap in sorted(lowest.items())
            }
    return samples, thumbnails


def _negated(rank: bytes) -> bytes:
    """A rank whose order is the reverse of `rank`'s, so that heapq's min-heap keeps the
    highest of the lowest ranks on top."""
    return bytes(255 - byte for byte in rank)


def _thumbnail(image: tf.train.Feature) -> bytes:
    with open_image(image.bytes_list.value[0]) as stored:
        stored.draft(None, (THUMBNAIL_SIDE, THUMBNAIL_SIDE))  # JPEGs decode at a scale
        stored.load()
        return thumbnail_of(stored)


def _records(output: Output, split: str) -> Iterator[bytes]:
    for path, _ in output.shards(split):
        yield from output.read_shard(path)


def _json_lines(
    output: Output, files: Iterable[str], record: pydantic.TypeAdapter
) -> Iterator[dict[str, Any]]:
    """Each line of the files, as `record` types it; ValueError naming the file and line
    of one that is not such a record."""
    for name in files:
        with tf.io.gfile.GFile(output.path(name), "rb") as file:
            for number, line in enumerate(file, 1):
                if line.strip():
                    yield _typed_line(record, line, f"{name} line {number}")


def _typed_line(record: pydantic.TypeAdapter, line: bytes, where: str) -> dict[str, Any]:
    try:
        return record.validate_python(load_json(line))
    except json.JSONDecodeError as problem:
        raise ValueError(f"{where}: not JSON ({problem.msg})") from None
    except DocumentError as problem:
        raise ValueError(f"{where}: {problem}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not UTF-8 text") from None
    except pydantic.ValidationError as problem:
        first = problem.errors()[0]
        field = ".".join(map(str, first["loc"])) or "the line"
        raise ValueError(
            f"{where}: not a line image-tfrecords writes ({field}: {first['msg']})"
        ) from None


def _first(items: Iterable[_T], count: int, rank: Callable[[_T], Any]) -> list[_T]:
    return heapq.nsmallest(count, items, key=rank)


def _as_shown(pair: dict[str, Any]) -> dict[str, Any]:
    """A copy's line with each label once (report_page.distinct), all the page keeps."""
    return pair | {
        side: pair[side] | {"labels": distinct(pair[side]["labels"])} for side in ("kept", "copy")
    }


def _copy_rank(pair: dict[str, Any]) -> tuple:
    copy = pair["copy"]
    return copy_rank(
        pair["kept"]["split"], copy["split"], copy["manifest"], copy["line"], copy["uri"]
    )


def _row_rank(dead: dict[str, Any]) -> tuple:
    return dead["manifest"], dead["line"]
