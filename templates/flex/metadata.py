"""templates/flex/metadata.json, made from ConvertOptions: `python templates/flex/metadata.py`.

Every option of the job is a template parameter, with the option's help text. Beam's own
options (sdk_container_image, max_num_workers, ...) are launch options, given to
`gcloud dataflow flex-template run` or the launch request as they are, so they are not
listed. tests/test_flex_template.py fails when the committed file drifts from the options.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
from typing import Any

from image_tfrecords.pipeline.options import ConvertOptions, parse_flag

METADATA_FILE = pathlib.Path(__file__).with_name("metadata.json")

# What the job cannot run without. --manifest and --image_folder are either/or, so neither
# is required on its own; a launch with neither fails with a usage error.
REQUIRED = frozenset({"output_dir"})

# On Dataflow every path is in Cloud Storage: a path on the launcher is gone when it exits.
_GCS_PATH = r"^gs://[^\n\r]+$"
# Where an option's type says less than its values must look like.
_REGEXES = {
    "manifest": _GCS_PATH,
    "image_folder": _GCS_PATH,
    "output_dir": _GCS_PATH,
    "split_fractions": r"^[0-9.]+,[0-9.]+,[0-9.]+$",
}
_TYPE_REGEXES = {int: r"^[0-9]+$", float: r"^[0-9]*\.?[0-9]+$"}


def template_metadata() -> dict[str, Any]:
    """The metadata.json content for the options ConvertOptions defines now."""
    parser = argparse.ArgumentParser()
    ConvertOptions._add_argparse_args(parser)  # noqa: SLF001 - Beam's own extension point
    options = [
        action
        for action in parser._actions  # noqa: SLF001
        if action.dest != "help" and action.help != argparse.SUPPRESS  # a run's, for its next
    ]
    unknown = (REQUIRED | _REGEXES.keys()) - {action.dest for action in options}
    if unknown:
        raise ValueError(f"not options of the job any more: {sorted(unknown)}")
    return {
        "name": "image-tfrecords",
        "description": "Converts an image manifest (CSV or Vertex AI JSON Lines) or an image "
        "folder into split-partitioned TFRecord shards, with a tf.Transform "
        "label vocabulary, dead letters and summary.json.",
        "parameters": [_parameter(action) for action in options],
    }


def _parameter(action: argparse.Action) -> dict[str, Any]:
    if action.nargs == 0:
        # The launcher passes --name=value, which argparse refuses for a bare flag.
        raise ValueError(
            f"--{action.dest} takes no value; a Flex Template passes "
            f"--{action.dest}=true, so give it a value as --overwrite does"
        )
    parameter = {
        "name": action.dest,
        "label": action.dest.replace("_", " ").capitalize(),
        "helpText": action.help,
        "isOptional": action.dest not in REQUIRED,
    }
    regex = _regex(action)
    if regex:
        parameter["regexes"] = [regex]
    return parameter


def _regex(action: argparse.Action) -> str | None:
    if action.dest in _REGEXES:
        return _REGEXES[action.dest]
    if action.choices:
        return f"^({'|'.join(re.escape(str(choice)) for choice in action.choices)})$"
    if action.type is parse_flag:
        return "^(true|false)$"
    return _TYPE_REGEXES.get(action.type)


if __name__ == "__main__":
    METADATA_FILE.write_text(json.dumps(template_metadata(), indent=2) + "\n")
