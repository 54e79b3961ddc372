"""Tasks for core/worker/pool.py's workers in tests that start their own launcher: importable by
name in a worker process (tests/ on its PYTHONPATH)."""

import time


class Waits:
    """A task that waits far longer than any test: a worker stuck inside a task."""

    name = "a task that waits"

    def run(self, context: object, progress: object) -> None:
        time.sleep(600)
