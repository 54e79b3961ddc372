"""Live progress: a bar on a terminal, a line every 5% (at most every 5 s) without one, none
with --quiet; a
remote run names the counters to watch."""

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios
import threading

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import tiny_manifest

from image_tfrecords.pipeline import stage_lines
from image_tfrecords.pipeline.progress import (
    REMOTE_NOTE,
    WORKER_PROCESSES_NOTE,
    LiveProgress,
    shown_progress,
)
from image_tfrecords.pipeline.stage_lines import PREFIX


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_a_line_every_five_percent_at_most_every_five_seconds():
    out, clock = io.StringIO(), Clock()
    progress = LiveProgress(out, terminal=False, clock=clock)
    progress.planned(40)
    progress.planned(60)  # the rows reach the writers in packs
    seen = []
    for row in range(100):
        clock.now += 0.5 if row < 40 else 2.0  # 20 s for 40%, then 5% in 10 s
        progress.handled(1, dead_letters=int(row % 10 == 0))
        if out.getvalue().count("\n") > len(seen):
            seen.append(clock.now)
    lines = out.getvalue().splitlines()
    # The first row at 1000.5: lines from 1005.5 on, 5 s apart while 5% takes 1 s, then
    # at every 5% once 5% takes 10 s.
    percents = [int(line.split("(")[1].split("%)")[0]) for line in lines]
    assert percents[0] == 11 and percents == sorted(set(percents))
    assert percents[-6:] == [75, 80, 85, 90, 95, 100]
    assert all(later - earlier >= 5 for earlier, later in zip(seen, seen[1:]))
    assert lines[-1].startswith("progress: 100/100 rows (100%), ")
    assert lines[-1].endswith(" s left, dead letters: 10")


def test_without_a_terminal_a_run_of_a_few_seconds_prints_no_progress_line():
    out, clock = io.StringIO(), Clock()
    progress = LiveProgress(out, terminal=False, clock=clock)
    progress.planned(47)
    for _ in range(47):
        clock.now += 0.1
        progress.handled(1, dead_letters=0)
    assert out.getvalue() == ""


def test_on_a_terminal_a_bar_that_ends_when_the_last_row_is_done():
    out = io.StringIO()
    progress = LiveProgress(out, terminal=True)
    progress.planned(30)
    for _ in range(3):
        progress.handled(10, dead_letters=1)
    final = out.getvalue().split("\r")[-1]
    assert final.startswith("writing: 100%|") and "30/30" in final
    assert final.endswith("dead letters: 3]\n")  # closed: what follows starts a new line


def test_a_remote_run_names_the_counters_to_watch(capsys):
    def note(*flags):
        with shown_progress(
            PipelineOptions(["--manifest", "m.csv", "--output_dir", "out", *flags])
        ):
            pass
        return capsys.readouterr().err

    assert note("--runner", "DataflowRunner") == REMOTE_NOTE + "\n"
    assert note("--runner", "FlinkRunner") == REMOTE_NOTE + "\n"
    assert note("--direct_running_mode", "multi_processing") == WORKER_PROCESSES_NOTE + "\n"
    assert note("--runner", "DataflowRunner", "--quiet") == ""


def convert_command(tmp_path, *flags):
    tiny_manifest(tmp_path)
    return [
        sys.executable,
        "-m",
        "image_tfrecords",
        "--manifest",
        "m.csv",
        "--output_dir",
        "out",
        *flags,
    ]


def test_a_run_in_a_terminal_shows_the_bar(tmp_path):
    """The command in a pseudo-terminal of 24 rows and 100 columns, as a user runs it."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(
        convert_command(tmp_path), cwd=tmp_path, stdin=follower, stdout=follower, stderr=follower
    )
    os.close(follower)
    printed = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every holder of the terminal has exited
            break
        if not chunk:
            break
        printed += chunk
    os.close(leader)
    assert process.wait(timeout=300) == 0
    text = printed.decode()
    assert "writing: 100%|" in text and "3/3 [" in text and "rows/s, dead letters: 0]" in text
    assert text.index("writing: 100%|") < text.index("rows read 3 = 3 examples written")
    assert "progress: " not in text  # the bar, not the lines for logs
    # What the run does before the bar, first of all before Beam and TensorFlow load
    # (nothing showed for the ~28 s they, the checks and tf.Transform's pass took).
    stages = [
        text.index(PREFIX + said)
        for said in (
            "starting: loading Apache Beam",
            "checking the input: ",
            "loading TensorFlow",
            "reading the rows: ",
        )
    ]
    assert stages[0] == 0 and stages == sorted(stages) and stages[-1] < text.index("writing:")


def test_quiet_shows_no_progress(tmp_path):
    result = subprocess.run(
        convert_command(tmp_path, "--quiet"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and "rows read 3 = 3 examples written" in result.stdout


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["--manifest", "m.csv"], True),
        (["--quiet"], False),
        (["--quiet=true"], False),
        (["--quiet", "TRUE", "--manifest", "m.csv"], False),
        (["--quiet", "false"], True),
        (["--quiet=false"], True),
    ],
)
def test_stages_are_said_on_a_terminal_unless_quiet(argv, shown, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(stage_lines, "_SHOWN", threading.Event())
    stage_lines.show_stages(argv)
    stage_lines.stage("loading TensorFlow")
    expected = f"{PREFIX}starting: loading Apache Beam\n{PREFIX}loading TensorFlow\n"
    assert terminal.getvalue() == (expected if shown else "")


def test_stages_are_not_said_off_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setattr(stage_lines, "_SHOWN", threading.Event())
    stage_lines.show_stages(["--manifest", "m.csv"])
    assert sys.stderr.getvalue() == ""
