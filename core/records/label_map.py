"""label_map.pbtxt: the Object Detection API's StringIntLabelMap, in protobuf text format,
written for detection outputs and read from --vocabulary.

Read with protobuf's own text-format parser, over the message's fields that name a class
(name, id, display_name) built here, so no copy of the API's .proto is needed; its other
fields (keypoints, ancestor_ids, frequency...) are skipped.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import NamedTuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

UNSEEN_LABEL_NAME = "[unseen label]"  # the OOV bucket's entry, with --unseen_label oov
# The vocabulary's entry for an id a pinned label map skips: ids stay the map's own, and
# the published label map leaves the entry out.
_GAP_NAME = "[no label map item: id {}]"
_GAP = re.compile(r"\[no label map item: id \d+\]")


class LabelMapItem(NamedTuple):
    id: int
    name: str
    display_name: str  # "" where the item has none


class LabelMapError(ValueError):
    """A label map that does not parse, or whose ids cannot be a vocabulary's."""


def read_label_map(text: str) -> tuple[LabelMapItem, ...]:
    """The items of a StringIntLabelMap in text format; LabelMapError naming the line of
    a syntax error, or the item of an id that is missing, below 1 or repeated."""
    label_map = _label_map_class()()
    try:
        text_format.Parse(text, label_map, allow_unknown_field=True)
    except text_format.ParseError as error:
        message = str(error).split(" : ", 1)[-1]
        raise LabelMapError(
            f"not a label map: line {error.GetLine()}, column {error.GetColumn()}: {message}"
        ) from None
    items = tuple(
        LabelMapItem(item.id, item.name.strip(), item.display_name.strip())
        for item in label_map.item
    )
    if not items:
        raise LabelMapError("the label map has no item")
    first: dict[int, int] = {}
    for number, item in enumerate(items, start=1):
        if item.id < 1:
            raise LabelMapError(
                f"item {number} ({item.name!r}) has id {item.id}: ids start "
                "at 1, as 0 is the background"
            )
        if item.id in first:
            other = items[first[item.id] - 1]
            raise LabelMapError(
                f"items {first[item.id]} ({other.name!r}) and {number} ({item.name!r}) both "
                f"have id {item.id}: a vocabulary gives each id one label, so merge such "
                "classes in the data instead"
            )
        first[item.id] = number
    return items


def vocabulary_of(items: Sequence[LabelMapItem], field: str) -> tuple[str, ...]:
    """The vocabulary whose entry i is the `field` of the item with id i + 1, gaps filled
    with entries no label matches; LabelMapError for an empty or repeated value."""
    by_id = {item.id: getattr(item, field) for item in items}
    seen: dict[str, int] = {}
    for item_id, value in sorted(by_id.items()):
        if not value:
            raise LabelMapError(f"the item with id {item_id} has no {field}")
        if value in seen:
            raise LabelMapError(
                f"the items with ids {seen[value]} and {item_id} are both "
                f"{field} {value!r}: a label would match both"
            )
        seen[value] = item_id
    return tuple(
        by_id.get(item_id, _GAP_NAME.format(item_id)) for item_id in range(1, max(by_id) + 1)
    )


def is_gap(name: str) -> bool:
    """Whether a vocabulary entry stands for an id the pinned label map skips."""
    return _GAP.fullmatch(name) is not None


@functools.cache
def _label_map_class() -> type:
    """StringIntLabelMap's message class, with the fields that name a class."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="image_tfrecords_label_map.proto", package="image_tfrecords"
    )
    item = proto.message_type.add(name="StringIntLabelMapItem")
    for number, (name, kind) in enumerate(
        (("name", "TYPE_STRING"), ("id", "TYPE_INT32"), ("display_name", "TYPE_STRING")), start=1
    ):
        item.field.add(
            name=name,
            number=number,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            type=descriptor_pb2.FieldDescriptorProto.Type.Value(kind),
        )
    label_map = proto.message_type.add(name="StringIntLabelMap")
    label_map.field.add(
        name="item",
        number=1,
        type_name=".image_tfrecords.StringIntLabelMapItem",
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("image_tfrecords.StringIntLabelMap")
    )


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def label_map_text(vocabulary: Sequence[str], oov_bucket: bool) -> str:
    """One item per label; ids are vocabulary ids + 1, as the API reserves 0.

    With the OOV bucket, unseen labels get the id after the vocabulary's. The ids a pinned
    label map skipped stay skipped.
    """
    names = [*vocabulary, *([UNSEEN_LABEL_NAME] if oov_bucket else [])]
    return "".join(
        f"item {{\n  id: {number}\n  name: {_quoted(name)}\n}}\n"
        for number, name in enumerate(names, start=1)
        if not is_gap(name)
    )


def _quoted(text: str) -> str:
    """A text-format string literal; other control characters as octal escapes."""
    escaped = re.sub(r'[\\"\n\r\t]', lambda match: _ESCAPES[match.group()], text)
    escaped = re.sub(r"[\x00-\x1f\x7f]", lambda match: f"\\{ord(match.group()):03o}", escaped)
    return f'"{escaped}"'
