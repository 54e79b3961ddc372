"""Regenerate the bundled sample data set (sample_data/) used by `make demo`.

The images are random crops of real photographs that ship inside the
scikit-image and scikit-learn wheels (no download needed).  Those two
packages are NOT runtime dependencies of image-tfrecords; install them in a
throw-away environment to run this script:

    python3 -m venv /tmp/skvenv
    /tmp/skvenv/bin/pip install scikit-image scikit-learn pillow numpy
    /tmp/skvenv/bin/python sample_data/make_sample.py

It rewrites sample_data/images/, sample_data/broken/ and
sample_data/manifest.csv (README.md is hand-written).  The output is
deterministic for a given Pillow version (fixed random seed).
"""

import csv
import io
import shutil
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps
from skimage import data as skdata
from sklearn.datasets import load_sample_image

SEED = 20240601
HERE = Path(__file__).resolve().parent
PER_CLASS = 14  # 01-10 train, 11-12 validation, 13-14 test

# One source photograph per class (plus one for the "unseen label" row).
SOURCES = {
    "cat": skdata.chelsea,  # CC0, Stefan van der Walt
    "coffee": skdata.coffee,  # CC0, Rachel Michetti
    "flower": lambda: load_sample_image("flower.jpg"),  # CC BY 2.0, Flickr
    "bird": skdata.rocket,  # public domain, SpaceX
}

# (label, index) -> special format.  Everything else is an RGB JPEG.
SPECIAL = {
    ("cat", 2): "png",
    ("cat", 5): "cmyk_jpg",
    ("cat", 11): "gif",
    ("cat", 13): "rgba_png",
    ("coffee", 3): "gray_png",
    ("coffee", 6): "bmp",
    ("coffee", 9): "png",
    ("coffee", 12): "exif6_jpg",
    ("coffee", 14): "webp",
    ("flower", 4): "tiff",
    ("flower", 7): "gray_jpg",
    ("flower", 11): "unicode_jpg",
    ("flower", 13): "png",
}
EXT = {
    "png": "png",
    "rgba_png": "png",
    "gray_png": "png",
    "gif": "gif",
    "tiff": "tiff",
    "bmp": "bmp",
    "webp": "webp",
}
SPLIT_SPELLINGS = {
    "train": ["TRAIN", "train", "Train"],
    "validation": ["VALIDATION", "validation", "Validation"],
    "test": ["TEST", "test", "Test"],
}

rng = np.random.default_rng(SEED)


def random_crop(photo, small=False):
    """Random crop (50-90% of each side, so it always holds the photo's
    centre; aspect within ~20% of the photo's) rescaled to a random long
    side in 96-224 px (96-128 if small)."""
    h, w = photo.shape[:2]
    fh = rng.uniform(0.5, 0.9)
    fw = np.clip(fh * rng.uniform(0.8, 1.25), 0.5, 0.9)
    cw, ch = int(w * fw), int(h * fh)
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    img = Image.fromarray(photo[y0 : y0 + ch, x0 : x0 + cw])
    long_side = int(rng.integers(96, 129 if small else 225))
    scale = long_side / max(cw, ch)
    return img.resize((round(cw * scale), round(ch * scale)), Image.LANCZOS)


def jpeg_quality():
    return int(rng.integers(85, 93))


def save(img, kind, path):
    """Write `img` (RGB) to `path` in the format named by `kind`."""
    if kind in ("jpg", "unicode_jpg"):
        img.save(path, quality=jpeg_quality())
    elif kind == "gray_jpg":
        img.convert("L").save(path, quality=jpeg_quality())
    elif kind == "cmyk_jpg":
        img.convert("CMYK").save(path, quality=jpeg_quality())
    elif kind == "exif6_jpg":
        # Store the pixels rotated 90 deg counter-clockwise and tag
        # Orientation=6 ("rotate 90 CW to view"): exif_transpose() gives
        # back the upright crop.
        exif = Image.Exif()
        exif[0x0112] = 6
        img.transpose(Image.Transpose.ROTATE_90).save(path, quality=jpeg_quality(), exif=exif)
    elif kind == "png":
        img.save(path, optimize=True)
    elif kind == "gray_png":
        img.convert("L").save(path, optimize=True)
    elif kind == "rgba_png":
        # Alpha: a radial vignette, opaque in the middle, see-through corners.
        w, h = img.size
        yy, xx = np.mgrid[0:h, 0:w]
        r = np.hypot((xx - w / 2) / (w / 2), (yy - h / 2) / (h / 2))
        alpha = np.clip(255 * (1.3 - r), 0, 255).astype(np.uint8)
        rgba = img.copy()
        rgba.putalpha(Image.fromarray(alpha))
        rgba.save(path, optimize=True)
    elif kind == "gif":
        img.quantize(colors=128, dither=Image.Dither.NONE).save(path)
    elif kind == "tiff":
        img.save(path, compression="tiff_adobe_deflate")
    elif kind == "bmp":
        img.save(path)
    elif kind == "webp":
        img.save(path, quality=80, method=6)
    else:
        raise ValueError(kind)


def split_of(index):
    return "train" if index <= 10 else "validation" if index <= 12 else "test"


def spelled(split):
    return str(rng.choice(SPLIT_SPELLINGS[split]))


def main():
    for sub in ("images", "broken"):
        shutil.rmtree(HERE / sub, ignore_errors=True)
    photos = {label: load() for label, load in SOURCES.items()}

    def write_image(label, index, kind="jpg", small=False):
        folder = HERE / "images" / label
        folder.mkdir(parents=True, exist_ok=True)
        if kind == "unicode_jpg":
            name = "fleur, été 01.jpg"  # comma, space, non-ASCII (NFC)
        else:
            name = f"{label}_{index:02d}.{EXT.get(kind, 'jpg')}"
        save(random_crop(photos[label], small), kind, folder / name)
        return f"images/{label}/{name}"

    # Good rows: 14 crops per class.  Lossless formats are kept small.
    good = []
    for label in ("cat", "coffee", "flower"):
        for index in range(1, PER_CLASS + 1):
            kind = SPECIAL.get((label, index), "jpg")
            small = kind in ("png", "rgba_png", "gray_png", "tiff", "bmp")
            uri = write_image(label, index, kind, small)
            good.append([spelled(split_of(index)), uri, label])

    # Files for the broken rows.
    broken = HERE / "broken"
    broken.mkdir()
    buf = io.BytesIO()
    random_crop(photos["cat"]).save(buf, format="JPEG", quality=90)
    jpeg = buf.getvalue()
    (broken / "truncated.jpg").write_bytes(jpeg[: int(len(jpeg) * 0.55)])
    (broken / "not_an_image.jpg").write_text("This is a text file, not a JPEG.\n", encoding="utf-8")
    (broken / "empty.png").write_bytes(b"")

    # Deliberately bad rows; the comment is the reason the pipeline should
    # report.  Rows pointing at real images use their own extra files.
    bad = [
        ["TRAIN", "images/cat/missing.jpg", "cat"],  # file_not_found
        ["TRAIN", "broken/truncated.jpg", "cat"],  # truncated_image
        ["VALIDATION", "broken/not_an_image.jpg", "coffee"],  # not_an_image
        ["TEST", "broken/empty.png", "flower"],  # empty_file
        ["TRIAN", write_image("flower", 15), "flower"],  # invalid_split
        ["train", write_image("coffee", 15), ""],  # missing_label
        ["TEST", write_image("bird", 1), "bird"],  # unseen_label
        ["UNASSIGNED", write_image("cat", 15), "cat"],  # unassigned_split
    ]

    rows = [good[i] for i in rng.permutation(len(good))]
    for n, row in enumerate(bad):  # interleave: one bad row every 6 rows
        rows.insert(3 + 6 * n, row)
    with open(HERE / "manifest.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["split", "image_uri", "label"])
        writer.writerows(rows)

    check(rows)


def check(rows):
    """Every referenced file that should be an image opens and fully loads."""
    for _split, uri, _label in rows:
        path = HERE / uri
        if uri.startswith("broken/") or not path.exists():
            continue
        with Image.open(path) as im:
            im.load()
            size = max(im.size)
            assert 96 <= size <= 224, (uri, im.size)
            if "coffee_12" in uri:
                assert im.getexif().get(0x0112) == 6, uri
                assert ImageOps.exif_transpose(im).size == im.size[::-1], uri
    print(f"wrote {len(rows)} manifest rows to {HERE / 'manifest.csv'}")


if __name__ == "__main__":
    main()
