"""A live tail: the events stored after it began, as they arrive, for ``GET /stream``.

Theory of operation
-------------------
A ``Tail`` keeps a cursor per stored segment: how far it has read, and the session decoder that read it (a segment
decodes alone, so the decoder holds its strings, kinds and tracks). At each ``step`` (the HTTP handler calls one every
``poll_s``, with the segments pinned) it decodes what each segment gained since, up to ``max_step_bytes`` in all,
and returns the rows its filter selects. Segments stored before the tail began start at their end; their decoder
reads the part before the cursor (session frames and all) only once the segment grows, so that a tail of a large
store costs nothing until something arrives. Newer segments are read from their start.

Memory: the rows of one step. A reader slower than ingest falls behind; once a segment it had not finished is
overwritten, or what it has not read passes ``max_lag_bytes``, the tail ends with ``TailBehind`` naming how far behind
it was: a slow reader never holds the store's memory, and is never silently skipped ahead. To know, each step adds up,
per process, the events of the segments it can see (read or not) and of those gone since that it had read, against
the events the store kept of that process since the tail began: a shortfall was lost to the reader (a whole segment
written and overwritten between two steps included). Events a process loses to its own cap (``--process-capacity``)
are not told apart from those it was refused, and are not in that sum. Segments removed on request (``POST /clear``,
``POST /pop``: ``Store.cleared_segments``) count whole, and the events of them the tail had not read are told
(``take_cleared``), not a reason to end it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.read.rows import Row, frame_rows
from ringtrace.collector.read.selection import EventFilter, Selection
from ringtrace.collector.store.ring import SegmentView
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frames import Events
from ringtrace.wire.stream_limits import Limits

__all__ = ["Tail", "TailBehind"]

MAX_STEP_BYTES: Final = 8 * 1024 * 1024
MAX_LAG_BYTES: Final = 64 * 1024 * 1024


class TailBehind(Exception):
    """The reader fell too far behind ingest; the message says how."""


@dataclass(slots=True)
class _Cursor:
    owner: int
    #: Bytes of the segment read so far (its frames before this are handled, or were there when the tail began).
    offset: int
    #: The decoder that read them; None until the segment grows (a segment that was there when the tail began).
    decoder: SessionDecoder | None
    #: Events the segment held when the tail began (none, for a newer one): they are not the tail's.
    counted_from: int
    #: Index entries (EVENTS frames) wholly before ``offset``, and their events.
    read_entries: int = 0
    read_events: int = 0


class Tail:
    """See the module docstring. ``step`` runs on a worker thread (the segments it gets are pinned), one at a time."""

    def __init__(
        self,
        selected: EventFilter,
        limits: Limits,
        *,
        max_step_bytes: int = MAX_STEP_BYTES,
        max_lag_bytes: int = MAX_LAG_BYTES,
    ) -> None:
        self.selected = selected
        self._selection = Selection(selected) if selected.by_event else None
        self._limits = limits
        self._max_step_bytes = max_step_bytes
        self._max_lag_bytes = max_lag_bytes
        self._cursors: dict[int, _Cursor] = {}
        self._began = False
        #: Segments newer than these are read from their start.
        self._newest_seq = -1
        #: Per process: events the store had kept of it when the tail began, and events of segments gone since that
        #: the tail had read (``step`` says how they add up).
        self._baseline: dict[int, int] = {}
        self._departed: dict[int, int] = {}
        #: Events removed on request before the tail read them, not told yet (``take_cleared``).
        self._cleared_unread = 0
        #: Bytes stored that the last step left unread (past ``max_step_bytes``): the next steps read them.
        self.unread_bytes = 0

    @property
    def cleared_floor(self) -> int:
        """The segments removed on request that ``step`` needs to know of are those after this seq."""
        return min(self._cursors, default=self._newest_seq + 1) - 1

    def take_cleared(self) -> int:
        """Events removed on request (``POST /clear``, ``POST /pop``) before the tail read them, since the last
        call."""
        cleared, self._cleared_unread = self._cleared_unread, 0
        return cleared

    def step(
        self,
        segments: Iterable[tuple[ProcessView, SegmentView]],
        kept: Mapping[int, int],
        cleared: Mapping[int, tuple[int, int]],
    ) -> list[Row]:
        """The selected events stored since the last step, segment by segment (oldest first).

        Args:
            segments: the stored segments of the processes wanted, pinned, oldest first.
            kept: per process wanted, the events the store has kept of it so far (``Store.kept_events``), taken
                with the segments: what the tail has read or can still read must add up to what was kept since it
                began, or something was overwritten before it was read.
            cleared: the segments of those processes removed on request after ``cleared_floor``
                (``Store.cleared_segments``), taken with them: seq -> (owner, events).

        Raises:
            TailBehind: events were overwritten before the tail read them, or too much is unread.
        """
        segments = list(segments)
        present = {segment.seq for _, segment in segments}
        self._depart(present, cleared)
        if not self._began:
            self._begin(segments, kept)
            return []
        rows, lag, accounted = self._read_new(segments)
        self.unread_bytes = lag
        for owner, count in kept.items():
            missed = count - self._baseline.get(owner, 0) - accounted.get(owner, 0)
            if missed > 0:
                who = next((f"{p.name} (pid {p.pid})" for p, s in segments if s.owner == owner), "a process")
                raise TailBehind(f"fell behind: {missed} events of {who} were overwritten before it read them")
        if lag > self._max_lag_bytes:
            raise TailBehind(f"fell behind: {lag} bytes unread, more than max_lag_bytes={self._max_lag_bytes}")
        return rows

    def _depart(self, present: set[int], cleared: Mapping[int, tuple[int, int]]) -> None:
        """Count the events of segments gone since the last step (overwritten, or removed on request)."""
        for seq, gone in list(self._cursors.items()):
            if seq not in present:
                del self._cursors[seq]
                removed = cleared.get(seq)
                if removed is None:  # overwritten: what it had not read was lost to it
                    taken = gone.read_events
                else:  # removed on request: counted whole, and what it had not read is told
                    taken = removed[1]
                    self._cleared_unread += removed[1] - gone.read_events
                self._departed[gone.owner] = self._departed.get(gone.owner, 0) + taken - gone.counted_from
        if self._began:  # stored and removed on request between two steps: never seen
            for seq, (owner, events) in cleared.items():
                if seq > self._newest_seq and seq not in present:
                    self._departed[owner] = self._departed.get(owner, 0) + events
                    self._cleared_unread += events
        # Before it began: segments removed then are older than any it reads from the start, and not its news.
        self._newest_seq = max([self._newest_seq, *present, *cleared])

    def _begin(self, segments: list[tuple[ProcessView, SegmentView]], kept: Mapping[int, int]) -> None:
        """The first step: where the tail begins (the end of each segment there now)."""
        self._began = True
        self._baseline = dict(kept)
        for _, segment in segments:
            self._cursors[segment.seq] = _Cursor(
                segment.owner, segment.used, None, segment.events, segment.entries, segment.events
            )

    def _read_new(self, segments: list[tuple[ProcessView, SegmentView]]) -> tuple[list[Row], int, dict[int, int]]:
        """The rows of what the segments gained, up to ``max_step_bytes`` in all; the bytes left unread; per
        process, the events the tail has read or can still read since it began."""
        rows: list[Row] = []
        budget = self._max_step_bytes
        lag = 0
        accounted = dict(self._departed)
        for process, segment in segments:
            cursor = self._cursors.get(segment.seq)
            if cursor is None:
                cursor = self._cursors[segment.seq] = _Cursor(segment.owner, 0, None, 0)
            accounted[segment.owner] = accounted.get(segment.owner, 0) + segment.events - cursor.counted_from
            if cursor.offset >= segment.used:
                continue
            if budget <= 0:
                lag += segment.used - cursor.offset
                continue
            end = min(segment.used, cursor.offset + budget)
            budget -= end - cursor.offset
            rows += self._read(process, segment, cursor, end)
            _advance(cursor, segment)
            lag += segment.used - cursor.offset
        return rows, lag, accounted

    def _read(self, process: ProcessView, segment: SegmentView, cursor: _Cursor, end: int) -> list[Row]:
        """Decode the segment's complete frames from the cursor up to about ``end``; the cursor moves past them."""
        buffer = memoryview(segment.buffer)
        rows: list[Row] = []
        try:
            decoder = cursor.decoder
            if decoder is None:  # catch up on the session frames before the cursor (its events were there before us)
                decoder = cursor.decoder = SessionDecoder(self._limits, live=False)
                if cursor.offset:  # (no data at all would say the stream ended)
                    decoder.receive_data(buffer[: cursor.offset])
                    for _ in decoder:
                        pass
            decoder.receive_data(buffer[cursor.offset : end])
            cursor.offset = end
            for frame in decoder:
                if isinstance(frame, Events):
                    track = decoder.tables.tracks[frame.track_id]
                    if self.selected.track is None or self.selected.track_matches(track.name, track.track_id):
                        rows += frame_rows(process, track, decoder.tables, frame, self._selection)
        except ProtocolError:  # what cannot be decoded is counted by snapshots; the tail skips the segment
            cursor.offset = segment.size
            cursor.decoder = None
        return rows


def _advance(cursor: _Cursor, segment: SegmentView) -> None:
    """Count the index entries (EVENTS frames) now wholly before the cursor."""
    counted = segment.frames_before(cursor.offset, cursor.read_entries, cursor.read_events)
    cursor.read_entries, cursor.read_events = counted
