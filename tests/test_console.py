"""console: TensorFlow's native start-up lines and Beam's routine messages kept out of
what a run prints; everything else still printed, in order, as it comes."""

import subprocess
import sys
import textwrap

import pytest

from image_tfrecords.core.launcher.console import is_routine_native_line
from image_tfrecords.core.records.summary import (
    LabelWarning,
    RunOptions,
    ShardInfo,
    SplitInfo,
    Summary,
)
from image_tfrecords.pipeline.report import format_report

# Written by TensorFlow 2.21 at import and first use on a machine without a GPU.
PREAMBLE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
NO_DRIVERS = (
    b"I0000 00:00:1795400634.736171    8512 cudart_stub.cc:31] Could not find cuda "
    b"drivers on your machine, GPU will not be used."
)
NO_CUINIT = (
    b"E0000 00:00:1795400638.274696    8512 cuda_platform.cc:52] failed call to cuInit: "
    b"INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
)
REAL_ERROR = (
    b"E1123 03:10:11.123456   77 op_kernel.cc:1839] OP_REQUIRES failed at "
    b"lookup_table_op.cc:929 : NOT_FOUND: vocabulary file"
)


@pytest.mark.parametrize(
    "line", [PREAMBLE, NO_DRIVERS, NO_CUINIT, b"W0000 00:00:17.1 12 cpu_feature_guard.cc:210] x"]
)
def test_start_up_lines_are_routine(line):
    assert is_routine_native_line(line)


@pytest.mark.parametrize(
    "line",
    [
        REAL_ERROR,
        b"F1123 03:10:11.1 77 tensor.cc:12] Check failed: dims",  # a fatal error
        b"WARNING apache_beam.io.gcp.gcsio: retrying",  # Python logging, ours or Beam's
        b"Error: something else",
        b"Traceback (most recent call last):",
        b"",
    ],
)
def test_other_lines_are_not(line):
    assert not is_routine_native_line(line)


def run_python(code: str, verbose: bool) -> subprocess.CompletedProcess:
    writes = [PREAMBLE + b"\n", NO_DRIVERS + b"\n" + REAL_ERROR + b"\n"]
    split_routine_line = [NO_CUINIT[:30], NO_CUINIT[30:] + b"\n"]
    script = textwrap.dedent(f"""
        import os, sys, logging
        from image_tfrecords.core.launcher.console import quiet_console
        with quiet_console(verbose={verbose}):
            for data in {writes!r}:
                os.write(2, data)  # as C++ writes: straight to the descriptor
            print("a Python warning", file=sys.stderr, flush=True)
            os.write(2, b"progress 50%\\r")  # no line end: copied through all the same
            for data in {split_routine_line!r}:
                os.write(2, data)
            logging.getLogger("apache_beam.utils.subprocess_server").warning(
                "Really starting service at localhost:1 with cmd: java")
            logging.getLogger("apache_beam.utils.subprocess_server").warning("a real Beam warning")
            {code}
        print("after the block", file=sys.stderr)
        """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)


def test_routine_lines_are_dropped_and_the_rest_kept_in_order():
    result = run_python("", verbose=False)
    assert result.returncode == 0
    assert result.stderr.split(b"\n") == [
        REAL_ERROR,
        b"a Python warning",
        b"progress 50%\ra real Beam warning",
        b"after the block",
        b"",
    ]


def test_verbose_prints_everything():
    result = run_python("", verbose=True)
    for written in (
        PREAMBLE,
        NO_DRIVERS,
        NO_CUINIT,
        REAL_ERROR,
        b"Really starting service at localhost:1 with cmd: java",
    ):
        assert written + b"\n" in result.stderr


def test_a_crash_inside_still_shows_its_traceback():
    result = run_python("import faulthandler; faulthandler._sigsegv()", verbose=False)
    assert result.returncode != 0
    assert b"Fatal Python error: Segmentation fault" in result.stderr


HANG_UPS = textwrap.dedent("""
    import grpc, threading

    class StreamEnded(grpc.RpcError):  # what Beam's SDK worker threads see: code and details
        def __init__(self, code, details):
            self._code, self._details = code, details
        def code(self):
            return self._code
        def details(self):
            return self._details

    def stream_thread(code, details):
        def read():
            raise StreamEnded(code, details)
        thread = threading.Thread(target=read, name=details)
        thread.start()
        thread.join()

    stream_thread(grpc.StatusCode.CANCELLED, "Cancelled")
    stream_thread(grpc.StatusCode.UNKNOWN, "Application error processing RPC")
    stream_thread(grpc.StatusCode.UNAVAILABLE, "the server went away mid-job")
""")


@pytest.mark.parametrize("run_fails", [False, True])
def test_a_job_servers_hang_up_is_shown_only_when_the_run_fails(run_fails):
    """Streams that end CANCELLED, or UNKNOWN with Spark's state-service details, are the
    job server's hang-up at the job's end: held, shown only if the block raises. Any other
    stream error is shown as it happens."""
    failure = "; raise SystemExit('the run failed')" if run_fails else ""
    result = run_python(f"exec({HANG_UPS!r}){failure}", verbose=False)
    assert result.returncode == (1 if run_fails else 0)
    shown = result.stderr.decode()
    assert "the server went away mid-job" in shown
    assert ("Cancelled" in shown) is run_fails
    assert ("Application error processing RPC" in shown) is run_fails
    assert shown.count("Traceback") == (3 if run_fails else 1)


@pytest.mark.parametrize(
    "run_ends, shown",
    [
        ("", False),
        ("; raise KeyboardInterrupt", False),
        ("; raise SystemExit('the run failed')", True),
    ],
)
def test_streams_lost_while_the_launcher_stops_are_held_as_hang_ups(run_ends, shown):
    """Once the launcher is being stopped (stopping.py), its streams to the job server
    end UNAVAILABLE (it stops the job server, or a terminal's Ctrl-C reached the JVM
    too): held, shown only if the run fails, not when it was stopped (KeyboardInterrupt)."""
    lost = (
        "from image_tfrecords.core.launcher.console import expect_hang_ups; expect_hang_ups(True)\n"
        "stream_thread(grpc.StatusCode.UNAVAILABLE, 'the job server is stopped')\n"
    )
    result = run_python(f"exec({HANG_UPS + lost!r}){run_ends}", verbose=False)
    assert ("the job server is stopped" in result.stderr.decode()) is shown


@pytest.mark.parametrize("count, noun", [(1, ""), (2, "s")])
def test_the_tables_counts_take_their_nouns_plural_only_where_not_one(count, noun):
    """ "1 example written", "2 examples written": every count in the table with its noun."""
    summary = Summary(
        options=RunOptions(label_mode="detection"),
        rows_read=2 * count + count,
        rows_in_examples=2 * count,
        examples_written=count,
        rows_dead_lettered=0,
        rows_discarded=count,
        objects_left_out={"polyline": count},
        accounted=True,
        error_fraction=0.0,
        vocabulary={"label": ["cat"]},
        resumed_shards=count,
        label_warnings=(
            LabelWarning(
                kind="numeric",
                message="labels are numbers",
                labels=("1",),
                rows=count,
                first_rows=("m.csv:2",),
            ),
        ),
        splits={
            "train": SplitInfo(
                examples=count,
                labels={"cat": 2 * count},
                shards=(ShardInfo(file="s", records=1, bytes=1),) * count,
            )
        },
    )
    table = format_report(summary, "out", 1.0)
    assert f"= {2 * count} rows in {count} example{noun} written + 0 dead-lettered" in table
    assert f"({count} object{noun} left out)" in table
    assert f"labels are numbers; {count} row{noun}, the first" in table
    assert f"resumed: {count} of {count} shard{noun} reused" in table
