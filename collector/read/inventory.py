"""What the collector knows of its sources, for ``GET /sources`` (the document itself: ``export/sources_document.py``):
every process, thread and source, with what is held of each, and each process's receive rate.

The live facts (processes, connections, counters) are copied on the event loop (``ProcessFacts``); the times held per
track come from the stored segments' indexes and their TRACK frames, read on a worker thread from a pinned store
snapshot (``scan_segments``): no event is decoded.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.store.processes import ProcessRecord
from ringtrace.collector.store.ring import SegmentView
from ringtrace.collector.store.segments import frame_spans
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frames import FRAME_HEADER, PREAMBLE, FrameType, Track
from ringtrace.wire.model import TrackInfo

__all__ = ["ProcessFacts", "RateSampler", "TrackTimes", "scan_segments"]


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """A process as ``/sources`` shows it, copied on the event loop: what a snapshot knows of it, and more."""

    view: ProcessView
    #: How it reaches the collector: ``native`` (a client's connections) or ``otlp`` (the OTLP receiver).
    via: str
    #: Its clients' connections open (none for an OTLP process), and whether any stream of it is (OTLP's included).
    connections: int
    live: bool
    #: When it was last heard of, wall-clock ns: now while a client of it is connected; None if never here.
    last_seen_wall_ns: int | None
    ended_tracks: dict[int, TrackInfo]
    held_bytes: int

    @classmethod
    def of(cls, process: ProcessRecord, held_bytes: int) -> ProcessFacts:
        live = process.live_connections
        connections = 0 if process.otlp else live
        last_seen_ns = time.time_ns() if connections else process.last_seen_wall_ns or None
        via = "otlp" if process.otlp else "native"
        ended = dict(process.ended_tracks)
        return cls(ProcessView.of(process), via, connections, live > 0, last_seen_ns, ended, held_bytes)


@dataclass(slots=True)
class TrackTimes:
    """What a stored track's frames span (the client's monotonic ns), and its name as its stored frames last gave it."""

    first_ns: int
    last_ns: int
    frames: int = 0
    info: TrackInfo | None = None


def scan_segments(segments: Iterable[SegmentView]) -> dict[tuple[int, int], TrackTimes]:
    """Per (process uid, track id): the span of its stored EVENTS frames (from the index) and its latest TRACK frame.

    Safe on a worker thread while the segments are pinned. A segment whose frames cannot be walked keeps what its
    index says (it is counted undecodable when a snapshot reads it)."""
    found: dict[tuple[int, int], TrackTimes] = {}
    for segment in segments:
        owner = segment.owner
        for *_, track_id, _, first, last in segment.index():
            times = found.get((owner, track_id))
            if times is None:
                found[(owner, track_id)] = TrackTimes(first, last, 1)
            else:
                times.first_ns, times.last_ns = min(times.first_ns, first), max(times.last_ns, last)
                times.frames += 1
        for track in _track_frames(segment):
            times = found.get((owner, track.track_id))
            if times is not None:  # a track with nothing stored is not listed by its stored name
                times.info = TrackInfo(track.track_id, track.kind, track.name, track.thread_id, track.parent)
    return found


def _track_frames(segment: SegmentView) -> Iterable[Track]:
    """The TRACK frames of a segment, found by frame headers alone."""
    buffer = memoryview(segment.buffer)
    for frame_type, start, end in frame_spans(buffer, PREAMBLE.size, segment.used):
        if frame_type == FrameType.TRACK:
            try:
                yield Track.decode_body(bytes(buffer[start + FRAME_HEADER.size : end]))
            except ProtocolError:
                return


class RateSampler:
    """Each process's receive rate over the last ``window_s``, from totals sampled now and then (``sample``)."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, dict[int, tuple[int, int]]]] = deque()

    def sample(self, received: dict[int, tuple[int, int]], now_s: float | None = None) -> None:
        """Take (events, bytes) received so far per process uid."""
        now_s = time.monotonic() if now_s is None else now_s
        self._samples.append((now_s, received))
        while len(self._samples) > 2 and now_s - self._samples[1][0] >= self.window_s:
            self._samples.popleft()

    def rate(self, uid: int, now: tuple[int, int], now_s: float | None = None) -> tuple[float, float] | None:
        """(events/s, bytes/s) since the oldest sample that knew the process, which has received ``now`` (events,
        bytes); None before there is one."""
        now_s = time.monotonic() if now_s is None else now_s
        for when, totals in self._samples:
            before = totals.get(uid)
            if before is not None and now_s - when > 0.5:
                elapsed = now_s - when
                return (now[0] - before[0]) / elapsed, (now[1] - before[1]) / elapsed
        return None
