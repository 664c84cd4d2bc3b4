"""What a snapshot reads, the walk over its frames that every snapshot format starts from, and the shape of an event
as snapshots show it (``Shown``).

Pure functions: no asyncio, safe to run on a worker thread while ingest goes on. Segments are read oldest first, each
with its own session decoder (a segment holds the session frames its events need); within a segment frames come in
the order they arrived. What is read is the selection's to say (``selection.py``), from the coarsest level down:
processes, then segments by their index (a segment with no frame in the time window is not decoded: the index's
start times widened by how far the segment's spans and pairs reach, ``reach.py``, measured only where the index alone
would leave it out), then frames by their header (track, times), then events. ``prepare`` builds that one selection,
after the first passes a ``limit`` (where its newest events start) and a ``trace_id`` (its spans) take, and the walk
that consults it.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Final

from ringtrace.collector.read.pool import let_the_loop_in
from ringtrace.collector.read.reach import NO_REACH, SegmentReach, segment_reach
from ringtrace.collector.read.selection import EventFilter, Selection, shown_name
from ringtrace.collector.read.trace_spans import TraceSpans
from ringtrace.collector.store.processes import ProcessRecord
from ringtrace.collector.store.ring import Counts, SegmentView, StoreSnapshot
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frames import Events, Frame, Stats
from ringtrace.wire.model import FIRST_SAMPLER_TRACK_ID, INCIDENT, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.stream_tables import StreamTables
from ringtrace.wire.table_frames import KindSpec

__all__ = [
    "MAX_WALL_NS",
    "PAIRED_SHAPES",
    "PHASES",
    "SHOWN_SHAPES",
    "FrameWalk",
    "ProcessView",
    "Shown",
    "SnapshotView",
    "WalkedFrame",
    "first_showing",
    "incident_args",
    "is_incident",
    "is_shown",
    "log_once",
    "prepare",
    "process_label",
    "segment_stream",
    "taken_events",
]

log = logging.getLogger("ringtrace.collector.export")

#: Shapes shown one event for one, and how (Chrome's phase letters: a slice, an instant, a counter value, an async
#: slice's begin and end).
PHASES: Final = {"span": "X", "instant": "i", "counter": "C", "async_begin": "b", "async_end": "e"}
#: Shapes whose events pair up across frames (``pairing.py``).
PAIRED_SHAPES: Final = frozenset({"marker_start", "marker_end", "source_open", "source_close"})
#: Every shape a snapshot shows.
SHOWN_SHAPES: Final = frozenset({*PHASES, *PAIRED_SHAPES, "message", "sample"})
#: The latest wall-clock ns a snapshot shows (2262): what a 64-bit signed integer holds, as JSON and protobuf take.
MAX_WALL_NS: Final = 2**63 - 1
#: Tracks that are not OS threads (asyncio task lanes, sources) get tids from here up: above any real thread id,
#: within the 32 bits viewers keep.
_SYNTHETIC_TID_BASE: Final = 2**31
#: What ``segment_stream`` copies to its decoder at a time.
_READ_BYTES: Final = 256 * 1024


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
    #: Tracks that ended (the latest ``ENDED_TRACKS_REMEMBERED``), by id: they name one whose events are all gone.
    ended_tracks: dict[int, TrackInfo] = field(default_factory=dict)
    #: OS thread id -> the thread track that shows as that thread (the first declared): the tracks of other timelines
    #: recorded on the thread are shown beside it, never under its tid.
    thread_owners: dict[int, TrackInfo] = field(default_factory=dict)
    #: OS thread id -> the stand-in a sampler's track met before the thread's own shares it with (``shares_thread``).
    stand_ins: dict[int, TrackInfo] = field(default_factory=dict)

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
            dict(process.ended_tracks),
            _thread_owners([*process.ended_tracks.values(), *process.tracks.values()]),
        )

    def tid(self, track: TrackInfo) -> int:
        """The Chrome ``tid`` of a track: the OS thread id for the thread's own track, a synthetic one above them
        otherwise (a task lane, a source, another timeline's track of the thread, a sampler's met before the
        thread's own)."""
        if track.kind == THREAD_TRACK and self.shares_thread(track) is None:
            return int(track.thread_id)
        if track.track_id >= FIRST_SAMPLER_TRACK_ID:  # (kept within 32 bits, above the others' but for 2**30 tracks)
            return int(_SYNTHETIC_TID_BASE + 2**30 + (track.track_id - FIRST_SAMPLER_TRACK_ID) % 2**30)
        return int(_SYNTHETIC_TID_BASE + track.track_id)

    def shares_thread(self, track: TrackInfo) -> TrackInfo | None:
        """For a thread track of a thread that another track shows as (one of another timeline, say): that track.

        A live process's threads are known in advance (the lowest track id shows as the thread); a file's or one read
        back from the data dir, as a snapshot meets them: the first one it meets. Never a sampler's track
        (``FIRST_SAMPLER_TRACK_ID`` and up), which a file may hold before the thread's own: it shares the thread with
        its own track, or, none met yet, with a stand-in for it (``thread_stand_in``); the thread's own track, when
        met, shows as the thread, with its name and OS thread id."""
        if track.kind != THREAD_TRACK or track.track_id < 0:  # (a stand-in is a thread of its own)
            return None
        owners = self.thread_owners
        owner = owners.get(track.thread_id)
        if owner is None:
            if track.track_id >= FIRST_SAMPLER_TRACK_ID:
                return self.thread_stand_in(track.thread_id)
            owner = owners[track.thread_id] = track
        return owner if owner.track_id != track.track_id else None

    def thread_stand_in(self, thread_id: int) -> TrackInfo:
        """The thread ``thread_id`` shown before any track of its own is met: nameless, with a track id no track has
        (negative), the same each time asked."""
        stand_in = self.stand_ins.get(thread_id)
        if stand_in is None:
            stand_in = self.stand_ins[thread_id] = TrackInfo(-1 - len(self.stand_ins), THREAD_TRACK, "", thread_id)
        return stand_in


def _thread_owners(tracks: list[TrackInfo]) -> dict[int, TrackInfo]:
    owners: dict[int, TrackInfo] = {}
    for track in sorted(tracks, key=lambda track: track.track_id):
        if track.kind == THREAD_TRACK and track.track_id < FIRST_SAMPLER_TRACK_ID:
            owners.setdefault(track.thread_id, track)
    return owners


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
    #: Wall-clock ns that a Chrome snapshot's ``ts`` 0 stands for: fixed for the life of the collector.
    origin_ns: int = 0


def is_incident(kind: KindSpec) -> bool:
    """Whether a stream's declared ``kind`` is the program's incident (``tl.incident``): the built-in id, declared as
    an instant (a stream is not trusted to declare it so; a reader that is not told shows it as an instant)."""
    return kind.id == INCIDENT and kind.shape == "instant"


def incident_args(reason: str, args: object) -> dict[str, Any]:
    """An incident's args as readers show them: ``reason`` (its name, which rules match) first, then its own (one
    that is not a map as ``value``); the name wins over an arg called ``reason``."""
    shown: dict[str, Any] = {"reason": reason}
    if type(args) is dict:
        shown.update(args)
        shown["reason"] = reason
    elif args is not None:
        shown["value"] = args
    return shown


#: One event as a snapshot shows it, whatever the format: ``(phase, name, wall_ns, dur_ns, args, category, async_id)``.
#: ``phase``: "X" a slice, "B" a slice not ended by the end of the snapshot, "i" an instant (a message too), "C" a
#: counter's values, "b" and "e" the begin and end of an async slice; ``name``: a message's rendered text; ``wall_ns``:
#: wall-clock ns, when it happened or a slice's start; ``dur_ns``: a slice's duration ("X"), else 0; ``args``: a map or
#: None; ``category``: a message's category, "async" for an async slice, "call" for a traced call, "incident" for an
#: incident, else ""; ``async_id``: what pairs an async begin with its end, a message's priority (its kind's: apart
#: from its values, which are its args, so that a value of any name is one of them), else "". A plain tuple: one is
#: made per event shown, and a NamedTuple costs a call each.
Shown = tuple[str, str, int, int, dict[str, Any] | None, str, str]


WalkedFrame = tuple[ProcessView, TrackInfo, StreamTables, Events]


def first_showing(processes: dict[int, ProcessView]) -> dict[int, ProcessView]:
    """The process each pid shown is named after: the first known of those that show it (more than one: OTLP data of
    a ringtrace client's OS process, ``Registry._trace_pid``)."""
    first: dict[int, ProcessView] = {}
    for uid in sorted(processes):
        first.setdefault(processes[uid].trace_pid, processes[uid])
    return first


def process_label(process: ProcessView) -> str:
    """The name a process is shown by: its own, with its OS pid where it shows another (containers all run pid 1);
    not a pid of 0, which only says an OTLP resource named none."""
    return (
        process.name if process.trace_pid == process.pid or not process.pid else f"{process.name} (pid {process.pid})"
    )


class FrameWalk:
    """The stored EVENTS frames a selection may take, oldest segment first, in the order they arrived within each;
    what it met on the way: the tracks of the frames it gave, and events that cannot be decoded.

    Every choice of what to read is the selection's (``selection.py``): processes, segments by their index, frames by
    their header (with a limit's cutoff and a trace's spans, once the first passes found them). A walk that
    ``releases`` (the last one over a view: not a first pass) lets go of each segment once it has read it."""

    def __init__(
        self, view: SnapshotView, selection: Selection, *, releases: bool = False, holding: bytes = b""
    ) -> None:
        self.view = view
        self.releases = releases
        self.selection = selection
        self.processes = {uid: p for uid, p in view.processes.items() if selection.selects_process(p)}
        self.tracks: dict[tuple[int, int], TrackInfo] = {}
        self.undecodable: dict[int, int] = {}
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        #: The segment being read, its reach once measured (None: not yet), and its EVENTS frames met so far.
        self._segment: SegmentView | None = None
        self._reach: SegmentReach | None = None
        self._entry = 0
        #: Whether the window has bounds that a reach widens (``since``: ahead; ``until``: back).
        window = selection.filter
        self._widens = window.since_ns is not None or window.until_ns is not None
        #: Text every segment read holds (a trace id's: ``trace_spans``): one that does not is not decoded.
        self._holding = holding

    def segments(self) -> Iterator[tuple[ProcessView, SegmentView]]:
        """The segments of the processes selected whose index holds a frame in the time window."""
        selection = self.selection
        for segment in self.view.frames.segments:
            process = self.processes.get(segment.owner)
            if process is None:
                self.done_with(segment)
                continue
            self._segment, self._reach, self._entry = segment, None, 0
            if selection.by_time and not self._in_time(process, segment):
                self.done_with(segment)
                continue  # nothing of it in the window: not even decoded
            if self._holding and segment.buffer.find(self._holding, 0, segment.used) < 0:
                self.done_with(segment)
                continue  # no frame of it holds the text
            yield process, segment

    def _in_time(self, process: ProcessView, segment: SegmentView) -> bool:
        """Whether the segment's index holds a frame that may hold events in the time window: by its start times,
        else widened by the segment's reach."""
        selection, offset = self.selection, process.clock_offset_ns
        times = [(first + offset, last + offset) for *_, first, last in segment.index()]
        if any(selection.in_time(first, last) for first, last in times):
            return True
        measured = self._reach_of(segment)
        if measured is None:
            return False
        of_frame = measured.of_frame
        return measured.unpaired or any(
            selection.in_time(first, last, *of_frame(entry)) for entry, (first, last) in enumerate(times)
        )

    def _reach_of(self, segment: SegmentView) -> SegmentReach | None:
        """How far the segment's events reach past their starts (measured once: ``reach.py``); None for a window
        with no bound a reach widens."""
        if not self._widens:
            return None
        if self._reach is None:
            self._reach = segment_reach(segment, self.view.limits)
        return self._reach

    def wanted(self, process: ProcessView, track: TrackInfo, frame: Events) -> bool:
        """Whether the frame may hold selected events (by its track and times); if so it counts as read. A frame
        whose times fall outside what wall-clock ns can be (``MAX_WALL_NS``) cannot be shown: undecodable."""
        offset = process.clock_offset_ns
        first, last = frame.first_ts_ns + offset, frame.last_ts_ns + offset
        entry, self._entry = self._entry, self._entry + 1  # (its place in the segment's index)
        if not 0 <= first <= last <= MAX_WALL_NS:
            self.undecodable[process.uid] = self.undecodable.get(process.uid, 0) + frame.count
            log_once(process, frame.count, ValueError(f"frame times {first}..{last} ns are not wall-clock times"))
            return False
        key = (process.uid, track.track_id)
        selection = self.selection
        reach = NO_REACH
        if selection.by_time and not selection.in_time(first, last) and self._segment is not None:
            measured = self._reach_of(self._segment)
            if measured is not None:
                # A frame of pairs is read whatever its times: the other end of a pair must find it.
                reach = (MAX_WALL_NS, MAX_WALL_NS) if measured.holds_pairs(entry) else measured.of_frame(entry)
        if not selection.frame(key, process.tracks.get(track.track_id, track).name, first, last, frame, reach):
            return False
        self.tracks[key] = track
        self.first_ns = first if self.first_ns is None else min(self.first_ns, first)
        self.last_ns = last if self.last_ns is None else max(self.last_ns, last)
        return True

    def frames(self) -> Iterator[WalkedFrame]:
        """The frames that may hold selected events, with what decodes them."""
        for process, segment in self.segments():
            for decoder, frame in self._read(process, segment):
                if type(frame) is Events:
                    tables = decoder.tables
                    yield process, self._track_of(process, tables, frame), tables, frame

    def segment_frames(self) -> Iterator[tuple[ProcessView, Iterator[tuple[SessionDecoder, Frame]]]]:
        """Each segment that may hold selected events, with its frames as stored: the session frames, and the
        EVENTS frames that may hold selected events (each with the decoder that read it, which holds its bytes). A
        segment's frames are read before the next segment is given."""
        for process, segment in self.segments():
            yield process, self._read(process, segment)

    def _read(self, process: ProcessView, segment: SegmentView) -> Iterator[tuple[SessionDecoder, Frame]]:
        """The segment's frames but EVENTS frames that hold nothing selected; a stream that breaks costs the events
        after the break, counted (what came before it is given)."""
        decoded = 0
        try:
            for decoder, frame in segment_stream(segment, self.view.limits):
                if type(frame) is not Events:
                    yield decoder, frame
                    continue
                decoded += frame.count
                if self.wanted(process, decoder.tables.tracks[frame.track_id], frame):
                    yield decoder, frame
        except ProtocolError as exc:  # the segment's stream itself is broken: the rest of it cannot be read
            self.unreadable(process, segment, decoded, exc)
        finally:
            self.done_with(segment)

    def _track_of(self, process: ProcessView, tables: StreamTables, frame: Events) -> TrackInfo:
        """The frame's track; a task lane's thread is named too, whether it has events or none."""
        tracks = tables.tracks
        track = tracks[frame.track_id]
        if track.parent and track.parent in tracks:
            self.tracks.setdefault((process.uid, track.parent), tracks[track.parent])
        return track

    def done_with(self, segment: SegmentView) -> None:
        """Nothing more is read of ``segment``: a walk that ``releases`` lets the store reuse it at once."""
        if self.releases:
            self.view.frames.release(segment)

    def unreadable(self, process: ProcessView, segment: SegmentView, decoded: int, exc: ProtocolError) -> None:
        """A segment's stream broke after ``decoded`` of its events: the others are undecodable."""
        lost = sum(count for _, _, _, count, _, _ in segment.index()) - decoded
        self.undecodable[process.uid] = self.undecodable.get(process.uid, 0) + lost
        log_once(process, lost, exc)

    def window(self) -> dict[str, int | None]:
        """The wall-clock span of the frames given (their events' starts lie within)."""
        return {"first_frame_wall_ns": self.first_ns, "last_frame_wall_ns": self.last_ns}


def prepare(view: SnapshotView, selected: EventFilter, *, pairs: bool = False) -> tuple[FrameWalk, Selection | None]:
    """The walk over what ``selected`` may hold and the one selection it consults, built after first passes that
    find the spans of a ``trace_id`` and the cutoff of a ``limit``. The selection is None when it takes every event
    of the frames walked (then no event need be matched). ``pairs``: the caller pairs paired events and takes them
    by their pair's times (``Selection.pairs``)."""
    spans = trace_spans(view, selected) if selected.trace_id is not None else None
    cutoff = None
    if selected.limit is not None:
        cutoff = _limit_cutoff(FrameWalk(view, Selection(selected, spans=spans)), selected.limit)
    selection = Selection(selected, cutoff, spans, pairs=pairs)
    walk = FrameWalk(view, selection, releases=True)
    return walk, selection if selected.by_event or cutoff is not None else None


def trace_spans(view: SnapshotView, selected: EventFilter) -> TraceSpans:
    """The spans of ``selected.trace_id`` on each track of what ``selected`` may hold (``trace_spans.py``): a first
    pass over its frames. From the oldest frame, whatever ``since`` says: a span that began before it may hold events
    after it."""
    assert selected.trace_id is not None
    spans = TraceSpans(selected.trace_id)
    needle = selected.trace_id.encode()  # (``TraceSpans.mentions``: a segment without it holds none of the spans)
    for process, track, tables, frame in FrameWalk(
        view, Selection(replace(selected, since_ns=None)), holding=needle
    ).frames():
        spans.read((process.uid, track.track_id), tables, frame, process.clock_offset_ns)
    return spans.done()


def taken_events(
    process: ProcessView, tables: StreamTables, frame: Events, selection: Selection
) -> list[tuple[int, int, int]] | None:
    """(index in the frame, start, duration) of the frame's events that ``selection`` takes, times as stored; None
    if the frame cannot be decoded."""
    offset_ns = process.clock_offset_ns
    try:
        rows = list(tables.rows(frame))
    except ProtocolError:
        return None
    by_name = selection.filter.name is not None
    track = (process.uid, frame.track_id)
    return [
        (index, ts_ns, dur_ns)
        for index, (kind, name, ts_ns, dur_ns, args) in enumerate(rows)
        if selection.event(
            kind, shown_name(kind, name, args) if by_name else name, ts_ns + offset_ns, args, dur_ns, track
        )
    ]


def _limit_cutoff(walk: FrameWalk, limit: int) -> tuple[int, int] | None:
    """Where the newest ``limit`` selected events start: (the oldest start kept, how many kept start then); None
    when fewer are selected. Frames wholly older than the ``limit``-th newest start seen so far are not decoded."""
    selection = walk.selection
    newest: list[int] = []  # a min-heap of the newest starts seen
    for process, _, tables, frame in walk.frames():
        offset = process.clock_offset_ns
        if len(newest) == limit and frame.last_ts_ns + offset < newest[0]:
            continue
        try:
            rows = list(tables.rows(frame))
        except Exception:  # counted as undecodable by the export pass
            continue
        track = (process.uid, frame.track_id)
        for kind, name, ts_ns, dur_ns, args in rows:
            if kind is None or not is_shown(kind):
                continue
            wall_ns = ts_ns + offset
            name_shown = shown_name(kind, name, args) if selection.filter.name is not None else name
            if not selection.event(kind, name_shown, wall_ns, args, dur_ns, track):
                continue
            if len(newest) < limit:
                heapq.heappush(newest, wall_ns)
            elif wall_ns > newest[0]:
                heapq.heapreplace(newest, wall_ns)
    if len(newest) < limit:
        return None
    cutoff = newest[0]
    return cutoff, sum(1 for ts in newest if ts == cutoff)


def is_shown(kind: KindSpec) -> bool:
    """Whether events of ``kind`` appear in a snapshot (a shape this collector knows how to show)."""
    return kind.shape in SHOWN_SHAPES


def segment_stream(segment: SegmentView, limits: Limits) -> Iterator[tuple[SessionDecoder, Frame]]:
    """Each frame of a segment, with the decoder that read it (a fresh one per segment: it decodes alone).

    The segment is copied to the decoder a piece at a time: a copy holds the GIL, and a segment's megabytes at once
    would hold up the event loop (a few ms each, four snapshots at once). Each frame lets the loop in if it waits
    (``pool.py``)."""
    decoder = SessionDecoder(limits, live=False)
    for start in range(0, segment.used, _READ_BYTES):
        segment.read_into(decoder, start, min(start + _READ_BYTES, segment.used))
        for frame in decoder:
            let_the_loop_in()
            yield decoder, frame
    decoder.receive_data(b"")
    for frame in decoder:
        yield decoder, frame


_logged_uids: set[int] = set()


def log_once(process: ProcessView, events: int, exc: Exception) -> None:
    """One log line per process: why its events cannot be exported (they are counted in every snapshot)."""
    if process.uid in _logged_uids:
        return
    if len(_logged_uids) >= 100_000:  # a collector that runs for months: forget who was logged, not grow
        _logged_uids.clear()
    _logged_uids.add(process.uid)
    why = str(exc) if isinstance(exc, ProtocolError) else f"{type(exc).__name__}: {exc}"
    log.warning(
        "cannot export %d events of %s (pid %d): %s; counted as undecodable_events (logged once per process)",
        events,
        process.name,
        process.pid,
        why,
    )
