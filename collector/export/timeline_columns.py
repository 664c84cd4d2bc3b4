"""The ``GET /timeline`` document: the selected events in a compact, columnar JSON form that the web view draws.

Pure functions: no asyncio, safe to run on a worker thread while ingest goes on. The events are those a snapshot
shows (``read/event_walk.py``: messages rendered, markers and source activity paired into slices, slices never ended
open-ended), one block per stored frame, so memory stays at one frame's worth of events; a frame's spans, instants
and counters are read a column at a time (``timeline_frames.py``), the rest by the event walk. A block holds one track's
events as columns, which a browser takes in far faster than one object per event (Chrome JSON):

``{"track": 3, "ph": "XXi", "name": [0, 1, 2], "ts": [..], "dur": [..], "args": [null, {..}, ..], "id": [..]}``

``ph`` is one character per event (``X`` slice, ``B`` slice not ended, ``i`` instant or message, ``C`` counter,
``b``/``e`` async begin/end, ``P`` a sample of the thread's stack: its args null, its stack being the flame graph's,
``GET /flamegraph``); ``name`` indexes ``names``; ``ts`` is ns since ``origin_ns`` (the collector's fixed
origin, as Chrome JSON's ``ts``, here in ns: exact in a double); ``dur`` a slice's ns (-1: not ended by the end of
the snapshot); ``id`` (only in blocks with async events) pairs an async begin with its end; ``cat`` (only in blocks
with incidents) is each event's category, ``incident`` for those (``tl.incident``). Then ``names``, ``tracks``
(each with its process, kind and order), the loss counters (``report``) and the window read (``capture``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import orjson
from ringtrace.collector.export.chrome import json_bytes
from ringtrace.collector.export.sample_stacks import SAMPLE
from ringtrace.collector.export.timeline_frames import FrameColumns
from ringtrace.collector.read.event_walk import NOT_MESSAGES, EventWalk, message_args
from ringtrace.collector.read.frame_walk import ProcessView, Shown, SnapshotView, WalkedFrame
from ringtrace.collector.read.selection import EVERYTHING, EventFilter
from ringtrace.wire.model import ASYNC_TRACK, COUNTER_TRACK, SOURCE_TRACK, THREAD_TRACK, TrackInfo

__all__ = ["timeline_chunks"]

_TRACK_KINDS: Final = {THREAD_TRACK: "thread", SOURCE_TRACK: "source", ASYNC_TRACK: "task", COUNTER_TRACK: "counter"}


class _Tables:
    """The names and tracks the blocks refer to by index, in the order first met."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.tracks: dict[tuple[int, int], tuple[int, ProcessView, TrackInfo]] = {}

    def track(self, process: ProcessView, track: TrackInfo) -> int:
        key = (process.uid, track.track_id)
        known = self.tracks.get(key)
        if known is None:
            known = self.tracks[key] = (len(self.tracks), process, track)
        return known[0]


def timeline_chunks(
    view: SnapshotView, selected: EventFilter = EVERYTHING, *, accelerated: bool = True
) -> Iterator[bytes]:
    """Yield the pieces of one ``/timeline`` document holding the events ``selected``.

    ``accelerated``: a frame's spans, instants and counters are read column by column (``timeline_frames.py``) and
    the rest by the event walk; False reads every event through the walk (the same document, slower)."""
    walk = EventWalk(view, selected)
    origin_ns = view.origin_ns
    fast = FrameColumns(origin_ns, *walk.window) if accelerated and walk.by_frame else None
    tables = _Tables()
    first = True
    yield b'{"blocks":['
    for walked, _ in walk.walked():
        columns = _frame_columns(walk, walked, fast, origin_ns, tables.names)
        if columns is None:
            yield b""  # (nothing selected: the reader may hand over its step all the same)
            continue
        block = json_bytes({"track": tables.track(walked[0], walked[1]), **columns})
        yield block if first else b"," + block
        first = False
    by_track: dict[int, list[Shown]] = {}
    for process, track, event in walk.still_open():
        by_track.setdefault(tables.track(process, track), []).append(event)
    for index, opened in by_track.items():
        block = json_bytes({"track": index, **_columns(opened, origin_ns, tables.names, still_open=True)})
        yield block if first else b"," + block
        first = False
    ending = {
        "names": list(tables.names),
        "tracks": _track_entries(tables),
        "origin_ns": origin_ns,
        "report": walk.report(),
        "capture": walk.capture(),
    }
    yield b"]," + orjson.dumps(ending)[1:]


def _frame_columns(
    walk: EventWalk, walked: WalkedFrame, fast: FrameColumns | None, origin_ns: int, names: dict[str, int]
) -> dict[str, Any] | None:
    """The selected events of one frame as columns (None if none): those ``fast`` takes, then the walk's of the
    rest (or of all of it)."""
    process, track, tables, frame = walked
    whole = fast is not None and walk.takes_whole(process, track, frame)
    taken = fast.take(tables, frame, process.clock_offset_ns, names) if fast is not None and whole else None
    if taken is None:
        shown = walk.shown(process, track, tables, frame)
        return _columns(shown, origin_ns, names) if shown else None
    if taken.deferred is None:
        return taken.columns
    shown = walk.shown(process, track, tables, frame, taken.deferred)
    if shown is None:
        return None  # the frame as a whole cannot be decoded: counted as such, none of it shown
    if not shown:
        return taken.columns
    rest = _columns(shown, origin_ns, names)
    columns = taken.columns
    if columns is None:
        return rest
    if "id" in rest:
        columns["id"] = [""] * len(columns["ts"]) + rest["id"]
    if "cat" in rest:
        columns["cat"] = [""] * len(columns["ts"]) + rest["cat"]
    columns["ph"] += rest["ph"]
    for name in ("name", "ts", "dur", "args"):
        columns[name] += rest[name]
    return columns


def _columns(shown: list[Shown], origin_ns: int, names: dict[str, int], still_open: bool = False) -> dict[str, Any]:
    """Events as the walk shows them, as columns (see the module docstring)."""
    phases, event_names, starts, durations, args, categories, ids = zip(*shown, strict=True)
    if not NOT_MESSAGES.issuperset(categories):  # messages: their kinds' category and priority among their args
        args = tuple(
            message_args(c, id_, a) if p == "i" and c not in NOT_MESSAGES else a
            for p, a, c, id_ in zip(phases, args, categories, ids, strict=True)
        )
    intern = names.setdefault
    block: dict[str, Any] = {
        "ph": "".join(phase if phase == "b" else "B" for phase in phases) if still_open else "".join(phases),
        "name": [intern(name, len(names)) for name in event_names],
        "ts": [wall_ns - origin_ns for wall_ns in starts],
        "dur": [0 if phase == "b" else -1 for phase in phases] if still_open else list(durations),
        "args": [None if phase == SAMPLE else arg for phase, arg in zip(phases, args, strict=True)]
        if SAMPLE in phases
        else list(args),
    }
    if "async" in categories:
        block["id"] = [id_ if c == "async" else "" for c, id_ in zip(categories, ids, strict=True)]
    if "incident" in categories:
        block["cat"] = list(categories)
    return block


def _track_entries(tables: _Tables) -> list[dict[str, Any]]:
    """Each track the blocks name: its process, its kind, and where it sorts (``_track_order``)."""
    entries = []
    for index, process, stored in tables.tracks.values():
        track = process.tracks.get(stored.track_id, stored)  # the latest name, or the one of an ended track
        entries.append(
            {
                "index": index,
                "pid": process.trace_pid,
                "os_pid": process.pid,
                "process_name": process.name,
                "host": process.host,
                "track": track.track_id,
                "name": track.name,
                "kind": _TRACK_KINDS.get(track.kind, str(track.kind)),
                "tid": process.tid(track),
                "order": [process.uid, *_track_order(process, track)],
            }
        )
    return entries


def _track_order(process: ProcessView, track: TrackInfo) -> tuple[int, int, int, int]:
    """Threads first, the main one (whose id is the process's) before the others in the order declared, each
    followed by its task lanes; then sources, then counter tracks."""
    if track.kind == THREAD_TRACK:
        return 0, int(track.thread_id != process.pid), track.track_id, 0
    if track.parent:  # a task lane, after its thread
        thread = process.tracks.get(track.parent)
        return 0, int(thread is None or thread.thread_id != process.pid), track.parent, track.track_id
    return 1 + (track.kind == COUNTER_TRACK), 0, track.track_id, 0
