"""Hostile image files made in the tests: cut short, corrupted, bombs, degenerate sizes.

Each must give a correct example (TensorFlow decodes what is stored, with the declared
height, width and channels) or an ImageRejected with a specific reason: never another
exception, never a hang, and never the memory a bomb's header asks for. The well-formed
variants (16-bit, palettes, CMYK, EXIF 3/6/8, animated GIF, text named .jpg, a directory)
are in test_images.py; this file extends them.
"""

import io
import json
import os
import struct
import subprocess
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
from conftest import png_declaring
from PIL import Image, ImageOps
from test_images import KEEP, assert_close, chunk, decoded, encode, pixels_of, rgb, with_orientation

from image_tfrecords.core.imaging.images import ImageRejected, prepare_image
from image_tfrecords.core.records.image_settings import ImageSettings

# What bytes alone can be rejected for; the other reasons are about reading the file.
DECODE_REASONS = {
    "not_an_image",
    "truncated_image",
    "decompression_bomb",
    "decode_error",
    "encode_error",
}

SOURCES = {
    "jpeg": encode(rgb(40, 30, seed=1), "JPEG", quality=90),
    "progressive": encode(rgb(40, 30, seed=1), "JPEG", quality=90, progressive=True),
    "png": encode(rgb(40, 30, seed=1), "PNG"),
    "gif": encode(rgb(40, 30, seed=1).quantize(64), "GIF"),
    "webp": encode(rgb(40, 30, seed=1), "WEBP", quality=80),
    "bmp": encode(rgb(40, 30, seed=1), "BMP"),
    "tiff": encode(rgb(40, 30, seed=1), "TIFF", compression="tiff_deflate"),
}
# How many leading bytes Pillow needs to recognise each format.
SIGNATURE_LENGTH = {"jpeg": 3, "progressive": 3, "png": 8, "gif": 6}


def outcome(data: bytes, settings: ImageSettings = KEEP):
    """prepare_image's PreparedImage or ImageRejected; any other exception fails the test."""
    try:
        return prepare_image(data, settings)
    except ImageRejected as rejected:
        return rejected


def tf_can_decode(data: bytes) -> bool:
    try:
        tf.io.decode_image(data, expand_animations=False)
        return True
    except tf.errors.InvalidArgumentError:
        return False


def cut_points(length: int) -> list[int]:
    """Every byte through the headers, every 7th after, and each of the last 16."""
    return sorted(
        {*range(1, min(length, 96)), *range(96, length, 7), *range(max(1, length - 16), length)}
    )


# --- cut short ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SIGNATURE_LENGTH)
def test_a_file_cut_at_any_offset_is_truncated_or_still_whole(name):
    intact = SOURCES[name]
    reference = decoded(prepare_image(intact, KEEP))
    for cut in cut_points(len(intact)):
        data = intact[:cut]
        result = outcome(data)
        if isinstance(result, ImageRejected):
            expected = "not_an_image" if cut < SIGNATURE_LENGTH[name] else "truncated_image"
            assert result.reason == expected, (cut, result)
            if name != "gif":  # stored as they are: TF must not be able to read them either
                assert not tf_can_decode(data), cut
        else:  # only GIF's trailer can go: the same pixels
            assert name == "gif" and cut >= len(intact) - 2, cut
            np.testing.assert_array_equal(decoded(result), reference)


def test_zero_filled_files_are_rejected_with_a_reason():
    jpeg, png = SOURCES["jpeg"], SOURCES["png"]
    assert outcome(bytes(len(jpeg))).reason == "not_an_image"
    assert outcome(jpeg[:700] + bytes(len(jpeg) - 700)).reason == "truncated_image"
    # Pillow would decode zeroed pixel data; the CRC says it is not what was written.
    assert outcome(png[:100] + bytes(len(png) - 100)).reason == "decode_error"


# --- corrupted ------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::UserWarning:PIL")  # Pillow on corrupt metadata
@pytest.mark.parametrize("name", SOURCES)
def test_random_corruption_is_a_dead_letter_or_an_image_tf_decodes_as_declared(name):
    intact = SOURCES[name]
    rng = np.random.default_rng(sorted(SOURCES).index(name))
    settings = ImageSettings(max_pixels=4_000_000)  # corrupt sizes must not eat the machine
    outcomes = set()
    for _ in range(500):
        data = bytearray(intact)
        positions = rng.integers(0, len(data), rng.choice([1, 1, 2, 8]))
        for position in positions:
            if rng.random() < 0.5:
                data[position] ^= 1 << int(rng.integers(8))
            else:
                data[position] = int(rng.integers(256))
        result = outcome(bytes(data), settings)
        if isinstance(result, ImageRejected):
            assert result.reason in DECODE_REASONS and result.message, result
            outcomes.add(result.reason)
        else:
            decoded(result)  # TF decodes it, to the declared height, width and channels
            outcomes.add("example")
    assert len(outcomes) >= 2  # the corruption reached both outcomes


@pytest.mark.filterwarnings("ignore::UserWarning:PIL")
@pytest.mark.parametrize("name", ["jpeg", "progressive"])
def test_a_kept_jpeg_is_rejected_exactly_when_its_full_size_decode_fails(name):
    # A JPEG stored as it is gets decoded at 1/8 scale, only to check it; one re-encoded
    # as PNG is decoded at full size. Corruption must be caught the same either way.
    intact = SOURCES[name]
    rng = np.random.default_rng(7)
    rejected = set()
    for trial in range(400):
        data = bytearray(
            intact[: int(rng.integers(100, len(intact)))] if trial % 4 == 0 else intact
        )
        for position in rng.integers(2, len(data), rng.choice([1, 2, 8])):
            data[position] ^= 1 << int(rng.integers(8))
        kept, full_size = (
            outcome(bytes(data)),
            outcome(bytes(data), ImageSettings(image_format="png")),
        )
        assert isinstance(kept, ImageRejected) == isinstance(full_size, ImageRejected), (
            trial,
            kept,
            full_size,
        )
        if isinstance(kept, ImageRejected):
            assert kept.reason == full_size.reason, (trial, kept, full_size)
            rejected.add(trial)
    assert 0 < len(rejected) < 400


# --- bombs, in a child process whose peak memory is measured --------------------------------

# The child's peak RSS is read from VmHWM: getrusage's ru_maxrss survives exec, so a
# child of this process would start at pytest's own peak.
_MEASURE = """
import json, sys
from image_tfrecords.core.imaging.images import ImageRejected, prepare_image
from image_tfrecords.core.records.image_settings import ImageSettings

def peak():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024

files = [open(path, "rb").read() for path in sys.argv[1:]]
report = {"baseline": peak(), "runs": []}
for data in files:
    try:
        image = prepare_image(data, ImageSettings())
        result = f"{image.width}x{image.height}"
    except ImageRejected as rejected:
        result = rejected.reason
    report["runs"].append([result, peak()])
print(json.dumps(report))
"""
MEMORY_BOUND = 128 << 20  # above the child's own peak after its imports


def jpeg_declaring(width: int, height: int) -> bytes:
    """A real JPEG whose frame header (SOF0) claims width x height."""
    data = bytearray(encode(rgb(16, 16), "JPEG"))
    sof = data.index(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


def gif_declaring(width: int, height: int) -> bytes:
    data = bytearray(encode(rgb(16, 16).quantize(16), "GIF"))
    struct.pack_into("<HH", data, 6, width, height)  # the logical screen
    return bytes(data)


def bmp_declaring(width: int, height: int) -> bytes:
    data = bytearray(encode(rgb(16, 16), "BMP"))
    struct.pack_into("<ii", data, 18, width, height)  # BITMAPINFOHEADER
    return bytes(data)


def measure_in_child(tmp_path, files: dict[str, bytes]) -> tuple[int, list]:
    """Runs prepare_image on each file in a fresh interpreter (60 s at most: a hang guard);
    returns its peak RSS before the first call and [result, peak RSS] after each."""
    paths = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *paths],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(done.stdout)
    return report["baseline"], report["runs"]


def test_bombs_are_refused_without_allocating_their_pixels(tmp_path):
    side = 65_000
    bombs = {
        "bomb.jpg": jpeg_declaring(side, side),
        "bomb.png": png_declaring(side, side),
        "bomb.gif": gif_declaring(side, side),
        "bomb.bmp": bmp_declaring(side, side),
    }
    baseline, runs = measure_in_child(tmp_path, bombs)
    assert [result for result, _ in runs] == ["decompression_bomb"] * len(bombs)
    assert side * side * 3 > 10 * 2**30  # what decoding any of them would need: 12 GB
    assert runs[-1][1] - baseline < MEMORY_BOUND  # peaks only grow: this bounds every run


def test_the_memory_measure_sees_a_decoded_image(tmp_path):
    # 8000 x 8000 is under the pixel limit, so it is decoded: Pillow holds 256 MB of pixels.
    compressor = zlib.compressobj()
    row = b"\x00" * (1 + 8000 * 3)
    pixels = b"".join(compressor.compress(row) for _ in range(8000)) + compressor.flush()
    header = struct.pack(">IIBBBBB", 8000, 8000, 8, 2, 0, 0, 0)
    png = (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )
    baseline, runs = measure_in_child(tmp_path, {"large.png": png})
    assert runs[0][0] == "8000x8000"
    assert runs[0][1] - baseline > MEMORY_BOUND


# --- degenerate sizes -----------------------------------------------------------------------


@pytest.mark.parametrize("size", [(1, 1), (1, 5000), (5000, 1)], ids=str)
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF"])
def test_one_pixel_and_extreme_aspect_images_round_trip(fmt, size):
    source = rgb(*size, wavelength=50)
    data = encode(source.quantize(64) if fmt == "GIF" else source, fmt)
    image = prepare_image(data, KEEP)
    assert (image.width, image.height) == size
    assert (image.encoded == data) == (fmt != "GIF")  # GIF becomes PNG
    expected = pixels_of(Image.open(io.BytesIO(data)).convert("RGB"))
    if fmt == "JPEG":
        assert_close(decoded(image), expected, mean=4, worst=40)
    else:
        np.testing.assert_array_equal(decoded(image), expected)


@pytest.mark.parametrize(
    "size, expected", [((1, 5000), (1, 100)), ((5000, 1), (100, 1)), ((1, 1), (1, 1))], ids=str
)
def test_extreme_aspects_resize_without_a_zero_side(size, expected):
    image = prepare_image(encode(rgb(*size), "PNG"), ImageSettings(max_side=100))
    assert (image.width, image.height) == expected
    decoded(image)


# --- animation and metadata -----------------------------------------------------------------

FRAMES = [rgb(30, 20, seed=seed, wavelength=4) for seed in (1, 2, 3)]


def test_animated_png_is_kept_and_tf_reads_its_first_frame():
    data = encode(FRAMES[0], "PNG", save_all=True, append_images=FRAMES[1:])
    assert Image.open(io.BytesIO(data)).n_frames == 3
    image = prepare_image(data, KEEP)
    assert (image.encoded, image.reencoded) == (data, None)
    np.testing.assert_array_equal(decoded(image), pixels_of(FRAMES[0]))


@pytest.mark.parametrize("fmt", ["GIF", "WEBP"])
def test_other_animations_store_their_first_frame_as_a_still_png(fmt):
    frames = [frame.quantize(64).convert("RGB") for frame in FRAMES]  # exact in a GIF
    data = encode(frames[0], fmt, save_all=True, append_images=frames[1:], lossless=True)
    image = prepare_image(data, KEEP)
    assert (image.format, image.reencoded) == ("png", "format")
    assert getattr(Image.open(io.BytesIO(image.encoded)), "n_frames", 1) == 1
    assert tf.io.decode_image(image.encoded).shape.rank == 3  # a still image, even animated
    np.testing.assert_array_equal(decoded(image), pixels_of(frames[0]))


@pytest.mark.parametrize("orientation", [2, 4, 5, 7])
def test_mirrored_exif_orientations_are_stored_upright(orientation):
    data = with_orientation(rgb(60, 40), "PNG", orientation)
    image = prepare_image(data, KEEP)
    assert image.reencoded == "orientation"
    upright = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    assert (
        (image.width, image.height) == upright.size == ((40, 60) if orientation >= 5 else (60, 40))
    )
    np.testing.assert_array_equal(decoded(image), pixels_of(upright))


def _garbled_exif() -> bytes:
    data = with_orientation(rgb(60, 40), "JPEG", 6)
    start = data.index(b"Exif\x00\x00") + 6
    return data[:start] + b"\xde\xad" * 6 + data[start + 12 :]  # TIFF header and IFD offset


@pytest.mark.parametrize(
    "data",
    [
        with_orientation(rgb(60, 40), "JPEG", 0),
        with_orientation(rgb(60, 40), "JPEG", 9),
        _garbled_exif(),
    ],
    ids=["orientation-0", "orientation-9", "garbled-exif"],
)
def test_unusable_orientations_leave_the_jpeg_as_it_is(data):
    image = prepare_image(data, KEEP)
    assert (image.encoded, image.reencoded, image.width, image.height) == (data, None, 60, 40)
    decoded(image)
