"""What a run on a terminal is doing before its progress bar shows: a line per stage.

Before its first image is written, when the bar starts (progress.py), a run loads Apache
Beam (1-3 s) and TensorFlow (3-4 s), checks its inputs, and reads every row for the label
vocabulary (tf.Transform) and the shard plan: on a slow machine ~28 s in which nothing
showed. Each stage is one line on stderr, only on a terminal (a log gets progress.py's
lines, and a piped run's stderr stays as it was) and not with --quiet. The first is said
before Beam is imported, so this module imports nothing but the standard library; the
Python API says none (it never calls show_stages).
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence

PREFIX = "image-tfrecords: "
_SHOWN = threading.Event()  # set by show_stages: this run says its stages


def show_stages(argv: Sequence[str]) -> None:
    """From now on each stage is said, on a terminal and without --quiet; the first now."""
    if sys.stderr.isatty() and not _quiet(argv):
        _SHOWN.set()
    stage("starting: loading Apache Beam")


def stage(text: str) -> None:
    """Says what the run does next, where show_stages said stages are shown."""
    if _SHOWN.is_set():
        print(PREFIX + text, file=sys.stderr, flush=True)


def _quiet(argv: Sequence[str]) -> bool:
    # The options are parsed once Beam is loaded (options.py); only --quiet is needed now,
    # in the forms add_switch takes: --quiet, --quiet=true|false, --quiet true|false.
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--quiet", nargs="?", const="true", default="false")
    return parser.parse_known_args(list(argv))[0].quiet.strip().lower() != "false"
