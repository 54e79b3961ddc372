"""transforms.decode_pool: real worker processes decoding real images, killed for real."""

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from PIL import Image

import transforms
from conftest import SAMPLE_MANIFEST, convert, encode, photo_like
from pipeline.options import ConvertOptions
from transforms.decode_pool import DecodePool, Decoding, prepare_in_process, usable_cores
from transforms.images import ImageRejected, ImageSettings

KEEP = ImageSettings()
JPEG = encode(photo_like(48, 32, 1), "JPEG", quality=90)


@pytest.fixture(scope="module")
def slow_png():
    """A real image that takes about a second to decode: 81 megapixels of one colour
    (a 250 KB file, just under Pillow's pixel limit)."""
    return encode(Image.new("RGB", (9000, 9000), (10, 200, 30)), "PNG")


@pytest.fixture
def pool():
    started = DecodePool(1, timeout_s=60.0)
    yield started
    started.close()


def outcomes(prepare_all, images, settings=KEEP):
    """Each image's PreparedImage, or its rejection as (reason, message)."""
    return [(image.reason, image.message) if isinstance(image, ImageRejected) else image
            for image in prepare_all(images, settings)]


def in_process(*images, settings=KEEP):
    return outcomes(prepare_in_process, images, settings)


def test_workers_import_neither_tensorflow_nor_beam():
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, transforms.decode_pool; "
         "print(' '.join(sorted({name.split('.')[0] for name in sys.modules})))"],
        capture_output=True, text=True, check=True, env=_package_path()).stdout.split()
    assert "PIL" in imported
    assert not {"tensorflow", "apache_beam", "tensorflow_transform"} & set(imported)


def test_pool_decodes_exactly_as_in_process(pool):
    gif = encode(photo_like(24, 24, 3).quantize(64), "GIF")
    rgba = encode(photo_like(33, 21, 1, "RGBA"), "PNG")
    cut = JPEG[: len(JPEG) // 2]
    batch = [JPEG, gif, rgba, cut, b"plain text", JPEG]
    for settings in (KEEP, ImageSettings(max_side=20), ImageSettings(image_format="jpeg")):
        assert outcomes(pool.prepare_all, batch, settings) == in_process(*batch,
                                                                         settings=settings)
    assert [reason for reason, _ in in_process(cut, b"plain text")] == [
        "truncated_image", "not_an_image"]
    # The source bytes are not sent back: the stored bytes are the very object given.
    assert pool.prepare_all([JPEG], KEEP)[0].encoded is JPEG


def test_images_larger_than_the_shared_memory_go_through_the_pipe():
    pool = DecodePool(1, timeout_s=60.0, slot_bytes=len(JPEG) - 1)
    try:
        small = encode(photo_like(4, 4, 2), "PNG")
        assert len(small) < len(JPEG) - 1
        # One at a time (the slot never holds stale bytes), and in a batch: the small
        # image shares the memory, the others go through the pipe.
        for data in (JPEG, small, JPEG):
            assert outcomes(pool.prepare_all, [data]) == in_process(data)
        assert outcomes(pool.prepare_all, [small, JPEG, small]) == in_process(small, JPEG, small)
    finally:
        pool.close()


def test_a_worker_killed_mid_image_costs_only_that_image(pool, slow_png):
    (pid,) = pool.pids()
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        # The photos before and after the slow image are decoded by the replacement.
        decoding = thread.submit(outcomes, pool.prepare_all, [JPEG, slow_png, JPEG, JPEG])
        _wait_until_busy(pid)
        os.kill(pid, signal.SIGKILL)
        first, (reason, message), *rest = decoding.result(timeout=30)
    assert reason == "decode_crash"
    assert "killed by SIGKILL" in message and "out-of-memory killer" in message
    assert [first, *rest] == in_process(JPEG, JPEG, JPEG)
    assert pool.pids() != [pid] and len(pool.pids()) == 1


def test_a_worker_killed_between_images_loses_nothing(pool):
    (pid,) = pool.pids()
    os.kill(pid, signal.SIGKILL)
    _wait_until_dead(pid)
    # The images go to a new worker: none was being decoded when the old one died.
    assert outcomes(pool.prepare_all, [JPEG, JPEG]) == in_process(JPEG, JPEG)


def test_a_decode_past_the_time_limit_is_stopped_and_the_pool_goes_on(slow_png):
    pool = DecodePool(2, timeout_s=0.2)
    try:
        old = set(pool.pids())
        with concurrent.futures.ThreadPoolExecutor(3) as threads:
            slow = threads.submit(outcomes, pool.prepare_all, [slow_png, JPEG])
            quick = [threads.submit(outcomes, pool.prepare_all, [JPEG]) for _ in range(20)]
            assert slow.result(timeout=30) == [
                ("decode_timeout",
                 "decoding took longer than 0.2 s (--decode_timeout); the decoder was stopped"),
                *in_process(JPEG)]
            assert all(future.result() == in_process(JPEG) for future in quick)
        # The stopped worker is gone; its replacement and the other worker remain.
        assert len(set(pool.pids()) & old) == 1 and len(pool.pids()) == 2
        assert not any(map(_alive, old - set(pool.pids())))
    finally:
        pool.close()


def test_close_stops_every_worker():
    pool = DecodePool(2, timeout_s=60.0)
    workers = pool.pids()
    pool.close()
    assert not any(map(_alive, workers))


def test_default_decoding_uses_the_cores_this_process_may_run_on():
    cores = len(os.sched_getaffinity(0))
    assert Decoding().process_count() == usable_cores() <= cores
    # A process pinned to one core (as by taskset, or a container's cpuset) gets one.
    pinned = subprocess.run(
        [sys.executable, "-c", "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})"
         "; from transforms.decode_pool import Decoding; print(Decoding().process_count())"],
        capture_output=True, text=True, check=True, env=_package_path()).stdout
    assert pinned.strip() == "1"


def test_dataflow_decodes_in_process_unless_it_runs_one_sdk_process_per_vm():
    def processes(*flags):
        return ConvertOptions(["--manifest", "m.csv", "--output_dir", "out",
                               *flags]).run_settings().decoding.processes

    assert processes() is None  # the DirectRunner: a process per core, found there
    assert processes("--runner", "DataflowRunner") == 0
    assert processes("--runner", "DataflowRunner",
                     "--experiments", "no_use_multiple_sdk_containers") is None
    assert processes("--runner", "DataflowRunner", "--decode_processes", "3") == 3


def test_a_cpu_quota_caps_the_default(tmp_path):
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")  # 1.5 CPUs, as docker --cpus 1.5 writes it
    assert usable_cores(str(cpu_max)) == min(2, len(os.sched_getaffinity(0)))
    cpu_max.write_text("max 100000\n")
    assert usable_cores(str(cpu_max)) == len(os.sched_getaffinity(0))
    assert Decoding(processes=0, threads=3).thread_count() == 3
    assert Decoding(processes=4, threads=3).thread_count() == 8


def _wait_until_busy(pid: int) -> None:
    """Until the worker has spent CPU time on the image it was just given."""
    worker = psutil.Process(pid)
    start = sum(worker.cpu_times()[:2])
    deadline = time.monotonic() + 20
    while sum(worker.cpu_times()[:2]) - start < 0.1:
        assert time.monotonic() < deadline, "the worker never started decoding"
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    """Running, or sleeping: not gone and not a zombie (dead, not yet reaped)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_until_dead(pid: int) -> None:
    deadline = time.monotonic() + 20
    while _alive(pid):
        assert time.monotonic() < deadline, "the killed worker is still running"
        time.sleep(0.01)


# --- in a whole run ------------------------------------------------------------------------

def test_shards_are_the_same_bytes_whatever_the_number_of_decode_processes(tfrecord_output,
                                                                          tmp_path):
    # tfrecord_output decodes in a process per core (the default): compare with 0 and 1.
    def written(output):
        return {path.name: path.read_bytes() for path in output.iterdir()
                if path.name.endswith((".tfrecord", ".jsonl"))}

    for processes in ("0", "1"):
        output = convert(tmp_path / processes, "--manifest", str(SAMPLE_MANIFEST),
                         "--max_error_fraction", "0.25", "--num_shards", "2",
                         "--decode_processes", processes)
        assert written(output) == written(tfrecord_output)
        # The DoFn's teardown stopped the pool: no decoding process outlives the run.
        assert not [child for child in psutil.Process().children(recursive=True)
                    if "transforms.decode_pool" in child.cmdline()]
    # Not a comparison of nothing: every split has shards.
    assert {name.split("-")[0] for name in written(tfrecord_output)
            if name.endswith(".tfrecord")} == {"train", "validation", "test"}


def test_an_image_past_the_time_limit_is_dead_lettered_and_the_rest_written(tmp_path,
                                                                          slow_png):
    (tmp_path / "img").mkdir()
    rows = []
    for i in range(6):
        (tmp_path / "img" / f"{i}.jpg").write_bytes(encode(photo_like(40, 30, i), "JPEG"))
        rows.append(f"train,img/{i}.jpg,{('cat', 'dog')[i % 2]}")
    (tmp_path / "img" / "huge.png").write_bytes(slow_png)
    rows.append("train,img/huge.png,cat")
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    output = convert(tmp_path / "out", "--manifest", str(tmp_path / "manifest.csv"),
                     "--decode_processes", "2", "--decode_timeout", "0.2",
                     "--max_error_fraction", "0.5")
    summary = json.loads((output / "summary.json").read_text())
    assert (summary["rows_read"], summary["examples_written"],
            summary["rows_dead_lettered"]) == (7, 6, 1)
    (letter,) = [json.loads(line) for line in
                 (output / "errors-00000-of-00001.jsonl").read_text().splitlines()]
    assert (letter["uri"].endswith("img/huge.png"), letter["reason"]) == (True, "decode_timeout")


def _package_path() -> dict[str, str]:
    """The environment, with this checkout's packages importable."""
    return {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(transforms.__file__))}
