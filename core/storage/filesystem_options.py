"""The job's options for Beam's filesystems (S3's endpoint and region, HDFS's host, port
and user, GCS's project...), carried to every process that runs the job's DoFns.

Beam's filesystems take their options from `FileSystems._pipeline_options`, which only
Beam's own SDK harness entry (sdk_worker_main: DOCKER, PROCESS) sets on a runner's
worker. A plain worker pool (`python -m apache_beam.runners.worker.worker_pool_main`,
EXTERNAL) starts its workers without it, and s3:// failed there with "Must provide one of
client or options". So the options travel inside RunSettings, and every step that
touches storage applies them (`apply`) first: a DoFn in its setup(), a Map's function at
each call (transforms/storage_steps.py); the worker processes of a DoFn that runs tasks
get what it then has (core/worker/pool.py, core/storage/storage.py).

Credentials stay out: RunSettings is pickled into the job's graph, and S3's keys are not
written there (tests/test_shards.py). Where Beam's harness gave the job's options they
are kept (keys included); a worker pool's workers take S3's keys as boto3 does, from
their environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or their machine's role.

Free of Beam until `of` or `apply` is called: the command line checks its options first.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

# Beam's S3 options that are secrets: never carried in the job's graph.
SECRET_OPTIONS = frozenset({"s3_access_key_id", "s3_secret_access_key", "s3_session_token"})


@dataclasses.dataclass(frozen=True)
class FilesystemOptions:
    """The options given for Beam's S3, HDFS and GCS filesystems, less the secrets, as
    (name, value) pairs."""

    values: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, options: PipelineOptions) -> FilesystemOptions:
        """Those of `options` that were given (not Beam's defaults)."""
        names = _filesystem_option_names() - SECRET_OPTIONS
        given = options.get_all_options(drop_default=True)
        return cls(tuple(sorted((name, value) for name, value in given.items() if name in names)))

    def apply(self) -> None:
        """Gives Beam's filesystems in this process these options, over those they have
        (the launcher's, or those Beam's SDK harness gave them: their keys stay)."""
        if not self.values:
            return
        from apache_beam.io.filesystems import FileSystems
        from apache_beam.options.pipeline_options import PipelineOptions

        current = current_options()
        if any(current.get(name) != value for name, value in self.values):
            FileSystems.set_options(
                PipelineOptions.from_dictionary({**current, **dict(self.values)})
            )


def current_options() -> dict[str, Any]:
    """The options for Beam's filesystems this process was given, for its worker
    processes to reach the same storage (keys included: they go through a pipe, not the
    graph). Only the filesystems' own: the rest of the object Beam holds changes as a
    pipeline is built (its experiments), and what a pool's workers were started with is
    compared with what a run asks for (core/worker/pool.py). Beam has no public getter;
    tests/test_shards.py fails if this one stops seeing what set_options gave."""
    from apache_beam.io.filesystems import FileSystems

    options = FileSystems._pipeline_options
    if options is None:
        return {}
    names = _filesystem_option_names()
    return {
        name: value
        for name, value in options.get_all_options(drop_default=True).items()
        if name in names
    }


@functools.cache
def _filesystem_option_names() -> frozenset[str]:
    from apache_beam.options.pipeline_options import (
        GoogleCloudOptions,
        HadoopFileSystemOptions,
        S3Options,
    )

    parser = argparse.ArgumentParser(add_help=False)
    for group in (S3Options, HadoopFileSystemOptions, GoogleCloudOptions):
        group._add_argparse_args(parser)
    return frozenset(action.dest for action in parser._actions)
