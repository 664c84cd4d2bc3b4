"""HawkTracer's HTDUMP stream (its file dump listener's file, or what its TCP listener sends), read into a
``Recording`` (``recording.py``).

The stream is events back to back, with no framing, in the byte order its first event declares. Every event starts
with a 20-byte base (``klass_id u32, timestamp u64`` ns, ``id u64``), then its klass's fields in declaration order,
base structs flattened first, numbers packed without padding, strings NUL-terminated. Klasses describe themselves in
the stream: an HT_EventKlassInfoEvent (klass 2) names a klass and counts its fields, then one
HT_EventKlassFieldInfoEvent (klass 3) per field gives its type name, name, size and data type. A stream opens with
HT_EndiannessInfoEvent (klass 0: 0 little, 1 big endian), the info events of every klass, and HT_SystemInfoEvent.

Theory of operation
-------------------
Klasses 0 to 3 have fixed layouts (HawkTracer's own parser does not read theirs from the stream either). Any other
klass's layout is made on its first event from its field infos: the leaves of its fields in the order they are
written, a struct field flattened into its klass's fields (a field ``base`` of type ``HT_Event`` is the 20 bytes
already read; the leaves of a struct field that is not a base are named ``field.leaf``), consecutive numbers read by
one ``struct.Struct``. An event whose layout cannot be known (a klass never declared, fewer field infos than its
count, a data type or size HawkTracer does not write) stops the reading: neither its end nor any later event's can
be found. An event cut by the end of the file is a torn tail.

Events become:

- HT_StringMappingEvent: an entry of the label table of callstack events with an integer label (applied at the end,
  so that a mapping sent late still counts);
- HT_SystemInfoEvent: the version HELLO names;
- an event of a klass derived from HT_CallstackBaseEvent (HT_CallstackIntEvent, HT_CallstackStringEvent, a user
  klass): a span from ``timestamp`` for ``duration`` ns (HawkTracer's own converter writes ``ts = timestamp`` and
  ``dur = duration``), named by its ``label`` (an integer label through the table, else the number, as their
  converter does), on a thread track per ``thread_id``; any other fields are its args;
- an event of any other klass: a typed event of a kind named after the klass, whose fields are the event's
  ``id`` and then the klass's leaves, on the track of its ``thread_id`` field if it has one, else on a track of its
  own for events without a thread (tid 0, where their converter puts them too).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Final

from ringtrace.collector.foreign.recording import Recording
from ringtrace.wire.decoder import MAX_KIND_FIELDS
from ringtrace.wire.frames import KindSpec
from ringtrace.wire.model import SPAN, THREAD_TRACK, display_text

__all__ = ["SYSTEM", "looks_like", "read"]

SYSTEM: Final = "HawkTracer"

_ENDIANNESS_KLASS: Final = 0
_BASE_KLASS: Final = 1
_KLASS_INFO: Final = 2
_FIELD_INFO: Final = 3
_BASE_SIZE: Final = 20
_STRUCT: Final = 1
_STRING: Final = 2
_DATA_TYPES: Final = {1: "struct", 2: "string", 3: "integer", 4: "float", 5: "double", 6: "pointer", 99: "unsigned"}
#: (data type, size) -> ringtrace type code, struct format.
_NUMBERS: Final = {
    (99, 1): ("u8", "B"),
    (99, 2): ("u16", "H"),
    (99, 4): ("u32", "I"),
    (99, 8): ("u64", "Q"),
    (3, 1): ("i8", "b"),
    (3, 2): ("i16", "h"),
    (3, 4): ("i32", "i"),
    (3, 8): ("i64", "q"),
    (4, 4): ("f32", "f"),
    (4, 8): ("f64", "d"),
    (5, 4): ("f32", "f"),
    (5, 8): ("f64", "d"),
    (6, 4): ("ptr", "I"),
    (6, 8): ("ptr", "Q"),
}
#: Structs nested deeper than this are refused (a klass may name itself: the stream is not trusted).
_MAX_DEPTH: Final = 32
_MAX_NS: Final = 2**63 - 1


def looks_like(data: bytes) -> bool:
    """Whether ``data`` starts as an HTDUMP stream does: HT_EndiannessInfoEvent (klass 0, timestamp 0 and id 0:
    HawkTracer writes them so) saying 0 or 1, then the klass of the next event, HT_EventKlassInfoEvent (2), in that
    byte order, if the data goes on that far."""
    if len(data) <= _BASE_SIZE or data[:_BASE_SIZE] != bytes(_BASE_SIZE) or data[_BASE_SIZE] not in (0, 1):
        return False
    if len(data) < _BASE_SIZE + 1 + 4:
        return True
    order = "<" if data[_BASE_SIZE] == 0 else ">"
    return bool(struct.unpack_from(order + "I", data, _BASE_SIZE + 1)[0] == _KLASS_INFO)


def read(data: bytes) -> Recording:
    """The events of ``data`` up to its end, a torn tail, or an event that cannot be read (``Recording.error`` says
    which)."""
    return _Reader(data).read()


@dataclass
class _Field:
    type_name: str
    name: str
    size: int
    data_type: int


@dataclass
class _Klass:
    klass_id: int
    name: str
    field_count: int
    fields: list[_Field] = field(default_factory=list)


@dataclass(frozen=True)
class _Leaf:
    """A value as written: its name, ringtrace type code, and ``struct`` format ("" for a NUL-terminated string)."""

    name: str
    code: str
    fmt: str


class _Short(Exception):
    """The data ends inside an event (``str``: which field, and what is missing)."""


class _Broken(Exception):
    """An event that cannot be read (``str``: the whole message)."""


class _Layout:
    """How one klass's fields are read after the base: runs of numbers by one ``struct.Struct`` each, strings alone."""

    def __init__(self, klass: _Klass, leaves: list[_Leaf], bases: list[str], order: str) -> None:
        self.klass = klass
        self.leaves = leaves
        #: The klasses it derives from (through ``base`` fields), nearest first.
        self.bases = bases
        self.index = {leaf.name: i for i, leaf in enumerate(leaves)}
        self.steps: list[tuple[struct.Struct | None, list[_Leaf]]] = []
        run: list[_Leaf] = []
        for leaf in [*leaves, None]:
            if leaf is not None and leaf.fmt:
                run.append(leaf)
                continue
            if run:
                self.steps.append((struct.Struct(order + "".join(r.fmt for r in run)), run))
                run = []
            if leaf is not None:
                self.steps.append((None, [leaf]))
        self.order = order
        self.kind: KindSpec | None = None

    def read(self, data: bytes, position: int) -> tuple[list[Any], int]:
        """The values at ``position`` and the offset after them.

        Raises:
            _Short: ``data`` ends first.
        """
        values: list[Any] = []
        for numbers, leaves in self.steps:
            if numbers is None:
                end = data.find(b"\0", position)
                if end < 0:
                    raise _Short(f"its field {leaves[0].name!r} (a string) has no terminating NUL")
                values.append(data[position:end].decode("utf-8", "replace"))
                position = end + 1
            elif position + numbers.size > len(data):
                raise _Short(self._cut(leaves, len(data) - position))
            else:
                values += numbers.unpack_from(data, position)
                position += numbers.size
        return values, position

    def _cut(self, leaves: list[_Leaf], left: int) -> str:
        for leaf in leaves:
            size = struct.calcsize(self.order + leaf.fmt)
            if size > left:
                return f"its field {leaf.name!r} ({leaf.code}) needs {size} bytes, {max(left, 0)} left"
            left -= size
        raise AssertionError("a run of numbers that fits")  # pragma: no cover - read() checked that it does not


#: Fixed layouts of the klasses every stream has (name, leaves).
_FIXED: Final = {
    _ENDIANNESS_KLASS: ("HT_EndiannessInfoEvent", [_Leaf("endianness", "u8", "B")]),
    _BASE_KLASS: ("HT_Event", []),
    _KLASS_INFO: (
        "HT_EventKlassInfoEvent",
        [_Leaf("info_klass_id", "u32", "I"), _Leaf("event_klass_name", "str", ""), _Leaf("field_count", "u8", "B")],
    ),
    _FIELD_INFO: (
        "HT_EventKlassFieldInfoEvent",
        [
            _Leaf("info_klass_id", "u32", "I"),
            _Leaf("field_type", "str", ""),
            _Leaf("field_name", "str", ""),
            _Leaf("size", "u64", "Q"),
            _Leaf("data_type", "u8", "B"),
        ],
    ),
}
_BASE_LEAVES: Final = (_Leaf("klass_id", "u32", "I"), _Leaf("timestamp", "u64", "Q"), _Leaf("id", "u64", "Q"))
#: Fields of a callstack event that make the span itself rather than its args.
_SPAN_FIELDS: Final = frozenset({"duration", "thread_id", "label"})


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.recording = Recording(SYSTEM)
        self.klasses: dict[int, _Klass] = {}
        self.by_name: dict[str, _Klass] = {}
        self.layouts: dict[int, _Layout] = {}
        #: HT_StringMappingEvent's table, and the integer labels waiting for it: (records, index, label).
        self.labels: dict[int, str] = {}
        self.int_labels: list[tuple[list[Any], int, int]] = []
        self.threads: dict[int, int] = {}  # HawkTracer thread id -> track id
        self.kinds: dict[tuple[int, tuple[_Leaf, ...]], KindSpec] = {}
        self.base = struct.Struct("<IQQ")
        self._byte_order(data[_BASE_SIZE] if len(data) > _BASE_SIZE else 0)

    def _byte_order(self, endianness: int) -> None:
        self.order = "<" if endianness == 0 else ">"
        self.base = struct.Struct(self.order + "IQQ")
        self.layouts = {
            klass_id: _Layout(_Klass(klass_id, name, len(leaves)), leaves, [], self.order)
            for klass_id, (name, leaves) in _FIXED.items()
        }

    def read(self) -> Recording:
        recording = self.recording
        try:
            self._events()
        except _Broken as exc:
            recording.error = str(exc)
        for records, index, label in self.int_labels:
            records[index] = self.labels.get(label, str(label))
        return recording

    def _events(self) -> None:
        data, position, size = self.data, 0, len(self.data)
        while position < size:
            if size - position < _BASE_SIZE:
                self._torn(
                    position,
                    f": {size - position} of the {_BASE_SIZE} bytes of its base (klass_id, timestamp, id) are there",
                )
                return
            klass_id, timestamp, event_id = self.base.unpack_from(data, position)
            layout = self._layout(klass_id, position)
            try:
                values, end = layout.read(data, position + _BASE_SIZE)
            except _Short as exc:
                self._torn(position, f" ({layout.klass.name}, klass {klass_id}): {exc}")
                return
            if klass_id == _ENDIANNESS_KLASS:
                self._endianness(values[0], position)
            elif klass_id == _KLASS_INFO:
                self._klass_info(*values)
            elif klass_id == _FIELD_INFO:
                self._field_info(position, *values)
            else:
                self._event(layout, timestamp, event_id, values, position)
            position = end

    def _torn(self, position: int, what: str) -> None:
        self.recording.error = f"the file ends inside the HawkTracer event at offset {position}{what}"
        self.recording.torn = True

    # -- metadata --------------------------------------------------------------------------------------------------

    def _endianness(self, endianness: int, position: int) -> None:
        if endianness not in (0, 1):
            raise _Broken(
                f"the HT_EndiannessInfoEvent at offset {position} has endianness {endianness} (0 little, 1 big)"
            )
        if self.order != ("<" if endianness == 0 else ">"):
            self._byte_order(endianness)

    def _klass_info(self, klass_id: int, name: str, field_count: int) -> None:
        if klass_id in _FIXED or klass_id in self.klasses:  # HawkTracer's parser keeps the first too
            return
        klass = self.klasses[klass_id] = _Klass(klass_id, name, field_count)
        self.by_name.setdefault(name, klass)

    def _field_info(self, position: int, klass_id: int, type_name: str, name: str, size: int, data_type: int) -> None:
        if klass_id in _FIXED:
            return
        klass = self.klasses.get(klass_id)
        if klass is None:
            raise _Broken(
                f"the HT_EventKlassFieldInfoEvent at offset {position} has info_klass_id {klass_id}, "
                "which no HT_EventKlassInfoEvent declared"
            )
        if all(known.name != name for known in klass.fields):  # as HawkTracer's parser: a field is added once
            klass.fields.append(_Field(type_name, name, size, data_type))
            for made in [i for i in self.layouts if i not in _FIXED]:  # a layout may include this klass
                del self.layouts[made]

    def _layout(self, klass_id: int, position: int) -> _Layout:
        layout = self.layouts.get(klass_id)
        if layout is not None:
            return layout
        klass = self.klasses.get(klass_id)
        if klass is None:
            raise _Broken(
                f"the HawkTracer event at offset {position} has klass_id {klass_id}, "
                "which no HT_EventKlassInfoEvent declared"
            )
        leaves: list[_Leaf] = []
        bases: list[str] = []
        self._flatten(klass, "", 0, leaves, bases, f"the HawkTracer event at offset {position}")
        layout = self.layouts[klass_id] = _Layout(klass, _unique(leaves, klass.name), bases, self.order)
        return layout

    def _flatten(
        self, klass: _Klass, prefix: str, depth: int, leaves: list[_Leaf], bases: list[str], where: str
    ) -> None:
        """``klass``'s fields as written, appended to ``leaves``; the klasses reached through ``base`` fields from
        the event's own klass appended to ``bases``."""
        if len(klass.fields) < klass.field_count:
            raise _Broken(
                f"{where} needs klass {klass.name!r} ({klass.klass_id}), whose HT_EventKlassInfoEvent announced "
                f"field_count {klass.field_count} but {len(klass.fields)} HT_EventKlassFieldInfoEvents describe it"
            )
        for described in klass.fields:
            path = prefix + described.name
            if described.data_type == _STRUCT:
                if described.type_name == "HT_Event":
                    if described.name != "base":  # the base itself is the 20 bytes read first
                        leaves += [_Leaf(f"{path}.{leaf.name}", leaf.code, leaf.fmt) for leaf in _BASE_LEAVES]
                    continue
                nested = self.by_name.get(described.type_name)
                if nested is None:
                    raise _Broken(
                        f"{where} needs field {path!r} of klass {klass.name!r}, a struct of klass "
                        f"{described.type_name!r}, which no HT_EventKlassInfoEvent declared"
                    )
                if depth >= _MAX_DEPTH:
                    raise _Broken(f"{where} needs structs nested deeper than {_MAX_DEPTH} (field {path!r})")
                if described.name != "base":  # a struct member: its leaves named after it
                    self._flatten(nested, f"{path}.", depth + 1, leaves, [], where)
                elif prefix:  # the base of a struct member
                    self._flatten(nested, prefix, depth + 1, leaves, [], where)
                else:  # a klass the event's own derives from
                    bases.append(nested.name)
                    self._flatten(nested, prefix, depth + 1, leaves, bases, where)
            elif described.data_type == _STRING:
                leaves.append(_Leaf(path, "str", ""))
            else:
                number = _NUMBERS.get((described.data_type, described.size))
                if number is None:
                    kind = _DATA_TYPES.get(described.data_type, "unknown")
                    raise _Broken(
                        f"{where} needs field {path!r} of klass {klass.name!r}, whose data_type {described.data_type} "
                        f"({kind}) with size {described.size} HawkTracer does not write"
                    )
                leaves.append(_Leaf(path, *number))

    # -- events ----------------------------------------------------------------------------------------------------

    def _event(self, layout: _Layout, timestamp: int, event_id: int, values: list[Any], position: int) -> None:
        name, index = layout.klass.name, layout.index
        if name == "HT_StringMappingEvent" and _typed(values, index, identifier=int, label=str):
            self.labels[values[index["identifier"]]] = values[index["label"]]
            return
        if name == "HT_SystemInfoEvent" and _typed(values, index, version_major=int, version_minor=int,
                                                   version_patch=int):  # fmt: skip
            version = ".".join(str(values[index[f"version_{part}"]]) for part in ("major", "minor", "patch"))
            self.recording.system = f"{SYSTEM} {version}"
            return
        if "HT_CallstackBaseEvent" in (name, *layout.bases) and _typed(values, index, duration=int, thread_id=int):
            self._span(layout, timestamp, values, position)
            return
        thread_id = values[index["thread_id"]] if _typed(values, index, thread_id=int) else 0
        kind = self._kind(layout)
        self.recording.add(self._thread(thread_id), kind.id, name, timestamp, timestamp, [event_id, *values])

    def _span(self, layout: _Layout, timestamp: int, values: list[Any], position: int) -> None:
        index = layout.index
        duration = values[index["duration"]]
        if timestamp + duration > _MAX_NS:
            raise _Broken(
                f"the {layout.klass.name} at offset {position} has timestamp {timestamp} and duration {duration}: "
                f"it ends past {_MAX_NS} ns"
            )
        label: Any = values[index["label"]] if "label" in index else layout.klass.name
        args = {leaf.name: value for leaf, value in zip(layout.leaves, values, strict=True)
                if leaf.name not in _SPAN_FIELDS} or None  # fmt: skip
        track_id = self._thread(values[index["thread_id"]])
        if isinstance(label, int):  # through the table at the end
            records = self.recording.records[track_id]
            self.int_labels.append((records, len(records) + 1, label))
        self.recording.add(track_id, SPAN, label, timestamp, timestamp + duration, args)

    def _thread(self, thread_id: int) -> int:
        track_id = self.threads.get(thread_id)
        if track_id is None:
            name = f"thread {thread_id}" if thread_id else "events without a thread"
            track_id = self.threads[thread_id] = self.recording.track(THREAD_TRACK, name, thread_id)
        return track_id

    def _kind(self, layout: _Layout) -> KindSpec:
        if layout.kind is None:
            key = (layout.klass.klass_id, tuple(layout.leaves))
            kind = self.kinds.get(key)
            if kind is None:
                if len(layout.leaves) >= MAX_KIND_FIELDS:
                    raise _Broken(
                        f"klass {layout.klass.name!r} has {len(layout.leaves)} fields; a ringtrace kind carries at "
                        f"most {MAX_KIND_FIELDS - 1} besides its id"
                    )
                fields = tuple((leaf.name, leaf.code) for leaf in layout.leaves)
                kind = self.kinds[key] = self.recording.typed_kind(layout.klass.name, fields)
            layout.kind = kind
        return layout.kind


def _typed(values: list[Any], index: dict[str, int], **types: type) -> bool:
    """Whether the fields named have values of these types."""
    return all(name in index and isinstance(values[index[name]], kind) for name, kind in types.items())


def _unique(leaves: list[_Leaf], klass_name: str) -> list[_Leaf]:
    """``leaves`` with names a kind can carry: at most 256 characters, none twice, none ``id`` (the event's own)."""
    seen = {"id"}
    unique = []
    for leaf in leaves:
        name = display_text(leaf.name)
        if name in seen:
            name = display_text(f"{klass_name}.{leaf.name}")
        count = 2
        while name in seen:
            name = display_text(f"{leaf.name}#{count}")
            count += 1
        seen.add(name)
        unique.append(_Leaf(name, leaf.code, leaf.fmt))
    return unique
