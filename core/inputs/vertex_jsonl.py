"""Vertex AI image import files (JSON Lines): `imageGcsUri`, `classificationAnnotation(s)`
or `boundingBoxAnnotations`, the split in `dataItemResourceLabels`' ml_use. Read a line
range at a time by worker processes, as CSV manifests are."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Iterator, Sequence

from image_tfrecords.core.inputs.boxes import box_row, parse_box
from image_tfrecords.core.inputs.input_format import FileHead, InputFormat
from image_tfrecords.core.inputs.lines import LOOKAHEAD, LongLine, numbered_lines, short_lines
from image_tfrecords.core.inputs.rows import (
    ManifestError,
    RowRules,
    has_undecodable_bytes,
    image_folder,
    invalid_split,
    json_text,
    rejecter,
    resolve_uri,
    row_split,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.documents import load_json
from image_tfrecords.core.records.records import ManifestRow


def read_jsonl(
    path: str, rules: RowRules, split: str | None, lines: LineRange | None = None
) -> Iterator[ManifestRow | DeadLetter]:
    folder = image_folder(path, rules)
    for line, raw in numbered_lines(path, lines):
        if isinstance(raw, LongLine):
            yield raw.dead_letter(path, line, split)
            continue
        yield from _parse_jsonl_line(path, folder, line, raw, rules, split)


def check_jsonl(path: str, rules: RowRules = RowRules()) -> None:
    """The launcher's look at a JSON Lines manifest's first lines: raises ManifestError
    for lines of another --label_mode's shape (see jsonl_label_mode_problem). CSV
    manifests get theirs from read_header."""
    items = []
    for _, raw in itertools.islice(short_lines(path), LOOKAHEAD):
        try:
            item = load_json(raw)
        except ValueError:
            continue
        if isinstance(item, dict):
            items.append(item)
    problem = jsonl_label_mode_problem(items, rules)
    if problem:
        raise ManifestError(f"{path}: {problem}")


def jsonl_label_mode_problem(items: Sequence[dict], rules: RowRules) -> str | None:
    """label_mode_problem for Vertex AI JSON Lines: several classification labels on any
    line without multi (that is unambiguous), or more than half of the lines shaped for
    the other mode (boxes and no classification, or the reverse)."""
    boxes_only = sum(
        bool(item.get("boundingBoxAnnotations")) and not _classified(item) for item in items
    )
    classified_only = sum(
        _classified(item) and not item.get("boundingBoxAnnotations") for item in items
    )
    several = sum(
        isinstance(item.get("classificationAnnotations"), list)
        and len(item["classificationAnnotations"]) > 1
        for item in items
    )
    if rules.detection and 2 * classified_only > len(items):
        return (
            f"{classified_only} of the first {len(items)} lines have a classification "
            "annotation and no boundingBoxAnnotations; pass --label_mode single (or multi)"
        )
    if not rules.detection and 2 * boxes_only > len(items):
        return (
            f"{boxes_only} of the first {len(items)} lines have only "
            "boundingBoxAnnotations; pass --label_mode detection"
        )
    if rules.label_mode is LabelMode.SINGLE and several:
        return (
            f"{several} of the first {len(items)} lines have several "
            "classificationAnnotations; pass --label_mode multi"
        )
    return None


def _classified(item: dict) -> bool:
    return bool(item.get("classificationAnnotation") or item.get("classificationAnnotations"))


_VERTEX_ML_USE = "aiplatform.googleapis.com/ml_use"


def _parse_jsonl_line(
    manifest: str,
    folder: str,
    line: int,
    raw: str,
    rules: RowRules,
    forced_split: str | None = None,
) -> Iterator[ManifestRow | DeadLetter]:
    """One line of a Vertex AI image import file: one row, or with detection rules one
    row per bounding box (so that a bad box costs only itself)."""
    reject = rejecter(manifest, line, raw)
    if has_undecodable_bytes(raw):
        yield reject(reasons.INVALID_ENCODING, "the line is not valid UTF-8")
        return
    try:
        item = load_json(raw)
    except ValueError as error:
        yield reject(reasons.MALFORMED_ROW, f"cannot parse the line as JSON: {error}")
        return
    if not isinstance(item, dict):
        yield reject(reasons.MALFORMED_ROW, "expected a JSON object")
        return
    written_uri = item.get("imageGcsUri")
    if not isinstance(written_uri, str) or not written_uri.strip():
        yield reject(reasons.MISSING_URI, "imageGcsUri is missing or empty")
        return
    written_uri = written_uri.strip()
    uri = resolve_uri(written_uri, folder)
    resource_labels = item.get("dataItemResourceLabels")
    ml_use = str(
        resource_labels.get(_VERTEX_ML_USE, "") if isinstance(resource_labels, dict) else ""
    )
    # Vertex AI's ml_use values (training, validation, test) are split names (splits.py).
    split = row_split(ml_use, written_uri, rules, forced_split)
    if split is None:
        yield reject(
            reasons.INVALID_SPLIT, invalid_split(ml_use, forced_split), uri=uri, split=ml_use
        )
        return
    image = ManifestRow(manifest, line, raw, split, uri, ())
    if rules.detection:
        yield from _jsonl_box_rows(image, item.get("boundingBoxAnnotations") or [])
    else:
        yield _jsonl_classification_row(image, item, rules, reject)


def _jsonl_classification_row(
    image: ManifestRow, item: dict, rules: RowRules, reject: Callable[..., DeadLetter]
) -> ManifestRow | DeadLetter:
    annotations = item.get("classificationAnnotations") or [
        item.get("classificationAnnotation") or {}
    ]
    if not isinstance(annotations, list):  # no annotation: missing_label below
        annotations = []
    labels = tuple(
        dict.fromkeys(
            str(annotation.get("displayName", "")).strip()
            for annotation in annotations
            if isinstance(annotation, dict) and str(annotation.get("displayName", "")).strip()
        )
    )
    where = {"uri": image.uri, "split": image.split}
    if not labels and item.get("boundingBoxAnnotations"):
        return reject(
            reasons.UNSUPPORTED_ANNOTATION,
            "boundingBoxAnnotations without a "
            "classification annotation; pass --label_mode detection",
            **where,
        )
    if not labels:
        return reject(
            reasons.MISSING_LABEL, "no classification annotation with a displayName", **where
        )
    if len(labels) > 1 and not rules.multi_label:
        return reject(
            reasons.MULTIPLE_LABELS,
            f"{len(labels)} labels; pass --label_mode multi to keep them all",
            **where,
        )
    return image._replace(labels=labels)


_VERTEX_BOX_KEYS = ("xMin", "yMin", "", "", "xMax", "yMax", "", "")  # as parse_box reads them


def _jsonl_box_rows(image: ManifestRow, annotations: object) -> Iterator[ManifestRow | DeadLetter]:
    """A row per bounding box annotation; a line without any is an image without objects."""
    if not isinstance(annotations, list):
        yield rejecter(image.manifest, image.line, image.raw)(
            reasons.MALFORMED_ROW,
            "boundingBoxAnnotations is not a list",
            uri=image.uri,
            split=image.split,
        )
        return
    if not annotations:
        yield image
    for index, annotation in enumerate(annotations):
        raw = json.dumps(annotation, ensure_ascii=False)
        reject = rejecter(image.manifest, image.line, raw, f"boundingBoxAnnotations[{index}]: ")
        if not isinstance(annotation, dict):
            yield reject(
                reasons.MALFORMED_ROW, "expected a JSON object", uri=image.uri, split=image.split
            )
            continue
        vertices = [json_text(annotation.get(key)) if key else "" for key in _VERTEX_BOX_KEYS]
        yield box_row(
            image._replace(raw=raw),
            json_text(annotation.get("displayName")),
            any(vertices),
            functools.partial(parse_box, vertices),
            reject,
        )


class VertexJsonlFormat(InputFormat):
    name = "vertex_jsonl"
    title = "a Vertex AI JSON Lines import file"
    suffixes = (".jsonl", ".json")
    cuts_by_lines = True

    def recognises(self, head: FileHead) -> bool:
        item = head.first_line_object
        return item is not None and "imageGcsUri" in item

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        if rules.extra_columns:
            raise ManifestError(f"{source.path}: --schema columns are read from CSV manifests only")
        check_jsonl(source.path, rules)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return read_jsonl(source.path, rules, source.split, lines)
