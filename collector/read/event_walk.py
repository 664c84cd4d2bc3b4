"""Stored events as snapshots show them: the one event walk that the Chrome and Perfetto writers both write out.

Each frame the filter selects (``walked()``, from ``frame_walk.py``) is decoded into ``Shown`` events (``shown()``): a
message rendered (its text is its name; its category, priority and values are its args), a typed event's values by
field name, a traced call's code location (a stack id) as its file and line (a slice of category ``call``), an
incident (``tl.incident``) as an instant of category ``incident`` with its reason among its args, markers
and source activity paired into slices across frames (``pairing.py``), an async event's id taken out of its args.
A window takes events by overlap (``selection.py``): a slice made of a pair, and an async begin with its end
(``async_pairs.py``), whole when the pair overlaps it; one never ended when it began before ``until``.
A frame that cannot be decoded costs its own events, counted per process as undecodable and logged once, never the
snapshot.
Memory: one frame's events at a time, and what pairing keeps open. Times are wall-clock ns (monotonic ns plus the
process's clock offset); each writer states them in its own units.

After the walk, ``report()`` gives what every snapshot reports besides its events: the loss counters, in total and
per process and track, that add up (docs/snapshots.md, "Times and counters").
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from itertools import compress
from typing import Any, Final

from ringtrace.collector.read.async_pairs import AsyncPairs
from ringtrace.collector.read.frame_walk import (
    MAX_WALL_NS,
    PHASES,
    SHOWN_SHAPES,
    ProcessView,
    Shown,
    SnapshotView,
    WalkedFrame,
    incident_args,
    is_incident,
    log_once,
    prepare,
)
from ringtrace.collector.read.pairing import Pairing
from ringtrace.collector.read.pool import let_the_loop_in
from ringtrace.collector.read.selection import EVERYTHING, EventFilter, Selection
from ringtrace.collector.read.trace_spans import TraceSpans
from ringtrace.collector.store.accounts import FOLDED_TRACK
from ringtrace.collector.store.ring import Counts
from ringtrace.wire.call_records import call_args
from ringtrace.wire.frames import Events, Stats
from ringtrace.wire.message_format import render
from ringtrace.wire.model import CALL_KINDS, CALL_RAISED, INCIDENT, SOURCE_TRACK, TrackInfo
from ringtrace.wire.stream_tables import StreamTables, typed_args

__all__ = ["MAX_COUNT", "NOT_MESSAGES", "TOTALS", "EventWalk", "client_counts", "message_args", "store_counts"]

#: Counts are capped here: JSON readers and protobuf's int64 take nothing wider.
MAX_COUNT: Final = 2**63 - 1
#: The categories of the instants that are no message (plain ones, incidents): a message kind of such a name is shown
#: as one of them, its kind's category and priority among its args (``message_args``, made by the walk).
NOT_MESSAGES: Final = frozenset({"", "incident"})
_SKIPPED: Final = "events of a kind never declared, or at times no clock gives"
#: The counters a report totals: over the processes selected (``report()``), and over those forgotten apart.
TOTALS: Final = (
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
    "client_unacknowledged_events",
    "client_internal_error_events",
    "undecodable_events",
    "unmatched_marker_ends",
    "source_anomalies",
)


class EventWalk:
    """The events ``selected`` of a snapshot, frame by frame, oldest segment first, in the order frames arrived."""

    def __init__(self, view: SnapshotView, selected: EventFilter = EVERYTHING, pairing: Pairing | None = None) -> None:
        """``pairing``: the slices a previous walk left open (``Pairing.carried``), to be ended by this one."""
        self.view = view
        self.selected = selected
        self._walk, self._selection = prepare(view, selected, pairs=True)
        self._pairing = Pairing() if pairing is None else pairing
        windowed = self._selection is not None and (selected.since_ns is not None or selected.until_ns is not None)
        #: The window paired events are taken by, after pairing (None: no window).
        self._window = selected if windowed else None
        self._async = AsyncPairs(selected) if windowed else None
        if windowed:
            self._pairing.window = selected
        #: For a ``trace_id`` alone: its spans, and what a frame one of them holds whole is taken by (start time).
        self._whole: Selection | None = None
        self._trace_spans: TraceSpans | None = None
        if self._selection is not None and self._selection.by_trace_and_start_only:
            self._whole = Selection(replace(selected, trace_id=None), pairs=True)
            self._trace_spans = self._selection.spans

    @property
    def pairing(self) -> Pairing:
        """Markers and sources paired so far, and those still open."""
        return self._pairing

    @property
    def tracks(self) -> dict[tuple[int, int], TrackInfo]:
        """(process uid, track id) -> the track as its stored frames declare it, for every frame read so far."""
        return self._walk.tracks

    @property
    def processes(self) -> dict[int, ProcessView]:
        """The processes selected, by uid."""
        return self._walk.processes

    @property
    def by_start_only(self) -> bool:
        """Whether events are selected by no more than their start time (``window``) once their frame is."""
        return self._selection is None or self._selection.by_start_only

    @property
    def by_frame(self) -> bool:
        """Whether some frames' events are selected by no more than their start time (``window``): those that
        ``takes_whole`` says, which a C writer may then write."""
        return self.by_start_only or self._whole is not None

    def takes_whole(self, process: ProcessView, track: TrackInfo, frame: Events) -> bool:
        """Whether the frame's events are selected by no more than their start time: always, for a filter of no more
        than that; for a ``trace_id``, when one of the trace's spans on the frame's track holds the frame's times (its
        header's first start and last end: every event of it is nested, by the header)."""
        if self.by_start_only:
            return True
        spans = self._trace_spans
        if spans is None:
            return False
        offset = process.clock_offset_ns
        return spans.holds((process.uid, track.track_id), frame.first_ts_ns + offset, frame.last_ts_ns + offset)

    @property
    def window(self) -> tuple[int | None, int | None]:
        """The (since, until) wall-clock ns events must overlap; (None, None) for any time."""
        if self._selection is None:
            return None, None
        return self.selected.since_ns, self.selected.until_ns

    def walked(self) -> Iterator[tuple[WalkedFrame, int]]:
        """The frames that may hold selected events, with the number of the stored segment each came from (counted
        from 0 in the order walked: a segment's frames come together)."""
        segment, last_tables = -1, None
        for walked in self._walk.frames():
            tables = walked[2]
            if tables is not last_tables:  # each segment is decoded by a decoder of its own
                segment, last_tables = segment + 1, tables
            yield walked, segment

    def shown(
        self, process: ProcessView, track: TrackInfo, tables: StreamTables, frame: Events, only: bytes | None = None
    ) -> list[Shown] | None:
        """The selected events of one frame as shown (of those ``only`` flags, one byte per event, if given); None
        if the frame cannot be decoded (a bad frame costs its own events, counted, not the snapshot)."""
        selection = self._whole if self._whole is not None and self.takes_whole(process, track, frame) else None
        try:
            events, skipped = self._shown(process, track, tables, frame, only, selection or self._selection)
        except Exception as exc:
            self.count_undecodable(process, frame.count, exc)
            return None
        if skipped:
            self.count_undecodable(process, skipped, ValueError(_SKIPPED))
        return events

    def count_undecodable(self, process: ProcessView, events: int, why: Exception | None = None) -> None:
        """Count ``events`` of the process that cannot be shown (and log why, once per process)."""
        walk = self._walk
        walk.undecodable[process.uid] = walk.undecodable.get(process.uid, 0) + events
        log_once(process, events, why or ValueError(_SKIPPED))

    def still_open(self, keep: int | None = None) -> list[tuple[ProcessView, TrackInfo, Shown]]:
        """Slices that never ended by the end of the walk (after ``walked()``), open-ended; with ``keep``, only the
        oldest past that many, which are taken out of the pairing (a pop carries the others to the next)."""
        opened = self._pairing.still_open() if keep is None else self._pairing.overflow(keep)
        window = self._window
        if window is not None:  # (one that began at or after ``until`` is not in the window)
            opened = [(track, event) for track, event in opened if window.in_window(event[2], MAX_WALL_NS)]
        if self._async is not None and keep is None:
            opened += self._async.still_open()
        out = []
        for (uid, track_id), event in opened:
            process = self.view.processes.get(uid)
            if process is None:
                continue  # forgotten since
            track = self._walk.tracks.get((uid, track_id)) or process.tracks.get(track_id)
            out.append((process, track or TrackInfo(track_id, SOURCE_TRACK, f"track {track_id}"), event))
        return out

    def capture(self) -> dict[str, Any]:
        """The wall-clock span of the frames read (their events' starts lie within) and the query."""
        return {**self._walk.window(), "query": self.selected.describe()}

    def _shown(
        self,
        process: ProcessView,
        track: TrackInfo,
        tables: StreamTables,
        frame: Events,
        only: bytes | None,
        selection: Selection | None,
    ) -> tuple[list[Shown], int]:
        """The events of one stored frame that ``selection`` takes, and how many of its events cannot be shown."""
        offset_ns = process.clock_offset_ns
        pairing, window, async_pairs = self._pairing, self._window, self._async
        track_key = (process.uid, track.track_id)  # not the thread id: thread ids are reused
        phases, shown_shapes = PHASES, SHOWN_SHAPES
        events: list[Shown] = []
        append = events.append
        skipped = 0
        rows = tables.rows(frame)  # (every row read: a frame is decoded whole or not at all)
        for index, (kind, name, ts_ns, dur_ns, args) in enumerate(rows if only is None else compress(rows, only)):
            if not index & 255:
                let_the_loop_in()
            if kind is None or kind.shape not in shown_shapes:
                skipped += 1  # a kind never declared, or a shape this collector cannot show
                continue
            shape = kind.shape
            wall_ns = ts_ns + offset_ns
            if not 0 <= wall_ns <= wall_ns + dur_ns <= MAX_WALL_NS:
                skipped += 1  # its payload's times are none a clock gives (a frame's header holds its first)
                continue
            if shape == "message":
                text, values = render(kind, args) if isinstance(args, list) else (name, None)
                if selection is not None and not selection.event(kind, text, wall_ns, args, dur_ns, track_key):
                    continue
                if values is None:
                    skipped += 1  # a message's values are a list
                    continue
                if kind.name in NOT_MESSAGES:  # (shown as an instant of that category: its args say what it was)
                    append(("i", text, wall_ns, 0, message_args(kind.name, kind.priority, values), kind.name, ""))
                else:
                    append(("i", text, wall_ns, 0, values, kind.name, kind.priority))
                continue
            if selection is not None and not selection.event(kind, name, wall_ns, args, dur_ns, track_key):
                continue
            if shape == "sample":  # a stack id never declared (or past the collector's limits): an empty stack
                append(("P", name, wall_ns, 0, {"stack": tables.stacks.resolve(args) or ()}, "sample", ""))
                continue
            if shape == "span" and kind.id in CALL_KINDS:  # a traced call: its stack id names its code location
                call = call_args(tables.stacks.innermost(args))
                if kind.id == CALL_RAISED:
                    call = {**call, "raised": True} if call is not None else {"raised": True}
                append(("X", name, wall_ns, dur_ns, call, "call", ""))
                continue
            if kind.id == INCIDENT and is_incident(kind):  # (the id first: one compare for every other event)
                append(("i", name, wall_ns, 0, incident_args(name, args), "incident", ""))
                continue
            phase = phases.get(shape)
            if phase is None:  # paired
                if shape[0] == "s":  # source_open, source_close
                    paired = pairing.source(shape, name, wall_ns, track_key, process.uid)
                else:
                    marker_args = args if isinstance(args, dict) else None
                    paired = pairing.marker(shape, name, wall_ns, marker_args, track_key, process.uid)
                if paired is not None and (window is None or window.in_window(paired[2], paired[3])):
                    append(paired)
                continue
            if args is not None and type(args) is not dict:
                # A typed kind's values come in the order of its fields.
                args = (
                    typed_args(kind, args, tables.kinds) if kind.fields and isinstance(args, list) else {"value": args}
                )
            if phase == "X":
                append(("X", name, wall_ns, dur_ns, args, "", ""))
            elif phase == "b" or phase == "e":  # the id pairs a begin with its end, across threads
                async_id = str(args.pop("id", "")) if args is not None else ""
                if async_pairs is None:
                    append((phase, name, wall_ns, 0, args, "async", async_id))
                else:
                    events += async_pairs.take((phase, name, wall_ns, 0, args, "async", async_id), track_key)
            else:
                append((phase, name, wall_ns, 0, args, "", ""))
        return events, skipped

    def report(self) -> dict[str, Any]:
        """The totals of every loss counter over the processes selected, each selected process's counters with its
        tracks', and ``forgotten_processes_totals``: the same counters of the processes forgotten since the collector
        started, whatever the filter (the collector keeps their sums, not who they were), never in the totals (after
        the walk: ``walked()`` and ``shown()`` of each frame)."""
        view, walk, pairing = self.view, self._walk, self._pairing
        per_process: dict[int, Counts] = {}
        per_track: dict[int, list[dict[str, Any]]] = {}
        for (uid, track_id), counts in sorted(view.counts.items()):
            per_process.setdefault(uid, Counts()).add(counts)
            if track_id == FOLDED_TRACK:  # (tracks long gone, counted in their process's total alone)
                continue
            process = view.processes.get(uid)
            # The latest name of a live track, else the name its stored frames carry (an ended track, a task lane),
            # else an ended track's whose events are all gone.
            track = (
                (process.tracks.get(track_id) if process is not None else None)
                or walk.tracks.get((uid, track_id))
                or (process.ended_tracks.get(track_id) if process is not None else None)
            )
            per_track.setdefault(uid, []).append(
                {"track": track_id, "name": track.name if track else None, **store_counts(counts)}
            )
        processes: list[dict[str, Any]] = [
            {
                "pid": p.trace_pid,
                "os_pid": p.pid,
                "host": p.host,
                "process_name": p.name,
                **store_counts(per_process.get(p.uid, Counts())),
                **client_counts(p.client_stats),
                "undecodable_events": walk.undecodable.get(p.uid, 0),
                "unmatched_marker_ends": pairing.unmatched_marker_ends.get(p.uid, 0),
                "source_anomalies": pairing.source_anomalies.get(p.uid, 0),
                "tracks": per_track.get(p.uid, []),
            }
            for p in sorted(walk.processes.values(), key=lambda p: p.uid)
        ]
        forgotten = {**store_counts(view.forgotten), **client_counts(view.forgotten_client)}

        def total(name: str) -> int:
            return min(sum(int(p[name]) for p in processes), MAX_COUNT)

        return {
            **{name: total(name) for name in TOTALS},
            "forgotten_processes_totals": {name: min(forgotten.get(name, 0), MAX_COUNT) for name in TOTALS},
            "processes": processes,
        }


def message_args(category: str, priority: str, values: dict[str, Any] | None) -> dict[str, Any]:
    """A message's args as the snapshot formats show them: its kind's category and priority, then its values (a value
    of either name shown in their place). The walk keeps the three apart (``Shown``): the tables keep them all."""
    return {"category": category, "priority": priority, **(values or {})}


def store_counts(counts: Counts) -> dict[str, int]:
    """A store's counts as snapshots name them, capped at ``MAX_COUNT``."""
    return {name: min(value, MAX_COUNT) for name, value in counts.as_dict().items()}


def client_counts(stats: Stats) -> dict[str, int]:
    """A client's own loss counters (its STATS frames) as snapshots name them."""
    return {
        "client_dropped_events": stats.dropped_events,
        "label_overflow_events": stats.label_overflow_events,
        "clipped_args": stats.clipped_args,
        "rejected_events": stats.rejected_events,
        "client_unacknowledged_events": stats.unacknowledged_events,
        "client_internal_error_events": stats.internal_error_events,  # (of client_dropped_events)
    }
