"""Beam's HDFS filesystem made to list and rename as its local, gs:// and s3:// ones do.

A pattern like `folder/**` means every file below the folder to the pipeline (the
published files, the staged ones, an image folder's classes, a stopped run's receipts).
Beam's local filesystem lists with os.walk, and an object store lists every object under
a prefix; its HadoopFileSystem._list lists one level of WebHDFS, sub-folders among the
files (as files of 0 bytes), and fails for a folder that does not exist. Run against a
real HDFS (Hadoop's MiniDFSCluster, tests/test_hdfs.py), a job therefore refused a new
output folder, and with one made it published its shards and summary.json but lost
report.html, the transform_fn and the dead letters with its temp folder, exiting 0.

And a rename onto a file replaces it on a local disk (os.rename) and on an object store
(a copy over it); WebHDFS refuses it, so a run could not replace an earlier output.

`fix_beam_hdfs` replaces those two methods, in the process that calls it: a listing
gives every file below the folder, none for a folder that is not there; a rename onto a
file deletes it first (not atomic, as on an object store: the publish step removes
summary.json first, so no reader takes a folder half swapped for an output). Each
process that uses hdfs:// paths calls it first (the launcher, a worker process at its
first hdfs:// path, the publish step).
"""

from __future__ import annotations

import posixpath

HDFS_SCHEME = "hdfs://"
_done = False


def fix_beam_hdfs() -> None:
    """Idempotent; imports Beam's HDFS filesystem (and the `hdfs` client) the first time."""
    global _done
    if _done:
        return
    from apache_beam.io import hadoopfilesystem
    from apache_beam.io.filesystem import BeamIOError, FileMetadata

    def is_file(status: dict | None) -> bool:
        return status is not None and (status[hadoopfilesystem._FILE_STATUS_TYPE]
                                       == hadoopfilesystem._FILE_STATUS_TYPE_FILE)

    def list_every_file(self, url):
        server, path = self._parse_url(url)

        def metadata(file_path: str, status: dict) -> FileMetadata:
            return FileMetadata(hadoopfilesystem._HDFS_PREFIX + self._join(server, file_path),
                                status[hadoopfilesystem._FILE_STATUS_LENGTH],
                                status[hadoopfilesystem._FILE_STATUS_UPDATED] / 1000.0)
        try:
            status = self._hdfs_client.status(path, strict=False)
            if status is None:
                return
            if is_file(status):
                yield metadata(path, status)
                return
            # ignore_missing: a folder removed while it is walked holds no file.
            for (folder, _), _, files in self._hdfs_client.walk(path, status=True,
                                                                ignore_missing=True):
                for name, file_status in files:
                    yield metadata(posixpath.join(folder, name), file_status)
        except Exception as error:  # noqa: BLE001 - as Beam's own _list reports it
            raise BeamIOError("List operation failed", {url: error}) from error

    def rename_over_files(self, sources, destinations):
        exceptions = {}
        for source, destination in zip(sources, destinations):
            try:
                (_, from_path), (_, to_path) = self._parse_url(source), self._parse_url(destination)
                if is_file(self._hdfs_client.status(from_path, strict=False)) and is_file(
                        self._hdfs_client.status(to_path, strict=False)):
                    self._hdfs_client.delete(to_path)
                self._hdfs_client.rename(from_path, to_path)
            except Exception as error:  # noqa: BLE001 - each pair's, as Beam's own rename
                exceptions[(source, destination)] = error
        if exceptions:
            raise BeamIOError("Rename operation failed", exceptions)

    hadoopfilesystem.HadoopFileSystem._list = list_every_file
    hadoopfilesystem.HadoopFileSystem.rename = rename_over_files
    _done = True
