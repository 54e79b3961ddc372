"""Makes a benchmark image set: crops of real photos, or distinct drawn scenes.

--kind crops (the default): from the real photos shipped inside the scikit-image wheel.
Each source photo is one class; every image is a random crop of it, rescaled, maybe
flipped and saved as an RGB JPEG, so sizes and JPEG settings vary like a real photo set.
Crops of one photo overlap, so more than half the images are near-copies of another to
pHash: a set as clustered as a dataset gets.
--kind scenes: every image is its own drawn scene (a gradient, shapes, blur and grain),
of the same sizes and JPEG settings, and one in NEAR_COPY_EVERY is a near-copy of the
image before it (resized to 80% and recompressed), as copies are in a public dataset.
--kind tiny: every image is TINY_SIDE pixels square, random noise: a set whose image work
is negligible, for the ceiling of what the pipeline's own process can handle.
Writes DIR/images/<class>/<class>_<i>.jpg and DIR/manifest.csv (`SPLIT,uri,label`, no
header, URIs relative to DIR); with --rows M also DIR/manifest_M.csv, whose M rows cycle
through the images, each pass under its own name (DIR/copies/K, a link to DIR), since the
same URI twice in a split is one example. The output is the same for the same --seed
and --images.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
from collections.abc import Callable
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from skimage import data

# Colour photos that load offline from the scikit-image wheel (scikit-learn's sample
# images would need scikit-learn, which the project venv does not have).
SOURCES: dict[str, Callable[[], np.ndarray]] = {
    "astronaut": data.astronaut,
    "cat": data.chelsea,
    "coffee": data.coffee,
    "rocket": data.rocket,
    "motorcycle": lambda: data.stereo_motorcycle()[0],
    "galaxy": data.hubble_deep_field,
}
CLASSES = list(SOURCES)
MIN_CROP = 0.4  # smallest crop side, as a fraction of the photo's side
LONG_SIDE = (320, 800)  # inclusive range of the output's longer side, px
QUALITY = (80, 95)  # inclusive JPEG quality range
SPLITS = (("TRAIN", 0.8), ("VALIDATION", 0.1), ("TEST", 0.1))
NEAR_COPY_EVERY = 50  # --kind scenes: image i is a near-copy of i - 1 when i % 50 == 49
TINY_SIDE = 16  # --kind tiny: px

_photos: dict[str, Image.Image] = {}


def _load_photos() -> None:
    """Pool initializer: each worker decodes the source photos once."""
    _photos.update({name: Image.fromarray(load()).convert("RGB") for name, load in SOURCES.items()})


def image_path(index: int) -> str:
    """The image's URI relative to the dataset folder."""
    label = CLASSES[index % len(CLASSES)]
    return f"images/{label}/{label}_{index:05d}.jpg"


def make_image(task: tuple[Path, str, int, int]) -> int:
    """Writes image `index` and returns its size in bytes."""
    out, kind, seed, index = task
    # A generator per image, so the result does not depend on which worker draws it.
    rng = np.random.default_rng((seed, index))
    if kind == "scenes":
        return _save(out, index, _scene_or_copy(seed, index), rng)
    if kind == "tiny":
        noise = rng.integers(0, 256, (TINY_SIDE, TINY_SIDE, 3), dtype=np.uint8)
        return _save(out, index, Image.fromarray(noise), rng)
    photo = _photos[CLASSES[index % len(CLASSES)]]
    crop_w, crop_h = (round(side * rng.uniform(MIN_CROP, 1.0)) for side in photo.size)
    left = int(rng.integers(0, photo.width - crop_w + 1))
    top = int(rng.integers(0, photo.height - crop_h + 1))
    scale = int(rng.integers(LONG_SIDE[0], LONG_SIDE[1] + 1)) / max(crop_w, crop_h)
    image = photo.resize(
        (round(crop_w * scale), round(crop_h * scale)),
        Image.LANCZOS,
        box=(left, top, left + crop_w, top + crop_h),
    )
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    return _save(out, index, image, rng)


def _save(out: Path, index: int, image: Image.Image, rng: np.random.Generator) -> int:
    path = out / image_path(index)
    image.save(path, "JPEG", quality=int(rng.integers(QUALITY[0], QUALITY[1] + 1)))
    return path.stat().st_size


def _scene_or_copy(seed: int, index: int) -> Image.Image:
    if index % NEAR_COPY_EVERY != NEAR_COPY_EVERY - 1:
        return _scene(np.random.default_rng((seed, index, 1)))
    original = _scene(np.random.default_rng((seed, index - 1, 1)))
    smaller = original.resize((original.width * 4 // 5, original.height * 4 // 5), Image.LANCZOS)
    buffer = io.BytesIO()
    smaller.save(buffer, "JPEG", quality=70)
    return Image.open(buffer)


def _scene(rng: np.random.Generator) -> Image.Image:
    """A distinct picture per generator: a gradient sky, shapes of random colours, blur
    and grain, its longer side in LONG_SIDE."""
    long_side = int(rng.integers(LONG_SIDE[0], LONG_SIDE[1] + 1))
    width, height = long_side, round(long_side * rng.uniform(0.6, 1.0))
    if rng.random() < 0.3:
        width, height = height, width
    top, bottom = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    ramp = np.linspace(0, 1, height)[:, None, None]
    pixels = np.broadcast_to(top + (bottom - top) * ramp, (height, width, 3))
    image = Image.fromarray(pixels.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(6, 16))):
        xs, ys = sorted(rng.integers(0, width, 2)), sorted(rng.integers(0, height, 2))
        shape = (int(xs[0]), int(ys[0]), int(xs[1]) + 8, int(ys[1]) + 8)
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(shape, fill=fill)
    image = image.filter(ImageFilter.GaussianBlur(1.5))
    grain = rng.normal(0, 6, (height, width, 3))
    return Image.fromarray(np.clip(np.asarray(image) + grain, 0, 255).astype(np.uint8))


def assign_splits(count: int, seed: int) -> list[str]:
    """80/10/10 TRAIN/VALIDATION/TEST over a seeded shuffle of the indices."""
    order = np.random.default_rng(seed).permutation(count)
    splits = [""] * count
    start = 0.0
    for split, share in SPLITS:
        end = start + share * count
        for index in order[round(start) : round(end)]:
            splits[index] = split
        start = end
    return splits


def write_manifest(path: Path, splits: list[str], rows: int) -> None:
    """Row j is image j mod N with that image's split, so every split keeps its share;
    pass K > 0 over the images names them through DIR/copies/K."""
    passes = -(-rows // len(splits))
    for copy in range(1, passes):
        link = path.parent / "copies" / str(copy)
        link.parent.mkdir(exist_ok=True)
        if not link.is_symlink():
            link.symlink_to("..", target_is_directory=True)
    with path.open("w", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        for row in range(rows):
            index, copy = row % len(splits), row // len(splits)
            prefix = f"copies/{copy}/" if copy else ""
            writer.writerow(
                [splits[index], prefix + image_path(index), CLASSES[index % len(CLASSES)]]
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="dataset folder")
    parser.add_argument("--images", type=int, required=True, help="number of images")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--kind",
        choices=("crops", "scenes", "tiny"),
        default="crops",
        help="crops of six photos (default), distinct drawn scenes, or tiny noise images",
    )
    parser.add_argument("--rows", type=int, help="also write manifest_ROWS.csv (ROWS > images)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes")
    args = parser.parse_args()
    if args.images < len(CLASSES):
        parser.error(f"--images must be at least {len(CLASSES)} (one per class)")
    if args.rows is not None and args.rows <= args.images:
        parser.error("--rows must be larger than --images")

    # Stale images of an earlier, larger set would otherwise stay next to the new ones.
    shutil.rmtree(args.out / "images", ignore_errors=True)
    for label in CLASSES:
        (args.out / "images" / label).mkdir(parents=True)
    tasks = [(args.out, args.kind, args.seed, index) for index in range(args.images)]
    with Pool(args.processes, initializer=_load_photos) as pool:
        source_bytes = sum(pool.imap_unordered(make_image, tasks, chunksize=64))

    splits = assign_splits(args.images, args.seed)
    write_manifest(args.out / "manifest.csv", splits, args.images)
    print(
        f"{args.images} images in {len(CLASSES)} classes, {source_bytes} source bytes "
        f"({source_bytes / 1e6:.1f} MB): {args.out / 'manifest.csv'}"
    )
    if args.rows is not None:
        write_manifest(args.out / f"manifest_{args.rows}.csv", splits, args.rows)
        print(f"{args.rows} rows cycling the images: {args.out / f'manifest_{args.rows}.csv'}")


if __name__ == "__main__":
    main()
