"""Extra manifest columns (TFRecorder's flexible schema): each named column becomes a
typed feature of the example.

A schema maps column names to types, as a JSON object given inline or in a file:
`{"age": "integer", "weight": "float", "caption": "string", "breed": "categorical",
"depth_uri": "image", "mask_uri": "segmentation"}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import NamedTuple

from image_tfrecords.core.storage import storage

INTEGER, FLOAT, STRING, CATEGORICAL, IMAGE = "integer", "float", "string", "categorical", "image"
SEGMENTATION = "segmentation"  # a map of class indices: DeepLab's image/segmentation/class/*
COLUMN_TYPES = (INTEGER, FLOAT, STRING, CATEGORICAL, IMAGE, SEGMENTATION)
# Names become feature keys and vocabulary file names.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = ("label", "image")  # the label vocabulary's file name, the image/* keys
_INT64 = (-(2**63), 2**63 - 1)
_FLOAT32_MAX = 3.4028234663852886e38


class ExtraColumn(NamedTuple):
    name: str
    type: str


class SchemaError(ValueError):
    """A schema that cannot be used: reported before the job starts."""


def load_schema(text: str | None) -> tuple[ExtraColumn, ...]:
    """--schema: inline JSON (starting with "{") or the path of a JSON file, local or remote."""
    if not text:
        return ()
    if text.lstrip().startswith("{"):
        source = "--schema"
    else:
        source = text
        try:
            with storage.open_read(text) as file:
                text = file.read().decode("utf-8")
        except Exception as error:
            raise SchemaError(f"cannot read the schema file {source}: {error}") from error
    try:
        mapping = json.loads(text)
    except ValueError as error:
        raise SchemaError(f"{source} is not valid JSON: {error}") from error
    if not isinstance(mapping, dict) or not mapping:
        raise SchemaError(f"{source} must be a JSON object of column name -> type")
    return schema_columns(mapping, source)


def schema_columns(mapping: Mapping[str, str], source: str = "schema") -> tuple[ExtraColumn, ...]:
    columns = []
    for name, kind in mapping.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise SchemaError(
                f"{source}: column name {name!r} must be letters, digits and _ "
                "(it becomes a feature key and a file name)"
            )
        if name.lower() in _RESERVED:
            raise SchemaError(
                f"{source}: column name {name!r} is taken by the output's own features"
            )
        if kind not in COLUMN_TYPES:
            raise SchemaError(
                f"{source}: column {name!r} has type {kind!r}; use one of {', '.join(COLUMN_TYPES)}"
            )
        columns.append(ExtraColumn(name, kind))
    if sum(column.type == SEGMENTATION for column in columns) > 1:
        raise SchemaError(
            f"{source}: one column may be of type {SEGMENTATION} (an example "
            "has one segmentation map)"
        )
    return tuple(columns)


def parse_value(column: ExtraColumn, text: str) -> int | float | str:
    """The typed value of one field; ValueError with a message naming the column."""
    if column.type == STRING:
        return text
    if not text:
        raise ValueError(f"column {column.name!r} ({column.type}) is empty")
    if column.type == INTEGER:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"column {column.name!r}: {text!r} is not an integer") from None
        if not _INT64[0] <= value <= _INT64[1]:
            raise ValueError(f"column {column.name!r}: {text} does not fit in int64")
        return value
    if column.type == FLOAT:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"column {column.name!r}: {text!r} is not a number") from None
        if not abs(value) <= _FLOAT32_MAX:  # also false for NaN
            raise ValueError(f"column {column.name!r}: {text!r} is not a finite float32")
        return value
    return text  # categorical: a vocabulary entry; image, segmentation: a URI, resolved by
    # the reader
