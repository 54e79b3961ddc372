"""Reading image files and turning their bytes into what an example stores.

Plain, thread-safe functions that touch no process-wide state (warnings filters,
Pillow's module globals). Pillow and NumPy only, no Beam or TensorFlow: the worker
processes that write shards (core/worker/pool.py) import this module and nothing heavier.
Reading the files is core/imaging/image_files.py's.
JPEG and PNG bytes are stored untouched whenever TensorFlow decodes them to the same
pixels as Pillow; everything else is re-encoded, and the reason is recorded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import struct
import zlib
from typing import NamedTuple

import numpy as np
from PIL import ExifTags, Image, ImageFile, ImageOps

from image_tfrecords.core.records.image_settings import ImageSettings

REASONS = (
    "file_not_found",  # the URI names no file
    "read_error",  # a directory, no permission, or the filesystem failed
    "not_a_file",  # a FIFO, device or socket (core/storage/storage.py's open_local)
    "empty_file",  # zero bytes
    "not_an_image",  # not in a format of IMAGE_FORMATS
    "truncated_image",  # the data ends before the image does
    "decompression_bomb",  # width * height above ImageSettings.max_pixels
    "decode_error",  # recognised but undecodable: corrupt data, unsupported variant
    "encode_error",  # decoded, but converting or re-encoding it failed
    "decode_crash",  # the decoding process died on it (a crash, the OOM killer)
    "decode_timeout",  # decoding took longer than --decode_timeout
    # The image's segmentation map (core/imaging/masks.py): not one, or not the image's size.
    "invalid_mask",
    # Its objects' keypoints, padded to the most any has, more than one image may hold.
    "invalid_keypoints",
    "size_mismatch",
    # A URL (core/storage/downloads.py): beside these, http_<status> for each HTTP error status,
    # and for a redirect that is not followed (to another host, or too many).
    "http_timeout",  # no answer, or a stalled body, within --download_timeout
    "connection_error",  # refused, reset or cut, after the retries
    "too_large",  # more bytes than --max_download_mb (a URL, an object, a local file)
)
_HTTP_STATUS_REASON = re.compile(r"http_[345]\d\d")

# The formats the converter reads (docs/output/what-is-written.md), as Pillow names them;
# no other plugin is ever tried. EPS would hand the data to Ghostscript (a program, run on
# a stranger's PostScript named .jpg), and the rarer ones are code no dataset needs.
# JPEG's plugin opens MPO too (a JPEG with extra frames appended, from phones).
IMAGE_FORMATS = ("JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP")
_FORMAT_NAMES = "JPEG, PNG, GIF, BMP, TIFF or WebP"
_JPEG_FORMATS = frozenset({"JPEG", "MPO"})  # MPO: a JPEG with extra frames appended (phones)
_JPEG_KEPT_MODES = frozenset({"L", "RGB"})  # CMYK/YCCK are the only other modes Pillow opens
_TRANSPOSING = range(2, 9)  # EXIF orientations that move pixels; others are 1 or invalid
_AXES_SWAPPED = range(5, 9)
_CHANNELS = {"L": 1, "I;16": 1, "LA": 2, "RGB": 3, "P": 3, "RGBA": 4}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG markers that have no length field: TEM and RST0-7.
_JPEG_STANDALONE_MARKERS = frozenset({0x01, *range(0xD0, 0xD8)})
# Where a scan's entropy-coded data ends: 0xFF not followed by stuffing (00), RSTn or fill.
_JPEG_SCAN_END = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
# Channels libpng (so TF) yields per IHDR colour type; Pillow's modes differ for 16-bit
# grey+alpha (opened as RGBA), and palettes expand to RGB, or RGBA given a tRNS chunk.
_PNG_COLOR_TYPE_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
# pHash looks at a 32x32 grey copy of the image (hash_input), made from whatever the
# decode gave: a kept JPEG's 1/8-scale check decode, or the image as stored.
_HASH_SIDE = 32
# report.html's thumbnails: small enough to embed hundreds in one page (~2 KB each).
THUMBNAIL_SIDE = 96
THUMBNAIL_QUALITY = 75
# The first 8 rows of the unnormalised DCT-II matrix (scipy.fftpack.dct's default, which
# imagehash uses): 2 cos(pi k (2n + 1) / 2N).
_DCT_LOW = 2 * np.cos(
    np.pi * np.arange(8)[:, None] * (2 * np.arange(_HASH_SIDE) + 1) / (2 * _HASH_SIDE)
)


class ImageRejected(Exception):
    """An image that cannot become an example.

    `reason` is a stable machine code (one of REASONS, or http_<status>), `message` human
    text.
    """

    def __init__(self, reason: str, message: str):
        if reason not in REASONS and not _HTTP_STATUS_REASON.fullmatch(reason):
            raise ValueError(f"unknown rejection reason {reason!r}")
        # Both in args so the exception pickles (Beam may ship it between processes).
        super().__init__(reason, message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


@dataclasses.dataclass(frozen=True)
class PreparedImage:
    """The bytes to store for one image, described as TensorFlow will decode them."""

    encoded: bytes  # what goes into image/encoded
    format: str  # "jpeg" or "png", the format of `encoded`
    width: int
    height: int
    channels: int  # the last dimension of tf.io.decode_image(encoded)
    source_format: str  # Pillow's name of the source format, e.g. "JPEG", "GIF"
    reencoded: str | None  # None: `encoded` is the source bytes; else format, mode,
    # bit_depth, orientation, resized or requested_format (the first that applies, in that
    # order)
    # (width, height) of the source file as stored, before any resize or EXIF rotation:
    # what pixel boxes were drawn on
    source_size: tuple[int, int]
    # Hex SHA-256 of `encoded`: the example's key, and what --dedupe compares. Computed
    # where the image is decoded, off the process that writes the shard.
    sha256: str
    # The 64-bit pHash of the pixels stored, from the same decode: near-copies
    # (resized, recompressed, re-saved, slightly cropped or brightened) differ in few bits.
    perceptual_hash: int
    # A small JPEG of the same decode, for report.html (thumbnail_of).
    thumbnail: bytes
    # The EXIF orientation (2 to 8) the stored pixels were turned upright by; 1: as stored.
    turned: int = 1

    @property
    def upright_source_size(self) -> tuple[int, int]:
        """source_size as the image is shown once turned upright."""
        return self.source_size[::-1] if self.turned in _AXES_SWAPPED else self.source_size


def prepare_image(data: bytes, settings: ImageSettings) -> PreparedImage:
    """Decodes `data` with Pillow (proving it is an image) and returns the bytes to store."""
    image, target, orientation, reason, source_size = _decode(data, settings)
    source_format = image.format or "unknown"
    # Pillow accepts PNGs whose checksums or IEND TF's libpng rejects: check every source
    # PNG, so whether one is rejected does not depend on the settings.
    png_channels = _png_channels(data) if source_format == "PNG" else None
    if source_format in _JPEG_FORMATS:
        _check_jpeg_markers(data)
    if reason is None:
        channels = png_channels if png_channels is not None else _CHANNELS[image.mode]
        return PreparedImage(
            data,
            "jpeg" if source_format in _JPEG_FORMATS else "png",
            *source_size,
            channels,
            source_format,
            None,
            source_size,
            _sha256(data),
            *hash_and_thumbnail(image),
        )

    out_format = settings.image_format
    if out_format == "keep":
        out_format = _kept_as(source_format, image, data)
    try:
        if orientation in _TRANSPOSING:
            image = ImageOps.exif_transpose(image)
        if out_format == "jpeg":
            image = _jpeg_mode(image)
        else:
            image = _png_mode(image, resizing=target is not None, keep_16_bit=settings.keep_16_bit)
        if target is not None:
            size = target[::-1] if orientation in _AXES_SWAPPED else target
            image = image.resize(size, Image.Resampling.LANCZOS)
        encoded = _encode(image, out_format, settings.jpeg_quality)
        hashed, small = hash_and_thumbnail(image)
    except Exception as error:  # Pillow's conversions and encoders raise assorted types
        raise ImageRejected("encode_error", f"cannot re-encode as {out_format}: {error}") from error
    return PreparedImage(
        encoded,
        out_format,
        image.width,
        image.height,
        _CHANNELS[image.mode],
        source_format,
        reason,
        source_size,
        _sha256(encoded),
        hashed,
        small,
        orientation if orientation in _TRANSPOSING else 1,
    )


def perceptual_hash(image: Image.Image) -> int:
    """The pHash of the image as TensorFlow will see it (alpha over white, 16-bit as its
    high byte), as a 64-bit integer: imagehash.phash(hash_input(image)), bit for bit
    (tests/test_images.py).

    imagehash.phash costs ~300 us an image, half as much as the JPEG check it follows
    (most of it per-call overhead in NumPy and SciPy on 64 numbers); the same steps here
    cost ~35 us alone and ~60 us between decodes, whose caches they share, with no SciPy
    in the decoding processes (bench/RESULTS.md, issue 15).
    """
    # imagehash.phash of a 32x32 grey image: its 2-D DCT-II, the 8x8 lowest
    # frequencies against their median, read row by row, the first bit the highest.
    small = hash_input(image)
    pixels = np.frombuffer(small.tobytes(), np.uint8).reshape(_HASH_SIDE, _HASH_SIDE)
    low = _DCT_LOW @ pixels.astype(np.float64) @ _DCT_LOW.T
    middle = np.sort(low, axis=None)
    median = (middle[31] + middle[32]) / 2
    return int.from_bytes(np.packbits(low > median).tobytes(), "big")


def hash_input(image: Image.Image) -> Image.Image:
    """What perceptual_hash hashes: the image in grey at 32x32.

    Resized by BILINEAR, not imagehash's LANCZOS: on the planted copies of
    bench/near_duplicate_threshold.py both found the same (recall 0.897 and 0.899 at
    distance 10, one distinct pair fewer, measured on the same input), and BILINEAR costs
    11 us here against 31 us, most of LANCZOS's going to its weights, which Pillow
    computes on every call. A box filter costs 3 us less again and finds fewer PNG copies
    of JPEGs.
    """
    # A box reduction to no less than 32 pixels first: the resize costs with its input (a
    # 12-megapixel image's would cost more than the rest of the hash).
    factor = min(image.size) // _HASH_SIDE
    image = _jpeg_mode(image).convert("L")
    if factor > 1:
        image = image.reduce(factor)
    return image.resize((_HASH_SIDE, _HASH_SIDE), Image.Resampling.BILINEAR)


def hash_and_thumbnail(image: Image.Image) -> tuple[int, bytes]:
    """The pHash and the thumbnail of one decode, both from one reduction of it to at
    most THUMBNAIL_SIDE pixels a side: a large decode is reduced once, not twice (for a
    4000x3000 PNG, the hash's own grey conversion and reduction cost ~23 ms)."""
    small = _thumbnail_sized(image)
    return perceptual_hash(small), _thumbnail_jpeg(small)


def thumbnail_of(image: Image.Image) -> bytes:
    """A JPEG of the image, reduced by a whole factor to at most THUMBNAIL_SIDE pixels a
    side, for report.html's grids.

    Made from the decode at hand: a kept JPEG's check decode is 1/8 scale, so a source
    under 8 x THUMBNAIL_SIDE pixels gives a smaller thumbnail (the page scales it up).
    """
    return _thumbnail_jpeg(_thumbnail_sized(image))


def _thumbnail_sized(image: Image.Image) -> Image.Image:
    """The image as TensorFlow will see it, reduced by a whole factor to at most
    THUMBNAIL_SIDE pixels a side. A box reduction (~10 us) rather than a resampling
    filter (~110 us on the bench's sizes, measured): at this size the difference does not
    show, and every image pays it."""
    factor = -(-max(image.size) // THUMBNAIL_SIDE)
    small = _jpeg_mode(image)
    return small.reduce(factor) if factor > 1 else small


def _thumbnail_jpeg(small: Image.Image) -> bytes:
    buffer = io.BytesIO()
    small.save(buffer, "JPEG", quality=THUMBNAIL_QUALITY)
    return buffer.getvalue()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _kept_as(source_format: str, image: Image.Image, data: bytes) -> str:
    """What --image_format keep re-encodes a source as: JPEG stays JPEG; a lossy WebP
    without alpha becomes JPEG (its loss is paid already: as a PNG it took about 11x its
    size); everything else PNG, lossless and with its alpha (a lossy WebP's included,
    since JPEG has no alpha channel)."""
    if source_format in _JPEG_FORMATS:
        return "jpeg"
    if source_format == "WEBP" and _is_lossy_webp(data) and "A" not in image.getbands():
        return "jpeg"
    return "png"


def _is_lossy_webp(data: bytes) -> bool:
    """Whether a WebP holds a lossy ("VP8 ") bitstream rather than a lossless ("VP8L")
    one: the first chunk after the RIFF header, or one inside an extended (VP8X) file.
    An animation's frames sit inside ANMF chunks and count as lossless (kept as PNG)."""
    offset = 12  # "RIFF", size, "WEBP"
    while offset + 8 <= len(data):
        kind = data[offset : offset + 4]
        if kind in (b"VP8 ", b"VP8L"):
            return kind == b"VP8 "
        size = int.from_bytes(data[offset + 4 : offset + 8], "little")
        offset += 8 + size + (size & 1)  # chunks are padded to an even size
    return False


class _Decoded(NamedTuple):
    image: ImageFile.ImageFile  # loaded; smaller than the source when only checked
    target: tuple[int, int] | None  # the size to resize to (source axes), or None
    orientation: object  # the EXIF orientation
    reason: str | None  # why it is re-encoded; None: the source bytes are stored
    source_size: tuple[int, int]


def _decode(data: bytes, settings: ImageSettings) -> _Decoded:
    """Decodes the image, and decides whether and how it is re-encoded."""
    try:
        image = _open(data, settings.max_pixels)
        source_size = image.size
        target = _fit(source_size, settings.max_side)
        if image.format in _JPEG_FORMATS:
            # A JPEG's EXIF comes with its header, so its fate is known before decoding,
            # and libjpeg can decode at 1/2, 1/4 or 1/8 scale for far less work.
            orientation = _orientation(image)
            reason = _reencode_reason(image, orientation, target, settings)
            if reason is None:
                # Decoded only to prove it decodes, and for its perceptual hash: at 1/8
                # scale libjpeg still reads every entropy-coded bit (where corruption and
                # truncation show) but skips most of the IDCT and colour conversion,
                # ~40% of a full decode. An image under 128 pixels is decoded larger,
                # so that the hash has 16 pixels a side or more to look at.
                image.draft(None, (_HASH_SIDE // 2, _HASH_SIDE // 2))
            elif target is not None:
                # Twice the target or more (as Image.thumbnail does) leaves LANCZOS detail
                # to filter.
                image.draft(None, (2 * target[0], 2 * target[1]))
            image.load()
        else:
            image.load()
            orientation = _orientation(image)
            reason = _reencode_reason(image, orientation, target, settings)
    except ImageRejected:
        raise
    except Image.DecompressionBombError as error:  # plugins' own checks (GIF, TIFF tiles)
        raise ImageRejected("decompression_bomb", str(error)) from error
    except Exception as error:  # plugins raise OSError, SyntaxError, ValueError, EOFError...
        text = str(error) or type(error).__name__
        # Pillow's words for data ending early: "image file is truncated", "Truncated File
        # Read", "truncated PNG file". Its "broken data stream" means corrupt, not short.
        truncated = "truncated" in text.lower()
        raise ImageRejected("truncated_image" if truncated else "decode_error", text) from error
    return _Decoded(image, target, orientation, reason, source_size)


def _orientation(image: Image.Image) -> object:
    return image.getexif().get(ExifTags.Base.Orientation, 1)


def open_image(data: bytes, formats: tuple[str, ...] = IMAGE_FORMATS) -> ImageFile.ImageFile:
    """Image.open of `data`, trying the plugins of `formats` (some of IMAGE_FORMATS) only:
    how every image, mask or thumbnail is opened outside the shard writer's own checks
    (_open)."""
    return Image.open(io.BytesIO(data), formats=formats)


def _open(data: bytes, max_pixels: int) -> ImageFile.ImageFile:
    """Image.open restricted to IMAGE_FORMATS, with `max_pixels` checked before any pixel
    is allocated.

    Image.open itself applies the process-wide Image.MAX_IMAGE_PIXELS and reports through
    the global warnings machinery; neither can be set per call from a thread pool, so this
    runs the same plugin search with our own limit in their place.
    """
    load_plugins()
    file = io.BytesIO(data)
    prefix = data[:16]
    failures, cut_short = [], []
    for name in IMAGE_FORMATS:
        factory, accept = Image.OPEN[name]
        recognised = False
        try:
            if accept:
                result = accept(prefix)
                if not result or isinstance(result, str):  # a str: known but unsupported
                    continue
                recognised = True
            file.seek(0)
            image = factory(file, "")
        except (SyntaxError, IndexError, TypeError, struct.error) as error:
            # What Image.open also takes to mean "not this format". A matching signature
            # whose header the plugin read to the end of the data is a file cut short.
            if recognised:
                problems = cut_short if file.tell() >= len(data) else failures
                problems.append(f"{name} header unreadable: {error}")
            continue
        width, height = image.size
        if width * height > max_pixels:
            raise ImageRejected(
                "decompression_bomb", f"{width}x{height} exceeds the limit of {max_pixels} pixels"
            )
        return image
    if cut_short:
        raise ImageRejected(
            "truncated_image", f"the data ends inside the header ({'; '.join(cut_short)})"
        )
    detail = f" ({'; '.join(failures)})" if failures else ""
    raise ImageRejected(
        "not_an_image", f"not in an image format the converter reads ({_FORMAT_NAMES}){detail}"
    )


def load_plugins() -> None:
    """Imports Pillow's format plugins, registering each of IMAGE_FORMATS (the others are
    imported too, and never tried)."""
    Image.preinit()
    Image.init()


def _fit(size: tuple[int, int], max_side: int | None) -> tuple[int, int] | None:
    """The size with the longer side exactly `max_side`, or None when no resize is needed."""
    width, height = size
    if max_side is None or max(width, height) <= max_side:
        return None
    if width >= height:
        return max_side, max(1, round(height * max_side / width))
    return max(1, round(width * max_side / height)), max_side


def _reencode_reason(
    image: Image.Image, orientation: object, target: tuple[int, int] | None, settings: ImageSettings
) -> str | None:
    """Why the source bytes cannot be stored as they are, or None when they can."""
    if image.format in _JPEG_FORMATS:
        source = "jpeg"
    elif image.format == "PNG":
        source = "png"  # every mode Pillow opens a PNG in is one libpng decodes alike
    else:
        return "format"
    if source == "jpeg" and image.mode not in _JPEG_KEPT_MODES:
        return "mode"
    if _is_16_bit(image) and not settings.keep_16_bit:
        return "bit_depth"
    if orientation in _TRANSPOSING:
        return "orientation"
    if target is not None:
        return "resized"
    if settings.image_format not in ("keep", source):
        return "requested_format"
    return None


def _png_channels(data: bytes) -> int:
    """Checks a PNG's chunks as libpng does; returns the channels TF decodes it to.

    Critical chunks must pass their CRC and the file must reach a complete IEND; libpng
    only warns about ancillary chunks, so their checksums are not checked either.
    """
    view = memoryview(data)
    position = len(_PNG_SIGNATURE)
    color_type, has_trns = None, False
    while True:
        if position + 12 > len(data):
            raise ImageRejected("truncated_image", "PNG data ends before its IEND chunk")
        length, kind = struct.unpack_from(">I4s", data, position)
        end = position + 12 + length
        if end > len(data):
            raise ImageRejected("truncated_image", f"PNG data ends inside a {kind!r} chunk")
        critical = not kind[0] & 0x20
        stored_crc = struct.unpack_from(">I", data, end - 4)[0]
        if critical and zlib.crc32(view[position + 4 : end - 4]) != stored_crc:
            raise ImageRejected("decode_error", f"PNG {kind!r} chunk fails its CRC check")
        if kind == b"IHDR":
            color_type = data[position + 17]
        elif kind == b"tRNS":
            has_trns = True
        elif kind == b"IEND":
            break
        position = end
    if color_type == 3 and has_trns:
        return 4
    return _PNG_COLOR_TYPE_CHANNELS[color_type]


def _check_jpeg_markers(data: bytes) -> None:
    """Walks a JPEG's markers from SOI to EOI, as libjpeg (so TF) reads them.

    Pillow stops as soon as it has every pixel; libjpeg reads on to EOI and fails when
    the data ends first, e.g. where a flipped bit or a stray 0xFF in the last scan makes
    a marker whose segment runs past the end. Bytes between segments are skipped, as
    libjpeg does. A corrupt length that TF would survive is rejected too (rare).
    """
    position, end = 2, len(data)
    while True:
        position = data.find(b"\xff", position)
        if position < 0:
            raise ImageRejected("decode_error", "JPEG data ends before its EOI marker")
        while position < end and data[position] == 0xFF:  # fill bytes
            position += 1
        if position >= end:
            raise ImageRejected("decode_error", "JPEG data ends before its EOI marker")
        code = data[position]
        position += 1
        if code == 0xD9:  # EOI
            return
        if code == 0x00 or code in _JPEG_STANDALONE_MARKERS:
            continue  # 0xFF00 outside a scan is a stray byte pair
        length = int.from_bytes(data[position : position + 2], "big")
        if length < 2 or position + length > end:
            raise ImageRejected(
                "decode_error",
                f"JPEG segment 0xFF{code:02X} at byte "
                f"{position - 2} has a bad length or runs past the end",
            )
        position += length
        if code == 0xDA:  # SOS: entropy-coded data up to the next marker
            scan_end = _JPEG_SCAN_END.search(data, position)
            position = scan_end.start() if scan_end else end


def _is_16_bit(image: Image.Image) -> bool:
    """Greyscale of more than 8 bits: Pillow's modes I;16* and I (other 16-bit PNGs,
    colour or with alpha, Pillow opens with 8 bits a channel, as TF decodes them)."""
    return image.mode == "I" or image.mode.startswith("I;16")


def _png_mode(image: Image.Image, resizing: bool, keep_16_bit: bool) -> Image.Image:
    """The image in a mode PNG stores and TF decodes to the same pixels; 16-bit greyscale
    as 8-bit (its high byte) unless `keep_16_bit`."""
    if _is_16_bit(image) and not keep_16_bit:
        return _high_byte(image)
    if image.mode in ("L", "LA", "RGB", "RGBA", "I;16"):
        return image
    if image.mode == "P" and not image.has_transparency_data and not resizing:
        return image  # a palette PNG is smaller; resampling needs real colours
    if image.mode == "1":
        return image.convert("L")
    if _is_16_bit(image):
        # Via "I": Pillow's direct I;16B -> I;16 conversion clips to 8 bits.
        return image.convert("I").convert("I;16")
    return image.convert("RGBA" if image.has_transparency_data else "RGB")


def _jpeg_mode(image: Image.Image) -> Image.Image:
    """The image in L or RGB, the modes JPEG stores; alpha is composited over white."""
    if image.mode in _JPEG_KEPT_MODES:
        return image
    if image.mode == "1":
        return image.convert("L")
    if _is_16_bit(image):
        return _high_byte(image)
    if image.has_transparency_data:
        image = image.convert("LA" if image.mode == "LA" else "RGBA")
        white = Image.new(image.mode, image.size, "white")
        return Image.alpha_composite(white, image).convert(image.mode[:-1])
    return image.convert("RGB")


def _high_byte(image: Image.Image) -> Image.Image:
    """A 16-bit greyscale image as 8-bit, as TF's uint8 decode of a 16-bit PNG gives it."""
    return image.convert("I").point(lambda value: value / 256).convert("L")


def _encode(image: Image.Image, out_format: str, jpeg_quality: int) -> bytes:
    # Pixels only: a source's ICC profile or EXIF may no longer match the converted pixels.
    image.info = {}
    buffer = io.BytesIO()
    if out_format == "jpeg":
        image.save(buffer, "JPEG", quality=jpeg_quality)
    else:
        image.save(buffer, "PNG")
    return buffer.getvalue()
