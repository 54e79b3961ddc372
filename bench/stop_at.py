"""Runs the command line in this process and SIGKILLs its whole process group (its
decoding processes too) at the N-th call of one of the pipeline's functions: a stopped
run, stopped exactly where wanted, for tests/test_resume.py and bench/resume_bench.py.

    python bench/stop_at.py MODULE FUNCTION before|after N CONVERT-ARGS...

e.g. `transforms.shards write_receipt after 12 --manifest m.csv --output_dir out`: killed
once the 12th shard's receipt is written. Start it in a process group of its own
(start_new_session=True), or the kill takes its parent too.
"""

import functools
import importlib
import itertools
import os
import signal
import sys


def stop_at(module_name: str, function: str, when: str, count: int) -> None:
    """Replaces MODULE.FUNCTION with one that kills the process group at its `count`-th
    call in this process, `before` it runs or `after` it returns.

    The count lives in `sys`, not in the wrapper: a portable runner (Flink, Spark) pickles
    the DoFns by value with the module's globals, so each unpickled copy of the wrapper
    would count its own calls."""
    module = importlib.import_module(module_name)
    original = getattr(module, function)

    @functools.wraps(original)
    def stopping(*args, **kwargs):
        call = next(sys.__dict__.setdefault("_stop_at_calls", itertools.count(1)))
        if when == "before" and call == count:
            os.killpg(0, signal.SIGKILL)
        result = original(*args, **kwargs)
        if when == "after" and call == count:
            os.killpg(0, signal.SIGKILL)
        return result

    setattr(module, function, stopping)


if __name__ == "__main__":
    import pipeline.graph  # noqa: F401 - imported first: its own names for publish's functions stay the originals
    from pipeline import run

    module_name, function, when, count = sys.argv[1:5]
    stop_at(module_name, function, when, int(count))
    sys.exit(run.main(sys.argv[5:]))
