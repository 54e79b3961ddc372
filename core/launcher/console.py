"""What a run prints besides its own report: nothing that reads as a failure when none is.

TensorFlow's C++ libraries write start-up lines straight to file descriptor 2 before
their logging is set up, so TF_CPP_MIN_LOG_LEVEL does not reach them; on a machine
without a GPU every run began with

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1795400634.736171    8512 cudart_stub.cc:31] Could not find cuda drivers ...
    E0000 00:00:1795400638.274696    8512 cuda_platform.cc:52] failed call to cuInit: ...

quiet_console() passes descriptor 2 through a filter thread that drops those lines (the
informational and warning ones, and the GPU probe's errors) and copies everything else
through as it comes: Python's own warnings and tracebacks, any other native error. Beam's
log lines that only describe its normal work are dropped too, and so is a warning of ours
said once already: a format read in the pipeline's process (KITTI, VOC) is read by the
checks before the job and by each pass over its rows, each saying what it left out.
`--verbose` shows it all.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

from image_tfrecords.core.worker import interrupts

# What a terminal may take for a command (ESC starts CSI and OSC sequences: clearing the
# screen, setting the title, writing the clipboard through OSC 52; BEL ends OSC; C1's CSI
# and OSC do the same on their own): every C0 control but tab, newline and carriage
# return (a progress bar's), DEL and C1, shown as \\uXXXX, as JSON writes them.
_COMMANDS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_COMMAND_BYTES = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]")


def terminal_safe(text: str) -> str:
    """`text` with every character a terminal could take for a command escaped."""
    return _COMMANDS.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def _terminal_safe_bytes(data: bytes) -> bytes:
    """terminal_safe for UTF-8 bytes on their way to descriptor 2."""
    return _COMMAND_BYTES.sub(
        lambda found: b"\\u%04x" % ord(found.group().decode("utf-8", "replace")), data
    )


class TerminalSafe(io.TextIOBase):
    """A text stream (sys.stdout, sys.stderr) whose writes are made terminal_safe: labels,
    file names and messages come from strangers' files, and everything the commands print
    passes here (--json already escapes; its strings stay valid JSON). report.html and
    summary.json keep the text as it is."""

    def __init__(self, stream: TextIO) -> None:
        self.wrapped = stream

    def write(self, text: str) -> int:
        self.wrapped.write(terminal_safe(text))
        return len(text)

    def flush(self) -> None:
        self.wrapped.flush()

    def isatty(self) -> bool:
        return self.wrapped.isatty()

    def fileno(self) -> int:
        return self.wrapped.fileno()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer...
        return getattr(self.wrapped, name)


def escape_what_is_printed() -> None:
    """sys.stdout and sys.stderr from here on TerminalSafe (the command line's entry)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, TerminalSafe):
            setattr(sys, name, TerminalSafe(stream))


def unescaped(stream: TextIO) -> TextIO:
    """The stream a TerminalSafe wraps, or `stream` itself."""
    return stream.wrapped if isinstance(stream, TerminalSafe) else stream


# absl's format: severity, date (0000 before logging is set up), time, thread, file:line].
_NATIVE_LINE = re.compile(rb"^([IWEF])\d{4} [\d:.]+ +\d+ ([\w.-]+):\d+\] ")
_ABSL_PREAMBLE = b"WARNING: All log messages before absl::InitializeLog() is called"
_LINE_END = re.compile(rb"[\r\n]")
# The native errors of probing for a GPU that is not there: not a failure of the run.
_GPU_PROBES = (
    b"cuda_platform.cc",
    b"cuda_driver.cc",
    b"cuda_executor.cc",
    b"cuda_diagnostics.cc",
    b"cudart_stub.cc",
)
# Beam's messages that describe its normal work: (logger, start of the message).
_ROUTINE_BEAM_MESSAGES = (
    # A Flink or Spark job server started and stopped (its log is named instead:
    # pipeline/engines.py).
    ("apache_beam.utils.subprocess_server", "Really starting service"),
    ("apache_beam.utils.subprocess_server", "Really destroying service"),
)
# When a Flink or Spark job ends, its job server hangs up on the SDK workers that LOOPBACK
# runs in this process: their gRPC streams end CANCELLED, or (Spark's state service, when
# the job's end races a state read) UNKNOWN "Application error processing RPC", and Beam
# logs it (and its threads raise it) as if it were a failure. A job that really failed
# says so itself; what its threads raised is shown then too (not when the launcher was
# stopped: it hung up on the job itself, pipeline/stopping.py).
_HANG_UP_MESSAGE = (
    "apache_beam.runners.worker.data_plane",
    "Failed to read inputs in the data plane",
)
# Set while the launcher is being stopped (pipeline/stopping.py): it stops its job server, or a
# terminal's Ctrl-C reached the job server's JVM too (one process group), so every gRPC
# stream to it ends UNAVAILABLE: Beam's reader of the job's messages, LOOPBACK's workers.
_STOPPING = threading.Event()


def expect_hang_ups(stopping: bool) -> None:
    """Whether the launcher is being stopped: then a stream that ends UNAVAILABLE is a
    hang-up too (held, and not shown, as the stop is no failure of the run)."""
    if stopping:
        _STOPPING.set()
    else:
        _STOPPING.clear()


def is_routine_native_line(line: bytes) -> bool:
    """Whether a line on descriptor 2 is native start-up chatter, not a problem."""
    if line.startswith(_ABSL_PREAMBLE):
        return True
    native = _NATIVE_LINE.match(line)
    if not native:
        return False
    severity, source = native.groups()
    # I and W: what TF_CPP_MIN_LOG_LEVEL=2 (set by the CLI) hides once logging is set up.
    return severity in (b"I", b"W") or (severity == b"E" and source in _GPU_PROBES)


@contextlib.contextmanager
def quiet_console(verbose: bool = False) -> Iterator[None]:
    """Within the block, routine native lines and Beam messages are not printed."""
    if verbose:
        yield
        return
    with (
        _routine_beam_messages_dropped(),
        _repeated_warnings_dropped(),
        _hang_ups_dropped(),
        _native_lines_filtered(),
    ):
        yield


@contextlib.contextmanager
def _routine_beam_messages_dropped() -> Iterator[None]:
    filters = []
    for name, start in _ROUTINE_BEAM_MESSAGES:

        def routine(record: logging.LogRecord, start: str = start) -> bool:
            return not record.getMessage().startswith(start)

        logging.getLogger(name).addFilter(routine)
        filters.append((name, routine))
    try:
        yield
    finally:
        for name, routine in filters:
            logging.getLogger(name).removeFilter(routine)


@contextlib.contextmanager
def _repeated_warnings_dropped() -> Iterator[None]:
    """Within the block, a message the root logger (the readers' logging.warning) has
    logged already is not logged again."""
    said: set[tuple[int, str]] = set()

    def first_time(record: logging.LogRecord) -> bool:
        message = (record.levelno, record.getMessage())
        if message in said:
            return False
        said.add(message)
        return True

    root = logging.getLogger()
    root.addFilter(first_time)
    try:
        yield
    finally:
        root.removeFilter(first_time)


@contextlib.contextmanager
def _hang_ups_dropped() -> Iterator[None]:
    """Within the block, a job server's hang-up is not logged, and what a thread raised
    because of one is held: shown only if the block ends in an exception (a failed run)."""

    def logged_hang_up(record: logging.LogRecord) -> bool:
        return not (
            record.getMessage().startswith(_HANG_UP_MESSAGE[1])
            and record.exc_info
            and _is_hang_up(record.exc_info[1])
        )

    held: list[threading.ExceptHookArgs] = []

    def hold_hang_up(args: threading.ExceptHookArgs) -> None:
        if _is_hang_up(args.exc_value):
            held.append(args)
        else:
            raised(args)

    logger = logging.getLogger(_HANG_UP_MESSAGE[0])
    logger.addFilter(logged_hang_up)
    raised, threading.excepthook = threading.excepthook, hold_hang_up
    try:
        yield
    except KeyboardInterrupt:  # the launcher was stopped (pipeline/stopping.py): it hung up itself
        raise
    except BaseException:
        for args in held:
            raised(args)
        raise
    finally:
        threading.excepthook = raised
        logger.removeFilter(logged_hang_up)


def _is_hang_up(error: BaseException | None) -> bool:
    import grpc  # noqa: PLC0415 - Beam's own dependency, loaded by then

    if not isinstance(error, grpc.RpcError):
        return False
    if error.code() == grpc.StatusCode.UNAVAILABLE:  # from the signal on (interrupts.py)
        return _STOPPING.is_set() or interrupts.STOPPING.is_set()
    return error.code() == grpc.StatusCode.CANCELLED or (
        error.code() == grpc.StatusCode.UNKNOWN
        and error.details() == "Application error processing RPC"
    )


@contextlib.contextmanager
def _native_lines_filtered() -> Iterator[None]:
    """Descriptor 2 goes through a pipe to a thread that copies all but routine lines to
    where it went before; restored, with everything written drained, on leaving."""
    sys.stderr.flush()
    real = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    # The copier writes to a descriptor of its own, closed when it ends: it may outlive
    # the block, reading what processes started within it still write.
    copier = threading.Thread(
        target=_copy_lines, args=(read_end, os.dup(real)), daemon=True, name="native-stderr-filter"
    )
    copier.start()
    # A crash's traceback goes straight to the terminal, as the copier dies with the
    # process; where something else set up faulthandler (pytest does), it is left alone.
    crash_file = None if faulthandler.is_enabled() else os.fdopen(os.dup(real), "w")
    if crash_file:
        faulthandler.enable(crash_file)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # the pipe's last writer here: the copier reads to its end
        copier.join(timeout=2.0)  # not for processes started within that hold the pipe still
        if crash_file:
            faulthandler.disable()
            crash_file.close()
        os.close(real)


def _copy_lines(read_end: int, out: int) -> None:
    """Copies to `out` all but routine lines. A line ends at \n or at \r (a progress
    bar's update: what follows it starts a line of its own); one that cannot be a native
    line is copied as it arrives, not held back until its end."""
    pending = b""
    with os.fdopen(read_end, "rb", buffering=0) as pipe, os.fdopen(out, "wb", buffering=0):
        while chunk := pipe.read(65536):
            pending += chunk
            while end := _LINE_END.search(pending):
                line, pending = pending[: end.end()], pending[end.end() :]
                if not is_routine_native_line(line[:-1]):
                    _write_all(out, _terminal_safe_bytes(line))
            if pending and not _may_become_native(pending):
                _write_all(out, _terminal_safe_bytes(pending))
                pending = b""
        if pending and not is_routine_native_line(pending):
            _write_all(out, _terminal_safe_bytes(pending))


def _may_become_native(start: bytes) -> bool:
    """Whether a line that begins with `start` could still turn out to be routine."""
    if _ABSL_PREAMBLE.startswith(start[: len(_ABSL_PREAMBLE)]):
        return True
    return start[:1] in (b"I", b"W", b"E") and (
        len(start) < 64 and b"]" not in start or _NATIVE_LINE.match(start) is not None
    )


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]
