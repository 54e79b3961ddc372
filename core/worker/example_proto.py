"""tf.train.Example bytes without TensorFlow, for the worker processes that write shards.

A worker must not import TensorFlow (2-3 s and ~400 MB each), and the protobuf classes
other packages ship for Example (the `tfrecord` package's) cannot be loaded beside
TensorFlow's, which the pipeline's own process has. The message is small enough to
write directly in protobuf's wire format:

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }
    Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                            Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }   FloatList { repeated float value = 1 [packed]; }
    Int64List { repeated int64 value = 1 [packed]; }

written as TensorFlow's `SerializeToString(deterministic=True)` writes it: map entries in
key order (upb's: see _map_order), each with its key and value, a list's message present
even when empty.
tests/test_example_proto.py compares the bytes with TensorFlow's for every kind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

BYTES, FLOAT, INT64 = "bytes", "float", "int64"
# Feature's field per kind: its tag byte (field number << 3 | 2, length-delimited).
_KIND_TAG = {BYTES: b"\x0a", FLOAT: b"\x12", INT64: b"\x1a"}
_FIELD_1 = b"\x0a"  # Example.features, Features.feature, the map key, each list's values
_MAP_VALUE = b"\x12"

Value = bytes | int | float
Values = Sequence[Value]


def serialize_example(features: Mapping[str, tuple[str, Values]]) -> bytes:
    """The Example of `features`: key -> (kind, values), kind BYTES, FLOAT or INT64.

    Each message is built as a list of pieces with its length known, and the pieces are
    joined once at the end: an image's bytes are copied once, into the Example.
    """
    return _example({key.encode(): _entry(key, *value) for key, value in features.items()})


def with_features(record: bytes, features: Mapping[str, tuple[str, Values]]) -> bytes:
    """The Example `record` with `features` in place of its own of the same keys (or
    beside them), every other feature's bytes kept: what serialize_example gives for the
    whole, without decoding the image. ValueError for bytes that are not an Example as
    serialize_example writes one: nothing of it is dropped unseen."""
    entries: dict[bytes, list] = {key: [entry] for key, entry in _entries(record)}
    entries |= {key.encode(): _entry(key, *value) for key, value in features.items()}
    return _example(entries)


def _entry(key: str, kind: str, values: Values) -> list[bytes]:
    """The pieces of one entry of the features' map: its key, then its Feature."""
    feature = _field(_KIND_TAG[kind], _list(kind, values))
    return [*_field(_FIELD_1, [key.encode()]), *_field(_MAP_VALUE, feature)]


def _example(entries: Mapping[bytes, list]) -> bytes:
    """The Example of the map's entries (key -> the entry's pieces), in upb's order."""
    pieces: list = []
    for key in sorted(entries, key=_map_order):
        pieces += _field(_FIELD_1, entries[key])
    # No features: Example.features is left unset, as TensorFlow leaves it.
    return b"".join(_field(_FIELD_1, pieces)) if pieces else b""


def _map_order(key: bytes) -> bytes:
    """Protobuf's (upb's) deterministic order of string map keys: by their UTF-8 bytes,
    except that a key comes after the longer keys it begins ("a/text" before "a", "" last).
    0xFF, never a byte of UTF-8, sorts a key's end after any byte that could follow."""
    return key + b"\xff"


def _list(kind: str, values: Values) -> list[bytes]:
    if kind == BYTES:
        return [piece for value in values for piece in _field(_FIELD_1, [value])]
    if not values:
        return []  # a packed field with no values is left out
    if kind == FLOAT:
        # As protobuf's float field: a double rounded to the nearest float32, inf past it.
        with np.errstate(over="ignore"):
            packed = np.asarray(values, dtype=np.float64).astype("<f4").tobytes()
    else:
        packed = b"".join(_varint(value & 0xFFFF_FFFF_FFFF_FFFF) for value in values)
    return _field(_FIELD_1, [packed])


def _field(tag: bytes, payload: list[bytes]) -> list[bytes]:
    """A length-delimited field: its tag and length, then the payload's pieces."""
    return [tag + _varint(sum(map(len, payload))), *payload]


def _varint(value: int) -> bytes:
    """Base-128, least significant group first; a negative int64 is its two's complement
    (ten bytes)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def first_bytes_values(record: bytes, keys: frozenset[str]) -> dict[str, bytes]:
    """The first value of each bytes feature of `keys` that the Example `record` holds,
    read without copying the others (an image); ValueError for bytes that are not an
    Example as serialize_example writes one."""
    found = {}
    for key, entry in _entries(record):
        if (name := key.decode("utf-8", "replace")) in keys:
            for kind_tag, values in _fields(dict(_fields(entry)).get(_MAP_VALUE[0], b"")):
                if kind_tag == _KIND_TAG[BYTES][0]:
                    found[name] = next((bytes(value) for _, value in _fields(values)), b"")
    return found


def features_digest(record: bytes, leaving_out: frozenset[str]) -> str:
    """The SHA-256 of the Example `record`'s features but those of `leaving_out`, each
    key with its serialized values, in the order of their keys (a map's order is the
    writer's), read without copying the features left out (an image)."""
    digest = hashlib.sha256()
    for _, entry in sorted(
        (key, entry)
        for key, entry in _entries(record)
        if key.decode("utf-8", "replace") not in leaving_out
    ):
        digest.update(len(entry).to_bytes(8, "little"))
        digest.update(entry)
    return digest.hexdigest()


def _entries(record: bytes) -> Iterator[tuple[bytes, memoryview]]:
    """The key and the whole payload of each entry of the Example's features map;
    ValueError at a field serialize_example does not write."""
    for tag, features in _fields(memoryview(record)):
        if tag != _FIELD_1[0]:
            raise ValueError(f"field {tag >> 3} of the Example is not its features")
        for entry_tag, entry in _fields(features):
            if entry_tag != _FIELD_1[0]:
                raise ValueError(f"field {entry_tag >> 3} of the features is not an entry")
            yield bytes(dict(_fields(entry)).get(_FIELD_1[0], b"")), entry


def _fields(message: memoryview) -> list[tuple[int, memoryview]]:
    """The (tag, payload) of each length-delimited field of `message`."""
    fields, at = [], 0
    while at < len(message):
        tag = message[at]
        if tag & 0x7 != 2:
            raise ValueError(f"field {tag >> 3} is not length-delimited")
        length, at = _read_varint(message, at + 1)
        if at + length > len(message):
            raise ValueError("a field runs past the end of the message")
        fields.append((tag, message[at : at + length]))
        at += length
    return fields


def _read_varint(data: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a length is cut short")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at
