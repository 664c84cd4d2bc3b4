"""A connection's way into the store: one ``SegmentWriter`` per stream, which the ingest writes every frame through.

Zero copy: once the stream has an open segment, the writer lends it to the connection's reader (``LentReader.lend``):
the kernel writes each frame where it is stored, and storing it is an index entry. Each read takes most of the room
left in the segment, and a run of frames stops where their index entries would not fit: the unread bytes move to the
next segment, as they do when the segment is full; when the store refuses a segment, or evicts the one being read
into, the reader reads into its own buffer and frames are stored by copy until the store opens a segment again.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import Final, Protocol

from ringtrace.collector.store.ring import Store, Stream, SyncJob, TableRefusal
from ringtrace.collector.store.segments import CHECKSUM_FRAME, INDEX_ENTRY, EventsRun, Segment
from ringtrace.collector.store.streams import MIN_SEGMENT_BYTES, SessionKind
from ringtrace.wire.frame_types import FRAME_HEADER, FrameType

__all__ = ["LentReader", "SegmentWriter"]

#: The most a read into a segment takes (and at most the next segment's size, which takes what it leaves). Each read
#: costs the event loop a few tens of microseconds of Python beside the kernel's copy: 512 KiB reads cost ingest a
#: fifth of its CPU per byte more than 2 MiB ones (large frames, 8 connections).
DIRECT_READ_SIZE: Final = 2048 * 1024
#: The least room a read into a segment gets; with less, the next segment opens (the unread bytes move there).
MIN_DIRECT_READ: Final = 16 * 1024
#: A read into a segment leaves a 1/INDEX_SHARE of the room for the index entries of the frames it brings (frames of
#: 1 KiB or more on average), or less when the stream's last run of frames was of larger ones (``_index_share``):
#: frames whose entries do not fit move on to the next segment (a copy).
INDEX_SHARE: Final = 32
#: In a data dir, a frame with this much still to come is read to its end exactly, so that a batch ends between
#: frames and its checksum goes in without moving unread bytes.
EXACT_READ: Final = 64 * 1024
#: Unread bytes moved past a checksum at the end of a batch at most; with more, the checksum waits (a FLUSH does not).
MAX_MOVE: Final = 16 * 1024


class LentReader(Protocol):
    """What the writer needs of a connection's frame reader: one that can read into memory it is lent (the
    collector's ``LendingFrameReader``)."""

    @property
    def position(self) -> int: ...

    @property
    def end(self) -> int: ...

    @property
    def frame_start(self) -> int: ...

    def next_frame_header(self) -> tuple[int, int] | None: ...

    def unread(self) -> bytes: ...

    def get_buffer(self, sizehint: int = -1, limit: int = 0) -> memoryview: ...

    def lend(self, buffer: bytearray | mmap.mmap, start: int, unread: bytes | None = None) -> None: ...

    def reclaim(self, unread: bytes | None = None) -> None: ...

    def make_room(self, nbytes: int) -> int: ...


class SegmentWriter:
    """Stores what one connection's stream sends: EVENTS frames where they were read, or by copy; session frames;
    checksums at the end of each batch.

    Args:
        store: the store.
        stream: the connection's stream in it (``Store.open_stream``).
        reader: the connection's frame reader, lent the stream's open segment whenever it fits.
        max_frame_bytes: the largest frame the connection may send (a larger header is an error the reader raises).
    """

    __slots__ = ("_frame_bytes", "_lent", "_max_frame_bytes", "_reader", "_store", "stream")

    def __init__(self, store: Store, stream: Stream, reader: LentReader, max_frame_bytes: int) -> None:
        self._store = store
        self.stream = stream
        self._reader = reader
        self._max_frame_bytes = max_frame_bytes
        #: The segment the reader reads into (pinned), or None: it reads into its own buffer.
        self._lent: Segment | None = None
        #: The average size of the EVENTS frames of the last run stored in place (0: none yet).
        self._frame_bytes = 0

    # -- where reads go -------------------------------------------------------------------------------------------

    def read_buffer(self, filled: bool) -> memoryview | None:
        """Where the next read goes in the stream's open segment; None: into the reader's own buffer. ``filled``:
        the last read took all the room it was offered."""
        stream, reader = self.stream, self._reader
        if self._lent is not None and self._lent.evicted:
            self.end_direct()
            return None  # the next EVENTS frame opens the next segment, by copy
        if self._lent is None:
            if stream.segment is None:
                return None  # as above (or it is refused, and counted)
            if self._fits(stream.segment):
                self._lend(stream.segment)
        view = self._view() if self._lent is not None else None
        if view is None:
            if reader.end == reader.position and not filled:
                # Full, between frames: read the next frame's header alone, so that the segment it opens is read
                # into as well; none opens for a connection that sends nothing more. (After a read that took all
                # the room offered, more is likely waiting: the next segment opens at once.)
                self.end_direct()
                return reader.get_buffer(-1)[: FRAME_HEADER.size]
            self._next_segment()  # a frame is arriving: into the next segment
            view = self._view() if self._lent is not None else None
            if view is None:
                self.end_direct()  # the next EVENTS frame opens the next segment, by copy
        return view

    def _view(self) -> memoryview | None:
        segment, reader, stream = self._lent, self._reader, self.stream
        assert segment is not None
        position, end, top = reader.position, reader.end, self._top(segment)
        # Leaving room for the index entries of what is read (a run stops where its entries would not fit, and what
        # is left moves to the next segment), and no more than the next segment takes.
        limit = min(end + DIRECT_READ_SIZE, end + stream.next_size, top - (top - end) // self._index_share())
        if limit - end < MIN_DIRECT_READ:
            return None  # a read for what little room is left would cost as much as a full one: the next segment
        header = reader.next_frame_header()
        if header is not None and header[0] <= self._max_frame_bytes:
            frame_end = position + header[0]  # the frame being received; the unread bytes are part of it
            if frame_end + INDEX_ENTRY.size > top:
                return None  # it does not fit: the next segment
            if self._store.buffers.checksums and frame_end - end >= EXACT_READ:
                return reader.get_buffer(limit=frame_end)
            return reader.get_buffer(limit=max(limit, min(frame_end, end + DIRECT_READ_SIZE)))
        return reader.get_buffer(limit=limit)

    def _index_share(self) -> int:
        """A read leaves 1/this of its room for the index entries of the frames it brings: INDEX_SHARE, or fewer
        for frames the size of the last run's (half that size, to spare a run of smaller ones the move). With 1/32
        of the room kept for 47 KB frames that need 1/1500, each segment took one more read, a short one: a third
        of the reads."""
        return max(INDEX_SHARE, self._frame_bytes // (2 * INDEX_ENTRY.size))

    def _top(self, segment: Segment) -> int:
        """Where the lent segment's index entries begin, less the room kept for checksums: frames stored end before
        it, and so do the entries of the frames still to be indexed."""
        return segment.size - INDEX_ENTRY.size * segment.entries - self._store.reserve

    def _next_fits(self) -> bool:
        """Whether the next frame, when it is complete, ends (with its index entry) before the lent segment's
        index."""
        reader = self._reader
        header = reader.next_frame_header()
        if header is None or header[0] > reader.end - reader.position:
            return True  # incomplete: it is read on into this segment only if it fits (``_view``)
        entry = INDEX_ENTRY.size if header[1] == FrameType.EVENTS else 0
        assert self._lent is not None
        return reader.position + header[0] + entry <= self._top(self._lent)

    def _fits(self, segment: Segment) -> bool:
        """Whether the unread bytes, and the frame they begin, fit in what is left of ``segment``."""
        reader = self._reader
        header = reader.next_frame_header()
        size = header[0] if header is not None and header[0] <= self._max_frame_bytes else 0
        tail = segment.size - INDEX_ENTRY.size * (segment.entries + 1) - self._store.reserve
        return segment.used + max(size, reader.end - reader.position) <= tail

    def _lend(self, segment: Segment, unread: bytes | None = None) -> None:
        self._store.pin(segment)
        self._store.set_direct(self.stream, True)
        self._reader.lend(segment.buffer, segment.used, unread)
        self._lent = segment

    def end_direct(self) -> None:
        """Read into the reader's own buffer again (the unread bytes move there)."""
        if self._lent is not None:
            self._reader.reclaim(self._let_go())

    def _next_segment(self, unread: bytes | None = None) -> None:
        """The stream's open segment is full: read on into a new one (the unread bytes, or ``unread`` when the
        caller took them already, move there), if the store allows."""
        reader = self._reader
        if unread is None:
            header = reader.next_frame_header()
        elif len(unread) >= FRAME_HEADER.size:  # (the reader's buffer past them holds index entries now)
            header = (FRAME_HEADER.size + FRAME_HEADER.unpack_from(unread)[0], 0)
        else:
            header = None
        size = header[0] if header is not None and header[0] <= self._max_frame_bytes else 0
        if self._lent is not None:
            unread = self._let_go(unread=unread)
        if unread is not None:
            size = max(size, len(unread))
        segment = self._store.open_direct(self.stream, size)
        if segment is not None:
            self._lend(segment, unread)
        elif unread is not None:
            reader.reclaim(unread)

    def _let_go(self, end: int | None = None, unread: bytes | None = None) -> bytes:
        """Stop reading into the lent segment, which holds everything before the unread bytes (or before ``end``);
        returns those (``unread`` when the caller took them already; the reader is lent or given back another buffer
        next)."""
        segment, store, reader = self._lent, self._store, self._reader
        assert segment is not None
        unread = reader.unread() if unread is None else unread
        store.advance(self.stream, reader.position if end is None else end)
        store.set_direct(self.stream, False)
        self._lent = None
        store.unpin([segment])
        return unread

    # -- frames in ------------------------------------------------------------------------------------------------

    def begin(self) -> None:
        """Bytes were read: a lent segment the store has evicted since is read into no more."""
        if self._lent is not None and self._lent.evicted:
            self.end_direct()

    def store_runs(self, events_run: Callable[[int], EventsRun | None]) -> None:
        """While the reader reads into a segment, store the runs of complete EVENTS frames next in it where they are
        (``events_run(top)`` takes them from the reader), moving on to the next segment where one is full."""
        reader, store = self._reader, self._store
        while self._lent is not None:
            start = reader.position
            header = reader.next_frame_header()
            # (a run begins at an EVENTS frame: before any other, as each TRACK frame of OTLP lanes, none is looked for)
            run = None if header is not None and header[1] != FrameType.EVENTS else events_run(self._top(self._lent))
            unread = None
            if run is not None:
                if reader.end > self._top(self._lent) - len(run.entries):
                    unread = reader.unread()  # read past the run, into where its index entries go
                store.events_in_place(self.stream, run)
                self._frame_bytes = (run.end - start) // run.frames
            if unread is None and self._next_fits():
                return
            self._next_segment(unread)  # the unread bytes move to the next segment

    def events(self, track_id: int, count: int, first_ts_ns: int, last_ts_ns: int, frame: memoryview) -> bool:
        """Store the EVENTS frame the reader returned last (``frame``); False when the store refused it (and
        counted so)."""
        stream, store = self.stream, self._store
        if self._lent is not None:  # store_runs takes these first; this one is in place all the same
            start, end = self._reader.frame_start, self._reader.position
            entry = INDEX_ENTRY.pack(start, end - start, track_id, count, first_ts_ns, last_ts_ns)
            store.events_in_place(stream, EventsRun(entry, count, {track_id: [count, end - start]}, end))
            return True
        if not store.events(stream, track_id, count, first_ts_ns, last_ts_ns, frame):
            return False
        if stream.segment is not None and self._fits(stream.segment):
            self._lend(stream.segment)  # stored by copy (into the segment it opened, say): on in place
        return True

    def taken(self) -> None:
        """The frame the reader returned last is not EVENTS: in a lent segment, it is stored where it is."""
        if self._lent is not None:
            self._store.advance(self.stream, self._reader.position)

    def session_frame(
        self, frame: bytes | memoryview, kind: SessionKind, *, track_id: int = -1, ended: bool = False
    ) -> None:
        """A SCHEMA, STRINGS, TRACK or STATS frame the stream's decoder accepted (``Store.session_frame``)."""
        self._store.session_frame(self.stream, frame, kind=kind, track_id=track_id, ended=ended)

    def charge_tables(self, decoder_bytes: int) -> TableRefusal | None:
        """``Store.charge_tables``: None, or why the tables cannot grow (the connection must end)."""
        return self._store.charge_tables(self.stream, decoder_bytes)

    # -- batches, errors, the end ---------------------------------------------------------------------------------

    def commit(self, *, force: bool) -> None:
        """The batch read is stored: checksum it (data dir), at once if ``force``, else once no more than MAX_MOVE
        unread bytes must move past the checksum."""
        store, stream = self._store, self.stream
        if self._lent is None:
            store.commit(stream)
            return
        reader = self._reader
        store.advance(stream, reader.position)
        unread = reader.end - reader.position
        if store.uncommitted(stream) and (force or unread <= MAX_MOVE):
            reader.make_room(CHECKSUM_FRAME.size)  # the checksum goes at the reader's position
            store.commit(stream, end_marker=not unread)

    def cut(self, end: int) -> None:
        """The frame at ``end`` broke a rule: what the lent segment holds ends before it, and the reader reads into
        its own buffer (nothing more is read)."""
        if self._lent is not None:
            self._let_go(end)
            self._reader.reclaim(b"")

    def sync_job(self) -> SyncJob | None:
        """``Store.sync_job`` for this stream."""
        return self._store.sync_job(self.stream)

    def seal(self, opened_before_ns: int | None = None) -> None:
        """Seal the stream's open segment now, if it holds events (and was opened before ``opened_before_ns``): the
        reader reads into its own buffer again, and the next frame opens another segment. For JetStream, which
        publishes what is sealed, and ``--max-age``, which removes what was sealed long enough ago."""
        segment = self.stream.segment
        if segment is None or segment.entries == 0:
            return
        if opened_before_ns is not None and segment.written_ns >= opened_before_ns:
            return
        self.end_direct()
        used = segment.used
        self._store.end_segment(self.stream)
        # Sealed for its age, not for being full: the next one is sized to what came meanwhile (twice, a power of
        # two), not doubled again. Sealed every 200 ms, doubling would soon make each a large, mostly empty buffer.
        fitting = max(MIN_SEGMENT_BYTES, 1 << (2 * used - 1).bit_length())
        self.stream.next_size = min(self.stream.next_size, fitting)

    def close(self) -> int:
        """The connection ended: the stream closes (what it stored stays); returns the bytes its tables were
        charged."""
        self.end_direct()
        charged = self.stream.charged
        self._store.close_stream(self.stream)
        return charged
