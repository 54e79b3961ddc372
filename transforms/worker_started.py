"""The job's first step says that an SDK worker started: what the launcher waits for.

On a cluster the launcher cannot see the SDK workers (a worker pool beside each
TaskManager, a container per task); when none can start, the engine waits for them
forever. `SayWorkerStarted` passes the row chunks through unchanged, and its setup()
(once per DoFn instance, on each worker) writes a marker into the run's temp folder,
which every worker reaches; the launcher (pipeline/stopping.py) gives up when the marker
is not there within --worker_start_timeout. Only cluster runs have the step.
"""

import os
import socket
from collections.abc import Iterator
from typing import Any

from apache_beam.io.filesystems import FileSystems

from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
from image_tfrecords.transforms.storage_steps import StorageDoFn


class SayWorkerStarted(StorageDoFn):
    def __init__(self, marker: str, filesystems: FilesystemOptions) -> None:
        super().__init__(filesystems)
        self._marker = marker

    def setup(self) -> None:
        super().setup()  # before any storage is touched
        if not FileSystems.exists(self._marker):
            # Which worker, and never empty: Beam's S3 writer cannot write an empty object
            # (a multipart upload of no part, which S3 refuses as MalformedXML).
            with FileSystems.create(self._marker) as marker:
                marker.write(f"{socket.gethostname()} {os.getpid()}\n".encode())

    def process(self, element: Any) -> Iterator[Any]:
        yield element
