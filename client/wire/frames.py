"""The ringtrace wire format, sans-I/O: frames to bytes (``encode``), and frame bodies back to frames.

No sockets, threads or asyncio here. ``PROTOCOL.md`` beside this file is the one description of the format; this
module implements its framing and frame bodies, ``reader.py`` reads a stream of bytes into frames, and ``decoder.py``
holds the rules of a stream (order, tables, limits).

Theory of operation
-------------------
``encode(frame)`` gives the bytes of one frame, ``preamble()`` those each side sends first. Frames are frozen
dataclasses; their msgpack bodies are maps whose unknown keys are ignored, so a field can be added without a new
version. ``FRAME_CLASSES`` maps each frame type to its class (``decode_body``), and ``SENDABLE_BY`` says which types
each peer may send.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar, Final, Literal

import msgpack
from ringtrace.wire.errors import FrameTooLarge, MalformedFrame
from ringtrace.wire.recent import Recent

__all__ = [
    "AUTHENTICATION_FAILED",
    "CHECKSUM_TYPE",
    "DEFAULT_MAX_FRAME_BYTES",
    "EVENTS_HEADER",
    "EVENT_COLUMNS",
    "FRAME_CLASSES",
    "FRAME_HEADER",
    "IGNORABLE",
    "MAGIC",
    "MAX_MAX_FRAME_BYTES",
    "MIN_MAX_FRAME_BYTES",
    "PREAMBLE",
    "PROTOCOL_VERSION",
    "PROTOCOL_VERSIONS",
    "SENDABLE_BY",
    "STREAM_FORMAT",
    "TABLES_PAST_CAPACITY",
    "Events",
    "Flush",
    "FlushAck",
    "Frame",
    "FrameType",
    "Goodbye",
    "Hello",
    "KindSpec",
    "Peer",
    "Refused",
    "Schema",
    "SetPriority",
    "Stats",
    "Strings",
    "Track",
    "Welcome",
    "encode",
    "preamble",
    "unpack_columns",
    "unpack_map",
]

#: The protocol versions this code speaks (HELLO and WELCOME negotiate one of them).
PROTOCOL_VERSIONS: Final = (2, 2)
PROTOCOL_VERSION: Final = PROTOCOL_VERSIONS[1]
#: The framing described by the preamble: length-prefixed frames with a one-byte type.
STREAM_FORMAT: Final = 2
MAGIC: Final = b"RTRC"
PREAMBLE: Final = struct.Struct("<4sHH")
FRAME_HEADER: Final = struct.Struct("<IB")
#: header_size, flags, track, count, first_ts, last_ts.
EVENTS_HEADER: Final = struct.Struct("<HHIIQQ")
DEFAULT_MAX_FRAME_BYTES: Final = 1 << 20
#: No peer may set max_frame_bytes lower: every control frame (a STRINGS run, say) fits well within it.
MIN_MAX_FRAME_BYTES: Final = 32 * 1024
#: No peer may raise it above this: a frame header can then never begin with the magic, so that streams may follow
#: one another in a file (``concatenated``).
MAX_MAX_FRAME_BYTES: Final = 1 << 30
#: Column order of an EVENTS payload in version 2.
EVENT_COLUMNS: Final = ("kind", "name", "ts", "dur", "args")
#: Frame-type bit: a reader that does not know the type skips the frame instead of failing.
IGNORABLE: Final = 0x80
#: CHECKSUM, a frame type of files only (the collector's segments): a live peer may not send it.
CHECKSUM_TYPE: Final = 0xFF
#: The whole reason of the GOODBYE a collector sends a client whose HELLO lacks its token or has another one: no
#: more, so that a peer learns nothing from it.
AUTHENTICATION_FAILED: Final = "authentication failed"
#: How the reason of the GOODBYE ends that a collector sends a client whose tables (strings, tracks, schema) do not
#: fit its ``--capacity``: a client takes it as a refusal that retrying soon will not mend.
TABLES_PAST_CAPACITY: Final = "the collector's --capacity is too small for these tables"

Peer = Literal["client", "collector"]


class FrameType(IntEnum):
    HELLO = 1
    WELCOME = 2
    SCHEMA = 3
    STRINGS = 4
    TRACK = 5
    EVENTS = 6
    STATS = 7
    FLUSH = 8
    FLUSH_ACK = 9
    GOODBYE = IGNORABLE | 1
    SET_PRIORITY = IGNORABLE | 2
    REFUSED = IGNORABLE | 3


#: Integers in control frames fit a signed 64-bit field, so that sums and JSON stay in range.
_MAX_FIELD_INT: Final = 2**63 - 1
_MAX_PID: Final = 2**32 - 1
_U32: Final = 2**32 - 1


def _pack(value: object) -> bytes:
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


def _field(data: Mapping[str, Any], frame: str, name: str, kind: type, high: int = _MAX_FIELD_INT) -> Any:
    try:
        value = data[name]
    except KeyError:
        raise MalformedFrame(f"{frame} frame: missing field {name!r}") from None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedFrame(f"{frame} frame: field {name!r} must be {kind.__name__}, got {type(value).__name__}")
    if isinstance(value, int) and not 0 <= value <= high:
        raise MalformedFrame(f"{frame} frame: field {name!r} must be in 0..{high}, got {value}")
    return value


def _token_body(frame: str, body: bytes) -> int:
    if len(body) != 8:
        raise MalformedFrame(f"{frame} frame: body must be 8 bytes (u64 token), got {len(body)}")
    token: int = struct.unpack("<Q", body)[0]
    return token


@dataclass(frozen=True, slots=True)
class Hello:
    """The client's first frame: who the process is, one reading of both its clocks, the versions it speaks."""

    TYPE: ClassVar = FrameType.HELLO
    pid: int
    host: str
    process_name: str
    #: Random per process incarnation (new after fork): tells a reconnect from a new process with a reused pid.
    instance_id: str
    #: Identifies the host's monotonic clock domain (Linux boot id); empty when unknown.
    boot_id: str
    monotonic_ns: int
    wall_ns: int
    client_version: str
    protocol_min: int = PROTOCOL_VERSIONS[0]
    protocol_max: int = PROTOCOL_VERSIONS[1]
    #: The collector's shared secret, for a collector that requires one (empty: none, and the field is not sent).
    #: Only a live connection carries it: never a file, nor what the collector stores.
    token: str = field(default="", repr=False)
    #: A recorded stream sent again (``ringtrace replay``): its clock pairing is as it was recorded, so the collector
    #: does not check it against its own clock (it still moves only this process's events).
    recorded: bool = False

    def encode_body(self) -> bytes:
        body = {
            "pid": self.pid,
            "host": self.host,
            "process_name": self.process_name,
            "instance_id": self.instance_id,
            "boot_id": self.boot_id,
            "monotonic_ns": self.monotonic_ns,
            "wall_ns": self.wall_ns,
            "client_version": self.client_version,
            "protocol_min": self.protocol_min,
            "protocol_max": self.protocol_max,
        }
        if self.token:
            body["token"] = self.token
        if self.recorded:
            body["recorded"] = True
        return _pack(body)

    @classmethod
    def decode_body(cls, body: bytes) -> Hello:
        data = unpack_map("HELLO", body)
        hello = cls(
            pid=_field(data, "HELLO", "pid", int, _MAX_PID),
            host=_field(data, "HELLO", "host", str),
            process_name=_field(data, "HELLO", "process_name", str),
            instance_id=_field(data, "HELLO", "instance_id", str),
            boot_id=_field(data, "HELLO", "boot_id", str),
            monotonic_ns=_field(data, "HELLO", "monotonic_ns", int),
            wall_ns=_field(data, "HELLO", "wall_ns", int),
            client_version=_field(data, "HELLO", "client_version", str),
            protocol_min=_field(data, "HELLO", "protocol_min", int, 0xFFFF),
            protocol_max=_field(data, "HELLO", "protocol_max", int, 0xFFFF),
            token=_field(data, "HELLO", "token", str) if "token" in data else "",
            recorded=_field(data, "HELLO", "recorded", bool) if "recorded" in data else False,
        )
        if hello.protocol_min > hello.protocol_max:
            raise MalformedFrame(
                f"HELLO frame: protocol_min {hello.protocol_min} is above protocol_max {hello.protocol_max}"
            )
        return hello


@dataclass(frozen=True, slots=True)
class Welcome:
    """The collector's answer to HELLO: the version chosen and the limits the client must respect."""

    TYPE: ClassVar = FrameType.WELCOME
    protocol_version: int
    max_frame_bytes: int
    max_strings: int
    max_tracks: int
    max_kinds: int
    collector_version: str
    #: UTF-8 bytes of all strings one connection may declare (absent from older collectors: no limit).
    max_string_bytes: int = _MAX_FIELD_INT
    #: UTF-8 bytes of the texts of all kinds one connection may declare (``KindSpec.text_bytes``; absent: no limit).
    max_schema_bytes: int = _MAX_FIELD_INT
    #: The collector takes STRINGS frames that start the table again (``Strings.reset``; absent: false).
    string_resets: bool = False

    def encode_body(self) -> bytes:
        return _pack(
            {
                "protocol_version": self.protocol_version,
                "max_frame_bytes": self.max_frame_bytes,
                "max_strings": self.max_strings,
                "max_tracks": self.max_tracks,
                "max_kinds": self.max_kinds,
                "collector_version": self.collector_version,
                "max_string_bytes": self.max_string_bytes,
                "max_schema_bytes": self.max_schema_bytes,
                "string_resets": self.string_resets,
            }
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Welcome:
        data = unpack_map("WELCOME", body)
        welcome = cls(
            protocol_version=_field(data, "WELCOME", "protocol_version", int, 0xFFFF),
            max_frame_bytes=_field(data, "WELCOME", "max_frame_bytes", int, _U32),
            max_strings=_field(data, "WELCOME", "max_strings", int, _U32),
            max_tracks=_field(data, "WELCOME", "max_tracks", int, _U32),
            max_kinds=_field(data, "WELCOME", "max_kinds", int, _U32),
            collector_version=_field(data, "WELCOME", "collector_version", str),
            max_string_bytes=(
                _field(data, "WELCOME", "max_string_bytes", int) if "max_string_bytes" in data else _MAX_FIELD_INT
            ),
            max_schema_bytes=(
                _field(data, "WELCOME", "max_schema_bytes", int) if "max_schema_bytes" in data else _MAX_FIELD_INT
            ),
            string_resets=_field(data, "WELCOME", "string_resets", bool) if "string_resets" in data else False,
        )
        if welcome.max_frame_bytes < MIN_MAX_FRAME_BYTES:
            raise MalformedFrame(
                f"WELCOME frame: field 'max_frame_bytes' must be >= {MIN_MAX_FRAME_BYTES}, "
                f"got {welcome.max_frame_bytes}"
            )
        for name in ("max_strings", "max_tracks", "max_kinds"):
            if getattr(welcome, name) < 2:
                raise MalformedFrame(f"WELCOME frame: field {name!r} must be >= 2, got {getattr(welcome, name)}")
        return welcome


@dataclass(frozen=True, slots=True)
class KindSpec:
    """One event kind as SCHEMA declares it: how to show it, and its typed fields (empty: free ``args`` map)."""

    id: int
    name: str
    shape: str
    fields: tuple[tuple[str, str], ...] = ()
    #: A message kind's text, its ``$name`` placeholders standing for its fields (optional on the wire).
    text: str = ""
    #: A message kind's priority (optional on the wire).
    priority: str = ""

    @property
    def text_bytes(self) -> int:
        """UTF-8 bytes of its texts (name, shape, text, priority, field names and type codes): what counts against
        a connection's ``max_schema_bytes``."""
        texts = [self.name, self.shape, self.text, self.priority, *(part for f in self.fields for part in f)]
        return sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)

    def to_wire(self) -> dict[str, Any]:
        wire = {"id": self.id, "name": self.name, "shape": self.shape, "fields": [list(f) for f in self.fields]}
        if self.text:
            wire["text"] = self.text
        if self.priority:
            wire["priority"] = self.priority
        return wire

    @classmethod
    def from_wire(cls, entry: object) -> KindSpec:
        if not isinstance(entry, dict):
            raise MalformedFrame(f"SCHEMA frame: a kind must be a map, got {type(entry).__name__}")
        fields = _field(entry, "SCHEMA", "fields", list)
        for item in fields:
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
                raise MalformedFrame(f"SCHEMA frame: a field must be [name, type code], got {item!r:.80}")
        return cls(
            id=_field(entry, "SCHEMA", "id", int, _U32),
            name=_field(entry, "SCHEMA", "name", str),
            shape=_field(entry, "SCHEMA", "shape", str),
            fields=tuple((name, type_code) for name, type_code in fields),
            text=_field(entry, "SCHEMA", "text", str) if "text" in entry else "",
            priority=_field(entry, "SCHEMA", "priority", str) if "priority" in entry else "",
        )


@dataclass(frozen=True, slots=True)
class Schema:
    """Event kinds (all of them, or those added since the last SCHEMA) and the column layout of EVENTS payloads."""

    TYPE: ClassVar = FrameType.SCHEMA
    kinds: tuple[KindSpec, ...]
    columns: tuple[str, ...] = EVENT_COLUMNS

    def encode_body(self) -> bytes:
        return _pack({"kinds": [k.to_wire() for k in self.kinds], "columns": list(self.columns)})

    @classmethod
    def decode_body(cls, body: bytes) -> Schema:
        """The SCHEMA of ``body``; the same object again for a body decoded lately more than once: every client of a
        version declares the same kinds on every connection, and decoding them was a tenth of a short connection's
        cost to the collector (a Schema and its kinds are immutable, so they may be shared). A body seen once is
        remembered by its bytes alone: kept, the objects of one that never comes again (a peer's own kinds) would
        outlive its connection, and hold the memory they were made in with them."""
        key = bytes(body)
        schema = _recent_schemas.get(key)
        if schema is None:
            schema = cls._decode(body)
            if len(key) <= _MAX_REMEMBERED_SCHEMA_BYTES:
                again = key in _recent_schemas
                _recent_schemas.put(key, schema if again else None)
        return schema

    @property
    def remembered(self) -> bool:
        """Whether ``decode_body`` may give this very object again (its body was one small enough to remember)."""
        return any(schema is self for schema in _recent_schemas.values())

    @classmethod
    def _decode(cls, body: bytes) -> Schema:
        data = unpack_map("SCHEMA", body)
        kinds = tuple(KindSpec.from_wire(entry) for entry in _field(data, "SCHEMA", "kinds", list))
        columns = _field(data, "SCHEMA", "columns", list)
        if not all(isinstance(c, str) for c in columns):
            raise MalformedFrame(f"SCHEMA frame: field 'columns' must hold str, got {columns!r:.120}")
        return cls(kinds=kinds, columns=tuple(columns))


#: SCHEMA bodies decoded lately (``Schema.decode_body``), at most _REMEMBERED_SCHEMAS of at most
#: _MAX_REMEMBERED_SCHEMA_BYTES each: what one client version declares, and a few others; a bound on the memory. Each
#: with its schema once it came a second time (None till then). Shared by the collector's event loop and its snapshot
#: readers.
_REMEMBERED_SCHEMAS: Final = 16
_MAX_REMEMBERED_SCHEMA_BYTES: Final = 16 * 1024
_recent_schemas: Final[Recent[bytes, Schema | None]] = Recent(_REMEMBERED_SCHEMAS)


@dataclass(frozen=True, slots=True)
class Strings:
    """A run of the string table: ``strings[i]`` has id ``first_id + i``."""

    TYPE: ClassVar = FrameType.STRINGS
    first_id: int
    strings: tuple[str, ...]
    #: The table starts again: every id given before this frame is forgotten, and ``first_id`` is 0.
    reset: bool = False

    def encode_body(self) -> bytes:
        body: dict[str, Any] = {"first_id": self.first_id, "strings": list(self.strings)}
        if self.reset:  # only when set (a reader that predates the field refuses any id it redefines)
            body["reset"] = True
        return _pack(body)

    @classmethod
    def decode_body(cls, body: bytes) -> Strings:
        data = unpack_map("STRINGS", body)
        first_id = _field(data, "STRINGS", "first_id", int, _U32)
        strings = _field(data, "STRINGS", "strings", list)
        for s in strings:
            if not isinstance(s, str):
                raise MalformedFrame(f"STRINGS frame: field 'strings' must hold str, got {type(s).__name__}")
        reset = _field(data, "STRINGS", "reset", bool) if "reset" in data else False
        if reset and first_id != 0:
            raise MalformedFrame(
                f"STRINGS frame: field 'first_id' must be 0 in a frame that resets the table, got {first_id}"
            )
        return cls(first_id=first_id, strings=tuple(strings), reset=reset)


@dataclass(frozen=True, slots=True)
class Track:
    """Declares (or renames) a track: a thread, a named source, an asyncio task, or a counter."""

    TYPE: ClassVar = FrameType.TRACK
    track_id: int
    kind: int
    name: str
    #: The OS thread id of a thread track (0 otherwise).
    thread_id: int = 0
    #: The track this one belongs to (an async task's thread), 0 for none.
    parent: int = 0
    #: The track ended: its id is free, and it no longer counts against ``max_tracks``.
    ended: bool = False

    def encode_body(self) -> bytes:
        return _pack(
            {
                "id": self.track_id,
                "kind": self.kind,
                "name": self.name,
                "thread_id": self.thread_id,
                "parent": self.parent,
                "ended": self.ended,
            }
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Track:
        data = unpack_map("TRACK", body)
        return cls(
            track_id=_field(data, "TRACK", "id", int, _U32),
            kind=_field(data, "TRACK", "kind", int, 0xFF),
            name=_field(data, "TRACK", "name", str),
            thread_id=_field(data, "TRACK", "thread_id", int),
            parent=_field(data, "TRACK", "parent", int, _U32),
            ended=bool(data.get("ended", False)),  # optional: absent means a live track
        )


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

    def encode_body(self) -> bytes:
        return _pack(
            {
                "dropped_events": self.dropped_events,
                "dropped_frames": self.dropped_frames,
                "label_overflow_events": self.label_overflow_events,
                "clipped_args": self.clipped_args,
                "rejected_events": self.rejected_events,
                "unacknowledged_events": self.unacknowledged_events,
            }
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Stats:
        data = unpack_map("STATS", body)
        return cls(
            dropped_events=_field(data, "STATS", "dropped_events", int),
            dropped_frames=_field(data, "STATS", "dropped_frames", int),
            label_overflow_events=_field(data, "STATS", "label_overflow_events", int),
            clipped_args=_field(data, "STATS", "clipped_args", int),
            # Added within version 2: a client that does not send it has rejected nothing.
            rejected_events=_field(data, "STATS", "rejected_events", int) if "rejected_events" in data else 0,
            unacknowledged_events=(
                _field(data, "STATS", "unacknowledged_events", int) if "unacknowledged_events" in data else 0
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
        return cls(_token_body("FLUSH", body))


@dataclass(frozen=True, slots=True)
class FlushAck:
    """Everything the sender had before the matching FLUSH has gone out (or been stored) ahead of this frame."""

    TYPE: ClassVar = FrameType.FLUSH_ACK
    token: int

    def encode_body(self) -> bytes:
        return struct.pack("<Q", self.token)

    @classmethod
    def decode_body(cls, body: bytes) -> FlushAck:
        return cls(_token_body("FLUSH_ACK", body))


@dataclass(frozen=True, slots=True)
class Goodbye:
    """The sender is closing the connection, and says why (ignorable: an older peer just sees the close)."""

    TYPE: ClassVar = FrameType.GOODBYE
    reason: str = field(default="")

    def encode_body(self) -> bytes:
        return _pack({"reason": self.reason})

    @classmethod
    def decode_body(cls, body: bytes) -> Goodbye:
        return cls(_field(unpack_map("GOODBYE", body), "GOODBYE", "reason", str))


@dataclass(frozen=True, slots=True)
class SetPriority:
    """The collector asks the client to record messages up to ``priority`` (ignorable: an older client keeps its own).

    ``timeline`` names the timeline it applies to; empty: every timeline the connection streams.
    """

    TYPE: ClassVar = FrameType.SET_PRIORITY
    priority: str
    timeline: str = ""

    def encode_body(self) -> bytes:
        return _pack({"priority": self.priority, "timeline": self.timeline})

    @classmethod
    def decode_body(cls, body: bytes) -> SetPriority:
        data = unpack_map("SET_PRIORITY", body)
        timeline = _field(data, "SET_PRIORITY", "timeline", str) if "timeline" in data else ""
        return cls(_field(data, "SET_PRIORITY", "priority", str), timeline)


@dataclass(frozen=True, slots=True)
class Refused:
    """The collector could not store ``events`` events this connection sent since the last REFUSED (its store is
    full under the discard policy, or the process is at its cap); sent before the next FLUSH_ACK (ignorable)."""

    TYPE: ClassVar = FrameType.REFUSED
    events: int

    def encode_body(self) -> bytes:
        return _pack({"events": self.events})

    @classmethod
    def decode_body(cls, body: bytes) -> Refused:
        return cls(_field(unpack_map("REFUSED", body), "REFUSED", "events", int))


Frame = Hello | Welcome | Schema | Strings | Track | Events | Stats | Flush | FlushAck | Goodbye | SetPriority | Refused

FRAME_CLASSES: Final[dict[int, Any]] = {
    cls.TYPE: cls
    for cls in (Hello, Welcome, Schema, Strings, Track, Events, Stats, Flush, FlushAck, Goodbye, SetPriority, Refused)
}
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
