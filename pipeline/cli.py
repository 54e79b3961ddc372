"""The `image-tfrecords` command: `convert` writes an output; `verify`, `inspect` and
`report` read one back (they import TensorFlow only, not Beam); `diff` compares two
outputs' example indexes (neither)."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import NoReturn

from image_tfrecords.core.launcher import console
from image_tfrecords.core.launcher.console import quiet_console
from image_tfrecords.core.worker import interrupts
from image_tfrecords.pipeline.versions import version_lines

_USAGE = """usage: image-tfrecords COMMAND [options]

commands:
  convert   convert an image manifest into split-partitioned TFRecord shards
            (image-tfrecords convert --help lists its options, --help_beam Beam's)
  verify    read every shard of an output back and check it against summary.json
  inspect   write the first records of a split back as image files plus a CSV
  report    write an output's report.html again, from its own files
  diff      say what changed from one output's examples to another's

image-tfrecords --version prints this package's version, the folder its code runs from,
and the versions of Beam, TensorFlow and tf.Transform it runs with
"""


BEAM_HELP = "--help_beam"
VERSION = "--version"
# What `convert --help` shows first after the options: one command for each way in.
_EXAMPLES = """examples:
  image-tfrecords convert --manifest data.csv --output_dir out/
  image-tfrecords convert --image_folder photos/ --output_dir out/
  image-tfrecords convert --label_mode detection --output_dir out/ \\
      --manifest train=coco/instances.json --image_dir coco/images
  image-tfrecords convert --label_mode detection --manifest yolo/data.yaml \\
      --output_dir out/
  image-tfrecords convert --manifest gs://bucket/data.csv \\
      --output_dir gs://bucket/tfrecords
  image-tfrecords convert --manifest data.csv --output_dir out/ --resume
      (after a stopped run: the same command, continued)"""
_VERBOSE_HELP = "print all that TensorFlow's libraries print, their start-up lines included"


def main(argv: Sequence[str] | None = None) -> int:
    console.escape_what_is_printed()  # labels and paths come from strangers' files
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_USAGE)
        return 0 if args else 2
    if args[0] == VERSION:
        print(version_lines())
        return 0
    command, rest = args[0], args[1:]
    commands = {
        "convert": convert_main,
        "verify": verify_main,
        "inspect": inspect_main,
        "report": report_main,
        "diff": diff_main,
    }
    if command in commands:
        try:
            code = commands[command](rest)
        except BrokenPipeError:  # `... --help | head`: what was wanted was read
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = 0
        exit_now(code)
    print(f"error: unknown command {command!r}\n\n{_USAGE}", file=sys.stderr)
    return 2


def convert_main(argv: Sequence[str] | None = None) -> int:
    # Every entry of a conversion comes here (`python -m image_tfrecords`, the Flex
    # Template's, main()), and what it prints holds labels and paths from strangers' files.
    console.escape_what_is_printed()
    # From here on SIGINT and SIGTERM stop the run in one line, also in the imports
    # below, which take seconds (core/worker/interrupts.py).
    with interrupts.signals_stop():
        try:
            return _convert(argv)
        except (
            interrupts.Stopped
        ) as stopped:  # in the imports, before image_tfrecords.pipeline.run's
            print(f"error: {stopped.said()}", file=sys.stderr)
            return stopped.exit_code


def _convert(argv: Sequence[str] | None) -> int:
    _quiet_tensorflow()
    # The Dataflow job id and console URL: a user needs them, and Airflow's Beam operator
    # reads the id from the "Created job with id: [...]" line.
    logging.getLogger("apache_beam.runners.dataflow.internal.apiclient").setLevel(logging.INFO)
    args = list(sys.argv[1:] if argv is None else argv)
    if BEAM_HELP in args:
        print(_beam_help())
        return 0
    if VERSION in args:  # `python -m image_tfrecords --version`
        print(version_lines())
        return 0
    if "-h" in args or "--help" in args:
        print(_own_help())
        return 0
    from image_tfrecords.pipeline.collector import uncollected  # noqa: PLC0415
    from image_tfrecords.pipeline.stage_lines import show_stages  # noqa: PLC0415

    show_stages(args)  # the imports below take seconds
    with uncollected():
        from image_tfrecords.pipeline import run  # noqa: PLC0415 - imports TensorFlow, after the env above
    interrupts.raise_if_stopping()  # a stop that an import's `except:` swallowed

    # The report's wall time is the command's: the imports (~5 s) are counted in.
    return run.main(args, started=_process_started())


def _process_started() -> float:
    """When this process started, as time.time() gives times.

    Not psutil's create_time: it adds the boot time, which Linux gives in whole seconds
    (/proc/stat's btime), so the wall time it gave was up to a second long (7.3 s for a
    run of 6.4). The process's start in clock ticks since boot (/proc/self/stat) against
    the clock since boot is exact to a tick.
    """
    try:
        with open("/proc/self/stat", "rb") as stat:
            ticks = int(stat.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError):  # no /proc (macOS): psutil's
        import psutil  # noqa: PLC0415

        return psutil.Process().create_time()
    return time.time() - age


def verify_main(argv: Sequence[str]) -> int:
    args = _output_arguments(
        "verify",
        "Read every shard back: record CRCs, examples, images, label ids, and the "
        "counts in summary.json. Exits 1 naming the first bad shard/record.",
        argv,
    )
    try:
        with quiet_console(args.verbose):
            from image_tfrecords.verify import verify  # noqa: PLC0415 - after the env above

            verified = verify(args.output_dir)
    except (ValueError, FileNotFoundError) as problem:  # VerifyError is a ValueError
        return _output_problem(args.output_dir, problem)
    splits = ", ".join(f"{split} {count}" for split, count in verified.examples.items())
    print(
        f"ok: {sum(verified.examples.values())} examples in {verified.shards} shards "
        f"({splits}): every record, image and label id checked"
    )
    _say_later_failure(args.output_dir)
    return 0


def inspect_main(argv: Sequence[str]) -> int:
    def selection(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--split", default="train")
        parser.add_argument("-n", type=int, default=20, help="how many records (default 20)")
        parser.add_argument("--out", required=True, help="folder to write the files into")

    args = _output_arguments(
        "inspect",
        "Write the first N records of a split as image files (their stored "
        "bytes), a CSV of their other features and, for detection, PNGs with the "
        "boxes drawn.",
        argv,
        selection,
    )
    try:
        with quiet_console(args.verbose):
            from image_tfrecords.inspection import CSV_FILE, inspect_split  # noqa: PLC0415

            written = inspect_split(args.output_dir, args.split, args.n, args.out)
    except (ValueError, FileNotFoundError) as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    print(f"{len(written) - 1} files and {CSV_FILE} written to {args.out}")
    return 0


def report_main(argv: Sequence[str]) -> int:
    args = _output_arguments(
        "report",
        "Write OUTPUT/report.html again from the output's own files (summary.json, "
        "the shards, the dead letters and the copies found), in one pass over the "
        "shards: for an output written before reports were, or one whose report "
        "was lost.",
        argv,
    )
    try:
        with quiet_console(args.verbose):
            from image_tfrecords.report import rebuild_report  # noqa: PLC0415

            written = rebuild_report(args.output_dir)
    except (ValueError, FileNotFoundError) as problem:
        return _output_problem(args.output_dir, problem)
    print(f"written: {written}")
    _say_later_failure(args.output_dir)
    return 0


def diff_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="image-tfrecords diff",
        description="Say what changed from the examples of output OLD to those of output "
        "NEW: examples added, removed, relabelled, with another image or in another split, "
        "and labels new or gone, from the example index each output keeps in its sources/ "
        "folder (no shard is read). Exits 0 when it could compare, changed or not; 2 "
        "naming the file it could not read.",
    )
    parser.add_argument("old", metavar="OLD", help="the earlier output (local, gs://, s3://...)")
    parser.add_argument("new", metavar="NEW", help="the later output")
    parser.add_argument(
        "--json", action="store_true", help="print the changes as one JSON object instead"
    )
    args = parser.parse_args(argv)
    from image_tfrecords.core.report.changes import output_changes  # noqa: PLC0415 - this command's alone

    try:
        changes = output_changes(args.old, args.new)
    except (ValueError, OSError) as problem:  # not an output, an index unreadable or missing
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.json:
        print(changes.model_dump_json(indent=2))
    else:
        print("\n".join([f"{args.old} -> {args.new}", *changes.lines()]))
    return 0


def _say_later_failure(output_dir: str) -> None:
    """A run that failed after the output was published: it is still the earlier run's
    (exit 0: what was checked is sound), which a user who ran --overwrite must know."""
    from image_tfrecords.output import last_failed_run, output_folder  # noqa: PLC0415

    failed = last_failed_run(output_folder(output_dir))
    if failed:
        print(
            f"warning: {output_dir}: this is the output an earlier run published; a later "
            f"run failed and published nothing: {failed.said()}",
            file=sys.stderr,
        )


def _output_problem(output_dir: str, problem: Exception) -> int:
    """Says what is wrong with the output; exit 2 for a folder that is no output (a usage
    error), 1 for an output that is bad."""
    print(f"error: {output_dir}: {problem}", file=sys.stderr)
    from image_tfrecords.output import NotAnOutput  # noqa: PLC0415 - loaded by the command

    return 2 if isinstance(problem, NotAnOutput) else 1


def _output_arguments(
    command: str,
    description: str,
    argv: Sequence[str],
    more: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """The options of a command that reads an output (verify, inspect, report): the
    folder, `more`'s, and --verbose; TensorFlow is quietened before the command loads it."""
    parser = argparse.ArgumentParser(prog=f"image-tfrecords {command}", description=description)
    parser.add_argument("output_dir", help="an image-tfrecords output (local or gs://)")
    if more:
        more(parser)
    parser.add_argument("--verbose", action="store_true", help=_VERBOSE_HELP)
    args = parser.parse_args(argv)
    _quiet_tensorflow()
    return args


def _quiet_tensorflow() -> None:
    # TensorFlow's C++ start-up chatter hides the report; set before TensorFlow loads.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def exit_now(code: int) -> NoReturn:
    """Exits without interpreter teardown, once stdout and stderr are flushed.

    Tearing down TensorFlow, gRPC and Beam's threads takes about 1.2 s after every output
    file is closed (measured); a user should not wait for it.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _own_help() -> str:
    """This job's options, in their groups, each with its default; Beam's in a line."""
    from image_tfrecords.pipeline.options import ConvertOptions  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="image-tfrecords convert",
        allow_abbrev=False,
        add_help=False,
        formatter_class=lambda prog: _DefaultsShown(prog, max_help_position=30),
        usage="%(prog)s (--manifest PATH | --image_folder DIR) --output_dir DIR [options]",
        description=textwrap.fill(
            "Convert an image manifest, annotations or a folder of images into "
            "split-partitioned TFRecord or ArrayRecord shards.",
            width=_help_width(),
        ),
        epilog=_EXAMPLES
        + "\n\n"
        + textwrap.fill(
            f"Beam's options (--runner, Dataflow's, Flink's and Spark's, --s3_*, --hdfs_*, "
            f"...) pass through to the runner unchanged: {BEAM_HELP} lists them all.",
            width=_help_width(),
        ),
    )
    ConvertOptions._add_argparse_args(parser)  # noqa: SLF001 - Beam's own extension point
    return parser.format_help()


def _beam_help() -> str:
    """Every Beam option, since all pass through (the same options the run accepts: see
    options.unknown_option_problem)."""
    from image_tfrecords.pipeline.options import options_classes  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="image-tfrecords convert",
        allow_abbrev=False,
        conflict_handler="resolve",
        add_help=False,
        usage="%(prog)s ... [Beam options]",
        description="Beam's options, passed to the runner unchanged (this job's own: --help).",
    )
    _, *beam_options = options_classes()
    for options_class in beam_options:
        options_class._add_argparse_args(parser)  # noqa: SLF001
    return parser.format_help()


def _help_width() -> int:
    """The width argparse wraps option help to (the terminal's, less its margin)."""
    return shutil.get_terminal_size().columns - 2


class _DefaultsShown(argparse.RawDescriptionHelpFormatter):
    """Each option's help ends with its default, where it has one; the description and
    epilog are printed as written (the examples keep their lines)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        shown = action.help or ""
        if action.default not in (None, "", False, argparse.SUPPRESS) and action.option_strings:
            shown += " (default: %(default)s)"
        return shown
