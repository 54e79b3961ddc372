"""The `image-tfrecords` command: `image-tfrecords convert [options]`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

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
        exit_now(convert_main(rest))
    print(f"error: unknown command {command!r}\n\n{_USAGE}", file=sys.stderr)
    return 2


def convert_main(argv: Sequence[str] | None = None) -> int:
    # TensorFlow's C++ start-up chatter hides the report; set before TensorFlow loads.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # The dead-letter file is skipped when no row was rejected; Beam warns about that.
    logging.getLogger("apache_beam.io.filebasedsink").addFilter(
        lambda record: not record.getMessage().startswith("No shards found to finalize"))
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        print(_full_help())
        return 0
    from pipeline import run  # noqa: PLC0415 - imports TensorFlow, after the env above

    return run.main(args)


def exit_now(code: int) -> NoReturn:
    """Exits without interpreter teardown, once stdout and stderr are flushed.

    Tearing down TensorFlow, gRPC and Beam's threads takes about 1.2 s after every output
    file is closed (measured); a user should not wait for it.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _full_help() -> str:
    """Help for this job's options and for every Beam option, since all pass through."""
    from apache_beam.options.pipeline_options import PipelineOptions  # noqa: PLC0415

    from pipeline.options import ConvertOptions  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="image-tfrecords convert", allow_abbrev=False, conflict_handler="resolve",
        usage="%(prog)s --manifest CSV --output_dir DIR [options]",
        description="Convert an image manifest into split-partitioned TFRecord shards.")
    beam_options = [cls for cls in PipelineOptions.__subclasses__() if cls is not ConvertOptions]
    ConvertOptions._add_argparse_args(parser)  # noqa: SLF001 - Beam's own extension point
    beam_group = parser.add_argument_group("Beam options (passed to the runner unchanged)")
    for options_class in beam_options:
        options_class._add_argparse_args(beam_group)  # noqa: SLF001
    return parser.format_help()
