"""Precision and recall of --near_duplicate_distance, on planted copies among distinct photos.

The distinct photos are the real ones in the scikit-image wheel, each whole and as its
four quadrants (scaled back to the photo's size): 110 images, 5,995 pairs that are not
copies. Each gets seven planted copies, made the way copies reach public datasets.
Hashes are the pipeline's own: image_tfrecords.core.imaging.images.prepare_image on the
encoded bytes.
Prints a Markdown table: for each distance, the distinct pairs within it (false
pairs), and the share of each kind of copy found (recall).

    .venv/bin/python bench/near_duplicate_threshold.py   (after `make bench`'s install)
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageEnhance
from skimage import data

from image_tfrecords.core.imaging.images import prepare_image
from image_tfrecords.core.records.image_settings import ImageSettings

# Every photo the scikit-image wheel carries (none is fetched): greys, colour, textures,
# microscopy, astronomy, text. data.cat is data.chelsea, so it is left out.
PHOTOS = (
    "astronaut",
    "brick",
    "camera",
    "cell",
    "chelsea",
    "clock",
    "coffee",
    "coins",
    "colorwheel",
    "grass",
    "gravel",
    "horse",
    "hubble_deep_field",
    "immunohistochemistry",
    "logo",
    "microaneurysms",
    "moon",
    "page",
    "retina",
    "rocket",
    "text",
)


def _photo(name: str) -> Image.Image:
    pixels = getattr(data, name)()
    if pixels.dtype != np.uint8:  # the binary horse
        pixels = (pixels * 255).astype(np.uint8)
    return Image.fromarray(pixels).convert("RGB")


def distinct_images() -> dict[str, Image.Image]:
    photos = {name: _photo(name) for name in PHOTOS}
    photos["motorcycle"] = Image.fromarray(data.stereo_motorcycle()[0])
    found = {}
    for name, photo in photos.items():
        found[name] = photo
        width, height = photo.size
        for index, (left, top) in enumerate(
            ((0, 0), (width // 2, 0), (0, height // 2), (width // 2, height // 2))
        ):
            quadrant = photo.crop((left, top, left + width // 2, top + height // 2))
            found[f"{name}_q{index}"] = quadrant.resize(photo.size, Image.LANCZOS)
    return found


def _encoded(image: Image.Image, fmt: str = "JPEG", **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def _cropped(image: Image.Image, fraction: float) -> Image.Image:
    dx, dy = round(image.width * fraction), round(image.height * fraction)
    return image.crop((dx, dy, image.width - dx, image.height - dy))


COPIES: dict[str, Callable[[Image.Image], bytes]] = {
    "resized to half": lambda im: _encoded(
        im.resize((im.width // 2, im.height // 2), Image.LANCZOS), quality=90
    ),
    "recompressed (JPEG q50)": lambda im: _encoded(im, quality=50),
    "re-saved as PNG": lambda im: _encoded(im, "PNG"),
    "cropped 3% a side": lambda im: _encoded(_cropped(im, 0.03), quality=90),
    "cropped 5% a side": lambda im: _encoded(_cropped(im, 0.05), quality=90),
    "brightness +15%": lambda im: _encoded(ImageEnhance.Brightness(im).enhance(1.15), quality=90),
    "brightness -15%": lambda im: _encoded(ImageEnhance.Brightness(im).enhance(0.85), quality=90),
}


def _hash(encoded: bytes) -> int:
    return prepare_image(encoded, ImageSettings()).perceptual_hash


def _distance(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def main() -> None:
    images = distinct_images()
    hashes = {name: _hash(_encoded(image, quality=90)) for name, image in images.items()}
    distinct = [_distance(hashes[a], hashes[b]) for a, b in itertools.combinations(hashes, 2)]
    planted = {
        kind: [_distance(hashes[name], _hash(make(image))) for name, image in images.items()]
        for kind, make in COPIES.items()
    }
    print(
        f"{len(images)} distinct images, {len(distinct)} distinct pairs, "
        f"{len(images)} copies of each kind\n"
    )
    print("| distance | false pairs | precision | " + " | ".join(COPIES) + " | recall |")
    print("|" + "---|" * (len(COPIES) + 4))
    for threshold in range(0, 21, 2):
        false_pairs = sum(d <= threshold for d in distinct)
        found = {kind: sum(d <= threshold for d in ds) for kind, ds in planted.items()}
        true_pairs = sum(found.values())
        precision = true_pairs / (true_pairs + false_pairs) if true_pairs else 1.0
        recall = true_pairs / sum(map(len, planted.values()))
        print(
            f"| {threshold} | {false_pairs} | {precision:.3f} | "
            + " | ".join(f"{found[kind] / len(images):.2f}" for kind in COPIES)
            + f" | {recall:.3f} |"
        )


if __name__ == "__main__":
    main()
