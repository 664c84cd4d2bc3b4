"""The spans of a snapshot, as ``GET /spans`` and ``GET /aggregates`` read them: every event a Chrome snapshot of the
same filters shows as a complete slice (``"ph":"X"``), with the instants and messages beside them counted.

Spans are what has a duration: ``span`` events (OTLP spans among them), traced calls (``call``, ``call_raised``) and
markers and source activity that the event walk pairs into slices (``pairing.py``), async slices (a begin and the
next end of its id in its process in time, as viewers pair them, on the begin's track, args of both) and what is
still open at the end of the walk: a marker, source activity or async slice begun and not ended, whose duration runs
to the window's end or ``now_ns``, whichever is earlier (``Span``'s last field says it is open).

Theory of operation: the walk is the event walk's (``event_walk.py``: the same frames, pairing, selection and loss
counts), but most frames are read a column at a time, as ``export/timeline_frames.py`` reads them: a frame whose
events the filter takes by start time alone (``EventWalk.takes_whole``) and that holds no paired kind has its
leading columns unpacked (``span_columns.py``), and only the spans whose duration passes ``floor_ns`` (raised by a
top-k as it fills) and ``max_duration_ns`` are made anything of: their args decoded, or, for a traced call's or a
typed kind's, shown by the walk itself. Every other frame is shown whole by the walk. A search for the slowest spans
thus makes a tuple for a few events a frame, never for all; aggregates take a frame of spans alone a name at a time.
Pure and synchronous: runs on a reader thread.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import itemgetter
from typing import Any, Final

from ringtrace.collector.read.event_walk import NOT_MESSAGES, EventWalk
from ringtrace.collector.read.frame_walk import MAX_WALL_NS, PAIRED_SHAPES, ProcessView, SnapshotView
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.read.span_columns import FrameColumns, read_columns
from ringtrace.wire.call_records import is_call
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

#: A kind's part in a span walk (per kind id of a segment; other kinds have none).
_SPAN, _INSTANT, _MESSAGE, _PAIRED = range(4)


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
    (``call_raised``: ``raised`` is true), a scope an exception left (its ``exception`` arg names it), it has an
    ``error`` arg that is not null, false, 0 or empty, or it is an HTTP request that failed (``_http_error``)."""
    if not args:
        return False
    error, exception, response = args.get("error"), args.get("exception"), args.get("response")
    return (
        args.get("status") == "error"
        or args.get("raised") is True
        or error not in (None, False, "")
        or exception not in (None, False, "")
        or (type(response) is dict and _http_error(response, args.get("kind")))
    )


def _http_error(response: dict[str, Any], kind: object) -> bool:
    """An HTTP integration's span (its ``response`` map): the request failed (``response.error``), or its status is
    an error on its side, as OpenTelemetry's HTTP conventions have it: 5xx for a server span, 4xx and 5xx for a client
    span (a 404 is the client's error, not the server's)."""
    if response.get("error") not in (None, False, ""):
        return True
    status = response.get("status")
    if type(status) is not int:
        return False
    if kind == "server":
        return status >= 500
    return kind == "client" and status >= 400


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


#: One span: (process, track, name, start wall-clock ns, duration ns, args as Chrome JSON shows them, whether it is
#: open: begun and not ended by the end of the walk, its duration so far).
Span = tuple[ProcessView, TrackInfo, str, int, int, "dict[str, Any] | None", bool]
#: Spans of one name in one process: (process, name, their durations, how many of them are open).
Group = tuple[ProcessView, str, Iterable[int], int]
#: Shapes whose begin and end the span walk pairs by id (``_AsyncSlices``).
_ASYNC_SHAPES: Final = frozenset({"async_begin", "async_end"})
#: The note the event walk adds to an open-ended marker or source slice's args: ``Span``'s open flag says it here.
_OPEN_NOTE: Final = "ringtrace"
#: Names a frame may hold for its spans to be grouped a column at a time (each name costs a pass over the frame).
_MAX_NAMES_A_FRAME: Final = 8
#: Spans of other names among a frame's most common one that are cut out of its durations one by one, at most.
_MAX_FEW: Final = 64


@dataclass
class _Kinds:
    """Each kind id's part (``_SPAN`` ...) and each message kind's priority, for one segment's tables."""

    tables: StreamTables | None = None
    seen: int = -1
    parts: dict[int, int] = field(default_factory=dict)
    priorities: dict[int, str] = field(default_factory=dict)
    paired: frozenset[int] = frozenset()
    spans: frozenset[int] = frozenset()
    #: Span kinds whose args Chrome JSON shows as stored (a map or none): not a traced call's, nor a typed kind's.
    plain: frozenset[int] = frozenset()

    def of(self, tables: StreamTables) -> _Kinds:
        if tables is self.tables and len(tables.kinds) == self.seen:
            return self
        self.tables, self.seen = tables, len(tables.kinds)
        self.parts, self.priorities = {}, {}
        for kind_id, kind in tables.kinds.items():
            shape = kind.shape
            if shape == "span":
                self.parts[kind_id] = _SPAN
            elif shape == "instant" or (shape == "message" and kind.name in NOT_MESSAGES):
                self.parts[kind_id] = _INSTANT  # (a message of such a category is shown as an instant of it)
            elif shape == "message":
                self.parts[kind_id] = _MESSAGE
                self.priorities[kind_id] = kind.priority
            elif shape in PAIRED_SHAPES or shape in _ASYNC_SHAPES:  # (paired across frames: the walk shows them)
                self.parts[kind_id] = _PAIRED
        self.paired = frozenset(k for k, part in self.parts.items() if part == _PAIRED)
        self.spans = frozenset(k for k, part in self.parts.items() if part == _SPAN)
        self.plain = frozenset(k for k in self.spans if not is_call(tables.kinds[k]) and not tables.kinds[k].fields)
        return self


class SpanWalk:
    """The spans ``selected`` (a snapshot's filter; its ``limit`` is not one of events here) and ``spans`` takes, in
    the order the walk meets them (``spans_found()``, or ``groups()`` of one name in one process); ``instants`` and
    ``messages`` (by priority) count what else it met, with ``count_others``.

    ``with_args``: each span with its args (else None where the filter needs none); ``floor_ns``: spans shorter are
    not wanted (a top-k raises it as it fills); ``newer_than_ns``: frames whose events all start before it are not
    read (a top-k by start time raises it), unless a paired kind is declared (pairing must see every frame);
    ``now_ns``: where a span still open at the end of the walk ends, if the window ends later (wall-clock ns; None:
    the time the walk is made)."""

    def __init__(
        self,
        view: SnapshotView,
        selected: EventFilter,
        spans: SpanFilter,
        *,
        count_others: bool,
        with_args: bool,
        now_ns: int | None = None,
    ) -> None:
        self.walk = EventWalk(view, replace(selected, limit=None))
        self.now_ns = time.time_ns() if now_ns is None else now_ns
        #: Async begins and ends shown, by (process uid, id): paired after the walk in time order (their frames
        #: arrive in no such order: a begin on one thread may come after its end on another), a stack each, the
        #: latest begin ended first.
        self._async: dict[tuple[int, str], list[tuple[int, str, TrackInfo, str, dict[str, Any] | None]]] = {}
        self.spans = spans
        self.count_others = count_others
        self.with_args = with_args or spans.by_args
        self.floor_ns = spans.min_duration_ns or 0
        self.newer_than_ns: int | None = None
        self.instants = 0
        self.messages: dict[str, int] = {}
        self._kinds = _Kinds()

    def spans_found(self) -> Iterator[Span]:
        """Every span taken, one by one."""
        for process, track, tables, frame in self._frames():
            whole = self.walk.takes_whole(process, track, frame)
            found = self._span_rows(process, track, tables, frame) if whole else None
            yield from self._shown(process, track, tables, frame, None) if found is None else found
        yield from self._still_open()

    def groups(self) -> Iterator[Group]:
        """Every span taken, a name's spans of a frame at a time where it can (a frame of spans alone, all in the
        window, no condition on their durations or args), else one by one."""
        for process, track, tables, frame in self._frames():
            whole = self.walk.takes_whole(process, track, frame)
            found = self._grouped(process, tables, frame) if whole else None
            if found is not None:
                yield from found
                continue
            rows = self._span_rows(process, track, tables, frame) if whole else None
            for span in self._shown(process, track, tables, frame, None) if rows is None else rows:
                yield process, span[2], (span[4],), 0
        for span in self._still_open():
            yield span[0], span[2], (span[4],), int(span[6])

    def losses(self) -> dict[str, dict[str, int]]:
        """``lost``: what the processes selected lost, as a snapshot of them counts it (after the walk; not only in
        the window); ``lost_by_forgotten_processes``: what the processes forgotten lost, whatever the filter (never
        in ``lost``)."""
        report = self.walk.report()
        forgotten = report["forgotten_processes_totals"]
        return {
            "lost": {name: report[name] for name in LOSSES},
            "lost_by_forgotten_processes": {name: forgotten[name] for name in LOSSES},
        }

    def _frames(self) -> Iterator[tuple[ProcessView, TrackInfo, StreamTables, Events]]:
        for walked, _ in self.walk.walked():
            process, _, tables, frame = walked
            newer_than = self.newer_than_ns
            older = newer_than is not None and frame.last_ts_ns + process.clock_offset_ns < newer_than
            if not older or self._kinds.of(tables).paired:
                yield walked

    def _window(self, process: ProcessView, frame: Events) -> tuple[int, int, int]:
        """(the frame's first start, the window's since and until), wall-clock ns: a span is taken when it overlaps
        them, an instant or a message when it starts in them (``EventFilter.in_window``)."""
        since, until = self.walk.window
        low = 0 if since is None else since
        if self.newer_than_ns is not None:
            low = max(low, self.newer_than_ns)
        return frame.first_ts_ns + process.clock_offset_ns, low, MAX_WALL_NS + 1 if until is None else until

    def _grouped(self, process: ProcessView, tables: StreamTables, frame: Events) -> list[Group] | None:
        """The frame's spans by name, a column at a time; None if the frame is not one of spans alone, all in the
        window and with no condition on them (or its columns cannot be read so)."""
        if self.floor_ns or self.spans.max_duration_ns is not None or self.spans.by_args:
            return None
        kinds = self._kinds.of(tables)
        columns = read_columns(tables, frame)
        if columns is None:
            return None
        kind_ids, name_ids = columns.kinds, columns.names
        first_ns, low, high = self._window(process, frame)
        try:
            if not kind_ids or not kinds.spans.issuperset(kind_ids):
                return None
            names = set(name_ids)
            if len(names) > _MAX_NAMES_A_FRAME or not _integers(names, kind_ids):
                return None
            # As 64-bit arrays: a pass in C that refuses what is not an integer (and what no ns count can be).
            offsets, durations = array("q", columns.offsets), array("q", columns.durations)
            if not (len(offsets) == len(durations) == len(kind_ids) and min(durations) >= 0):
                return None
            earliest, latest = first_ns + min(offsets), first_ns + max(offsets)
            if not (earliest >= 0 and low <= earliest and latest < high and latest + max(durations) <= MAX_WALL_NS):
                return None  # (a bound on the latest end: past it, the walk judges each event)
        except (TypeError, OverflowError):
            return None
        strings = tables.strings
        if len(names) == 1:
            return [(process, _name(strings, name_ids[0]), durations, 0)]
        return [(process, _name(strings, name), taken, 0) for name, taken in _by_name(names, name_ids, durations)]

    def _span_rows(
        self, process: ProcessView, track: TrackInfo, tables: StreamTables, frame: Events
    ) -> list[Span] | None:
        """The frame's spans read column-wise, with the instants and messages counted; None if the walk must show
        the frame whole (a paired kind, a payload that is not what it should be: the walk counts what it cannot)."""
        kinds = self._kinds.of(tables)
        columns = read_columns(tables, frame)
        if columns is None or (kinds.paired and not kinds.paired.isdisjoint(columns.kinds)):
            return None
        found = self._taken(process, track, tables, frame, kinds, columns)
        if found is not None and self.count_others and not self._count(kinds, columns, *self._window(process, frame)):
            return None
        return found

    def _taken(
        self,
        process: ProcessView,
        track: TrackInfo,
        tables: StreamTables,
        frame: Events,
        kinds: _Kinds,
        columns: FrameColumns,
    ) -> list[Span] | None:
        kind_ids, offsets, durations = columns.kinds, columns.offsets, columns.durations
        first_ns, low, high = self._window(process, frame)
        floor, ceiling, parts = self.floor_ns, self.spans.max_duration_ns, kinds.parts
        try:
            if not durations or max(durations) < floor:  # (the usual frame, once a top-k is full)
                return []
            wanted = [
                index
                for index, (part, dur, offset) in enumerate(
                    zip(map(parts.get, kind_ids), durations, offsets, strict=True)
                )
                if part == _SPAN
                and dur >= floor
                and (ceiling is None or dur <= ceiling)
                and first_ns + offset < high
                and (low <= first_ns + offset or first_ns + offset + dur > low)  # overlaps: EventFilter.in_window
                and 0 <= first_ns + offset <= first_ns + offset + dur <= MAX_WALL_NS
            ]
        except (TypeError, ValueError):  # columns not of integers, or of unequal lengths: the walk counts it
            return None
        if not wanted:
            return []
        strings, names = tables.strings, columns.names
        if not self.with_args:
            return [
                (process, track, _name(strings, names[i]), first_ns + offsets[i], durations[i], None, False)
                for i in wanted
            ]
        args = columns.args(wanted)
        plain = kinds.plain
        if args is None or not all(
            kind_ids[i] in plain and (arg is None or type(arg) is dict) for i, arg in zip(wanted, args, strict=True)
        ):
            only = bytearray(len(kind_ids))  # a call's location, a typed kind's fields: as the walk shows them
            for index in wanted:
                only[index] = 1
            return list(self._shown(process, track, tables, frame, bytes(only)))
        takes = self.spans.takes
        return [
            (process, track, _name(strings, names[i]), first_ns + offsets[i], durations[i], arg, False)
            for i, arg in zip(wanted, args, strict=True)
            if takes(arg)
        ]

    def _count(self, kinds: _Kinds, columns: FrameColumns, first_ns: int, low: int, high: int) -> bool:
        """Count the frame's instants and messages in the window; False if its columns are not integers."""
        parts, priorities, messages = kinds.parts, kinds.priorities, self.messages
        try:
            for kind_id, offset in zip(columns.kinds, columns.offsets, strict=True):
                part = parts.get(kind_id)
                if part in (_INSTANT, _MESSAGE) and low <= first_ns + offset < high:
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
        for phase, name, wall_ns, dur_ns, args, category, async_id in shown:
            if phase == "X":
                if dur_ns >= floor and (ceiling is None or dur_ns <= ceiling) and spans.takes(args):
                    yield process, track, name, wall_ns, dur_ns, args if self.with_args else None, False
            elif phase == "b" or phase == "e":  # paired after the walk, in time order (``_async_ends``)
                self._async.setdefault((process.uid, async_id), []).append((wall_ns, phase, track, name, args))
            elif count and phase == "i":
                if category in ("", "incident"):
                    self.instants += 1
                else:  # a message: its kind's priority, whatever its values are named
                    self.messages[async_id] = self.messages.get(async_id, 0) + 1

    def _still_open(self) -> Iterator[Span]:
        """After the walk: the async slices, each begin paired with the next end of its id in time, and what is still
        open: markers and source activity begun and not ended, async slices with no end after their begin, each
        running to the window's end or ``now_ns`` (the earlier)."""
        _, until = self.walk.window
        end_ns = self.now_ns if until is None else min(until, self.now_ns)
        opened = []
        for process, track, event in self.walk.still_open():
            if event[0] == "b":  # (held by the window's pairing: begun before it, its end not met in arrival order)
                self._async.setdefault((process.uid, event[6]), []).append((event[2], "b", track, event[1], event[4]))
            else:
                opened.append(
                    (process, track, event[1], event[2], _without_note(event[4]) if event[0] == "B" else event[4])
                )
        spans, floor, ceiling = self.spans, self.floor_ns, self.spans.max_duration_ns
        processes, held, self._async = self.walk.processes, self._async, {}
        for (uid, _), events in held.items():
            of = processes.get(uid)
            if of is None:
                continue
            begins = []
            for wall_ns, phase, track, name, args in sorted(events, key=itemgetter(0)):  # (stable: arrival order)
                if phase == "b":
                    begins.append((track, name, wall_ns, args))
                    continue
                if not begins:
                    continue  # an end whose begin is not in the walk: a point, no span
                began_track, began_name, began_ns, began_args = begins.pop()
                dur_ns = wall_ns - began_ns
                args = {**began_args, **args} if began_args and args else began_args or args
                if dur_ns >= floor and (ceiling is None or dur_ns <= ceiling) and spans.takes(args):
                    yield of, began_track, began_name, began_ns, dur_ns, args if self.with_args else None, False
            opened += [(of, track, name, began_ns, args) for track, name, began_ns, args in begins]
        for process, track, name, began_ns, args in opened:
            dur_ns = max(end_ns - began_ns, 0)
            if dur_ns >= floor and (ceiling is None or dur_ns <= ceiling) and spans.takes(args):
                yield process, track, name, began_ns, dur_ns, args if self.with_args else None, True


def _without_note(args: dict[str, Any] | None) -> dict[str, Any] | None:
    """An open-ended marker or source slice's args without the note the event walk adds (``open`` says it)."""
    if args is None or _OPEN_NOTE not in args:
        return args
    return {key: value for key, value in args.items() if key != _OPEN_NOTE} or None


def _integers(distinct: set[Any], kind_ids: list[Any]) -> bool:
    """Whether the distinct name ids and the kind ids are ints (not bools: True is no string or kind id)."""
    return set(map(type, distinct)) == {int} and set(map(type, kind_ids)) == {int}


def _by_name(names: set[int], name_ids: list[int], durations: array[int]) -> list[tuple[int, Iterable[int]]]:
    """The durations of each name of a frame. The usual frame of more than one name holds a few of the others among
    many of one: theirs are found by ``list.index`` and cut out of the whole, all in C, not a pass per name."""
    counts = {name: name_ids.count(name) for name in names}
    most = max(counts, key=counts.__getitem__)
    if len(name_ids) - counts[most] > _MAX_FEW:
        return [(name, compress(durations, map(name.__eq__, name_ids))) for name in names]
    found: dict[int, list[int]] = {}
    at = []
    for name in names:
        if name != most:
            places = found[name] = []
            start = -1
            for _ in range(counts[name]):
                start = name_ids.index(name, start + 1)
                places.append(start)
            at += places
    at.sort()
    rest = array("q")
    start = 0
    for place in at:
        rest += durations[start:place]
        start = place + 1
    rest += durations[start:]
    return [(most, rest), *((name, [durations[i] for i in places]) for name, places in found.items())]


def _name(strings: dict[int, str], name_id: int) -> str:
    text = strings.get(name_id)
    return text if text is not None else f"<unknown string {name_id}>"
