"""Segments, the unit of storage: one client stream's recent past in one buffer, readable alone.

Layout of a segment's buffer of ``size`` bytes (in memory, or a file of the data dir mapped into memory)::

    [ preamble HELLO SCHEMA STRINGS TRACK ... EVENTS ... CHECKSUM ... ][ zeros / free ][ index entries ]
    0                                                                  used           size - 32 * entries

The front is a stream in the wire format (``wire/PROTOCOL.md``): the session frames its events need, replayed
verbatim from the connection when the segment opens, then frames verbatim as they arrive. So the session decoder
reads a segment alone, and a segment file is the same format as a client's trace file. The index grows down from the
tail, one 32-byte entry per EVENTS frame (offset, size, track, count, first and last timestamp): frames are selected
and accounted without decoding, and the index costs no memory beyond the segment's own bytes. It is derived data:
recovery rebuilds it from the frames.

In a data dir, CHECKSUM frames (type 0xFF, ignorable) each hold the CRC-32C of the segment's bytes from the end of the
previous one, so recovery keeps exactly what was checksummed and cuts a torn or corrupted tail. In memory they are left
out: nothing there can tear.

Where segment buffers come from (memory, ``segment_buffers.py``; files of a data dir, ``segment_files.py``) and how
a segment file is validated on start (``segment_scan.py``) are modules of their own.
"""

from __future__ import annotations

import mmap
import struct
import time
from collections.abc import Iterator
from typing import Final, NamedTuple

import crc32c
from ringtrace.wire.frame_types import CHECKSUM_TYPE, FRAME_HEADER

__all__ = [
    "CHECKSUM_FRAME",
    "CHECKSUM_RESERVE",
    "EVENTS_ENTRY",
    "INDEX_ENTRY",
    "Buffer",
    "EventsRun",
    "ReachCache",
    "Segment",
    "crc_seed",
    "frame_spans",
]

#: offset, size (of the whole EVENTS frame), track id, event count, first and last timestamp (monotonic ns).
INDEX_ENTRY: Final = struct.Struct("<IIIIQQ")
#: An EVENTS frame as the index holds it (``EventsRun``; the name the scan of received frames knows it by).
EVENTS_ENTRY: Final = INDEX_ENTRY
#: A CHECKSUM frame: body length 4, type 0xFF (ignorable; in files only), CRC-32C of the bytes since the last one.
CHECKSUM_FRAME: Final = struct.Struct("<IBI")
#: Room a segment keeps free for its last CHECKSUM frame and the end marker after it.
CHECKSUM_RESERVE: Final = CHECKSUM_FRAME.size + FRAME_HEADER.size

Buffer = bytearray | mmap.mmap


class EventsRun(NamedTuple):
    """Complete EVENTS frames read into a segment, checked as the session decoder checks them, to be stored where they
    are (``Segment.index_run``; made by the ingest's scan of received frames)."""

    #: One ``EVENTS_ENTRY`` per frame, the last frame's first: the order of an index that grows down.
    entries: bytes
    #: Their events.
    events: int
    #: Per track id: [events, bytes] of its frames here.
    tracks: dict[int, list[int]]
    #: Offset in the buffer just past the last frame.
    end: int

    @property
    def frames(self) -> int:
        return len(self.entries) // EVENTS_ENTRY.size


def frame_spans(
    data: bytes | bytearray | memoryview | mmap.mmap, start: int, end: int
) -> Iterator[tuple[int, int, int]]:
    """``(type, offset, end)`` of each whole frame in ``data[start:end]``, by its header alone (nothing is checked or
    decoded: for walking stored frames that were checked on the way in); it stops at a frame that does not fit."""
    position = start
    while position + FRAME_HEADER.size <= end:
        body_length, frame_type = FRAME_HEADER.unpack_from(data, position)
        frame_end = position + FRAME_HEADER.size + body_length
        if frame_end > end:
            return
        yield frame_type, position, frame_end
        position = frame_end


class ReachCache:
    """What readers derived of a segment's events once (``read/reach.py``: how long its spans and pairs last), kept
    with it: a sealed segment never changes, an open one's holds for the frames it had then (``entries``)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        #: (index entries it covers, what the reader made of them), or None before a reader needed it; set whole, by
        #: any thread (two readers at once measure the same).
        self.value: tuple[int, object] | None = None


class Segment:
    """One segment: its buffer, how much of it is used, and whom it belongs to (see the module docstring)."""

    __slots__ = (
        "buffer",
        "checked",
        "entries",
        "events",
        "evicted",
        "owner",
        "pins",
        "reach",
        "released",
        "seq",
        "size",
        "synced",
        "tracks",
        "used",
        "written_ns",
    )

    def __init__(self, seq: int, buffer: Buffer, owner: int) -> None:
        self.seq = seq
        self.buffer = buffer
        self.size = len(buffer)
        #: The process (its uid in the registry) whose stream this segment holds.
        self.owner = owner
        self.used = 0
        self.entries = 0
        self.events = 0
        #: Per track id: [events, bytes] of its EVENTS frames here (what the segment's eviction takes from it).
        self.tracks: dict[int, list[int]] = {}
        #: End of the bytes covered by a CHECKSUM frame (data dir).
        self.checked = 0
        #: End of the bytes made durable (data dir, fsync).
        self.synced = 0
        #: Snapshots reading this segment: its buffer is neither reused nor unmapped while any are.
        self.pins = 0
        self.evicted = False
        #: Its buffer went back (``Budget.release``): never twice, or a buffer reused meanwhile would go too.
        self.released = False
        #: When (the collector's monotonic ns) it was opened, and then sealed: ``--max-age`` counts from it.
        self.written_ns = time.monotonic_ns()
        self.reach = ReachCache()

    @property
    def free(self) -> int:
        return self.size - self.used - INDEX_ENTRY.size * self.entries

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` (the caller checked ``free``); returns its offset."""
        offset = self.used
        end = offset + len(data)
        self.buffer[offset:end] = data
        self.used = end
        return offset

    def write_events(self, frame: bytes | memoryview, track_id: int, count: int, first_ts: int, last_ts: int) -> None:
        """Append one EVENTS frame (header included) and its index entry."""
        offset = self.used
        self.buffer[offset : offset + len(frame)] = frame
        self.index_events(offset, len(frame), track_id, count, first_ts, last_ts)

    def index_events(self, offset: int, size: int, track_id: int, count: int, first_ts: int, last_ts: int) -> None:
        """The EVENTS frame at ``offset`` (written there already) is stored: its index entry, and ``used`` past it."""
        self.used = offset + size
        self.entries += 1
        self.events += count
        INDEX_ENTRY.pack_into(
            self.buffer, self.size - INDEX_ENTRY.size * self.entries, offset, size, track_id, count, first_ts, last_ts
        )
        self._add_track(track_id, count, size)

    def index_run(self, run: EventsRun) -> None:
        """The EVENTS frames of ``run`` (read here already) are stored: their index entries, and ``used`` past
        them."""
        top = self.size - INDEX_ENTRY.size * self.entries
        bottom = top - len(run.entries)
        assert bottom >= run.end, "the reader leaves room for the index entries of what it reads"
        self.buffer[bottom:top] = run.entries
        self.used = run.end
        self.entries += run.frames
        self.events += run.events
        for track_id, (events, size) in run.tracks.items():
            self._add_track(track_id, events, size)

    def _add_track(self, track_id: int, events: int, size: int) -> None:
        total = self.tracks.get(track_id)
        if total is None:
            self.tracks[track_id] = [events, size]
        else:
            total[0] += events
            total[1] += size

    def write_checksum(self, *, end_marker: bool = True) -> None:
        """A CHECKSUM frame over the bytes since the last one, then an end marker that the next frame overwrites
        (the caller reserved ``CHECKSUM_RESERVE`` bytes for both)."""
        with memoryview(self.buffer) as view:
            crc = crc32c.crc32c(view[self.checked : self.used], crc_seed(self.seq))
        CHECKSUM_FRAME.pack_into(self.buffer, self.used, 4, CHECKSUM_TYPE, crc)
        self.used += CHECKSUM_FRAME.size
        self.checked = self.used
        if end_marker:
            self.write_end_marker()

    def write_end_marker(self) -> None:
        """A zero frame header at ``used``: recovery stops there (the caller reserved the room)."""
        FRAME_HEADER.pack_into(self.buffer, self.used, 0, 0)


def crc_seed(seq: int) -> int:
    """Each CHECKSUM's CRC-32C starts from the segment's number: a file reused for another segment keeps old frames
    and checksums after the new ones, and those can never validate as the new segment's."""
    return seq & 0xFFFFFFFF
