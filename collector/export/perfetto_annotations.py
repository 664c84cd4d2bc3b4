"""Values of a Perfetto trace's events: debug annotations (an event's args, nested as they are), counter values, the
counter track a value goes on, and a span's flow arrows."""

from __future__ import annotations

import struct
from typing import Any, Final

from ringtrace.collector.export import protobuf as pb
from ringtrace.collector.export.flows import span_flows
from ringtrace.collector.export.perfetto_protos import (
    ANNOTATION_NAME,
    ARRAY_VALUES,
    BOOL_VALUE,
    COUNTER_VALUE,
    DICT_ENTRIES,
    DOUBLE_COUNTER_VALUE,
    DOUBLE_VALUE,
    FLOW_IDS,
    INT64,
    INT_VALUE,
    LEGACY_JSON_VALUE,
    STRING_VALUE,
    TERMINATING_FLOW_IDS,
    UINT64,
    UINT_VALUE,
)

__all__ = ["annotation_value", "as_text", "counter_name", "counter_value", "flow_fields"]

#: Nesting of args written as such; deeper values are written as text.
_MAX_DEPTH: Final = 64
_DOUBLE: Final = struct.Struct("<d")
_FIXED64: Final = struct.Struct("<Q")


def flow_fields(args: dict[str, Any]) -> bytes:
    """A span's flow arrows (``flows.py``): the one leaving it (``flow_ids``), those ending at it
    (``terminating_flow_ids``)."""
    leaving, arriving = span_flows(args)
    fields = b"" if leaving is None else FLOW_IDS + _FIXED64.pack(leaving)
    for flow in arriving:
        fields += TERMINATING_FLOW_IDS + _FIXED64.pack(flow)
    return fields


def counter_value(value: Any) -> bytes | None:
    """A counter's value field, or None for a value that is not a number."""
    if type(value) is int and value in INT64:
        return COUNTER_VALUE + pb.varint(value)
    if type(value) is float or type(value) is int:
        return DOUBLE_COUNTER_VALUE + _DOUBLE.pack(float(value))
    return None


def annotation_value(value: Any, depth: int) -> bytes:
    """A debug annotation's value fields: numbers, text, maps and lists as they are (bytes as hex and anything else
    as text, as the Chrome export shows them)."""
    kind = type(value)
    if kind is str:
        return pb.string(STRING_VALUE, value)
    if kind is int:
        if value in INT64:
            return INT_VALUE + pb.varint(value)
        if value in UINT64:
            return UINT_VALUE + pb.varint(value)
        return pb.string(STRING_VALUE, str(value))
    if kind is float:
        return DOUBLE_VALUE + _DOUBLE.pack(value)
    if kind is bool:
        return BOOL_VALUE + (b"\x01" if value else b"\x00")
    if value is None:
        return pb.string(LEGACY_JSON_VALUE, "null")
    if depth >= _MAX_DEPTH:
        return pb.string(STRING_VALUE, as_text(value))
    if kind is dict:
        if not value:
            return pb.string(LEGACY_JSON_VALUE, "{}")
        entries = []
        for key, item in value.items():
            entry = pb.string(ANNOTATION_NAME, key if type(key) is str else as_text(key)) + annotation_value(
                item, depth + 1
            )
            entries.append(DICT_ENTRIES + pb.varint(len(entry)) + entry)
        return b"".join(entries)
    if kind is list or kind is tuple:
        if not value:
            return pb.string(LEGACY_JSON_VALUE, "[]")
        items = [annotation_value(item, depth + 1) for item in value]
        return b"".join(ARRAY_VALUES + pb.varint(len(item)) + item for item in items)
    return pb.string(STRING_VALUE, as_text(value))


def counter_name(name: str, key: object) -> str:
    """The track of a counter's value under ``key``: the counter's name, and the key but for ``value`` (``mem rss``,
    as Chrome JSON's viewers name a series)."""
    if key == "value":
        return name
    return f"{name} {key if type(key) is str else as_text(key)}"


def as_text(value: object) -> str:
    """A key or value that is not text, as text: bytes as hex, anything else as its repr."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return repr(value)
