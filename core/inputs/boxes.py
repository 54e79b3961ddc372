"""Bounding boxes as the formats write them (relative vertices, pixels of a declared
size) -> Box, relative to the image's size as the Object Detection API's tools compute
it, or (dead-letter reason, message).

A rotated rectangle (CVAT's <box rotation>, Label Studio's rectanglelabels `rotation`) is
turned clockwise on the image (whose y axis points down) about a point its format names,
as the formats' own code turns it: CVAT's exporters make it the polygon of its corners
turned about the box's centre (cvat-ai/cvat, cvat/apps/dataset_manager/formats/
transformations.py, RotatedBoxesToPolygons, commit ad91d77f), Label Studio's YOLO OBB
export turns it about its top left corner, in pixels (HumanSignal/label-studio-converter,
label_studio_converter/utils.py, convert_annotation_to_yolo_obb, commit 9a3db497). The
Object Detection API's boxes are not rotated: the object's box is its corners' extent and
its mask their polygon (rotated_box), as YOLO OBB's corners and X-AnyLabeling's rotated
boxes are written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from image_tfrecords.core.imaging.masks import polygon_problem, rle_of, turned_mask
from image_tfrecords.core.inputs.rows import RowRules
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.choices import LeftOut
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import Box, ManifestRow, Mask

# A corner given relative to the image may lie this far outside it (a fraction of its
# side) and be clipped to it: what rounding gives at the image's edge, not a box outside.
_EDGE_TOLERANCE = 1e-3

# AutoML detection rows end in eight coordinate fields: x_min,y_min,,,x_max,y_max,, or
# the four vertices x_min,y_min,x_max,y_min,x_max,y_max,x_min,y_max.
VERTEX_FIELDS = 8


def parse_box(vertices: Sequence[str]) -> Box | tuple[str, str]:
    """AutoML's eight coordinate fields -> a Box, or (dead-letter reason, message).

    Two vertices (`x_min,y_min,,,x_max,y_max,,`) are taken as they are; four vertices
    give their bounding rectangle, whatever their order.
    """
    present = [bool(vertex) for vertex in vertices]
    if present == [True, True, False, False, True, True, False, False]:
        written = [vertices[0], vertices[1], vertices[4], vertices[5]]
    elif all(present) and len(vertices) == VERTEX_FIELDS:
        written = list(vertices)
    else:
        return (
            reasons.INVALID_BOX,
            "expected x_min,y_min,,,x_max,y_max,, or four x,y "
            f"vertices, found {','.join(vertices)!r}",
        )
    try:
        values = [float(value) for value in written]
    except ValueError:
        return reasons.INVALID_BOX, f"a coordinate is not a number: {','.join(written)!r}"
    if not all(0.0 <= value <= 1.0 for value in values):  # also false for NaN
        return (
            reasons.BOX_OUT_OF_RANGE,
            f"coordinates must be relative to the image size, between 0 and 1: {','.join(written)}",
        )
    if len(values) == 4:
        box = Box(*values)
    else:
        xs, ys = values[0::2], values[1::2]
        box = Box(min(xs), min(ys), max(xs), max(ys))
    if box.xmin >= box.xmax or box.ymin >= box.ymax:
        return (
            reasons.EMPTY_BOX,
            f"x_min must be below x_max and y_min below y_max: {','.join(written)}",
        )
    return box


def declared_size(
    width: object, height: object, max_pixels: int | None = None
) -> tuple[int, int] | tuple[str, str]:
    """The image size an annotation declares: (width, height) as positive integers, or
    (dead-letter reason, message). Where masks are drawn on it as the file is read
    (COCO's, CVAT's, LabelMe's), more than `max_pixels` (--max_image_pixels) is refused as
    the image itself would be, before any mask allocates it."""
    try:
        size = (int(str(width).strip()), int(str(height).strip()))
    except ValueError:
        size = (0, 0)
    if min(size) < 1:
        return (
            reasons.INVALID_SIZE,
            "the declared image width and height must be positive "
            f"whole numbers of pixels, found {width!r} x {height!r}",
        )
    if max_pixels is not None and size[0] * size[1] > max_pixels:
        return (
            reasons.DECOMPRESSION_BOMB,
            f"the declared image size {size[0]}x{size[1]} "
            f"exceeds the limit of {max_pixels} pixels (--max_image_pixels)",
        )
    return size


def pixel_box(
    corners: Sequence[object],
    size: tuple[int, int],
    difficult: int = 0,
    truncated: int = 0,
    is_crowd: int = 0,
    declared: bool = True,
) -> Box | tuple[str, str]:
    """x_min, y_min, x_max, y_max in pixels of the (width, height) the annotation
    declares (or, not `declared`, the image's own) -> a Box
    relative to that size (pixel / size, as the Object Detection API's generate_tfrecord.py,
    create_pascal_tf_record.py and create_coco_tf_record.py compute it), or
    (dead-letter reason, message)."""
    written = ",".join(map(str, corners))
    try:
        xmin, ymin, xmax, ymax = (float(value) for value in corners)
    except (TypeError, ValueError):
        return reasons.INVALID_BOX, f"a pixel coordinate is not a number: {written!r}"
    width, height = size
    if not (
        0 <= xmin <= width and 0 <= xmax <= width and 0 <= ymin <= height and 0 <= ymax <= height
    ):  # also false for NaN
        return (
            reasons.BOX_OUT_OF_RANGE,
            f"pixel coordinates {written} lie outside the "
            f"{'declared ' if declared else ''}{width}x{height} image",
        )
    if xmin >= xmax or ymin >= ymax:
        return (reasons.EMPTY_BOX, f"x_min must be below x_max and y_min below y_max: {written}")
    return Box(
        xmin / width, ymin / height, xmax / width, ymax / height, difficult, truncated, is_crowd
    )


def box_row(
    image: ManifestRow,
    label: str,
    has_box: bool,
    make_box: Callable[[], Box | tuple[str, str]],
    reject: Callable[..., DeadLetter],
) -> ManifestRow | DeadLetter:
    """One detection row: a labelled box, or with no label and no box an image without
    objects (a negative example). `make_box`: the Box, or (dead-letter reason, message)."""
    if not label and not has_box:
        return image
    if not label:
        return reject(
            reasons.MISSING_LABEL, "the box has no label", uri=image.uri, split=image.split
        )
    box = make_box()
    if not isinstance(box, Box):
        return reject(*box, uri=image.uri, split=image.split)
    return image._replace(labels=(label,), boxes=(box,))


def clipped_box(
    xmin: float, ymin: float, xmax: float, ymax: float, tolerance: float = _EDGE_TOLERANCE
) -> Box | tuple[str, str]:
    """Corners relative to the image -> a Box, clipped to it where they lie at most
    `tolerance` (a fraction of its side) outside it, or (dead-letter reason, message)."""
    corners = (xmin, ymin, xmax, ymax)
    if not all(-tolerance <= value <= 1 + tolerance for value in corners):
        return (
            reasons.BOX_OUT_OF_RANGE,
            "the box reaches outside the image by more than "
            f"{tolerance * 100:g}% of its side: corners "
            f"{', '.join(f'{value:.6g}' for value in corners)}",
        )
    xmin, ymin, xmax, ymax = on_image = tuple(min(max(value, 0.0), 1.0) for value in corners)
    if xmin >= xmax or ymin >= ymax:
        return reasons.EMPTY_BOX, "the box has no width or no height"
    return Box(xmin, ymin, xmax, ymax, clipped=on_image != corners)


def turned_corners(
    corners: tuple[float, float, float, float], degrees: float, pivot: tuple[float, float]
) -> list[tuple[float, float]]:
    """A rectangle's corners (x_min, y_min, x_max, y_max) turned `degrees` clockwise on the
    image (its y axis pointing down) about `pivot`: its top left, top right, bottom right
    and bottom left corners before the turn, where they lie after it."""
    xmin, ymin, xmax, ymax = corners
    cos, sin = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    px, py = pivot
    return [
        (px + cos * (x - px) - sin * (y - py), py + sin * (x - px) + cos * (y - py))
        for x, y in ((xmin, ymin), (xmax, ymin), (xmax, ymax), (xmin, ymax))
    ]


def rotated_box(
    corners: tuple[float, float, float, float],
    degrees: float,
    pivot: tuple[float, float],
    frame: tuple[float, float],
    rules: RowRules,
) -> Box | tuple[str, str]:
    """A rectangle (x_min, y_min, x_max, y_max in a frame of (width, height): Mask's)
    turned `degrees` clockwise about `pivot` -> the Box of its turned corners' extent,
    relative to the frame and clipped to it as clipped_box clips (box_out_of_range
    farther out), its mask the turned rectangle (None where --leave_out masks); or
    (dead-letter reason, message)."""
    if not math.isfinite(degrees):
        return reasons.INVALID_BOX, f"the rotation is not a number of degrees: {degrees}"
    points = turned_corners(corners, degrees, pivot)
    width, height = frame
    box = clipped_box(*extent([x / width for x, _ in points], [y / height for _, y in points]))
    return with_mask(box, polygon_mask([points], frame, rules))


def extent(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float, float]:
    """The box around points (a polygon's, as pycocotools and Ultralytics take it)."""
    return min(xs), min(ys), max(xs), max(ys)


def polygon_mask(
    polygons: Sequence[Sequence[tuple[float, float]]], frame: tuple[float, float], rules: RowRules
) -> Mask | tuple[str, str] | None:
    """An object's mask from its polygons (each [(x, y), ...] of 3 points or more, in a
    frame of (width, height): Mask's), None where --leave_out masks, or (dead-letter
    reason, message) for polygons that cannot be drawn (masks.polygon_problem)."""
    if LeftOut.MASKS in rules.leave_out:
        return None
    flat = tuple(tuple(value for point in polygon for value in point) for polygon in polygons)
    return polygon_problem(flat, frame) or Mask(*frame, flat)


def with_mask(
    box: Box | tuple[str, str], mask: Mask | tuple[str, str] | None
) -> Box | tuple[str, str]:
    """The box with its object's mask (a dead letter's reason and message, the box's or
    the mask's, as they are)."""
    if not isinstance(box, Box):
        return box
    return box._replace(mask=mask) if mask is None or isinstance(mask, Mask) else mask


def region_problem(
    region_size: tuple[float, float], size: tuple[int, int]
) -> tuple[str, str] | None:
    """Why a mask region (CVAT's <mask>, LabelMe's mask PNG) of (width, height) cannot lie
    on an image declared (width, height): larger than it (checked before its pixels are
    allocated); None where it can."""
    width, height = region_size
    if 0 < width <= size[0] and 0 < height <= size[1]:
        return None
    return (
        reasons.SIZE_MISMATCH,
        f"the mask is {width:g}x{height:g} pixels, which does "
        f"not fit the image declared {size[0]}x{size[1]}",
    )


def region_mask(
    region: np.ndarray, left: int, top: int, size: tuple[int, int], rules: RowRules
) -> Mask | None:
    """An object's mask given as the 0/1 pixels of a region whose top left corner is at
    (left, top) of an image of `size` (CVAT's and LabelMe's masks; region_problem checked),
    as an RLE of the whole image; None where --leave_out masks. What lies outside the
    image is cut off."""
    if LeftOut.MASKS in rules.leave_out:
        return None
    width, height = size
    whole = np.zeros((height, width), np.uint8)
    cut = region[max(0, -top) : height - top, max(0, -left) : width - left]
    whole[max(0, top) : max(0, top) + cut.shape[0], max(0, left) : max(0, left) + cut.shape[1]] = (
        cut
    )
    return rle_of(whole)


# Where the EXIF orientation's turn (Pillow's ImageOps.exif_transpose) takes a point
# (x, y) of the stored image, both relative: mirror, rotate or transpose.
_TURNS: dict[int, Callable[[float, float], tuple[float, float]]] = {
    2: lambda x, y: (1 - x, y),  # FLIP_LEFT_RIGHT
    3: lambda x, y: (1 - x, 1 - y),  # ROTATE_180
    4: lambda x, y: (x, 1 - y),  # FLIP_TOP_BOTTOM
    5: lambda x, y: (y, x),  # TRANSPOSE
    6: lambda x, y: (1 - y, x),  # ROTATE_270: a quarter turn clockwise
    7: lambda x, y: (1 - y, 1 - x),  # TRANSVERSE
    8: lambda x, y: (y, 1 - x),  # ROTATE_90: a quarter turn anticlockwise
}


def turned_box(box: Box, orientation: int) -> Box:
    """An object on the stored pixels, on the pixels turned upright by `orientation`: its
    box, its keypoints (those with a place) and its mask."""
    if orientation not in _TURNS:
        return box
    turn = _TURNS[orientation]
    (x0, y0), (x1, y1) = turn(box.xmin, box.ymin), turn(box.xmax, box.ymax)
    keypoints = box.keypoints
    if keypoints is not None:
        points = [
            turn(x, y) if flag else (x, y)
            for x, y, flag in zip(keypoints.xs, keypoints.ys, keypoints.visibility, strict=True)
        ]
        keypoints = keypoints._replace(
            xs=tuple(x for x, _ in points), ys=tuple(y for _, y in points)
        )
    return box._replace(
        xmin=min(x0, x1),
        ymin=min(y0, y1),
        xmax=max(x0, x1),
        ymax=max(y0, y1),
        keypoints=keypoints,
        mask=box.mask and turned_mask(box.mask, orientation, turn),
    )
