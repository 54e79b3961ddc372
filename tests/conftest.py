"""Shared test helpers: real image files made with Pillow, reading shards back, and
buckets on real storage servers (see storage_servers.py)."""

import dataclasses
import io
import json
import os
import struct
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from apache_beam.io.filesystem import CompressionTypes  # noqa: E402
from apache_beam.io.filesystems import FileSystems  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from PIL import Image  # noqa: E402

from storage_servers import FaultProxy, GcsEmulator, S3Server, gcs_error, s3_error  # noqa: E402


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



# --- buckets on running servers ------------------------------------------------------------

BUCKET = "training-data"  # a valid name on GCS and on S3
# Credentials the runs are given; no output, log line or printed text may contain them.
GCS_TOKEN = "ya29.gcs-token-never-shown"
GCS_CLIENT_SECRET = "gcs-client-secret-never-shown"
S3_ACCESS_KEY_ID = "AKIAS3KEYNEVERSHOWN0"
S3_SECRET_ACCESS_KEY = "s3-secret-key-never-shown"


@dataclasses.dataclass
class Bucket:
    """A bucket on a running storage server, reached through a FaultProxy.

    `flags` are the Beam options a run needs to reach it; `secrets` what must never show.
    """

    url: str
    proxy: FaultProxy
    flags: list[str]
    secrets: tuple[str, ...]


@pytest.fixture(scope="session")
def _gcs_bucket(tmp_path_factory):
    """A GCS emulator for the whole session, reached by Beam's own GCS filesystem.

    google-cloud-storage goes to STORAGE_EMULATOR_HOST. Beam first looks for Google
    credentials: an authorized-user file with an unexpired token gives it some at once,
    where no credentials at all cost Beam's ~20 s of retries before it connects
    anonymously; NO_GCE_CHECK keeps google-auth from probing the GCE metadata server.
    """
    server = GcsEmulator()
    proxy = FaultProxy(server.url, gcs_error)
    credentials = tmp_path_factory.mktemp("gcs-credentials") / "adc.json"
    credentials.write_text(json.dumps({
        "type": "authorized_user", "client_id": "emulator", "client_secret": GCS_CLIENT_SECRET,
        "refresh_token": "unused", "token": GCS_TOKEN, "expiry": "2999-01-01T00:00:00Z"}))
    settings = {"STORAGE_EMULATOR_HOST": proxy.url, "GOOGLE_APPLICATION_CREDENTIALS":
                str(credentials), "GOOGLE_CLOUD_PROJECT": "test", "NO_GCE_CHECK": "true"}
    previous = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        server.create_bucket(BUCKET)
        yield Bucket(f"gs://{BUCKET}", proxy, [], (GCS_TOKEN, GCS_CLIENT_SECRET))
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        proxy.close()
        server.stop()


@pytest.fixture(scope="session")
def _s3_bucket():
    """An S3 server (moto) for the whole session, reached by Beam's own S3 filesystem."""
    server = S3Server()
    proxy = FaultProxy(server.url, s3_error)
    try:
        server.create_bucket(BUCKET)
        yield Bucket(f"s3://{BUCKET}", proxy,
                     ["--s3_endpoint_url", proxy.url, "--s3_region_name", "us-east-1",
                      "--s3_access_key_id", S3_ACCESS_KEY_ID,
                      "--s3_secret_access_key", S3_SECRET_ACCESS_KEY],
                     (S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY))
    finally:
        proxy.close()
        server.stop()


@pytest.fixture
def gcs(_gcs_bucket):
    """The session's GCS bucket, with no fault injected and an empty request log."""
    _gcs_bucket.proxy.reset()
    yield _gcs_bucket
    _gcs_bucket.proxy.reset()


@pytest.fixture
def s3(_s3_bucket):
    """The session's S3 bucket, as `gcs`; Beam's filesystems are set up to reach it."""
    _s3_bucket.proxy.reset()
    FileSystems.set_options(PipelineOptions(_s3_bucket.flags))
    yield _s3_bucket
    _s3_bucket.proxy.reset()


def put(path: str, data: bytes) -> None:
    """Writes a file anywhere Beam can (the bytes as they are, whatever the name)."""
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as out:
        out.write(data)


def get(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as data:
        return data.read()


def listing(folder: str) -> list[str]:
    """The paths of every file under `folder`, relative to it, sorted."""
    prefix = folder.rstrip("/") + "/"
    return sorted(m.path[len(prefix):] for m in FileSystems.match([prefix + "**"])[0].metadata_list)


def download(folder: str, local) -> None:
    """Copies every file under `folder` (any Beam filesystem) below the local dir `local`."""
    for relative in listing(folder):
        target = local / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(get(f"{folder.rstrip('/')}/{relative}"))
