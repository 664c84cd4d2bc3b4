"""Reading a client's stream into memory the collector lends: a segment, so that the kernel writes each frame where
it is stored and nothing is copied.

``LendingFrameReader`` is the wire's ``FrameReader`` that can also read into a lent buffer (``lend``, ``reclaim``),
says where frames are in it (``position``, ``frame_start``, ``end``), and takes a run of EVENTS frames in one loop
(``events_run``, the ingest's scan). ``IngestDecoder`` is the session decoder that reads through one, and offers that
run only once the stream is open.
"""

from __future__ import annotations

import mmap
import sys
from collections.abc import Container
from typing import Final, cast

from ringtrace.collector.ingest.scan import scan_events
from ringtrace.collector.store.segments import EVENTS_ENTRY, EventsRun
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.frames import DEFAULT_MAX_FRAME_BYTES, FRAME_HEADER, Peer
from ringtrace.wire.reader import FrameReader

__all__ = ["MAPPED_BUFFER_BYTES", "IngestDecoder", "LendingFrameReader"]

#: A reader's own buffer this large or larger, grown for a large frame, is an anonymous mapping
#: (``LendingFrameReader._new_buffer``).
MAPPED_BUFFER_BYTES: Final = 512 * 1024


class LendingFrameReader(FrameReader):
    """A ``FrameReader`` that may also read into memory it is lent (``lend``): offsets (``position``,
    ``frame_start``) are then the lent buffer's, and each ``get_buffer`` call says how far the caller lets it read
    (``limit``)."""

    __slots__ = ("_lent", "_own")

    def __init__(
        self,
        peer: Peer,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        *,
        borrow: bool = False,
        read_size: int = 64 * 1024,
        live: bool = True,
        concatenated: bool = False,
    ) -> None:
        super().__init__(
            peer, max_frame_bytes, borrow=borrow, read_size=read_size, live=live, concatenated=concatenated
        )
        #: The reader's own buffer while it reads into a lent one.
        self._own: bytearray | mmap.mmap | None = None
        self._lent = False

    def get_buffer(self, sizehint: int = -1, limit: int = 0) -> memoryview:
        """A writable view of at least ``sizehint`` free bytes (``FrameReader.get_buffer``); in a lent buffer: the
        bytes from ``end`` up to ``limit``, which the lender chose."""
        if self._lent:
            return memoryview(self._buf)[self._end : limit]
        return super().get_buffer(sizehint)

    def shrink(self) -> None:
        """Once nothing is left unread in it, a buffer grown for a large frame (to twice ``read_size`` or more) goes
        back to ``read_size``: a connection holds twice its largest frame only while such a frame arrives. (Frames
        returned before, and their ``last_frame``, are not read after this.)"""
        if (
            not self._lent
            and self._start == self._end
            and len(self._buf) >= max(2 * self._read_size, MAPPED_BUFFER_BYTES)
        ):
            self._buf = self._new_buffer(self._read_size)
            self._start = self._end = self._frame_start = 0

    def _new_buffer(self, size: int) -> bytearray | mmap.mmap:
        """An anonymous mapping past ``MAPPED_BUFFER_BYTES``, so that the OS has it back as soon as it is let go of
        (glibc would keep such a bytearray in its heap once it has freed one as large)."""
        if size < MAPPED_BUFFER_BYTES:
            return bytearray(size)
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)

    @property
    def buffer_bytes(self) -> int:
        """The size of the reader's own buffer (while it reads into a lent one too)."""
        own = self._own if self._lent else self._buf
        return len(own) if own is not None else 0

    def lend(self, buffer: bytearray | mmap.mmap, start: int, unread: bytes | None = None) -> None:
        """Read on into ``buffer`` from offset ``start``, where the unread bytes (``unread`` if given, else the
        current buffer's) are put first. The lender keeps the buffer alive and unchanged from ``start`` on until
        ``reclaim`` or the next ``lend``."""
        if unread is None:
            unread = self.unread()
        end = start + len(unread)
        assert end <= len(buffer), "the lender leaves room for the unread bytes"
        buffer[start:end] = unread
        if not self._lent:
            self._own = self._buf
        self._buf, self._lent = buffer, True
        self._frame_start = self._start = start
        self._end = end

    def reclaim(self, unread: bytes | None = None) -> None:
        """Read into the reader's own buffer again; the unread bytes (``unread`` if given) move there."""
        if self._lent:
            if unread is None:
                unread = self.unread()
            assert self._own is not None
            self._buf, self._own, self._lent = self._own, None, False
            self._start = self._frame_start = self._end = 0
            if unread:
                self.receive_data(unread)

    def unread(self) -> bytes:
        """A copy of the bytes received and not yet returned as frames."""
        return bytes(self._buf[self._start : self._end])

    @property
    def read_size(self) -> int:
        """The least free room ``get_buffer`` offers in the reader's own buffer (it grows to that when it must)."""
        return self._read_size

    @read_size.setter
    def read_size(self, nbytes: int) -> None:
        self._read_size = nbytes

    @property
    def position(self) -> int:
        """Offset in the buffer just past the last frame returned or skipped: where the unread bytes start."""
        return self._start

    @property
    def end(self) -> int:
        """Offset in the buffer just past the bytes received."""
        return self._end

    @property
    def frame_start(self) -> int:
        """Offset in the buffer of the frame returned last."""
        return self._frame_start

    def next_frame_header(self) -> tuple[int, int] | None:
        """(size, type) of the frame being received, once its header is in; None before that."""
        if self._end - self._start < FRAME_HEADER.size or not self._preamble_done:
            return None
        body_length, frame_type = FRAME_HEADER.unpack_from(self._buf, self._start)
        return FRAME_HEADER.size + body_length, frame_type

    def events_run(self, tracks: Container[int], top: int | None = None) -> EventsRun | None:
        """The complete EVENTS frames next in the buffer, taken as ``next_frame`` would, in one loop, for a caller
        that stores frames where they are; None when there are none. Stops before any other frame, an incomplete
        one, one that breaks a rule or names a track not in ``tracks`` (``next_frame`` then raises the error that
        names it), and one that would not end, with the run's index entries (``EVENTS_ENTRY``) below it, by
        ``top``."""
        if not self._preamble_done or self._error is not None:
            return None
        top = sys.maxsize if top is None else top
        found = scan_events(self._buf, self._start, self._end, self._max_frame_bytes, tracks, top)
        if found is None:
            return None
        run = EventsRun(*found)
        self._frame_start, self._start = EVENTS_ENTRY.unpack_from(run.entries)[0], run.end
        return run

    def make_room(self, nbytes: int) -> int:
        """Move the unread bytes ``nbytes`` further on (the buffer must have room) and return the offset of the room
        made before them, for the lender to write a frame of its own (a segment's checksum)."""
        start, end = self._start, self._end
        if end > start:
            with memoryview(self._buf) as view:
                view[start + nbytes : end + nbytes] = view[start:end]
        self._start, self._end = start + nbytes, end + nbytes
        return start


class IngestDecoder(SessionDecoder):
    """A session decoder that reads through a ``LendingFrameReader`` (the collector's side of a connection)."""

    __slots__ = ()

    _READER = LendingFrameReader

    @property
    def reader(self) -> LendingFrameReader:
        """The framing underneath: where bytes go (``LendingFrameReader.lend``) and the offsets of frames in it."""
        return cast(LendingFrameReader, self._reader)

    def events_run(self, top: int | None = None) -> EventsRun | None:
        """The complete EVENTS frames next in the stream, checked as ``next_frame`` checks them, in one loop (the
        collector's fast path; offsets are in the reader's buffer), that end with their index entries below ``top``
        (``LendingFrameReader.events_run``). None at anything else: ``next_frame`` takes it from there."""
        return self.reader.events_run(self.tables.tracks, top) if self._state == "OPEN" else None
