"""What a snapshot, a dump or a live tail selects (``EventFilter``: a time window, processes, tracks, kinds of events,
names, priorities, a trace, a limit), and that filter applied from the coarsest level down (``Selection``): processes,
then segments by their index and frames by their header (track, times), then events one by one.

Pure and synchronous: what matches, never how a query says it (the HTTP API's parameters are parsed in
``http/query.py``, the command line's flags become those parameters). A snapshot's walk (``frame_walk.py``) builds
one ``Selection`` (after the first passes that a ``limit`` and a ``trace_id`` take) and consults it alone.

Windows select by overlap (``EventFilter.takes``, the one place that says it): an event whose kind has a duration (a
span, a traced call) is in ``[since, until)`` when it starts before ``until`` and ends after ``since`` (or starts in
it: a span of no duration is a point); any other event is a point, in when ``since <= start < until``. Paired events
(markers, source activity, async begin and end) are taken or left by their pair, after pairing (``pairing.py``,
``async_pairs.py``): ``PAIRED_KINDS`` are not held to the window here when the selection ``pairs`` them. Frames are
selected by their start times widened by their segment's ``Reach`` (``reach.py``): how long its spans and pairs last.

Name patterns (``process``, ``host``, ``track``, ``category``, ``name``) match the whole text, exactly, unless they hold
``*``, ``?`` or ``[``: then they are shell-style globs (``fnmatch``, case-sensitive).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ringtrace.collector.read.trace_spans import TraceSpans, TrackKey
from ringtrace.wire.frames import Events
from ringtrace.wire.message_format import PRIORITIES, render
from ringtrace.wire.model import FIRST_SAMPLER_TRACK_ID, SAMPLER_TRACK_SUFFIX
from ringtrace.wire.table_frames import KindSpec

__all__ = [
    "EVERYTHING",
    "PAIRED_KINDS",
    "EventFilter",
    "Pattern",
    "Selection",
    "category_of",
    "shown_name",
    "unclosed_set",
]

#: Built-in kinds' categories: one per family (a marker's start, end and instant are all ``marker``).
_BUILTIN_CATEGORIES: Final = {
    "marker_start": "marker",
    "marker_end": "marker",
    "source_open": "source",
    "source_close": "source",
    "async_begin": "async",
    "async_end": "async",
    "call_raised": "call",
}


#: Shapes whose events pair up (a start and an end): taken whole by their pair when a snapshot pairs them.
PAIRED_KINDS: Final = frozenset(
    {"marker_start", "marker_end", "source_open", "source_close", "async_begin", "async_end"}
)
#: Shapes whose events last ``dur`` ns from their start.
_LASTING: Final = "span"


class _Process(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def trace_pid(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def host(self) -> str: ...


def category_of(kind: KindSpec) -> str:
    """An event's category: a message's category, a typed event's class name, or its built-in family (``span``,
    ``instant``, ``counter``, ``marker``, ``source``, ``async``, ``sample``, ``call``, ``incident``)."""
    return _BUILTIN_CATEGORIES.get(kind.name, kind.name)


class Pattern:
    """A name to match: the whole text exactly, or a shell-style glob if it holds *, ? or [."""

    __slots__ = ("_exact", "_regex", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        glob = any(c in text for c in "*?[")
        self._exact = None if glob else text
        self._regex = re.compile(fnmatch.translate(text)) if glob else None

    def __call__(self, value: str) -> bool:
        if self._regex is None:
            return value == self._exact
        return self._regex.match(value) is not None

    def __repr__(self) -> str:
        return repr(self.text)


def unclosed_set(text: str) -> int | None:
    """Where a glob's ``[`` that no ``]`` closes is, if any (``[!]...]`` and ``[]...]`` read as fnmatch reads them):
    ``Pattern`` would take it as the character itself, most likely a typo that those who read a pattern refuse."""
    start = text.find("[")
    while start >= 0:
        end = start + 1
        end += text.startswith("!", end)
        end += text.startswith("]", end)
        close = text.find("]", end)
        if close < 0:
            return start
        start = text.find("[", close + 1)
    return None


@dataclass(frozen=True)
class EventFilter:
    """Which events a snapshot holds. Every condition given must hold; None means no condition.

    An event is in the window when it overlaps it (``takes``: a span that starts before ``until_ns`` and ends after
    ``since_ns``; a point in ``since_ns <= start < until_ns``), and ``limit`` keeps the newest events by start time
    (of those ties at the oldest one kept, the first arrived).
    """

    since_ns: int | None = None
    until_ns: int | None = None
    #: OS pids, or the pids a snapshot shows (they differ when two processes had the same pid).
    pids: frozenset[int] | None = None
    #: The pids a snapshot shows (``/sources``' ``pid``), those alone: not another process whose OS pid is one of them.
    shown_pids: frozenset[int] | None = None
    process: Pattern | None = None
    host: Pattern | None = None
    #: A thread's, task lane's, source's or counter track's name.
    track: Pattern | None = None
    category: Pattern | None = None
    #: An event's name as shown: a message's rendered text.
    name: Pattern | None = None
    #: Messages up to this level of ``PRIORITIES`` (0 is ``fatal``); other events carry no priority and pass.
    max_priority_level: int | None = None
    #: Only messages (the events that carry a priority): a log's view rather than a timeline's.
    messages_only: bool = False
    limit: int | None = None
    #: Only events of this trace (32 lowercase hex digits): those whose ``trace_id`` arg or field is it (ringtrace's
    #: spans of a trace, OTLP spans, their events and log records carry theirs) and, in a snapshot, those nested in
    #: one of its spans on their track (``trace_spans.py``; a live tail has no first pass to find them).
    trace_id: str | None = None

    @property
    def selects_everything(self) -> bool:
        return self == EVERYTHING

    @property
    def by_event(self) -> bool:
        """Whether events must be decoded to be selected (not only their processes, tracks and frames' times)."""
        return (
            self.since_ns is not None
            or self.until_ns is not None
            or self.category is not None
            or self.name is not None
            or self.max_priority_level is not None
            or self.messages_only
            or self.trace_id is not None
        )

    def selects_process(self, process: _Process) -> bool:
        """Whether the process (a record, a view: anything with its pids, name and host) is selected."""
        return self.process_matches(process.pid, process.trace_pid, process.name, process.host)

    def process_matches(self, pid: int, trace_pid: int, name: str, host: str) -> bool:
        return (
            (self.pids is None or pid in self.pids or trace_pid in self.pids)
            and (self.shown_pids is None or trace_pid in self.shown_pids)
            and (self.process is None or self.process(name))
            and (self.host is None or self.host(host))
        )

    def track_matches(self, name: str, track_id: int = 0) -> bool:
        """Whether a track's name matches; a sampler's track (``track_id`` from ``FIRST_SAMPLER_TRACK_ID`` up) also
        by its thread's name, so that a thread's name selects its samples with its spans."""
        track = self.track
        if track is None or track(name):
            return True
        return (
            track_id >= FIRST_SAMPLER_TRACK_ID
            and name.endswith(SAMPLER_TRACK_SUFFIX)
            and track(name[: -len(SAMPLER_TRACK_SUFFIX)])
        )

    def overlaps(self, first_ns: int, last_ns: int, back_ns: int = 0, ahead_ns: int = 0) -> bool:
        """Whether a frame whose events start from ``first_ns`` to ``last_ns`` (wall clock) may hold any selected:
        with ``ahead_ns`` the longest any of them lasts (a span, a pair it starts) and ``back_ns`` the longest before
        an end of it that its pair started (``reach.py``)."""
        since, until = self.since_ns, self.until_ns
        return (since is None or last_ns + ahead_ns >= since) and (until is None or first_ns - back_ns < until)

    def kind_matches(self, kind: KindSpec) -> bool:
        if self.messages_only and kind.shape != "message":
            return False
        if self.category is not None and not self.category(category_of(kind)):
            return False
        if self.max_priority_level is not None and kind.shape == "message" and kind.priority:
            return PRIORITIES.index(kind.priority) <= self.max_priority_level if kind.priority in PRIORITIES else False
        return True

    def in_window(self, ts_ns: int, dur_ns: int = 0) -> bool:
        """Whether what starts at ``ts_ns`` and lasts ``dur_ns`` overlaps the window: it starts before ``until_ns``
        and ends after ``since_ns``, or (a point: no duration) starts at or after it."""
        since, until = self.since_ns, self.until_ns
        return (since is None or ts_ns >= since or ts_ns + dur_ns > since) and (until is None or ts_ns < until)

    def takes(self, shape: str, ts_ns: int, dur_ns: int) -> bool:
        """Whether an event of ``shape`` (a kind's) at ``ts_ns`` lasting ``dur_ns`` (as stored: only a span's counts)
        is in the window: a span by overlap, any other event as a point."""
        return self.in_window(ts_ns, dur_ns if shape == _LASTING else 0)

    def describe(self) -> dict[str, object]:
        """The conditions given, for a snapshot's ``otherData``."""
        out: dict[str, object] = {}
        for name in ("since_ns", "until_ns", "limit"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.pids is not None:
            out["pid"] = sorted(self.pids)
        if self.shown_pids is not None:
            out["shown_pid"] = sorted(self.shown_pids)
        for name in ("process", "host", "track", "category", "name"):
            pattern = getattr(self, name)
            if pattern is not None:
                out[name] = pattern.text
        if self.max_priority_level is not None:
            out["min_priority"] = PRIORITIES[self.max_priority_level]
        if self.messages_only:
            out["messages_only"] = True
        if self.trace_id is not None:
            out["trace_id"] = self.trace_id
        return out

    def trace_matches(self, kind: KindSpec | None, args: object) -> bool:
        """Whether an event with these args (a map, or a typed kind's values) is of the trace selected."""
        if isinstance(args, dict):
            return args.get("trace_id") == self.trace_id
        if isinstance(args, list) and kind is not None:
            names = [name for name, _ in kind.fields]
            return (
                "trace_id" in names
                and names.index("trace_id") < len(args)
                and (args[names.index("trace_id")] == self.trace_id)
            )
        return False


EVERYTHING: Final = EventFilter()


class Selection:
    """An ``EventFilter`` applied from the coarsest level down, with what the first passes of a snapshot found: the
    cutoff of its ``limit`` (events that start at the cutoff are taken up to ``ties`` of them, the first arrived;
    frames that end before it are not read) and ``spans``, those of its ``trace_id`` (an event nested in one of them
    on its track is of the trace too; a frame that neither mentions the trace nor overlaps one is not read)."""

    __slots__ = ("by_time", "cutoff_ns", "filter", "pairs", "spans", "ties")

    def __init__(
        self,
        selected: EventFilter,
        cutoff: tuple[int, int] | None = None,
        spans: TraceSpans | None = None,
        *,
        pairs: bool = False,
    ) -> None:
        self.filter = selected
        #: Whether paired events are taken by their pair's times (a snapshot's walk pairs them and decides), not here.
        self.pairs = pairs
        self.cutoff_ns: int | None = cutoff[0] if cutoff is not None else None
        self.ties = cutoff[1] if cutoff is not None else 0
        self.spans = spans
        #: Whether frames are selected by their times (a window, or a limit's cutoff).
        self.by_time = selected.since_ns is not None or selected.until_ns is not None or cutoff is not None

    def selects_process(self, process: _Process) -> bool:
        return self.filter.selects_process(process)

    def in_time(self, first_ns: int, last_ns: int, back_ns: int = 0, ahead_ns: int = 0) -> bool:
        """Whether what starts from ``first_ns`` to ``last_ns`` (wall clock: a frame, a segment's index entry) may hold
        selected events by their times, what starts there lasting up to ``ahead_ns`` and what ends there having
        started up to ``back_ns`` before (``EventFilter.overlaps``)."""
        cutoff = self.cutoff_ns
        return self.filter.overlaps(first_ns, last_ns, back_ns, ahead_ns) and (cutoff is None or last_ns >= cutoff)

    def frame(
        self,
        track: TrackKey,
        track_name: str,
        first_ns: int,
        last_ns: int,
        frame: Events,
        reach: tuple[int, int] = (0, 0),
    ) -> bool:
        """Whether an EVENTS frame (of ``track``, named ``track_name``, its events starting from ``first_ns`` to
        ``last_ns``, wall clock, with the (back, ahead) ``reach`` of its segment) may hold selected events: by its
        times, its track and the trace's spans."""
        if self.by_time and not self.in_time(first_ns, last_ns, *reach):
            return False
        selected = self.filter
        if selected.track is not None and not selected.track_matches(track_name, track[1]):
            return False
        spans = self.spans
        return spans is None or spans.may_hold(track, first_ns, last_ns) or spans.mentions(frame)

    @property
    def by_start_only(self) -> bool:
        """Whether it takes events by no more than their times (overlapping the filter's window)."""
        selected = self.filter
        return (
            self.cutoff_ns is None
            and selected.category is None
            and selected.name is None
            and selected.max_priority_level is None
            and not selected.messages_only
            and selected.trace_id is None
        )

    @property
    def by_trace_and_start_only(self) -> bool:
        """Whether it takes events by their ``trace_id`` (with the trace's spans known) and start time, nothing else:
        a frame that one of the trace's spans holds whole is then taken by start time alone (``EventWalk``)."""
        selected = self.filter
        return (
            self.spans is not None
            and self.cutoff_ns is None
            and selected.category is None
            and selected.name is None
            and selected.max_priority_level is None
            and not selected.messages_only
        )

    def event(
        self,
        kind: KindSpec | None,
        name: str,
        wall_ns: int,
        args: object = None,
        dur_ns: int = 0,
        track: TrackKey | None = None,
    ) -> bool:
        """Whether the event is selected: ``dur_ns`` a span's duration, ``track`` its (process uid, track id)."""
        selected = self.filter
        if kind is None:
            if not selected.in_window(wall_ns):
                return False
        elif not (self.pairs and kind.shape in PAIRED_KINDS) and not selected.takes(kind.shape, wall_ns, dur_ns):
            return False
        if kind is not None and not selected.kind_matches(kind):
            return False
        if selected.name is not None and not selected.name(name):
            return False
        if (
            selected.trace_id is not None
            and not selected.trace_matches(kind, args)
            and not self._nested(track, wall_ns, dur_ns)
        ):
            return False
        cutoff = self.cutoff_ns
        if cutoff is not None and wall_ns <= cutoff:
            if wall_ns < cutoff or self.ties == 0:
                return False
            self.ties -= 1
        return True

    def _nested(self, track: TrackKey | None, wall_ns: int, dur_ns: int) -> bool:
        spans = self.spans
        return spans is not None and track is not None and spans.holds(track, wall_ns, wall_ns + dur_ns)


def shown_name(kind: KindSpec | None, name: str, args: Any) -> str:
    """An event's name as a snapshot shows it: a message's rendered text."""
    if kind is not None and kind.shape == "message" and isinstance(args, list):
        return render(kind, args)[0]
    return name
