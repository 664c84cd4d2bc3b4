"""A ring of fixed-size segments holding EVENTS payloads, opaque, within a byte budget.

Theory of operation
-------------------
The store is ``segment_count`` segments of ``segment_bytes`` each, oldest first. A payload is copied into the newest
segment with an index entry beside it (source key, decode context, offset, length, event count, first and last
timestamp); the entry's memory, ``ENTRY_OVERHEAD_BYTES``, counts against the segment too, so that many tiny frames
cannot make the ring use many times its capacity. A payload that does not fit opens a new segment, and when all
``segment_count`` are in use the oldest is dropped first, its events and frames counted as lost against their source
keys. Payloads are never decoded here.

A new segment always gets a new buffer, so ``snapshot()`` only copies references: a snapshot keeps the buffers it saw
alive, ingest goes on writing past the offsets the snapshot knows, and nothing a snapshot reads is ever overwritten.
No asyncio here; plain synchronous code, called from the event loop.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from ringtrace.client.errors import ConfigError

__all__ = ["ENTRY_OVERHEAD_BYTES", "Loss", "RingStore", "StoreSnapshot", "StoredFrame"]

#: What one index entry costs in memory besides its payload (a tuple of seven and its boxed integers), rounded up.
ENTRY_OVERHEAD_BYTES = 256


@dataclass(frozen=True, slots=True)
class StoredFrame:
    key: Hashable
    context: Any
    payload: memoryview
    count: int
    first_ts_ns: int
    last_ts_ns: int


@dataclass(slots=True)
class Loss:
    """Events and frames a source lost because the ring overwrote them."""

    events: int = 0
    frames: int = 0


class _Segment:
    __slots__ = ("accounted", "data", "entries", "events", "used")

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)
        #: Payload bytes written into ``data``.
        self.used = 0
        #: ``used`` plus the index entries' overhead: what counts against the segment's size.
        self.accounted = 0
        self.events = 0
        self.entries: list[tuple[Hashable, Any, int, int, int, int, int]] = []

    def seal(self) -> None:
        """No more appends: give back the unused tail, which index entries may have left large."""
        with contextlib.suppress(BufferError):  # a snapshot is reading this segment right now: keep the tail
            del self.data[self.used :]


class StoreSnapshot:
    """The frames stored at one instant; safe to read from another thread while ingest goes on."""

    def __init__(self, segments: list[tuple[bytearray, list[tuple[Hashable, Any, int, int, int, int, int]]]]) -> None:
        self._segments = segments

    def __len__(self) -> int:
        return sum(len(entries) for _, entries in self._segments)

    def __iter__(self) -> Iterator[StoredFrame]:
        """Frames oldest first (in arrival order)."""
        for data, entries in self._segments:
            view = memoryview(data)
            for key, context, offset, length, count, first_ts, last_ts in entries:
                yield StoredFrame(key, context, view[offset : offset + length], count, first_ts, last_ts)


class RingStore:
    """Bounded frame storage; see the module docstring.

    Args:
        capacity_bytes: total bytes kept, payloads and index entries.
        segment_bytes: size of one segment; the largest payload the store accepts, with its index entry.
        entry_overhead_bytes: what one index entry counts for.

    Raises:
        ConfigError: the capacity holds fewer than two segments.
    """

    def __init__(
        self, capacity_bytes: int, segment_bytes: int, entry_overhead_bytes: int = ENTRY_OVERHEAD_BYTES
    ) -> None:
        if segment_bytes < 1 or capacity_bytes < 2 * segment_bytes:
            raise ConfigError(
                f"capacity of {capacity_bytes} bytes must hold at least 2 segments of {segment_bytes} bytes"
            )
        self.segment_bytes = segment_bytes
        self.entry_overhead_bytes = entry_overhead_bytes
        self.segment_count = capacity_bytes // segment_bytes
        self._segments: deque[_Segment] = deque()
        #: Per source key: what the ring overwrote.
        self.lost: dict[Hashable, Loss] = {}
        self.stored_frames = 0
        self.stored_events = 0

    @property
    def capacity_bytes(self) -> int:
        return self.segment_count * self.segment_bytes

    @property
    def used_bytes(self) -> int:
        return sum(segment.used for segment in self._segments)

    def append(
        self, key: Hashable, context: Any, count: int, first_ts_ns: int, last_ts_ns: int, payload: bytes | memoryview
    ) -> None:
        """Store one payload of ``count`` events from source ``key``; ``context`` is kept for whoever decodes it.

        Raises:
            ValueError: the payload is larger than a segment (the protocol's frame limit prevents this).
        """
        size = len(payload)
        cost = size + self.entry_overhead_bytes
        if cost > self.segment_bytes:
            raise ValueError(
                f"payload of {size} bytes (+{self.entry_overhead_bytes} of index) "
                f"exceeds segment_bytes={self.segment_bytes}"
            )
        segment = self._segments[-1] if self._segments else None
        if segment is None or segment.accounted + cost > self.segment_bytes:
            if segment is not None:
                segment.seal()
            if len(self._segments) == self.segment_count:
                self._evict(self._segments.popleft())
            segment = _Segment(self.segment_bytes)
            self._segments.append(segment)
        offset = segment.used
        segment.data[offset : offset + size] = payload
        segment.used += size
        segment.accounted += cost
        segment.events += count
        segment.entries.append((key, context, offset, size, count, first_ts_ns, last_ts_ns))
        self.stored_frames += 1
        self.stored_events += count

    def _evict(self, segment: _Segment) -> None:
        for key, _, _, _, count, _, _ in segment.entries:
            loss = self.lost.get(key)
            if loss is None:
                loss = self.lost[key] = Loss()
            loss.events += count
            loss.frames += 1
        self.stored_frames -= len(segment.entries)
        self.stored_events -= segment.events

    def snapshot(self) -> StoreSnapshot:
        """References to every stored frame, without copying payloads."""
        return StoreSnapshot([(segment.data, list(segment.entries)) for segment in self._segments])
