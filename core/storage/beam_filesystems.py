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

S3 shares one boto3 client per set of client settings. Beam's S3 filesystem makes a new
boto3 client for every call (every open, stat, listing, copy or delete): ~0.16 s of CPU
each, 50 times the read of a small image (bench/RESULTS.md). Its client wrapper
(apache_beam.io.aws.clients.s3.boto3_client.Client) makes it as
`boto3.session.Session().client(...)` with the settings it reads from the options (from
--s3_* on every Beam, and --aws_* too from Beam 2.78); here that module's `boto3` is one
whose sessions give the client made first with the same arguments. Sharing is thus keyed
by exactly what Beam passes to boto3, whatever options it reads them from, and each
wrapper is still made by Beam and keeps its own download. boto3's clients are thread-safe.

Both replace Beam internals, which Beam may change in any release (setup.py admits 2.69
to 3), so neither is tied to a version: each checks, with inspect, that what it relies on
has the shape it needs (core/storage/beam_internals.py), once per process, and is
installed only where it does:

- HDFS: HadoopFileSystem._list and .rename, replaced in Beam's class, take the parameters
  of their replacements; a HadoopFileSystem made from the options alone (Beam's makes its
  WebHDFS client without connecting) has a `_hdfs_client` whose status, walk, delete and
  rename take the arguments used here, and its `_parse_url` and `_join` turn a URL into
  (server, path) and back. File statuses are read by WebHDFS's own field names (the hdfs
  library returns WebHDFS's JSON), not by Beam's constants for them.
- S3: Beam's client module holds boto3 as `boto3`, and Client.__init__'s code still names
  boto3, session, Session and client.

Read on every release setup.py admits, 2.69.0 to 2.78.0, all of this holds (2.70 made the
hdfs import lazy, 2.78 moved the S3 client's settings into its client_options module), and
on none is Beam's own right: each lists one level, refuses a rename onto a file and makes
a client per call. Whether Beam's own is right is behaviour, which no shape shows; the
replacements are right either way (a listing that walks, a rename that replaces, a client
made once), so where the shape holds they are installed, without a word.
tests/test_beam_filesystems.py runs Beam's own listing and rename on a WebHDFS client held
in memory: the day a Beam fixes them, it says the HDFS replacement can go.

Where a check fails, one warning names what the installed Beam has instead. S3 then works
as Beam's own, slower. hdfs:// paths are refused (HdfsUnavailable), not left to Beam's own
listing and rename, which lose a run's files without an error. There is no third way for
HDFS: the project's own FileSystem registered for hdfs:// (a subclass of Beam's, overriding
_list and rename) would rely on the same internals, so it fails where these checks do; and
Beam picks a path's filesystem among every FileSystem subclass by scheme(), refusing a path
two of them claim ("Found more than one filesystem", FileSystems.get_filesystem on 2.69 to
2.78), so it would also need Beam's class made to stop claiming hdfs, and every hdfs://
path would fail in a process where one of the two steps was done and not the other.
Replacing two methods is one step, and every HadoopFileSystem Beam makes lists and renames
the same way.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import types
from collections.abc import Callable
from typing import Any

from image_tfrecords.core.storage.beam_internals import (
    Unfit,
    attribute,
    beam_version,
    gives,
    names,
    same_parameters,
    takes,
)

HDFS_SCHEME = "hdfs://"
HDFS_FIX, S3_FIX = "HDFS listing and rename", "one S3 client per settings"

# What the hdfs library returns for a path: WebHDFS's FileStatus, as the server sends it.
_TYPE, _FILE, _LENGTH, _MODIFIED_MS = "type", "FILE", "length", "modificationTime"


class HdfsUnavailable(RuntimeError):
    """An hdfs:// path where Beam's HDFS filesystem could not be made to list and rename
    as the pipeline needs; the message says what the installed Beam lacks."""


_lock = threading.Lock()
_hdfs_refusal: str | None = None  # None until settled; then why hdfs:// is refused, or ""


def settle_beam_filesystems(path: str = "") -> None:
    """Installs each replacement the installed Beam fits, the first time; each time,
    raises HdfsUnavailable if `path` is an hdfs:// path and the HDFS one did not fit."""
    global _hdfs_refusal
    if _hdfs_refusal is None:
        with _lock:  # a worker's threads may reach their first remote path at once
            if _hdfs_refusal is None:
                _install(
                    S3_FIX,
                    _share_s3_clients,
                    "s3:// works as Beam's own, slower: a new boto3 client for every call",
                )
                _hdfs_refusal = _install(
                    HDFS_FIX,
                    _list_and_rename_hdfs_as_the_others,
                    "hdfs:// paths are refused: Beam's own HDFS listing (one folder level) "
                    "and rename (not over a file) lose a run's files",
                )
    if _hdfs_refusal and path.startswith(HDFS_SCHEME):
        raise HdfsUnavailable(_hdfs_refusal)


def _install(fix: str, replace: Callable[[], None], otherwise: str) -> str:
    """Runs `replace`, which checks what it relies on before it replaces anything; where a
    check fails, logs, and returns, what that means (`otherwise`) and why."""
    try:
        replace()
    except Unfit as unfit:
        why = (
            f"{otherwise}. image-tfrecords' {fix} does not fit the Beam installed: on "
            f"{beam_version()}, {unfit}."
        )
        logging.getLogger(__name__).warning(why)
        return why
    return ""


def _list_and_rename_hdfs_as_the_others() -> None:
    """Replaces HadoopFileSystem._list and .rename in Beam's class, once what they rely on
    is checked."""
    try:
        from apache_beam.io import hadoopfilesystem
    except ImportError as error:
        raise Unfit(f"its HDFS filesystem cannot be imported ({error})") from None
    beams = attribute(hadoopfilesystem, "HadoopFileSystem", "apache_beam.io.hadoopfilesystem")
    for name, ours in (("_list", _list_every_file), ("rename", _rename_over_files)):
        same_parameters(
            f"HadoopFileSystem.{name}", attribute(beams, name, "HadoopFileSystem"), ours
        )
    made = _made_offline(beams)
    gives(
        "HadoopFileSystem._parse_url('hdfs://a/b')",
        lambda: made._parse_url("hdfs://a/b"),
        ("", "/a/b"),
    )
    gives("HadoopFileSystem._join('', '/a/b')", lambda: made._join("", "/a/b"), "/a/b")
    gives(
        "HadoopFileSystem._join('server', '/a/b')",
        lambda: made._join("server", "/a/b"),
        "/server/a/b",
    )
    client = attribute(made, "_hdfs_client", "HadoopFileSystem")
    where = f"HadoopFileSystem._hdfs_client ({type(client).__module__}.{type(client).__name__})"
    takes(f"{where}.status", attribute(client, "status", where), "/path", strict=False)
    takes(
        f"{where}.walk",
        attribute(client, "walk", where),
        "/path",
        status=True,
        ignore_missing=True,
    )
    takes(f"{where}.delete", attribute(client, "delete", where), "/path")
    takes(f"{where}.rename", attribute(client, "rename", where), "/from", "/to")
    beams._list = _list_every_file
    beams.rename = _rename_over_files


def _made_offline(beams: type) -> Any:
    """A HadoopFileSystem made as Beam makes one, from options alone: no server is asked."""
    options = {"hdfs_host": "localhost", "hdfs_port": 9870, "hdfs_user": "image-tfrecords"}
    try:
        return beams(options)
    except Exception as error:  # noqa: BLE001 - whatever it raises, it is not the shape used
        raise Unfit(
            f"HadoopFileSystem could not be made from hdfs_host, hdfs_port and hdfs_user "
            f"({type(error).__name__}: {error})"
        ) from None


def _url(hdfs: Any, server: str, path: str) -> str:
    """The hdfs:// URL of `path` on `server` ('' for the default), as Beam's HDFS
    filesystem writes it (with --hdfs_full_urls, hdfs://server/path; else hdfs://path):
    its _join gives /server/path or /path."""
    return "hdfs:/" + hdfs._join(server, path)


def _is_file(status: dict | None) -> bool:
    return status is not None and status[_TYPE] == _FILE


def _list_every_file(self, url):
    """HadoopFileSystem._list: every file below the folder `url`, at any depth, or the file
    `url` itself; nothing where there is neither."""
    from apache_beam.io.filesystem import BeamIOError, FileMetadata

    server, path = self._parse_url(url)

    def metadata(file_path: str, status: dict) -> FileMetadata:
        return FileMetadata(
            _url(self, server, file_path), status[_LENGTH], status[_MODIFIED_MS] / 1000.0
        )

    try:
        status = self._hdfs_client.status(path, strict=False)
        if status is None:
            return
        if _is_file(status):
            yield metadata(path, status)
            return
        # ignore_missing: a folder removed while it is walked holds no file.
        for (folder, _), _, files in self._hdfs_client.walk(path, status=True, ignore_missing=True):
            for name, file_status in files:
                yield metadata(posixpath.join(folder, name), file_status)
    except Exception as error:
        raise BeamIOError("List operation failed", {url: error}) from error


def _rename_over_files(self, source_file_names, destination_file_names):
    """HadoopFileSystem.rename: each source to its destination, a file there deleted
    first; errors gathered per pair, as Beam's own rename gathers them."""
    from apache_beam.io.filesystem import BeamIOError

    exceptions = {}
    for source, destination in zip(source_file_names, destination_file_names):
        try:
            (_, from_path), (_, to_path) = self._parse_url(source), self._parse_url(destination)
            if _is_file(self._hdfs_client.status(from_path, strict=False)) and _is_file(
                self._hdfs_client.status(to_path, strict=False)
            ):
                self._hdfs_client.delete(to_path)
            self._hdfs_client.rename(from_path, to_path)
        except Exception as error:  # noqa: BLE001 - each pair's, as Beam's own rename
            exceptions[(source, destination)] = error
    if exceptions:
        raise BeamIOError("Rename operation failed", exceptions)


def _share_s3_clients() -> None:
    """Gives Beam's S3 client module a `boto3` whose sessions share their clients, once
    what that relies on is checked."""
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError as error:
        raise Unfit(f"its S3 client cannot be imported ({error})") from None
    where = "apache_beam.io.aws.clients.s3.boto3_client"
    held = attribute(boto3_client, "boto3", where)
    if held is None or isinstance(held, _SharedClients):
        # None: boto3 is not installed, and Beam says so at the first s3:// path.
        return
    import boto3

    if held is not boto3:
        raise Unfit(f"{where}.boto3 is {held!r}, not boto3")
    # Beam's wrapper makes its client as boto3.session.Session().client(...) (`client`
    # is also the attribute it keeps it in: that name alone would prove little).
    client = attribute(boto3_client, "Client", where)
    names(
        "boto3_client.Client.__init__", client.__init__, ("boto3", "session", "Session", "client")
    )
    boto3_client.boto3 = _SharedClients(boto3)


class _SharedClients:
    """boto3, as Beam's S3 client module sees it: `boto3.session.Session(...)` is a
    _Session whose client(...) is the boto3 client made first with the same arguments.
    Anything else is boto3's own."""

    def __init__(self, boto3: Any) -> None:
        self._boto3 = boto3
        self.session = types.SimpleNamespace(Session=self._session)  # all Beam uses of it
        self._clients: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        if "_boto3" not in vars(self):  # asked before __init__ ran (by copy, by pickle)
            raise AttributeError(name)
        return getattr(self._boto3, name)

    def _session(self, *args: Any, **kwargs: Any) -> _Session:
        return _Session(self, (args, kwargs))

    def _client_for(self, session: tuple, args: tuple, kwargs: dict) -> Any:
        """The client boto3.session.Session(*session).client(*args, **kwargs) makes, made
        once per arguments (each time for arguments that cannot be a key)."""
        key = (session[0], tuple(sorted(session[1].items())), args, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return self._real_session(session).client(*args, **kwargs)
        with self._lock:  # one client per key, whichever thread asks first
            if key not in self._clients:
                self._clients[key] = self._real_session(session).client(*args, **kwargs)
            return self._clients[key]

    def _real_session(self, session: tuple) -> Any:
        args, kwargs = session
        return self._boto3.session.Session(*args, **kwargs)


class _Session:
    """A boto3 session as Beam makes one for its client; a real one (~12 ms of CPU) is made
    only for a client not made before, or for anything else asked of it."""

    def __init__(self, shared: _SharedClients, made_with: tuple) -> None:
        self._shared, self._made_with = shared, made_with

    def client(self, *args: Any, **kwargs: Any) -> Any:
        return self._shared._client_for(self._made_with, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if "_shared" not in vars(self):  # asked before __init__ ran (by copy, by pickle)
            raise AttributeError(name)
        return getattr(self._shared._real_session(self._made_with), name)
