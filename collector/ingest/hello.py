"""HELLO frames as the collector stores and replays them: without the client's token, with the clock pairing the
collector applies, or marked as a recording sent again (``ringtrace replay``)."""

from __future__ import annotations

import msgpack
from ringtrace.wire.frames import FRAME_HEADER, FrameType, unpack_map

__all__ = ["rewritten_hello"]


def rewritten_hello(
    frame: bytes | memoryview, *, token: str | None = None, wall_ns: int | None = None, recorded: bool | None = None
) -> bytes:
    """The HELLO frame ``frame`` (header included) with the fields given set (``token`` or ``recorded`` taken out if
    empty or false); its other fields, known to this version or not, are kept.

    Raises:
        MalformedFrame: the body is not a map.
    """
    body = dict(unpack_map("HELLO", bytes(frame[FRAME_HEADER.size :])))
    for name, value in (("token", token), ("recorded", recorded)):
        if value is not None:
            body.pop(name, None)
            if value:
                body[name] = value
    if wall_ns is not None:
        body["wall_ns"] = wall_ns
    packed: bytes = msgpack.packb(body)
    return FRAME_HEADER.pack(len(packed), FrameType.HELLO) + packed
