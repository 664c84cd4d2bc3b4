"""The frames that declare a stream's tables, which its EVENTS refer to by id: SCHEMA (event kinds and the column
layout), STRINGS (the string table) and TRACK."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from ringtrace.wire.errors import MalformedFrame
from ringtrace.wire.frame_fields import MAX_FIELD_INT, MAX_U32, body_field, pack_body, unpack_map
from ringtrace.wire.frame_types import EVENT_COLUMNS, FrameType
from ringtrace.wire.recent import Recent

__all__ = ["KindSpec", "Schema", "Strings", "Track"]


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
        fields = body_field(entry, "SCHEMA", "fields", list)
        for item in fields:
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
                raise MalformedFrame(f"SCHEMA frame: a field must be [name, type code], got {item!r:.80}")
        return cls(
            id=body_field(entry, "SCHEMA", "id", int, MAX_U32),
            name=body_field(entry, "SCHEMA", "name", str),
            shape=body_field(entry, "SCHEMA", "shape", str),
            fields=tuple((name, type_code) for name, type_code in fields),
            text=body_field(entry, "SCHEMA", "text", str) if "text" in entry else "",
            priority=body_field(entry, "SCHEMA", "priority", str) if "priority" in entry else "",
        )


@dataclass(frozen=True, slots=True)
class Schema:
    """Event kinds (all of them, or those added since the last SCHEMA) and the column layout of EVENTS payloads."""

    TYPE: ClassVar = FrameType.SCHEMA
    kinds: tuple[KindSpec, ...]
    columns: tuple[str, ...] = EVENT_COLUMNS

    def encode_body(self) -> bytes:
        return pack_body({"kinds": [k.to_wire() for k in self.kinds], "columns": list(self.columns)})

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
        kinds = tuple(KindSpec.from_wire(entry) for entry in body_field(data, "SCHEMA", "kinds", list))
        columns = body_field(data, "SCHEMA", "columns", list)
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
        return pack_body(body)

    @classmethod
    def decode_body(cls, body: bytes) -> Strings:
        data = unpack_map("STRINGS", body)
        first_id = body_field(data, "STRINGS", "first_id", int, MAX_U32)
        strings = body_field(data, "STRINGS", "strings", list)
        for s in strings:
            if not isinstance(s, str):
                raise MalformedFrame(f"STRINGS frame: field 'strings' must hold str, got {type(s).__name__}")
        reset = body_field(data, "STRINGS", "reset", bool) if "reset" in data else False
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
        return track_body(self.track_id, self.kind, self.name, self.thread_id, self.parent, self.ended)

    @classmethod
    def decode_body(cls, body: bytes) -> Track:
        data = unpack_map("TRACK", body)
        track_id, kind, name = data.get("id"), data.get("kind"), data.get("name")
        thread_id, parent = data.get("thread_id"), data.get("parent")
        # The usual frame checked at once (an OTLP trace's lane takes two: declared, ended); any other field by field,
        # to say which one is wrong.
        if (
            type(track_id) is int and type(kind) is int and type(name) is str and type(thread_id) is int
            and type(parent) is int and 0 <= track_id <= MAX_U32 and 0 <= kind <= 0xFF
            and 0 <= thread_id <= MAX_FIELD_INT and 0 <= parent <= MAX_U32
        ):  # fmt: skip
            return cls(track_id, kind, name, thread_id, parent, bool(data.get("ended", False)))
        return cls(
            track_id=body_field(data, "TRACK", "id", int, MAX_U32),
            kind=body_field(data, "TRACK", "kind", int, 0xFF),
            name=body_field(data, "TRACK", "name", str),
            thread_id=body_field(data, "TRACK", "thread_id", int),
            parent=body_field(data, "TRACK", "parent", int, MAX_U32),
            ended=bool(data.get("ended", False)),  # optional: absent means a live track
        )


def track_body(track_id: int, kind: int, name: str, thread_id: int, parent: int, ended: bool) -> bytes:
    """The body of a TRACK frame (``Track.encode_body``), for an encoder that makes one without the frame object."""
    return pack_body(
        {"id": track_id, "kind": kind, "name": name, "thread_id": thread_id, "parent": parent, "ended": ended}
    )
