"""The link's send queue: frames waiting to go to the collector, bounded in bytes, and the one going out. Sans-I/O.

Theory of operation
-------------------
Each item is ``(frame, events)``: an EVENTS frame with its event count, or a control frame with 0. An EVENTS frame
that does not fit in ``max_bytes`` is dropped and counted; control frames are always taken, since the stream needs
every one of them, and ``control_overflow`` says when they pile up past twice ``max_bytes`` (a peer that does not
read). Control frames are queued only while welcomed: after a reconnect the prefix carries them all again, so a
connection that breaks drops them (``cut``), with the frame cut short, whose events are counted as dropped.

A track that ends while EVENTS frames of it are queued is remembered (``retire``) until those leave the queue: if the
connection is made again first, ``rebuild`` declares it again right before its first frame and ends it right after
its last one, because the new connection's prefix only declares the tracks alive then.

The queue knows the string table's epoch each EVENTS frame was packed in (``epochs``, runs of frames): after a
reconnect the prefix carries only the current epoch's strings, so ``repacked`` packs those of earlier epochs again,
behind the STRINGS frames they need (the table may start again on the way, as it does when events are recorded).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

from ringtrace.wire.frame_types import EVENTS_HEADER, FRAME_HEADER, FrameType
from ringtrace.wire.frames import encode
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.stream_encoder import EncodedBatch, StreamEncoder
from ringtrace.wire.table_frames import Track

__all__ = ["Kept", "LinkCounters", "SendQueue", "events_track_id"]

#: Frames one gathered send takes at most (well under any system's IOV_MAX).
_GATHERED_FRAMES = 256
#: A frame kept for a new connection: its bytes, its events (0: a control frame), the string table epoch it needs.
Kept = tuple[bytes, int, int]


@dataclass(slots=True)
class LinkCounters:
    """What the link counts (its driver, a listener, counts into ``dropped_*`` too)."""

    sent_events: int = 0
    #: Never delivered: queue full, a frame cut by a disconnect, an event too large for a frame.
    dropped_events: int = 0
    dropped_frames: int = 0
    #: Sent on a connection that broke before the collector acknowledged them.
    unacknowledged_events: int = 0
    #: The collector received and could not store them (its REFUSED frames); it counts them too.
    refused_events: int = 0
    connects: int = 0
    #: Of ``dropped_events``: in flight when a pass of the streamer's thread failed on an unexpected error.
    internal_error_events: int = 0


def events_track_id(frame: bytes) -> int:
    """The track id of an EVENTS frame."""
    return int(EVENTS_HEADER.unpack_from(frame, FRAME_HEADER.size)[2])


def _is_stats(frame: bytes) -> bool:
    return frame[FRAME_HEADER.size - 1] == FrameType.STATS


class SendQueue:
    """Frames in the order they are to be sent (``(frame, events)``, events 0 for a control frame), and the frame
    going out now; drops and sends are counted in ``counters``."""

    __slots__ = (
        "_counters",
        "_epoch_runs",
        "_items",
        "_out",
        "_out_events",
        "_per_track",
        "_retired",
        "max_bytes",
        "queued_bytes",
        "stats_pending",
    )

    def __init__(self, max_bytes: int, counters: LinkCounters) -> None:
        self.max_bytes = max_bytes
        self.queued_bytes = 0
        self._counters = counters
        self._items: deque[tuple[bytes, int]] = deque()
        self._out: memoryview | None = None  # the frame going out
        self._out_events = 0
        #: A STATS frame is queued (the newest says everything: one at a time is enough).
        self.stats_pending = False
        #: Queued EVENTS frames per track id.
        self._per_track: dict[int, int] = {}
        #: Tracks that ended while EVENTS frames of theirs were queued, by id, until those are sent.
        self._retired: dict[int, TrackInfo] = {}
        #: The queued EVENTS frames' string table epochs, oldest first: ``[epoch, frames]`` runs.
        self._epoch_runs: deque[list[int]] = deque()

    def __bool__(self) -> bool:
        return bool(self._items)

    @property
    def event_count(self) -> int:
        """Events in the queued EVENTS frames (not the one going out)."""
        return sum(count for _, count in self._items)

    @property
    def unsent_events(self) -> int:
        """Events queued or going out."""
        return self.event_count + self._out_events

    @property
    def epochs(self) -> set[int]:
        """The string table epochs the queued EVENTS frames were packed in."""
        return {epoch for epoch, _ in self._epoch_runs}

    @property
    def sending(self) -> bool:
        return self._out is not None

    @property
    def control_overflow(self) -> bool:
        """Control frames piled up past twice ``max_bytes``: a peer that does not read."""
        return self.queued_bytes > 2 * self.max_bytes

    def enqueue(self, batch: EncodedBatch, *, control: bool) -> None:
        """Queue one run's frames: its control frames if ``control``, then its EVENTS frames, each dropped and counted
        if it does not fit."""
        if control:
            for frame in batch.control:
                self.push_control(frame)
        for frame, count in batch.events:
            if self.queued_bytes + len(frame) > self.max_bytes:
                self._counters.dropped_events += count
                self._counters.dropped_frames += 1
                continue
            self._items.append((frame, count))
            self.queued_bytes += len(frame)
            track_id = events_track_id(frame)
            self._per_track[track_id] = self._per_track.get(track_id, 0) + 1
            self._count_epoch(batch.epoch)

    def push_control(self, frame: bytes) -> None:
        self._items.append((frame, 0))
        self.queued_bytes += len(frame)
        if _is_stats(frame):
            self.stats_pending = True

    def start(self, first: bytes) -> None:
        """Send ``first`` (the preamble and HELLO) before anything queued."""
        self._out, self._out_events = memoryview(first), 0

    def next_bytes(self, *, welcomed: bool) -> memoryview | None:
        """The bytes to send next (the same until ``sent`` says they went), or None. Queued frames go out only
        ``welcomed``."""
        if self._out is None:
            if not welcomed or not self._items:
                return None
            frame, count = self._items.popleft()
            self.queued_bytes -= len(frame)
            if count:
                self._unqueued(frame)
            elif _is_stats(frame):
                self.stats_pending = False
            self._out, self._out_events = memoryview(frame), count
        return self._out

    def next_buffers(self, *, welcomed: bool, max_bytes: int) -> list[memoryview]:
        """``next_bytes`` and, welcomed, the queued frames behind it, up to ``max_bytes`` in all (the first whatever
        its size): for one gathered send, since each send lets the recording threads take the interpreter lock, which
        the sending thread may then wait a switch interval to get back. ``sent`` says how many bytes went."""
        first = self.next_bytes(welcomed=welcomed)
        if first is None:
            return []
        buffers = [first]
        if welcomed:
            size = len(first)
            for frame, _ in islice(self._items, _GATHERED_FRAMES - 1):
                size += len(frame)
                if size > max_bytes:
                    break
                buffers.append(memoryview(frame))
        return buffers

    def sent(self, size: int) -> bool:
        """``size`` bytes of ``next_bytes`` (or of ``next_buffers``: they may end several frames) went out; True when
        they ended a frame."""
        ended = False
        while True:
            out = self._out
            assert out is not None
            if size < len(out):
                self._out = out[size:]
                return ended
            size -= len(out)
            self._counters.sent_events += self._out_events
            self._out, self._out_events = None, 0
            ended = True
            # The frames gathered behind it are the queue's first ones (frames are only ever added at its end); a
            # queue thrown away meanwhile (closing) leaves nothing more to count.
            if not size or self.next_bytes(welcomed=True) is None:
                return ended

    def cut(self) -> None:
        """The connection broke: the frame going out is lost (counted), and control frames are dropped (the next
        connection's prefix carries the tables again)."""
        if self._out_events:
            self._counters.dropped_events += self._out_events
            self._counters.dropped_frames += 1
        self._out, self._out_events = None, 0
        self.stats_pending = False
        self._items = deque(item for item in self._items if item[1])
        self.queued_bytes = sum(len(item[0]) for item in self._items)

    def discard(self, batch: EncodedBatch) -> None:
        """Count a run that nothing will send."""
        self._counters.dropped_events += batch.event_count
        self._counters.dropped_frames += len(batch.events)

    def drop_all(self) -> int:
        """Throw the queue away, counting its events; returns them."""
        events = self.event_count
        self._counters.dropped_events += events
        self._counters.dropped_frames += sum(1 for _, count in self._items if count)
        self._items.clear()
        self.queued_bytes = 0
        self._per_track.clear()
        self._retired.clear()
        self._epoch_runs.clear()
        return events

    def drop_unsent(self) -> int:
        """Count the events of the frame going out as dropped (nothing will finish sending it); returns them."""
        events, self._out_events = self._out_events, 0
        self._counters.dropped_events += events
        return events

    def retire(self, track: TrackInfo) -> None:
        """``track`` ended: remembered while EVENTS frames of it are queued (a reconnect would declare it again)."""
        if self._per_track.get(track.track_id):
            self._retired[track.track_id] = track

    def repacked(self, encoder: StreamEncoder, strings_cut: bool) -> list[Kept]:
        """The queued frames for a new connection whose prefix carries the string table as it is now: those packed
        before the collector's limits were known packed again within them (``strings_cut``: its string table is
        smaller than ours), and those packed in an earlier epoch of the table packed again in the current one, each
        behind the STRINGS frames its labels need; events that no longer fit are counted as dropped."""
        kept: list[Kept] = []
        epochs = (epoch for epoch, frames in self._epoch_runs for _ in range(frames))
        for frame, count in self._items:
            epoch = next(epochs) if count else encoder.strings.epoch
            as_packed = epoch == encoder.strings.epoch and not strings_cut and len(frame) <= encoder.max_frame_bytes
            if as_packed or not count:
                kept.append((frame, count, epoch))
                continue
            batch = encoder.repack(frame, epoch)
            self._counters.dropped_events += batch.dropped_events
            kept += ((control, 0, batch.epoch) for control in batch.control)
            kept += ((events, events_count, batch.epoch) for events, events_count in batch.events)
        return kept

    def rebuild(self, prefix: list[bytes], kept: list[Kept], live: Iterable[int]) -> None:
        """The queue of a new connection: ``prefix`` (control frames), then ``kept`` (``repacked``), with the tracks
        that ended meanwhile declared around their frames. ``live``: track ids the prefix declares (an id reused by a
        new owner, a task lane, is live)."""
        self._items = deque([*((frame, 0) for frame in prefix), *self._with_retired_tracks(kept, set(live))])
        self.queued_bytes = sum(len(item[0]) for item in self._items)
        self.stats_pending = any(_is_stats(frame) for frame in prefix)
        self._per_track = {}
        self._epoch_runs.clear()
        for frame, count, epoch in kept:  # repacking may have split frames
            if count:
                track_id = events_track_id(frame)
                self._per_track[track_id] = self._per_track.get(track_id, 0) + 1
                self._count_epoch(epoch)

    def _count_epoch(self, epoch: int) -> None:
        runs = self._epoch_runs
        if runs and runs[-1][0] == epoch:
            runs[-1][1] += 1
        else:
            runs.append([epoch, 1])

    def _unqueued(self, frame: bytes) -> None:
        """An EVENTS frame left the queue."""
        oldest = self._epoch_runs[0]
        oldest[1] -= 1
        if not oldest[1]:
            self._epoch_runs.popleft()
        track_id = events_track_id(frame)
        left = self._per_track.pop(track_id, 1) - 1
        if left:
            self._per_track[track_id] = left
        else:
            self._retired.pop(track_id, None)

    def _with_retired_tracks(self, kept: list[Kept], live: set[int]) -> list[tuple[bytes, int]]:
        """``kept`` with each track that ended while frames of it were queued declared right before its first frame
        and ended right after its last one, so that the collector never holds more of them than needed."""
        track_ids = [events_track_id(frame) if count else 0 for frame, count, _ in kept]
        last = {
            track_id: i for i, track_id in enumerate(track_ids) if track_id in self._retired and track_id not in live
        }
        declared: set[int] = set()
        frames: list[tuple[bytes, int]] = []
        for i, ((frame, count, _), track_id) in enumerate(zip(kept, track_ids, strict=True)):
            track = self._retired.get(track_id) if track_id in last else None
            if track is not None and track_id not in declared:
                declared.add(track_id)
                frames.append((encode(Track(track.track_id, track.kind, track.name, track.thread_id, track.parent)), 0))
            frames.append((frame, count))
            if track is not None and last[track_id] == i:
                ended = Track(track.track_id, track.kind, track.name, track.thread_id, track.parent, ended=True)
                frames.append((encode(ended), 0))
        return frames
