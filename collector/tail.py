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
overwritten, or what it has not read passes ``max_lag_bytes``, the tail ends with ``TailBehind`` naming how far
behind it was: a slow reader never holds the store's memory, and is never silently skipped ahead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from ringtrace.client.errors import ProtocolError
from ringtrace.client.protocol import Events
from ringtrace.client.session import Limits, SessionDecoder

from .export import Row, frame_rows
from .query import EventFilter
from .store import SegmentView
from .walk import ProcessView, Selection

__all__ = ["Tail", "TailBehind"]

MAX_STEP_BYTES: Final = 8 * 1024 * 1024
MAX_LAG_BYTES: Final = 64 * 1024 * 1024


class TailBehind(Exception):
    """The reader fell too far behind ingest; the message says how."""


@dataclass(slots=True)
class _Cursor:
    #: Bytes of the segment read so far (its frames before this are handled, or were there when the tail began).
    offset: int
    #: The decoder that read them; None until the segment grows (a segment that was there when the tail began).
    decoder: SessionDecoder | None
    #: How far the segment was written when last seen, and how many EVENTS frames it held.
    used: int
    entries: int = 0


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

    def wanted(self, process: ProcessView) -> bool:
        return self.selected.process_matches(process.pid, process.trace_pid, process.name, process.host)

    def step(self, segments: Iterable[tuple[ProcessView, SegmentView]]) -> list[Row]:
        """The selected events stored since the last step, segment by segment (oldest first).

        Raises:
            TailBehind: a segment was overwritten before it was read to its end, or too much is unread.
        """
        segments = list(segments)
        seen = {segment.seq for _, segment in segments}
        for seq, gone in list(self._cursors.items()):
            if seq not in seen:
                del self._cursors[seq]
                if gone.offset < gone.used and gone.entries:  # (a segment without events may go unread)
                    raise TailBehind(
                        f"fell behind: a segment was overwritten with {gone.used - gone.offset} bytes unread"
                    )
        if not self._began:
            self._began = True
            for _, segment in segments:
                self._cursors[segment.seq] = _Cursor(segment.used, None, segment.used)
                self._newest_seq = max(self._newest_seq, segment.seq)
            return []
        rows: list[Row] = []
        budget = self._max_step_bytes
        lag = 0
        for process, segment in segments:
            cursor = self._cursors.get(segment.seq)
            if cursor is None:
                start = 0 if segment.seq > self._newest_seq else segment.used
                cursor = self._cursors[segment.seq] = _Cursor(start, None, segment.used)
            cursor.used, cursor.entries = segment.used, segment.entries
            if cursor.offset >= segment.used:
                continue
            if budget <= 0:
                lag += segment.used - cursor.offset
                continue
            end = min(segment.used, cursor.offset + budget)
            budget -= end - cursor.offset
            rows += self._read(process, segment, cursor, end)
            lag += segment.used - cursor.offset
        if lag > self._max_lag_bytes:
            raise TailBehind(f"fell behind: {lag} bytes unread, more than max_lag_bytes={self._max_lag_bytes}")
        return rows

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
                    if self.selected.track is None or self.selected.track_matches(track.name):
                        rows += frame_rows(process, track, decoder.tables, frame, self._selection)
        except ProtocolError:  # what cannot be decoded is counted by snapshots; the tail skips the segment
            cursor.offset = cursor.used = segment.size
            cursor.decoder = None
        return rows
