"""Where segment buffers come from and go back to (``SegmentBuffers``): memory, recycled (``MemoryBuffers``), or files
of a data dir (``segment_files.py``); and what a data dir's ``fsync`` may be."""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterable
from typing import Final, Literal

from ringtrace.collector.store.segments import Buffer, Segment

__all__ = [
    "FSYNC_POLICIES",
    "HUGE_PAGE_BYTES",
    "SYNC_INTERVAL_S",
    "FsyncPolicy",
    "MemoryBuffers",
    "SegmentBuffers",
    "memory_buffer",
]

#: What ``fsync`` may be: nothing (the OS writes back; survives a crash of the collector, not of the machine), every
#: second in the background (acknowledgements do not wait), at every FLUSH the collector acknowledges, or after every
#: batch received.
FsyncPolicy = Literal["never", "interval", "flush", "always"]
FSYNC_POLICIES: Final = ("never", "interval", "flush", "always")
#: How often ``interval`` syncs.
SYNC_INTERVAL_S: Final = 1.0


class SegmentBuffers:
    """Where segment buffers come from and go back to: memory, or files of a data dir."""

    #: Whether segments carry CHECKSUM frames.
    checksums: bool = False
    fsync: FsyncPolicy = "never"

    def new(self, seq: int, size: int) -> Buffer:
        """A buffer of ``size`` bytes for segment ``seq``.

        Raises:
            OSError: no room for it (a full disk, say).
        """
        raise NotImplementedError

    def release(self, segment: Segment, *, reuse: bool) -> None:
        """The segment is gone: free its buffer (or keep it to reuse when ``reuse``)."""
        raise NotImplementedError

    def retire(self, segment: Segment) -> None:
        """The segment is gone, but still read (pinned): released later, and no longer a segment meanwhile."""

    def has(self, size: int) -> bool:
        """Whether ``new(size)`` would reuse a spare buffer."""
        return False

    def spare_sizes(self) -> Iterable[int]:
        """The sizes of the spare buffers kept for reuse."""
        return ()

    def spare_size(self, size: int, at_most: int) -> int:
        """The smallest size from ``size`` to ``at_most`` of a spare buffer; ``size`` when there is none."""
        fitting = [spare for spare in self.spare_sizes() if size <= spare <= at_most]
        return min(fitting, default=size)

    def trim(self, keep_bytes: int) -> None:
        """Free buffers kept for reuse beyond ``keep_bytes``."""

    @property
    def pooled_bytes(self) -> int:
        return 0

    def sync(self, segment: Segment, start: int, end: int) -> None:
        """Make bytes ``start:end`` of the segment durable (a data dir's fsync); safe on another thread."""


#: Buffers of a multiple of this are anonymous mappings on huge pages where the kernel allows (``madvise``): the
#: kernel's copy of each read into a segment then misses the TLB far less.
HUGE_PAGE_BYTES: Final = 2 * 1024 * 1024


def memory_buffer(size: int) -> Buffer:
    """A zeroed buffer of ``size`` bytes: on huge pages when ``size`` is a multiple of HUGE_PAGE_BYTES (an anonymous
    private mapping, zeroed by the kernel), else a bytearray."""
    if size % HUGE_PAGE_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return bytearray(size)
    buffer = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(OSError):  # huge pages not enabled: small ones all the same
        buffer.madvise(mmap.MADV_HUGEPAGE)
    return buffer


class MemoryBuffers(SegmentBuffers):
    """Segment buffers in memory, recycled: a fresh buffer costs its page faults again on first touch, which was
    most of ingest's time when every segment got a new one."""

    def __init__(self) -> None:
        self._pool: dict[int, list[Buffer]] = {}
        self._pooled_bytes = 0

    @property
    def pooled_bytes(self) -> int:
        return self._pooled_bytes

    def has(self, size: int) -> bool:
        return bool(self._pool.get(size))

    def spare_sizes(self) -> Iterable[int]:
        return [size for size, spares in self._pool.items() if spares]

    def new(self, seq: int, size: int) -> Buffer:
        pool = self._pool.get(size)
        if pool:
            self._pooled_bytes -= size
            return pool.pop()
        return memory_buffer(size)

    def release(self, segment: Segment, *, reuse: bool) -> None:
        buffer = segment.buffer
        segment.buffer = bytearray()
        if reuse:
            self._pool.setdefault(len(buffer), []).append(buffer)
            self._pooled_bytes += len(buffer)

    def trim(self, keep_bytes: int) -> None:
        for size in sorted(self._pool, reverse=True):
            pool = self._pool[size]
            while pool and self._pooled_bytes > keep_bytes:
                pool.pop()
                self._pooled_bytes -= size
