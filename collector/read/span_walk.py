"""The spans of a snapshot, as ``GET /spans`` and ``GET /aggregates`` read them: every event a Chrome snapshot of the
same filters shows as a complete slice (``"ph":"X"``), with the instants and messages beside them counted.

Spans are what has a duration: ``span`` events (OTLP spans among them), traced calls (``call``, ``call_raised``) and
markers and source activity that the event walk pairs into slices (``pairing.py``). Not async slices (their begin
and end are paired by the viewer, not the walk) nor what is still open at the end of the walk (no duration yet).

Theory of operation: the walk is the event walk's (``event_walk.py``: the same frames, pairing, selection and loss
counts), but most frames are read a column at a time, as ``export/timeline_frames.py`` reads them: a frame whose
events the filter takes by start time alone (``EventWalk.takes_whole``) and that holds no paired kind has its
columns unpacked, and only the spans whose duration passes ``floor_ns`` (raised by a top-k as it fills) and
``ceiling_ns`` go through the walk's own ``shown`` (their args as Chrome JSON shows them). Every other frame is
shown whole by the walk. A search for the slowest spans thus makes a tuple for a few events a frame, never for all.
Pure and synchronous: runs on a reader thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Final

from ringtrace.collector.read.event_walk import EventWalk
from ringtrace.collector.read.frame_walk import MAX_WALL_NS, PAIRED_SHAPES, ProcessView, SnapshotView, is_incident
from ringtrace.collector.read.selection import EventFilter
from ringtrace.wire.frames import Events
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["LOSSES", "Span", "SpanFilter", "SpanWalk", "has_error"]

#: The counters of a snapshot's report that say what was lost (``event_walk.TOTALS``): beside search results.
LOSSES: Final = (
    "overwritten_events",
    "capped_events",
    "discarded_events",
    "cleared_events",
    "client_dropped_events",
    "label_overflow_events",
    "clipped_args",
    "rejected_events",
    "client_unacknowledged_events",
    "undecodable_events",
    "unmatched_marker_ends",
    "source_anomalies",
)

#: The columns read of a frame, beside its args.
_COLUMNS: Final = ("kind", "name", "ts", "dur")
#: A kind's part in a span walk (per kind id of a segment).
_SPAN, _INSTANT, _MESSAGE, _PAIRED, _OTHER = range(5)


@dataclass(frozen=True)
class SpanFilter:
    """What a span must be besides what the snapshot's ``EventFilter`` selects. None: no condition."""

    min_duration_ns: int | None = None
    max_duration_ns: int | None = None
    #: Only spans in error (``has_error``), or only those not.
    has_error: bool | None = None
    #: (key, value): the span's arg ``key`` as text (``arg_text``) is ``value``; every pair must hold.
    args: tuple[tuple[str, str], ...] = ()

    def takes(self, args: dict[str, Any] | None) -> bool:
        """Whether a span with these args (as Chrome JSON shows them) passes the error and arg conditions."""
        if self.has_error is not None and has_error(args) != self.has_error:
            return False
        return all(args is not None and key in args and arg_text(args[key]) == value for key, value in self.args)

    @property
    def by_args(self) -> bool:
        return self.has_error is not None or bool(self.args)


def has_error(args: dict[str, Any] | None) -> bool:
    """Whether a span is in error: an OTLP span's status is ``error``, a traced call ended by an exception
    (``call_raised``: ``raised`` is true), or it has an ``error`` arg that is not null, false, 0 or empty."""
    if not args:
        return False
    error = args.get("error")
    return args.get("status") == "error" or args.get("raised") is True or error not in (None, False, "")


def arg_text(value: object) -> str:
    """An arg's value as ``arg.KEY=VALUE`` compares it: a string as it is, anything else as JSON (``true``, ``12``,
    ``1.5``, ``null``, ``[1,2]``)."""
    if isinstance(value, str):
        return value
    import orjson  # (here: the walk itself needs no JSON)

    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return str(value)


#: One span: (process, track, name, start wall-clock ns, duration ns, args as Chrome JSON shows them).
Span = tuple[ProcessView, TrackInfo, str, int, int, "dict[str, Any] | None"]


@dataclass
class _Kinds:
    """Each kind id's part (``_SPAN`` ...) and each message kind's priority, for one segment's tables."""

    tables: StreamTables | None = None
    seen: int = -1
    parts: dict[int, int] = field(default_factory=dict)
    priorities: dict[int, str] = field(default_factory=dict)
    paired: frozenset[int] = frozenset()

    def of(self, tables: StreamTables) -> _Kinds:
        if tables is self.tables and len(tables.kinds) == self.seen:
            return self
        self.tables, self.seen = tables, len(tables.kinds)
        self.parts, self.priorities = {}, {}
        for kind_id, kind in tables.kinds.items():
            shape = kind.shape
            if shape == "span":
                self.parts[kind_id] = _SPAN
            elif shape == "instant" or is_incident(kind):
                self.parts[kind_id] = _INSTANT
            elif shape == "message":
                self.parts[kind_id] = _MESSAGE
                self.priorities[kind_id] = kind.priority
            elif shape in PAIRED_SHAPES:
                self.parts[kind_id] = _PAIRED
        self.paired = frozenset(k for k, part in self.parts.items() if part == _PAIRED)
        return self


class SpanWalk:
    """The spans ``selected`` (a snapshot's filter; its ``limit`` is not one of events here) and ``spans`` takes, in
    the order the walk meets them; ``instants`` and ``messages`` (by priority) count what else it met.

    ``with_args``: each span with its args (else None where the filter needs none); ``floor_ns``: spans shorter are
    not wanted (a top-k raises it as it fills); ``newer_than_ns``: frames whose events all start before it are not
    read (a top-k by start time raises it), unless a paired kind is declared (pairing must see every frame)."""

    def __init__(
        self, view: SnapshotView, selected: EventFilter, spans: SpanFilter, *, count_others: bool, with_args: bool
    ) -> None:
        self.with_args = with_args
        self.walk = EventWalk(view, replace(selected, limit=None))
        self.spans = spans
        self.floor_ns = spans.min_duration_ns or 0
        self.newer_than_ns: int | None = None
        self.count_others = count_others
        self.instants = 0
        self.messages: dict[str, int] = {}
        self._kinds = _Kinds()

    def __iter__(self) -> Iterator[Span]:
        walk = self.walk
        for (process, track, tables, frame), _ in walk.walked():
            newer = self.newer_than_ns
            if (
                newer is not None
                and frame.last_ts_ns + process.clock_offset_ns < newer
                and not self._kinds.of(tables).paired
            ):
                continue
            fast = self._columns(process, track, tables, frame) if walk.takes_whole(process, track, frame) else None
            if fast is None:
                yield from self._shown(process, track, tables, frame, None)
            else:
                yield from fast

    def report(self) -> dict[str, Any]:
        """The snapshot's report (after the walk): its loss counters."""
        return self.walk.report()

    def losses(self) -> dict[str, int]:
        """What the processes selected lost, as a snapshot of them counts it (not only in the window)."""
        report = self.report()
        return {name: report[name] for name in LOSSES}

    def _columns(
        self, process: ProcessView, track: TrackInfo, tables: StreamTables, frame: Events
    ) -> list[Span] | None:
        """The frame's spans read column-wise; None if the walk must show the frame whole (a paired kind, a payload
        that is not what it should be: the walk counts what it cannot show)."""
        kinds = self._kinds.of(tables)
        try:
            columns = tables.unpack(frame)
            kind_ids, name_ids, offsets, durations = (columns[tables.columns.index(c)] for c in _COLUMNS)
            if kinds.paired and not kinds.paired.isdisjoint(kind_ids):
                return None
        except Exception:  # (an unhashable kind: the walk counts the frame as undecodable)
            return None
        since, until = self.walk.window
        low = 0 if since is None else since
        high = MAX_WALL_NS + 1 if until is None else until
        first_ns = frame.first_ts_ns + process.clock_offset_ns
        if self.count_others and not self._count(kinds, kind_ids, offsets, first_ns, low, high):
            return None
        floor, ceiling, newer = self.floor_ns, self.spans.max_duration_ns, self.newer_than_ns
        if newer is not None:
            low = max(low, newer)
        parts = kinds.parts
        try:
            if not durations or max(durations) < floor:  # (the usual frame, once a top-k is full)
                return []
            wanted = [
                part == _SPAN
                and dur >= floor
                and (ceiling is None or dur <= ceiling)
                and low <= first_ns + offset < high
                and first_ns + offset + dur <= MAX_WALL_NS
                and first_ns + offset >= 0
                for part, dur, offset in zip(map(parts.get, kind_ids), durations, offsets, strict=True)
            ]
        except (TypeError, ValueError):  # columns not of integers, or of unequal lengths: the walk counts it
            return None
        if not any(wanted):
            return []
        if self.with_args or self.spans.by_args:
            return list(self._shown(process, track, tables, frame, bytes(wanted)))
        strings = tables.strings  # (a span's name as shown is its name as stored)
        return [
            (process, track, _name(strings, name_ids[i]), first_ns + offsets[i], durations[i], None)
            for i, taken in enumerate(wanted)
            if taken
        ]

    def _count(
        self, kinds: _Kinds, kind_ids: list[Any], offsets: list[Any], first_ns: int, low: int, high: int
    ) -> bool:
        """Count the frame's instants and messages in the window; False if its columns are not integers."""
        parts, priorities, messages = kinds.parts, kinds.priorities, self.messages
        try:
            for kind_id, offset in zip(kind_ids, offsets, strict=True):
                part = parts.get(kind_id)
                if part in (_INSTANT, _MESSAGE):
                    if not low <= first_ns + offset < high:
                        continue
                    if part == _INSTANT:
                        self.instants += 1
                    else:
                        priority = priorities[kind_id]
                        messages[priority] = messages.get(priority, 0) + 1
        except TypeError:
            return False
        return True

    def _shown(
        self, process: ProcessView, track: TrackInfo, tables: StreamTables, frame: Events, only: bytes | None
    ) -> Iterator[Span]:
        """The spans of the frame as the walk shows them (of those ``only`` flags, if given)."""
        shown = self.walk.shown(process, track, tables, frame, only)
        if not shown:
            return
        spans, floor, ceiling = self.spans, self.floor_ns, self.spans.max_duration_ns
        count = self.count_others and only is None
        for phase, name, wall_ns, dur_ns, args, category, _ in shown:
            if phase == "X":
                if dur_ns >= floor and (ceiling is None or dur_ns <= ceiling) and spans.takes(args):
                    yield process, track, name, wall_ns, dur_ns, args
            elif count and phase == "i":
                if category in ("", "incident"):
                    self.instants += 1
                elif args is not None and "priority" in args:
                    priority = str(args["priority"])
                    self.messages[priority] = self.messages.get(priority, 0) + 1


def _name(strings: dict[int, str], name_id: int) -> str:
    text = strings.get(name_id)
    return text if text is not None else f"<unknown string {name_id}>"
