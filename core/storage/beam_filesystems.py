"""Beam's HDFS and S3 filesystems, made to behave as the pipeline needs, in each process
that calls `settle_beam_filesystems` (the launcher, a worker process at its first hdfs://
or s3:// path, the publish step). Beam's other filesystems need nothing.

HDFS lists and renames as Beam's local, gs:// and s3:// filesystems do. A pattern like
`folder/**` means every file below the folder to the pipeline (the published files, the
staged ones, an image folder's classes, a stopped run's receipts). Beam's local
filesystem lists with os.walk, and an object store lists every object under a prefix;
its HadoopFileSystem._list lists one level of WebHDFS, sub-folders among the files (as
files of 0 bytes), and fails for a folder that does not exist. And a rename onto a file
replaces it on a local disk (os.rename) and on an object store (a copy over it); WebHDFS
refuses it. Run against a real HDFS (Hadoop's MiniDFSCluster, tests/test_cloud_storage.py),
a job therefore refused a new output folder; with one made it published its shards and
summary.json but lost report.html, the transform_fn and the dead letters with its temp
folder, exiting 0; and it could not replace an earlier output. Here a listing gives every
file below the folder, none for a folder that is not there, and a rename onto a file
deletes it first (not atomic, as on an object store: the publish step removes
summary.json first, so no reader takes a folder half swapped for an output).

S3 shares one boto3 client per set of S3 options. Beam's S3 filesystem makes a new
boto3 client for every call (every open, stat, listing, copy or delete): ~0.16 s of CPU
each, 50 times the read of a small image (bench/RESULTS.md). boto3's clients are
thread-safe; the state of a download stays in each of Beam's own client wrappers.

Both replace Beam's internals (HadoopFileSystem._list and .rename, the S3 Client's
__init__), so each is installed only on the versions it was read against (VERIFIED_ON),
once per process, by settle_beam_filesystems. On any other version Beam stays as it is
and a warning says so: S3 then works as Beam's own, slower; HDFS, whose own listing and
rename lose a run's files, is refused (UnverifiedBeam) at the first hdfs:// path.
tests/test_beam_filesystems.py fails until someone has read the new version's code again
and moved VERIFIED_ON.
"""

from __future__ import annotations

import logging
import posixpath
import threading
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

HDFS_SCHEME = "hdfs://"

# The versions each replacement was read against: Beam's HadoopFileSystem (_list, rename,
# _parse_url, _join, the _FILE_STATUS_* keys) with the hdfs library's client (status,
# walk, delete, rename); Beam's S3 boto3_client.Client.__init__, with boto3's clients
# thread-safe (a guarantee of boto3 1.x, which releases daily: its major version only).
HDFS_FIX, S3_FIX = "HDFS listing and rename", "one S3 client per options"
VERIFIED_ON = {
    HDFS_FIX: {"apache-beam": "2.77.0", "hdfs": "2.7.3"},
    S3_FIX: {"apache-beam": "2.77.0", "boto3": "1."},
}


class UnverifiedBeam(RuntimeError):
    """An hdfs:// path on a Beam (or hdfs library) the HDFS replacement was not read against."""


_settled = False
_hdfs_refusal = ""  # why hdfs:// paths are refused; empty once Beam's HDFS is fixed


def settle_beam_filesystems(path: str = "") -> None:
    """Installs each replacement the installed versions allow, the first time; each time,
    raises UnverifiedBeam if `path` is an hdfs:// path and the HDFS one was not installed."""
    global _settled, _hdfs_refusal
    if not _settled:
        _hdfs_refusal = _install(
            HDFS_FIX,
            _list_and_rename_hdfs_as_the_others,
            "hdfs:// paths are refused: Beam's own HDFS listing and rename lose a run's files",
        )
        _install(
            S3_FIX,
            _share_s3_clients,
            "s3:// paths work as Beam's own, slower: a new boto3 client for every call",
        )
        _settled = True
    if _hdfs_refusal and path.startswith(HDFS_SCHEME):
        raise UnverifiedBeam(_hdfs_refusal)


def unverified_versions(fix: str) -> list[str]:
    """'package installed (read against ...)' for each version `fix` was not read against."""
    return [
        f"{package} {version(package)} (read against {verified})"
        for package, verified in VERIFIED_ON[fix].items()
        if not _matches(version(package), verified)
    ]


def _matches(installed: str, verified: str) -> bool:
    # "1." verifies a major version; "2.77.0" one release only.
    return installed.startswith(verified) if verified.endswith(".") else installed == verified


def _install(fix: str, replace: Callable[[], None], otherwise: str) -> str:
    """Runs `replace` if the installed versions are those `fix` was read against; else
    logs, and returns, why not and what that means (`otherwise`)."""
    unverified = unverified_versions(fix)
    if not unverified:
        replace()
        return ""
    why = (
        f"Beam's filesystems left as they are: image-tfrecords' {fix} replaces Beam "
        f"internals read against other versions than {', '.join(unverified)}; "
        f"{otherwise}. Install the versions in requirements.txt."
    )
    logging.getLogger(__name__).warning(why)
    return why


def _list_and_rename_hdfs_as_the_others() -> None:
    from apache_beam.io import hadoopfilesystem
    from apache_beam.io.filesystem import BeamIOError, FileMetadata

    def is_file(status: dict | None) -> bool:
        return status is not None and (
            status[hadoopfilesystem._FILE_STATUS_TYPE] == hadoopfilesystem._FILE_STATUS_TYPE_FILE
        )

    def list_every_file(self, url):
        server, path = self._parse_url(url)

        def metadata(file_path: str, status: dict) -> FileMetadata:
            return FileMetadata(
                hadoopfilesystem._HDFS_PREFIX + self._join(server, file_path),
                status[hadoopfilesystem._FILE_STATUS_LENGTH],
                status[hadoopfilesystem._FILE_STATUS_UPDATED] / 1000.0,
            )

        try:
            status = self._hdfs_client.status(path, strict=False)
            if status is None:
                return
            if is_file(status):
                yield metadata(path, status)
                return
            # ignore_missing: a folder removed while it is walked holds no file.
            for (folder, _), _, files in self._hdfs_client.walk(
                path, status=True, ignore_missing=True
            ):
                for name, file_status in files:
                    yield metadata(posixpath.join(folder, name), file_status)
        except Exception as error:
            raise BeamIOError("List operation failed", {url: error}) from error

    def rename_over_files(self, sources, destinations):
        exceptions = {}
        for source, destination in zip(sources, destinations):
            try:
                (_, from_path), (_, to_path) = self._parse_url(source), self._parse_url(destination)
                if is_file(self._hdfs_client.status(from_path, strict=False)) and is_file(
                    self._hdfs_client.status(to_path, strict=False)
                ):
                    self._hdfs_client.delete(to_path)
                self._hdfs_client.rename(from_path, to_path)
            except Exception as error:  # noqa: BLE001 - each pair's, as Beam's own rename
                exceptions[(source, destination)] = error
        if exceptions:
            raise BeamIOError("Rename operation failed", exceptions)

    hadoopfilesystem.HadoopFileSystem._list = list_every_file
    hadoopfilesystem.HadoopFileSystem.rename = rename_over_files


def _share_s3_clients() -> None:
    """Each of Beam's S3 client wrappers takes its boto3 client from the first one made
    with the same S3 options: a copy of that first wrapper, as it was made."""
    from apache_beam.io.aws.clients.s3 import boto3_client

    first_made: dict[tuple, Any] = {}
    lock = threading.Lock()
    make = boto3_client.Client.__init__

    def made_once(self, options) -> None:
        key = _s3_options_key(options)
        with lock:
            first = first_made.get(key)
            if first is None:
                first = first_made[key] = boto3_client.Client.__new__(boto3_client.Client)
                make(first, options)
        self.__dict__.update(first.__dict__)  # the shared client, a download not begun

    boto3_client.Client.__init__ = made_once


def _s3_options_key(options) -> tuple:
    """Beam's S3 options (a PipelineOptions or a dict of them) as a key."""
    from apache_beam.options.pipeline_options import PipelineOptions

    values = options.get_all_options() if isinstance(options, PipelineOptions) else options
    return tuple(
        sorted((name, repr(value)) for name, value in values.items() if name.startswith("s3_"))
    )
