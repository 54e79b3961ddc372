"""Ctrl-C (SIGINT to the process group, as a terminal sends it) and SIGTERM at any point
of `convert`: one line on stderr, exit 130 (143), no traceback, nothing published, no
process left behind; a second signal ends it at once (core/worker/interrupts.py).

The real command runs in a process group of its own, signalled at a point its output or
its files show; one process per point."""

import gc
import glob
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import SAMPLE_MANIFEST, copy_output

from image_tfrecords.core.worker import interrupts
from image_tfrecords.pipeline import cli, run

ROOT = Path(__file__).resolve().parent.parent
# The sample_outputs fixture's run (conftest.py), which the interrupted one repeats.
SAMPLE_FLAGS = [
    "--manifest",
    str(SAMPLE_MANIFEST),
    "--max_error_fraction",
    "0.25",
    "--num_shards",
    "2",
    "--file_format",
    "tfrecord",
]
MARK = "IMAGE_TFRECORDS_INTERRUPT_TEST"  # in the environment of every process a run starts


class Command:
    """`image-tfrecords convert` in a process group of its own, as a terminal starts it."""

    def __init__(self, output: Path, *flags: str) -> None:
        self.mark = str(output)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "image_tfrecords", "--output_dir", str(output), *flags],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, MARK: self.mark, "PYTHONPATH": str(ROOT)},
        )

    def signal_when(self, ready, signum: int = signal.SIGINT) -> float:
        """Sends `signum` to the group once ready() is true; returns the seconds from
        the signal to the command's exit."""
        deadline = time.monotonic() + 120
        while not ready():
            assert self.process.poll() is None, self.process.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.005)
        sent = time.monotonic()
        os.killpg(self.process.pid, signum)
        self.process.wait(timeout=60)
        return time.monotonic() - sent

    def said(self) -> str:
        """Its stderr: one line, no traceback."""
        stderr = self.process.stderr.read()
        assert "Traceback" not in stderr and stderr.count("\n") == 1, stderr
        return stderr

    def processes_left(self) -> list[psutil.Process]:
        """Any process the run started that is still there (its worker processes have
        a process group of their own)."""
        left = []
        for process in psutil.process_iter(["cmdline", "status"]):
            try:
                if (
                    process.info["status"] != psutil.STATUS_ZOMBIE
                    and "python" in " ".join(process.info["cmdline"] or [])
                    and process.environ().get(MARK) == self.mark
                ):
                    left.append(process)
            except (psutil.Error, OSError):
                continue  # gone, or not ours to read
        return left


def published(folder: Path) -> dict[str, bytes]:
    """Every file of the output, less the runs' temp folders."""
    return {
        name: path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not (name := str(path.relative_to(folder))).startswith(".tmp-")
    }


def signal_this_process_when(ready, signum: int) -> None:
    """From a thread: `signum` to this process once ready() is true (within a minute)."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if ready():
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.005)

    threading.Thread(target=watch, daemon=True).start()


def test_ctrl_c_in_the_imports_writes_nothing(tmp_path):
    command = Command(tmp_path / "out", "--manifest", str(SAMPLE_MANIFEST))
    # No output yet shows where it is; the line it prints says it was in the imports.
    took = command.signal_when(lambda: psutil.Process(command.process.pid).cpu_times().user > 0.2)
    assert command.process.returncode == 130
    assert command.said() == (
        "error: stopped by SIGINT before the run started; nothing was written\n"
    )
    assert not (tmp_path / "out").exists() and not command.processes_left()
    assert took < 5


def test_sigterm_before_the_job_removes_the_new_run_folder(tmp_path, sample_outputs, capsys):
    # In this process (its imports are done): the command's handler, as installed by it.
    previous = copy_output(sample_outputs("tfrecord"), tmp_path / "out")
    before = published(previous)
    # Its folder is started just before TensorFlow loads and the job starts.
    signal_this_process_when(lambda: glob.glob(f"{previous}/.tmp-*/run.json"), signal.SIGTERM)
    try:
        assert (
            cli.convert_main(["--output_dir", str(previous), *SAMPLE_FLAGS, "--overwrite"]) == 143
        )
    finally:  # the command freezes what its imports made (pipeline/collector.py): the
        gc.unfreeze()  # process ends there, this one goes on to other tests
    assert capsys.readouterr().err == (
        f"error: stopped by SIGTERM before the job started; "
        f"nothing was written, {previous} is as it was\n"
    )
    assert published(previous) == before and not glob.glob(f"{previous}/.tmp-*")


def test_ctrl_c_while_worker_processes_write_shards_keeps_the_output_then_resumes(
    tmp_path, sample_outputs, capsys
):
    reference = sample_outputs("tfrecord")
    previous = copy_output(reference, tmp_path / "out")
    before = published(previous)
    command = Command(previous, *SAMPLE_FLAGS, "--overwrite")
    # The first shard's receipt: the worker processes are writing the others.
    took = command.signal_when(lambda: glob.glob(f"{previous}/.tmp-*/receipts/*.json"))
    assert command.process.returncode == 130
    line = command.said()
    temp = glob.glob(f"{previous}/.tmp-*")[0]
    assert line.startswith(
        "error: stopped by SIGINT; the job ran in the launcher, and "
        f"stopped with it. After it: nothing was published, {previous} "
        "is as it was; "
    )
    assert re.search(r"; \d+ finished shards? kept in ", line)
    assert line.endswith(
        f"kept in {temp}: the same image-tfrecords convert command with --resume continues it\n"
    )
    assert published(previous) == before and not command.processes_left()
    assert took < 5

    assert run.main(["--output_dir", str(previous), *SAMPLE_FLAGS, "--overwrite", "--resume"]) == 0
    assert "resuming the stopped run" in capsys.readouterr().out
    # Both runs copied the unchanged examples from the output they replace (--overwrite).
    summary = json.loads((previous / "summary.json").read_text())
    assert summary["reused_from"] == str(previous) and summary["examples_reused"] > 0
    shards = {name: data for name, data in published(reference).items() if ".tfrecord" in name}
    assert {
        name: data for name, data in published(previous).items() if ".tfrecord" in name
    } == shards


def test_a_stop_while_publishing_waits_until_the_output_is_whole():
    with interrupts.signals_stop():
        with pytest.raises(interrupts.Stopped) as stopped:
            with interrupts.held("publishing"):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler has run: held, not raised
                whole = True
        assert whole and stopped.value.exit_code == 130


def test_a_second_ctrl_c_ends_the_process_at_once_in_one_line():
    # Stopped once, in a step that holds the stop (publishing): the second ends it.
    script = textwrap.dedent("""
        import os, signal, time
        from image_tfrecords.core.worker import interrupts
        with interrupts.signals_stop(), interrupts.held("publishing"):
            interrupts.keeping("its files are in out/.tmp-1")
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)
    """)
    started = time.monotonic()
    ended = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert (ended.returncode, ended.stderr) == (
        130,
        (
            "error: stopped at once by a second SIGINT; publishing was cut short; its files "
            "are in out/.tmp-1\n"
        ),
    )
    assert time.monotonic() - started < 5
