"""Stored frames to Chrome trace event JSON (object form), as a stream of chunks.

Pure functions: no asyncio, safe to run on a worker thread while ingest goes on. Frames are emitted in order of their
first timestamp (from the index, without decoding); each frame is decoded and written as one chunk, so memory stays at
one frame's worth of events however large the store. Timestamps: monotonic ns plus the process's clock offset gives
wall-clock ns; ``ts`` is microseconds since the snapshot's earliest event (``otherData.clock_origin_wall_ns``), which
keeps sub-microsecond precision that absolute epoch microseconds would lose in a double.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from ringtrace.client.errors import ProtocolError
from ringtrace.client.protocol import decode_events

from .sessions import ProcessRecord, SourceContext
from .store import StoredFrame, StoreSnapshot

__all__ = ["ProcessView", "SnapshotView", "chrome_trace_chunks"]

log = logging.getLogger("ringtrace.collector.export")

_PHASES = {"span": "X", "instant": "i"}
#: Totals are capped here: orjson (and many JSON readers) take nothing wider than 64 bits.
_MAX_JSON_INT = 2**63 - 1


@dataclass(frozen=True)
class ProcessView:
    """What export needs of a process, copied on the event loop so another thread may read it."""

    uid: int
    trace_pid: int
    pid: int
    host: str
    name: str
    clock_offset_ns: int
    client_dropped_events: int
    client_dropped_frames: int
    thread_names: dict[int, str]

    @classmethod
    def of(cls, process: ProcessRecord) -> ProcessView:
        return cls(
            process.uid,
            process.trace_pid,
            process.pid,
            process.host,
            process.name,
            process.clock_offset_ns,
            process.client_dropped_events,
            process.client_dropped_frames,
            dict(process.thread_names),
        )


@dataclass
class SnapshotView:
    """Everything one snapshot reads: stored frames, process facts, loss counters, all taken at one instant."""

    frames: StoreSnapshot
    processes: dict[int, ProcessView]
    #: (process uid, thread id) -> events the ring overwrote.
    ring_lost_events: dict[tuple[int, int], int]
    other: dict[str, Any] = field(default_factory=dict)


def chrome_trace_chunks(view: SnapshotView) -> Iterator[bytes]:
    """Yield the pieces of one Chrome trace JSON document."""
    frames = sorted(view.frames, key=lambda f: f.first_ts_ns + _offset(view, f))
    origin_ns = frames[0].first_ts_ns + _offset(view, frames[0]) if frames else 0  # the earliest, after the sort
    threads = {(f.context.process.uid, f.context.thread_id) for f in frames}
    yield b'{"traceEvents":['
    first = True
    metadata = _metadata_events(view, threads)
    if metadata:
        yield orjson.dumps(metadata)[1:-1]
        first = False
    undecodable = 0
    for frame in frames:
        try:
            events = _frame_events(view, frame, origin_ns)
            chunk = _dumps(events)[1:-1] if events else b""
        except ProtocolError:
            undecodable += 1
            continue
        except Exception:  # a bug here must cost one frame, not the validity of the whole document
            log.exception("cannot export a frame of %d events; skipped", frame.count)
            undecodable += 1
            continue
        if chunk:
            yield chunk if first else b"," + chunk
            first = False
    yield (b'],"displayTimeUnit":"ns","otherData":' + orjson.dumps(_other_data(view, origin_ns, undecodable)) + b"}")


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


def _offset(view: SnapshotView, frame: StoredFrame) -> int:
    context: SourceContext = frame.context
    return view.processes[context.process.uid].clock_offset_ns


def _metadata_events(view: SnapshotView, threads: set[tuple[int, int]]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for uid in sorted({uid for uid, _ in threads}):
        process = view.processes[uid]
        label = process.name if process.trace_pid == process.pid else f"{process.name} (pid {process.pid})"
        events.append({"ph": "M", "name": "process_name", "pid": process.trace_pid, "tid": 0, "args": {"name": label}})
        events.append(
            {
                "ph": "M",
                "name": "process_labels",
                "pid": process.trace_pid,
                "tid": 0,
                "args": {"labels": process.host},
            }
        )
    for uid, thread_id in sorted(threads):
        process = view.processes[uid]
        name = process.thread_names.get(thread_id, str(thread_id))
        events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": process.trace_pid,
                "tid": thread_id,
                "args": {"name": name},
            }
        )
    return events


def _frame_events(view: SnapshotView, frame: StoredFrame, origin_ns: int) -> list[dict[str, Any]]:
    context: SourceContext = frame.context
    process = view.processes[context.process.uid]
    base_ns = process.clock_offset_ns - origin_ns
    pid, tid = process.trace_pid, context.thread_id
    strings, kinds = context.strings, context.kinds
    events = []
    for kind, name_id, ts_ns, dur_ns, args in decode_events(frame.payload, frame.count, frame.first_ts_ns):
        phase = _PHASES.get(kinds.get(kind, ""))
        if phase is None:
            continue  # a kind this collector does not know how to show
        name = strings.get(name_id)
        event = {
            "name": name if name is not None else f"<unknown string {name_id}>",
            "ph": phase,
            "ts": (ts_ns + base_ns) / 1000,
            "pid": pid,
            "tid": tid,
        }
        if args is not None:
            event["args"] = args if isinstance(args, dict) else {"value": args}
        if phase == "X":
            event["dur"] = dur_ns / 1000
        else:
            event["s"] = "t"
        events.append(event)
    return events


def _other_data(view: SnapshotView, origin_ns: int, undecodable: int) -> dict[str, Any]:
    ring_lost: dict[int, int] = {}
    for (uid, _), lost in view.ring_lost_events.items():
        ring_lost[uid] = ring_lost.get(uid, 0) + lost
    processes = [
        {
            "pid": p.trace_pid,
            "os_pid": p.pid,
            "host": p.host,
            "process_name": p.name,
            "client_dropped_events": p.client_dropped_events,
            "ring_overwritten_events": ring_lost.get(p.uid, 0),
        }
        for p in sorted(view.processes.values(), key=lambda p: p.uid)
    ]
    return {
        **view.other,
        "clock_origin_wall_ns": origin_ns,
        "client_dropped_events": min(sum(p.client_dropped_events for p in view.processes.values()), _MAX_JSON_INT),
        "ring_overwritten_events": min(sum(ring_lost.values()), _MAX_JSON_INT),
        "undecodable_frames": undecodable,
        "processes": processes,
    }
