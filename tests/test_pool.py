"""core/worker/pool.py: real worker processes writing real shards, killed for real."""

import concurrent.futures
import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import SAMPLE_MANIFEST, convert, encode, photo_like
from PIL import Image

import image_tfrecords
from image_tfrecords.core.records.records import LabelledRow, ManifestRow
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.workers import (
    Workers,
    default_process_count,
    usable_cores,
    usable_memory,
)
from image_tfrecords.core.worker import pool as shared_pool
from image_tfrecords.core.worker.pool import WorkerPool
from image_tfrecords.core.worker.shard_writer import (
    ShardTask,
    pack_rows,
    prepare_worker,
    write_shard,
)
from image_tfrecords.pipeline.options import ConvertOptions

SETTINGS = RunSettings(workers=Workers(read_threads=2))
SETUP = functools.partial(prepare_worker, {})  # as transforms/in_workers.py starts them
JPEG = encode(photo_like(48, 32, 1), "JPEG", quality=90)


@pytest.fixture(scope="module")
def slow_png():
    """A real image that takes about a second to decode: 81 megapixels of one colour
    (a 250 KB file, just under Pillow's pixel limit)."""
    return encode(Image.new("RGB", (9000, 9000), (10, 200, 30)), "PNG")


@pytest.fixture
def pool():
    started = WorkerPool(1, timeout_s=60.0, setup=SETUP)
    yield started
    started.close()


def shard_task(folder, images, name="out"):
    """A task writing one shard of `images` (file name -> bytes) into folder/name, their
    rows in file name order."""
    rows = []
    for line, (file_name, data) in enumerate(sorted(images.items()), start=1):
        (folder / file_name).write_bytes(data)
        rows.append(
            LabelledRow(
                ManifestRow("m.csv", line, "raw", "train", str(folder / file_name), ("cat",)), (0,)
            )
        )
    return ShardTask("train", 0, (pack_rows(row.to_json() for row in rows),), str(folder / name))


def files(folder):
    """Every file the shard's writing left, by path."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_workers_import_neither_tensorflow_nor_beam():
    # The pool, its workers' setup and every task a worker unpickles.
    modules = ", ".join(
        f"image_tfrecords.core.{name}"
        for name in (
            "worker.pool",
            "records.workers",
            "worker.shard_writer",
            "worker.shard_parts",
            "worker.row_tasks",
            "worker.near_search",
        )
    )
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, {modules}; "
            "print(' '.join(sorted({name.split('.')[0] for name in sys.modules})))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=_package_path(),
    ).stdout.split()
    assert "PIL" in imported
    assert not {"tensorflow", "apache_beam", "tensorflow_transform"} & set(imported)


def test_a_worker_writes_the_bytes_the_pipeline_process_writes(pool, tmp_path):
    gif = encode(photo_like(24, 24, 3).quantize(64), "GIF")
    rgba = encode(photo_like(33, 21, 1, "RGBA"), "PNG")
    images = {
        "a.jpg": JPEG,
        "b.gif": gif,
        "c.png": rgba,
        "d.jpg": JPEG[: len(JPEG) // 2],
        "e.txt": b"plain text",
        "f.jpg": encode(photo_like(48, 32, 2), "JPEG"),
    }
    in_process = shard_task(tmp_path, images, "here")
    there = shard_task(tmp_path, images, "there")
    here_outcome = write_shard(in_process, SETTINGS)
    there_outcome = pool.run(there, SETTINGS)
    assert (
        sorted(d.reason for d in here_outcome.dead_letters)
        == sorted(d.reason for d in there_outcome.dead_letters)
        == ["not_an_image", "truncated_image"]
    )
    assert here_outcome.sent().example_keys == there_outcome.example_keys  # as a task sends it
    assert here_outcome.written._replace(temp_path="") == there_outcome.written._replace(
        temp_path=""
    )
    assert {
        path: data
        for path, data in files(tmp_path / "here").items()
        if not path.startswith("receipts/")
    } == {
        path: data
        for path, data in files(tmp_path / "there").items()
        if not path.startswith("receipts/")
    }
    assert there_outcome.written.examples == 4


def test_a_worker_killed_mid_image_costs_only_that_image(pool, slow_png, tmp_path):
    images = {"a.jpg": JPEG, "b.png": slow_png, "c.jpg": encode(photo_like(40, 30, 5), "JPEG")}
    (pid,) = pool.pids()
    task = shard_task(tmp_path, images)
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        writing = thread.submit(pool.run, task, SETTINGS)
        _wait_until_busy(pid)
        os.kill(pid, signal.SIGKILL)
        outcome = writing.result(timeout=60)
    (dead,) = outcome.dead_letters
    assert (dead.uri.endswith("b.png"), dead.reason) == (True, "decode_crash")
    assert "killed by SIGKILL" in dead.message and "out-of-memory killer" in dead.message
    # The shard is what it would be had the image been rejected in place.
    assert outcome.written.examples == 2
    (tmp_path / "b.png").write_bytes(b"not an image after all")
    rejected = write_shard(dataclasses.replace(task, temp_dir=str(tmp_path / "rejected")), SETTINGS)
    assert [d.reason for d in rejected.dead_letters] == ["not_an_image"]
    assert (tmp_path / "out" / "train-00000.tfrecord").read_bytes() == (
        tmp_path / "rejected" / "train-00000.tfrecord"
    ).read_bytes()
    assert pool.pids() != [pid] and len(pool.pids()) == 1


def test_a_worker_killed_between_shards_loses_nothing(pool, tmp_path):
    (pid,) = pool.pids()
    os.kill(pid, signal.SIGKILL)
    _wait_until_dead(pid)
    # The shard goes to a new worker: none was being written when the old one died.
    outcome = pool.run(shard_task(tmp_path, {"a.jpg": JPEG}), SETTINGS)
    assert (outcome.written.examples, outcome.dead_letters) == (1, ())


def test_a_decode_past_the_time_limit_is_stopped_and_the_pool_goes_on(slow_png, tmp_path):
    pool = WorkerPool(2, timeout_s=0.2, setup=SETUP)
    try:
        old = set(pool.pids())
        with concurrent.futures.ThreadPoolExecutor(3) as threads:
            slow = threads.submit(
                pool.run, shard_task(tmp_path, {"a.png": slow_png, "b.jpg": JPEG}, "slow"), SETTINGS
            )
            # The image is written once: the tasks only differ in where their shard goes.
            quick_task = shard_task(tmp_path, {"c.jpg": JPEG})
            quick = [
                threads.submit(
                    pool.run,
                    dataclasses.replace(quick_task, temp_dir=str(tmp_path / f"quick{i}")),
                    SETTINGS,
                )
                for i in range(10)
            ]
            outcome = slow.result(timeout=60)
            assert [(d.reason, d.message) for d in outcome.dead_letters] == [
                (
                    "decode_timeout",
                    "reading and decoding took longer than 0.2 s (--decode_timeout); the "
                    "process was stopped and the shard written again without this image",
                )
            ]
            assert outcome.written.examples == 1
            assert all(future.result().written.examples == 1 for future in quick)
        # The stopped worker is gone; its replacement and the other worker remain.
        assert len(set(pool.pids()) & old) == 1 and len(pool.pids()) == 2
        assert not any(map(_alive, old - set(pool.pids())))
    finally:
        pool.close()


def test_an_error_writing_the_shard_is_raised_in_the_pipeline_process(pool, tmp_path):
    task = shard_task(tmp_path, {"a.jpg": JPEG})
    (tmp_path / "out").write_text("a file where the shard's folder goes")
    with pytest.raises(OSError, match="out"):
        pool.run(task, SETTINGS)
    assert len(pool.pids()) == 1  # the worker lives on


def test_close_stops_every_worker():
    pool = WorkerPool(2, timeout_s=60.0, setup=SETUP)
    workers = pool.pids()
    pool.close()
    assert not any(map(_alive, workers))


def test_a_pool_started_early_is_the_one_acquired_with_the_same_settings():
    """start_early (the launcher, before TensorFlow loads) starts the shared pool that the
    run's DoFns then acquire: the same processes, started once; asked for with other
    settings it is replaced, and one never acquired is stopped by the last release."""
    shared_pool.start_early(2, 60.0, SETUP)
    shared = shared_pool.acquire(2, 60.0, functools.partial(prepare_worker, {}))  # equal
    workers = shared.pids()
    assert len(workers) == 2 and shared_pool.acquire(2, 60.0, SETUP) is shared
    for _ in range(3):
        shared_pool.release()
    assert not any(map(_alive, workers))

    shared_pool.start_early(1, 60.0, SETUP)
    other = shared_pool.acquire(1, 60.0, functools.partial(prepare_worker, {"s3_region_name": "x"}))
    assert other is not shared and len(other.pids()) == 1
    shared_pool.release()
    shared_pool.release()
    assert other.pids() == []

    shared_pool.start_early(1, 60.0, SETUP)
    time.sleep(0.5)
    (early,) = [
        child.pid
        for child in psutil.Process().children()
        if "image_tfrecords.core.worker.pool" in child.cmdline()
    ]
    shared_pool.release()
    assert not _alive(early)


def test_the_runs_end_stops_the_shared_pool_that_a_dofn_never_released():
    """Beam's teardown is best effort: a DoFn of a failed run may never release its
    acquire(). The run's end (stop_shared) stops the pool anyway, a late release counts
    for nothing, and a pool asked for with other settings (the next run's) is a new one,
    never the last run's with its time limit and its buckets' options."""
    shared_pool.start_early(1, 60.0, SETUP)
    leaked = shared_pool.acquire(1, 60.0, SETUP)
    workers = leaked.pids()
    shared_pool.stop_shared()
    assert leaked.pids() == [] and not any(map(_alive, workers))
    shared_pool.release()  # the leaked DoFn's teardown, late

    first = shared_pool.acquire(1, 60.0, SETUP)
    first_workers = first.pids()
    other = shared_pool.acquire(1, 0.5, SETUP)  # not released: the other run's
    assert other is not first and not any(map(_alive, first_workers))
    assert shared_pool.acquire(1, 0.5, SETUP) is other
    shared_pool.stop_shared()
    assert other.pids() == []


def test_by_default_a_worker_per_core_this_process_may_run_on():
    cores = len(os.sched_getaffinity(0))
    assert Workers().process_count() == usable_cores() <= cores
    # A process pinned to one core (as by taskset, or a container's cpuset) gets one.
    pinned = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})"
            "; from image_tfrecords.core.records.workers import Workers"
            "; print(Workers().process_count())",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=_package_path(),
    ).stdout
    assert pinned.strip() == "1"


def test_dataflow_has_a_worker_per_sdk_process_unless_it_runs_one_sdk_process_per_vm():
    def processes(*flags):
        return (
            ConvertOptions(["--manifest", "m.csv", "--output_dir", "out", *flags])
            .run_settings()
            .workers.processes
        )

    assert processes() is None  # the DirectRunner: a process per core, found there
    assert processes("--runner", "DataflowRunner") == 1
    assert (
        processes("--runner", "DataflowRunner", "--experiments", "no_use_multiple_sdk_containers")
        is None
    )
    assert processes("--runner", "DataflowRunner", "--worker_processes", "3") == 3


def test_a_cpu_quota_caps_the_default(tmp_path):
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")  # 1.5 CPUs, as docker --cpus 1.5 writes it
    assert usable_cores(str(cpu_max)) == min(2, len(os.sched_getaffinity(0)))
    cpu_max.write_text("max 100000\n")
    assert usable_cores(str(cpu_max)) == len(os.sched_getaffinity(0))


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


def test_shards_are_the_same_bytes_whatever_the_number_of_worker_processes(
    tfrecord_output, tmp_path
):
    # tfrecord_output is written by a process per core (the default): compare with 0 and 1.
    def written(output):
        return {
            path.name: path.read_bytes()
            for path in output.iterdir()
            if path.name.endswith((".tfrecord", ".jsonl"))
        }

    for processes in ("0", "1"):
        output = convert(
            tmp_path / processes,
            "--manifest",
            str(SAMPLE_MANIFEST),
            "--max_error_fraction",
            "0.25",
            "--num_shards",
            "2",
            "--worker_processes",
            processes,
        )
        assert written(output) == written(tfrecord_output)
        # The DoFn's teardown stopped the pool: no worker process outlives the run.
        assert not [
            child
            for child in psutil.Process().children(recursive=True)
            if "image_tfrecords.core.worker.pool" in child.cmdline()
        ]
    # Not a comparison of nothing: every split has shards.
    assert {
        name.split("-")[0] for name in written(tfrecord_output) if name.endswith(".tfrecord")
    } == {"train", "validation", "test"}


def test_an_image_past_the_time_limit_is_dead_lettered_and_the_rest_written(tmp_path, slow_png):
    (tmp_path / "img").mkdir()
    rows = []
    for i in range(6):
        (tmp_path / "img" / f"{i}.jpg").write_bytes(encode(photo_like(40, 30, i), "JPEG"))
        rows.append(f"train,img/{i}.jpg,{('cat', 'dog')[i % 2]}")
    (tmp_path / "img" / "huge.png").write_bytes(slow_png)
    rows.append("train,img/huge.png,cat")
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    output = convert(
        tmp_path / "out",
        "--manifest",
        str(tmp_path / "manifest.csv"),
        "--worker_processes",
        "2",
        "--decode_timeout",
        "0.2",
        "--max_error_fraction",
        "0.5",
    )
    summary = json.loads((output / "summary.json").read_text())
    assert (summary["rows_read"], summary["examples_written"], summary["rows_dead_lettered"]) == (
        7,
        6,
        1,
    )
    (letter,) = [
        json.loads(line)
        for line in (output / "errors-00000-of-00001.jsonl").read_text().splitlines()
    ]
    assert (letter["uri"].endswith("img/huge.png"), letter["reason"]) == (True, "decode_timeout")


def _package_path() -> dict[str, str]:
    """The environment, with this checkout's packages importable."""
    return {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(image_tfrecords.__file__))}


def test_the_default_holds_as_many_workers_as_memory_holds_largest_images(tmp_path):
    """A maximum-size image (Pillow's 89.5 Mpx) costs ~1.75 GB in its worker: 8 cores
    with 4 GB get 2 workers, not 8; a smaller --max_image_pixels more; never none."""
    gb = 1 << 30
    assert default_process_count(8, 4 * gb, 89_478_485) == 2
    assert default_process_count(8, 4 * gb, 10_000_000) == 8
    assert default_process_count(8, 1 * gb, 89_478_485) == 1
    assert default_process_count(2, 64 * gb, 89_478_485) == 2
    memory_max = tmp_path / "memory.max"
    memory_max.write_text(f"{2 * gb}\n")  # as docker --memory 2g writes it
    assert usable_memory((str(memory_max),)) == 2 * gb
    memory_max.write_text("max\n")
    assert usable_memory((str(memory_max),)) == os.sysconf("SC_PHYS_PAGES") * os.sysconf(
        "SC_PAGE_SIZE"
    )
    assert Workers(max_pixels=10**12).process_count() == 1  # no memory holds 16 TB


def test_a_pool_whose_worker_did_not_start_leaves_none_of_its_workers_running(monkeypatch):
    """A stop that kills the first worker while the second is still being started (a run
    stopped before its job, its pool started early): the start fails and the worker
    started after the kill is stopped too, not left running (CI saw one outlive its test)."""
    started = []
    real_start = shared_pool._Worker.start

    def start_then_note(worker):
        real_start(worker)
        started.append(worker.pid)

    def first_killed(worker):
        if worker.pid == started[0]:
            os.kill(worker.pid, signal.SIGKILL)
        return real_wait_ready(worker)

    real_wait_ready = shared_pool._Worker.wait_ready
    monkeypatch.setattr(shared_pool._Worker, "start", start_then_note)
    monkeypatch.setattr(shared_pool._Worker, "wait_ready", first_killed)
    with pytest.raises(RuntimeError, match="a worker process did not start"):
        WorkerPool(2, timeout_s=60.0, setup=SETUP)
    assert len(started) == 2
    assert not [pid for pid in started if psutil.pid_exists(pid) and _running(pid)]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
