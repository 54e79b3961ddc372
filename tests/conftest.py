"""Shared test helpers: real image files made with Pillow, reading shards back, converted
outputs shared by the reader tests, and buckets on real storage servers (see
storage_servers.py)."""

import contextlib
import csv
import dataclasses
import hashlib
import io
import json
import os
import random
import shutil
import struct
import time
import zlib
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import psutil
import pytest
import tensorflow as tf
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from hypothesis import HealthCheck, settings
from PIL import Image
from storage_servers import FaultProxy, GcsEmulator, HdfsCluster, S3Server, gcs_error, s3_error

from image_tfrecords.core.file_formats import format_names
from image_tfrecords.core.storage.beam_filesystems import settle_beam_filesystems
from image_tfrecords.core.worker.examples import IMAGE_FEATURES

# The fast tier (`make test-fast`) and the durations it is chosen by.
pytest_plugins = ["tiers"]

# The end-to-end tests that take `sample_output` run once per format (--file_format).
FILE_FORMATS = format_names()

# Property tests: "ci" (the default) is reproducible and bounded: the same examples on
# every run, no example database, no per-example deadline (a pipeline run takes seconds).
# HYPOTHESIS_PROFILE=explore searches further, with fresh random examples each run.
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "explore",
    max_examples=2000,
    deadline=None,
    derandomize=False,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SAMPLE_DATA = Path(__file__).resolve().parent.parent / "sample_data"
# The tests' own reads and writes reach HDFS and S3 as the pipeline's do.
settle_beam_filesystems()


def photo_like(width: int, height: int, seed: int, mode: str = "RGB") -> Image.Image:
    """Smooth gradients plus noise: compresses and decodes like a photo, unlike flat colour."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    channels = [(np.sin(x / (7 + seed % 5 + c)) + np.cos(y / (5 + c))) * 60 + 128 for c in range(4)]
    pixels = np.stack(channels, axis=-1) + rng.normal(0, 12, (height, width, 4))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGBA")
    return image.convert(mode) if mode != "RGBA" else image


def encode(image: Image.Image, fmt: str, **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def tiny_manifest(folder) -> str:
    """Two JPEGs and m.csv with three rows (two train, one test) in `folder`; m.csv's path."""
    for name, label in (("a.jpg", "cat"), ("b.jpg", "dog")):
        (folder / name).write_bytes(encode(photo_like(32, 24, len(name + label)), "JPEG"))
    (folder / "m.csv").write_text("train,a.jpg,cat\ntrain,b.jpg,dog\ntest,a.jpg,cat\n")
    return str(folder / "m.csv")


def png_declaring(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims width x height: a decompression bomb's signature."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 16))
        + chunk(b"IEND", b"")
    )


ROW_ACCOUNTING = (
    "rows_read",
    "examples_written",
    "rows_in_examples",
    "rows_dead_lettered",
    "rows_discarded",
)


def row_accounting(summary: dict, *more: str) -> list:
    """summary.json's account of the rows a run read (rows read = rows in examples +
    dead-lettered + discarded), then the values of `more` of its keys."""
    return [summary[key] for key in (*ROW_ACCOUNTING, *more)]


def shard_pattern(output, split: str = "*") -> str:
    """Matches the shards of `split` in `output`, in the format it was written in."""
    from image_tfrecords.output import Output

    return f"{output}/{split}-*-of-*{Output.read(str(output)).shard_format.suffix}"


def shard_files(output: Path, split: str = "*") -> list[Path]:
    """The shard files of `split` in a local `output`, in name order."""
    return sorted(output.glob(Path(shard_pattern(output, split)).name))


def read_examples(pattern: str) -> list[tf.train.Example]:
    """The examples of the shards `pattern` matches, in name order."""
    return [
        tf.train.Example.FromString(record)
        for path in sorted(tf.io.gfile.glob(pattern))
        for record in shard_records(path)
    ]


def shard_records(path) -> list[bytes]:
    """A shard's records as its format's own library reads them (not our reader):
    tf.data for TFRecord, array_record's reader for ArrayRecord."""
    path = str(path)
    if path.endswith(".array_record"):
        from array_record.python.array_record_module import ArrayRecordReader

        reader = ArrayRecordReader(path)
        try:
            return reader.read_all()
        finally:
            reader.close()
    compression = "GZIP" if path.endswith(".gz") else ""
    return [record.numpy() for record in tf.data.TFRecordDataset(path, compression)]


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
        "image/object/difficult": tf.io.VarLenFeature(tf.int64),
        "image/object/truncated": tf.io.VarLenFeature(tf.int64),
        "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
    }


def parse_label_map(text: str) -> dict[int, str]:
    """id -> name, parsed by protobuf's text format into the Object Detection API's
    StringIntLabelMap message (the same field numbers as its string_int_label_map.proto)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="string_int_label_map.proto", package="object_detection.protos", syntax="proto2"
    )
    item = proto.message_type.add(name="StringIntLabelMapItem")
    item.field.add(name="name", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    item.field.add(name="id", number=2, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    item.field.add(
        name="display_name", number=3, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL
    )
    proto.message_type.add(name="StringIntLabelMap").field.add(
        name="item",
        number=1,
        type=field.TYPE_MESSAGE,
        label=field.LABEL_REPEATED,
        type_name=".object_detection.protos.StringIntLabelMapItem",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    message = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("object_detection.protos.StringIntLabelMap")
    )()
    text_format.Parse(text, message)
    return {entry.id: entry.name for entry in message.item}


SAMPLE_MANIFEST = SAMPLE_DATA / "manifest.csv"


def convert(output: Path, *flags: str) -> Path:
    """Runs a conversion in this process (the DirectRunner); returns the output folder."""
    from image_tfrecords.pipeline import run

    assert run.main(["--output_dir", str(output), *flags]) == 0
    return output


def printing(call, *arguments):
    """call(*arguments) and what it printed: a module fixture's runs (capsys is a test's)."""
    console = io.StringIO()
    with contextlib.redirect_stdout(console):
        result = call(*arguments)
    return result, console.getvalue()


def before_the_job(*arguments) -> tuple:
    """What convert (`arguments`: its command line) decides before its job starts, for
    the tests whose finding is made there, in milliseconds where a full run takes
    seconds: its checks and the console's lines on how the input is read (pipeline/run.py's
    _preflight), the label ids (its _pinned_vocabulary: None where they are learnt from
    TRAIN), and the items (rows, dead letters) the job reads from the manifests.
    Returns (pinned, items)."""
    from image_tfrecords.core.inputs.sources import read_source
    from image_tfrecords.pipeline import run
    from image_tfrecords.pipeline.options import ConvertOptions

    options = PipelineOptions(list(map(str, arguments))).view_as(ConvertOptions)
    manifests = run._preflight(options)
    pinned = run._pinned_vocabulary(options, manifests)
    return pinned, [
        item for source in manifests for item in read_source(source, options.row_rules())
    ]


def pool_workers() -> list[psutil.Process]:
    """This process's own worker-pool processes (core/worker/pool.py) still running: its
    children, not those of SDK workers it started (a module's Beam worker pool keeps its
    SDK workers, and their pools, between tests); an exited one not yet reaped is none."""
    found = []
    for child in psutil.Process().children():
        try:
            if "image_tfrecords.core.worker.pool" in child.cmdline() and (
                child.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


# How long a test's last DoFns may take to be torn down after it (a job submitted
# without waiting ends in Beam's threads, its pool stopped by the last teardown).
_TEARDOWN_SECONDS = 10.0


@pytest.fixture(autouse=True)
def no_worker_outlives_its_test():
    """Every run in this process stops its worker pool: one left running (a DoFn never
    torn down, a start_early never released) would serve the next test's run with this
    one's settings (its time limit, its buckets' options). Fails the test that left it."""
    yield
    deadline = time.monotonic() + _TEARDOWN_SECONDS
    while (left := pool_workers()) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        for process in left:
            process.kill()
        pytest.fail(f"{len(left)} worker-pool processes outlived the test: {left}")


@pytest.fixture(scope="session")
def sample_outputs(tmp_path_factory):
    """file format -> sample_data/ (the `make demo` set: 43 examples, 3 classes) in 2
    shards per split, converted once per session."""
    converted = {}

    def output(file_format: str) -> Path:
        if file_format not in converted:
            converted[file_format] = convert(
                tmp_path_factory.mktemp(f"sample-{file_format}") / "out",
                "--manifest",
                str(SAMPLE_MANIFEST),
                "--max_error_fraction",
                "0.25",
                "--num_shards",
                "2",
                "--file_format",
                file_format,
            )
        return converted[file_format]

    return output


@pytest.fixture(scope="session")
def hostile(tmp_path_factory):
    """test_engines.py's hostile set and the DirectRunner's output of it, run once a
    session for the engines' tests there and in test_spark_cluster.py."""
    # Imported here: test_engines imports this module.
    from test_engines import direct_run_of_the_hostile_set

    return direct_run_of_the_hostile_set(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="session")
def planted(tmp_path_factory):
    """The sample's photos, with planted near-copies (resized and recompressed) and byte
    copies; a patient per photo that its copies share: test_grouped_split.py's set, which
    test_engines.py splits on the engines too."""
    root = tmp_path_factory.mktemp("planted")
    rng = random.Random(5)
    rows = []
    for number, path in enumerate(sorted((SAMPLE_DATA / "images").glob("*/*.jpg"))):
        label, patient = path.parent.name, f"p{rng.randrange(12)}"
        name = f"{label}_{number}"
        shutil.copy(path, root / f"{name}.jpg")
        rows.append((f"{name}.jpg", label, patient))
        if number % 3 == 0:
            photo = Image.open(path).convert("RGB")
            smaller = photo.resize((photo.width * 4 // 5, photo.height * 4 // 5))
            smaller.save(root / f"{name}_small.jpg", quality=70)
            rows.append((f"{name}_small.jpg", label, patient))
        if number % 5 == 0:
            shutil.copy(path, root / f"{name}_copy.jpg")
            rows.append((f"{name}_copy.jpg", label, patient))
    with open(root / "m.csv", "w", newline="") as file:
        csv.writer(file).writerows([("image_uri", "label", "patient"), *rows])
    return root


@pytest.fixture(params=FILE_FORMATS)
def sample_output(request, sample_outputs):
    """The sample output in each file format: a test taking it runs once per format."""
    return sample_outputs(request.param)


@pytest.fixture
def tfrecord_output(sample_outputs):
    """The sample output as TFRecord, for what only that format has (its framing, .idx)."""
    return sample_outputs("tfrecord")


@pytest.fixture(scope="session")
def gzip_output(tmp_path_factory):
    """The same, one gzip-compressed shard per split."""
    return convert(
        tmp_path_factory.mktemp("gzip") / "out",
        "--manifest",
        str(SAMPLE_MANIFEST),
        "--max_error_fraction",
        "0.25",
        "--compression",
        "gzip",
    )


# image -> (split, labels); for detection a label is (text, (xmin, ymin, xmax, ymax)).
MULTI_LABEL_ROWS = {
    "a.jpg": ("train", ["cat", "dog"]),
    "b.jpg": ("train", ["dog"]),
    "c.jpg": ("train", ["cat"]),
    "d.jpg": ("validation", ["dog", "cat"]),
}
BOX_ROWS = {
    "a.jpg": ("train", [("cat", (0.1, 0.2, 0.5, 0.6)), ("dog", (0.5, 0.1, 0.9, 0.9))]),
    "b.jpg": ("train", []),
    "c.jpg": ("train", [("cat", (0.0, 0.0, 1.0, 1.0))]),
    "d.jpg": ("validation", [("dog", (0.25, 0.25, 0.75, 0.5))]),
}


def _small_images(root: Path) -> None:
    for seed, name in enumerate(sorted(MULTI_LABEL_ROWS)):
        (root / name).write_bytes(encode(photo_like(48, 36, seed), "JPEG"))


@pytest.fixture(scope="session")
def multi_label_output(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi")
    _small_images(root)
    (root / "m.csv").write_text(
        "split,image_uri,label\n"
        + "".join(
            f"{split},{name},{'|'.join(labels)}\n"
            for name, (split, labels) in MULTI_LABEL_ROWS.items()
        )
    )
    return convert(root / "out", "--manifest", str(root / "m.csv"), "--label_mode", "multi")


@pytest.fixture(scope="session")
def boxes_output(tmp_path_factory):
    root = tmp_path_factory.mktemp("boxes")
    _small_images(root)
    rows = [
        f"{split},{name},{label},{x0},{y0},,,{x1},{y1},,"
        for name, (split, boxes) in BOX_ROWS.items()
        for label, (x0, y0, x1, y1) in boxes
    ]
    rows += [f"{split},{name}," for name, (split, boxes) in BOX_ROWS.items() if not boxes]
    (root / "boxes.csv").write_text("\n".join(rows) + "\n")
    return convert(root / "out", "--manifest", str(root / "boxes.csv"), "--label_mode", "detection")


def copy_output(output: Path, destination: Path) -> Path:
    """A copy a test may damage, leaving the shared output intact."""
    return Path(shutil.copytree(output, destination))


def rewrite_records(shard: Path, change) -> None:
    """Rewrites a shard as its format's own library writes it (valid framing and hashes),
    calling `change(index, example)` on each record's tf.train.Example first."""
    examples = [tf.train.Example.FromString(record) for record in shard_records(shard)]
    for index, example in enumerate(examples):
        change(index, example)
    records = [example.SerializeToString() for example in examples]
    if shard.name.endswith(".array_record"):
        from array_record.python.array_record_module import ArrayRecordWriter

        writer = ArrayRecordWriter(str(shard), "group_size:1")
        for record in records:
            writer.write(record)
        writer.close()
        return
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in records:
            writer.write(record)


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

    `flags` are the Beam options a run needs to reach it; `secrets` what must never show;
    `server` the storage server behind the proxy.
    """

    url: str
    proxy: FaultProxy
    flags: list[str]
    secrets: tuple[str, ...]
    server: GcsEmulator | S3Server


@pytest.fixture(scope="session")
def _gcs_bucket(tmp_path_factory):
    """A GCS emulator for the whole session, reached by Beam's own GCS filesystem.

    google-cloud-storage goes to STORAGE_EMULATOR_HOST, which the run reads anonymously
    (core/storage/gcs_access.py) whatever the credentials: the authorized-user file here stands
    for a user's own, which must not be sent to Google or change that;
    test_an_emulator_needs_no_credentials runs with none at all.
    """
    server = GcsEmulator()
    proxy = FaultProxy(server.url, gcs_error, one_at_a_time=True)
    credentials = tmp_path_factory.mktemp("gcs-credentials") / "adc.json"
    credentials.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "emulator",
                "client_secret": GCS_CLIENT_SECRET,
                "refresh_token": "unused",
                "token": GCS_TOKEN,
                "expiry": "2999-01-01T00:00:00Z",
            }
        )
    )
    settings = {
        "STORAGE_EMULATOR_HOST": proxy.url,
        "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
        "GOOGLE_CLOUD_PROJECT": "test",
        "NO_GCE_CHECK": "true",
    }
    previous = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        server.create_bucket(BUCKET)
        yield Bucket(f"gs://{BUCKET}", proxy, [], (GCS_TOKEN, GCS_CLIENT_SECRET), server)
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
        yield Bucket(
            f"s3://{BUCKET}",
            proxy,
            [
                "--s3_endpoint_url",
                proxy.url,
                "--s3_region_name",
                "us-east-1",
                "--s3_access_key_id",
                S3_ACCESS_KEY_ID,
                "--s3_secret_access_key",
                S3_SECRET_ACCESS_KEY,
            ],
            (S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY),
            server,
        )
    finally:
        proxy.close()
        server.stop()


@pytest.fixture
def gcs(_gcs_bucket):
    """The session's GCS bucket, empty, with no fault injected and an empty request log."""
    _gcs_bucket.server.wipe()
    _gcs_bucket.proxy.reset()
    yield _gcs_bucket
    _gcs_bucket.proxy.reset()


@pytest.fixture
def s3(_s3_bucket):
    """The session's S3 bucket, with no fault injected and an empty request log; Beam's
    filesystems are set up to reach it. Not emptied: module fixtures keep their data in
    it, and moto holds objects in a dict (a write costs the same however many it holds)."""
    _s3_bucket.proxy.reset()
    FileSystems.set_options(PipelineOptions(_s3_bucket.flags))
    yield _s3_bucket
    _s3_bucket.proxy.reset()


@pytest.fixture(scope="session")
def _hdfs_cluster(tmp_path_factory):
    cluster = HdfsCluster(str(tmp_path_factory.mktemp("hdfs")))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def hdfs_flags(_hdfs_cluster):
    """The options that reach the session's HDFS (Hadoop's MiniDFSCluster), whose paths
    are hdfs://<path>; Beam's filesystems, as the tests' helpers use them, are set up to
    reach it, and list it as the pipeline does (core/storage/beam_filesystems.py)."""
    flags = [
        "--hdfs_host",
        "127.0.0.1",
        "--hdfs_port",
        str(_hdfs_cluster.port),
        "--hdfs_user",
        "trainer",
    ]
    FileSystems.set_options(PipelineOptions(flags))
    return flags


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
    return sorted(
        m.path[len(prefix) :] for m in FileSystems.match([prefix + "**"])[0].metadata_list
    )


def download(folder: str, local) -> None:
    """Copies every file under `folder` (any Beam filesystem) below the local dir `local`."""
    for relative in listing(folder):
        target = local / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(get(f"{folder.rstrip('/')}/{relative}"))


def voc_annotation(filename, size, objects):
    """A Pascal VOC annotation XML, as VOCdevkit and labelImg write it."""
    parts = "".join(
        f"<object><name>{name}</name><pose>Unspecified</pose><truncated>{truncated}"
        f"</truncated><difficult>{difficult}</difficult><bndbox><xmin>{x0}</xmin>"
        f"<ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
        for name, (x0, y0, x1, y1), difficult, truncated in objects
    )
    return (
        f"<annotation><folder>images</folder><filename>{filename}</filename>"
        f"<path>/home/someone/images/{filename}</path><source><database>Unknown"
        f"</database></source><size><width>{size[0]}</width><height>{size[1]}</height>"
        f"<depth>3</depth></size><segmented>0</segmented>{parts}</annotation>"
    )


# What summary.json says of the run rather than of its output.
# What summary.json says of the run rather than of the output: a reusing run's output is a
# full run's but for these (core/records/example_index.py).
# What a run that reused an earlier output says of it (--reuse_from, or --overwrite's
# default): not of the output, which is a full run's (tests/test_reuse.py).
REUSE_FACTS = ("reused_from", "examples_reused", "changes", "label_id_changes")
RUN_FACTS = ("options", "versions", "started_at", "finished_at", "run_id", *REUSE_FACTS)


def output_digests(output: Path) -> dict[str, str]:
    """SHA-256 of every published file but report.html (its page, not its data) and the
    SavedModel (TensorFlow gives it new ids on every run); summary.json without what
    describes the run, and the output folder's own path left out of every file."""
    found = {}
    for file in sorted(output.rglob("*")):
        relative = file.relative_to(output).as_posix()
        if (
            not file.is_file()
            or relative == "report.html"
            or relative.startswith((".tmp-", "transformed_metadata/"))
            or (relative.startswith("transform_fn/") and "/assets/" not in relative)
        ):
            continue
        data = file.read_bytes()
        if relative == "summary.json":
            summary = json.loads(data)
            data = json.dumps(
                {key: value for key, value in summary.items() if key not in RUN_FACTS},
                sort_keys=True,
            ).encode()
        data = data.replace(str(output).encode(), b"<output>")
        found[relative] = hashlib.sha256(data).hexdigest()
    return found
