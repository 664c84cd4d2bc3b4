"""A Perfetto trace parsed with Perfetto's own protobuf definitions (the ``perfetto`` package's compiled
``perfetto_trace.proto``), and what a viewer makes of it: tracks, slices, instants, counter values, attributes.

Slices are built as Perfetto's trace processor builds them: events sorted by timestamp, file order kept among equal
ones; on each track a BEGIN opens a slice inside what is open, an END closes the innermost open slice of its name (of
any name, if it has none). Interned names are resolved per packet sequence, and each use is checked: the sequence was
cleared before, the packet says it needs incremental state. Samples (``PerfSample``) are resolved the same way: their
callstack, frames, function names and source paths interned on their sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

__all__ = ["CounterValue", "Instant", "PerfettoTrace", "Sample", "Slice", "Track", "pb"]

_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


@dataclass
class Track:
    uuid: int
    descriptor: Any
    #: "process", "thread", "counter" or "track" (anything else: a task lane, a source, an async slice's track).
    kind: str
    name: str
    pid: int | None
    parent: int


@dataclass
class Slice:
    track: int
    name: str
    start_ns: int
    #: None: never ended.
    end_ns: int | None
    depth: int
    args: dict[str, Any]
    categories: list[str]


@dataclass(frozen=True)
class Instant:
    track: int
    name: str
    ts_ns: int
    args: dict[str, Any]
    categories: tuple[str, ...]


@dataclass(frozen=True)
class CounterValue:
    track: int
    ts_ns: int
    value: float


@dataclass(frozen=True)
class Sample:
    ts_ns: int
    pid: int
    tid: int
    #: Root first: (function, file, line), each resolved through its sequence's interned data.
    stack: tuple[tuple[str, str, int], ...]
    #: The file its frames' mappings name (as older readers, which know no source path, show a frame).
    mappings: tuple[str, ...]


@dataclass
class _Interned:
    names: dict[int, str] = field(default_factory=dict)
    categories: dict[int, str] = field(default_factory=dict)
    annotation_names: dict[int, str] = field(default_factory=dict)
    function_names: dict[int, str] = field(default_factory=dict)
    source_paths: dict[int, str] = field(default_factory=dict)
    mapping_paths: dict[int, str] = field(default_factory=dict)
    mappings: dict[int, Any] = field(default_factory=dict)
    frames: dict[int, Any] = field(default_factory=dict)
    callstacks: dict[int, list[int]] = field(default_factory=dict)


class PerfettoTrace:
    def __init__(self, data: bytes) -> None:
        trace = pb.Trace()
        trace.ParseFromString(data)
        self.packets = list(trace.packet)
        self.tracks: dict[int, Track] = {}
        self.root: Any = None
        self.attributes: dict[str, int | str] = {}
        self.clock_snapshots: list[Any] = []
        self.slices: list[Slice] = []
        self.instants: list[Instant] = []
        self.counters: list[CounterValue] = []
        self.samples: list[Sample] = []
        #: (track, name, ts) of ENDs that closed nothing.
        self.unmatched_ends: list[tuple[int, str, int]] = []
        sequences: dict[int, _Interned] = {}
        events: list[tuple[int, int, Any, _Interned]] = []
        for order, packet in enumerate(self.packets):
            sequence = packet.trusted_packet_sequence_id
            assert sequence, "every packet names its sequence"
            if packet.sequence_flags & _CLEARED:
                sequences[sequence] = _Interned()
            if packet.HasField("interned_data"):
                assert sequence in sequences, "interned data on a sequence never cleared"
                self._intern(sequences[sequence], packet.interned_data)
            data = packet.WhichOneof("data")
            if data == "track_descriptor":
                self._describe(packet.track_descriptor)
            elif data == "track_event":
                interned = sequences.get(sequence, _Interned())
                if _uses_interning(packet.track_event):
                    assert sequence in sequences and packet.sequence_flags & _NEEDS, "interning without its flags"
                events.append((packet.timestamp, order, packet.track_event, interned))
            elif data == "perf_sample":
                assert sequence in sequences and packet.sequence_flags & _NEEDS, "a sample's stack without its flags"
                self.samples.append(_sample(packet.timestamp, packet.perf_sample, sequences[sequence]))
            elif data == "trace_attributes":
                for attribute in packet.trace_attributes.attribute:
                    self.attributes[attribute.key] = getattr(attribute, attribute.WhichOneof("value"))
            elif data == "clock_snapshot":
                self.clock_snapshots.append(packet.clock_snapshot)
        events.sort(key=lambda e: (e[0], e[1]))  # as the trace processor sorts: by time, then file order
        stacks: dict[int, list[Slice]] = {}
        for ts, _, event, interned in events:
            self._event(ts, event, interned, stacks)

    @staticmethod
    def _intern(interned: _Interned, data: Any) -> None:
        for entry in data.event_names:
            interned.names[entry.iid] = entry.name
        for entry in data.event_categories:
            interned.categories[entry.iid] = entry.name
        for entry in data.debug_annotation_names:
            interned.annotation_names[entry.iid] = entry.name
        for table, entries in (
            (interned.function_names, data.function_names),
            (interned.source_paths, data.source_paths),
            (interned.mapping_paths, data.mapping_paths),
        ):
            for entry in entries:
                table[entry.iid] = entry.str.decode()
        for entry in data.mappings:
            interned.mappings[entry.iid] = entry
        for entry in data.frames:
            interned.frames[entry.iid] = entry
        for entry in data.callstacks:
            interned.callstacks[entry.iid] = list(entry.frame_ids)

    def _describe(self, descriptor: Any) -> None:
        if descriptor.uuid == 0:
            self.root = descriptor
            return
        assert descriptor.uuid not in self.tracks or self.tracks[descriptor.uuid].descriptor == descriptor
        if descriptor.HasField("process"):
            kind, name, pid = "process", descriptor.process.process_name, descriptor.process.pid
        elif descriptor.HasField("thread"):
            kind, name, pid = "thread", descriptor.thread.thread_name, descriptor.thread.pid
        else:
            kind = "counter" if descriptor.HasField("counter") else "track"
            name, pid = descriptor.name, None
        self.tracks[descriptor.uuid] = Track(descriptor.uuid, descriptor, kind, name, pid, descriptor.parent_uuid)

    def _event(self, ts: int, event: Any, interned: _Interned, stacks: dict[int, list[Slice]]) -> None:
        track = event.track_uuid
        assert track in self.tracks, f"an event on track {track}, never described"
        name = event.name if event.HasField("name") else interned.names.get(event.name_iid, "")
        categories = [*event.categories, *(interned.categories[iid] for iid in event.category_iids)]
        args = {_annotation_name(a, interned): _annotation_value(a) for a in event.debug_annotations}
        if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stack = stacks.setdefault(track, [])
            opened = Slice(track, name, ts, None, len(stack), args, categories)
            stack.append(opened)
            self.slices.append(opened)
        elif event.type == pb.TrackEvent.TYPE_SLICE_END:
            stack = stacks.get(track, [])
            matching = [i for i, s in enumerate(stack) if not name or s.name == name]
            if not matching:
                self.unmatched_ends.append((track, name, ts))
                return
            closed = stack.pop(matching[-1])
            closed.end_ns = ts
            closed.args.update(args)
        elif event.type == pb.TrackEvent.TYPE_INSTANT:
            self.instants.append(Instant(track, name, ts, args, tuple(categories)))
        elif event.type == pb.TrackEvent.TYPE_COUNTER:
            assert self.tracks[track].kind == "counter"
            value = getattr(event, event.WhichOneof("counter_value_field"))
            self.counters.append(CounterValue(track, ts, value))
        else:
            raise AssertionError(f"an event of type {event.type}")

    def pid(self, uuid: int) -> int | None:
        """The pid a track belongs to (its own, or its parent's)."""
        track = self.tracks[uuid]
        return track.pid if track.pid is not None or not track.parent else self.pid(track.parent)

    def label(self, uuid: int) -> str:
        """What a viewer calls a track: a thread's name, a track's name."""
        return self.tracks[uuid].name


def _sample(ts_ns: int, sample: Any, interned: _Interned) -> Sample:
    """A sample with its stack resolved (every id it uses interned before it on its sequence)."""
    frames = [interned.frames[iid] for iid in interned.callstacks[sample.callstack_iid]] if sample.callstack_iid else []
    stack = tuple(
        (interned.function_names[f.function_name_id], interned.source_paths[f.source_path_iid], f.line_number)
        for f in frames
    )
    mappings = tuple(
        "/".join(interned.mapping_paths[iid] for iid in interned.mappings[f.mapping_id].path_string_ids) for f in frames
    )
    assert all(f.kind == pb.Frame.KIND_INTERPRETED for f in frames)
    return Sample(ts_ns, sample.pid, sample.tid, stack, mappings)


def _uses_interning(event: Any) -> bool:
    return bool(
        event.HasField("name_iid")
        or event.category_iids
        or any(a.HasField("name_iid") for a in event.debug_annotations)
    )


def _annotation_name(annotation: Any, interned: _Interned) -> str:
    return annotation.name if annotation.HasField("name") else interned.annotation_names[annotation.name_iid]


def _annotation_value(annotation: Any) -> Any:
    """A debug annotation's value, as Python: maps and lists nested, ``legacy_json_value`` as the text it holds."""
    if annotation.dict_entries:
        return {entry.name: _annotation_value(entry) for entry in annotation.dict_entries}
    if annotation.array_values:
        return [_annotation_value(item) for item in annotation.array_values]
    which = annotation.WhichOneof("value")
    assert which is not None, "an annotation without a value"
    if which == "legacy_json_value":
        return {"null": None, "{}": {}, "[]": []}[annotation.legacy_json_value]
    return getattr(annotation, which)
