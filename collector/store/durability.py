"""What makes a data dir's segments trustworthy and durable: the CHECKSUM frames that close each batch a stream wrote
(``commit``), and the ranges they cover to sync under ``fsync`` (``SyncJob``, run off the event loop).

In memory, segments carry no checksums and nothing is synced: every method here is then a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable

from ringtrace.collector.store.segment_buffers import SegmentBuffers
from ringtrace.collector.store.segments import Segment
from ringtrace.collector.store.streams import Stream

__all__ = ["Durability", "SyncJob"]


class SyncJob:
    """Segment ranges to make durable, off the event loop: ``run()`` on any thread. It syncs segment files by name,
    not through their buffers, so its segments need no pin: one evicted meanwhile needs no sync."""

    def __init__(self, buffers: SegmentBuffers, ranges: list[tuple[Segment, int, int]]) -> None:
        self._buffers = buffers
        self.ranges = ranges

    def run(self) -> None:
        """Raises:
        OSError: the file system could not write back (the data stays in the page cache).
        """
        for segment, start, end in self.ranges:
            self._buffers.sync(segment, start, end)


class Durability:
    """Checksums and syncs of the segments of ``buffers`` (as its ``checksums`` and ``fsync`` say)."""

    __slots__ = ("_buffers",)

    def __init__(self, buffers: SegmentBuffers) -> None:
        self._buffers = buffers

    def commit(self, stream: Stream, *, end_marker: bool = True) -> None:
        """Checksum what the stream wrote since the last checksum: a CHECKSUM frame at ``used`` and, with
        ``end_marker``, an end marker after it (without: the caller has unread bytes there, moved out of the way)."""
        segment = stream.segment
        if segment is None or not self._buffers.checksums:
            return
        if segment.used > segment.checked:
            segment.write_checksum(end_marker=end_marker)
        elif end_marker:  # the last checksum had none: what follows it now is no frame of this segment
            segment.write_end_marker()

    def uncommitted(self, stream: Stream) -> bool:
        """Whether the stream wrote bytes that no checksum covers yet."""
        segment = stream.segment
        return segment is not None and self._buffers.checksums and segment.used > segment.checked

    def sealed(self, stream: Stream, segment: Segment) -> None:
        """The stream's open ``segment`` is sealed (and committed): under ``fsync`` flush or always, its next sync
        job syncs it."""
        if self._buffers.fsync in ("flush", "always"):
            stream.unsynced = [s for s in stream.unsynced if not s.evicted]  # a stream that never flushes
            stream.unsynced.append(segment)

    def stream_job(self, stream: Stream) -> SyncJob | None:
        """What must be synced to make everything the stream's checksums cover durable (None: nothing, or ``fsync``
        never); the caller commits first."""
        if self._buffers.fsync == "never":
            return None
        segments = [s for s in stream.unsynced if not s.evicted]
        stream.unsynced.clear()
        if stream.segment is not None:
            segments.append(stream.segment)
        return self._job(segments)

    def all_job(self, segments: Iterable[Segment]) -> SyncJob | None:
        """What must be synced to make everything every checksum of ``segments`` covers durable (``fsync``
        interval, and on stop)."""
        return self._job(list(segments)) if self._buffers.checksums else None

    def _job(self, segments: list[Segment]) -> SyncJob | None:
        ranges = []
        for segment in segments:
            if segment.checked > segment.synced:
                ranges.append((segment, segment.synced, segment.checked))
                segment.synced = segment.checked
        return SyncJob(self._buffers, ranges) if ranges else None
