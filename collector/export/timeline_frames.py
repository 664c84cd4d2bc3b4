"""A stored frame's spans, instants and counters as ``/timeline`` columns, read column by column: most of what a store
holds, at a fraction of the cost of the event walk's tuple per event.

The event walk (``read/event_walk.py``) defines what is shown; this takes the events it would show unchanged (a
declared span, instant or counter, its name declared, its args a map or none, its times ones a clock gives) and
leaves every other one to it, flagged in ``deferred`` (messages, markers, sources, async slices, typed events; what
the walk must count as undecodable). Tests hold the two to the same document (``timeline_chunks(accelerated=False)``).
Pure Python: no asyncio, safe on a worker thread.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from ringtrace.collector.export.chrome_frames import column_order
from ringtrace.collector.read.frame_walk import MAX_WALL_NS, PHASES, is_incident
from ringtrace.collector.read.pool import let_the_loop_in
from ringtrace.wire.call_records import is_call
from ringtrace.wire.frames import Events
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["FrameColumns", "TakenColumns"]

_ARGS_TYPES: Final = frozenset({dict, type(None)})
_INT: Final = {int}
#: The shapes taken here, and their phases.
_TAKEN: Final = {shape: PHASES[shape] for shape in ("span", "instant", "counter")}


class TakenColumns(NamedTuple):
    """What ``FrameColumns`` made of a frame."""

    #: ``ph``, ``name``, ``ts``, ``dur`` and ``args`` of the events taken (None if none).
    columns: dict[str, Any] | None
    #: One byte per event of the frame, nonzero for each left to the event walk; None if none is.
    deferred: bytes | None


class FrameColumns:
    """Columns of the frames of one snapshot, oldest segment first (each read with tables of its own).

    Args:
        origin_ns: what ``ts`` counts from.
        since_ns, until_ns: the window events must overlap (None: no bound), when a filter selects by times alone.
    """

    def __init__(self, origin_ns: int, since_ns: int | None = None, until_ns: int | None = None) -> None:
        self._origin_ns = origin_ns
        self._since_ns = 0 if since_ns is None else since_ns
        self._until_ns = MAX_WALL_NS + 1 if until_ns is None else until_ns
        self._tables: StreamTables | None = None
        self._phases: dict[int, str] = {}
        self._kinds_seen = -1

    def take(self, tables: StreamTables, frame: Events, offset_ns: int, names: dict[str, int]) -> TakenColumns | None:
        """The frame's events this takes, as columns (their names interned in ``names``); None if the event walk
        must read the whole frame (a payload it cannot read column-wise: the walk counts what it cannot show)."""
        let_the_loop_in()  # (a frame's worth: about a millisecond at most)
        order = column_order(tables)
        if order is None:
            return None
        try:
            unpacked = tables.unpack(frame)
        except Exception:
            return None
        kinds, name_ids, offsets, durations, args = (unpacked[i] for i in order)
        phases = self._phase_of(tables)
        try:
            whole = self._whole(tables, frame, offset_ns, names, kinds, name_ids, offsets, durations, args)
        except (TypeError, ValueError):  # an unhashable kind or name id, columns of unequal lengths
            return None
        if whole is not None:
            return TakenColumns(whole, None)
        strings = tables.strings
        first_ns = frame.first_ts_ns + offset_ns
        since, until, origin = self._since_ns, self._until_ns, self._origin_ns
        intern = names.setdefault
        ph: list[str] = []
        taken_names: list[int] = []
        ts: list[int] = []
        dur: list[int] = []
        taken_args: list[Any] = []
        deferred = bytearray(len(kinds))
        any_deferred = False
        try:
            for index, (kind, name_id, offset, duration, arg) in enumerate(
                zip(kinds, name_ids, offsets, durations, args, strict=True)
            ):
                if type(kind) is not int or type(name_id) is not int:
                    return None  # (True would read as kind or string 1): the walk refuses the frame, and counts it
                phase = phases.get(kind)
                name = strings.get(name_id)
                if phase is None or name is None or (arg is not None and type(arg) is not dict):
                    deferred[index] = any_deferred = True
                    continue
                if type(offset) is not int or type(duration) is not int:
                    return None
                wall_ns = first_ns + offset
                if phase != "X":
                    duration = 0
                if not 0 <= wall_ns <= wall_ns + duration <= MAX_WALL_NS:
                    deferred[index] = any_deferred = True  # the walk counts it as undecodable
                    continue
                if not wall_ns < until or (wall_ns < since and wall_ns + duration <= since):
                    continue  # (a span overlaps the window, a point is in it: EventFilter.in_window)
                ph.append(phase)
                taken_names.append(intern(name, len(names)))
                ts.append(wall_ns - origin)
                dur.append(duration)
                taken_args.append(arg)
        except (TypeError, ValueError):  # an unhashable kind or name id, columns of unequal lengths
            return None
        columns = {"ph": "".join(ph), "name": taken_names, "ts": ts, "dur": dur, "args": taken_args} if ph else None
        return TakenColumns(columns, bytes(deferred) if any_deferred else None)

    def _whole(
        self,
        tables: StreamTables,
        frame: Events,
        offset_ns: int,
        names: dict[str, int],
        kinds: list[Any],
        name_ids: list[Any],
        offsets: list[Any],
        durations: list[Any],
        args: list[Any],
    ) -> dict[str, Any] | None:
        """The columns of a frame whose every event is taken, made a column at a time (the usual frame: spans,
        instants and counters with maps for args, all in the window); None if any event is not."""
        if not kinds or len({len(kinds), len(name_ids), len(offsets), len(durations), len(args)}) != 1:
            return None
        phases = self._phases
        if not set(kinds) <= phases.keys() or not set(map(type, args)) <= _ARGS_TYPES:
            return None
        if set(map(type, offsets)) != _INT or set(map(type, durations)) != _INT:
            return None
        if set(map(type, kinds)) != _INT or set(map(type, name_ids)) != _INT:  # (a bool is no kind or string id)
            return None
        strings = tables.strings
        unique_names = dict.fromkeys(name_ids)  # in the order first met, as the walk interns them
        if any(strings.get(name_id) is None for name_id in unique_names):
            return None
        ph = "".join(map(phases.__getitem__, kinds))
        spans_only = ph.count("X") == len(ph)
        dur = durations if spans_only else [d if p == "X" else 0 for p, d in zip(ph, durations, strict=True)]
        first_ns = frame.first_ts_ns + offset_ns
        ends = map(int.__add__, offsets, dur)
        if not (first_ns + min(offsets) >= 0 and first_ns + max(ends) <= MAX_WALL_NS and min(dur) >= 0):
            return None
        if not (self._since_ns <= first_ns + min(offsets) and first_ns + max(offsets) < self._until_ns):
            return None
        intern = names.setdefault
        index = {name_id: intern(strings[name_id], len(names)) for name_id in unique_names}
        base = first_ns - self._origin_ns
        return {
            "ph": ph,
            "name": list(map(index.__getitem__, name_ids)),
            "ts": [base + offset for offset in offsets],
            "dur": list(dur),
            "args": args,
        }

    def _phase_of(self, tables: StreamTables) -> dict[int, str]:
        """Kind id -> phase, for the kinds taken here (of the segment these tables read)."""
        if tables is not self._tables or len(tables.kinds) != self._kinds_seen:
            self._tables = tables
            self._kinds_seen = len(tables.kinds)
            self._phases = {  # (not a traced call's: its args, a stack id, are the walk's to resolve; nor an incident)
                kind_id: _TAKEN[kind.shape]
                for kind_id, kind in tables.kinds.items()
                if kind.shape in _TAKEN and not is_call(kind) and not is_incident(kind)
            }
        return self._phases
