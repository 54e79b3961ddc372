"""The DoFn that has a task run by the worker processes (core/worker/pool.py): a chunk of
rows to survey or pack (core/worker/row_tasks.py), a shard or part to write
(core/worker/shard_writer.py).

One pool per process that runs the pipeline's DoFns, shared by every such DoFn in it.
The tasks of a bundle are handed over as they come, on threads that wait for a free
worker, and their results given at the bundle's end, so that as many tasks run at once
as there are workers. With --worker_processes 0, or for a task that must run where Beam
is loaded (a source listed with Beam's FileSystems.match), it runs in this process.
"""

import concurrent.futures
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows
from apache_beam.typehints.decorators import IOTypeHints
from apache_beam.utils.windowed_value import WindowedValue

from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.storage.filesystem_options import current_options
from image_tfrecords.core.worker import pool
from image_tfrecords.core.worker.shard_writer import prepare_worker
from image_tfrecords.transforms import live_progress
from image_tfrecords.transforms.storage_steps import StorageDoFn


class WorkerTask(pool.Task, Protocol):
    """A task for the pool, and whether a worker process may run it (false: it must run
    where Beam is loaded)."""

    @property
    def in_worker(self) -> bool: ...


class RunInWorkers(StorageDoFn):
    """Subclasses say what task an element is (task()) and what a task's result gives
    (outputs()); `execute` may be overridden to run several tasks for one element."""

    def __init__(self, settings: RunSettings) -> None:
        super().__init__(settings.filesystems)
        self._settings = settings
        self._pool: pool.WorkerPool | None = None
        self._waiting: concurrent.futures.ThreadPoolExecutor | None = None
        self._threads: list[concurrent.futures.ThreadPoolExecutor] = []

    def task(self, element: Any, *side_inputs: Any) -> WorkerTask:
        raise NotImplementedError

    def outputs(self, result: Any) -> Iterator[Any]:
        raise NotImplementedError

    def default_type_hints(self) -> IOTypeHints:
        """The output type is what `outputs` yields (from process or finish_bundle): Beam
        takes it from outputs' annotation as it would from a plain DoFn's process, so
        that each subclass's PCollection has its coder declared (tests/test_coders.py)."""
        hints = super().default_type_hints()
        outputs = IOTypeHints.from_callable(self.outputs)
        if outputs is None or not outputs.has_simple_output_type():
            return hints
        outputs = outputs.strip_iterable()
        # The tags of TaggedOutput[...] in the annotation, on the Beams that read them.
        if hasattr(outputs, "extract_tagged_outputs"):
            outputs = outputs.extract_tagged_outputs()
        return hints.with_output_types_from(outputs)

    def setup(self) -> None:
        super().setup()  # before any storage is touched
        workers = self._settings.workers
        if processes := workers.process_count():
            self._pool = pool.acquire(processes, workers.timeout_s, worker_setup())
            self._waiting = self.threads()

    def threads(self) -> concurrent.futures.ThreadPoolExecutor:
        """Threads to wait on the worker processes with, one per process; shut down with
        this DoFn."""
        self._threads.append(
            concurrent.futures.ThreadPoolExecutor(self._settings.workers.process_count())
        )
        return self._threads[-1]

    def teardown(self) -> None:
        if self._pool is not None:
            for threads in self._threads:
                threads.shutdown()
            self._threads, self._waiting, self._pool = [], None, None
            pool.release()

    def start_bundle(self) -> None:
        self._pending: list[concurrent.futures.Future] = []

    # *side_inputs unannotated: Beam's type check reads an annotation as a tuple's
    def process(self, element: Any, *side_inputs) -> Iterator[Any]:
        task = self.task(element, *side_inputs)
        if self._pool is None:
            yield from self.outputs(self.execute(task))
        else:
            self._pending.append(self._waiting.submit(self.execute, task))

    def finish_bundle(self) -> Iterator[WindowedValue | beam.pvalue.TaggedOutput]:
        for result in self._pending:
            for output in self.outputs(result.result()):
                if isinstance(output, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(
                        output.tag, GlobalWindows.windowed_value(output.value)
                    )
                else:
                    yield GlobalWindows.windowed_value(output)
        self._pending = []

    def execute(self, task: WorkerTask) -> Any:
        """The task's result, from a worker process or from this one."""
        if self._pool is None or not task.in_worker:
            return task.run(self._settings, _LiveProgress())
        return self._pool.run(task, self._settings, live_progress.handled)


def worker_setup() -> Callable[[], None]:
    """What each worker process runs before its first task: Beam's filesystems get this
    process's options there (shard_writer.prepare_worker)."""
    return functools.partial(prepare_worker, current_options())


@dataclasses.dataclass
class JobOfTheRun:
    """Whether the job goes on after the launcher's block: submitted with
    --no_wait_until_finish, its SDK worker (a loopback one runs in this process) still
    runs DoFns, which keep their worker pool."""

    goes_on: bool = False


@contextlib.contextmanager
def workers_of_the_run(settings: RunSettings, start_early: bool) -> Iterator[JobOfTheRun]:
    """Within the block, the job; after it, unless it goes on, this process's worker pool
    stopped whatever DoFns did not release it (an SDK worker in this process, the
    DirectRunner's or a loopback one, may leave a DoFn never torn down). `start_early`:
    the job's DoFns run in this process (the DirectRunner's in-memory mode), so its
    worker processes start now, importing Pillow and this package while the launcher
    imports TensorFlow, and the job's first task finds them ready (pool.start_early)."""
    workers = settings.workers
    if start_early and (processes := workers.process_count()):
        pool.start_early(processes, workers.timeout_s, worker_setup())
    job = JobOfTheRun()
    try:
        yield job
    finally:
        if not job.goes_on:  # none of its DoFns runs tasks any more
            pool.stop_shared()


class _LiveProgress:
    """shard_writer.Progress for a task run in this process: rows to the display."""

    def on_item(self, place: int | None) -> None:
        pass

    def handled(self, rows: int, dead_letters: int) -> None:
        live_progress.handled(rows, dead_letters)
