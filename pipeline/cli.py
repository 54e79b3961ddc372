"""The `image-tfrecords` command: `image-tfrecords convert [options]`."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

_USAGE = """usage: image-tfrecords COMMAND [options]

commands:
  convert   convert an image manifest into split-partitioned TFRecord shards
            (image-tfrecords convert --help lists every option, Beam's included)
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "convert":
        return convert_main(rest)
    print(f"error: unknown command {command!r}\n\n{_USAGE}", file=sys.stderr)
    return 2


def convert_main(argv: Sequence[str] | None = None) -> int:
    # TensorFlow's C++ start-up chatter hides the report; set before TensorFlow loads.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from pipeline import run  # noqa: PLC0415 - imports TensorFlow, after the env above

    return run.main(sys.argv[1:] if argv is None else argv)
