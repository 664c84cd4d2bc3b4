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

Samples (the sampler's stacks) are ``PerfSample`` packets on their segment's sequence, their stacks interned there
(``perfetto_samples.py``): Perfetto UI shows them as a thread's samples and draws a flame graph of a range selected.
A chunk's samples follow its events (the interned data they need is on its first packet).

Loss counters and the capture window, which Chrome JSON has in ``otherData``, are the trace's attributes
(``TraceAttributes``, the Overview page of Perfetto UI and its ``metadata`` table, keys prefixed
``trace_attribute.``): ``ringtrace.report`` is the same object as ``otherData`` (less the Chrome time origin), as
JSON; each total, the window (``ringtrace.first_frame_wall_ns``, ``ringtrace.last_frame_wall_ns``) and the
collector's facts are also attributes of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

import orjson
from ringtrace.collector.export import protobuf as pb
from ringtrace.collector.export.perfetto_annotations import (
    annotation_value,
    as_text,
    counter_name,
    counter_value,
    flow_fields,
)
from ringtrace.collector.export.perfetto_frames import ACCELERATED, FramePackets, Naming
from ringtrace.collector.export.perfetto_protos import (
    ANNOTATION_NAME,
    ANNOTATION_NAME_IID,
    ATTRIBUTE,
    ATTRIBUTE_KEY,
    ATTRIBUTE_STRING_VALUE,
    BUILTIN_CLOCK_BOOTTIME,
    BUILTIN_CLOCK_REALTIME,
    CATEGORIES,
    CATEGORY_IIDS,
    CLOCK_ID,
    CLOCK_SNAPSHOT,
    CLOCK_TIMESTAMP,
    CLOCKS,
    DEBUG_ANNOTATION_NAMES,
    DEBUG_ANNOTATIONS,
    EVENT_CATEGORIES,
    EVENT_NAMES,
    INT64,
    INTERNED_DATA,
    LONG_VALUE,
    NAME,
    NAME_IID,
    PACKET,
    PRIMARY_TRACE_CLOCK,
    PROCESS_ORDERING,
    PROCESS_ORDERING_EXPLICIT,
    SEQ_INCREMENTAL_STATE_CLEARED,
    SEQ_NEEDS_INCREMENTAL_STATE,
    SEQUENCE_FLAGS,
    THREAD_ORDERING,
    THREAD_ORDERING_EXPLICIT,
    TIMESTAMP,
    TRACE_ATTRIBUTES,
    TRACE_SEQUENCE,
    TRACK_DESCRIPTOR,
    TRACK_EVENT,
    TRACK_UUID,
    TRUSTED_PACKET_SEQUENCE_ID,
    TYPE_COUNTER,
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    UUID,
    trace_packet,
)
from ringtrace.collector.export.perfetto_samples import SequenceStacks
from ringtrace.collector.export.perfetto_tracks import PerfettoTracks
from ringtrace.collector.export.sample_stacks import SAMPLE, sample_stack
from ringtrace.collector.read.event_walk import NOT_MESSAGES, TOTALS, EventWalk, message_args
from ringtrace.collector.read.frame_walk import ProcessView, Shown, SnapshotView, WalkedFrame
from ringtrace.collector.read.pool import let_the_loop_in
from ringtrace.collector.read.selection import EVERYTHING, EventFilter
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["perfetto_chunks"]

#: Names of one kind interned per sequence, at most (a bound on memory, whatever a segment holds).
_MAX_INTERNED: Final = 65_536
_MAX_TIMESTAMP: Final = 2**63 - 1

#: A packet's start (with its length), then the timestamp's key; a TrackEvent field's start: for lengths below 128.
_SMALL_PACKETS: Final = tuple(PACKET + bytes((size,)) + TIMESTAMP for size in range(128))
_SMALL_TRACK_EVENTS: Final = tuple(TRACK_EVENT + bytes((size,)) for size in range(128))

_SMALL_ANNOTATIONS: Final = tuple(DEBUG_ANNOTATIONS + bytes((size,)) for size in range(128))

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
    tracks they need, ``PerfettoTracks``)."""

    def __init__(self, walk: EventWalk) -> None:
        self._walk = walk
        self._tracks = PerfettoTracks(walk)
        self._shown_events = 0
        self._sequence_id = TRACE_SEQUENCE
        self._segment: int | None = None
        #: (timestamp, order, order within, arrival, TrackEvent) of the chunk's events.
        self._timed: list[tuple[int, int, int, int, bytes]] = []
        #: (timestamp, PerfSample field) of the chunk's samples.
        self._samples: list[tuple[int, bytes]] = []
        #: What ``add`` makes of an event, by its phase: of the event of a track (and its track field).
        self._by_phase: dict[str, Callable[[ProcessView, TrackInfo, bytes, Shown], None]] = {
            "X": self._slice,
            "B": self._slice,
            "i": self._instant,
            "C": self._counter,
            "b": self._async,
            "e": self._async,
            SAMPLE: self._sample,
        }
        self._new_sequence()

    # -- sequences ---------------------------------------------------------------------------------------------------

    def _new_sequence(self) -> None:
        self._sequence_id += 1
        self._cleared = False
        self._new_entries: list[bytes] = []
        self._names = _Interned(EVENT_NAMES, NAME_IID, NAME)
        self._categories = _Interned(EVENT_CATEGORIES, CATEGORY_IIDS, CATEGORIES)
        self._annotation_names = _Interned(DEBUG_ANNOTATION_NAMES, ANNOTATION_NAME_IID, ANNOTATION_NAME)
        self._stacks = SequenceStacks()
        self._on_sequence = pb.uint(TRUSTED_PACKET_SEQUENCE_ID, self._sequence_id)
        self._tail = self._on_sequence + pb.uint(SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE)

    def enter_segment(self, segment: int) -> None:
        """Events of ``segment`` follow (each segment gets a sequence of its own)."""
        if segment != self._segment:
            if self._segment is not None:
                self._new_sequence()
            self._segment = segment

    def _first_tail(self) -> bytes:
        """What the first event packet of a chunk carries: the sequence, its flags (the sequence's first packet
        clears its incremental state), and the names interned since the last chunk."""
        flags = SEQ_NEEDS_INCREMENTAL_STATE
        if not self._cleared:
            flags |= SEQ_INCREMENTAL_STATE_CLEARED
            self._cleared = True
        tail = self._on_sequence + pb.uint(SEQUENCE_FLAGS, flags)
        if self._new_entries:
            tail += pb.message(INTERNED_DATA, b"".join(self._new_entries))
            self._new_entries = []
        return tail

    # -- chunks ------------------------------------------------------------------------------------------------------

    def header(self) -> bytes:
        """The root track (explicit order of processes and threads) and the clock snapshot."""
        ordering = pb.uint(PROCESS_ORDERING, PROCESS_ORDERING_EXPLICIT)
        ordering += pb.uint(THREAD_ORDERING, THREAD_ORDERING_EXPLICIT)
        # uuid 0, written: Perfetto reads the ordering from the root track's descriptor alone (a reader that predates
        # these fields sees a descriptor of the implicit track, which the protos allow, and no event on it).
        root = pb.uint(UUID, 0) + ordering
        now = max(self._walk.view.origin_ns, 0)
        clocks = b"".join(
            pb.message(CLOCKS, pb.uint(CLOCK_ID, clock) + pb.uint(CLOCK_TIMESTAMP, now))
            for clock in (BUILTIN_CLOCK_BOOTTIME, BUILTIN_CLOCK_REALTIME)
        )
        clocks += pb.uint(PRIMARY_TRACE_CLOCK, BUILTIN_CLOCK_BOOTTIME)
        return trace_packet(pb.message(TRACK_DESCRIPTOR, root)) + trace_packet(pb.message(CLOCK_SNAPSHOT, clocks))

    def chunk(self) -> bytes:
        """The packets added since the last chunk: descriptors, then events in the order that nests them."""
        parts = self._tracks.take_descriptors()
        timed, self._timed = self._timed, []
        if not timed:
            if self._samples:
                self._add_samples(parts, self._first_tail())
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
                packet = TIMESTAMP + stamp + TRACK_EVENT + varint(size) + event + tail
                append(PACKET + varint(len(packet)) + packet)
            tail = self._tail
        if self._samples:
            self._add_samples(parts, tail)
        return b"".join(parts)

    def _add_samples(self, parts: list[bytes], tail: bytes) -> None:
        """The chunk's sample packets, after its events (``tail``: the first one's)."""
        samples, self._samples = self._samples, []
        varint = pb.varint
        for ts, sample in samples:
            packet = TIMESTAMP + varint(min(max(ts, 0), _MAX_TIMESTAMP)) + sample + tail
            parts.append(PACKET + varint(len(packet)) + packet)
            tail = self._tail

    def fast_chunk(self, fast: FramePackets, walked: WalkedFrame, segment: int) -> bytes | None:
        """The chunk of one frame as the C writer makes it, naming things through this writer's tables (as ``add``
        and ``chunk`` would); None if the frame is the Python writer's."""
        process, track, tables, frame = walked

        def enter() -> tuple[bytes, bytes]:
            self.enter_segment(segment)
            return TRACK_UUID + pb.varint(self._tracks.track_uuid(process, track)), self._tail

        def name(string_id: int) -> bytes:
            return self._names.field(_string(tables, string_id), self._new_entries)

        def annotation(key: str) -> bytes:
            return self._annotation_names.field(key, self._new_entries)

        def counter(string_id: int, key: str) -> bytes:
            name = _string(tables, string_id)
            uuid = self._tracks.counter_uuid(process, track, counter_name(name, key))
            return TRACK_UUID + pb.varint(uuid)

        made = fast.packets(tables, frame, process.clock_offset_ns, Naming(enter, name, annotation, counter))
        if made is None:
            return None
        if made.skipped:
            self._walk.count_undecodable(process, made.skipped)
        self._shown_events += made.shown
        parts = self._tracks.take_descriptors()
        if made.first_event is not None:
            event = made.first_event
            packet = TIMESTAMP + pb.varint(made.first_ts_ns) + TRACK_EVENT + pb.varint(len(event)) + event
            packet += self._first_tail()
            parts += [PACKET + pb.varint(len(packet)) + packet, made.rest]
        return b"".join(parts)

    def attributes(self) -> bytes:
        """The report and the capture window, as the trace's attributes."""
        walk = self._walk
        capture = {**walk.capture(), "shown_events": self._shown_events}
        report = {**walk.view.other, **walk.report(), "capture": capture}
        attributes: list[tuple[str, int | str]] = [("ringtrace.report", orjson.dumps(report).decode())]
        for name, value in walk.view.other.items():
            if isinstance(value, str) or (type(value) is int and value in INT64):
                attributes.append((f"ringtrace.{name}", value))
        attributes += [(f"ringtrace.{name}", int(report[name])) for name in TOTALS]
        for name in ("first_frame_wall_ns", "last_frame_wall_ns"):
            if capture[name] is not None:
                attributes.append((f"ringtrace.{name}", int(capture[name])))
        if capture["query"]:
            attributes.append(("ringtrace.query", orjson.dumps(capture["query"]).decode()))
        body = b"".join(
            pb.message(
                ATTRIBUTE,
                pb.string(ATTRIBUTE_KEY, key)
                + (pb.string(ATTRIBUTE_STRING_VALUE, value) if isinstance(value, str) else pb.uint(LONG_VALUE, value)),
            )
            for key, value in attributes
        )
        return trace_packet(pb.message(TRACE_ATTRIBUTES, body))

    # -- events ------------------------------------------------------------------------------------------------------

    def add(self, process: ProcessView, track: TrackInfo, events: list[Shown]) -> None:
        """Events of ``track`` for the next chunk (with the descriptors they need)."""
        if self._stacks.full and not self._timed and not self._samples:  # (memory: tables bounded per sequence)
            self._new_sequence()
        on_track = TRACK_UUID + pb.varint(self._tracks.track_uuid(process, track))
        self._shown_events += len(events)
        by_phase = self._by_phase
        for index, event in enumerate(events):
            if not index & 255:
                let_the_loop_in()
            add_event = by_phase.get(event[0])
            if add_event is not None:  # (a phase it does not show yet, as samples: left out)
                add_event(process, track, on_track, event)

    def _slice(self, process: ProcessView, track: TrackInfo, on_track: bytes, event: Shown) -> None:
        """A slice ("X"), or one never ended ("B"): a BEGIN, and an END where it ended."""
        phase, name, wall_ns, dur_ns, args, category, _ = event
        timed = self._timed
        arrival = len(timed)
        named = self._names.known.get(name) or self._names.field(name, self._new_entries)
        begin = TYPE_SLICE_BEGIN + on_track + named
        if category:  # a traced call's ("call")
            begin += self._category(category)
        if args:
            begin += self._annotations(args)
            if phase == "X" and ("kind" in args or "links" in args):
                begin += flow_fields(args)
        if phase == "B":  # never ended
            timed.append((wall_ns, _BEGINS, -_MAX_TIMESTAMP, arrival, begin))
        elif dur_ns > 0:
            end_ns = wall_ns + dur_ns
            timed.append((wall_ns, _BEGINS, -end_ns, arrival, begin))
            timed.append((end_ns, _ENDS, -wall_ns, arrival + 1, TYPE_SLICE_END + on_track + named))
        else:
            timed.append((wall_ns, _POINTS, 0, arrival, begin))
            timed.append((wall_ns, _ZERO_ENDS, 0, arrival + 1, TYPE_SLICE_END + on_track + named))

    def _instant(self, process: ProcessView, track: TrackInfo, on_track: bytes, event: Shown) -> None:
        """An instant; a message (an instant with a category) is named by its rendered text: its own, not
        interned."""
        _, name, wall_ns, _, args, category, priority = event
        if category:
            named = pb.string(NAME, name)
            if category not in NOT_MESSAGES:  # a message: its kind's category and priority among its args
                args = message_args(category, priority, args)
        else:
            named = self._names.known.get(name) or self._names.field(name, self._new_entries)
        packet = TYPE_INSTANT + on_track + named + self._category(category) + self._annotations(args)
        self._timed.append((wall_ns, _POINTS, 0, len(self._timed), packet))

    def _counter(self, process: ProcessView, track: TrackInfo, on_track: bytes, event: Shown) -> None:
        """A counter's values, each on the counter track of its name (and key, but for ``value``) under ``track``."""
        _, name, wall_ns, _, args, _, _ = event
        timed = self._timed
        for key, value in (args or {}).items():
            value_field = counter_value(value)
            if value_field is not None:
                counter = self._tracks.counter_uuid(process, track, counter_name(name, key))
                packet = TYPE_COUNTER + TRACK_UUID + pb.varint(counter) + value_field
                timed.append((wall_ns, _POINTS, 0, len(timed), packet))

    def _async(self, process: ProcessView, track: TrackInfo, on_track: bytes, event: Shown) -> None:
        """An async slice's begin ("b") or end ("e"), on the track of its name and id."""
        phase, name, wall_ns, _, args, category, async_id = event
        async_track = TRACK_UUID + pb.varint(self._tracks.async_uuid(process, name, async_id))
        kind = TYPE_SLICE_BEGIN if phase == "b" else TYPE_SLICE_END
        packet = kind + async_track + self._names.field(name, self._new_entries) + self._category(category)
        packet += self._annotations(args)  # an end's args add to its slice's
        if phase == "b" and args and ("kind" in args or "links" in args):
            packet += flow_fields(args)
        self._timed.append((wall_ns, _BEGINS if phase == "b" else _ENDS, 0, len(self._timed), packet))

    def _sample(self, process: ProcessView, track: TrackInfo, on_track: bytes, event: Shown) -> None:
        """A sample of the thread's stack: a ``PerfSample`` of its pid and tid (those of its thread's track)."""
        _, _, wall_ns, _, args, _, _ = event
        pid, tid = self._tracks.thread_ids(process, track)
        self._samples.append((wall_ns, self._stacks.sample(pid, tid, sample_stack(args), self._new_entries)))

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
                named = interned.field(key if type(key) is str else as_text(key), self._new_entries)
            annotation = named + annotation_value(value, 0)
            size = len(annotation)
            start = _SMALL_ANNOTATIONS[size] if size < 128 else DEBUG_ANNOTATIONS + pb.varint(size)
            parts.append(start + annotation)
        return b"".join(parts)


def _string(tables: StreamTables, string_id: int) -> str:
    """A name by its string id, as the event walk names it (``StreamTables.rows``)."""
    text = tables.strings.get(string_id)
    return text if text is not None else f"<unknown string {string_id}>"
