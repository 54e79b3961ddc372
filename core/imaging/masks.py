"""Instance masks and semantic segmentation maps, written as TensorFlow's own tools write
them.

Instance masks as the Object Detection API's `create_coco_tf_record --include_masks`
writes them: pycocotools makes each object's binary mask from its polygons or RLE, and
the mask is stored as a PNG of 0s and 1s (Pillow's mode L) at the size of the image as
written, one PNG per object in `image/object/mask`.

Polygons are drawn at the written size directly (scaled with any --max_side resize), so a
resized mask is as sharp as the image, an object's polygons merged into one RLE before
it is decoded (decoded apart, each would take a whole mask); an RLE is decoded at its
own size (the source image's) and resized with nearest neighbours. Where the image is
turned upright by its EXIF orientation, a mask drawn on its stored pixels is turned with
it (turned_mask). What an annotation declares is checked as it is read, before anything
is allocated (polygon_problem, MAX_KEYPOINTS; canvases and regions in inputs/boxes.py).

A segmentation map (one class index per pixel) as DeepLab's build_voc2012_data writes it:
`image/segmentation/class/encoded`, a PNG of the indices (mode L: a palette PNG's indices,
not its colours, as DeepLab's remove_gt_colormap keeps them), at the written size
(nearest neighbour), turned with the image where it was drawn on its stored pixels.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from PIL import Image
from pycocotools import mask as coco_mask

from image_tfrecords.core.imaging.images import ImageRejected, PreparedImage, open_image
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.records import Box, Mask

# pycocotools draws a polygon by walking its outline at 5 times the image's resolution
# (rleFrPoly), some 50 bytes per pixel of outline: an object's polygons may together be
# at most this many times the image's longer side long (5 MB drawn on a 1000 x 1000
# image, 45 MB at --max_image_pixels' default; a detailed outline is a few sides long).
MAX_OUTLINE_SIDES = 100
# A polygon's point may lie this far outside the image (a fraction of its side, past
# which pycocotools clips): farther, it is no outline of this image.
POLYGON_MARGIN = 1.0
# The keypoints an object may have (COCO's person 17, COCO-WholeBody 133, MediaPipe's face
# mesh 478): every object of an example is padded to the most any of them has.
MAX_KEYPOINTS = 1000
# The points of one example, its objects x the most keypoints any has: one object of 1,000
# points among 30,000 of none padded them all to 1,000 (2.4 MB of JSON -> over 2 GB).
MAX_PADDED_KEYPOINTS = 100 * MAX_KEYPOINTS

# Pillow's transpose for each EXIF orientation, as ImageOps.exif_transpose turns an image.
_TRANSPOSES = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def mask_png(mask: Mask, width: int, height: int) -> bytes:
    """The object's mask at width x height pixels, as a PNG of 0s and 1s."""
    return _png(mask_pixels(mask, width, height))


def mask_pixels(mask: Mask, width: int, height: int) -> np.ndarray:
    """The object's mask at width x height pixels: 0s and 1s, height x width (uint8)."""
    if mask.counts is None:
        scale_x, scale_y = width / mask.width, height / mask.height
        polygons = [
            [
                value * (scale_x if place % 2 == 0 else scale_y)
                for place, value in enumerate(polygon)
            ]
            for polygon in mask.polygons
        ]
        binary = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(polygons, height, width)))
    else:
        binary = decode_rle(mask)
        if binary.shape != (height, width):
            binary = np.asarray(
                Image.fromarray(binary).resize((width, height), Image.Resampling.NEAREST)
            )
    return binary


def polygon_problem(
    polygons: Sequence[Sequence[float]], frame: tuple[float, float]
) -> tuple[str, str] | None:
    """Why an object's polygons (each x0, y0, x1, y1, ... in a frame of (width, height):
    Mask's) cannot be drawn in memory that follows the image: a coordinate that is no
    number, a point farther outside the image than POLYGON_MARGIN, or outlines longer
    together than MAX_OUTLINE_SIDES sides of the image; (dead-letter reason, message),
    or None where they can. Checked as the annotation is read, before pycocotools."""
    width, height = frame
    outline = 0.0
    for polygon in polygons:
        xs = np.asarray(polygon[0::2], dtype=float) / width
        ys = np.asarray(polygon[1::2], dtype=float) / height
        if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
            return reasons.INVALID_MASK, "a polygon's coordinate is not a number"
        if (
            min(xs.min(), ys.min()) < -POLYGON_MARGIN
            or max(xs.max(), ys.max()) > 1 + POLYGON_MARGIN
        ):
            return (
                reasons.INVALID_MASK,
                "a polygon's point lies farther outside the image "
                "than the image's own width or height",
            )
        # In steps of the longer side, as pycocotools walks each edge (the closing one too).
        outline += np.maximum(
            np.abs(np.diff(xs, append=xs[0])), np.abs(np.diff(ys, append=ys[0]))
        ).sum()
    if outline > MAX_OUTLINE_SIDES:
        return (
            reasons.INVALID_MASK,
            f"the object's polygons are {outline:.0f} times the "
            f"image's side long, more than the {MAX_OUTLINE_SIDES} a mask may draw",
        )
    return None


def decode_rle(mask: Mask) -> np.ndarray:
    """An RLE mask's 0/1 pixels, height x width (uint8); ValueError when its counts do
    not make a mask of its size."""
    height, width = int(mask.height), int(mask.width)
    if isinstance(mask.counts, str):
        rle = {"size": [height, width], "counts": mask.counts.encode()}
    else:
        if sum(mask.counts) != height * width:
            raise ValueError(
                f"its run lengths add up to {sum(mask.counts)} pixels, not {width}x{height}"
            )
        rle = coco_mask.frPyObjects(
            {"size": [height, width], "counts": list(mask.counts)}, height, width
        )
    return coco_mask.decode(rle)


def rle_of(binary: np.ndarray) -> Mask:
    """0/1 pixels (height x width) -> a Mask holding their compressed COCO RLE."""
    rle = coco_mask.encode(np.asfortranarray(binary.astype(np.uint8)))
    height, width = binary.shape
    return Mask(width, height, counts=rle["counts"].decode())


def turned_mask(mask: Mask, orientation: int, turn_point) -> Mask:
    """A mask drawn on the stored pixels, on the pixels turned upright by `orientation`:
    polygons point by point (`turn_point`, on coordinates relative to the image), an RLE
    decoded, turned as Pillow turns the image, and encoded again."""
    if orientation not in _TRANSPOSES:
        return mask
    if mask.counts is not None:
        turned = Image.fromarray(decode_rle(mask)).transpose(_TRANSPOSES[orientation])
        return rle_of(np.asarray(turned))
    polygons = []
    for polygon in mask.polygons:
        points = [
            turn_point(x / mask.width, y / mask.height)
            for x, y in zip(polygon[0::2], polygon[1::2], strict=True)
        ]
        polygons.append(tuple(value for point in points for value in point))
    return Mask(1.0, 1.0, tuple(polygons))


def box_mask(box: Box) -> Mask:
    """The mask of an object given by its box alone: the box, filled."""
    return Mask(
        1.0,
        1.0,
        ((box.xmin, box.ymin, box.xmax, box.ymin, box.xmax, box.ymax, box.xmin, box.ymax),),
    )


# Formats whose pixels are the values written: a JPEG's are not exact class indices.
_LOSSLESS = ("PNG", "BMP", "TIFF", "GIF")
_INDEX_MODES = ("P", "L", "1")
_COLOUR_MODES = ("RGB", "RGBA")  # a map drawn in its classes' colours (labelmap.txt's)


def class_map_png(
    data: bytes,
    image: PreparedImage,
    colours: Sequence[tuple[int, int, int]] | None = None,
) -> bytes:
    """The segmentation map in `data` for `image` (as prepared), as the PNG to store;
    ImageRejected (invalid_mask, size_mismatch) saying why it cannot be one. `colours`:
    the RGB colour of each class index, index 0 first, where the map is drawn in them
    (CVAT's VOC export); else its pixels are the indices."""
    try:
        with open_image(data) as source:
            source.load()
            kind, mode, size = source.format, source.mode, source.size
            drawn_in_colours = colours is not None and mode in _COLOUR_MODES
            if drawn_in_colours:
                pixels = np.asarray(source.convert("RGB"))
            else:
                pixels = np.asarray(source.convert("L") if mode == "1" else source)
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        raise ImageRejected(reasons.INVALID_MASK, f"it is not an image: {error}") from None
    if kind not in _LOSSLESS:
        raise ImageRejected(
            reasons.INVALID_MASK,
            f"it is a {kind}, whose pixels are not exact class indices: give a PNG",
        )
    if drawn_in_colours:
        indices = _indices_of_colours(pixels, colours)
    elif mode not in _INDEX_MODES:
        raise ImageRejected(
            reasons.INVALID_MASK,
            f"its pixels are {mode}, not class indices: give a palette or greyscale PNG",
        )
    else:
        indices = pixels
    stored, upright = image.source_size, image.upright_source_size
    if size not in (stored, upright):
        raise ImageRejected(
            reasons.SIZE_MISMATCH,
            f"it is {size[0]}x{size[1]} but the image is {upright[0]}x{upright[1]}",
        )
    result = Image.fromarray(indices.astype(np.uint8))
    if size == stored and image.turned in _TRANSPOSES:  # drawn on the stored pixels
        result = result.transpose(_TRANSPOSES[image.turned])
    if result.size != (image.width, image.height):
        result = result.resize((image.width, image.height), Image.Resampling.NEAREST)
    out = io.BytesIO()
    result.save(out, format="PNG")
    return out.getvalue()


def _indices_of_colours(pixels: np.ndarray, colours: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """An RGB map's class indices: each pixel the index of its colour; ImageRejected
    naming a colour no class has (a map drawn with another labelmap)."""
    packed = (pixels[..., 0].astype(np.uint32) << 16) | (pixels[..., 1].astype(np.uint32) << 8)
    packed |= pixels[..., 2]
    table = np.array([(r << 16) | (g << 8) | b for r, g, b in colours], dtype=np.uint32)
    order = np.argsort(table, kind="stable")
    at = np.clip(np.searchsorted(table[order], packed), 0, len(table) - 1)
    found = table[order][at] == packed
    if not found.all():
        stray = int(packed[~found][0])
        raise ImageRejected(
            reasons.INVALID_MASK,
            f"its colour {stray >> 16},{stray >> 8 & 255},{stray & 255} is no class's "
            "in labelmap.txt",
        )
    return order[at].astype(np.uint8)


def _png(binary: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(binary).save(out, format="PNG")
    return out.getvalue()
