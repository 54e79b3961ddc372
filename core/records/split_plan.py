"""The split of each image that a grouped split planned (--split_by groups:
core/launcher/grouped_split.py), as a file the worker processes read once each: one JSON
line per image, `[uri, split]`, and beside it the plan's SplitGroups record, which the
run's summary.json carries."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

from image_tfrecords.core.records.documents import load_json
from image_tfrecords.core.records.splits import SPLITS
from image_tfrecords.core.records.summary import SplitGroups
from image_tfrecords.core.storage import storage

_INFO_SUFFIX = ".info.json"


def write_plan(path: str, splits: Mapping[str, str], info: SplitGroups) -> None:
    with storage.create(path) as file:
        for uri, split in sorted(splits.items()):
            file.write(json.dumps([uri, split], ensure_ascii=True).encode() + b"\n")
    with storage.create(path + _INFO_SUFFIX) as file:
        file.write(info.model_dump_json().encode())


def plan_info(path: str) -> SplitGroups:
    with storage.open_read(path + _INFO_SUFFIX) as file:
        return SplitGroups.model_validate_json(file.read())


@functools.lru_cache(maxsize=1)
def planned_splits(path: str) -> dict[str, str]:
    """The plan's split of each image URI, read once in each process; ValueError naming
    the line that is not one."""
    splits = {}
    with storage.open_read(path) as file:
        for number, line in enumerate(file, 1):
            entry = load_json(line)
            if not (
                isinstance(entry, list)
                and len(entry) == 2
                and isinstance(entry[0], str)
                and entry[1] in SPLITS
            ):
                raise ValueError(f"{path} line {number}: not a [uri, split] of the split plan")
            splits[entry[0]] = entry[1]
    return splits
