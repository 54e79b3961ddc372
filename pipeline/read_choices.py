"""How the manifests are read where the options leave it open and the data says it: the
split column under a name of its own, and the separator of several labels in a field.

Settled once, by the launcher, from the first rows of the CSV manifests (the same rows
for every run of the same files): the choice is named in the console and written into
the options, so the RowRules every worker reads by, summary.json's options and a
resumed run's fingerprint all hold it; no chunk guesses for itself. Where the first rows
say it two ways, the run is refused, naming both and the option that chooses.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

from image_tfrecords.pipeline.options import ConvertOptions
from image_tfrecords.core.chunks import ManifestSource
from image_tfrecords.core.inputs.automl_csv import (CsvFormat, SplitColumn, common_separator,
                                     split_name_columns)
from image_tfrecords.core.inputs.rows import DEFAULT_LABEL_SEPARATOR, ManifestError
from image_tfrecords.core.inputs.sources import read_source
from image_tfrecords.core.records import ManifestRow

# Data rows of each CSV manifest the choices are made from (the label sample's size).
ROWS_SAMPLED = 200


def settle_read_choices(convert: ConvertOptions, manifests: Sequence[ManifestSource]) -> None:
    """Sets --split_column and --label_separator where they are not given and the CSV
    manifests' first rows decide them; raises ManifestError where they say it two ways."""
    csvs = [source for source in manifests if source.format == CsvFormat.name]
    if convert.split_column is None:
        convert.split_column = _split_column(csvs, convert)
    if convert.label_separator is None:
        convert.label_separator = (_label_separator(csvs, convert)
                                   if convert.row_rules().multi_label
                                   else DEFAULT_LABEL_SEPARATOR)


def _split_column(csvs: Sequence[ManifestSource], convert: ConvertOptions) -> str | None:
    """The one column of the CSVs' headers, under a name the reader does not know, that
    holds only split names; None where there is none."""
    rules = convert.row_rules()
    found = {source.path: split_name_columns(source.path, rules, ROWS_SAMPLED)
             for source in csvs}
    names = {column.name.lower() for columns in found.values() for column in columns}
    if not names:
        return None
    if len(names) > 1 or not all(found.values()):
        raise ManifestError(
            f"{_listed(found)}; a split column is chosen only where every CSV manifest has "
            "one such column, under one name: name it with --split_column NAME, or pass "
            "--split_column none to split every row by hash (--split_fractions)")
    column = next(iter(found.values()))[0]  # every manifest's one, under one name
    print(f"image-tfrecords: splits from the column {column.name!r} "
          f"({', '.join(column.values)}); --split_column none splits by hash instead")
    return column.name


def _listed(found: dict[str, tuple[SplitColumn, ...]]) -> str:
    """Each manifest's columns that hold only split names, or that it has none."""
    return "; ".join(f"{path}: {_described(columns)}" for path, columns in found.items())


def _described(columns: Sequence[SplitColumn]) -> str:
    if not columns:
        return "no column of another name holds only split names"
    if len(columns) > 1:
        return (f"the columns {', '.join(repr(column.name) for column in columns)} hold "
                "only split names")
    return (f"the column {columns[0].name!r} holds only split names "
            f"({', '.join(columns[0].values)})")


def _label_separator(csvs: Sequence[ManifestSource], convert: ConvertOptions) -> str:
    """The separator the CSVs' sampled label fields hold (common_separator), named in
    the console; the default where none holds one."""
    whole_fields = dataclasses.replace(convert.row_rules(), label_separator=None)
    fields = [label for source in csvs
              for row in itertools.islice(read_source(source, whole_fields), ROWS_SAMPLED)
              if isinstance(row, ManifestRow) for label in row.labels]
    choice = common_separator(fields)
    if choice is None:
        return DEFAULT_LABEL_SEPARATOR
    print(f"image-tfrecords: labels joined by {choice.separator!r} (in "
          f"{choice.fields_with_it} of the {choice.fields} label fields sampled); "
          "--label_separator TEXT chooses another")
    return choice.separator
