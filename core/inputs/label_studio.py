"""Label Studio's JSON export: a list of tasks, each `data.image` and `annotations`, whose
`result` regions are `choices` (classification), `rectanglelabels` (boxes) or
`polygonlabels`, with `value` coordinates in percent of the image's width and height.

A task is read from its first annotation that was not cancelled (as Label Studio's own
converters read one annotation a task). Rows: with --label_mode single or multi, one per
task, its labels the `choices`; with detection, one per region, its box `x, y, x + width,
y + height` divided by 100 (a polygon's box is its points' extent, and the polygon its
mask). A rectangle's `rotation` (degrees, clockwise about its top left corner x, y) turns
it in pixels of the region's `original_width` x `original_height`, as Label Studio's YOLO
OBB export computes its corners (HumanSignal/label-studio-converter,
label_studio_converter/utils.py, convert_annotation_to_yolo_obb, commit 9a3db497; its
COCO export's Converter.rotated_rectangle turns it in percent instead, which is no
rectangle on an image that is not square): its box is the turned corners' extent, its
mask their polygon (core/inputs/boxes.py, rotated_box); without those sizes it is
invalid_size. Keypoints
(Label Studio's are regions of their own, tied to no object), brushes (its own RLE),
ellipses and vectors, relations and per-region text, ratings, numbers, dates and
taxonomies are left out, each by itself (a discarded row, counted by type in
summary.json's objects_left_out), the image written with its boxes (an image of such
regions alone is not written); a region of a type not named here is a dead letter
naming it. `data.image` may
be Label Studio's own path (`/data/upload/3/x.jpg`, `/data/local-files/?d=dir/x.jpg`):
read as `upload/3/x.jpg` and `dir/x.jpg` relative to --image_dir or the JSON's folder, and
inside it (core/inputs/dataset_root.py), as Label Studio serves local files only under
its LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT.
The file is streamed (ijson) a task at a time. The export carries no labeling config,
so it declares no classes (InputFormat.declared_classes).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator

from image_tfrecords.core.inputs.boxes import (
    box_row,
    clipped_box,
    declared_size,
    extent,
    polygon_mask,
    rotated_box,
    with_mask,
)
from image_tfrecords.core.inputs.dataset_root import DatasetRoot, quoted
from image_tfrecords.core.inputs.input_format import FileHead, InputFormat, json_items
from image_tfrecords.core.inputs.rows import (
    DiscardedRow,
    ImageEntries,
    RowRules,
    assign_split,
    left_out,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import Box, ManifestRow

_LOCAL_FILES = "/data/local-files/"
_LABEL_STUDIO_DATA = "/data/"
# Result types that are no box or polygon (shapes, and what a region carries beside its
# label): left out, one by one.
_LEFT_OUT = frozenset(
    {
        "keypointlabels",
        "keypoint",
        "brushlabels",
        "brush",
        "ellipselabels",
        "ellipse",
        "vectorlabels",
        "vector",
        "relation",
        "textarea",
        "rating",
        "number",
        "datetime",
        "taxonomy",
    }
)


def read_label_studio(
    path: str, rules: RowRules, split: str | None
) -> Iterator[ManifestRow | DeadLetter | DiscardedRow]:
    """A row per task (classification) or per region (detection); `line` is the task's
    1-based position in the list, `raw` the task's region (or the task) as JSON."""
    entries, root = ImageEntries(), DatasetRoot.of(path, rules)
    for position, task in enumerate(json_items(path, "item"), start=1):
        yield from _task_rows(path, position, task, rules, split, entries, root)


def _task_rows(
    path: str,
    position: int,
    task: object,
    rules: RowRules,
    split: str | None,
    entries: ImageEntries,
    root: DatasetRoot,
) -> Iterator[ManifestRow | DeadLetter | DiscardedRow]:
    raw = json.dumps(task, ensure_ascii=False)
    if not isinstance(task, dict):
        yield DeadLetter.in_file(
            path,
            reasons.MALFORMED_ROW,
            "a task must be a JSON object",
            position=position,
            raw=raw,
            split=split or "",
        )
        return
    where = f"task {task.get('id', position)}: "
    written = (task.get("data") or {}).get("image") if isinstance(task.get("data"), dict) else None
    if not isinstance(written, str) or not written.strip():
        yield DeadLetter.in_file(
            path,
            reasons.MISSING_URI,
            where + "data.image is missing or empty",
            position=position,
            raw=raw,
            split=split or "",
        )
        return
    name = _image_name(written.strip())
    # Label Studio shows an image in the browser, which turns it upright.
    image = ManifestRow(
        path,
        position,
        raw,
        split or assign_split(name, rules.split_fractions),
        root.resolve(name),
        (),
        drawn_upright=True,
        listed_whole=True,
    )
    outside = root.outside(image.uri, f"{where}data.image {quoted(written.strip())}")
    if outside:
        yield image.dead_letter(*outside)
        return
    repeated = entries.repeated(image, where.removesuffix(": "))
    if repeated:
        yield repeated
        return
    annotations = task.get("annotations") or []
    if not isinstance(annotations, list):
        yield image.dead_letter(reasons.MALFORMED_ROW, where + "annotations is not a list")
        return
    annotation = next(
        (each for each in annotations if isinstance(each, dict) and not each.get("was_cancelled")),
        None,
    )
    regions = annotation.get("result") if annotation else []
    if not isinstance(regions, list):
        yield image.dead_letter(
            reasons.MALFORMED_ROW, where + "the annotation's result is not a list"
        )
        return
    if rules.detection:
        yield from _region_rows(image, where, regions, rules)
        return
    labels = tuple(
        dict.fromkeys(
            str(choice).strip()
            for region in regions
            if isinstance(region, dict) and region.get("type") == "choices"
            for choice in _listed(region.get("value"), "choices")
            if str(choice).strip()
        )
    )
    if not labels:
        yield image.dead_letter(
            reasons.MISSING_LABEL,
            where + "no choices region (a "
            "classification label)"
            + (
                "; its regions are boxes: pass --label_mode detection"
                if any(
                    isinstance(region, dict) and region.get("type") == "rectanglelabels"
                    for region in regions
                )
                else ""
            ),
        )
    elif len(labels) > 1 and rules.label_mode is LabelMode.SINGLE:
        yield image.dead_letter(
            reasons.MULTIPLE_LABELS,
            f"{where}{len(labels)} choices; pass --label_mode multi to keep them all",
        )
    else:
        yield image._replace(labels=labels)


def _region_rows(
    image: ManifestRow, where: str, regions: list, rules: RowRules
) -> Iterator[ManifestRow | DeadLetter | DiscardedRow]:
    shapes = [
        region
        for region in regions
        if not (isinstance(region, dict) and region.get("type") == "choices")
    ]
    if not shapes:
        yield image  # an image without objects
    for index, region in enumerate(shapes):
        row = image._replace(raw=json.dumps(region, ensure_ascii=False))
        here = f"{where}region {region.get('id', index) if isinstance(region, dict) else index}: "
        yield _region_row(row, here, region, rules)


def _region_row(
    row: ManifestRow, where: str, region: object, rules: RowRules
) -> ManifestRow | DeadLetter | DiscardedRow:
    def reject(reason: str, message: str, **_: str) -> DeadLetter:
        return row.dead_letter(reason, where + message)

    kind = region.get("type") if isinstance(region, dict) else None
    if isinstance(kind, str) and kind in _LEFT_OUT:
        return left_out(row, kind)
    if not isinstance(region, dict) or not isinstance(region.get("value"), dict):
        return reject(reasons.MALFORMED_ROW, "a region must be an object with a value")
    value = region["value"]
    if kind not in ("rectanglelabels", "polygonlabels"):
        return reject(reasons.UNSUPPORTED_ANNOTATION, f"a {kind} region is not a box")
    labels = [str(label).strip() for label in _listed(value, kind) if str(label).strip()]
    if len(labels) > 1:
        return reject(
            reasons.MULTIPLE_LABELS, f"the region has {len(labels)} labels; a box has one"
        )
    mask, degrees = None, 0.0
    try:
        if kind == "rectanglelabels":
            x, y, width, height = (float(value[key]) / 100 for key in ("x", "y", "width", "height"))
            corners = (x, y, x + width, y + height)
            degrees = float(value.get("rotation") or 0)
        else:
            points = [(float(px) / 100, float(py) / 100) for px, py in value["points"]]
            if len(points) < 3:
                return reject(
                    reasons.INVALID_MASK, f"a polygon needs at least 3 points, found {len(points)}"
                )
            corners = extent([px for px, _ in points], [py for _, py in points])
            mask = polygon_mask([points], (1.0, 1.0), rules)
    except (KeyError, TypeError, ValueError) as error:
        return reject(
            reasons.INVALID_BOX,
            f"the {kind} value's coordinates are missing or not numbers ({error!r})",
        )
    label = labels[0] if labels else ""
    if degrees % 360:
        return box_row(row, label, True, lambda: _rotated(region, corners, degrees, rules), reject)
    return box_row(row, label, True, lambda: with_mask(clipped_box(*corners), mask), reject)


def _rotated(
    region: dict, corners: tuple[float, float, float, float], degrees: float, rules: RowRules
) -> Box | tuple[str, str]:
    """A rectangle (corners relative to the image) turned `degrees` clockwise about its
    top left corner, in pixels of the region's original_width x original_height, as Label
    Studio's YOLO OBB export turns it (a turn in percent would skew it)."""
    size = declared_size(region.get("original_width"), region.get("original_height"))
    if not isinstance(size[0], int):
        return reasons.INVALID_SIZE, f"a rotated rectangle is turned in pixels: {size[1]}"
    width, height = size
    xmin, ymin, xmax, ymax = corners
    return rotated_box(
        (xmin * width, ymin * height, xmax * width, ymax * height),
        degrees,
        (xmin * width, ymin * height),
        size,
        rules,
    )


def _listed(value: object, key: str) -> list:
    """value[key] where value is an object and that is a list; else none (a region's
    labels or choices of another type are no label)."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, list) else []


def _image_name(written: str) -> str:
    """data.image as a path to resolve: Label Studio's own URLs made relative."""
    if written.startswith(_LOCAL_FILES):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(written).query)
        return query.get("d", [written])[0]
    if written.startswith(_LABEL_STUDIO_DATA):
        return written[len(_LABEL_STUDIO_DATA) :]
    return written


class LabelStudioFormat(InputFormat):
    name = "label_studio"
    title = "a Label Studio JSON export"
    suffixes = (".json",)

    def recognises(self, head: FileHead) -> bool:
        """A list whose first task has `data` and `annotations`."""
        task = head.first_list_item
        return isinstance(task, dict) and "data" in task and "annotations" in task

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter | DiscardedRow]:
        return read_label_studio(source.path, rules, source.split)
