"""Snapshots in Perfetto's trace format: a protobuf ``Trace`` of ``TracePacket``s, which Perfetto UI opens natively.

The same events as the Chrome export, from the same walk (``read/event_walk.py``), as a stream of chunks: one per
stored frame, so memory holds one frame's events at a time (and one segment's interned names).
Where the C writer is built (``perfetto_frames.py``, ``_perfetto.c``), a frame whose events are all spans,
instants and counters with plain args is written straight from its msgpack, naming things through this writer's
tables (``_Writer.fast_chunk``): the same bytes as this module writes, which defines them.

Tracks (``TrackDescriptor``), each described before its first event: a process track per process (pid, name, host
as its label), a thread track per thread (pid, tid, name), a track per asyncio task lane with its thread, under the
process a track per source and a track per async slice id (named by the slice: Perfetto shows same-named async tracks
as one, a row per slice open at once), and under the track a counter was recorded on a counter track per counter
name (and per value other than ``value``): threads that set one counter each get a line of their own, as in Chrome
JSON (a counter's ``id``) and the web view, not one line interleaving their values.
Processes and threads are ordered explicitly (the root track's ordering, each one's rank): processes in the order
they first connected, threads in the order they were declared. The root track is uuid 0, Perfetto's implicit
trace-global track: its descriptor is the only one Perfetto reads ``process_ordering`` and ``thread_ordering`` from
(``track_descriptor.proto``: "only valid on the root track descriptor (uuid = 0)"), it carries nothing else, and no
event is on it; every other track's uuid is 1 or more.

Events (``TrackEvent``): a slice is a BEGIN and an END (Perfetto has no complete slice); an END names its slice, so it
closes that one even where a slice that never ended sits above it. Instants (messages, typed events, markers) are
INSTANTs, counter values COUNTERs; args are debug annotations, nested as they are. A message's category, and
"async", are the event's category, as Chrome's ``cat``.

Timestamps are absolute wall-clock ns, on the trace's default clock (a clock snapshot states that REALTIME is the same
clock, so Perfetto UI can show wall-clock time). Perfetto sorts events by timestamp and keeps file order among equal
ones, so each chunk's events are written in the order that nests slices sharing a timestamp: ends first (inner
first), then begins (outer first), then instants and zero-length slices.

Sequences and interning: descriptors and the trace's own packets are on sequence 1; the events of each stored segment
on a sequence of their own (``trusted_packet_sequence_id``), whose first packet clears the incremental state and
whose event names, categories and annotation names are interned (each name written once per segment, then a small
integer; at most ``_MAX_INTERNED`` of each, then written in full). A message's text is its own: never interned.

Loss counters and the capture window, which Chrome JSON has in ``otherData``, are the trace's attributes
(``TraceAttributes``, the Overview page of Perfetto UI and its ``metadata`` table, keys prefixed
``trace_attribute.``): ``ringtrace.report`` is the same object as ``otherData`` (less the Chrome time origin), as
JSON; each total, the window (``ringtrace.first_frame_wall_ns``, ``ringtrace.last_frame_wall_ns``) and the
collector's facts are also attributes of their own.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, Final

import orjson
from ringtrace.collector.export import protobuf as pb
from ringtrace.collector.export.flows import span_flows
from ringtrace.collector.export.perfetto_frames import ACCELERATED, FramePackets, Naming
from ringtrace.collector.read.event_walk import TOTALS, EventWalk
from ringtrace.collector.read.frame_walk import (
    ProcessView,
    Shown,
    SnapshotView,
    WalkedFrame,
    first_showing,
    process_label,
)
from ringtrace.collector.read.pool import let_the_loop_in
from ringtrace.collector.read.query import EVERYTHING, EventFilter
from ringtrace.wire.decoder import StreamTables
from ringtrace.wire.model import THREAD_TRACK, TrackInfo

__all__ = ["perfetto_chunks"]

# Field numbers and values, from Perfetto's protos/perfetto/trace/: trace.proto, trace_packet.proto,
# track_event/{track_event,track_descriptor,process_descriptor,thread_descriptor,counter_descriptor,
# debug_annotation}.proto, interned_data/interned_data.proto, clock_snapshot.proto, common/trace_attributes.proto.
_PACKET: Final = pb.key(1, pb.LEN)  # Trace.packet
# TracePacket
_TIMESTAMP: Final = pb.key(8, pb.VARINT)
_TRUSTED_PACKET_SEQUENCE_ID: Final = 10
_TRACK_EVENT: Final = pb.key(11, pb.LEN)
_INTERNED_DATA: Final = 12
_SEQUENCE_FLAGS: Final = 13
_SEQ_INCREMENTAL_STATE_CLEARED: Final = 1
_SEQ_NEEDS_INCREMENTAL_STATE: Final = 2
_CLOCK_SNAPSHOT: Final = 6
_TRACK_DESCRIPTOR: Final = 60
_TRACE_ATTRIBUTES: Final = 126
# TrackEvent
_CATEGORY_IIDS: Final = 3
_CATEGORIES: Final = 22
_DEBUG_ANNOTATIONS: Final = pb.key(4, pb.LEN)
_TYPE_SLICE_BEGIN: Final = pb.uint(9, 1)
_TYPE_SLICE_END: Final = pb.uint(9, 2)
_TYPE_INSTANT: Final = pb.uint(9, 3)
_TYPE_COUNTER: Final = pb.uint(9, 4)
_NAME_IID: Final = 10
_NAME: Final = 23
_TRACK_UUID: Final = pb.key(11, pb.VARINT)
_COUNTER_VALUE: Final = pb.key(30, pb.VARINT)
_FLOW_IDS: Final = pb.key(47, pb.I64)
_TERMINATING_FLOW_IDS: Final = pb.key(48, pb.I64)
_DOUBLE_COUNTER_VALUE: Final = pb.key(44, pb.I64)
# InternedData: its entries (EventCategory, EventName, DebugAnnotationName) are each {iid = 1, name = 2}.
_EVENT_CATEGORIES: Final = 1
_EVENT_NAMES: Final = 2
_DEBUG_ANNOTATION_NAMES: Final = 3
# DebugAnnotation
_ANNOTATION_NAME_IID: Final = 1
_ANNOTATION_NAME: Final = 10
_BOOL_VALUE: Final = pb.key(2, pb.VARINT)
_UINT_VALUE: Final = pb.key(3, pb.VARINT)
_INT_VALUE: Final = pb.key(4, pb.VARINT)
_DOUBLE_VALUE: Final = pb.key(5, pb.I64)
_STRING_VALUE: Final = 6
_LEGACY_JSON_VALUE: Final = 9
_DICT_ENTRIES: Final = pb.key(11, pb.LEN)
_ARRAY_VALUES: Final = pb.key(12, pb.LEN)
# TrackDescriptor
_UUID: Final = 1
_TRACK_NAME: Final = 2
_PROCESS: Final = 3
_THREAD: Final = 4
_PARENT_UUID: Final = 5
_COUNTER: Final = 8
_SIBLING_ORDER_RANK: Final = 12
_SIBLING_MERGE_BEHAVIOR: Final = 15
_SIBLING_MERGE_BEHAVIOR_NONE: Final = 2
_PROCESS_ORDERING: Final = 19
_PROCESS_ORDERING_EXPLICIT: Final = 1
_THREAD_ORDERING: Final = 20
_THREAD_ORDERING_EXPLICIT: Final = 1
# ProcessDescriptor, ThreadDescriptor
_PID: Final = 1
_PROCESS_NAME: Final = 6
_PROCESS_LABELS: Final = 8
_TID: Final = 2
_THREAD_NAME: Final = 5
# ClockSnapshot
_CLOCKS: Final = 1
_PRIMARY_TRACE_CLOCK: Final = 2
_CLOCK_ID: Final = 1
_CLOCK_TIMESTAMP: Final = 2
_BUILTIN_CLOCK_REALTIME: Final = 1
_BUILTIN_CLOCK_BOOTTIME: Final = 6
# TraceAttributes
_ATTRIBUTE: Final = 1
_ATTRIBUTE_KEY: Final = 1
_LONG_VALUE: Final = 2
_ATTRIBUTE_STRING_VALUE: Final = 3

#: The sequence of descriptors and the trace's own packets; segments' events go on the sequences after it.
_TRACE_SEQUENCE: Final = 1
_ON_TRACE_SEQUENCE: Final = pb.uint(_TRUSTED_PACKET_SEQUENCE_ID, _TRACE_SEQUENCE)
#: Names of one kind interned per sequence, at most (a bound on memory, whatever a segment holds).
_MAX_INTERNED: Final = 65_536
#: Async tracks whose descriptor was written, remembered (one forgotten is described again, the same).
_MAX_ASYNC_TRACKS: Final = 4096
#: Uuids of async tracks, hashed from process, name and id, have the top bit set; other tracks count up from 1.
_HASHED_UUID: Final = 1 << 63
_MAX_INT32: Final = 2**31 - 1
_MAX_TIMESTAMP: Final = 2**63 - 1
#: Nesting of args written as such; deeper values are written as text.
_MAX_DEPTH: Final = 64
_DOUBLE: Final = struct.Struct("<d")
_FIXED64: Final = struct.Struct("<Q")
_INT64: Final = range(-(2**63), 2**63)
_UINT64: Final = range(2**64)

#: A packet's start (with its length), then the timestamp's key; a TrackEvent field's start: for lengths below 128.
_SMALL_PACKETS: Final = tuple(_PACKET + bytes((size,)) + _TIMESTAMP for size in range(128))
_SMALL_TRACK_EVENTS: Final = tuple(_TRACK_EVENT + bytes((size,)) for size in range(128))

_SMALL_ANNOTATIONS: Final = tuple(_DEBUG_ANNOTATIONS + bytes((size,)) for size in range(128))

# How events that share a timestamp are ordered in a chunk (Perfetto keeps file order among them): slices ending
# (inner first), slices beginning (outer first), then instants, counter values and zero-length slices.
_ENDS: Final = 0
_BEGINS: Final = 1
_POINTS: Final = 2
_ZERO_ENDS: Final = 3


def perfetto_chunks(
    view: SnapshotView, selected: EventFilter = EVERYTHING, *, accelerated: bool = True
) -> Iterator[bytes]:
    """Yield the pieces of one Perfetto trace (a serialized ``perfetto.protos.Trace``) holding the events
    ``selected``.

    ``accelerated``: the C writer (``perfetto_frames.py``) writes the frames it takes where it is built; False writes
    every frame in Python (the same bytes, slower)."""
    walk = EventWalk(view, selected)
    writer = _Writer(walk)
    fast = FramePackets(*walk.window) if accelerated and ACCELERATED and walk.by_frame else None
    yield writer.header()
    for walked, segment in walk.walked():
        process, track, tables, frame = walked
        whole = fast is not None and walk.takes_whole(process, track, frame)
        chunk = writer.fast_chunk(fast, walked, segment) if fast is not None and whole else None
        if chunk is None:
            events = walk.shown(process, track, tables, frame)
            if events:
                writer.enter_segment(segment)
                writer.add(process, track, events)
            chunk = writer.chunk()
        yield chunk  # (b"" for a frame with nothing selected: the reader may hand over its step)
    writer.enter_segment(-1)  # what never ended, on a sequence of its own
    for process, track, event in walk.still_open():
        writer.add(process, track, [event])
    yield writer.chunk() + writer.attributes()


class _Interned:
    """One kind of name interned on one sequence: the field that names it, by name, and the new entries."""

    __slots__ = ("_entries", "_iid_field", "_inline_field", "known")

    def __init__(self, entries: int, iid_field: int, inline_field: int) -> None:
        self._entries = entries
        self._iid_field = iid_field
        self._inline_field = inline_field
        #: The field that names each name interned so far (callers look here first: the common case).
        self.known: dict[str, bytes] = {}

    def field(self, name: str, new_entries: list[bytes]) -> bytes:
        """The field naming ``name`` (by its iid; its entry added to ``new_entries`` the first time)."""
        field = self.known.get(name)
        if field is None:
            if len(self.known) >= _MAX_INTERNED:
                return pb.string(self._inline_field, name)
            iid = len(self.known) + 1
            field = self.known[name] = pb.uint(self._iid_field, iid)
            new_entries.append(pb.message(self._entries, pb.uint(1, iid) + pb.string(2, name)))
        return field


class _Writer:
    """The current sequence and its interned names, and the packets of the next chunk (with the descriptors of the
    tracks they need, ``_Tracks``)."""

    def __init__(self, walk: EventWalk) -> None:
        self._walk = walk
        self._tracks = _Tracks(walk)
        self._shown_events = 0
        self._sequence_id = _TRACE_SEQUENCE
        self._segment: int | None = None
        #: (timestamp, order, order within, arrival, TrackEvent) of the chunk's events.
        self._timed: list[tuple[int, int, int, int, bytes]] = []
        #: What ``add`` makes of an event, by its phase: of the event of a track (and its track field).
        self._by_phase: dict[str, Callable[[ProcessView, TrackInfo, bytes, Shown], None]] = {
            "X": self._slice,
            "B": self._slice,
            "i": self._instant,
            "C": self._counter,
            "b": self._async,
            "e": self._async,
        }
        self._new_sequence()

    # -- sequences ---------------------------------------------------------------------------------------------------

    def _new_sequence(self) -> None:
        self._sequence_id += 1
        self._cleared = False
        self._new_entries: list[bytes] = []
        self._names = _Interned(_EVENT_NAMES, _NAME_IID, _NAME)
        self._categories = _Interned(_EVENT_CATEGORIES, _CATEGORY_IIDS, _CATEGORIES)
        self._annotation_names = _Interned(_DEBUG_ANNOTATION_NAMES, _ANNOTATION_NAME_IID, _ANNOTATION_NAME)
        self._on_sequence = pb.uint(_TRUSTED_PACKET_SEQUENCE_ID, self._sequence_id)
        self._tail = self._on_sequence + pb.uint(_SEQUENCE_FLAGS, _SEQ_NEEDS_INCREMENTAL_STATE)

    def enter_segment(self, segment: int) -> None:
        """Events of ``segment`` follow (each segment gets a sequence of its own)."""
        if segment != self._segment:
            if self._segment is not None:
                self._new_sequence()
            self._segment = segment

    def _first_tail(self) -> bytes:
        """What the first event packet of a chunk carries: the sequence, its flags (the sequence's first packet
        clears its incremental state), and the names interned since the last chunk."""
        flags = _SEQ_NEEDS_INCREMENTAL_STATE
        if not self._cleared:
            flags |= _SEQ_INCREMENTAL_STATE_CLEARED
            self._cleared = True
        tail = self._on_sequence + pb.uint(_SEQUENCE_FLAGS, flags)
        if self._new_entries:
            tail += pb.message(_INTERNED_DATA, b"".join(self._new_entries))
            self._new_entries = []
        return tail

    # -- chunks ------------------------------------------------------------------------------------------------------

    def header(self) -> bytes:
        """The root track (explicit order of processes and threads) and the clock snapshot."""
        ordering = pb.uint(_PROCESS_ORDERING, _PROCESS_ORDERING_EXPLICIT)
        ordering += pb.uint(_THREAD_ORDERING, _THREAD_ORDERING_EXPLICIT)
        # uuid 0, written: Perfetto reads the ordering from the root track's descriptor alone (a reader that predates
        # these fields sees a descriptor of the implicit track, which the protos allow, and no event on it).
        root = pb.uint(_UUID, 0) + ordering
        now = max(self._walk.view.origin_ns, 0)
        clocks = b"".join(
            pb.message(_CLOCKS, pb.uint(_CLOCK_ID, clock) + pb.uint(_CLOCK_TIMESTAMP, now))
            for clock in (_BUILTIN_CLOCK_BOOTTIME, _BUILTIN_CLOCK_REALTIME)
        )
        clocks += pb.uint(_PRIMARY_TRACE_CLOCK, _BUILTIN_CLOCK_BOOTTIME)
        return _trace_packet(pb.message(_TRACK_DESCRIPTOR, root)) + _trace_packet(pb.message(_CLOCK_SNAPSHOT, clocks))

    def chunk(self) -> bytes:
        """The packets added since the last chunk: descriptors, then events in the order that nests them."""
        parts = self._tracks.take_descriptors()
        timed, self._timed = self._timed, []
        if not timed:
            return b"".join(parts)
        timed.sort()
        append, varint = parts.append, pb.varint
        tail = self._first_tail()
        for index, (ts, _, _, _, event) in enumerate(timed):
            if not index & 255:
                let_the_loop_in()
            if not 0 <= ts <= _MAX_TIMESTAMP:  # a clock offset no real client has
                ts = 0 if ts < 0 else _MAX_TIMESTAMP
            stamp = varint(ts)
            size = len(event)
            packet_size = size + len(stamp) + len(tail) + 3
            if packet_size < 128:  # the common case: one-byte lengths, made once
                append(_SMALL_PACKETS[packet_size] + stamp + _SMALL_TRACK_EVENTS[size] + event + tail)
            else:
                packet = _TIMESTAMP + stamp + _TRACK_EVENT + varint(size) + event + tail
                append(_PACKET + varint(len(packet)) + packet)
            tail = self._tail
        return b"".join(parts)

    def fast_chunk(self, fast: FramePackets, walked: WalkedFrame, segment: int) -> bytes | None:
        """The chunk of one frame as the C writer makes it, naming things through this writer's tables (as ``add``
        and ``chunk`` would); None if the frame is the Python writer's."""
        process, track, tables, frame = walked

        def enter() -> tuple[bytes, bytes]:
            self.enter_segment(segment)
            return _TRACK_UUID + pb.varint(self._tracks.track_uuid(process, track)), self._tail

        def name(string_id: int) -> bytes:
            return self._names.field(_string(tables, string_id), self._new_entries)

        def annotation(key: str) -> bytes:
            return self._annotation_names.field(key, self._new_entries)

        def counter(string_id: int, key: str) -> bytes:
            name = _string(tables, string_id)
            uuid = self._tracks.counter_uuid(process, track, _counter_name(name, key))
            return _TRACK_UUID + pb.varint(uuid)

        made = fast.packets(tables, frame, process.clock_offset_ns, Naming(enter, name, annotation, counter))
        if made is None:
            return None
        if made.skipped:
            self._walk.count_undecodable(process, made.skipped)
        self._shown_events += made.shown
        parts = self._tracks.take_descriptors()
        if made.first_event is not None:
            event = made.first_event
            packet = _TIMESTAMP + pb.varint(made.first_ts_ns) + _TRACK_EVENT + pb.varint(len(event)) + event
            packet += self._first_tail()
            parts += [_PACKET + pb.varint(len(packet)) + packet, made.rest]
        return b"".join(parts)

    def attributes(self) -> bytes:
        """The report and the capture window, as the trace's attributes."""
        walk = self._walk
        capture = {**walk.capture(), "shown_events": self._shown_events}
        report = {**walk.view.other, **walk.report(), "capture": capture}
        attributes: list[tuple[str, int | str]] = [("ringtrace.report", orjson.dumps(report).decode())]
        for name, value in walk.view.other.items():
            if isinstance(value, str) or (type(value) is int and value in _INT64):
                attributes.append((f"ringtrace.{name}", value))
        attributes += [(f"ringtrace.{name}", int(report[name])) for name in TOTALS]
        for name in ("first_frame_wall_ns", "last_frame_wall_ns"):
            if capture[name] is not None:
                attributes.append((f"ringtrace.{name}", int(capture[name])))
        if capture["query"]:
            attributes.append(("ringtrace.query", orjson.dumps(capture["query"]).decode()))
        body = b"".join(
            pb.message(
                _ATTRIBUTE,
                pb.string(_ATTRIBUTE_KEY, key)
                + (
                    pb.string(_ATTRIBUTE_STRING_VALUE, value) if isinstance(value, str) else pb.uint(_LONG_VALUE, value)
                ),
            )
            for key, value in attributes
        )
        return _trace_packet(pb.message(_TRACE_ATTRIBUTES, body))

    # -- events ------------------------------------------------------------------------------------------------------

    def add(self, process: ProcessView, track: TrackInfo, events: list[Shown]) -> None:
        """Events of ``track`` for the next chunk (with the descriptors they need)."""
        on_track = _TRACK_UUID + pb.varint(self._tracks.track_uuid(process, track))
        self._shown_events += len(events)
        by_phase = self._by_phase
        for index, event in enumerate(events):
            if not index & 255:
                let_the_loop_in()
            by_phase[event[0]](process, track, on_track, event)

    def _slice(self, process: ProcessView, track: TrackInfo, on_track: bytes, event: Shown) -> None:
        """A slice ("X"), or one never ended ("B"): a BEGIN, and an END where it ended."""
        phase, name, wall_ns, dur_ns, args, _, _ = event
        timed = self._timed
        arrival = len(timed)
        named = self._names.known.get(name) or self._names.field(name, self._new_entries)
        begin = _TYPE_SLICE_BEGIN + on_track + named
        if args:
            begin += self._annotations(args)
            if phase == "X" and ("kind" in args or "links" in args):
                begin += _flow_fields(args)
        if phase == "B":  # never ended
            timed.append((wall_ns, _BEGINS, -_MAX_TIMESTAMP, arrival, begin))
        elif dur_ns > 0:
            end_ns = wall_ns + dur_ns
            timed.append((wall_ns, _BEGINS, -end_ns, arrival, begin))
            timed.append((end_ns, _ENDS, -wall_ns, arrival + 1, _TYPE_SLICE_END + on_track + named))
        else:
            timed.append((wall_ns, _POINTS, 0, arrival, begin))
            timed.append((wall_ns, _ZERO_ENDS, 0, arrival + 1, _TYPE_SLICE_END + on_track + named))

    def _instant(self, process: ProcessView, track: TrackInfo, on_track: bytes, event: Shown) -> None:
        """An instant; a message (an instant with a category) is named by its rendered text: its own, not
        interned."""
        _, name, wall_ns, _, args, category, _ = event
        if category:
            named = pb.string(_NAME, name)
        else:
            named = self._names.known.get(name) or self._names.field(name, self._new_entries)
        packet = _TYPE_INSTANT + on_track + named + self._category(category) + self._annotations(args)
        self._timed.append((wall_ns, _POINTS, 0, len(self._timed), packet))

    def _counter(self, process: ProcessView, track: TrackInfo, on_track: bytes, event: Shown) -> None:
        """A counter's values, each on the counter track of its name (and key, but for ``value``) under ``track``."""
        _, name, wall_ns, _, args, _, _ = event
        timed = self._timed
        for key, value in (args or {}).items():
            value_field = _counter_value(value)
            if value_field is not None:
                counter = self._tracks.counter_uuid(process, track, _counter_name(name, key))
                packet = _TYPE_COUNTER + _TRACK_UUID + pb.varint(counter) + value_field
                timed.append((wall_ns, _POINTS, 0, len(timed), packet))

    def _async(self, process: ProcessView, track: TrackInfo, on_track: bytes, event: Shown) -> None:
        """An async slice's begin ("b") or end ("e"), on the track of its name and id."""
        phase, name, wall_ns, _, args, category, async_id = event
        async_track = _TRACK_UUID + pb.varint(self._tracks.async_uuid(process, name, async_id))
        kind = _TYPE_SLICE_BEGIN if phase == "b" else _TYPE_SLICE_END
        packet = kind + async_track + self._names.field(name, self._new_entries) + self._category(category)
        packet += self._annotations(args)  # an end's args add to its slice's
        if phase == "b" and args and ("kind" in args or "links" in args):
            packet += _flow_fields(args)
        self._timed.append((wall_ns, _BEGINS if phase == "b" else _ENDS, 0, len(self._timed), packet))

    def _category(self, category: str) -> bytes:
        return self._categories.field(category, self._new_entries) if category else b""

    def _annotations(self, args: dict[str, Any] | None) -> bytes:
        if not args:
            return b""
        parts = []
        interned, known = self._annotation_names, self._annotation_names.known
        for key, value in args.items():
            named = known.get(key) if type(key) is str else None
            if named is None:
                named = interned.field(key if type(key) is str else _text(key), self._new_entries)
            annotation = named + _value(value, 0)
            size = len(annotation)
            start = _SMALL_ANNOTATIONS[size] if size < 128 else _DEBUG_ANNOTATIONS + pb.varint(size)
            parts.append(start + annotation)
        return b"".join(parts)


class _Tracks:
    """The tracks described so far (a uuid each), and the descriptors of those described since the last chunk."""

    def __init__(self, walk: EventWalk) -> None:
        self._walk = walk
        self._last_uuid = 0
        #: By the pid shown.
        self._process_uuids: dict[int, int] = {}
        #: The first known process showing each pid (made on first use).
        self._first_showing: dict[int, ProcessView] | None = None
        self._track_uuids: dict[tuple[int, int], int] = {}
        self._counter_uuids: dict[tuple[int, int, str], int] = {}
        self._async_uuids: OrderedDict[tuple[int, str, str], int] = OrderedDict()
        #: Pids past int32 (aliases of an OS pid hundreds of processes share) -> the int32 pid shown instead.
        self._int32_pids: dict[int, int] = {}
        self._next_int32_pid = _MAX_INT32
        self._taken_pids: set[int] | None = None
        self._descriptors: list[bytes] = []

    def take_descriptors(self) -> list[bytes]:
        """The descriptor packets made since the last call (each written before the first event on its track)."""
        descriptors, self._descriptors = self._descriptors, []
        return descriptors

    def _describe(self, descriptor: bytes) -> None:
        self._descriptors.append(_trace_packet(pb.message(_TRACK_DESCRIPTOR, descriptor)))

    def _new_uuid(self) -> int:
        self._last_uuid += 1
        return self._last_uuid

    def _process_uuid(self, process: ProcessView) -> int:
        """The track of the process, one per pid shown (OTLP data of a ringtrace client's process shows its pid),
        named after the first known of those that show it."""
        uuid = self._process_uuids.get(process.trace_pid)
        if uuid is None:
            if self._first_showing is None:
                self._first_showing = first_showing(self._walk.processes)
            process = self._first_showing.get(process.trace_pid, process)
            uuid = self._process_uuids[process.trace_pid] = self._new_uuid()
            label = process_label(process)
            described = pb.uint(_PID, self._pid(process)) + pb.string(_PROCESS_NAME, label)
            described += pb.string(_PROCESS_LABELS, process.host)
            rank = pb.uint(_SIBLING_ORDER_RANK, min(process.uid, _MAX_INT32))  # in the order they first connected
            self._describe(pb.uint(_UUID, uuid) + pb.message(_PROCESS, described) + rank)
        return uuid

    def _pid(self, process: ProcessView) -> int:
        """The pid Perfetto shows, an int32: the snapshot's; for a pid past int32 (the wire protocol allows it, and
        the pids shown for processes that share an OS pid grow past it after 512 of them), one of its own, counted
        down from the top of int32, that no process of the snapshot has."""
        pid = process.trace_pid
        if 0 <= pid <= _MAX_INT32:
            return pid
        shown = self._int32_pids.get(pid)
        if shown is None:
            if self._taken_pids is None:
                self._taken_pids = {p.trace_pid for p in self._walk.view.processes.values()}
            while self._next_int32_pid in self._taken_pids:
                self._next_int32_pid -= 1
            shown = self._int32_pids[pid] = self._next_int32_pid
            self._next_int32_pid -= 1
        return shown

    def track_uuid(self, process: ProcessView, track: TrackInfo) -> int:
        """A thread's track, a task lane's (with its thread), or another track of the process (a source)."""
        uuid = self._track_uuids.get((process.uid, track.track_id))
        if uuid is not None:
            return uuid
        track = process.tracks.get(track.track_id, track)  # the latest name, or the one of an ended track
        if track.kind == THREAD_TRACK and process.shares_thread(track) is None:
            parent = self._process_uuid(process)
            uuid = self._track_uuids[(process.uid, track.track_id)] = self._new_uuid()
            thread = pb.uint(_PID, self._pid(process)) + pb.uint(_TID, _int64(track.thread_id))
            if track.name:
                thread += pb.string(_THREAD_NAME, track.name)
            rank = pb.uint(_SIBLING_ORDER_RANK, min(track.track_id, _MAX_INT32))  # in the order declared
            self._describe(pb.uint(_UUID, uuid) + pb.message(_THREAD, thread) + rank)
            return uuid
        thread_track = self._thread_of(process, track)
        parent = self.track_uuid(process, thread_track) if thread_track else self._process_uuid(process)
        uuid = self._track_uuids[(process.uid, track.track_id)] = self._new_uuid()
        described = pb.uint(_UUID, uuid) + pb.uint(_PARENT_UUID, parent) + pb.string(_TRACK_NAME, track.name)
        # Tracks of one name stay apart (two sources may share a name), as they do in Chrome JSON.
        self._describe(described + pb.uint(_SIBLING_MERGE_BEHAVIOR, _SIBLING_MERGE_BEHAVIOR_NONE))
        return uuid

    def _thread_of(self, process: ProcessView, track: TrackInfo) -> TrackInfo | None:
        """A task lane's thread (its latest name, or the name its frames carry, or none); for another timeline's
        track of a thread, the thread's own track."""
        if track.kind == THREAD_TRACK:
            return process.shares_thread(track)
        if not track.parent or track.parent == track.track_id:
            return None
        thread = process.tracks.get(track.parent) or self._walk.tracks.get((process.uid, track.parent))
        if thread is None:
            return TrackInfo(track.parent, THREAD_TRACK, "", track.thread_id)
        return thread if thread.kind == THREAD_TRACK else None

    def counter_uuid(self, process: ProcessView, track: TrackInfo, name: str) -> int:
        """The counter track of ``name`` under the track it was recorded on."""
        key = (process.uid, track.track_id, name)
        uuid = self._counter_uuids.get(key)
        if uuid is None:
            parent = self.track_uuid(process, track)
            uuid = self._counter_uuids[key] = self._new_uuid()
            described = pb.uint(_UUID, uuid) + pb.uint(_PARENT_UUID, parent) + pb.string(_TRACK_NAME, name)
            self._describe(described + pb.message(_COUNTER, b""))
        return uuid

    def async_uuid(self, process: ProcessView, name: str, async_id: str) -> int:
        key = (process.uid, name, async_id)
        uuid = self._async_uuids.get(key)
        if uuid is not None:
            self._async_uuids.move_to_end(key)
            return uuid
        digest = hashlib.blake2b(orjson.dumps(key), digest_size=8).digest()
        uuid = self._async_uuids[key] = int.from_bytes(digest, "little") | _HASHED_UUID
        if len(self._async_uuids) > _MAX_ASYNC_TRACKS:
            self._async_uuids.popitem(last=False)
        parent = self._process_uuid(process)
        self._describe(pb.uint(_UUID, uuid) + pb.uint(_PARENT_UUID, parent) + pb.string(_TRACK_NAME, name))
        return uuid


def _trace_packet(fields: bytes) -> bytes:
    """A packet of the trace's own sequence (no incremental state), as an entry of ``Trace``."""
    packet = fields + _ON_TRACE_SEQUENCE
    return _PACKET + pb.varint(len(packet)) + packet


def _string(tables: StreamTables, string_id: int) -> str:
    """A name by its string id, as the event walk names it (``StreamTables.rows``)."""
    text = tables.strings.get(string_id)
    return text if text is not None else f"<unknown string {string_id}>"


def _flow_fields(args: dict[str, Any]) -> bytes:
    """A span's flow arrows (``flows.py``): the one leaving it (``flow_ids``), those ending at it
    (``terminating_flow_ids``)."""
    leaving, arriving = span_flows(args)
    fields = b"" if leaving is None else _FLOW_IDS + _FIXED64.pack(leaving)
    for flow in arriving:
        fields += _TERMINATING_FLOW_IDS + _FIXED64.pack(flow)
    return fields


def _counter_value(value: Any) -> bytes | None:
    """A counter's value field, or None for a value that is not a number."""
    if type(value) is int and value in _INT64:
        return _COUNTER_VALUE + pb.varint(value)
    if type(value) is float or type(value) is int:
        return _DOUBLE_COUNTER_VALUE + _DOUBLE.pack(float(value))
    return None


def _value(value: Any, depth: int) -> bytes:
    """A debug annotation's value fields: numbers, text, maps and lists as they are (bytes as hex and anything else
    as text, as the Chrome export shows them)."""
    kind = type(value)
    if kind is str:
        return pb.string(_STRING_VALUE, value)
    if kind is int:
        if value in _INT64:
            return _INT_VALUE + pb.varint(value)
        if value in _UINT64:
            return _UINT_VALUE + pb.varint(value)
        return pb.string(_STRING_VALUE, str(value))
    if kind is float:
        return _DOUBLE_VALUE + _DOUBLE.pack(value)
    if kind is bool:
        return _BOOL_VALUE + (b"\x01" if value else b"\x00")
    if value is None:
        return pb.string(_LEGACY_JSON_VALUE, "null")
    if depth >= _MAX_DEPTH:
        return pb.string(_STRING_VALUE, _text(value))
    if kind is dict:
        if not value:
            return pb.string(_LEGACY_JSON_VALUE, "{}")
        entries = []
        for key, item in value.items():
            entry = pb.string(_ANNOTATION_NAME, key if type(key) is str else _text(key)) + _value(item, depth + 1)
            entries.append(_DICT_ENTRIES + pb.varint(len(entry)) + entry)
        return b"".join(entries)
    if kind is list or kind is tuple:
        if not value:
            return pb.string(_LEGACY_JSON_VALUE, "[]")
        items = [_value(item, depth + 1) for item in value]
        return b"".join(_ARRAY_VALUES + pb.varint(len(item)) + item for item in items)
    return pb.string(_STRING_VALUE, _text(value))


def _counter_name(name: str, key: object) -> str:
    """The track of a counter's value under ``key``: the counter's name, and the key but for ``value`` (``mem rss``,
    as Chrome JSON's viewers name a series)."""
    if key == "value":
        return name
    return f"{name} {key if type(key) is str else _text(key)}"


def _text(value: object) -> str:
    """A key or value that is not text, as text: bytes as hex, anything else as its repr."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return repr(value)


def _int64(value: int) -> int:
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value
