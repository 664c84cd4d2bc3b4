"""The spans of one trace on each track, and what they hold: ``?trace_id=`` selects the trace's own events and the
work nested in its spans (plain scopes, instants, messages recorded inside a ``server_span``), which carry no trace
id of their own.

Nesting is by time on one track: a process's thread, or an asyncio task's lane (each task records into a lane of its
own, so the concurrent requests of one event loop stay apart). An event is nested when its start lies within one of
the trace's spans on its track (``[start, end]``), and, for a span, its end too: a span that straddles the boundary
is not. Only slices (``span`` events) enclose: an async slice (an OTLP span without a thread) shares its track with
the other requests' spans, so time there says nothing of which request an event belongs to.

Finding the spans is a first pass over the frames a snapshot walks (``frame_walk.prepare``); a frame whose payload does
not hold the trace id's text (msgpack keeps a str's bytes as they are) is not decoded, nor a segment's frames read where
the segment's bytes do not hold it (``FrameWalk``'s ``holding``). The second pass then decodes only the frames that hold
the text or overlap one of the trace's spans on their track; a frame one of them holds whole (by its header: the first
start, the last end) is selected by start time alone, which the C writers do (``EventWalk.takes_whole``). Headers are
the client's word: an encoder's are exact, so the two rules agree.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

from ringtrace.wire.frames import Events
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["TraceSpans", "TrackKey"]

#: (process uid, track id): a track of a process (not a thread id: thread ids are reused).
TrackKey = tuple[int, int]


class TraceSpans:
    """The (start, end) wall-clock ns of each span of trace ``trace_id``, per track, once ``read`` has met them."""

    __slots__ = ("_ends", "_found", "_needle", "_starts", "trace_id")

    def __init__(self, trace_id: str) -> None:
        self.trace_id = trace_id
        self._needle = trace_id.encode()
        self._found: dict[TrackKey, list[tuple[int, int]]] = {}
        #: Per track, the spans' starts in order, and the latest end of the spans up to each.
        self._starts: dict[TrackKey, list[int]] = {}
        self._ends: dict[TrackKey, list[int]] = {}

    def mentions(self, frame: Events) -> bool:
        """Whether the frame's payload holds the trace id's text: no event of the trace is in a frame that does not."""
        payload = frame.payload
        return self._needle in (payload if type(payload) is bytes else bytes(payload))

    def read(self, key: TrackKey, tables: StreamTables, frame: Events, offset_ns: int) -> None:
        """Note the trace's spans in one frame of track ``key`` (a frame that cannot be decoded holds none: the
        snapshot's own pass counts it)."""
        if not self.mentions(frame):
            return
        try:
            rows = list(tables.rows(frame))
        except Exception:
            return
        trace_id = self.trace_id
        for kind, _, ts_ns, dur_ns, args in rows:
            if kind is not None and kind.shape == "span" and type(args) is dict and args.get("trace_id") == trace_id:
                self.add(key, ts_ns + offset_ns, ts_ns + offset_ns + dur_ns)

    def add(self, key: TrackKey, start_ns: int, end_ns: int) -> None:
        """Note a span of the trace on track ``key`` (wall-clock ns)."""
        self._found.setdefault(key, []).append((start_ns, end_ns))

    def done(self) -> TraceSpans:
        """Index the spans found (after the last ``read``)."""
        for key, spans in self._found.items():
            spans.sort()
            self._starts[key] = [start for start, _ in spans]
            self._ends[key] = list(accumulate((end for _, end in spans), max))
        self._found = {}
        return self

    def holds(self, key: TrackKey, start_ns: int, end_ns: int) -> bool:
        """Whether ``[start_ns, end_ns]`` on track ``key`` lies within one of the trace's spans there. (The latest
        end among the spans that start by ``start_ns`` is enough: one of them reaches that far.)"""
        starts = self._starts.get(key)
        if starts is None:
            return False
        at = bisect_right(starts, start_ns) - 1
        return at >= 0 and self._ends[key][at] >= end_ns

    def may_hold(self, key: TrackKey, first_ns: int, last_ns: int) -> bool:
        """Whether a frame of track ``key`` whose events start from ``first_ns`` to ``last_ns`` may hold an event
        nested in one of the trace's spans: one of them overlaps those times."""
        starts = self._starts.get(key)
        if starts is None:
            return False
        at = bisect_right(starts, last_ns) - 1
        return at >= 0 and self._ends[key][at] >= first_ns

    def processes_during(self, since_ns: int, until_ns: int) -> set[int]:
        """The processes (uids) with a span of the trace that overlaps ``[since_ns, until_ns)`` (an incident's
        window: which processes its ``trace`` scope takes)."""
        return {key[0] for key in self._starts if self.may_hold(key, since_ns, until_ns - 1)}
