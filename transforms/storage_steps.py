"""The steps that touch storage give Beam's filesystems the job's options first.

A worker of a plain Beam worker pool (EXTERNAL) gets no options from Beam's harness
(core/storage/filesystem_options.py): a step that opened an s3:// path there failed with "Must
provide one of client or options". A DoFn that touches storage is a StorageDoFn (its
setup() applies them; RunInWorkers is one); a Map's function, which has no setup(), is
wrapped in with_filesystems, which applies them at each call (a few calls per run:
once per file, shard or split).
"""

import functools
from collections.abc import Callable
from typing import Any

import apache_beam as beam

from image_tfrecords.core.storage.filesystem_options import FilesystemOptions


class StorageDoFn(beam.DoFn):
    """A DoFn that reads or writes storage; subclasses that override setup() call it
    first."""

    def __init__(self, filesystems: FilesystemOptions) -> None:
        self._filesystems = filesystems

    def setup(self) -> None:
        self._filesystems.apply()


def with_filesystems(
    function: Callable[..., Any], filesystems: FilesystemOptions
) -> Callable[..., Any]:
    """`function`, called once `filesystems` are applied: for a Map that touches storage.
    It keeps `function`'s signature (Beam reads its side inputs and type hints there)
    and carries `filesystems` (tests/test_cloud_storage.py checks the graph's steps)."""

    @functools.wraps(function)
    def applied(*args: Any, **kwargs: Any) -> Any:
        filesystems.apply()
        return function(*args, **kwargs)

    applied.filesystems = filesystems  # type: ignore[attr-defined]
    return applied
