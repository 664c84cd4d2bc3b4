"""The ringtrace wire protocol, sans-I/O: bytes in, frames out; frames in, bytes out.

No sockets, threads or asyncio here. The client transport and the collector both use this module; it is the single
definition of the format.

Theory of operation
-------------------
Each side of a connection first sends an 8-byte preamble, then length-prefixed frames::

    preamble  = magic "RTRC" | version u16 | reserved u16           (little endian)
    frame     = body_length u32 | frame_type u8 | body[body_length]

A frame's size is ``5 + body_length``; a reader refuses a frame larger than its ``max_frame_bytes`` as soon as the
header arrives, before buffering the body. Bodies are msgpack except for the fixed binary ones:

    HELLO      client -> collector, first frame: who the process is and a pairing of its clocks
    SCHEMA     client -> collector: event kind ids and the column layout of EVENTS payloads
    STRINGS    client -> collector: a run of the string table (ids first_id, first_id + 1, ...)
    SOURCE     client -> collector: a source id (a thread) with its name and OS thread id
    EVENTS     client -> collector: fixed header (source u32, count u32, first_ts u64, last_ts u64) + msgpack payload
    STATS      client -> collector: cumulative client-side loss counters
    FLUSH      either way: "send me everything you have, then FLUSH_ACK with this token"
    FLUSH_ACK  either way: everything before this frame has been sent (or, from the collector, stored)
    WELCOME    collector -> client, first frame: the collector's limits. The client sends no EVENTS before it, and
               packs no frame larger than its max_frame_bytes.

The EVENTS header lets the collector store and index a batch without decoding its payload. The payload is a msgpack
array of columns (``EVENT_COLUMNS``): kind ids, name string ids, timestamps as offsets from the header's first_ts,
durations, and argument maps. Ids (sources, strings) are scoped to a connection: the client sends its whole schema,
string table and source list again after every reconnect.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, Final, Literal

import msgpack

from .errors import (
    BadPreamble,
    ConfigError,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
    UnexpectedFrame,
    UnsupportedVersion,
)

__all__ = [
    "CLOSED",
    "DEFAULT_MAX_FRAME_BYTES",
    "EVENTS_HEADER",
    "EVENT_COLUMNS",
    "FRAME_HEADER",
    "MAGIC",
    "MIN_MAX_FRAME_BYTES",
    "NEED_DATA",
    "PREAMBLE",
    "PROTOCOL_VERSION",
    "Events",
    "Flush",
    "FlushAck",
    "Frame",
    "FrameReader",
    "FrameType",
    "Hello",
    "Schema",
    "Source",
    "Stats",
    "Strings",
    "Welcome",
    "decode_events",
    "encode",
    "preamble",
]

PROTOCOL_VERSION: Final = 1
MAGIC: Final = b"RTRC"
PREAMBLE: Final = struct.Struct("<4sHH")
FRAME_HEADER: Final = struct.Struct("<IB")
EVENTS_HEADER: Final = struct.Struct("<IIQQ")
DEFAULT_MAX_FRAME_BYTES: Final = 1 << 20
#: No peer may set max_frame_bytes lower: every control frame (a STRINGS run, say) fits well within it.
MIN_MAX_FRAME_BYTES: Final = 32 * 1024
#: Column order of an EVENTS payload.
EVENT_COLUMNS: Final = ("kind", "name", "ts", "dur", "args")


class FrameType(IntEnum):
    HELLO = 1
    SCHEMA = 2
    STRINGS = 3
    SOURCE = 4
    EVENTS = 5
    STATS = 6
    FLUSH = 7
    FLUSH_ACK = 8
    WELCOME = 9


def _pack(value: object) -> bytes:
    packed: bytes = msgpack.packb(value)
    return packed


def _unpack_body(frame: str, body: bytes | memoryview) -> Any:
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several types for bad input; all mean the same here
        raise MalformedFrame(f"{frame} frame: body is not valid msgpack ({exc})") from None


def _field(data: Any, frame: str, name: str, kind: type) -> Any:
    if not isinstance(data, Mapping):
        raise MalformedFrame(f"{frame} frame: body must be a map, got {type(data).__name__}")
    try:
        value = data[name]
    except KeyError:
        raise MalformedFrame(f"{frame} frame: missing field {name!r}") from None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedFrame(f"{frame} frame: field {name!r} must be {kind.__name__}, got {type(value).__name__}")
    if isinstance(value, int) and not 0 <= value <= _MAX_FIELD_INT:
        raise MalformedFrame(f"{frame} frame: field {name!r} must be in 0..{_MAX_FIELD_INT}, got {value}")
    return value


#: Integers in control frames fit a signed 64-bit field, so that sums and JSON stay in range.
_MAX_FIELD_INT: Final = 2**63 - 1
_MAX_PID: Final = 2**32 - 1


def _token_body(frame: str, body: bytes) -> int:
    if len(body) != 8:
        raise MalformedFrame(f"{frame} frame: body must be 8 bytes (u64 token), got {len(body)}")
    token: int = struct.unpack("<Q", body)[0]
    return token


@dataclass(frozen=True, slots=True)
class Hello:
    """The client's first frame: who the process is, and one reading of both its clocks."""

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

    def encode_body(self) -> bytes:
        return _pack(
            {
                "pid": self.pid,
                "host": self.host,
                "process_name": self.process_name,
                "instance_id": self.instance_id,
                "boot_id": self.boot_id,
                "monotonic_ns": self.monotonic_ns,
                "wall_ns": self.wall_ns,
                "client_version": self.client_version,
            }
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Hello:
        data = _unpack_body("HELLO", body)
        pid = _field(data, "HELLO", "pid", int)
        if pid > _MAX_PID:
            raise MalformedFrame(f"HELLO frame: field 'pid' must be in 0..{_MAX_PID}, got {pid}")
        return cls(
            pid=pid,
            host=_field(data, "HELLO", "host", str),
            process_name=_field(data, "HELLO", "process_name", str),
            instance_id=_field(data, "HELLO", "instance_id", str),
            boot_id=_field(data, "HELLO", "boot_id", str),
            monotonic_ns=_field(data, "HELLO", "monotonic_ns", int),
            wall_ns=_field(data, "HELLO", "wall_ns", int),
            client_version=_field(data, "HELLO", "client_version", str),
        )


@dataclass(frozen=True, slots=True)
class Schema:
    """Event kinds (id -> name) and the column layout of EVENTS payloads."""

    TYPE: ClassVar = FrameType.SCHEMA
    kinds: tuple[tuple[int, str], ...]
    columns: tuple[str, ...] = EVENT_COLUMNS

    def encode_body(self) -> bytes:
        return _pack({"kinds": [list(k) for k in self.kinds], "columns": list(self.columns)})

    @classmethod
    def decode_body(cls, body: bytes) -> Schema:
        data = _unpack_body("SCHEMA", body)
        raw_kinds = _field(data, "SCHEMA", "kinds", list)
        columns = _field(data, "SCHEMA", "columns", list)
        kinds = []
        for entry in raw_kinds:
            if (
                not isinstance(entry, list)
                or len(entry) != 2
                or not isinstance(entry[0], int)
                or not isinstance(entry[1], str)
            ):
                raise MalformedFrame(f"SCHEMA frame: field 'kinds' entries must be [int, str], got {entry!r:.80}")
            kinds.append((entry[0], entry[1]))
        if tuple(columns) != EVENT_COLUMNS:
            raise MalformedFrame(f"SCHEMA frame: field 'columns' must be {list(EVENT_COLUMNS)}, got {columns!r:.120}")
        return cls(kinds=tuple(kinds), columns=EVENT_COLUMNS)


@dataclass(frozen=True, slots=True)
class Strings:
    """A run of the string table: ``strings[i]`` has id ``first_id + i``."""

    TYPE: ClassVar = FrameType.STRINGS
    first_id: int
    strings: tuple[str, ...]

    def encode_body(self) -> bytes:
        return _pack({"first_id": self.first_id, "strings": list(self.strings)})

    @classmethod
    def decode_body(cls, body: bytes) -> Strings:
        data = _unpack_body("STRINGS", body)
        first_id = _field(data, "STRINGS", "first_id", int)
        strings = _field(data, "STRINGS", "strings", list)
        for s in strings:
            if not isinstance(s, str):
                raise MalformedFrame(f"STRINGS frame: field 'strings' must hold str, got {type(s).__name__}")
        return cls(first_id=first_id, strings=tuple(strings))


@dataclass(frozen=True, slots=True)
class Source:
    """Declares a source id: one recording thread."""

    TYPE: ClassVar = FrameType.SOURCE
    source_id: int
    name: str
    thread_id: int

    def encode_body(self) -> bytes:
        return _pack({"id": self.source_id, "name": self.name, "thread_id": self.thread_id})

    @classmethod
    def decode_body(cls, body: bytes) -> Source:
        data = _unpack_body("SOURCE", body)
        return cls(
            source_id=_field(data, "SOURCE", "id", int),
            name=_field(data, "SOURCE", "name", str),
            thread_id=_field(data, "SOURCE", "thread_id", int),
        )


@dataclass(frozen=True, slots=True)
class Events:
    """A batch of events from one source. ``payload`` stays opaque until export."""

    TYPE: ClassVar = FrameType.EVENTS
    source_id: int
    count: int
    first_ts_ns: int
    last_ts_ns: int
    payload: bytes

    def encode_body(self) -> bytes:
        return EVENTS_HEADER.pack(self.source_id, self.count, self.first_ts_ns, self.last_ts_ns) + self.payload

    @classmethod
    def decode_body(cls, body: bytes) -> Events:
        if len(body) < EVENTS_HEADER.size:
            raise MalformedFrame(
                f"EVENTS frame: body of {len(body)} bytes is shorter than its {EVENTS_HEADER.size}-byte header"
            )
        source_id, count, first_ts, last_ts = EVENTS_HEADER.unpack_from(body)
        payload = body[EVENTS_HEADER.size :]
        if count == 0 or count > len(payload):
            raise MalformedFrame(f"EVENTS frame: field 'count' is {count} for a payload of {len(payload)} bytes")
        if first_ts > last_ts:
            raise MalformedFrame(f"EVENTS frame: field 'first_ts' ({first_ts}) is after 'last_ts' ({last_ts})")
        return cls(source_id, count, first_ts, last_ts, payload)


@dataclass(frozen=True, slots=True)
class Stats:
    """Cumulative loss counters of the client process (since it started)."""

    TYPE: ClassVar = FrameType.STATS
    dropped_events: int
    dropped_frames: int

    def encode_body(self) -> bytes:
        return _pack({"dropped_events": self.dropped_events, "dropped_frames": self.dropped_frames})

    @classmethod
    def decode_body(cls, body: bytes) -> Stats:
        data = _unpack_body("STATS", body)
        return cls(
            dropped_events=_field(data, "STATS", "dropped_events", int),
            dropped_frames=_field(data, "STATS", "dropped_frames", int),
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
    """Everything the sender had before the matching FLUSH has gone out ahead of this frame."""

    TYPE: ClassVar = FrameType.FLUSH_ACK
    token: int

    def encode_body(self) -> bytes:
        return struct.pack("<Q", self.token)

    @classmethod
    def decode_body(cls, body: bytes) -> FlushAck:
        return cls(_token_body("FLUSH_ACK", body))


@dataclass(frozen=True, slots=True)
class Welcome:
    """The collector's first frame: the limits the client must respect."""

    TYPE: ClassVar = FrameType.WELCOME
    max_frame_bytes: int
    collector_version: str

    def encode_body(self) -> bytes:
        return _pack({"max_frame_bytes": self.max_frame_bytes, "collector_version": self.collector_version})

    @classmethod
    def decode_body(cls, body: bytes) -> Welcome:
        data = _unpack_body("WELCOME", body)
        max_frame_bytes = _field(data, "WELCOME", "max_frame_bytes", int)
        if max_frame_bytes < MIN_MAX_FRAME_BYTES:
            raise MalformedFrame(
                f"WELCOME frame: field 'max_frame_bytes' must be >= {MIN_MAX_FRAME_BYTES}, got {max_frame_bytes}"
            )
        return cls(
            max_frame_bytes=max_frame_bytes,
            collector_version=_field(data, "WELCOME", "collector_version", str),
        )


Frame = Hello | Schema | Strings | Source | Events | Stats | Flush | FlushAck | Welcome

_FRAME_CLASSES: Final[dict[int, Any]] = {
    cls.TYPE: cls for cls in (Hello, Schema, Strings, Source, Events, Stats, Flush, FlushAck, Welcome)
}
#: Frame types each peer may send.
_SENDABLE_BY: Final = {
    "client": frozenset(_FRAME_CLASSES) - {FrameType.WELCOME},
    "collector": frozenset({FrameType.FLUSH, FrameType.FLUSH_ACK, FrameType.WELCOME}),
}
#: The frame each peer must send first.
_FIRST_FRAME: Final = {"client": FrameType.HELLO, "collector": FrameType.WELCOME}


def preamble(version: int = PROTOCOL_VERSION) -> bytes:
    """The 8 bytes each side sends before its first frame."""
    return PREAMBLE.pack(MAGIC, version, 0)


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


def decode_events(
    payload: bytes | memoryview, count: int, first_ts_ns: int
) -> Iterator[tuple[int, int, int, int, Any]]:
    """Yield ``(kind, name_id, ts_ns, dur_ns, args)`` for each event of an EVENTS payload.

    Args:
        payload: the payload of an EVENTS frame.
        count, first_ts_ns: the fields of that frame's header.

    Raises:
        MalformedFrame: the payload does not match the column layout or the header's count.
    """
    try:
        # Argument maps may have int or bytes keys (msgpack allows them); only control frames insist on str keys.
        columns = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:
        raise MalformedFrame(f"EVENTS frame: payload is not valid msgpack ({exc})") from None
    if not isinstance(columns, list) or len(columns) != len(EVENT_COLUMNS):
        raise MalformedFrame(f"EVENTS frame: payload must be an array of {len(EVENT_COLUMNS)} columns")
    for name, column in zip(EVENT_COLUMNS, columns, strict=True):
        if not isinstance(column, list) or len(column) != count:
            raise MalformedFrame(f"EVENTS frame: column {name!r} must be an array of {count} values")
    kinds, names, offsets, durations, args = columns
    for kind, name, offset, duration, arg in zip(kinds, names, offsets, durations, args, strict=True):
        if not (type(kind) is int and type(name) is int and type(offset) is int and type(duration) is int):
            raise MalformedFrame("EVENTS frame: columns 'kind', 'name', 'ts' and 'dur' must hold integers")
        yield kind, name, first_ts_ns + offset, duration, arg


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: ``FrameReader.next_frame()`` needs more bytes.
NEED_DATA: Final = _Sentinel("NEED_DATA")
#: The peer closed the stream cleanly, at a frame boundary.
CLOSED: Final = _Sentinel("CLOSED")

_MIN_READ = 64 * 1024


class FrameReader:
    """Turns the bytes one peer sends into frames.

    Theory of operation: received bytes live in ``_buf[_start:_end]``. ``next_frame()`` first checks the preamble
    (failing on the first byte that differs from the magic), then parses one frame at a time. A frame header is
    checked against ``max_frame_bytes`` and the frame types ``peer`` may send before its body is awaited, so a
    hostile length never makes us buffer it. Bytes arrive either by copy (``receive_data``) or straight into our
    buffer (``get_buffer`` + ``buffer_updated``, the shape of asyncio's BufferedProtocol). After a ProtocolError the
    reader is dead: every later call raises the same error.

    Args:
        peer: who sends the bytes: ``"client"`` (first frame HELLO) or ``"collector"`` (first frame WELCOME).
        max_frame_bytes: the largest frame accepted, header included.
    """

    __slots__ = (
        "_buf",
        "_end",
        "_eof",
        "_error",
        "_max_frame_bytes",
        "_peer",
        "_sendable",
        "_start",
        "_state",
    )

    def __init__(self, peer: Literal["client", "collector"], max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < MIN_MAX_FRAME_BYTES:
            raise ConfigError(f"max_frame_bytes must be >= {MIN_MAX_FRAME_BYTES}, got {max_frame_bytes}")
        self._peer = peer
        self._sendable = _SENDABLE_BY[peer]
        self._max_frame_bytes = max_frame_bytes
        self._buf = bytearray(_MIN_READ)
        self._start = 0
        self._end = 0
        self._eof = False
        self._error: ProtocolError | None = None
        self._state = "preamble"

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as frames."""
        return self._end - self._start

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """A writable view of at least ``sizehint`` (default 64 KiB) free bytes; call ``buffer_updated`` next."""
        want = max(sizehint, _MIN_READ)
        if self._start == self._end:
            self._start = self._end = 0
        if len(self._buf) - self._end < want:
            live = self._end - self._start
            # A fresh buffer rather than a resize: a view handed out earlier may still be alive.
            fresh = bytearray(max(live + want, 2 * live))
            fresh[:live] = self._buf[self._start : self._end]
            self._buf, self._start, self._end = fresh, 0, live
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were written at the start of the view ``get_buffer`` returned."""
        self._end += nbytes

    def receive_data(self, data: bytes) -> None:
        """Add received bytes; ``b""`` means the peer closed its side."""
        if not data:
            self._eof = True
            return
        with self.get_buffer(len(data)) as view:
            view[: len(data)] = data
        self.buffer_updated(len(data))

    def __iter__(self) -> Iterator[Frame]:
        """Every complete frame buffered now (stops at NEED_DATA or CLOSED)."""
        while True:
            frame = self.next_frame()
            if frame is NEED_DATA or frame is CLOSED:
                return
            yield frame  # type: ignore[misc]

    def next_frame(self) -> Frame | _Sentinel:
        """The next complete frame, ``NEED_DATA``, or ``CLOSED`` after a clean end of stream.

        Raises:
            ProtocolError: the bytes break the protocol (a subclass says how).
        """
        if self._error is not None:
            raise self._error
        try:
            return self._next_frame()
        except ProtocolError as exc:
            self._error = exc
            raise

    def _next_frame(self) -> Frame | _Sentinel:
        available = self._end - self._start
        if self._state == "preamble":
            return self._read_preamble(available)
        if available < FRAME_HEADER.size:
            return self._need_data(available)
        body_length, frame_type = FRAME_HEADER.unpack_from(self._buf, self._start)
        size = FRAME_HEADER.size + body_length
        if size > self._max_frame_bytes:
            raise FrameTooLarge(size, self._max_frame_bytes)
        self._check_type(frame_type)
        if available < size:
            return self._need_data(available)
        body_start = self._start + FRAME_HEADER.size
        body = bytes(self._buf[body_start : body_start + body_length])
        self._start += size
        frame: Frame = _FRAME_CLASSES[frame_type].decode_body(body)
        self._state = "frames"
        return frame

    def _read_preamble(self, available: int) -> _Sentinel:
        head = bytes(self._buf[self._start : self._start + min(available, PREAMBLE.size)])
        if head[: len(MAGIC)] != MAGIC[: len(head)]:
            raise BadPreamble(f"stream does not start with the ringtrace magic {MAGIC!r}: got {head[: len(MAGIC)]!r}")
        if available < PREAMBLE.size:
            return self._need_data(available)
        _, version, _ = PREAMBLE.unpack(head)
        if version != PROTOCOL_VERSION:
            raise UnsupportedVersion(version, PROTOCOL_VERSION)
        self._start += PREAMBLE.size
        self._state = "first"
        return self._next_frame()  # type: ignore[return-value]

    def _check_type(self, frame_type: int) -> None:
        if frame_type not in _FRAME_CLASSES:
            raise UnexpectedFrame(f"unknown frame type {frame_type}")
        name = FrameType(frame_type).name
        if frame_type not in self._sendable:
            raise UnexpectedFrame(f"a {self._peer} may not send {name} frames")
        first = _FIRST_FRAME[self._peer]
        if self._state == "first" and frame_type != first:
            raise UnexpectedFrame(f"first frame from a {self._peer} must be {first.name}, got {name}")
        if self._state == "frames" and frame_type == first:
            raise UnexpectedFrame(f"{name} may only be the first frame")

    def _need_data(self, available: int) -> _Sentinel:
        if not self._eof:
            return NEED_DATA
        if available == 0:
            return CLOSED
        if self._state == "preamble":
            raise BadPreamble(f"stream closed inside the preamble after {available} of {PREAMBLE.size} bytes")
        raise ProtocolError(f"stream closed inside a frame: {available} bytes of an incomplete frame pending")
