"""How the manifests are read where the options leave it open and the data says it: the
split column under a name of its own, and the separator of several labels in a field
(CSV's: InputFormat.settled_rules).

Settled once, by the launcher, from the first rows of the manifests (the same rows for
every run of the same files): the choice is named in the console and written into the
options, so the RowRules every worker reads by, summary.json's options and a resumed
run's fingerprint all hold it; no chunk guesses for itself. Where the first rows say it
two ways, the run is refused, naming both and the option that chooses.
"""

from __future__ import annotations

from collections.abc import Sequence

from image_tfrecords.core.inputs.sources import FORMATS
from image_tfrecords.core.records.choices import DEFAULT_LABEL_SEPARATOR
from image_tfrecords.core.records.chunks import ManifestSource
from image_tfrecords.pipeline.options import ConvertOptions


def settle_read_choices(convert: ConvertOptions, manifests: Sequence[ManifestSource]) -> None:
    """Sets --split_column and --label_separator where they are not given and the
    manifests' first rows decide them (each format's settled_rules, asked of its own
    manifests); raises ManifestError where they say it two ways."""
    rules = convert.row_rules()
    for format in FORMATS.values():
        rules = format.settled_rules(
            [source for source in manifests if source.format == format.name], rules, _say
        )
    convert.split_column = rules.split_column
    convert.label_separator = (
        DEFAULT_LABEL_SEPARATOR if rules.label_separator is None else rules.label_separator
    )


def _say(line: str) -> None:
    print(f"image-tfrecords: {line}")
