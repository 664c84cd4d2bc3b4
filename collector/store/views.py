"""What a snapshot reads: the segments stored at one instant, pinned (``StoreSnapshot``), each seen as it was then
(``SegmentView``), from another thread while ingest goes on.

A pinned segment's buffer is neither reused nor unmapped: the store may evict the segment meanwhile (its events are
then counted lost, as ever), but the snapshot still reads what it saw. Each reader lets go of a segment as soon as it
has read it (``release``), so that a long snapshot does not keep what the ring overwrote since.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field, replace
from typing import Protocol

from ringtrace.collector.store.segments import INDEX_ENTRY, Buffer, ReachCache, Segment

__all__ = ["SegmentView", "StoreSnapshot"]


class _Receiver(Protocol):
    def receive_data(self, data: bytes | memoryview) -> None: ...


class _Pins(Protocol):
    """What a snapshot needs of the store: to let go of the segments it pinned (``Store.unpin``)."""

    def unpin(self, segments: list[Segment]) -> None: ...


@dataclass(frozen=True, slots=True)
class SegmentView:
    """One segment as a snapshot saw it: readable from another thread while ingest goes on."""

    seq: int
    owner: int
    buffer: Buffer
    size: int
    used: int
    entries: int
    #: Events of its EVENTS frames.
    events: int = 0
    #: The segment's own, shared by every view of it (``read/reach.py`` fills it).
    reach: ReachCache = field(default_factory=ReachCache, compare=False, repr=False)

    def index(self) -> Iterator[tuple[int, int, int, int, int, int]]:
        """(offset, size, track, count, first_ts, last_ts) of each EVENTS frame, oldest first."""
        buffer, size, step = self.buffer, self.size, INDEX_ENTRY.size
        for i in range(1, self.entries + 1):
            yield INDEX_ENTRY.unpack_from(buffer, size - step * i)

    def frames_before(self, offset: int, entries: int, events: int) -> tuple[int, int]:
        """A reader's count of EVENTS frames wholly before ``offset``, and of their events, brought up to date from
        ``entries`` and ``events`` (what it had counted)."""
        buffer, size, step = self.buffer, self.size, INDEX_ENTRY.size
        while entries < self.entries:
            start, length, _, count, _, _ = INDEX_ENTRY.unpack_from(buffer, size - step * (entries + 1))
            if start + length > offset:
                break
            entries += 1
            events += count
        return entries, events

    def data(self) -> bytes:
        """The segment's wire stream (a copy: the buffer may be reused once the snapshot is closed)."""
        return bytes(memoryview(self.buffer)[: self.used])

    def read_into(self, reader: _Receiver, start: int, end: int) -> None:
        """Give ``reader`` the bytes ``start:end`` of the wire stream (it copies them: no view of the buffer is
        left behind, which would keep the store from reusing it)."""
        with memoryview(self.buffer) as whole, whole[start:end] as part:
            reader.receive_data(part)


class StoreSnapshot:
    """The segments stored at one instant, pinned until a reader is done with each (``release``) or ``close()``
    (which must be called on the store's thread).

    Args:
        store: what the segments were pinned in (``Store.snapshot``).
        on_store_thread: runs a callable on the store's thread, from any thread (``loop.call_soon_threadsafe``);
            without it ``release`` unpins nothing before ``close()``.
        read: the seqs of the segments pinned (None: all of them); the views of the others have their counts
            (``used``, ``entries``, ``events``) but no bytes (``size`` 0).
    """

    def __init__(
        self,
        store: _Pins,
        segments: list[Segment],
        on_store_thread: Callable[[Callable[[], None]], object] | None,
        read: Container[int] | None = None,
    ) -> None:
        self._store: _Pins | None = store
        #: By seq (unique to a segment): what is still pinned, and where its view is.
        self._pinned = {s.seq: (i, s) for i, s in enumerate(segments) if read is None or s.seq in read}
        self._on_store_thread = on_store_thread
        self.segments = [
            SegmentView(s.seq, s.owner, s.buffer, s.size, s.used, s.entries, s.events, s.reach)
            if s.seq in self._pinned
            else SegmentView(s.seq, s.owner, bytearray(), 0, s.used, s.entries, s.events, s.reach)
            for s in segments
        ]

    def release(self, segment: SegmentView) -> None:
        """A reader is done with ``segment`` (from any thread): it is unpinned now rather than at ``close()``, so
        that a long snapshot does not keep what the ring overwrote meanwhile (and four of them, four times over)."""
        if self._on_store_thread is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the collector is gone
                self._on_store_thread(lambda: self._unpin(segment.seq))

    def _unpin(self, seq: int) -> None:
        pinned = self._pinned.pop(seq, None)
        if pinned is not None and self._store is not None:
            position, segment = pinned
            # The view lets go of the buffer too (it reads as empty from now on), or it would keep it alive.
            self.segments[position] = replace(self.segments[position], buffer=bytearray(), size=0, used=0, entries=0)
            self._store.unpin([segment])

    def close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store.unpin([segment for _, segment in self._pinned.values()])
            self._pinned.clear()

    def __enter__(self) -> StoreSnapshot:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
