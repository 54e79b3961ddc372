"""Images are images: Pillow opens only the formats the converter documents (JPEG, PNG,
GIF, BMP, TIFF, WebP), so no plugin that runs another program is reached. The one that
does, EPS, hands the data to Ghostscript: a stranger's PostScript named .jpg would run in
it. A fake `gs` on PATH that leaves a marker file is the trap (the program kept out, not
a stand-in for a part of the converter)."""

import ast
import io
import os
import pathlib

import pytest
from conftest import encode, photo_like
from PIL import EpsImagePlugin, Image
from source_trees import parsed

from image_tfrecords.core.imaging.images import (
    IMAGE_FORMATS,
    ImageRejected,
    ImageSettings,
    open_image,
    prepare_image,
)
from image_tfrecords.core.imaging.masks import class_map_png

ROOT = pathlib.Path(__file__).resolve().parent.parent
POSTSCRIPT = (
    b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n%%EndComments\n"
    b"newpath 0 0 moveto 16 16 lineto stroke\nshowpage\n%%EOF\n"
)


@pytest.fixture
def ghostscript_trap(tmp_path, monkeypatch):
    """A `gs` first on PATH that writes the returned marker file when it is run."""
    marker = tmp_path / "gs-ran"
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "gs"
    fake.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setattr(EpsImagePlugin, "gs_binary", None)  # Pillow's cached search for gs
    return marker


def test_postscript_named_jpg_is_not_an_image_and_ghostscript_never_runs(
    ghostscript_trap, tmp_path
):
    with pytest.raises(ImageRejected) as rejected:
        prepare_image(POSTSCRIPT, ImageSettings())
    assert rejected.value.reason == "not_an_image"
    assert "JPEG, PNG, GIF, BMP, TIFF or WebP" in rejected.value.message
    with pytest.raises(ImageRejected) as rejected:  # a segmentation map, opened elsewhere
        class_map_png(
            POSTSCRIPT, prepare_image(encode(photo_like(16, 16, 0), "PNG"), ImageSettings())
        )
    assert rejected.value.reason == "invalid_mask"
    with pytest.raises(OSError):
        open_image(POSTSCRIPT)
    assert not ghostscript_trap.exists()
    # The trap works: Pillow left to try every plugin runs it.
    with pytest.raises(Exception):
        Image.open(io.BytesIO(POSTSCRIPT)).load()
    assert ghostscript_trap.exists()


@pytest.mark.parametrize("fmt", ["PPM", "ICO", "TGA", "PCX"])
def test_formats_the_converter_does_not_document_are_not_images(fmt):
    with pytest.raises(ImageRejected) as rejected:
        prepare_image(encode(photo_like(16, 16, 0), fmt), ImageSettings())
    assert rejected.value.reason == "not_an_image"


def test_every_image_the_code_opens_is_opened_with_the_documented_formats():
    """Image.open without formats= tries every plugin, EPS included: each call passes the
    converter's list (image_tfrecords.core.imaging.images.open_image does)."""
    unlimited = []
    folders = ("core", "transforms", "image_tfrecords", "pipeline")
    trees = parsed(path for folder in folders for path in (ROOT / folder).rglob("*.py"))
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "open"
                and ast.unparse(node.func.value) == "Image"
                and "formats" not in {keyword.arg for keyword in node.keywords}
            ):
                unlimited.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert unlimited == []
    assert "EPS" not in IMAGE_FORMATS
