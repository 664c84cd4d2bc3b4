"""What every frame body shares: msgpack maps in and out, and fields read with their type and range checked."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

import msgpack
from ringtrace.wire.errors import MalformedFrame

__all__ = ["MAX_FIELD_INT", "MAX_PID", "MAX_U32", "body_field", "pack_body", "token_body", "unpack_map"]

#: Integers in control frames fit a signed 64-bit field, so that sums and JSON stay in range.
MAX_FIELD_INT: Final = 2**63 - 1
MAX_PID: Final = 2**32 - 1
MAX_U32: Final = 2**32 - 1


def pack_body(value: object) -> bytes:
    """``value`` (a frame's map) as msgpack."""
    packed: bytes = msgpack.packb(value)
    return packed


def unpack_map(frame: str, body: bytes | memoryview) -> Mapping[str, Any]:
    """The msgpack map that is the body of a ``frame`` frame.

    Raises:
        MalformedFrame: the body is not valid msgpack, or not a map.
    """
    try:
        data = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several types for bad input; all mean the same here
        raise MalformedFrame(f"{frame} frame: body is not valid msgpack ({exc})") from None
    if not isinstance(data, dict):
        raise MalformedFrame(f"{frame} frame: body must be a map, got {type(data).__name__}")
    return data


def body_field(data: Mapping[str, Any], frame: str, name: str, kind: type, high: int = MAX_FIELD_INT) -> Any:
    """Field ``name`` of a ``frame`` frame's map, of type ``kind`` (an int also in ``0..high``).

    Raises:
        MalformedFrame: the field is missing, of another type, or out of range.
    """
    try:
        value = data[name]
    except KeyError:
        raise MalformedFrame(f"{frame} frame: missing field {name!r}") from None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedFrame(f"{frame} frame: field {name!r} must be {kind.__name__}, got {type(value).__name__}")
    if isinstance(value, int) and not 0 <= value <= high:
        raise MalformedFrame(f"{frame} frame: field {name!r} must be in 0..{high}, got {value}")
    return value


def token_body(frame: str, body: bytes) -> int:
    """The u64 token that is the whole body of a FLUSH or FLUSH_ACK frame."""
    if len(body) != 8:
        raise MalformedFrame(f"{frame} frame: body must be 8 bytes (u64 token), got {len(body)}")
    token: int = struct.unpack("<Q", body)[0]
    return token
