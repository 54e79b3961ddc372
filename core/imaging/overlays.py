"""Objects drawn over their image, the way a person checks annotations: each object's mask
tinted, its box outlined and its keypoints dotted, in one colour per class id, with its
label where there is room. report.html's thumbnails of detection examples are drawn here
(in the shard writer, from the rows), and so are `inspect`'s overlays (from the examples).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageDraw

from image_tfrecords.core.imaging.images import THUMBNAIL_QUALITY, open_image
from image_tfrecords.core.imaging.masks import box_mask, mask_pixels
from image_tfrecords.core.records.records import Box

COLOURS = (
    (230, 25, 75),
    (60, 180, 75),
    (67, 99, 216),
    (245, 130, 49),
    (145, 30, 180),
    (66, 212, 244),
    (240, 50, 230),
)
_MASK_ALPHA = 110  # of 255: the image shows through the tint


class DrawnObject(NamedTuple):
    corners: tuple[float, float, float, float]  # xmin, ymin, xmax, ymax, relative
    label_id: int
    text: str = ""
    mask: np.ndarray | None = None  # 0/1 pixels, stretched to the image's size
    keypoints: Sequence[tuple[float, float, int]] = ()  # x, y relative; visibility


def draw_objects(
    image: Image.Image, objects: Iterable[DrawnObject], captions: bool = True
) -> Image.Image:
    """A copy of `image` (RGB) with the objects drawn over it."""
    objects = list(objects)
    canvas = image.convert("RGBA")
    tint = Image.new("RGBA", canvas.size)
    for drawn in objects:
        if drawn.mask is not None and drawn.mask.any():
            where = Image.fromarray(drawn.mask.astype(np.uint8) * 255).resize(
                canvas.size, Image.Resampling.NEAREST
            )
            tint.paste((*_colour(drawn), _MASK_ALPHA), mask=where)
    canvas = Image.alpha_composite(canvas, tint).convert("RGB")
    draw = ImageDraw.Draw(canvas)
    width, height = canvas.size
    # Pixel edges run from 0 to size - 1: a box reaching 1.0 ends on the last pixel.
    scale = (width - 1, height - 1)
    line = max(1, round(max(width, height) / 200))
    for drawn in objects:
        colour = _colour(drawn)
        xmin, ymin, xmax, ymax = drawn.corners
        corner = (xmin * scale[0], ymin * scale[1])
        draw.rectangle([corner, (xmax * scale[0], ymax * scale[1])], outline=colour, width=line)
        radius = max(2.5, max(width, height) / 60)
        for x, y, visibility in drawn.keypoints:
            if visibility:  # 2 visible: filled; 1 labelled but hidden: a ring
                centre = (x * scale[0], y * scale[1])
                draw.ellipse(
                    [
                        centre[0] - radius,
                        centre[1] - radius,
                        centre[0] + radius,
                        centre[1] + radius,
                    ],
                    outline="white",
                    fill=colour if visibility == 2 else None,
                )
        if captions and drawn.text:
            draw.rectangle(draw.textbbox(corner, drawn.text), fill=colour)
            draw.text(corner, drawn.text, fill="white")
    return canvas


def drawn_thumbnail(thumbnail: bytes, boxes: Sequence[Box], label_ids: Sequence[int]) -> bytes:
    """report.html's thumbnail (a JPEG) with the example's objects drawn over it; an
    object without a mask, in an example where others have one, is tinted as its box."""
    with open_image(thumbnail) as image:
        width, height = image.size
        masks = any(box.mask for box in boxes)
        drawn = draw_objects(
            image,
            (
                DrawnObject(
                    tuple(box[:4]),
                    label_id,
                    mask=mask_pixels(box.mask or box_mask(box), width, height) if masks else None,
                    keypoints=tuple(
                        zip(box.keypoints.xs, box.keypoints.ys, box.keypoints.visibility)
                    )
                    if box.keypoints
                    else (),
                )
                for box, label_id in zip(boxes, label_ids, strict=True)
            ),
            captions=False,
        )
    out = io.BytesIO()
    drawn.save(out, "JPEG", quality=THUMBNAIL_QUALITY)
    return out.getvalue()


def _colour(drawn: DrawnObject) -> tuple[int, int, int]:
    return COLOURS[drawn.label_id % len(COLOURS)]
