"""Snapshots as Chrome trace event JSON (object form), as a stream of chunks, and ``json_bytes``: JSON of what a
frame decoded to. Snapshot files (``format=native``) are ``native.py``, Perfetto's protobuf format ``perfetto.py``.

Pure functions: no asyncio, safe to run on a worker thread while ingest goes on. Chrome JSON writes the shown events of
each frame (``read/event_walk.py``) as one chunk, so memory stays at one segment's bytes and one frame's worth of
events however large the store; thread and process names come last, once every track is known. Where the C writer
is built (``chrome_frames.py``), it writes a frame's spans, instants and counters straight from the stored msgpack,
with the GIL released, and the Python walk the rest of the frame after them: within a frame, events are not in
arrival order (viewers order them by time). Timestamps: ``ts`` is microseconds since the collector's origin
(``otherData.clock_origin_wall_ns``: midnight UTC of the day before it started, fixed for its life, so that ``ts``
means the same in every snapshot), which keeps sub-microsecond precision that absolute epoch microseconds would lose
in a double. Events older than the origin would get a negative ``ts``, which Perfetto UI drops: they are counted in
``otherData.capture.events_before_origin``.

Samples (the sampler's stacks) are sample events (``"ph":"P"``, the Trace Event Format's) on their thread, each naming
its stack by its leaf in the document's ``stackFrames`` (id -> name, category, parent), which comes after the events:
the stacks are interned as the walk goes (``sample_stacks.py``), so memory holds the distinct stacks, never the
samples. A document with no sample has no ``stackFrames``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson
from ringtrace.collector.export.chrome_frames import ACCELERATED, FrameJson
from ringtrace.collector.export.flows import span_flows
from ringtrace.collector.export.sample_stacks import SAMPLE, StackNodes, sample_stack
from ringtrace.collector.read.event_walk import EventWalk, message_args
from ringtrace.collector.read.frame_walk import (
    ProcessView,
    Shown,
    SnapshotView,
    WalkedFrame,
    first_showing,
    process_label,
)
from ringtrace.collector.read.pairing import Pairing
from ringtrace.collector.read.selection import EVERYTHING, EventFilter
from ringtrace.wire.model import THREAD_TRACK, TrackInfo

__all__ = ["Popping", "chrome_trace_chunks", "json_bytes", "json_value"]


#: Open slices a pop carries to the next at most; the oldest past it are shown open-ended instead.
MAX_CARRIED: Final = 10_000


@dataclass
class Popping:
    """A pop's markers started and source activity opened but not ended: what the previous pop left open (read, not
    changed: it is copied on the worker thread), and what this one leaves open for the next (once it is done; at
    most ``MAX_CARRIED``)."""

    left_open: Pairing
    leaves_open: Pairing | None = None


def chrome_trace_chunks(
    view: SnapshotView, selected: EventFilter = EVERYTHING, popping: Popping | None = None, *, accelerated: bool = True
) -> Iterator[bytes]:
    """Yield the pieces of one Chrome trace JSON document holding the events ``selected``.

    ``popping``: a pop (``POST /pop``) rather than a snapshot: the markers and source activity the previous pop left
    open pair with their ends here, and what is still open at the end is not shown but left in ``popping`` for the
    next pop (but for the oldest past ``MAX_CARRIED``, shown open-ended).

    ``accelerated``: the C writer (``chrome_frames.py``) writes the common events where it is built; False writes
    every event through the Python walk (the same JSON, slower)."""
    walk = EventWalk(view, selected, copy.deepcopy(popping.left_open) if popping is not None else None)
    origin_ns = view.origin_ns
    fast = FrameJson(origin_ns, *walk.window) if accelerated and ACCELERATED and walk.by_frame else None
    counted = _Counted(StackNodes())
    yield b'{"traceEvents":['
    first = True
    for walked, _ in walk.walked():
        json = _frame_json(walk, walked, fast, origin_ns, counted)
        if json:
            yield json if first else b"," + json
            first = False
        else:
            yield b""  # (a frame with nothing selected: the reader may hand over its step all the same)
    opened = walk.still_open(MAX_CARRIED if popping is not None else None)
    if popping is not None:
        popping.leaves_open = walk.pairing.carried()
    closing = [_open_ended(process, track, event, origin_ns) for process, track, event in opened]
    closing += _metadata_events(view, walk)
    if closing:
        chunk = json_bytes(closing)[1:-1]
        yield chunk if first else b"," + chunk
    shown_events = counted.shown_events + len(opened)
    capture = {**walk.capture(), "events_before_origin": counted.before_origin, "shown_events": shown_events}
    stacks = counted.stacks
    if stacks.cut_stacks:
        capture["cut_sample_stacks"] = stacks.cut_stacks
    other = {**view.other, "clock_origin_wall_ns": origin_ns, **walk.report(), "capture": capture}
    yield b"]"
    if stacks.nodes:
        yield from _stack_frames(stacks)
    yield b',"displayTimeUnit":"ns","otherData":' + orjson.dumps(other) + b"}"


@dataclass(slots=True)
class _Counted:
    """What the document's ``capture`` counts of the events written, and the stacks its samples name."""

    stacks: StackNodes
    before_origin: int = 0
    shown_events: int = 0


#: Stack frames written in one chunk at most.
_FRAMES_PER_CHUNK: Final = 4096


def _stack_frames(stacks: StackNodes) -> Iterator[bytes]:
    """The document's ``stackFrames`` (its key and value, after the events), in chunks: id -> the frame's function
    (``name``), its file and line (``category``), and its caller's id (``parent``, but for a stack's root)."""
    nodes = stacks.nodes
    for start in range(0, len(nodes), _FRAMES_PER_CHUNK):
        entries = {}
        for node_id, (parent, (function, file, line)) in enumerate(nodes[start : start + _FRAMES_PER_CHUNK], start + 1):
            entry = {"name": function, "category": f"{file}:{line}"}
            if parent:
                entry["parent"] = str(parent)
            entries[str(node_id)] = entry
        chunk = orjson.dumps(entries)
        yield (b',"stackFrames":' + chunk[:-1]) if start == 0 else (b"," + chunk[1:-1])
    yield b"}"


def _frame_json(
    walk: EventWalk, walked: WalkedFrame, fast: FrameJson | None, origin_ns: int, counted: _Counted
) -> bytes:
    """The selected events of one frame as Chrome JSON objects joined by commas (b"" if none): the C writer's
    (``fast``) where it takes the frame, then the Python walk's of the rest (or of all of it)."""
    process, track, tables, frame = walked
    pid, tid = process.trace_pid, process.tid(track)
    taken = fast is not None and walk.takes_whole(process, track, frame)
    made = fast.events(tables, frame, process.clock_offset_ns, pid, tid) if fast is not None and taken else None
    if made is None:
        json, shown = b"", walk.shown(process, track, tables, frame)
    else:
        json = made.json
        shown = walk.shown(process, track, tables, frame, made.deferred) if made.deferred is not None else []
        if shown is None:
            return b""  # the frame as a whole cannot be decoded: counted as such, none of it shown
        counted.before_origin += made.before_origin
        counted.shown_events += made.shown
        if made.skipped:
            walk.count_undecodable(process, made.skipped)
    if not shown:
        return json
    events, before = _chrome_events(shown, pid, tid, origin_ns, counted.stacks)
    counted.before_origin += before
    counted.shown_events += len(shown)
    return json + b"," + events if json else events


def _chrome_events(shown: list[Shown], pid: int, tid: int, origin_ns: int, stacks: StackNodes) -> tuple[bytes, int]:
    """Events of one frame as Chrome JSON objects joined by commas, and how many are before the origin (samples'
    stacks interned in ``stacks``)."""
    before_origin = 0
    events: list[dict[str, Any]] = []
    append = events.append
    for phase, name, wall_ns, dur_ns, args, category, async_id in shown:
        ts = (wall_ns - origin_ns) / 1000
        event: dict[str, Any] = {"name": name, "ph": phase, "ts": ts, "pid": pid, "tid": tid}
        if phase == "X":
            event["dur"] = dur_ns / 1000
        elif phase == "i":
            event["s"] = "t"
            if category and category != "incident":  # a message: its kind's category and priority among its args
                args = message_args(category, async_id, args)
        elif phase == "C":  # a counter's track is its name and id: one per track it was recorded on (its tid)
            event["id"] = str(tid)
        elif phase == SAMPLE:  # named by its asyncio task, if one ran; its stack by its leaf in stackFrames
            event["name"] = name or "sample"
            event["cat"] = "sample"
            leaf = stacks.leaf(sample_stack(args))
            if leaf:
                event["sf"] = leaf
            event["weight"] = 1
            if wall_ns < origin_ns:
                before_origin += 1
            append(event)
            continue
        else:  # async: the id pairs a begin with its end, across threads
            event["id"] = async_id
        if args is not None:
            event["args"] = args
        if category:
            event["cat"] = category
        if (phase == "X" or phase == "b") and type(args) is dict and ("kind" in args or "links" in args):
            _bind_flow(event, args)
        if wall_ns < origin_ns:
            before_origin += 1
        append(event)
    return json_bytes(events)[1:-1], before_origin


def _bind_flow(event: dict[str, Any], args: dict[str, Any]) -> None:
    """A span's flow arrow (``flows.py``), as Chrome JSON binds one to a slice: its ``bind_id`` (hex, which Perfetto
    reads), leaving it (``flow_out``) or else arriving (``flow_in``). One per slice: a span with more (links) shows
    the first; the Perfetto format shows them all."""
    leaving, arriving = span_flows(args)
    if leaving is not None:
        event["bind_id"] = f"{leaving:016x}"
        event["flow_out"] = True
    elif arriving:
        event["bind_id"] = f"{arriving[0]:016x}"
        event["flow_in"] = True


def _open_ended(process: ProcessView, track: TrackInfo, event: Shown, origin_ns: int) -> dict[str, Any]:
    """A slice that never ended: a ``B`` with no ``E``, or an async ``b`` with no ``e`` (one that began before the
    window's ``since``)."""
    phase, name, wall_ns, _, args, category, async_id = event
    ts = (wall_ns - origin_ns) / 1000
    if phase == "b":
        begun = {"name": name, "ph": "b", "ts": ts, "pid": process.trace_pid, "tid": process.tid(track)}
        return {**begun, "id": async_id, **({"args": args} if args is not None else {}), "cat": category}
    return {"name": name, "ph": "B", "ts": ts, "pid": process.trace_pid, "tid": process.tid(track), "args": args}


def json_bytes(value: Any) -> bytes:
    """JSON for what a frame decoded to: bytes as hex (as Chrome JSON and Perfetto show them), map keys of any type
    msgpack allows as text, anything else JSON has no type for as its repr."""
    try:
        return orjson.dumps(value, default=json_value)
    except TypeError:  # a map key that is not a str: the slow path rebuilds the maps
        return orjson.dumps(_jsonable(value), default=json_value)


def json_value(value: object) -> object:
    """What JSON holds of a value it has no type for: bytes as hex, anything else as its repr."""
    if isinstance(value, bytes):
        return value.hex()
    return repr(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(json_value(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _metadata_events(view: SnapshotView, walk: EventWalk) -> list[dict[str, Any]]:
    """Names and order: processes in the order they first connected (those that show one pid, OTLP data of a
    ringtrace client's process, under the first one selected's name); in each, threads in the order they were
    declared, each followed by its task lanes, then sources and counter tracks."""
    events: list[dict[str, Any]] = []
    tracks = walk.tracks
    first = first_showing(walk.processes)
    for pid in sorted({view.processes[uid].trace_pid for uid, _ in tracks}, key=lambda pid: first[pid].uid):
        process = first[pid]
        uid = process.uid
        label = process_label(process)
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}})
        events.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": process.host}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": uid}})
    order = sorted(tracks.items(), key=lambda item: (item[0][0], _track_order(item[1])))
    for rank, ((uid, track_id), stored_track) in enumerate(order):
        process = view.processes[uid]
        track = process.tracks.get(track_id, stored_track)  # the latest name, or the one of an ended track
        pid, tid = process.trace_pid, process.tid(track)
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track.name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": rank}})
    return events


def _track_order(track: TrackInfo) -> tuple[int, int, int]:
    if track.kind == THREAD_TRACK:
        return 0, track.track_id, 0
    if track.parent:  # a task lane, after its thread
        return 0, track.parent, track.track_id
    return 1, track.track_id, 0
