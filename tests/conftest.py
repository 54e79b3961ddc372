"""Shared test helpers: real image files made with Pillow, and reading shards back."""

import io
import os
import pathlib
import struct
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from PIL import Image  # noqa: E402

from transforms.examples import IMAGE_FEATURES  # noqa: E402

# Property tests: "ci" (the default) is reproducible and bounded: the same examples on
# every run, no example database, no per-example deadline (a pipeline run takes seconds).
# HYPOTHESIS_PROFILE=explore searches further, with fresh random examples each run.
settings.register_profile(
    "ci", max_examples=200, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    "explore", max_examples=2000, deadline=None, derandomize=False, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SAMPLE_DATA = pathlib.Path(__file__).resolve().parent.parent / "sample_data"


def photo_like(width: int, height: int, seed: int, mode: str = "RGB") -> Image.Image:
    """Smooth gradients plus noise: compresses and decodes like a photo, unlike flat colour."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    channels = [(np.sin(x / (7 + seed % 5 + c)) + np.cos(y / (5 + c))) * 60 + 128
                for c in range(4)]
    pixels = np.stack(channels, axis=-1) + rng.normal(0, 12, (height, width, 4))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGBA")
    return image.convert(mode) if mode != "RGBA" else image


def encode(image: Image.Image, fmt: str, **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def png_declaring(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims width x height: a decompression bomb's signature."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b""))


def read_examples(pattern: str, compression: str = "") -> list[tf.train.Example]:
    files = sorted(tf.io.gfile.glob(pattern))
    return [tf.train.Example.FromString(record.numpy())
            for record in tf.data.TFRecordDataset(files, compression_type=compression)]


def feature(example: tf.train.Example, key: str):
    value = example.features.feature[key]
    kind = value.WhichOneof("kind")
    values = list(getattr(value, kind).value)
    return values[0] if len(values) == 1 else values



def object_detection_spec():
    """The keys and dtypes the TF Object Detection API's TfExampleDecoder reads."""
    dtypes = {"bytes": tf.string, "int64": tf.int64}
    spec = {key: tf.io.FixedLenFeature([], dtypes[kind]) for key, kind in IMAGE_FEATURES.items()}
    return spec | {
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
        "image/object/class/label": tf.io.VarLenFeature(tf.int64),
        "image/object/class/text": tf.io.VarLenFeature(tf.string),
    }


def parse_label_map(text: str) -> dict[int, str]:
    """id -> name, parsed by protobuf's text format into the Object Detection API's
    StringIntLabelMap message (the same field numbers as its string_int_label_map.proto)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="string_int_label_map.proto", package="object_detection.protos", syntax="proto2")
    item = proto.message_type.add(name="StringIntLabelMapItem")
    item.field.add(name="name", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    item.field.add(name="id", number=2, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    item.field.add(name="display_name", number=3, type=field.TYPE_STRING,
                   label=field.LABEL_OPTIONAL)
    proto.message_type.add(name="StringIntLabelMap").field.add(
        name="item", number=1, type=field.TYPE_MESSAGE, label=field.LABEL_REPEATED,
        type_name=".object_detection.protos.StringIntLabelMapItem")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    message = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("object_detection.protos.StringIntLabelMap"))()
    text_format.Parse(text, message)
    return {entry.id: entry.name for entry in message.item}
