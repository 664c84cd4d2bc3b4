"""Each stream's segments, one open at a time: the next one opened (its size, room for it, its buffer, the session
frames it opens with) or refused and counted; the open one ended (sealed, or dropped when it holds no events).

A stream's segments double in size from ``MIN_SEGMENT_BYTES`` up to ``segment_bytes``: a quiet process holds little,
a busy one pays for its prefix rarely. Their sizes are powers of two, so that the buffers of evicted segments fit new
ones. A segment is larger when one frame and the session frames need it, and at least four times the session frames
(a process with many kinds or strings would otherwise store mostly prefixes). In a full ring a new segment takes a
spare buffer up to the size segments grow to, the buffer of the oldest segment overwritten where there is no spare,
rather than a fresh one (``_recycled``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from ringtrace.collector.log_repeats import Repeats
from ringtrace.collector.store.budget import Budget
from ringtrace.collector.store.durability import Durability
from ringtrace.collector.store.segments import INDEX_ENTRY, Buffer, Segment
from ringtrace.collector.store.streams import MIN_SEGMENT_BYTES, Stream

__all__ = ["StreamSegments"]

#: The store's logger: its refusals are logged under the name its lines always had.
log = logging.getLogger("ringtrace.collector.store")

_ALIGN: Final = 4096


def _aligned(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


def _power_of_two_within(size: int) -> int:
    return 1 << (size.bit_length() - 1)


class StreamSegments:
    """Opens and ends the streams' segments, within ``budget``; see the module docstring.

    Args:
        budget: the bounds a new segment must fit (room is made in it, or the segment refused).
        durability: checksums and syncs, for the segments sealed.
        segment_bytes: the size a stream's segments grow to.
        reserve: room kept free at the end of every segment (``Store.reserve``).
    """

    __slots__ = ("_budget", "_durability", "_refusals_logged", "on_sealed", "reserve", "segment_bytes", "seq")

    def __init__(self, budget: Budget, durability: Durability, segment_bytes: int, reserve: int) -> None:
        self._budget = budget
        self._durability = durability
        self.segment_bytes = segment_bytes
        self.reserve = reserve
        #: The seq of the next segment.
        self.seq = 0
        self._refusals_logged = Repeats()
        #: Called with each segment sealed (holding events), and its stream: a JetStream store publishes it.
        self.on_sealed: Callable[[Stream, Segment], None] | None = None

    def skip_to(self, seq: int) -> None:
        """New segments are numbered from ``seq`` on (or later)."""
        self.seq = max(self.seq, seq)

    # -- opening ----------------------------------------------------------------------------------------------------

    def open_for(self, stream: Stream, frame_bytes: int, track_id: int, count: int) -> Segment | None:
        """End the stream's open segment and open the next, for a frame of ``frame_bytes`` holding ``count`` events
        of track ``track_id``; None when it is refused (the frame is counted so, in the track's counts)."""
        self.end(stream)
        segment = self.open(stream, frame_bytes)
        if isinstance(segment, Segment):
            return segment
        stream.counts.lost(track_id, "capped" if segment.startswith("process") else "discarded", count, frame_bytes)
        self._log_refusal(segment)
        return None

    def open(self, stream: Stream, frame_bytes: int) -> Segment | str:
        """The stream's next segment, opened with its session frames; or why it cannot be (nothing is counted)."""
        budget = self._budget
        needed = stream.session_bytes + frame_bytes + INDEX_ENTRY.size + self.reserve
        # The session frames take at most a quarter of a segment, unless that does not fit the bounds.
        roomy = 4 * stream.session_bytes if 8 * stream.session_bytes <= budget.process_capacity_bytes else 0
        size = _aligned(max(stream.next_size, needed, roomy))
        largest = self._largest_segment()
        refusal = budget.make_room(stream.owner, size)
        if refusal is not None:
            return refusal
        size = self._spare_size(stream.owner, size, largest)
        buffer = self._allocate(size, max(_aligned(needed), MIN_SEGMENT_BYTES))
        if isinstance(buffer, str):
            return buffer
        size = len(buffer)
        segment = Segment(self.seq, buffer, stream.owner)
        self.seq += 1
        for data in stream.session_frames():
            segment.write(data)
        budget.holdings.add(segment, stream)
        stream.segment = segment
        stream.next_size = _power_of_two_within(min(max(size, stream.next_size) * 2, largest))
        return segment

    def _largest_segment(self) -> int:
        """What a stream's segments grow to: up to segment_bytes, and to half of a stream's share of the capacity,
        so that open segments are not evicted while many connections write at once (the one being read into would
        be, and reading would go by copy). A power of two: evicted segments' buffers, pooled by size, then fit the
        next ones (a fresh buffer costs zeroing and a page fault per page)."""
        share = max(self._budget.capacity_bytes // (2 * self._budget.holdings.streams), MIN_SEGMENT_BYTES)
        return _power_of_two_within(min(self.segment_bytes, share))

    def _spare_size(self, owner: int, size: int, largest: int) -> int:
        """The size to open: a spare buffer's, up to the size the stream's segments grow to, if it fits as well,
        rather than a fresh one; room is made for a fresh one among the spare ones."""
        budget = self._budget
        spare = budget.buffers.spare_size(size, at_most=max(size, largest))
        if spare == size and not budget.buffers.has(size):
            spare = self._recycled(size, largest)
        if spare != size and budget.fits(owner, spare):
            size = spare
        if not budget.buffers.has(size):
            budget.buffers.trim(budget.spare_room - size)
        return size

    def _recycled(self, size: int, largest: int) -> int:
        """The size of a spare buffer for a segment of ``size`` when there is none: under ring, with less than
        ``largest`` left free beside it (the ring overwrites within the next segment or so anyway), the oldest sealed
        segment is overwritten now if its buffer is larger than ``size`` and at most ``largest``, and that buffer is
        the new segment's; else ``size`` (a fresh buffer). A new stream's small segments, as their sizes grow, were
        fresh buffers while the ring was full of large ones (at 100 connections, hundreds a second): each cost a
        zeroing and a page fault a page, and the spare it stood for was freed. The ring keeps at most ``largest``
        less this way."""
        budget = self._budget
        holdings = budget.holdings
        if budget.policy != "ring" or budget.process_cap is not None or not holdings.segments:
            return size
        if budget.free_bytes - size >= largest:
            return size
        oldest = holdings.oldest()
        if oldest.seq in holdings.writers or oldest.pins or not size < oldest.size <= largest:
            return size
        budget.evict(oldest, "overwritten")
        return oldest.size if budget.buffers.has(oldest.size) else size

    def _allocate(self, size: int, least: int) -> Buffer | str:
        """A buffer of ``size`` bytes for the next segment, or a smaller one (a power of two, of ``least`` bytes or
        more) if that is all there is room for; or why there is none. Under ring, where none fits (a full disk, say),
        the oldest segment no reader holds makes room as when full, one at a time: a disk with less room than a
        segment of ``size`` in all would otherwise lose every segment and still have none."""
        budget = self._budget
        while True:
            attempt = size
            while True:
                try:
                    return budget.buffers.new(self.seq, attempt)
                except OSError as exc:
                    error = exc
                attempt = _power_of_two_within(attempt - 1)
                if attempt < least:
                    break
            # A segment a reader holds (a snapshot, the connection reading into it) keeps its room until it is let
            # go: overwriting it would lose its events and make no room now.
            victim = self._unheld_oldest()
            if budget.policy == "discard" or victim is None:
                return f"allocation: cannot allocate a segment of {size} bytes: {error}"
            budget.evict(victim, "overwritten")
            budget.buffers.trim(0)  # a spare of another size gives its room back

    def _unheld_oldest(self) -> Segment | None:
        """The segment the ring overwrites next of those no reader holds: as ``Holdings.oldest``, sealed first."""
        holdings = self._budget.holdings
        unheld = [segment for segment in holdings.segments.values() if segment.pins == 0]
        return next((s for s in unheld if s.seq not in holdings.writers), unheld[0] if unheld else None)

    def _log_refusal(self, why: str) -> None:
        kind = why.split(":", 1)[0]  # "process capacity", "capacity" or "allocation"
        unlogged = self._refusals_logged.due(kind)  # at once, then once a minute: a full store refuses every frame
        if unlogged is not None:
            log.warning("refusing frames: %s; counted per track%s", why, Repeats.since(unlogged, "frames refused so"))

    # -- ending -----------------------------------------------------------------------------------------------------

    def end(self, stream: Stream) -> None:
        """The stream writes into its open segment no more: sealed, or dropped if it holds no events (its session
        frames open the next one again)."""
        segment = stream.segment
        if segment is not None and segment.entries == 0:
            self._budget.drop(segment)
        elif segment is not None:
            self._seal(stream, segment)

    def _seal(self, stream: Stream, segment: Segment) -> None:
        self._durability.commit(stream)
        self._durability.sealed(stream, segment)
        self._budget.holdings.seal(segment)
        segment.written_ns = time.monotonic_ns()
        stream.detach()
        if self.on_sealed is not None:
            self.on_sealed(stream, segment)
