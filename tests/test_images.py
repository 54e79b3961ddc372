"""image_tfrecords.core.imaging.images on real files made with Pillow, decoded back with
TensorFlow's own decoder."""

import concurrent.futures
import io
import os
import pickle
import struct
import tracemalloc
import warnings
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import imagehash
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import photo_like
from PIL import ExifTags, Image, ImageFile, ImageOps

from image_tfrecords.core.imaging.images import (
    REASONS,
    THUMBNAIL_SIDE,
    ImageRejected,
    ImageSettings,
    PreparedImage,
    _is_lossy_webp,
    hash_input,
    perceptual_hash,
    prepare_image,
    thumbnail_of,
)
from image_tfrecords.pipeline.options import ConvertOptions

KEEP = ImageSettings()
KEEP_16_BIT = ImageSettings(keep_16_bit=True)


# --- helpers -------------------------------------------------------------------------------


def gradient(
    width: int, height: int, channels: int = 3, seed: int = 0, wavelength: float = 1.0
) -> np.ndarray:
    """Waves plus a little noise: compresses like a photo; `wavelength` > 1 is smoother."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / wavelength
    planes = [128 + 100 * np.sin(x / (5 + c) + y / (7 + 2 * c) + seed) for c in range(channels)]
    pixels = np.stack(planes, axis=-1) + rng.normal(0, 4, (height, width, channels))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def rgb(
    width: int = 64,
    height: int = 48,
    seed: int = 0,
    wavelength: float = 1.0,
) -> Image.Image:
    return Image.fromarray(gradient(width, height, 3, seed, wavelength))


def encode(image: Image.Image, fmt: str, **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def raw_png(
    width: int, height: int, bit_depth: int, color_type: int, rows: list[bytes], extra: bytes = b""
) -> bytes:
    """A PNG written byte by byte, for the variants Pillow cannot save (16-bit RGB, ...)."""
    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    pixels = zlib.compress(b"".join(b"\x00" + row for row in rows))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", pixels)
        + extra
        + chunk(b"IEND", b"")
    )


def png_declaring(width: int, height: int, bit_depth: int = 8, color_type: int = 2) -> bytes:
    """A tiny PNG whose header claims width x height: a decompression bomb's signature."""
    return raw_png(width, height, bit_depth, color_type, [b"\x00" * 16])


def decoded(image: PreparedImage, dtype: tf.DType = tf.uint8) -> np.ndarray:
    """TF's pixels for `image.encoded`, after checking the fields that describe them."""
    assert image.format == {b"\xff\xd8": "jpeg", b"\x89P": "png"}[image.encoded[:2]]
    pixels = tf.io.decode_image(image.encoded, dtype=dtype, expand_animations=False).numpy()
    assert pixels.shape == (image.height, image.width, image.channels)
    return pixels


def pixels_of(image: Image.Image) -> np.ndarray:
    array = np.asarray(image)
    return array[..., None] if array.ndim == 2 else array


def rejection(data: bytes, settings: ImageSettings = KEEP) -> ImageRejected:
    with pytest.raises(ImageRejected) as caught:
        prepare_image(data, settings)
    return caught.value


def with_orientation(image: Image.Image, fmt: str, orientation: int, **params) -> bytes:
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = orientation
    return encode(image, fmt, exif=exif, **params)


def assert_close(actual: np.ndarray, expected: np.ndarray, mean: float, worst: int) -> None:
    assert actual.shape == expected.shape
    difference = np.abs(actual.astype(int) - expected.astype(int))
    assert difference.mean() <= mean and difference.max() <= worst, (
        difference.mean(),
        difference.max(),
    )


# --- kept as they are ----------------------------------------------------------------------


@pytest.mark.parametrize("mode, channels", [("RGB", 3), ("L", 1)])
def test_jpeg_rgb_and_grey_are_kept_byte_identical(mode, channels):
    data = encode(rgb(64, 48).convert(mode), "JPEG", quality=90)
    image = prepare_image(data, KEEP)
    assert image.encoded == data
    assert (image.format, image.source_format, image.reencoded) == ("jpeg", "JPEG", None)
    assert (image.width, image.height, image.channels) == (64, 48, channels)
    decoded(image)


def test_multi_picture_jpeg_is_kept_and_tf_decodes_its_first_frame():
    frames = [rgb(32, 24, wavelength=4), ImageOps.invert(rgb(32, 24, wavelength=4))]
    data = encode(frames[0], "MPO", save_all=True, append_images=frames[1:], quality=95)
    image = prepare_image(data, KEEP)
    assert (image.encoded, image.source_format, image.reencoded) == (data, "MPO", None)
    assert_close(decoded(image), pixels_of(frames[0]), mean=5, worst=32)  # not the negative


def _png_cases():
    """One pytest.param per PNG: its bytes, the pixels TF must decode, the dtype to use."""
    colour, alpha4 = gradient(20, 12, 3), gradient(20, 12, 4, seed=1)
    grey = colour[..., :1]
    palette = Image.fromarray(colour).quantize(200)
    small_palette = Image.fromarray(colour).quantize(16)  # Pillow writes it as 4-bit
    transparent_index = Image.fromarray(colour).quantize(200)
    transparent_index.info["transparency"] = 0
    alpha_palette = Image.fromarray(alpha4).quantize(50, method=Image.Quantize.FASTOCTREE)
    grey_trns = Image.fromarray(grey[..., 0])
    grey_trns.info["transparency"] = int(grey[0, 0, 0])
    rng = np.random.default_rng(2)
    deep_grey = rng.integers(0, 65536, (12, 20), dtype=np.uint16)
    deep_rgb = rng.integers(0, 65536, (12, 20, 3), dtype=np.uint16)
    deep_grey_alpha = rng.integers(0, 65536, (12, 20, 2), dtype=np.uint16)
    two_bit = rng.integers(0, 4, (12, 20), dtype=np.uint8)
    two_bit_rows = [
        np.packbits(np.unpackbits(row[:, None], axis=1)[:, 6:]).tobytes() for row in two_bit
    ]
    bilevel = colour[..., 0] > 128

    def rows(array):
        return [row.astype(">u2").tobytes() for row in array]

    cases = [
        ("RGB", encode(Image.fromarray(colour), "PNG"), colour, tf.uint8),
        ("RGBA", encode(Image.fromarray(alpha4), "PNG"), alpha4, tf.uint8),
        ("L", encode(Image.fromarray(grey[..., 0]), "PNG"), grey, tf.uint8),
        ("LA", encode(Image.fromarray(alpha4[..., :2]), "PNG"), alpha4[..., :2], tf.uint8),
        ("P 8-bit", encode(palette, "PNG"), pixels_of(palette.convert("RGB")), tf.uint8),
        (
            "P 4-bit",
            encode(small_palette, "PNG"),
            pixels_of(small_palette.convert("RGB")),
            tf.uint8,
        ),
        (
            "P transparent index",
            encode(transparent_index, "PNG"),
            pixels_of(transparent_index.convert("RGBA")),
            tf.uint8,
        ),
        (
            "P alpha palette",
            encode(alpha_palette, "PNG"),
            pixels_of(alpha_palette.convert("RGBA")),
            tf.uint8,
        ),
        ("L with tRNS", encode(grey_trns, "PNG"), grey, tf.uint8),
        (
            "1-bit",
            encode(Image.fromarray(bilevel), "PNG"),
            (bilevel * 255).astype(np.uint8)[..., None],
            tf.uint8,
        ),
        ("2-bit grey", raw_png(20, 12, 2, 0, two_bit_rows), two_bit[..., None] * 85, tf.uint8),
        ("16-bit grey", encode(Image.fromarray(deep_grey), "PNG"), deep_grey[..., None], tf.uint16),
        ("16-bit RGB", raw_png(20, 12, 16, 2, rows(deep_rgb)), deep_rgb, tf.uint16),
        # Pillow opens this one as RGBA; libpng, and so TF, as two channels.
        (
            "16-bit grey+alpha",
            raw_png(20, 12, 16, 4, rows(deep_grey_alpha)),
            deep_grey_alpha,
            tf.uint16,
        ),
    ]
    return [pytest.param(*case[1:], id=case[0]) for case in cases]


@pytest.mark.parametrize("data, expected, dtype", _png_cases())
def test_png_in_every_mode_is_kept_and_tf_decodes_the_same_pixels(data, expected, dtype):
    """With --keep_16_bit: 16-bit greyscale too (see the next test for the default)."""
    image = prepare_image(data, KEEP_16_BIT)
    assert image.encoded == data
    assert (image.format, image.source_format, image.reencoded) == ("png", "PNG", None)
    assert (image.width, image.height) == (20, 12)
    np.testing.assert_array_equal(decoded(image, dtype), expected)


def test_16_bit_grey_is_stored_with_8_bits_by_default_as_pillow_and_tf_read_it_alike():
    """Pillow's convert("RGB") (the PyTorch and Grain readers') clips a 16-bit grey PNG to
    white; the 8-bit image stored instead is its high byte, what TF's uint8 decode gives."""
    deep = np.random.default_rng(5).integers(0, 65536, (12, 20), dtype=np.uint16)
    data = encode(Image.fromarray(deep), "PNG")
    assert np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).mean() > 250  # clipped
    image = prepare_image(data, KEEP)
    assert (image.format, image.reencoded, image.channels) == ("png", "bit_depth", 1)
    np.testing.assert_array_equal(decoded(image), (deep >> 8)[..., None])
    np.testing.assert_array_equal(
        np.asarray(Image.open(io.BytesIO(image.encoded)).convert("RGB")),
        np.repeat((deep >> 8)[..., None], 3, axis=2),
    )
    for tiff in (
        Image.fromarray(deep),
        Image.frombytes("I;16B", (20, 12), deep.astype(">u2").tobytes()),
    ):
        kept = prepare_image(encode(tiff, "TIFF"), KEEP_16_BIT)
        assert (kept.format, kept.reencoded) == ("png", "format")
        np.testing.assert_array_equal(decoded(kept, tf.uint16), deep[..., None])


def test_16_bit_png_reads_as_its_high_byte_at_tf_default_dtype():
    deep_rgb = np.random.default_rng(3).integers(0, 65536, (4, 5, 3), dtype=np.uint16)
    data = raw_png(5, 4, 16, 2, [row.astype(">u2").tobytes() for row in deep_rgb])
    image = prepare_image(data, KEEP)
    np.testing.assert_array_equal(decoded(image), deep_rgb >> 8)
    np.testing.assert_array_equal(pixels_of(Image.open(io.BytesIO(data))), deep_rgb >> 8)


def test_png_with_a_bad_ancillary_checksum_after_the_pixels_is_kept():
    # libpng only warns about ancillary chunks, so TF decodes this file.
    good = encode(rgb(8, 6), "PNG")
    text = chunk(b"tEXt", b"note\x00hello")
    data = good[:-12] + text[:-4] + b"\x00\x00\x00\x00" + good[-12:]
    image = prepare_image(data, KEEP)
    assert image.encoded == data
    np.testing.assert_array_equal(decoded(image), pixels_of(rgb(8, 6)))


# --- re-encoded losslessly as PNG ----------------------------------------------------------


def _lossless_cases():
    """One pytest.param per file: bytes, Pillow's format name, the pixels the PNG must hold,
    the dtype to decode with."""
    colour, alpha4 = gradient(30, 20, 3), gradient(30, 20, 4, seed=1)
    palette = Image.fromarray(colour).quantize(64)
    transparent = Image.fromarray(colour).quantize(64)
    gif_transparent = encode(transparent, "GIF", transparency=0)
    frames = [Image.fromarray(gradient(30, 20, 3, seed)).quantize(64) for seed in (4, 5, 6)]
    animated = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50)
    bilevel = colour[..., 0] > 128
    deep = np.random.default_rng(7).integers(0, 65536, (20, 30), dtype=np.uint16)
    deep_big_endian = Image.frombytes("I;16B", (30, 20), deep.astype(">u2").tobytes())
    cmyk = Image.frombytes("CMYK", (30, 20), alpha4.tobytes())
    lossy_webp_alpha = encode(Image.fromarray(alpha4), "WEBP", quality=60)
    cases = [
        ("GIF", encode(palette, "GIF"), "GIF", pixels_of(palette.convert("RGB")), tf.uint8),
        (
            "GIF transparent",
            gif_transparent,
            "GIF",
            pixels_of(Image.open(io.BytesIO(gif_transparent)).convert("RGBA")),
            tf.uint8,
        ),
        ("GIF animated", animated, "GIF", pixels_of(frames[0].convert("RGB")), tf.uint8),
        ("BMP RGB", encode(Image.fromarray(colour), "BMP"), "BMP", colour, tf.uint8),
        ("BMP palette", encode(palette, "BMP"), "BMP", pixels_of(palette.convert("RGB")), tf.uint8),
        (
            "BMP 1-bit",
            encode(Image.fromarray(bilevel), "BMP"),
            "BMP",
            (bilevel * 255).astype(np.uint8)[..., None],
            tf.uint8,
        ),
        ("TIFF RGB", encode(Image.fromarray(colour), "TIFF"), "TIFF", colour, tf.uint8),
        ("TIFF RGBA", encode(Image.fromarray(alpha4), "TIFF"), "TIFF", alpha4, tf.uint8),
        # 16 bits stored as 8 (see --keep_16_bit's test for the 16-bit PNG).
        (
            "TIFF 16-bit",
            encode(Image.fromarray(deep), "TIFF"),
            "TIFF",
            (deep >> 8).astype(np.uint8)[..., None],
            tf.uint8,
        ),
        (
            "TIFF 16-bit big-endian",
            encode(deep_big_endian, "TIFF"),
            "TIFF",
            (deep >> 8).astype(np.uint8)[..., None],
            tf.uint8,
        ),
        ("TIFF CMYK", encode(cmyk, "TIFF"), "TIFF", pixels_of(cmyk.convert("RGB")), tf.uint8),
        (
            "WebP lossless",
            encode(Image.fromarray(colour), "WEBP", lossless=True),
            "WEBP",
            colour,
            tf.uint8,
        ),
        (
            "WebP lossless RGBA",
            encode(Image.fromarray(alpha4), "WEBP", lossless=True),
            "WEBP",
            alpha4,
            tf.uint8,
        ),
        (
            "WebP lossy RGBA",
            lossy_webp_alpha,
            "WEBP",
            pixels_of(Image.open(io.BytesIO(lossy_webp_alpha))),
            tf.uint8,
        ),
    ]
    return [pytest.param(*case[1:], id=case[0]) for case in cases]


@pytest.mark.parametrize("data, source_format, expected, dtype", _lossless_cases())
def test_formats_tf_cannot_take_become_png_with_the_same_pixels(
    data, source_format, expected, dtype
):
    image = prepare_image(data, KEEP)
    assert (image.format, image.source_format, image.reencoded) == ("png", source_format, "format")
    assert (image.width, image.height) == (30, 20)
    np.testing.assert_array_equal(decoded(image, dtype), expected)


@pytest.mark.parametrize("quality", [60, 95])
def test_lossy_webp_becomes_jpeg_close_to_its_pixels_and_far_smaller_than_png(quality):
    source = photo_like(160, 120, seed=3)
    webp = encode(source, "WEBP", quality=quality)
    image = prepare_image(webp, KEEP)
    assert (image.format, image.source_format, image.reencoded, image.channels) == (
        "jpeg",
        "WEBP",
        "format",
        3,
    )
    webp_pixels = pixels_of(Image.open(io.BytesIO(webp))).astype(int)
    assert np.abs(decoded(image).astype(int) - webp_pixels).mean() < 4  # JPEG q95 of noise
    as_png = prepare_image(webp, ImageSettings(image_format="png")).encoded
    assert len(image.encoded) * 3 < len(as_png)


def test_webp_kinds_are_told_apart_by_their_bitstream_chunk():
    colour = photo_like(30, 20, seed=1)
    assert _is_lossy_webp(encode(colour, "WEBP", quality=80))
    assert _is_lossy_webp(encode(colour.convert("RGBA"), "WEBP", quality=80))  # VP8X + ALPH
    assert not _is_lossy_webp(encode(colour, "WEBP", lossless=True))
    with_exif = encode(colour, "WEBP", quality=80, exif=Image.Exif().tobytes())
    assert with_exif[12:16] == b"VP8X" and _is_lossy_webp(with_exif)
    assert not _is_lossy_webp(b"RIFF\x04\x00\x00\x00WEBP")


def test_palette_without_transparency_stays_a_palette_png():
    palette = Image.fromarray(gradient(30, 20)).quantize(64)
    image = prepare_image(encode(palette, "GIF"), KEEP)
    assert Image.open(io.BytesIO(image.encoded)).mode == "P"
    np.testing.assert_array_equal(decoded(image), pixels_of(palette.convert("RGB")))


# --- JPEG that TF cannot take as it is -----------------------------------------------------


def test_cmyk_jpeg_becomes_rgb_jpeg_close_to_pillows_conversion():
    data = encode(rgb(64, 48, wavelength=4).convert("CMYK"), "JPEG", quality=95)
    image = prepare_image(data, KEEP)
    assert (image.format, image.source_format, image.reencoded) == ("jpeg", "JPEG", "mode")
    assert image.channels == 3
    reference = pixels_of(Image.open(io.BytesIO(data)).convert("RGB"))
    assert_close(decoded(image), reference, mean=5, worst=32)


@pytest.mark.parametrize("orientation, swapped", [(6, True), (8, True), (3, False)])
def test_exif_rotated_jpeg_is_stored_upright(orientation, swapped):
    data = with_orientation(rgb(60, 40, wavelength=4), "JPEG", orientation, quality=95)
    image = prepare_image(data, KEEP)
    assert (image.format, image.reencoded) == ("jpeg", "orientation")
    assert (image.width, image.height) == ((40, 60) if swapped else (60, 40))
    upright = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    assert_close(decoded(image), pixels_of(upright), mean=2, worst=24)


def test_exif_rotated_png_is_stored_upright_with_exact_pixels():
    source = rgb(60, 40)
    image = prepare_image(with_orientation(source, "PNG", 6), KEEP)
    assert (image.format, image.reencoded, image.width, image.height) == (
        "png",
        "orientation",
        40,
        60,
    )
    np.testing.assert_array_equal(
        decoded(image), pixels_of(source.transpose(Image.Transpose.ROTATE_270))
    )


def test_orientation_1_is_kept_byte_identical():
    data = with_orientation(rgb(60, 40), "JPEG", 1)
    image = prepare_image(data, KEEP)
    assert (image.encoded, image.reencoded) == (data, None)
    decoded(image)


# --- resizing ------------------------------------------------------------------------------


def test_large_jpeg_is_resized_to_exactly_max_side_keeping_aspect():
    data = encode(rgb(400, 300, wavelength=8), "JPEG", quality=95)
    image = prepare_image(data, ImageSettings(max_side=100))
    assert (image.format, image.reencoded, image.width, image.height) == (
        "jpeg",
        "resized",
        100,
        75,
    )
    reference = Image.open(io.BytesIO(data)).resize((100, 75), Image.Resampling.LANCZOS)
    assert_close(decoded(image), pixels_of(reference), mean=2, worst=24)


@pytest.mark.parametrize(
    "size, max_side, expected",
    [
        ((1001, 500), 100, (100, 50)),  # JPEG decoded at 1/8 scale first: still exact
        ((500, 1001), 100, (50, 100)),
        ((1000, 3), 100, (100, 1)),  # the short side never rounds down to 0
    ],
)
def test_resized_size_is_exact_for_awkward_aspects(size, max_side, expected):
    image = prepare_image(encode(rgb(*size), "JPEG"), ImageSettings(max_side=max_side))
    assert (image.width, image.height) == expected
    decoded(image)


def test_large_png_is_resized_losslessly_with_lanczos():
    source = Image.fromarray(gradient(300, 400, 4))
    image = prepare_image(encode(source, "PNG"), ImageSettings(max_side=100))
    assert (image.format, image.reencoded, image.width, image.height, image.channels) == (
        "png",
        "resized",
        75,
        100,
        4,
    )
    np.testing.assert_array_equal(
        decoded(image), pixels_of(source.resize((75, 100), Image.Resampling.LANCZOS))
    )


def test_resized_palette_gif_is_resampled_in_true_colour():
    palette = Image.fromarray(gradient(200, 100)).quantize(64)
    image = prepare_image(encode(palette, "GIF"), ImageSettings(max_side=50))
    assert (image.reencoded, image.width, image.height, image.channels) == ("format", 50, 25, 3)
    expected = palette.convert("RGB").resize((50, 25), Image.Resampling.LANCZOS)
    np.testing.assert_array_equal(decoded(image), pixels_of(expected))


def test_rotated_and_large_jpeg_is_rotated_then_resized():
    data = with_orientation(rgb(400, 200), "JPEG", 6)
    image = prepare_image(data, ImageSettings(max_side=100))
    assert (image.reencoded, image.width, image.height) == ("orientation", 50, 100)
    decoded(image)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_images_already_small_enough_are_kept_byte_identical(fmt):
    data = encode(rgb(100, 80), fmt)
    image = prepare_image(data, ImageSettings(max_side=100))
    assert (image.encoded, image.reencoded) == (data, None)
    assert (image.width, image.height) == (100, 80)
    decoded(image)


# --- image_format forcing ------------------------------------------------------------------


def test_forced_jpeg_composites_alpha_over_white():
    pixels = np.zeros((20, 40, 4), np.uint8)
    pixels[:, :20] = (200, 30, 30, 255)  # opaque red-ish left half
    pixels[:, 20:] = (0, 0, 255, 0)  # fully transparent blue right half
    image = prepare_image(
        encode(Image.fromarray(pixels), "PNG"), ImageSettings(image_format="jpeg")
    )
    assert (image.format, image.reencoded, image.channels) == ("jpeg", "requested_format", 3)
    out = decoded(image)
    assert_close(out[:, 2:16], np.broadcast_to([200, 30, 30], (20, 14, 3)), mean=3, worst=12)
    assert out[:, 24:].min() >= 245


@pytest.mark.parametrize(
    "source, channels",
    [
        (Image.fromarray(gradient(40, 20, 2)[..., :2]), 1),  # LA -> L
        (Image.fromarray(gradient(40, 20)).quantize(32), 3),  # P -> RGB
    ],
)
def test_forced_jpeg_from_png_modes(source, channels):
    image = prepare_image(encode(source, "PNG"), ImageSettings(image_format="jpeg"))
    assert (image.format, image.reencoded, image.channels) == ("jpeg", "requested_format", channels)
    decoded(image)


def test_forced_jpeg_from_transparent_palette_is_rgb():
    palette = Image.fromarray(gradient(40, 20)).quantize(32)
    image = prepare_image(
        encode(palette, "PNG", transparency=0), ImageSettings(image_format="jpeg")
    )
    assert (image.format, image.channels) == ("jpeg", 3)
    decoded(image)


def test_forced_jpeg_from_16_bit_grey_keeps_the_high_byte():
    ramp = np.tile(np.linspace(0, 65535, 64).astype(np.uint16), (16, 1))
    image = prepare_image(encode(Image.fromarray(ramp), "PNG"), ImageSettings(image_format="jpeg"))
    assert (image.format, image.channels) == ("jpeg", 1)
    assert_close(decoded(image), (ramp >> 8).astype(np.uint8)[..., None], mean=1.5, worst=8)


def test_forced_png_from_jpeg_holds_pillows_decoded_pixels_exactly():
    data = encode(rgb(64, 48), "JPEG")
    image = prepare_image(data, ImageSettings(image_format="png"))
    assert (image.format, image.source_format, image.reencoded) == (
        "png",
        "JPEG",
        "requested_format",
    )
    np.testing.assert_array_equal(decoded(image), pixels_of(Image.open(io.BytesIO(data))))


@pytest.mark.parametrize("fmt, image_format", [("JPEG", "jpeg"), ("PNG", "png")])
def test_forced_format_keeps_sources_already_in_it(fmt, image_format):
    data = encode(rgb(), fmt)
    image = prepare_image(data, ImageSettings(image_format=image_format))
    assert (image.encoded, image.reencoded, image.format) == (data, None, image_format)
    decoded(image)


def test_forced_jpeg_reports_the_more_basic_reasons_first():
    gif = encode(Image.fromarray(gradient(30, 20)).quantize(16), "GIF")
    assert prepare_image(gif, ImageSettings(image_format="jpeg")).reencoded == "format"
    cmyk = encode(rgb().convert("CMYK"), "JPEG")
    image = prepare_image(cmyk, ImageSettings(image_format="png"))
    assert (image.format, image.reencoded) == ("png", "mode")
    np.testing.assert_array_equal(
        decoded(image), pixels_of(Image.open(io.BytesIO(cmyk)).convert("RGB"))
    )


# --- broken files --------------------------------------------------------------------------

JPEG_BYTES = encode(rgb(64, 48), "JPEG", quality=90)
PROGRESSIVE_BYTES = encode(rgb(64, 48), "JPEG", quality=90, progressive=True)
PNG_BYTES = encode(rgb(64, 48), "PNG")


@pytest.mark.parametrize(
    "data, reason",
    [
        (JPEG_BYTES[:2], "not_an_image"),  # just the SOI marker
        (JPEG_BYTES[:20], "truncated_image"),  # inside the APP0 segment
        (JPEG_BYTES[:100], "truncated_image"),  # inside the quantisation tables
        (JPEG_BYTES[: len(JPEG_BYTES) // 2], "truncated_image"),  # mid-scan
        (JPEG_BYTES[:-2], "truncated_image"),  # only EOI missing
        (PROGRESSIVE_BYTES[: len(PROGRESSIVE_BYTES) // 2], "truncated_image"),
        (PROGRESSIVE_BYTES[:-1], "truncated_image"),
        (PNG_BYTES[:8], "truncated_image"),  # the signature alone
        (PNG_BYTES[:20], "truncated_image"),  # inside IHDR
        (PNG_BYTES[:40], "truncated_image"),  # IHDR complete, IDAT header cut
        (PNG_BYTES[: len(PNG_BYTES) // 2], "truncated_image"),  # mid-IDAT
        (PNG_BYTES[:-12], "truncated_image"),  # no IEND: Pillow decodes it, TF does not
        (PNG_BYTES[:-1], "truncated_image"),  # IEND's CRC cut
    ],
    ids=[
        "jpeg-2",
        "jpeg-20",
        "jpeg-100",
        "jpeg-half",
        "jpeg-no-eoi",
        "progressive-half",
        "progressive-minus-1",
        "png-8",
        "png-20",
        "png-40",
        "png-half",
        "png-no-iend",
        "png-minus-1",
    ],
)
def test_truncated_files_are_rejected(data, reason):
    assert rejection(data).reason == reason
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(data)


def test_png_with_a_bad_pixel_data_checksum_is_rejected():
    # Pillow does not check IDAT's CRC; libpng does, so TF could not decode it.
    start = PNG_BYTES.index(b"IDAT")
    length = struct.unpack(">I", PNG_BYTES[start - 4 : start])[0]
    crc = start + 4 + length
    data = PNG_BYTES[:crc] + bytes([PNG_BYTES[crc] ^ 1]) + PNG_BYTES[crc + 1 :]
    rejected = rejection(data)
    assert rejected.reason == "decode_error" and "IDAT" in rejected.message


def test_png_with_corrupt_compressed_pixels_is_rejected():
    start = PNG_BYTES.index(b"IDAT") + 4
    data = bytearray(PNG_BYTES)
    data[start + 20] ^= 0xFF
    rejected = rejection(bytes(data))
    assert rejected.reason == "decode_error" and "broken data stream" in rejected.message


def test_undecodable_pixel_data_is_a_decode_error():
    data = bytearray(encode(rgb(), "WEBP", quality=80))
    data[40:60] = b"\xff" * 20  # inside the VP8 bitstream
    rejected = rejection(bytes(data))
    assert (rejected.reason, rejected.message) == ("decode_error", "failed to read next frame")


@pytest.mark.parametrize(
    "after_scan, kept",
    [
        (b"\xff\xe2\x40\x00", False),  # an APP2 marker whose length runs past the end
        (b"\xff\xe2\x00\x06note", True),  # a whole APP2 segment
        (b"\x00junk", True),  # stray bytes, which libjpeg skips
    ],
)
def test_jpeg_markers_after_the_last_scan_are_checked_as_tf_reads_them(after_scan, kept):
    # Pillow stops once it has every pixel, so it decodes all three; libjpeg reads on.
    data = JPEG_BYTES[:-2] + after_scan + JPEG_BYTES[-2:]
    Image.open(io.BytesIO(data)).load()
    if kept:
        image = prepare_image(data, KEEP)
        assert image.encoded == data
        np.testing.assert_array_equal(decoded(image), tf.io.decode_jpeg(JPEG_BYTES).numpy())
    else:
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.decode_jpeg(data)
        rejected = rejection(data)
        assert (rejected.reason, rejected.message) == (
            "decode_error",
            f"JPEG segment 0xFFE2 at byte {len(JPEG_BYTES) - 2} has a bad "
            "length or runs past the end",
        )


def test_text_is_not_an_image():
    assert rejection(b"this is plain text, not a picture\n" * 20).reason == "not_an_image"


# --- decompression bombs -------------------------------------------------------------------


@pytest.mark.parametrize("bit_depth, color_type", [(8, 2), (1, 0)])
def test_bomb_header_is_rejected_before_any_pixel_is_allocated(monkeypatch, bit_depth, color_type):
    data = png_declaring(30000, 30000, bit_depth, color_type)
    loads = []
    original_load = ImageFile.ImageFile.load
    monkeypatch.setattr(
        ImageFile.ImageFile, "load", lambda self: loads.append(self) or original_load(self)
    )
    tracemalloc.start()
    try:
        rejected = rejection(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rejected.reason == "decompression_bomb"
    assert "30000x30000" in rejected.message
    assert loads == []
    assert peak < 4 * 2**20


def test_bomb_check_honours_a_lower_max_pixels():
    data = encode(rgb(100, 100), "PNG")
    assert rejection(data, ImageSettings(max_pixels=9_999)).reason == "decompression_bomb"
    image = prepare_image(data, ImageSettings(max_pixels=10_000))
    assert (image.encoded, image.width * image.height) == (data, 10_000)


def test_no_pillow_warning_between_its_warn_and_error_limits():
    # 90M pixels: Image.open would warn through the global warnings machinery.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert rejection(png_declaring(10_000, 9_000)).reason == "decompression_bomb"
    assert caught == []


def test_a_higher_max_pixels_replaces_pillows_own_limit(monkeypatch):
    # 200M pixels is beyond even Pillow's hard limit (2 x MAX_IMAGE_PIXELS); with
    # max_pixels above it the image must reach decoding, stubbed out to allocate nothing.
    def refuse(self):
        raise OSError("stub: decoding reached")

    monkeypatch.setattr(ImageFile.ImageFile, "load", refuse)
    rejected = rejection(png_declaring(20_000, 10_000), ImageSettings(max_pixels=300_000_000))
    assert (rejected.reason, rejected.message) == ("decode_error", "stub: decoding reached")


# --- the API itself ------------------------------------------------------------------------


def test_rejections_pickle_with_reason_and_message():
    rejected = pickle.loads(pickle.dumps(ImageRejected("truncated_image", "cut short")))
    assert (rejected.reason, rejected.message) == ("truncated_image", "cut short")
    assert str(rejected) == "truncated_image: cut short"


def test_reasons_are_the_documented_codes():
    assert set(REASONS) == {
        "file_not_found",
        "read_error",
        "not_a_file",
        "empty_file",
        "not_an_image",
        "truncated_image",
        "decompression_bomb",
        "decode_error",
        "encode_error",
        "decode_crash",
        "decode_timeout",
        "invalid_mask",
        "invalid_keypoints",
        "size_mismatch",
        "http_timeout",
        "connection_error",
        "too_large",
    }
    assert ImageRejected("http_404", "not found").reason == "http_404"
    for unknown in ("something_else", "http_200", "http_4044"):
        with pytest.raises(ValueError):
            ImageRejected(unknown, "no such code")


@pytest.mark.parametrize(
    "field, value",
    [("image_format", "gif"), ("max_side", 0), ("jpeg_quality", 101), ("max_pixels", 0)],
)
def test_invalid_settings_are_refused(field, value):
    with pytest.raises(ValueError):
        ImageSettings(**{field: value})


def test_the_command_line_reports_every_invalid_image_setting_under_its_option():
    options = PipelineOptions(
        [
            "--manifest",
            "m.csv",
            "--output_dir",
            "out",
            "--max_side",
            "0",
            "--jpeg_quality",
            "101",
            "--max_image_pixels",
            "0",
        ]
    )
    assert options.view_as(ConvertOptions).problems() == [
        "--max_side must be a positive number of pixels",
        "--jpeg_quality must be between 1 and 100",
        "--max_image_pixels must be positive",
    ]


def test_concurrent_calls_give_the_same_results_as_sequential_ones():
    inputs = [
        JPEG_BYTES,
        PNG_BYTES,
        encode(rgb().convert("CMYK"), "JPEG"),
        encode(Image.fromarray(gradient(30, 20)).quantize(16), "GIF"),
        with_orientation(rgb(), "JPEG", 6),
    ] * 4
    settings = ImageSettings(max_side=40)
    sequential = [prepare_image(data, settings) for data in inputs]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        concurrent_results = list(pool.map(lambda data: prepare_image(data, settings), inputs))
    assert concurrent_results == sequential


@pytest.mark.parametrize("size", [(24, 24), (80, 60), (31, 200), (640, 480), (333, 4000)])
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "P"])
def test_the_perceptual_hash_is_imagehash_phash_bit_for_bit(size, mode):
    """The pipeline computes pHash itself (imagehash's costs ~6x more, SciPy included):
    it must be imagehash.phash of the same 32x32 grey image, made from the image as TF
    sees it."""
    image = photo_like(*size, seed=sum(size), mode="RGBA")
    if mode != "RGBA":
        image = image.convert("RGB").convert(mode)
    as_tf_sees_it = image.convert("RGB") if mode == "P" else image
    if mode == "RGBA":  # alpha over white, as stored in a JPEG
        white = Image.new("RGBA", image.size, "white")
        as_tf_sees_it = Image.alpha_composite(white, image).convert("RGB")
    small = hash_input(image)
    assert small.size == (32, 32) and small.mode == "L"
    assert np.array_equal(np.asarray(small), np.asarray(hash_input(as_tf_sees_it)))
    assert perceptual_hash(image) == int(str(imagehash.phash(small)), 16)


@pytest.mark.parametrize("size", [(1, 1), (96, 40), (97, 97), (640, 480), (333, 4000)])
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "I;16"])
def test_thumbnails_are_small_jpegs_of_the_image(size, mode):
    """report.html's thumbnail: a JPEG of at most 96 px a side that looks like the image
    (alpha over white, 16-bit as its high byte), from any decode the writer holds."""
    image = photo_like(*size, seed=7, mode="RGBA")
    if mode == "I;16":
        image = Image.fromarray(np.asarray(image.convert("L"), np.uint16) * 257)
    elif mode != "RGBA":
        image = image.convert("RGB").convert(mode)
    thumbnail = Image.open(io.BytesIO(thumbnail_of(image)))
    assert thumbnail.format == "JPEG" and thumbnail.mode in ("L", "RGB")
    assert 0 < max(thumbnail.size) <= THUMBNAIL_SIDE
    # The same picture: its mean grey is the source's, within JPEG's and the box's error.
    source_grey = np.asarray(hash_input(image), np.float64).mean()
    assert abs(np.asarray(thumbnail.convert("L"), np.float64).mean() - source_grey) < 12
    if max(size) >= 2 * THUMBNAIL_SIDE:  # reduced by a whole factor, never enlarged
        assert max(thumbnail.size) > THUMBNAIL_SIDE // 2


def test_every_prepared_image_carries_its_thumbnail():
    for data in (encode(rgb(), "JPEG"), encode(rgb(), "PNG"), encode(rgb(), "GIF")):
        image = prepare_image(data, KEEP)
        assert Image.open(io.BytesIO(image.thumbnail)).format == "JPEG"
