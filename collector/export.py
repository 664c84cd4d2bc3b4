"""Stored segments to Chrome trace event JSON (object form), as a stream of chunks.

Pure functions: no asyncio, safe to run on a worker thread while ingest goes on. Segments are read oldest first, each
with its own session decoder (a segment holds the session frames its events need); within a segment frames come in
the order they arrived. Each frame is decoded and written as one chunk, so memory stays at one segment's bytes and
one frame's worth of events however large the store. Thread and process names come last, once every track is known.
Timestamps: monotonic ns plus the process's clock offset gives wall-clock ns; ``ts`` is microseconds since the
snapshot's earliest event (``otherData.clock_origin_wall_ns``), which keeps sub-microsecond precision that absolute
epoch microseconds would lose in a double.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from ringtrace.client.errors import ProtocolError
from ringtrace.client.messages import render
from ringtrace.client.model import THREAD_TRACK, TrackInfo
from ringtrace.client.protocol import Events, Stats
from ringtrace.client.session import Limits, SessionDecoder, StreamTables, typed_args

from .sessions import ProcessRecord
from .slices import Pairing
from .store import Counts, SegmentView, StoreSnapshot

__all__ = ["ProcessView", "SnapshotView", "chrome_trace_chunks"]

log = logging.getLogger("ringtrace.collector.export")

_PHASES = {"span": "X", "instant": "i", "counter": "C", "async_begin": "b", "async_end": "e"}
#: Shapes whose events pair up across frames (``slices.py``).
_PAIRED = frozenset({"marker_start", "marker_end", "source_open", "source_close"})
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


def chrome_trace_chunks(view: SnapshotView) -> Iterator[bytes]:
    """Yield the pieces of one Chrome trace JSON document."""
    segments = [segment for segment in view.frames.segments if segment.owner in view.processes]
    origin_ns = min(
        (first + view.processes[s.owner].clock_offset_ns for s in segments for *_, first, _ in s.index()), default=0
    )
    tracks: dict[tuple[int, int], TrackInfo] = {}
    undecodable: dict[int, int] = {}
    pairing = Pairing()
    yield b'{"traceEvents":['
    first = True
    for segment in segments:
        process = view.processes[segment.owner]
        decoded = 0
        try:
            for tables, frame in _segment_frames(segment, view.limits):
                decoded += frame.count
                track = tables.tracks[frame.track_id]
                tracks[(process.uid, track.track_id)] = track
                try:
                    events, skipped = _frame_events(process, track, tables, frame, origin_ns, pairing)
                    chunk = _dumps(events)[1:-1] if events else b""
                except Exception as exc:  # a bad frame costs its own events, not the validity of the document
                    skipped, chunk = frame.count, b""
                    _log_once(process, frame.count, exc)
                if skipped:
                    undecodable[process.uid] = undecodable.get(process.uid, 0) + skipped
                if chunk:
                    yield chunk if first else b"," + chunk
                    first = False
        except ProtocolError as exc:  # the segment's stream itself is broken: the rest of it cannot be read
            lost = sum(count for _, _, _, count, _, _ in segment.index()) - decoded
            undecodable[process.uid] = undecodable.get(process.uid, 0) + lost
            _log_once(process, lost, exc)
    closing = pairing.still_open() + _metadata_events(view, tracks)
    if closing:
        chunk = _dumps(closing)[1:-1]
        yield chunk if first else b"," + chunk
    other = _other_data(view, origin_ns, undecodable, pairing, tracks)
    yield b'],"displayTimeUnit":"ns","otherData":' + orjson.dumps(other) + b"}"


def _segment_frames(segment: SegmentView, limits: Limits) -> Iterator[tuple[StreamTables, Events]]:
    """Each EVENTS frame of a segment, with the tables that decode it (a fresh session decoder per segment)."""
    decoder = SessionDecoder(limits, live=False)
    decoder.receive_data(segment.data())
    decoder.receive_data(b"")
    for frame in decoder:
        if isinstance(frame, Events):
            yield decoder.tables, frame


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
    events: list[dict[str, Any]] = []
    for uid in sorted({uid for uid, _ in tracks}):
        process = view.processes[uid]
        label = process.name if process.trace_pid == process.pid else f"{process.name} (pid {process.pid})"
        events.append({"ph": "M", "name": "process_name", "pid": process.trace_pid, "tid": 0, "args": {"name": label}})
        events.append(
            {"ph": "M", "name": "process_labels", "pid": process.trace_pid, "tid": 0, "args": {"labels": process.host}}
        )
    for (uid, track_id), stored_track in sorted(tracks.items()):
        process = view.processes[uid]
        track = process.tracks.get(track_id, stored_track)  # the latest name, or the one of an ended track
        name = track.name
        tid = process.tid(track)
        events.append({"ph": "M", "name": "thread_name", "pid": process.trace_pid, "tid": tid, "args": {"name": name}})
        if track.parent:
            # Task lanes sort by the id of their thread (which they carry), next to it.
            index = {"sort_index": track.thread_id}
            events.append({"ph": "M", "name": "thread_sort_index", "pid": process.trace_pid, "tid": tid, "args": index})
    return events


def _frame_events(
    process: ProcessView, track: TrackInfo, tables: StreamTables, frame: Events, origin_ns: int, pairing: Pairing
) -> tuple[list[dict[str, Any]], int]:
    """The Chrome events of one stored frame, and how many of its events could not be shown."""
    base_ns = process.clock_offset_ns - origin_ns
    pid, tid = process.trace_pid, process.tid(track)
    events = []
    skipped = 0
    for kind, name, ts_ns, dur_ns, args in tables.rows(frame):
        ts = (ts_ns + base_ns) / 1000
        if kind is not None and kind.shape in _PAIRED:
            track_key = (process.uid, track.track_id)  # not (pid, tid): thread ids are reused
            paired = (
                pairing.source(kind.shape, name, ts, pid, tid, track_key)
                if kind.shape.startswith("source")
                else pairing.marker(kind.shape, name, ts, pid, tid, args if isinstance(args, dict) else None, track_key)
            )
            if paired is not None:
                events.append(paired)
            continue
        if kind is not None and kind.shape == "message" and isinstance(args, list):
            text, values = render(kind, args)
            message_args = {"category": kind.name, "priority": kind.priority, **values}
            events.append({"name": text, "cat": kind.name, "ph": "i", "s": "t", "ts": ts, "pid": pid, "tid": tid,
                           "args": message_args})  # fmt: skip
            continue
        phase = _PHASES.get(kind.shape) if kind is not None else None
        if kind is None or phase is None:
            skipped += 1  # a kind never declared, or a shape this collector cannot show
            continue
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


def _other_data(
    view: SnapshotView,
    origin_ns: int,
    undecodable: dict[int, int],
    pairing: Pairing,
    stored_tracks: dict[tuple[int, int], TrackInfo],
) -> dict[str, Any]:
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
        for p in sorted(view.processes.values(), key=lambda p: p.uid)
    ]
    forgotten = {**_store_counts(view.forgotten), **_client_counts(view.forgotten_client)}

    def total(name: str) -> int:
        return min(sum(int(p[name]) for p in processes) + forgotten.get(name, 0), _MAX_JSON_INT)

    return {
        **view.other,
        "clock_origin_wall_ns": origin_ns,
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
    "client_dropped_events",
    "label_overflow_events",
    "clipped_args",
    "rejected_events",
    "undecodable_events",
    "unmatched_marker_ends",
    "source_anomalies",
)
