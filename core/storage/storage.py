"""Files as a worker process opens them: local paths directly, every other scheme (gs://,
s3://, hdfs://) through Beam's FileSystems.

Beam's FileSystems is the pipeline's one way to storage, but importing it takes ~2 s and
~200 MB (all of Beam comes with it); a worker writing shards to a local disk needs none
of it. So Beam is imported the first time a path with a scheme is met, and given the
run's options (the S3 endpoint and keys, say) then: `configure` keeps them until that.
Local files behave as Beam's LocalFileSystem makes them: `create` makes the folders.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import io
import lzma
import os
import re
import shutil
import stat
from typing import Any, BinaryIO

from image_tfrecords.core.storage.beam_filesystems import settle_beam_filesystems
from image_tfrecords.core.storage.downloads import (
    DownloadFailed,
    DownloadSettings,
    content_length,
    download,
    is_url,
)
from image_tfrecords.core.storage.gcs_access import GCS_SCHEME, settle_gcs_credentials

_SCHEME = re.compile(r"^[a-zA-Z][-a-zA-Z0-9+.]*://")  # as Beam's FileSystems.get_scheme
_DECOMPRESSORS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open, ".lzma": lzma.open}
_DECOMPRESSED_BY_BEAM = (".deflate", ".zst", ".zstd")
_options: dict[str, Any] = {}
_configured = False


def configure(options: dict[str, Any]) -> None:
    """The run's pipeline options (PipelineOptions.get_all_options()), for Beam's
    filesystems when a remote path is first opened."""
    global _options, _configured
    _options, _configured = dict(options), False


def is_local(path: str) -> bool:
    return not _SCHEME.match(path)


def under(path: str, folder: str) -> bool:
    """Whether the normalised `path` is `folder` or a path beneath it (as text)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def stays_in(path: str, folder: str) -> bool:
    """Whether `path` is within `folder` where links lead: a file of an output read back
    (a reused shard, an index) may be a link planted to a file elsewhere. A bucket has no
    links: its paths are what they say."""
    if not is_local(path):
        return True
    return under(os.path.realpath(path), os.path.realpath(folder))


class NotAFile(OSError):
    """A local path that names something other than a file: a FIFO, whose read waits for
    a writer for ever, a device (/dev/zero never ends), a socket. Never read."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path} is {kind}, not a file: it is not read")
        self.kind = kind


_NOT_FILES = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_local(path: str) -> BinaryIO:
    """A local file, opened for reading; NotAFile for a FIFO, device or socket. The open
    itself does not wait (O_NONBLOCK: a FIFO's open waits for a writer), and what is
    opened is what is checked (fstat, so a name swapped between a check and the open
    changes nothing); a directory raises IsADirectoryError as open() does."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ENXIO and stat.S_ISSOCK(os.stat(path).st_mode):
            raise NotAFile(path, "a socket") from None
        raise
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        for is_kind, kind in _NOT_FILES:
            if is_kind(mode):
                raise NotAFile(path, kind)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def open_read(path: str) -> BinaryIO:
    """The file's bytes as they are (Beam would gunzip a name ending in .gz). A URL is
    downloaded whole: FileNotFoundError for a 404, OSError for another failure. A local
    path must name a file (open_local)."""
    if is_local(path):
        return open_local(path)
    if is_url(path):
        try:
            return io.BytesIO(download(path, DownloadSettings()))
        except DownloadFailed as failed:
            raise (FileNotFoundError if failed.reason == "http_404" else OSError)(
                failed.message
            ) from None
    from apache_beam.io.filesystem import CompressionTypes

    return _beam(path).open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def create(path: str) -> BinaryIO:
    if is_local(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return open(path, "wb")
    from apache_beam.io.filesystem import CompressionTypes

    return _beam(path).create(path, compression_type=CompressionTypes.UNCOMPRESSED)


_COPY_BUFFER = 8 << 20
# copy_file_range's refusals where it cannot copy between these files; then Python copies.
_NO_KERNEL_COPY = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF)


def append(source: BinaryIO, destination: BinaryIO) -> None:
    """Writes the rest of `source` at the end of `destination`. Between two local files
    the kernel copies (os.copy_file_range: no bytes through Python, a reflink where the
    disk shares blocks); otherwise (Beam's streams, a gzip stream around a file), or where
    the kernel refuses, Python does."""
    if not (isinstance(source, io.BufferedReader) and isinstance(destination, io.BufferedWriter)):
        shutil.copyfileobj(source, destination, _COPY_BUFFER)
        return
    destination.flush()  # the kernel writes at the descriptor's offset: the file's end
    start = offset = source.tell()  # the reader's, which its read-ahead has left behind
    try:
        while copied := os.copy_file_range(
            source.fileno(), destination.fileno(), _COPY_BUFFER, offset
        ):
            offset += copied
    except OSError as refused:
        if offset != start or refused.errno not in _NO_KERNEL_COPY:
            raise
        shutil.copyfileobj(source, destination, _COPY_BUFFER)
        return
    source.seek(offset)
    destination.seek(0, os.SEEK_END)  # the buffered writer learns where the kernel wrote to


def split(path: str) -> tuple[str, str]:
    """(folder, name), as Beam's FileSystems.split gives them (a local path made absolute)."""
    if is_local(path):
        return os.path.split(os.path.abspath(path))
    return _beam(path).split(path)


def open_decompressed(path: str) -> BinaryIO:
    """The file's bytes, decompressed by its name's suffix as Beam's CompressionTypes
    detects it. gzip, bzip2 and xz/lzma streams raise EOFError where they are cut off
    (Beam's own decompression ends quietly there, losing the last lines); the rarer
    .deflate and .zst are left to Beam, imported for them alone."""
    lowered = path.lower()
    for suffix, decompress in _DECOMPRESSORS.items():
        if lowered.endswith(suffix):
            return decompress(open_read(path))
    if lowered.endswith(_DECOMPRESSED_BY_BEAM):
        return _beam(path).open(path)
    return open_read(path)


def is_compressed(path: str) -> bool:
    """Whether open_decompressed decompresses the file (by its name)."""
    return path.lower().endswith((*_DECOMPRESSORS, *_DECOMPRESSED_BY_BEAM))


def size(path: str) -> int:
    """The file's size; FileNotFoundError (locally) or the filesystem's own error (a URL:
    the size a HEAD announces, or DownloadFailed)."""
    if is_local(path):
        return os.stat(path).st_size
    if is_url(path):
        return content_length(path, DownloadSettings(retries=0))
    return _beam(path).get_filesystem(path).metadata(path).size_in_bytes


def identity(path: str) -> str | None:
    """What the storage says of the file's current bytes, cheaply and without reading
    them: one request, or one stat (core/records/example_index.py reuses an example whose source's
    identity is the one recorded when its image was read). None where storage says
    nothing trustworthy (a URL): such a file is always read again.

    Local: size, modification time in ns, inode and change time in ns (a file rewritten
    in place gets a new time, one replaced by a rename a new inode; the change time is the
    one a user cannot set back: `exiftool -P`, `rsync --inplace -t` and `cp -p` restore
    the modification time of a file they rewrote, never its change time, which a chmod or
    a rename also moves, so that file is read again). gs://: the object's CRC32C, s3://:
    its ETag, both of its content (Beam's `checksum`, one metadata request); hdfs:// and
    other schemes: size and modification time, which a writer can set back (HDFS keeps no
    change time): docs/operations/security.md. Raises what the filesystem raises for a
    file that is not there.
    """
    if is_url(path):
        return None
    if is_local(path):
        status = os.stat(path)
        return f"local:{status.st_size}:{status.st_mtime_ns}:{status.st_ino}:{status.st_ctime_ns}"
    filesystem = _beam(path).get_filesystem(path)
    scheme = filesystem.scheme()
    if scheme in ("gs", "s3"):
        return f"{scheme}:{filesystem.checksum(path)}"
    metadata = filesystem.metadata(path)
    return f"{scheme}:{metadata.size_in_bytes}:{metadata.last_updated_in_seconds!r}"


def match(pattern: str, limit: int | None = None) -> list:
    """Beam's FileMetadata (path, size_in_bytes) of the files `pattern` matches (`limit`
    at most), local or not: a glob's meaning is Beam's on every filesystem, so Beam is
    imported for it."""
    return _beam(pattern).match([pattern], limits=[limit])[0].metadata_list


def exists(path: str) -> bool:
    return os.path.exists(path) if is_local(path) else _beam(path).exists(path)


def rename(source: str, destination: str) -> None:
    if is_local(source):
        os.replace(source, destination)
    else:
        _beam(source).rename([source], [destination])


def delete(paths: list[str]) -> None:
    """Deletes the files; one already gone is no error."""
    for path in paths:
        if is_local(path):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
        elif _beam(path).exists(path):
            _beam(path).delete([path])


def join(base: str, *parts: str) -> str:
    return os.path.join(base, *parts) if is_local(base) else "/".join([base.rstrip("/"), *parts])


def everything_under(root: str) -> str:
    """The pattern of every file under `root`, however deep."""
    return f"{root.rstrip('/')}/**"


def flush_to_disk(path: str) -> None:
    """Plain local paths only: an object store holds an object once its upload closed."""
    if is_local(path):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _beam(path: str):
    """Beam's FileSystems, configured with the run's options, for a remote `path`."""
    global _configured
    from apache_beam.io.filesystems import FileSystems

    if path.startswith(GCS_SCHEME):
        settle_gcs_credentials()
    settle_beam_filesystems(path)
    if not _configured and _options:
        from apache_beam.options.pipeline_options import PipelineOptions

        FileSystems.set_options(PipelineOptions.from_dictionary(_options))
    _configured = True
    return FileSystems
