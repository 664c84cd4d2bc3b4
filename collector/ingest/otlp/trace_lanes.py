"""The lanes of a trace: the tracks where a process's OTLP spans that name no thread go, so that a trace's spans nest.

Theory of operation. Each trace gets tracks of its own in its process, its *lanes*: ``trace 4bf92f35`` (the trace
id's first 8 hex digits), then ``trace 4bf92f35 #2``, ``#3``... A span is a complete slice on one of them, and a lane's
slices nest as a call stack does: a child shows under its parent, and a trace takes as many rows as its spans nest
deep and run at once, not a row per span.

A span goes on the first lane, of its parent's, a sibling's, a child's (a span is exported when it ends: children
usually come first) and then the trace's in order, where it nests truthfully; else on a new lane. It nests truthfully
on a lane when each span there is strictly apart from it, strictly inside it or strictly holds it (an end shared by
two slices in different stored frames would leave their order to the order they arrived in), when the innermost span
holding it is an ancestor of it, and when each span inside it is a descendant of it, as far as the parents placed so
far tell. So a lane never draws a span under one that is not its ancestor, concurrent siblings go on lanes of their
own, and a parent exported after its children goes where they are. The parent is in ``parent_span_id`` too, and
flows draw calls between processes (``export/flows.py``).

Spans of a trace arrive over many requests, so a process's lanes are kept across them (one ``TraceLanes`` per
process stream): what was placed of the traces placed most recently, ``MAX_KEPT_SPANS`` spans at most, on at most
``max_lanes`` lanes. Past either bound, the trace placed least recently is forgotten and its lanes are ended
(``take_retired``: their tracks end, and no longer count against the stream's tracks); a span of it that comes later
starts it again, on new lanes of the same names. Checking a lane reads only its spans that end after the new one
starts (they are kept sorted by end): about the new span's descendants when spans come in the order they ended.

``trace_lanes()`` makes a process's lanes: in C (``_lanes.c``) where it is built, which keeps what it remembers of
each span in C arrays rather than Python tuples (cheaper to place, and nothing for the garbage collector to walk);
``TraceLanes`` here, its twin, defines the behaviour. Span ids and times are unsigned 64-bit integers, as OTLP's are.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from typing import Any, Final, NamedTuple, Protocol

from ringtrace.wire.optional_c import load_optional

__all__ = [
    "ACCELERATED",
    "MAX_KEPT_SPANS",
    "MAX_TRACE_LANES",
    "LanePlacing",
    "TraceLane",
    "TraceLanes",
    "TraceSpan",
    "trace_lanes",
]

_lanes = load_optional("ringtrace.collector.ingest.otlp._lanes")
#: Whether the C lanes are in use in this process.
ACCELERATED: Final = _lanes is not None

#: Spans whose place a process's lanes remember (about 400 bytes each), across its traces.
MAX_KEPT_SPANS: Final = 10_000
#: Lanes of a process's traces live at once (each a track of its stream), unless its stream allows fewer.
MAX_TRACE_LANES: Final = 1_000
#: Parents followed up from a span, at most, to find whether another is its ancestor.
_MAX_DEPTH: Final = 256
#: A span on a lane: (end, start, span id, parent span id), kept sorted.
_Placed = tuple[int, int, int, int]


class TraceSpan(NamedTuple):
    """A span to place on a lane of its trace, with its records (its slice and its events' instants)."""

    trace_id: bytes
    span_id: int
    parent_id: int
    start_ns: int
    end_ns: int
    records: list[Any]


class TraceLane:
    """One lane, its own key (equal to no other: a trace placed again after it was forgotten has new ones), with its
    track's name."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"TraceLane({self.name!r})"


class LanePlacing(Protocol):
    """What a process's stream asks of its lanes: ``TraceLanes``, or its C twin."""

    max_lanes: int

    @property
    def live(self) -> int: ...

    def place(self, span: TraceSpan) -> TraceLane: ...

    def take_retired(self) -> list[TraceLane]: ...


def trace_lanes(
    max_lanes: int = MAX_TRACE_LANES, max_kept_spans: int = MAX_KEPT_SPANS, accelerated: bool = ACCELERATED
) -> LanePlacing:
    """A process's lanes, ``max_lanes`` live and ``max_kept_spans`` remembered at most: in C where it is built
    (``accelerated``), else ``TraceLanes``."""
    if not accelerated:
        return TraceLanes(max_lanes, max_kept_spans)
    if _lanes is None:
        raise ValueError("accelerated=True: the C lanes are not in use in this process")
    placing: LanePlacing = _lanes.Lanes(TraceLane, max_lanes, max_kept_spans)
    return placing


class _Trace:
    """A trace's lanes, each with the spans placed on it; each span's lane and parent, and where a child of each
    went."""

    __slots__ = ("child_lane", "keys", "lanes", "placed", "short_id", "size")

    def __init__(self, short_id: str) -> None:
        self.short_id = short_id
        #: Spans on its lanes (a span sent twice counts twice: it is there twice).
        self.size = 0
        self.lanes: list[list[_Placed]] = []
        self.keys: list[TraceLane] = []
        self.placed: dict[int, tuple[int, int]] = {}
        self.child_lane: dict[int, int] = {}

    def descends(self, parent_id: int, ancestor_id: int) -> bool:
        """Whether a span whose parent is ``parent_id`` descends from ``ancestor_id``, by the parents placed."""
        for _ in range(_MAX_DEPTH):
            if parent_id == ancestor_id:
                return True
            placed = self.placed.get(parent_id)
            if placed is None:
                return False
            parent_id = placed[1]
        return False


class TraceLanes:
    """The lanes of one process's traces (see the module's docstring)."""

    def __init__(self, max_lanes: int = MAX_TRACE_LANES, max_kept_spans: int = MAX_KEPT_SPANS) -> None:
        self.max_lanes = max_lanes
        self.max_kept_spans = max_kept_spans
        self._traces: OrderedDict[bytes, _Trace] = OrderedDict()
        #: Lanes live (placed on, and not retired yet).
        self.live = 0
        self._spans = 0
        self._retired: list[TraceLane] = []

    def place(self, span: TraceSpan) -> TraceLane:
        """The lane ``span`` goes on (remembered: later spans of its trace nest with it)."""
        trace = self._traces.get(span.trace_id)
        if trace is None:
            trace = self._traces[span.trace_id] = _Trace(span.trace_id.hex()[:8])
        else:
            self._traces.move_to_end(span.trace_id)
        index = _lane_for(trace, span) if trace.lanes else 0
        if index == len(trace.lanes):
            number = f" #{index + 1}" if index else ""
            trace.lanes.append([])
            trace.keys.append(TraceLane(f"trace {trace.short_id}{number}"))
            self.live += 1
        bisect.insort(trace.lanes[index], (span.end_ns, span.start_ns, span.span_id, span.parent_id))
        trace.placed[span.span_id] = (index, span.parent_id)
        trace.size += 1
        trace.child_lane.setdefault(span.parent_id, index)
        self._spans += 1
        key = trace.keys[index]
        while self._traces and (self._spans > self.max_kept_spans or self.live > self.max_lanes):
            _, forgotten = self._traces.popitem(last=False)
            self._spans -= forgotten.size
            self.live -= len(forgotten.lanes)
            self._retired += forgotten.keys
        return key

    def take_retired(self) -> list[TraceLane]:
        """The lanes of the traces forgotten since the last call: their tracks may end."""
        retired, self._retired = self._retired, []
        return retired


def _lane_for(trace: _Trace, span: TraceSpan) -> int:
    """The first lane (its index) of its parent's, a sibling's, a child's and the trace's where ``span`` nests
    truthfully; past the last if none."""
    lanes = trace.lanes
    parents = trace.placed.get(span.parent_id)
    tried = -1
    for index in (parents and parents[0], trace.child_lane.get(span.parent_id), trace.child_lane.get(span.span_id)):
        if index is not None and index != tried:  # (the usual case: the first fits)
            if _nests(trace, lanes[index], span):
                return index
            tried = index
    for index in range(len(lanes)):
        if _nests(trace, lanes[index], span):
            return index
    return len(lanes)


def _nests(trace: _Trace, lane: list[_Placed], span: TraceSpan) -> bool:
    """Whether ``span`` nests truthfully among the spans of ``lane`` (the module's docstring says when)."""
    start, end = span.start_ns, span.end_ns
    holder, holder_start = None, -1
    for placed_end, placed_start, span_id, parent_id in lane[bisect.bisect_left(lane, (start, -1, -1, -1)) :]:
        if placed_start > end:  # (those that end before it starts are before the bisected ones)
            continue
        if start < placed_start and placed_end < end:
            if not trace.descends(parent_id, span.span_id):
                return False
        elif placed_start < start and end < placed_end:
            if placed_start > holder_start:  # the innermost holding it starts last
                holder, holder_start = span_id, placed_start
        else:  # the two cross, or share an end
            return False
    return holder is None or trace.descends(span.parent_id, holder)
