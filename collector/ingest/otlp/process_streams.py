"""Each OTLP resource's native stream (``ProcessStream``): its loopback connection, encoder, tracks, log kinds and the
lanes of its traces, kept across requests; and one process's part of a request on its way to it (``Delivery``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from ringtrace.collector.ingest.otlp.logs import LOG_FIELDS, LOG_TEXT
from ringtrace.collector.ingest.otlp.loopback import LoopbackClosed, LoopbackConnection
from ringtrace.collector.ingest.otlp.resources import Lane, ProcessEvents
from ringtrace.collector.ingest.otlp.trace_lanes import TraceLane, trace_lanes
from ringtrace.wire.arg_values import normalise_values
from ringtrace.wire.frames import encode
from ringtrace.wire.message_format import PRIORITIES
from ringtrace.wire.model import SOURCE_TRACK, THREAD_TRACK, KindRegistry, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder
from ringtrace.wire.table_frames import KindSpec

__all__ = [
    "FIRST_TRACK_ID",
    "MAX_LOG_CATEGORIES",
    "MAX_THREAD_TRACKS",
    "NAMED_TRACKS",
    "Delivery",
    "ProcessStream",
    "Tally",
]

#: Threads a process's data is drawn on at most; data of more threads goes to its ``threads`` track.
MAX_THREAD_TRACKS: Final = 1_000
#: Tracks of a process's stream that are neither a thread's nor a lane of a trace: ``threads``, ``logs``, ``metrics``.
NAMED_TRACKS: Final = 3
#: The first track id of a process's stream, and its last (track ids are 32 bits): past it, they start again.
FIRST_TRACK_ID: Final = 1 << 24
_LAST_TRACK_ID: Final = 2**32 - 1
#: Log categories (scope names) a process's messages keep at most; those of more are the ``log`` category's.
MAX_LOG_CATEGORIES: Final = 100


class ProcessStream:
    """A resource's native stream: its loopback connection, encoder, tracks, log kinds and the lanes of its traces,
    kept across requests."""

    def __init__(self, connection: LoopbackConnection, first_track_id: int) -> None:
        self.connection = connection
        self.registry = KindRegistry()
        self.encoder = StreamEncoder(registry=self.registry)
        self.tracks: dict[Lane, TrackInfo] = {}
        # Not reused before the last one (the lanes of traces end; a stream of the process opened again goes on from
        # here), and far above a ringtrace client's: shown as one process with a client's (the same OS process), its
        # tracks keep their own tids.
        self.next_track_id = first_track_id
        self.trace_lanes = trace_lanes()
        #: Threads drawn on tracks of their own, at most: fewer than ``MAX_THREAD_TRACKS`` where the tracks its
        #: connection may hold, less its traces' lanes and named tracks, are fewer (``OtlpReceiver._open``).
        self.max_threads = MAX_THREAD_TRACKS
        self.log_kinds: dict[tuple[str, str], KindSpec] = {}
        self.lock = asyncio.Lock()

    def track(self, lane: Lane) -> TrackInfo:
        track = self.tracks.get(lane)
        if track is None:
            if isinstance(lane, tuple) and len(self.tracks) - self.trace_lanes.live >= self.max_threads:
                return self.track("threads")
            if isinstance(lane, TraceLane):  # a track of the process, beside its threads
                track = TrackInfo(self.next_track_id, SOURCE_TRACK, lane.name)
            else:
                thread_id, name = lane if isinstance(lane, tuple) else (0, lane)
                track = TrackInfo(self.next_track_id, THREAD_TRACK, name, thread_id)
            self.next_track_id = self.next_track_id + 1 if self.next_track_id < _LAST_TRACK_ID else FIRST_TRACK_ID
            self.tracks[lane] = track
        return track

    def log_kind(self, category: str, priority: str) -> KindSpec:
        if len(self.log_kinds) >= MAX_LOG_CATEGORIES * len(PRIORITIES):
            category = "log"
        kind = self.log_kinds.get((category, priority))
        if kind is None:
            kind = self.log_kinds[(category, priority)] = self.registry.register(
                category, "message", LOG_FIELDS, normalise_values, LOG_TEXT, priority
            )
        return kind

    def pack(self, process: ProcessEvents) -> list[bytes]:
        """The process's events as frames on this stream, the spans of its traces on their lanes, and a STATS frame
        that counts its items refused. The lanes of the traces forgotten end as they are, their spans of this request
        sent first: a request of more traces than the stream may hold tracks keeps within its bound."""
        frames: list[bytes] = []
        for lane, records in self.records(process).items():
            frames += self._frames(lane, records)
        lanes = self.trace_lanes
        spans: dict[Lane, list[Any]] = {}
        for span in process.trace_spans:
            spans.setdefault(lanes.place(span), []).extend(span.records)
            for retired in lanes.take_retired():
                placed = spans.pop(retired, None)
                if placed is not None:
                    frames += self._frames(retired, placed)
                track = self.tracks.pop(retired, None)
                ended = None if track is None else self.encoder.retire(track)
                if ended is not None:
                    frames.append(ended)
        frames += self._lanes_frames(spans)
        # (counted in the process's counters, in every snapshot: its items refused, its spans' events and links dropped)
        self.encoder.rejected_events += process.rejected + process.dropped
        frames.append(encode(self.encoder.stats(0, 0, 0)))
        return frames

    def _lanes_frames(self, spans: dict[Lane, list[Any]]) -> list[bytes]:
        """The frames of the spans on each lane: every lane's control frames (its TRACK frame, the strings it adds)
        before all their EVENTS frames, which the collector then stores as one run rather than one a lane (a lane a
        trace, and most traces a span or two of a service's); in order where the string table starts again (an
        EVENTS frame packed before is of the earlier table)."""
        frames: list[bytes] = []
        control: list[bytes] = []
        events: list[bytes] = []
        epoch = self.encoder.strings.epoch
        for lane, records in spans.items():
            for batch, _ in self.encoder.encode_pieces(self.track(lane), records):
                if batch.epoch != epoch:
                    frames += control
                    frames += events
                    control, events, epoch = [], [], batch.epoch
                control += batch.control
                events += (frame for frame, _ in batch.events)
        frames += control
        frames += events
        return frames

    def _frames(self, lane: Lane, records: list[Any]) -> list[bytes]:
        """The frames of ``records`` on the track of ``lane`` (declared if new)."""
        frames: list[bytes] = []
        for batch, _ in self.encoder.encode_pieces(self.track(lane), records):
            frames += batch.control
            frames += (frame for frame, _ in batch.events)
        return frames

    def records(self, process: ProcessEvents) -> dict[Lane, list[Any]]:
        """The process's records per lane but its spans of traces: its log records among them as messages."""
        records = process.records
        for lane, category, priority, ts, values in process.messages:
            kind = self.log_kind(category, priority)
            records.setdefault(lane, []).extend((kind.id, kind.name, ts, ts, values))
        return records


class Delivery:
    """One process's part of a request: its counts, and its frames to send on its stream (whose lock it holds)."""

    __slots__ = ("closed", "dropped", "frames", "items", "key", "process_name", "rejected", "stream", "why")

    def __init__(self, process: ProcessEvents) -> None:
        self.items, self.rejected, self.why = process.items, process.rejected, process.why
        self.dropped, self.key = process.dropped, process.key
        self.process_name = process.hello.process_name
        self.frames: list[bytes] = []
        self.stream: ProcessStream | None = None
        self.closed: LoopbackClosed | None = None

    async def send(self) -> int:
        """Send the frames and let the stream go; returns how many items the store refused.

        Raises:
            LoopbackClosed: the stream could not be opened, or closed.
        """
        if self.closed is not None:
            raise self.closed
        stream = self.stream
        assert stream is not None
        try:
            delivered = await stream.connection.send(self.frames)
        finally:
            self.release()
        if (process := stream.connection.process) is not None:
            process.last_seen_wall_ns = time.time_ns()
        # (A refused event of a span may be its begin, its end or one of its events: at most every item is.)
        return min(delivered.refused, self.items - self.rejected)

    def release(self) -> None:
        """Let the stream go (once), sent or not: frames packed and never sent leave it to a closed connection."""
        stream, self.stream, self.frames = self.stream, None, []
        if stream is not None:
            stream.lock.release()


class Tally:
    """What the deliveries of one request (of all its pieces) came to: its items, those refused before they were
    stored (``rejected``: by the decoding; ``refused``: by a stream or the store), the first reason given, the reason a
    stream closed (and the processes whose stream did), and its spans' events and links dropped (past
    ``--otlp-max-span-events``)."""

    __slots__ = ("closed", "closed_keys", "dropped", "items", "refused", "rejected", "why")

    def __init__(self) -> None:
        self.items = self.rejected = self.refused = self.dropped = 0
        self.why = self.closed = ""
        self.closed_keys: set[str] = set()

    @property
    def stored(self) -> int:
        return self.items - self.rejected - self.refused

    def not_stored(self, items: int, why: str) -> None:
        """``items`` refused before they were read (resources past ``--otlp-max-processes``), with the reason."""
        self.items += items
        self.refused += items
        self.why = self.why or why

    async def send(self, delivery: Delivery) -> None:
        """Send ``delivery``'s frames (and let its stream go), counted.

        Raises:
            LoopbackClosed: its stream closed (counted: what it had not stored is refused).
        """
        self.items += delivery.items
        self.rejected += delivery.rejected
        self.dropped += delivery.dropped
        self.why = self.why or delivery.why
        try:
            self.refused += await delivery.send()
        except LoopbackClosed as exc:
            self.refused += delivery.items - delivery.rejected
            self.closed = self.closed or exc.reason
            self.closed_keys.add(delivery.key)
            raise
