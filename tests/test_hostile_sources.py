"""Sources that never end (issue 55): a FIFO, a device or a socket where a file should be,
a file larger than the limit, and a launcher killed while its worker waits. None may hang a
run or outlive it."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import convert, encode, photo_like

from image_tfrecords.core.storage import storage

TESTS = Path(__file__).resolve().parent


def dead_letters(output: Path) -> dict[str, tuple[str, str]]:
    """The output's dead letters: the file name of each row's URI -> (reason, message)."""
    found = {}
    for errors in output.glob("errors-*.jsonl"):
        for line in errors.read_text().splitlines():
            letter = json.loads(line)
            found[letter["uri"].rsplit("/", 1)[-1]] = (letter["reason"], letter["message"])
    return found


@pytest.fixture
def not_files(tmp_path):
    """A FIFO, a listening Unix socket and /dev/zero, each named like an image; the socket is
    closed after the test."""
    fifo = tmp_path / "fifo.jpg"
    os.mkfifo(fifo)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "socket.jpg"))
    server.listen()
    (tmp_path / "zero.jpg").symlink_to("/dev/zero")
    yield {
        "fifo.jpg": "a FIFO (named pipe)",
        "socket.jpg": "a socket",
        "zero.jpg": "a character device",
    }
    server.close()


def test_open_local_refuses_what_is_no_file_without_waiting(tmp_path, not_files):
    for name, kind in not_files.items():
        started = time.monotonic()
        with pytest.raises(storage.NotAFile, match=re.escape(f"is {kind}, not a file")) as refused:
            storage.open_local(str(tmp_path / name))
        assert refused.value.kind == kind
        assert time.monotonic() - started < 1
    with pytest.raises(IsADirectoryError):
        storage.open_local(str(tmp_path))
    (tmp_path / "a.jpg").write_bytes(b"bytes")
    with storage.open_local(str(tmp_path / "a.jpg")) as file:
        assert file.read() == b"bytes"


def test_rows_naming_a_fifo_a_socket_or_a_device_are_dead_letters_and_the_run_ends(
    tmp_path, not_files
):
    (tmp_path / "a.jpg").write_bytes(encode(photo_like(40, 30, 1), "JPEG"))
    names = ["a.jpg", *not_files]
    (tmp_path / "m.csv").write_text("".join(f"train,{name},cat\n" for name in names))
    output = convert(
        tmp_path / "out",
        "--manifest",
        str(tmp_path / "m.csv"),
        "--max_error_fraction",
        "1",
        "--decode_timeout",
        "20",  # were one read again, its image would cost 20 s, not the run
    )
    letters = dead_letters(output)
    assert {name: reason for name, (reason, _) in letters.items()} == dict.fromkeys(
        not_files, "not_a_file"
    )
    for name, kind in not_files.items():
        assert f"is {kind}, not a file" in letters[name][1]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["examples_written"] == 1


def test_a_fifo_in_an_image_folder_is_a_dead_letter(tmp_path):
    folder = tmp_path / "images"
    for label in ("cat", "dog"):
        (folder / label).mkdir(parents=True)
        (folder / label / f"{label}.jpg").write_bytes(encode(photo_like(40, 30, 2), "JPEG"))
    os.mkfifo(folder / "dog" / "pipe.jpg")
    output = convert(tmp_path / "out", "--image_folder", str(folder), "--max_error_fraction", "1")
    [(reason, message)] = dead_letters(output).values()
    assert reason == "not_a_file" and "a FIFO (named pipe), not a file" in message


def test_a_file_over_the_size_limit_is_too_large_and_read_no_further(tmp_path):
    large = encode(photo_like(400, 300, 3), "PNG")  # over 100 KB of noise
    assert len(large) > 100_000
    (tmp_path / "large.png").write_bytes(large)
    (tmp_path / "small.jpg").write_bytes(encode(photo_like(40, 30, 4), "JPEG"))
    (tmp_path / "m.csv").write_text("train,large.png,cat\ntrain,small.jpg,dog\n")
    output = convert(
        tmp_path / "out",
        "--manifest",
        str(tmp_path / "m.csv"),
        "--max_download_mb",
        "0.05",
        "--max_error_fraction",
        "1",
    )
    assert dead_letters(output) == {
        "large.png": (
            "too_large",
            f"{tmp_path / 'large.png'} is larger than the 52,429 bytes allowed "
            "(--max_download_mb): not read further",
        )
    }


_LAUNCHER = textwrap.dedent(
    """
    import sys
    from image_tfrecords.core.worker.pool import WorkerPool
    from pool_tasks import Waits

    pool = WorkerPool(1, timeout_s=600.0, setup=None)
    print(pool.pids()[0], flush=True)
    pool.run(Waits(), None)
    """
)


def test_a_worker_inside_a_task_ends_when_its_launcher_is_killed():
    """SIGKILL leaves the launcher no time to stop its workers, and a worker inside a task
    does not read its closed inbox: it ends by itself."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])},
    )
    try:
        worker = psutil.Process(int(launcher.stdout.readline()))
        time.sleep(1)  # well inside its task
        assert worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.1)
    else:
        worker.kill()
        pytest.fail("the worker outlived its killed launcher by 10 s")


HOSTILE_LABEL = "cat\x1b]0;owned\x07\x1b[2J"  # sets the title, then clears the screen
HOSTILE_NAME = "x\x1b]52;c;ZXZpbA==\x07\u009b2J.jpg"  # writes the clipboard (OSC 52), C1's CSI


def test_labels_and_names_reach_a_terminal_escaped_and_the_files_keep_them(tmp_path):
    """What a conversion and `diff` print (the table, the dead letters, what changed) holds
    no control character a terminal would act on; summary.json keeps the text."""
    image = encode(photo_like(40, 30, 5), "JPEG")
    (tmp_path / "a.jpg").write_bytes(image)
    (tmp_path / "b.jpg").write_bytes(image[: len(image) // 2])  # a dead letter naming it
    (tmp_path / HOSTILE_NAME).write_bytes(encode(photo_like(40, 30, 6), "JPEG"))
    before = tmp_path / "before.csv"
    before.write_text("train,a.jpg,dog\n")
    hostile = tmp_path / "hostile.csv"
    hostile.write_text(
        f"train,a.jpg,{HOSTILE_LABEL}\ntrain,{HOSTILE_NAME},dog\ntrain,b.jpg,dog\n"
        f"train,{HOSTILE_NAME}.missing,dog\n"
    )
    old = convert(tmp_path / "old", "--manifest", str(before))
    command = str(Path(sys.executable).parent / "image-tfrecords")
    printed = []
    for arguments in (  # both entries: `python -m image_tfrecords` (what operators run)
        [sys.executable, "-m", "image_tfrecords", "--manifest", str(hostile)]
        + ["--output_dir", str(tmp_path / "new"), "--max_error_fraction", "1"],
        [command, "diff", str(old), str(tmp_path / "new")],
    ):
        done = subprocess.run(arguments, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        printed.append(done.stdout + done.stderr)
    for text in printed:
        assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", text), text
    table, changes = printed
    assert "cat\\u001b]0;owned\\u0007\\u001b[2J" in table  # the label, in the table
    assert "cat\\u001b]0;owned\\u0007\\u001b[2J" in changes  # a new label
    summary = json.loads((tmp_path / "new" / "summary.json").read_text())
    assert HOSTILE_LABEL in summary["splits"]["train"]["labels"]
