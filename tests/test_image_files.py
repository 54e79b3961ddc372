"""image_tfrecords.core.imaging.image_files: reading image files, locally and from real GCS and S3
servers."""

import gzip

import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import put
from storage_servers import HOST, free_port, object_pattern
from test_images import JPEG_BYTES, PNG_BYTES, rejection

from image_tfrecords.core.imaging.image_files import read_image_bytes
from image_tfrecords.core.imaging.images import ImageRejected


def test_read_image_bytes_returns_the_file_unchanged(tmp_path):
    path = tmp_path / "photo.jpg"
    path.write_bytes(JPEG_BYTES)
    assert read_image_bytes(str(path)) == JPEG_BYTES


def test_read_image_bytes_does_not_decompress_by_extension(tmp_path):
    path = tmp_path / "photo.png.gz"
    path.write_bytes(gzip.compress(PNG_BYTES))
    assert read_image_bytes(str(path)) == path.read_bytes()


def test_empty_file_is_rejected(tmp_path):
    path = tmp_path / "empty.jpg"
    path.write_bytes(b"")
    assert _read_reason(str(path)) == "empty_file"


def test_missing_file_is_rejected(tmp_path):
    assert _read_reason(str(tmp_path / "missing.jpg")) == "file_not_found"


def test_directory_is_a_read_error(tmp_path):
    assert _read_reason(str(tmp_path)) == "read_error"


def test_text_named_jpg_reads_but_is_not_an_image(tmp_path):
    path = tmp_path / "notes.jpg"
    path.write_text("shopping list: eggs, milk\n")
    assert rejection(read_image_bytes(str(path))).reason == "not_an_image"


# Remote files, on the running servers of conftest's gcs and s3 buckets.


@pytest.fixture(params=["gcs", "s3"])
def bucket(request):
    return request.getfixturevalue(request.param)


def test_transient_server_errors_are_retried_and_the_file_arrives(bucket):
    uri = f"{bucket.url}/reading/transient.jpg"
    put(uri, JPEG_BYTES)
    bucket.proxy.reset()  # log only the read's requests
    bucket.proxy.fail(object_pattern("transient.jpg"), 503, times=2)
    assert read_image_bytes(uri) == JPEG_BYTES
    assert bucket.proxy.statuses(object_pattern("transient.jpg"))[:3] == [503, 503, 200]


@pytest.mark.parametrize("status, reason", [(404, "file_not_found"), (403, "read_error")])
def test_permanent_server_errors_are_rejected_with_their_status(bucket, status, reason):
    uri = f"{bucket.url}/reading/refused-{status}.jpg"
    put(uri, JPEG_BYTES)
    bucket.proxy.reset()
    bucket.proxy.fail(object_pattern(f"refused-{status}.jpg"), status)
    with pytest.raises(ImageRejected) as caught:
        read_image_bytes(uri)
    assert caught.value.reason == reason
    assert caught.value.message.startswith(f"HTTP {status}: ") and uri in caught.value.message
    assert bucket.proxy.statuses(object_pattern(f"refused-{status}.jpg")) == [status]


def test_missing_remote_file_is_rejected_as_not_found(bucket):
    with pytest.raises(ImageRejected) as caught:
        read_image_bytes(f"{bucket.url}/reading/never-written.jpg")
    assert (caught.value.reason, caught.value.message) == (
        "file_not_found",
        f"HTTP 404: no such file: {bucket.url}/reading/never-written.jpg",
    )


def test_unreachable_filesystem_is_a_read_error():
    # A WebHDFS address nothing listens on: neither the read nor the check whether the
    # file exists can get an answer, and no HTTP status.
    FileSystems.set_options(
        PipelineOptions(
            ["--hdfs_host", HOST, "--hdfs_port", str(free_port()), "--hdfs_user", "trainer"]
        )
    )
    assert _read_reason("hdfs://images/a.jpg") == "read_error"


def _read_reason(uri: str) -> str:
    with pytest.raises(ImageRejected) as caught:
        read_image_bytes(uri)
    return caught.value.reason
