"""The Protocol Buffers wire format, as much of it as a writer needs: varints, length-delimited fields, doubles.

Encoding only, and schema-free: a message is its fields one after another, each a key (field number and wire type)
then a value; callers name the field numbers (``perfetto_protos.py`` has Perfetto's) and build a message by joining
fields.
A field's bytes are made once where they repeat (a key, a small number, an interned name): the export writes millions.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["I64", "LEN", "VARINT", "boolean", "double", "key", "message", "string", "uint", "varint"]

#: Wire types.
VARINT: Final = 0
I64: Final = 1
LEN: Final = 2

_UINT64: Final = 1 << 64
_DOUBLE: Final = struct.Struct("<d")
#: Varints of 0 to 16383 (one or two bytes), and the two low bytes of a larger one (each flagged "more follows"):
#: made once (about 1 MB), since every field of every packet needs some.
_SMALL: Final = tuple(bytes((i,)) if i < 128 else bytes((i & 0x7F | 0x80, i >> 7)) for i in range(16384))
_LOW_BYTES: Final = tuple(bytes((i & 0x7F | 0x80, i >> 7 | 0x80)) for i in range(16384))
#: The rest of a large varint, by its bits above the lowest 14: they change slowly in a run of timestamps (every
#: 16 us of ns), so a timestamp costs a lookup of its low bytes and of these.
_HIGH_PARTS: dict[int, bytes] = {}
_MAX_HIGH_PARTS: Final = 4096


def varint(value: int) -> bytes:
    """``value`` as a base-128 varint: an unsigned integer, or a negative one as its 64-bit two's complement (as
    protobuf writes int32 and int64).

    Raises:
        ValueError: ``value`` does not fit in 64 bits.
    """
    if value >= 16384:
        if value >= _UINT64:
            raise ValueError(f"a varint holds at most 64 bits, got {value}")
        high = _HIGH_PARTS.get(value >> 14)
        if high is None:
            if len(_HIGH_PARTS) >= _MAX_HIGH_PARTS:
                _HIGH_PARTS.clear()
            high = _HIGH_PARTS[value >> 14] = varint(value >> 14)
        return _LOW_BYTES[value & 0x3FFF] + high
    if value >= 0:
        return _SMALL[value]
    if value < -(1 << 63):
        raise ValueError(f"a varint holds at most 64 bits, got {value}")
    return varint(value + _UINT64)


def key(field: int, wire_type: int) -> bytes:
    """The key that starts a field."""
    return varint(field << 3 | wire_type)


def uint(field: int, value: int) -> bytes:
    """A varint field: any integer type, bool or enum (negative values as int64 writes them)."""
    return varint(field << 3) + varint(value)


def boolean(field: int, value: bool) -> bytes:
    return varint(field << 3) + (b"\x01" if value else b"\x00")


def double(field: int, value: float) -> bytes:
    return varint(field << 3 | I64) + _DOUBLE.pack(value)


def message(field: int, data: bytes) -> bytes:
    """A length-delimited field: an embedded message's bytes, or raw bytes."""
    return varint(field << 3 | LEN) + varint(len(data)) + data


def string(field: int, text: str) -> bytes:
    """A string field, UTF-8 (a lone surrogate, which UTF-8 cannot hold, becomes ``?``)."""
    data = text.encode("utf-8", "replace")
    return varint(field << 3 | LEN) + varint(len(data)) + data
