"""Reading image files (core/storage/storage.py: local, or any scheme of Beam's FileSystems; URLs
through core/storage/downloads.py), with the reasons a read fails."""

from __future__ import annotations

import io
import os
from typing import BinaryIO

from image_tfrecords.core.imaging.images import ImageRejected
from image_tfrecords.core.storage import storage
from image_tfrecords.core.storage.downloads import (
    DownloadFailed,
    DownloadSettings,
    download,
    is_url,
)


def read_image_bytes(uri: str, downloads: DownloadSettings = DownloadSettings()) -> bytes:
    """Reads the whole file (local paths, any Beam scheme, http:// and https:// URLs), of
    at most `downloads.max_bytes` (--max_download_mb): a larger one is too_large, read no
    further. A local path that names a FIFO, device or socket is not_a_file, not opened
    for a read that could wait or run for ever.

    Transient server errors (HTTP 429, 5xx, dropped connections) are retried with backoff
    by the filesystem's own client (google-cloud-storage for gs://, botocore for s3://),
    so they are not retried again here; what still fails is rejected, with the HTTP status
    in the message when the server gave one. A URL is downloaded as `downloads` says
    (core/storage/downloads.py), its failures rejected by their own reasons.
    """
    if is_url(uri):
        try:
            data = download(uri, downloads)
        except DownloadFailed as failed:
            raise ImageRejected(failed.reason, failed.message) from None
        if not data:
            raise ImageRejected("empty_file", f"{uri} is empty")
        return data
    try:
        with storage.open_read(uri) as file:
            data = _read_at_most(file, downloads.max_bytes)
    except storage.NotAFile as error:
        raise ImageRejected("not_a_file", str(error)) from None
    except Exception as error:  # each filesystem raises its own types (e.g. GCS NotFound)
        status = http_status(error)
        prefix = f"HTTP {status}: " if status else ""
        if (
            isinstance(error, FileNotFoundError)
            or status == 404
            or (status is None and not _exists(uri))
        ):
            raise ImageRejected("file_not_found", f"{prefix}no such file: {uri}") from error
        raise ImageRejected("read_error", f"{prefix}cannot read {uri}: {error}") from error
    if not data:
        raise ImageRejected("empty_file", f"{uri} is empty")
    if len(data) > downloads.max_bytes:
        raise ImageRejected(
            "too_large",
            f"{uri} is larger than the {downloads.max_bytes:,} bytes allowed "
            "(--max_download_mb): not read further",
        )
    return data


def _read_at_most(file: BinaryIO, limit: int) -> bytes:
    """The file's bytes, or its first limit + 1 where it holds more (so that it is told
    too large). Sized by fstat where the file has one: read(limit + 1) alone would have
    Python allocate the whole limit for every image (+19 us a read of 50 KB, measured);
    a file that grows after the fstat is read on to its end or the limit."""
    try:
        size = os.fstat(file.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):  # a bucket's object
        return file.read(limit + 1)
    data = file.read(min(size, limit) + 1)
    if size < len(data) <= limit:
        data += file.read(limit + 1 - len(data))
    return data


def http_status(error: BaseException) -> int | None:
    """The HTTP error status behind a filesystem error, or None (a local error, say).

    GCS and S3 errors carry it as `code`; Beam's S3 filesystem raises its 404 as a
    FileNotFoundError while handling the S3 error, so the chain of causes is searched.
    """
    seen: BaseException | None = error
    while seen is not None:
        code = getattr(seen, "code", None)
        if isinstance(code, int) and 400 <= code < 600:
            return code
        seen = seen.__cause__ or seen.__context__
    return None


def _exists(uri: str) -> bool:
    """Whether `uri` exists, or True when even that cannot be told (so: a read error)."""
    try:
        return storage.exists(uri)
    except Exception:  # noqa: BLE001 - the same broken filesystem that failed the read
        return True
