"""Stored segments to Chrome trace event JSON (object form), as a stream of chunks.

Pure functions: no asyncio, safe to run on a worker thread while ingest goes on. Segments are read oldest first, each
with its own session decoder (a segment holds the session frames its events need); within a segment frames come in
the order they arrived. Each frame is decoded and written as one chunk, so memory stays at one segment's bytes and
one frame's worth of events however large the store. Thread and process names come last, once every track is known.
Timestamps: monotonic ns plus the process's clock offset gives wall-clock ns; ``ts`` is microseconds since the
collector's origin (``otherData.clock_origin_wall_ns``: midnight UTC of the day before it started, fixed for its life,
so that ``ts`` means the same in every snapshot), which keeps sub-microsecond precision that absolute epoch
microseconds would lose in a double. Events older than the origin would get a negative ``ts``, which Perfetto UI drops:
they are counted in ``otherData.capture.events_before_origin``.

A filter (``query.py``) is applied from the coarsest level down: processes, then segments by their index (a segment
with no frame in the time window is not decoded), then frames by their header (track, times), then events.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import orjson
from ringtrace.client.errors import ProtocolError
from ringtrace.client.messages import render
from ringtrace.client.model import THREAD_TRACK, TrackInfo
from ringtrace.client.protocol import (
    MAX_MAX_FRAME_BYTES,
    Events,
    Frame,
    Hello,
    KindSpec,
    Schema,
    Stats,
    Strings,
    Track,
    encode,
    preamble,
    unpack_columns,
)
from ringtrace.client.session import Limits, SessionDecoder, StreamTables, typed_args

from .query import EVERYTHING, EventFilter, category_of
from .sessions import ProcessRecord
from .slices import Pairing
from .store import Counts, SegmentView, StoreSnapshot

__all__ = [
    "ProcessView",
    "Row",
    "Selection",
    "SnapshotView",
    "chrome_trace_chunks",
    "frame_rows",
    "native_chunks",
    "selected_rows",
]

log = logging.getLogger("ringtrace.collector.export")

_PHASES = {"span": "X", "instant": "i", "counter": "C", "async_begin": "b", "async_end": "e"}
#: Shapes whose events pair up across frames (``slices.py``).
_PAIRED = frozenset({"marker_start", "marker_end", "source_open", "source_close"})
#: What a snapshot file keeps of a segment besides its EVENTS frames.
_SESSION_FRAMES = (Hello, Schema, Strings, Track, Stats)
_PREAMBLE = preamble()
#: Totals are capped here: orjson (and many JSON readers) take nothing wider than 64 bits.
_MAX_JSON_INT = 2**63 - 1
#: Tracks that are not OS threads (asyncio task lanes, sources) get tids from here up: above any real thread id,
#: within the 32 bits viewers keep.
_SYNTHETIC_TID_BASE = 2**31


@dataclass(frozen=True)
class ProcessView:
    """What export needs of a process, copied on the event loop so another thread may read it."""

    uid: int
    trace_pid: int
    pid: int
    host: str
    name: str
    clock_offset_ns: int
    client_stats: Stats
    tracks: dict[int, TrackInfo]

    @classmethod
    def of(cls, process: ProcessRecord) -> ProcessView:
        return cls(
            process.uid,
            process.trace_pid,
            process.pid,
            process.host,
            process.name,
            process.clock_offset_ns,
            process.reported_stats,
            dict(process.tracks),
        )

    @staticmethod
    def tid(track: TrackInfo) -> int:
        """The Chrome ``tid`` of a track: the OS thread id for a thread, a synthetic one above them otherwise."""
        if track.kind == THREAD_TRACK:
            return int(track.thread_id)
        return int(_SYNTHETIC_TID_BASE + track.track_id)


@dataclass
class SnapshotView:
    """Everything one snapshot reads: stored frames, process facts, loss counters, all taken at one instant."""

    frames: StoreSnapshot
    processes: dict[int, ProcessView]
    #: (process uid, track id) -> what the store received and lost of it.
    counts: dict[tuple[int, int], Counts]
    other: dict[str, Any] = field(default_factory=dict)
    #: What decoding a stored segment may meet (what ingest allowed).
    limits: Limits = field(default_factory=Limits)
    #: Counts of processes forgotten since the collector started (they add to the totals).
    forgotten: Counts = field(default_factory=Counts)
    forgotten_client: Stats = field(default_factory=lambda: Stats(0, 0))
    #: Wall-clock ns that ``ts`` 0 stands for: fixed for the life of the collector.
    origin_ns: int = 0


def chrome_trace_chunks(view: SnapshotView, selected: EventFilter = EVERYTHING) -> Iterator[bytes]:
    """Yield the pieces of one Chrome trace JSON document holding the events ``selected``."""
    walk, selection = _prepared(view, selected)
    pairing = Pairing()
    before_origin = 0
    yield b'{"traceEvents":['
    first = True
    for process, track, tables, frame in walk.frames():
        try:
            events, skipped = _frame_events(process, track, tables, frame, view.origin_ns, pairing, selection)
            chunk = _dumps(events)[1:-1] if events else b""
            if frame.first_ts_ns + process.clock_offset_ns < view.origin_ns:
                before_origin += sum(1 for event in events if event["ts"] < 0)
        except Exception as exc:  # a bad frame costs its own events, not the validity of the document
            skipped, chunk = frame.count, b""
            _log_once(process, frame.count, exc)
        if skipped:
            walk.undecodable[process.uid] = walk.undecodable.get(process.uid, 0) + skipped
        if chunk:
            yield chunk if first else b"," + chunk
            first = False
    closing = pairing.still_open() + _metadata_events(view, walk.tracks)
    if closing:
        chunk = _dumps(closing)[1:-1]
        yield chunk if first else b"," + chunk
    other = _other_data(view, walk, pairing)
    other["capture"] = {
        **walk.window(),
        "events_before_origin": before_origin,
        "query": selected.describe(),
    }
    yield b'],"displayTimeUnit":"ns","otherData":' + orjson.dumps(other) + b"}"


_Frame = tuple[ProcessView, TrackInfo, StreamTables, Events]


@dataclass(frozen=True, slots=True)
class Row:
    """One selected event as a text dump shows it."""

    process: ProcessView
    track: str
    category: str
    #: A message's priority; "" for other events.
    priority: str
    #: As a snapshot shows it: a message's rendered text.
    name: str
    wall_ns: int
    dur_ns: int
    args: Any
    #: The kind's name: the category, or the member of a built-in family (``source_open``, ``marker_end`` ...).
    kind: str


def selected_rows(view: SnapshotView, selected: EventFilter = EVERYTHING) -> Iterator[Row]:
    """The events ``selected``, in the order they arrived per segment (oldest segment first), decoded for a reader:
    typed events' fields by name, messages rendered. Events whose kind was never declared are left out."""
    walk, selection = _prepared(view, selected)
    for process, track, tables, frame in walk.frames():
        yield from frame_rows(process, track, tables, frame, selection)


def frame_rows(
    process: ProcessView, track: TrackInfo, tables: StreamTables, frame: Events, selection: Selection | None = None
) -> Iterator[Row]:
    """The events of one frame that ``selection`` takes, decoded for a reader (none if the frame cannot be)."""
    track_name = process.tracks.get(track.track_id, track).name
    offset_ns = process.clock_offset_ns
    try:
        rows = list(tables.rows(frame))
    except ProtocolError:
        return
    for kind, name, ts_ns, dur_ns, args in rows:
        if kind is None:
            continue
        shown_name, shown_args = name, args
        if kind.shape == "message" and isinstance(args, list):
            shown_name, shown_args = render(kind, args)
        elif kind.fields and isinstance(args, list):
            shown_args = typed_args(kind, args, tables.kinds)
        if selection is not None and not selection.event(kind, shown_name, ts_ns + offset_ns):
            continue
        priority = kind.priority if kind.shape == "message" else ""
        wall_ns = ts_ns + offset_ns
        yield Row(process, track_name, category_of(kind), priority, shown_name, wall_ns, dur_ns, shown_args, kind.name)


def native_chunks(view: SnapshotView, selected: EventFilter = EVERYTHING) -> Iterator[bytes]:
    """Yield a snapshot file (``client/PROTOCOL.md``, "Snapshot file"): a stream per stored segment that holds
    selected events, end to end. Each is the segment's session frames and its EVENTS frames that hold selected
    events, byte for byte, or re-encoded with only those where a filter chooses among a frame's events; the frames a
    file has no use for (FLUSH, FLUSH_ACK, GOODBYE, CHECKSUM) are left out."""
    walk, selection = _prepared(view, selected)
    for process, segment in walk.segments():
        stream = [_PREAMBLE]
        kept = decoded = 0
        try:
            for decoder, frame in _segment_stream(segment, view.limits):
                if isinstance(frame, Events):
                    decoded += frame.count
                    track = decoder.tables.tracks[frame.track_id]
                    if not walk.wanted(process, track, frame):
                        continue
                    if selection is None:
                        stream.append(bytes(decoder.last_frame()))
                    else:
                        part = _selected_part(process, decoder, frame, selection)
                        if part is None:
                            continue
                        stream.append(part)
                    kept += 1
                elif isinstance(frame, _SESSION_FRAMES):
                    stream.append(bytes(decoder.last_frame()))
        except ProtocolError as exc:  # what came before the broken frame is kept
            walk.unreadable(process, segment, decoded, exc)
        if kept:
            yield b"".join(stream)


def _selected_part(process: ProcessView, decoder: SessionDecoder, frame: Events, selection: Selection) -> bytes | None:
    """The frame, or one with only its selected events (None if it has none)."""
    tables = decoder.tables
    offset_ns = process.clock_offset_ns
    try:
        rows = list(tables.rows(frame))
    except ProtocolError:
        return bytes(decoder.last_frame())  # stored as it came: a reader counts it as undecodable, as we would
    keep = [
        i
        for i, (kind, name, ts_ns, _, args) in enumerate(rows)
        if selection.event(kind, _shown_name(kind, name, args) if selection.filter.name else name, ts_ns + offset_ns)
    ]
    if len(keep) == frame.count:
        return bytes(decoder.last_frame())
    if not keep:
        return None
    columns = unpack_columns(frame, tables.columns)
    kept = [[column[i] for i in keep] for column in columns]
    starts = [rows[i][2] for i in keep]
    first_ns = min(starts)
    kept[tables.columns.index("ts")] = [start - first_ns for start in starts]
    last_ns = max(start + rows[i][3] for start, i in zip(starts, keep, strict=True))
    payload = msgpack.packb(kept)
    return encode(Events(frame.track_id, len(keep), first_ns, last_ns, payload, frame.flags), MAX_MAX_FRAME_BYTES)


class _Walk:
    """The stored EVENTS frames a filter may select, oldest segment first, in the order they arrived within each;
    what it met on the way: the tracks of the frames it gave, and events that cannot be decoded.

    With ``newest_from_ns`` (a limit's cutoff) only frames that may hold events starting then or later."""

    def __init__(self, view: SnapshotView, selected: EventFilter, newest_from_ns: int | None = None) -> None:
        self.view = view
        self.selected = selected
        self.newest_from_ns = newest_from_ns
        self.by_time = selected.since_ns is not None or selected.until_ns is not None or newest_from_ns is not None
        self.processes = {
            uid: p for uid, p in view.processes.items() if selected.process_matches(p.pid, p.trace_pid, p.name, p.host)
        }
        self.tracks: dict[tuple[int, int], TrackInfo] = {}
        self.undecodable: dict[int, int] = {}
        self.first_ns: int | None = None
        self.last_ns: int | None = None

    def _in_time(self, first_ns: int, last_ns: int) -> bool:
        newest_from = self.newest_from_ns
        return self.selected.overlaps(first_ns, last_ns) and (newest_from is None or last_ns >= newest_from)

    def segments(self) -> Iterator[tuple[ProcessView, SegmentView]]:
        """The segments of the processes selected whose index holds a frame in the time window."""
        for segment in self.view.frames.segments:
            process = self.processes.get(segment.owner)
            if process is None:
                continue
            offset = process.clock_offset_ns
            if self.by_time and not any(
                self._in_time(first + offset, last + offset) for *_, first, last in segment.index()
            ):
                continue  # nothing of it in the window: not even decoded
            yield process, segment

    def wanted(self, process: ProcessView, track: TrackInfo, frame: Events) -> bool:
        """Whether the frame may hold selected events (by its track and times); if so it counts as read."""
        offset = process.clock_offset_ns
        first, last = frame.first_ts_ns + offset, frame.last_ts_ns + offset
        if self.by_time and not self._in_time(first, last):
            return False
        selected = self.selected
        if selected.track is not None and not selected.track_matches(process.tracks.get(track.track_id, track).name):
            return False
        self.tracks[(process.uid, track.track_id)] = track
        self.first_ns = first if self.first_ns is None else min(self.first_ns, first)
        self.last_ns = last if self.last_ns is None else max(self.last_ns, last)
        return True

    def frames(self) -> Iterator[_Frame]:
        """The frames that may hold selected events, with what decodes them."""
        for process, segment in self.segments():
            decoded = 0
            try:
                for decoder, frame in _segment_stream(segment, self.view.limits):
                    if isinstance(frame, Events):
                        decoded += frame.count
                        track = decoder.tables.tracks[frame.track_id]
                        if self.wanted(process, track, frame):
                            yield process, track, decoder.tables, frame
            except ProtocolError as exc:  # the segment's stream itself is broken: the rest of it cannot be read
                self.unreadable(process, segment, decoded, exc)

    def unreadable(self, process: ProcessView, segment: SegmentView, decoded: int, exc: ProtocolError) -> None:
        """A segment's stream broke after ``decoded`` of its events: the others are undecodable."""
        lost = sum(count for _, _, _, count, _, _ in segment.index()) - decoded
        self.undecodable[process.uid] = self.undecodable.get(process.uid, 0) + lost
        _log_once(process, lost, exc)

    def window(self) -> dict[str, int | None]:
        """The wall-clock span of the frames given (their events' starts lie within)."""
        return {"first_frame_wall_ns": self.first_ns, "last_frame_wall_ns": self.last_ns}


def _prepared(view: SnapshotView, selected: EventFilter) -> tuple[_Walk, Selection | None]:
    """The walk over what ``selected`` may hold, and the selection of its events (None: every event of the frames
    walked), after a first pass that finds the cutoff of a ``limit``."""
    cutoff = _limit_cutoff(_Walk(view, selected), selected.limit) if selected.limit is not None else None
    walk = _Walk(view, selected, cutoff[0] if cutoff is not None else None)
    return walk, Selection(selected, cutoff) if selected.by_event or cutoff is not None else None


class Selection:
    """An ``EventFilter`` applied event by event, with the cutoff of its ``limit``: events that start at the cutoff
    are taken up to ``ties`` of them, the first arrived."""

    __slots__ = ("cutoff_ns", "filter", "ties")

    def __init__(self, selected: EventFilter, cutoff: tuple[int, int] | None = None) -> None:
        self.filter = selected
        self.cutoff_ns: int | None = cutoff[0] if cutoff is not None else None
        self.ties = cutoff[1] if cutoff is not None else 0

    def event(self, kind: KindSpec | None, name: str, wall_ns: int) -> bool:
        selected = self.filter
        if not selected.in_window(wall_ns):
            return False
        if kind is not None and not selected.kind_matches(kind):
            return False
        if selected.name is not None and not selected.name(name):
            return False
        cutoff = self.cutoff_ns
        if cutoff is not None and wall_ns <= cutoff:
            if wall_ns < cutoff or self.ties == 0:
                return False
            self.ties -= 1
        return True


def _limit_cutoff(walk: _Walk, limit: int) -> tuple[int, int] | None:
    """Where the newest ``limit`` selected events start: (the oldest start kept, how many kept start then); None
    when fewer are selected. Frames wholly older than the ``limit``-th newest start seen so far are not decoded."""
    selection = Selection(walk.selected)
    newest: list[int] = []  # a min-heap of the newest starts seen
    for process, _, tables, frame in walk.frames():
        offset = process.clock_offset_ns
        if len(newest) == limit and frame.last_ts_ns + offset < newest[0]:
            continue
        try:
            rows = list(tables.rows(frame))
        except Exception:  # counted as undecodable by the export pass
            continue
        for kind, name, ts_ns, _, args in rows:
            if kind is None or not _shown(kind):
                continue
            wall_ns = ts_ns + offset
            shown_name = _shown_name(kind, name, args) if walk.selected.name is not None else name
            if not selection.event(kind, shown_name, wall_ns):
                continue
            if len(newest) < limit:
                heapq.heappush(newest, wall_ns)
            elif wall_ns > newest[0]:
                heapq.heapreplace(newest, wall_ns)
    if len(newest) < limit:
        return None
    cutoff = newest[0]
    return cutoff, sum(1 for ts in newest if ts == cutoff)


def _shown(kind: KindSpec) -> bool:
    """Whether events of ``kind`` appear in a snapshot (a shape this collector knows how to show)."""
    return kind.shape in _PHASES or kind.shape in _PAIRED or kind.shape == "message"


def _shown_name(kind: KindSpec | None, name: str, args: Any) -> str:
    """An event's name as a snapshot shows it: a message's rendered text."""
    if kind is not None and kind.shape == "message" and isinstance(args, list):
        return render(kind, args)[0]
    return name


def _segment_stream(segment: SegmentView, limits: Limits) -> Iterator[tuple[SessionDecoder, Frame]]:
    """Each frame of a segment, with the decoder that read it (a fresh one per segment: it decodes alone)."""
    decoder = SessionDecoder(limits, live=False)
    decoder.receive_data(segment.data())
    decoder.receive_data(b"")
    for frame in decoder:
        yield decoder, frame


_logged_uids: set[int] = set()


def _log_once(process: ProcessView, events: int, exc: Exception) -> None:
    """One log line per process: why its events cannot be exported (they are counted in every snapshot)."""
    if process.uid in _logged_uids:
        return
    _logged_uids.add(process.uid)
    why = str(exc) if isinstance(exc, ProtocolError) else f"{type(exc).__name__}: {exc}"
    log.warning(
        "cannot export %d events of %s (pid %d): %s; counted as undecodable_events (logged once per process)",
        events,
        process.name,
        process.pid,
        why,
    )


def _dumps(events: list[dict[str, Any]]) -> bytes:
    """JSON for events whose args hold whatever msgpack carried (bytes, say, or non-str keys)."""
    try:
        return orjson.dumps(events, default=_json_value)
    except TypeError:  # a dict key that is not a str: the slow path rebuilds the args
        events = [{**e, "args": _jsonable(e["args"])} if "args" in e else e for e in events]
        return orjson.dumps(events, default=_json_value)


def _json_value(value: object) -> object:
    if isinstance(value, bytes):
        return value.hex()
    return repr(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(_json_value(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _metadata_events(view: SnapshotView, tracks: dict[tuple[int, int], TrackInfo]) -> list[dict[str, Any]]:
    """Names and order: processes in the order they first connected; in each, threads in the order they were
    declared, each followed by its task lanes, then sources and counter tracks."""
    events: list[dict[str, Any]] = []
    for uid in sorted({uid for uid, _ in tracks}):
        process = view.processes[uid]
        label = process.name if process.trace_pid == process.pid else f"{process.name} (pid {process.pid})"
        pid = process.trace_pid
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


def _frame_events(
    process: ProcessView,
    track: TrackInfo,
    tables: StreamTables,
    frame: Events,
    origin_ns: int,
    pairing: Pairing,
    selection: Selection | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """The Chrome events of one stored frame (those ``selection`` takes), and how many of its events could not be
    shown."""
    offset_ns = process.clock_offset_ns
    base_ns = offset_ns - origin_ns
    pid, tid = process.trace_pid, process.tid(track)
    events = []
    skipped = 0
    for kind, name, ts_ns, dur_ns, args in tables.rows(frame):
        if kind is None or not _shown(kind):
            skipped += 1  # a kind never declared, or a shape this collector cannot show
            continue
        rendered = render(kind, args) if kind.shape == "message" and isinstance(args, list) else None
        shown_name = name if rendered is None else rendered[0]
        if selection is not None and not selection.event(kind, shown_name, ts_ns + offset_ns):
            continue
        ts = (ts_ns + base_ns) / 1000
        if kind.shape in _PAIRED:
            track_key = (process.uid, track.track_id)  # not (pid, tid): thread ids are reused
            paired = (
                pairing.source(kind.shape, name, ts, pid, tid, track_key)
                if kind.shape.startswith("source")
                else pairing.marker(kind.shape, name, ts, pid, tid, args if isinstance(args, dict) else None, track_key)
            )
            if paired is not None:
                events.append(paired)
            continue
        if kind.shape == "message":
            if rendered is None:
                skipped += 1  # a message's values are a list
                continue
            text, values = rendered
            message_args = {"category": kind.name, "priority": kind.priority, **values}
            events.append({"name": text, "cat": kind.name, "ph": "i", "s": "t", "ts": ts, "pid": pid, "tid": tid,
                           "args": message_args})  # fmt: skip
            continue
        phase = _PHASES[kind.shape]
        event = {"name": name, "ph": phase, "ts": ts, "pid": pid, "tid": tid}
        if args is not None:
            if isinstance(args, dict):
                event["args"] = args
            elif kind.fields and isinstance(args, list):  # a typed kind: values in the order of its fields
                event["args"] = typed_args(kind, args, tables.kinds)
            else:
                event["args"] = {"value": args}
        if phase == "X":
            event["dur"] = dur_ns / 1000
        elif phase == "i":
            event["s"] = "t"
        elif phase in "be":  # async: the id pairs a begin with its end, across threads
            async_args = event.get("args")
            event["cat"] = "async"
            event["id"] = str(async_args.pop("id", "")) if isinstance(async_args, dict) else ""
        events.append(event)
    return events, skipped


def _other_data(view: SnapshotView, walk: _Walk, pairing: Pairing) -> dict[str, Any]:
    undecodable, stored_tracks = walk.undecodable, walk.tracks
    per_process: dict[int, Counts] = {}
    per_track: dict[int, list[dict[str, Any]]] = {}
    for (uid, track_id), counts in sorted(view.counts.items()):
        per_process.setdefault(uid, Counts()).add(counts)
        process = view.processes.get(uid)
        # The latest name of a live track, else the name its stored frames carry (an ended track, an asyncio lane).
        track = (process.tracks.get(track_id) if process is not None else None) or stored_tracks.get((uid, track_id))
        per_track.setdefault(uid, []).append(
            {"track": track_id, "name": track.name if track else None, **_store_counts(counts)}
        )
    processes: list[dict[str, Any]] = [
        {
            "pid": p.trace_pid,
            "os_pid": p.pid,
            "host": p.host,
            "process_name": p.name,
            **_store_counts(per_process.get(p.uid, Counts())),
            "client_dropped_events": p.client_stats.dropped_events,
            "label_overflow_events": p.client_stats.label_overflow_events,
            "clipped_args": p.client_stats.clipped_args,
            "rejected_events": p.client_stats.rejected_events,
            "undecodable_events": undecodable.get(p.uid, 0),
            "unmatched_marker_ends": pairing.unmatched_marker_ends.get(p.trace_pid, 0),
            "source_anomalies": pairing.source_anomalies.get(p.trace_pid, 0),
            "tracks": per_track.get(p.uid, []),
        }
        for p in sorted(walk.processes.values(), key=lambda p: p.uid)
    ]
    forgotten = {**_store_counts(view.forgotten), **_client_counts(view.forgotten_client)}

    def total(name: str) -> int:
        return min(sum(int(p[name]) for p in processes) + forgotten.get(name, 0), _MAX_JSON_INT)

    return {
        **view.other,
        "clock_origin_wall_ns": view.origin_ns,
        **{name: total(name) for name in _TOTALS},
        "processes": processes,
    }


def _store_counts(counts: Counts) -> dict[str, int]:
    return {name: min(value, _MAX_JSON_INT) for name, value in counts.as_dict().items()}


def _client_counts(stats: Stats) -> dict[str, int]:
    return {
        "client_dropped_events": stats.dropped_events,
        "label_overflow_events": stats.label_overflow_events,
        "clipped_args": stats.clipped_args,
        "rejected_events": stats.rejected_events,
    }


#: Totals over every process, forgotten ones included.
_TOTALS = (
    "received_events",
    "received_bytes",
    "stored_events",
    "stored_bytes",
    "overwritten_events",
    "overwritten_bytes",
    "capped_events",
    "capped_bytes",
    "discarded_events",
    "discarded_bytes",
    "cleared_events",
    "cleared_bytes",
    "client_dropped_events",
    "label_overflow_events",
    "clipped_args",
    "rejected_events",
    "undecodable_events",
    "unmatched_marker_ends",
    "source_anomalies",
)
