"""The ringtrace wire format, sans-I/O: frames to bytes (``encode``), and frame bodies back to frames.

No sockets, threads or asyncio here. ``PROTOCOL.md`` beside this file is the one description of the format. Its
constants are in ``frame_types.py``; the frames that open a connection in ``handshake_frames.py``, those that declare
a stream's tables in ``table_frames.py``, and the rest (EVENTS and the control frames) here, with the set of all of
them; ``reader.py`` reads a stream of bytes into frames, and ``decoder.py`` holds the rules of a stream (order, tables,
limits).

Theory of operation
-------------------
``encode(frame)`` gives the bytes of one frame, ``preamble()`` those each side sends first. Frames are frozen
dataclasses; their msgpack bodies are maps whose unknown keys are ignored, so a field can be added without a new
version. ``FRAME_CLASSES`` maps each frame type to its class (``decode_body``), and ``SENDABLE_BY`` says which types
each peer may send.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import msgpack
from ringtrace.wire.errors import FrameTooLarge, MalformedFrame
from ringtrace.wire.frame_fields import body_field, pack_body, token_body, unpack_map
from ringtrace.wire.frame_types import (
    DEFAULT_MAX_FRAME_BYTES,
    EVENT_COLUMNS,
    EVENTS_HEADER,
    FRAME_HEADER,
    MAGIC,
    PREAMBLE,
    STREAM_FORMAT,
    FrameType,
    Peer,
)
from ringtrace.wire.handshake_frames import Hello, Welcome
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.table_frames import Schema, Strings, Track

__all__ = [
    "FRAME_CLASSES",
    "SENDABLE_BY",
    "Events",
    "Flush",
    "FlushAck",
    "Frame",
    "Goodbye",
    "Refused",
    "SetPriority",
    "Stats",
    "encode",
    "preamble",
    "unpack_columns",
]


@dataclass(slots=True)  # not frozen, unlike the other frames: a frozen dataclass is 4x slower to make, per frame
class Events:
    """A batch of events on one track. ``payload`` stays opaque until someone decodes it."""

    TYPE: ClassVar = FrameType.EVENTS
    track_id: int
    count: int
    first_ts_ns: int
    last_ts_ns: int
    payload: bytes | memoryview
    flags: int = 0

    def encode_body(self) -> bytes:
        header = EVENTS_HEADER.pack(
            EVENTS_HEADER.size, self.flags, self.track_id, self.count, self.first_ts_ns, self.last_ts_ns
        )
        return header + self.payload

    @classmethod
    def decode_body(cls, body: bytes | memoryview) -> Events:
        if len(body) < EVENTS_HEADER.size:
            raise MalformedFrame(
                f"EVENTS frame: body of {len(body)} bytes is shorter than its {EVENTS_HEADER.size}-byte header"
            )
        header_size, flags, track_id, count, first_ts, last_ts = EVENTS_HEADER.unpack_from(body)
        if not EVENTS_HEADER.size <= header_size <= len(body):
            raise MalformedFrame(
                f"EVENTS frame: field 'header_size' is {header_size} (must be {EVENTS_HEADER.size}..{len(body)})"
            )
        payload = memoryview(body)[header_size:]
        if count == 0 or count > len(payload):
            raise MalformedFrame(f"EVENTS frame: field 'count' is {count} for a payload of {len(payload)} bytes")
        if first_ts > last_ts:
            raise MalformedFrame(f"EVENTS frame: field 'first_ts' ({first_ts}) is after 'last_ts' ({last_ts})")
        return cls(track_id, count, first_ts, last_ts, payload, flags)


@dataclass(frozen=True, slots=True)
class Stats:
    """Cumulative loss counters of the client process (since it started)."""

    TYPE: ClassVar = FrameType.STATS
    #: Events recorded and never sent (send queue full, a frame cut by a disconnect, an event larger than a frame).
    dropped_events: int
    dropped_frames: int
    #: Events recorded with a label past the string table's limit (shown with the overflow label).
    label_overflow_events: int = 0
    #: Argument values cut for depth or size (the event itself is kept, with a mark where it was cut).
    clipped_args: int = 0
    #: Typed events dropped because a field's value did not fit its declared type.
    rejected_events: int = 0
    #: Events sent on a connection that broke before the collector acknowledged them: lost if that collector did not
    #: store them (it was killed, say), yet maybe stored; what was lost in transit is at most this.
    unacknowledged_events: int = 0
    #: Of ``dropped_events``: lost to an unexpected error in one of the client's own threads (a bug there, which its
    #: log names): the events in flight when a pass of its streamer or flusher failed.
    internal_error_events: int = 0

    def encode_body(self) -> bytes:
        return pack_body(
            {
                "dropped_events": self.dropped_events,
                "dropped_frames": self.dropped_frames,
                "label_overflow_events": self.label_overflow_events,
                "clipped_args": self.clipped_args,
                "rejected_events": self.rejected_events,
                "unacknowledged_events": self.unacknowledged_events,
                "internal_error_events": self.internal_error_events,
            }
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Stats:
        data = unpack_map("STATS", body)
        return cls(
            dropped_events=body_field(data, "STATS", "dropped_events", int),
            dropped_frames=body_field(data, "STATS", "dropped_frames", int),
            label_overflow_events=body_field(data, "STATS", "label_overflow_events", int),
            clipped_args=body_field(data, "STATS", "clipped_args", int),
            # Added within version 2: a client that does not send it has rejected nothing.
            rejected_events=body_field(data, "STATS", "rejected_events", int) if "rejected_events" in data else 0,
            unacknowledged_events=(
                body_field(data, "STATS", "unacknowledged_events", int) if "unacknowledged_events" in data else 0
            ),
            internal_error_events=(
                body_field(data, "STATS", "internal_error_events", int) if "internal_error_events" in data else 0
            ),
        )


@dataclass(frozen=True, slots=True)
class Flush:
    """Asks the peer to send (or store) everything it holds, then answer FLUSH_ACK with the same token."""

    TYPE: ClassVar = FrameType.FLUSH
    token: int

    def encode_body(self) -> bytes:
        return struct.pack("<Q", self.token)

    @classmethod
    def decode_body(cls, body: bytes) -> Flush:
        return cls(token_body("FLUSH", body))


@dataclass(frozen=True, slots=True)
class FlushAck:
    """Everything the sender had before the matching FLUSH has gone out (or been stored) ahead of this frame."""

    TYPE: ClassVar = FrameType.FLUSH_ACK
    token: int

    def encode_body(self) -> bytes:
        return struct.pack("<Q", self.token)

    @classmethod
    def decode_body(cls, body: bytes) -> FlushAck:
        return cls(token_body("FLUSH_ACK", body))


@dataclass(frozen=True, slots=True)
class Goodbye:
    """The sender is closing the connection, and says why (ignorable: an older peer just sees the close)."""

    TYPE: ClassVar = FrameType.GOODBYE
    reason: str = field(default="")

    def encode_body(self) -> bytes:
        return pack_body({"reason": self.reason})

    @classmethod
    def decode_body(cls, body: bytes) -> Goodbye:
        return cls(body_field(unpack_map("GOODBYE", body), "GOODBYE", "reason", str))


@dataclass(frozen=True, slots=True)
class SetPriority:
    """The collector asks the client to record messages up to ``priority`` (ignorable: an older client keeps its own).

    ``timeline`` names the timeline it applies to; empty: every timeline the connection streams.
    """

    TYPE: ClassVar = FrameType.SET_PRIORITY
    priority: str
    timeline: str = ""

    def encode_body(self) -> bytes:
        return pack_body({"priority": self.priority, "timeline": self.timeline})

    @classmethod
    def decode_body(cls, body: bytes) -> SetPriority:
        data = unpack_map("SET_PRIORITY", body)
        timeline = body_field(data, "SET_PRIORITY", "timeline", str) if "timeline" in data else ""
        return cls(body_field(data, "SET_PRIORITY", "priority", str), timeline)


@dataclass(frozen=True, slots=True)
class Refused:
    """The collector could not store ``events`` events this connection sent since the last REFUSED (its store is
    full under the discard policy, or the process is at its cap); sent before the next FLUSH_ACK (ignorable)."""

    TYPE: ClassVar = FrameType.REFUSED
    events: int

    def encode_body(self) -> bytes:
        return pack_body({"events": self.events})

    @classmethod
    def decode_body(cls, body: bytes) -> Refused:
        return cls(body_field(unpack_map("REFUSED", body), "REFUSED", "events", int))


Frame = (
    Hello
    | Welcome
    | Schema
    | Strings
    | Track
    | Events
    | Stats
    | Flush
    | FlushAck
    | Goodbye
    | SetPriority
    | Refused
    | Stacks
)

FRAME_CLASSES: Final[dict[int, Any]] = {
    cls.TYPE: cls
    for cls in (
        Hello, Welcome, Schema, Strings, Track, Events, Stats, Flush, FlushAck, Goodbye, SetPriority, Refused, Stacks,
    )
}  # fmt: skip
#: Frame types each peer may send.
SENDABLE_BY: Final[dict[Peer, frozenset[int]]] = {
    "client": frozenset(FRAME_CLASSES) - {FrameType.WELCOME, FrameType.SET_PRIORITY, FrameType.REFUSED},
    "collector": frozenset(
        {
            FrameType.WELCOME,
            FrameType.FLUSH,
            FrameType.FLUSH_ACK,
            FrameType.GOODBYE,
            FrameType.SET_PRIORITY,
            FrameType.REFUSED,
        }
    ),
}


def preamble() -> bytes:
    """The 8 bytes each side sends before its first frame."""
    return PREAMBLE.pack(MAGIC, STREAM_FORMAT, 0)


def encode(frame: Frame, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Serialize one frame, header included.

    Raises:
        FrameTooLarge: the encoded frame would exceed ``max_frame_bytes``.
    """
    body = frame.encode_body()
    size = FRAME_HEADER.size + len(body)
    if size > max_frame_bytes:
        raise FrameTooLarge(size, max_frame_bytes)
    return FRAME_HEADER.pack(len(body), frame.TYPE) + body


def unpack_columns(events: Events, columns: tuple[str, ...] = EVENT_COLUMNS) -> list[list[Any]]:
    """The columns of an EVENTS payload, checked against the header's count.

    Raises:
        MalformedFrame: the payload is not an array of ``len(columns)`` arrays of ``count`` values each.
    """
    try:
        # Argument maps may have int or bytes keys (msgpack allows them); only control frames insist on str keys.
        unpacked = msgpack.unpackb(events.payload, raw=False, strict_map_key=False)
    except Exception as exc:
        raise MalformedFrame(f"EVENTS frame: payload is not valid msgpack ({exc})") from None
    if not isinstance(unpacked, list) or len(unpacked) != len(columns):
        raise MalformedFrame(f"EVENTS frame: payload must be an array of {len(columns)} columns")
    for name, column in zip(columns, unpacked, strict=True):
        if not isinstance(column, list) or len(column) != events.count:
            raise MalformedFrame(f"EVENTS frame: column {name!r} must be an array of {events.count} values")
    return unpacked
