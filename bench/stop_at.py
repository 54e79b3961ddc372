"""Runs the command line in this process and SIGKILLs its whole session (its worker
processes too, which have process groups of their own) at the N-th call of one of the
pipeline's functions: a stopped run, stopped exactly where wanted, for
tests/test_resume.py and bench/resume_bench.py.

    python bench/stop_at.py MODULE FUNCTION before|after N CONVERT-ARGS...

e.g. `image_tfrecords.core.records.receipts write_receipt after 12 --manifest m.csv --output_dir
out`: killed once the 12th shard's receipt is written. Start it in a session of its own
(start_new_session=True), or the kill takes its parent too.

The function may run in this process or in the worker processes that write shards: the
same hook is installed in each of them (this file, run by Python at their start as
`sitecustomize`), and the calls are counted across all of them in a file, one call at a
time under a lock, so that "after the 4th" means four calls were complete.
"""

import fcntl
import functools
import importlib
import os
import shutil
import signal
import sys
import tempfile

_SPEC = "IMAGE_TFRECORDS_STOP_AT"  # "MODULE FUNCTION WHEN COUNT COUNTER-FILE"


def stop_at(module_name: str, function: str, when: str, count: int, counter: str) -> None:
    """Replaces MODULE.FUNCTION with one that kills the session at its `count`-th
    call, `before` it runs or `after` it returns; calls are counted in the file `counter`.

    Portable runners (Flink, Spark) pickle the DoFns by value with the module's globals:
    the count is in the file, not in the wrapper, so every copy counts the same calls."""
    module = importlib.import_module(module_name)
    original = getattr(module, function)

    @functools.wraps(original)
    def stopping(*args, **kwargs):
        with open(counter, "ab") as calls:
            fcntl.flock(calls, fcntl.LOCK_EX)  # one call at a time in every process
            calls.write(b".")
            calls.flush()
            call = os.fstat(calls.fileno()).st_size
            if when == "before" and call == count:
                _kill_the_session()
            result = original(*args, **kwargs)
            if when == "after" and call == count:
                _kill_the_session()
        return result

    setattr(module, function, stopping)


def _kill_the_session() -> None:
    """SIGKILLs every process of this session (Linux's /proc lists them), this one last:
    the launcher's process group and each worker process's."""
    session = os.getsid(0)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if os.getsid(int(entry)) == session:
                    os.kill(int(entry), signal.SIGKILL)
            except OSError:  # gone, or not ours
                continue
    os.kill(os.getpid(), signal.SIGKILL)


def _install_from_environment() -> None:
    module_name, function, when, count, counter = os.environ[_SPEC].split(" ")
    stop_at(module_name, function, when, int(count), counter)


if __name__ == "__main__":
    import image_tfrecords.pipeline.graph  # noqa: F401 - imported first: its own names for core/launcher/publishing.py's functions stay the originals
    from image_tfrecords.pipeline import run

    module_name, function, when, count = sys.argv[1:5]
    hooks = tempfile.mkdtemp(prefix="stop-at-")
    # Worker processes start with this file as their sitecustomize (their PYTHONPATH
    # starts with `hooks`), which installs the same hook from the environment.
    shutil.copy(__file__, os.path.join(hooks, "sitecustomize.py"))
    os.environ[_SPEC] = " ".join([module_name, function, when, count, os.path.join(hooks, "calls")])
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [hooks, os.environ.get("PYTHONPATH")]))
    stop_at(module_name, function, when, int(count), os.path.join(hooks, "calls"))
    sys.exit(run.main(sys.argv[5:]))
elif __name__ == "sitecustomize" and _SPEC in os.environ:
    _install_from_environment()
