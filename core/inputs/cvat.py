"""CVAT's "CVAT for images 1.1" XML export (`annotations.xml`): one <image> element per
image (`name`, `width`, `height`, `subset`), holding <tag> (an image label) and shapes:
<box> (pixel corners xtl, ytl, xbr, ybr), <polygon> (`points="x,y;x,y;..."`), <mask>
(`left`, `top`, `width`, `height` and an RLE), and <polyline>, <points>, <ellipse>,
<cuboid>, <skeleton>, which are not boxes.

Rows: with --label_mode single or multi, one per image, its labels its tags (its shapes
are not read); with detection, one per shape (its tags are not read), boxes divided by
the image's declared size as the Object Detection API's converters do. A polygon's or a
mask's box is its extent, and its mask is written (a <mask>'s RLE runs over its region,
row by row, starting with background). A <polyline>, <points>, <ellipse>, <cuboid> or
<skeleton> is left out by itself (a discarded row, counted by shape in summary.json's
objects_left_out), its image written with its other objects; an image all of whose
shapes are left out is not written (it is not an image without objects). A <box> with a
`rotation` (degrees, clockwise about its centre) is the polygon of its turned corners, as
CVAT's exporters make it (cvat-ai/cvat, cvat/apps/dataset_manager/formats/
transformations.py, RotatedBoxesToPolygons, commit ad91d77f; datumaro's cvat_format
extractor, openvinotoolkit/datumaro datumaro/plugins/cvat_format/extractor.py at
026bc72f, reads xtl..ybr and does not turn them): its box their extent, clipped to the
image within 0.1% of its side (box_out_of_range farther out), its mask the polygon
(core/inputs/boxes.py, rotated_box). A shape of a kind not named here and a <track>
(CVAT for video) are dead letters naming them.
Splits: the image's `subset` (Train, Validation, Test; a project's export), else its
task's or job's (<meta><task|job><subset>: their exports say it once there), where it names one
(`default`: none), else --manifest SPLIT=PATH or a hashed one. A shape with an empty
`label` (a partial annotation) is left out by itself like the shapes above. Images:
`name`, relative to --image_dir, or to the XML's `images/` folder when there is one
(CVAT's export with images), else to its folder, and inside --image_dir or the XML's
folder (core/inputs/dataset_root.py). The file is streamed an <image> at a time
(iterparse). <meta>'s <labels> declare the classes (declared_labels).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator

import numpy as np

from image_tfrecords.core.inputs.boxes import (
    box_row,
    declared_size,
    extent,
    pixel_box,
    polygon_mask,
    region_mask,
    region_problem,
    rotated_box,
    with_mask,
)
from image_tfrecords.core.inputs.dataset_root import DatasetRoot, quoted
from image_tfrecords.core.inputs.input_format import DeclaredClasses, FileHead, InputFormat
from image_tfrecords.core.inputs.lines import open_manifest
from image_tfrecords.core.inputs.rows import (
    DiscardedRow,
    ImageEntries,
    ManifestError,
    RowRules,
    invalid_split,
    left_out,
    row_split,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import Box, ManifestRow
from image_tfrecords.core.storage import storage

_IMAGES = "images"  # where CVAT's export with images puts them, beside annotations.xml
_SUBSET_DEFAULT = "default"  # CVAT's subset of a task without one
# CVAT's shapes that are no box, mask or polygon: left out of the examples, object by object.
_LEFT_OUT = frozenset({"polyline", "points", "ellipse", "cuboid", "skeleton"})


def read_cvat(
    path: str, rules: RowRules, split: str | None
) -> Iterator[ManifestRow | DeadLetter | DiscardedRow]:
    """A row per image (classification) or shape (detection); `line` is the image's
    1-based position among the <image> elements (0 for a <track>), `raw` its element's
    XML without children, or the shape's."""
    root = DatasetRoot.of(path, rules)
    folder = _image_folder(root, rules)
    entries = ImageEntries()
    position = 0
    task_subset = ""
    try:
        with open_manifest(path) as file:
            for _, element in ElementTree.iterparse(file):
                if element.tag == "meta":
                    # A task's (or a job's) export says its subset once, here; a
                    # project's says each image's (its tasks' are under <project>).
                    task_subset = (
                        element.findtext("task/subset") or element.findtext("job/subset") or ""
                    ).strip()
                elif element.tag == "image":
                    position += 1
                    yield from _image_rows(
                        path, position, element, root, folder, rules, split, entries, task_subset
                    )
                    element.clear()
                elif element.tag == "track":
                    yield DeadLetter.in_file(
                        path,
                        reasons.UNSUPPORTED_ANNOTATION,
                        f"track {element.get('id')}: a video's track (CVAT for "
                        "video 1.1); export the task as CVAT for images 1.1",
                        raw=_xml(element),
                        split=split or "",
                    )
                    element.clear()
    except ElementTree.ParseError as error:
        raise ManifestError(f"{path}: cannot parse the XML: {error}") from error


def _image_rows(
    path: str,
    position: int,
    element: ElementTree.Element,
    root: DatasetRoot,
    folder: str,
    rules: RowRules,
    forced: str | None,
    entries: ImageEntries,
    task_subset: str,
) -> Iterator[ManifestRow | DeadLetter | DiscardedRow]:
    name = (element.get("name") or "").strip()
    raw = _xml(element)
    where = f"image {element.get('id', position)}: "
    subset = (element.get("subset") or "").strip() or task_subset
    written_split = "" if subset.lower() == _SUBSET_DEFAULT else subset
    split = row_split(written_split, name, rules, forced)
    if not name:
        yield DeadLetter.in_file(
            path,
            reasons.MISSING_URI,
            where + "the name is missing or empty",
            position=position,
            raw=raw,
            split=split or "",
        )
        return
    # CVAT turns an image upright when its task is made.
    image = ManifestRow(
        path,
        position,
        raw,
        split or "",
        root.resolve(name, folder),
        (),
        drawn_upright=True,
        listed_whole=True,
    )
    outside = root.outside(image.uri, f"{where}name {quoted(name)}")
    if outside:
        yield image.dead_letter(*outside)
        return
    if split is None:
        yield image.dead_letter(reasons.INVALID_SPLIT, where + invalid_split(written_split, forced))
        return
    repeated = entries.repeated(image, where.removesuffix(": "))
    if repeated:
        yield repeated
        return
    if not rules.detection:
        yield _tagged(image, where, element, rules)
        return
    size = declared_size(element.get("width"), element.get("height"), rules.max_pixels)
    if not isinstance(size[0], int):
        yield image.dead_letter(size[0], where + size[1])
        return
    image = image._replace(image_size=size)
    shapes = [child for child in element if child.tag != "tag"]
    if not shapes:
        yield image  # an image without objects
    for shape in shapes:
        yield _shape_row(image._replace(raw=_xml(shape)), where, shape, rules)


def _tagged(
    image: ManifestRow, where: str, element: ElementTree.Element, rules: RowRules
) -> ManifestRow | DeadLetter:
    labels = tuple(
        dict.fromkeys(
            label for tag in element.iter("tag") if (label := (tag.get("label") or "").strip())
        )
    )
    if not labels:
        shapes = any(child.tag != "tag" for child in element)
        return image.dead_letter(
            reasons.MISSING_LABEL,
            where
            + "no <tag> (an image label)"
            + ("; its shapes are boxes: pass --label_mode detection" if shapes else ""),
        )
    if len(labels) > 1 and rules.label_mode is LabelMode.SINGLE:
        return image.dead_letter(
            reasons.MULTIPLE_LABELS,
            f"{where}{len(labels)} tags; pass --label_mode multi to keep them all",
        )
    return image._replace(labels=labels)


def _shape_row(
    row: ManifestRow, where: str, shape: ElementTree.Element, rules: RowRules
) -> ManifestRow | DeadLetter | DiscardedRow:
    here = f"{where}<{shape.tag}>: "

    def reject(reason: str, message: str, **_: str) -> DeadLetter:
        return row.dead_letter(reason, here + message)

    if shape.tag in _LEFT_OUT:
        return left_out(row, shape.tag)
    if shape.tag not in ("box", "polygon", "mask"):
        return reject(reasons.UNSUPPORTED_ANNOTATION, f"a {shape.tag} is not a box")
    label = (shape.get("label") or "").strip()
    if not label:  # a partial annotation (datumaro's own CVAT sample has such shapes)
        return left_out(row, f"{shape.tag} without a label")
    try:
        make_box = _shape_box(row, shape, rules)
    except ValueError:
        return reject(reasons.INVALID_BOX, "a coordinate is not a number")
    if isinstance(make_box, tuple):
        return reject(*make_box)
    return box_row(row, label, True, make_box, reject)


def _shape_box(
    row: ManifestRow, shape: ElementTree.Element, rules: RowRules
) -> Callable[[], Box | tuple[str, str]] | tuple[str, str]:
    """How to make a <box>'s, <polygon>'s or <mask>'s Box (with its mask), or the
    (dead-letter reason, message) of a polygon or mask that makes none; ValueError for a
    coordinate that is not a number."""
    if shape.tag == "box":
        written = [shape.get(side) for side in ("xtl", "ytl", "xbr", "ybr")]
        degrees = float(shape.get("rotation") or 0)
        if not degrees % 360:
            return lambda: pixel_box(written, row.image_size)
        # CVAT turns a box about its centre.
        xmin, ymin, xmax, ymax = corners = tuple(float(value or "") for value in written)
        return lambda: rotated_box(
            corners, degrees, ((xmin + xmax) / 2, (ymin + ymax) / 2), row.image_size, rules
        )
    if shape.tag == "polygon":
        points = [
            tuple(map(float, point.split(",")))
            for point in (shape.get("points") or "").split(";")
            if point.strip()
        ]
        if len(points) < 3 or any(len(point) != 2 for point in points):
            return (
                reasons.INVALID_MASK,
                f"a polygon needs at least 3 points x,y, found {shape.get('points')!r}",
            )
        mask = polygon_mask([points], row.image_size, rules)
        return lambda: with_mask(
            pixel_box(extent([x for x, _ in points], [y for _, y in points]), row.image_size), mask
        )
    left, top, width, height = place = tuple(
        float(shape.get(key) or "nan") for key in ("left", "top", "width", "height")
    )
    if not all(map(math.isfinite, place)):
        raise ValueError(f"not a number: {place}")
    problem = region_problem((width, height), row.image_size)
    if problem:
        return problem
    region = _mask_region(shape.get("rle") or "", int(width), int(height))
    if region is None:
        return reasons.INVALID_MASK, f"its rle does not make a {width:g}x{height:g} mask"
    mask = region_mask(region, int(left), int(top), row.image_size, rules)
    return lambda: with_mask(
        pixel_box([left, top, left + width, top + height], row.image_size), mask
    )


def declared_labels(path: str) -> DeclaredClasses | None:
    """The <labels> of the file's <meta> (a task's, or a project's), in their order, as
    CVAT lists them and datumaro numbers them (its TF Object Detection API export gives
    label i the class id i + 1). A skeleton's points (labels with a <parent>) are not
    classes of their own. None where <meta> lists none; ManifestError for a name twice."""
    names = []
    try:
        with open_manifest(path) as file:
            for _, element in ElementTree.iterparse(file):
                if element.tag == "label" and element.find("parent") is None:
                    names.append((element.findtext("name") or "").strip())
                elif element.tag in ("meta", "image", "track"):
                    break  # <meta> comes first: past it, no label is declared
    except ElementTree.ParseError as error:
        raise ManifestError(f"{path}: cannot parse the XML: {error}") from error
    names = [name for name in names if name]
    return DeclaredClasses(f"{path} (<labels>)", tuple(names)) if names else None


def _mask_region(rle: str, width: int, height: int) -> np.ndarray | None:
    """CVAT's mask RLE: run lengths over its region row by row, starting with a run of
    background (0s) -> the region's 0/1 pixels, or None when they do not fill it."""
    try:
        counts = [int(count) for count in rle.split(",")]
    except ValueError:
        return None
    if min(counts, default=-1) < 0 or sum(counts) != width * height or not width * height:
        return None
    return np.repeat(np.arange(len(counts), dtype=np.uint8) % 2, counts).reshape(height, width)


def _image_folder(root: DatasetRoot, rules: RowRules) -> str:
    """What `name` is relative to: the root's `images/` where CVAT's export put them."""
    images = storage.join(root.folder, _IMAGES)
    if rules.image_dir is None and storage.match(storage.join(images, "*"), limit=1):
        return images
    return root.folder


def _xml(element: ElementTree.Element) -> str:
    """The element's tag and attributes, without its children or text."""
    return ElementTree.tostring(
        ElementTree.Element(element.tag, element.attrib), encoding="unicode"
    )


class CvatFormat(InputFormat):
    name = "cvat"
    title = "a CVAT for images 1.1 XML"
    suffixes = (".xml",)

    def recognises(self, head: FileHead) -> bool:
        return head.xml_root == "annotations"

    def declared_classes(self, source: ManifestSource) -> DeclaredClasses | None:
        return declared_labels(source.path)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter | DiscardedRow]:
        return read_cvat(source.path, rules, source.split)
