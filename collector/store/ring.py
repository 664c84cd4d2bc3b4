"""The store: every client stream's recent past in self-describing segments, within a byte budget, every loss counted.

Theory of operation
-------------------
Each connection writes into segments of its own (``Stream``). A segment opens with the session frames the stream has
declared so far (HELLO, SCHEMA, STRINGS, its live TRACKs, the latest STATS), replayed verbatim, so that it decodes
alone (``segments.py``); then it takes the stream's frames as they come. A stream's segments double in size from
``MIN_SEGMENT_BYTES`` up to ``segment_bytes``: a quiet process holds little, a busy one pays for its prefix rarely.
Their sizes are powers of two, so that the buffers of evicted segments fit new ones.
A segment is larger when one frame and the session frames need it, and at least four times the session frames (a
process with many kinds or strings would otherwise store mostly prefixes).

Budget: the sizes of all stored segments (prefix, frames, index and unused tail alike) and the tables of the open
connections (their strings, kinds and tracks: ``charge_tables``) stay within ``capacity_bytes``, and one process's
segments within ``process_capacity_bytes``. Room for a new segment is made, under the ``ring`` policy, by
evicting the process's own oldest segment while it is at its cap, then the oldest segment of all (sealed ones first:
a connection's open segment holds its newest events, and may be being read into); under ``discard``, the frame is
refused instead, so the store keeps the beginning. Buffers of evicted segments are reused while the stored bytes and
the spare buffers together stay within the capacity.

Accounting, per (process, track), in events and bytes of EVENTS frames: every frame received either stays stored or
leaves by exactly one of overwritten (evicted to make room), capped (evicted or refused for its process's cap) and
discarded (refused: the store is full, or the frame cannot be stored at all) and cleared (removed on request). So
received = stored + overwritten + capped + discarded + cleared holds at every moment, per track, per process and in
total.

Snapshots pin the segments they read: an evicted segment's buffer is reused or unmapped only once no snapshot reads it
(each snapshot lets go of a segment as soon as it has read it).
No asyncio here: plain synchronous code, called from the event loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Final, Literal, Protocol

from ringtrace.client.wire.decoder import (
    DENSE_STRING_IDS,
    KIND_ENTRY_BYTES,
    STRING_ENTRY_BYTES,
    TRACK_ENTRY_BYTES,
    Limits,
)
from ringtrace.client.wire.errors import ConfigError
from ringtrace.client.wire.frames import preamble
from ringtrace.collector.store.accounts import Accounts, Counts, ProcessHolding
from ringtrace.collector.store.segments import (
    CHECKSUM_FRAME,
    CHECKSUM_RESERVE,
    INDEX_ENTRY,
    Buffer,
    EventsRun,
    MemoryBuffers,
    Recovered,
    Segment,
    SegmentBuffers,
)

__all__ = ["MIN_SEGMENT_BYTES", "Counts", "Policy", "SegmentView", "Store", "StoreSnapshot", "Stream", "SyncJob"]

log = logging.getLogger("ringtrace.collector.store")

Policy = Literal["ring", "discard"]
#: The first segment of a stream; later ones double up to ``segment_bytes``.
MIN_SEGMENT_BYTES: Final = 64 * 1024
_ALIGN: Final = 4096
_PREAMBLE: Final = preamble()
_ENTRY: Final = INDEX_ENTRY.size
#: Memory a stored TRACK frame takes beside its bytes (the bytes object's header, its entry in a dict).
_TRACK_FRAME_BYTES: Final = 100


def _aligned(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


def _power_of_two_within(size: int) -> int:
    return 1 << (size.bit_length() - 1)


class Stream:
    """One connection's writer: the session frames a new segment of it replays, and its open segment."""

    __slots__ = (
        "charged", "counts", "direct", "hello", "next_size", "owner", "schema", "segment", "session_bytes", "stats",
        "strings", "tracks", "unsynced",
    )  # fmt: skip

    def __init__(self, owner: int, counts: dict[int, Counts], hello: bytes, first_size: int) -> None:
        self.owner = owner
        #: The process's counts per track id.
        self.counts = counts
        self.hello = hello
        #: SCHEMA and STRINGS frames, each kind end to end in one buffer: tables only grow, and a hostile peer's
        #: thousands of small frames would cost an object each (``session_frame``).
        self.schema = bytearray()
        self.strings = bytearray()
        self.tracks: dict[int, bytes] = {}
        self.stats = b""
        #: Bytes a new segment opens with: the preamble and every frame above.
        self.session_bytes = len(_PREAMBLE) + len(hello)
        self.segment: Segment | None = None
        #: The connection reads straight into ``segment`` (``open_direct``): its frames are stored where they are.
        self.direct = False
        self.next_size = first_size
        #: Segments sealed since the last FLUSH, to sync at the next (``fsync`` flush).
        self.unsynced: list[Segment] = []
        #: Bytes of its connection's tables counted against the capacity (``Store.charge_tables``).
        self.charged = 0

    @property
    def memory_bytes(self) -> int:
        """About the memory its session frames take, at most what they take (a bytes object and a dict entry a
        track)."""
        return (
            self.session_bytes + _TRACK_FRAME_BYTES * len(self.tracks) + len(self.schema) // 8 + len(self.strings) // 8
        )

    def session_frames(self) -> Iterator[bytes | bytearray]:
        yield _PREAMBLE
        yield self.hello
        yield self.schema
        yield self.strings
        yield from self.tracks.values()
        if self.stats:
            yield self.stats


class _Receiver(Protocol):
    def receive_data(self, data: bytes | memoryview) -> None: ...


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

    def index(self) -> Iterator[tuple[int, int, int, int, int, int]]:
        """(offset, size, track, count, first_ts, last_ts) of each EVENTS frame, oldest first."""
        buffer, size, step = self.buffer, self.size, INDEX_ENTRY.size
        for i in range(1, self.entries + 1):
            yield INDEX_ENTRY.unpack_from(buffer, size - step * i)

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
        on_store_thread: runs a callable on the store's thread, from any thread (``loop.call_soon_threadsafe``);
            without it ``release`` unpins nothing before ``close()``.
    """

    def __init__(
        self, store: Store, segments: list[Segment], on_store_thread: Callable[[Callable[[], None]], object] | None
    ) -> None:
        self._store: Store | None = store
        #: By seq (unique to a segment): what is still pinned, and where its view is.
        self._pinned = {s.seq: (i, s) for i, s in enumerate(segments)}
        self._on_store_thread = on_store_thread
        self.segments = [SegmentView(s.seq, s.owner, s.buffer, s.size, s.used, s.entries, s.events) for s in segments]

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


def table_charge_bound(limits: Limits) -> int:
    """At most what one connection's tables are charged (``Store.charge_tables``) when it declares all ``limits``
    allow: its decoder's tables (``SessionDecoder.table_bytes``: the strings' hashes, dense or sparse; each track and
    its name, Python's str at up to 4 bytes a character; each kind and its texts) and the session frames kept to
    replay them (``Stream.memory_bytes``). An upper estimate, to tell how many such connections a capacity holds."""
    strings = max(16 * max(limits.max_strings, DENSE_STRING_IDS), limits.max_strings * STRING_ENTRY_BYTES)
    tracks = limits.max_tracks * (TRACK_ENTRY_BYTES + 64 + _TRACK_FRAME_BYTES) + 5 * limits.max_string_bytes
    kinds = limits.max_kinds * KIND_ENTRY_BYTES + 6 * limits.max_schema_bytes
    string_frames = 2 * limits.max_string_bytes + 8 * limits.max_strings
    return strings + tracks + kinds + string_frames


class Store:
    """Bounded storage of client streams; see the module docstring.

    Args:
        capacity_bytes: what all stored segments may take together.
        segment_bytes: the size a stream's segments grow to (a segment is larger only when one frame and the
            stream's session frames need it).
        process_capacity_bytes: what one process's segments may take (default: the capacity).
        policy: ``ring`` overwrites the oldest; ``discard`` refuses the newest.
        buffers: where segment buffers come from (memory by default, or a ``DataDir``).

    Raises:
        ConfigError: a bound that cannot hold two segments of ``segment_bytes``.
    """

    def __init__(
        self,
        capacity_bytes: int,
        segment_bytes: int,
        *,
        process_capacity_bytes: int | None = None,
        policy: Policy = "ring",
        buffers: SegmentBuffers | None = None,
    ) -> None:
        process_capacity_bytes = capacity_bytes if process_capacity_bytes is None else process_capacity_bytes
        for name, value in (("capacity", capacity_bytes), ("process capacity", process_capacity_bytes)):
            if value < 2 * segment_bytes:
                raise ConfigError(f"{name} of {value} bytes must hold at least 2 segments of {segment_bytes} bytes")
        if policy not in ("ring", "discard"):
            raise ConfigError(f"policy must be 'ring' or 'discard', got {policy!r}")
        self.capacity_bytes = capacity_bytes
        self.segment_bytes = segment_bytes
        self.process_capacity_bytes = min(process_capacity_bytes, capacity_bytes)
        #: None when no process cap is set: a process then only meets the capacity (its losses are overwritten).
        self._process_cap = process_capacity_bytes if process_capacity_bytes < capacity_bytes else None
        self.policy: Policy = policy
        self.buffers = buffers if buffers is not None else MemoryBuffers()
        #: Room kept free in every segment for its closing CHECKSUM frame, and for one more that a connection reading
        #: into the segment makes room for before its unread bytes (``LendingFrameReader.make_room``).
        self.reserve = CHECKSUM_RESERVE + CHECKSUM_FRAME.size if self.buffers.checksums else 0
        self._segments: dict[int, Segment] = {}  # oldest first
        self._writers: dict[int, Stream] = {}  # segment seq -> the stream writing into it
        self._processes: dict[int, ProcessHolding] = {}
        self._seq = 0
        #: Connections open.
        self._streams = 0
        self.held_bytes = 0
        #: Memory of the open connections' tables, counted against the capacity as segments are (``charge_tables``).
        self.table_bytes = 0
        self._refusals_logged: set[str] = set()
        #: What every process received and lost, and which segments were removed on request (``accounts.py``).
        self.accounts = Accounts(self._processes)

    # -- streams ------------------------------------------------------------------------------------------------

    def open_stream(self, owner: int, hello_frame: bytes | memoryview) -> Stream:
        """A new connection of process ``owner``, which said ``hello_frame`` (the HELLO frame's bytes)."""
        process = self._processes.setdefault(owner, ProcessHolding())
        process.streams += 1
        self._streams += 1
        return Stream(owner, process.counts, bytes(hello_frame), MIN_SEGMENT_BYTES)

    def close_stream(self, stream: Stream) -> None:
        """The connection ended: seal its segment (what it holds stays stored; a segment without events goes)."""
        self._end_segment(stream)
        self._processes[stream.owner].streams -= 1
        self._streams -= 1
        self.table_bytes -= stream.charged
        stream.charged = 0

    def charge_tables(self, stream: Stream, decoder_bytes: int) -> int | None:
        """Count the stream's tables against the capacity: ``decoder_bytes`` (what its decoder's tables take) and its
        session frames. A connection's tables cost memory as its segments do, and clients choose how much: counted
        this way, ``capacity`` bounds them too, whatever ``max_connections`` is. Under ``ring``, room is made as for
        a segment (the oldest segments are overwritten, but the stream's open one); ``discard`` overwrites nothing,
        and takes tables past the stored segments (a full store would otherwise end every connection that declares
        a string), but not past the capacity for the tables alone. Returns None, or the bytes that would be needed
        past the capacity: the connection must end."""
        charge = decoder_bytes + stream.memory_bytes
        grow = charge - stream.charged
        if grow <= 0:
            self.table_bytes += grow
            stream.charged = charge
            return None
        own_segment = stream.segment.size if stream.segment is not None else 0
        if self.table_bytes + grow + own_segment > self.capacity_bytes:  # never fits: overwrite nothing for it
            return self.held_bytes + self.table_bytes + grow
        while self.policy == "ring" and self.held_bytes + self.table_bytes + grow > self.capacity_bytes:
            oldest = self._oldest() if self._segments else None
            if oldest is None or oldest is stream.segment:
                return self.held_bytes + self.table_bytes + grow
            self._evict(oldest, "overwritten")
        if self.table_bytes + grow > self.capacity_bytes:
            return self.table_bytes + grow
        self.table_bytes += grow
        stream.charged = charge
        self.buffers.trim(self.capacity_bytes - self.held_bytes - self.table_bytes)  # spare buffers take memory too
        return None

    def session_frame(self, stream: Stream, frame: bytes | memoryview, *, track_id: int = -1, ended: bool = False,
                      kind: Literal["schema", "strings", "track", "stats"]) -> None:  # fmt: skip
        """A SCHEMA, STRINGS, TRACK or STATS frame (header included) the stream's decoder accepted."""
        data = frame
        if kind == "schema":
            stream.schema += frame
            stream.session_bytes += len(frame)
        elif kind == "strings":
            stream.strings += frame
            stream.session_bytes += len(frame)
        elif kind == "track":
            old = stream.tracks.pop(track_id, b"")
            stream.session_bytes -= len(old)
            if not ended:
                stream.tracks[track_id] = data = bytes(frame)
                stream.session_bytes += len(data)
        else:
            stream.session_bytes += len(frame) - len(stream.stats)
            stream.stats = data = bytes(frame)
        segment = stream.segment
        if segment is None or stream.direct:
            return  # the next segment opens with it; or it is in the segment already
        if segment.free >= len(data) + self.reserve:
            segment.write(data)
        else:
            self._end_segment(stream)

    def events(
        self, stream: Stream, track_id: int, count: int, first_ts_ns: int, last_ts_ns: int, frame: bytes | memoryview
    ) -> bool:
        """Store one EVENTS frame (header included); False when it was refused (and counted so)."""
        size = len(frame)
        counts = stream.counts.get(track_id)
        if counts is None:
            counts = stream.counts[track_id] = Counts()
        counts.received_events += count
        counts.received_bytes += size
        segment = stream.segment
        if segment is None or segment.size - segment.used - _ENTRY * (segment.entries + 1) - self.reserve < size:
            segment = self._open_segment(stream, size, counts, count)
            if segment is None:
                return False
        segment.write_events(frame, track_id, count, first_ts_ns, last_ts_ns)
        return True

    def events_in_place(self, stream: Stream, run: EventsRun) -> None:
        """Store EVENTS frames the connection read into its open segment (``stream.direct``)."""
        segment, all_counts = stream.segment, stream.counts
        assert segment is not None and stream.direct, "frames in place need the segment they were read into"
        segment.index_run(run)
        for track_id, (events, nbytes) in run.tracks.items():
            counts = all_counts.get(track_id)
            if counts is None:
                counts = all_counts[track_id] = Counts()
            counts.received_events += events
            counts.received_bytes += nbytes

    def advance(self, stream: Stream, end: int) -> None:
        """Everything the connection read into its open segment up to ``end`` is stored (``stream.direct``)."""
        if stream.segment is not None and stream.direct:
            stream.segment.used = end

    def open_direct(self, stream: Stream, frame_bytes: int) -> Segment | None:
        """Seal the stream's open segment and open one for the connection to read into (``set_direct``), with room
        for a frame of ``frame_bytes``; None when the policy refuses it (the connection then stores by copy, and
        each frame is counted where it is refused)."""
        self._end_segment(stream)
        segment = self._new_segment(stream, frame_bytes)
        return segment if isinstance(segment, Segment) else None

    def set_direct(self, stream: Stream, direct: bool) -> None:
        """Whether the connection reads straight into the stream's open segment (its frames are then stored where
        they are: ``events_in_place``, ``advance``) or stores frames by copy."""
        stream.direct = direct and stream.segment is not None

    def commit(self, stream: Stream, *, end_marker: bool = True) -> None:
        """Checksum what the stream wrote since the last checksum (data dir): a CHECKSUM frame at ``used`` and, with
        ``end_marker``, an end marker after it (without: the caller has unread bytes there, moved out of the way)."""
        segment = stream.segment
        if segment is None or not self.buffers.checksums:
            return
        if segment.used > segment.checked:
            segment.write_checksum(end_marker=end_marker)
        elif end_marker:  # the last checksum had none: what follows it now is no frame of this segment
            segment.write_end_marker()

    def uncommitted(self, stream: Stream) -> bool:
        """Whether the stream wrote bytes that no checksum covers yet (data dir)."""
        segment = stream.segment
        return segment is not None and self.buffers.checksums and segment.used > segment.checked

    def sync_job(self, stream: Stream) -> SyncJob | None:
        """What must be synced to make everything the stream's checksums cover durable (None: nothing, or ``fsync``
        never); the caller commits first."""
        if self.buffers.fsync == "never":
            return None
        segments = [s for s in stream.unsynced if not s.evicted]
        stream.unsynced.clear()
        if stream.segment is not None:
            segments.append(stream.segment)
        return self._sync_job(segments)

    def sync_all_job(self) -> SyncJob | None:
        """What must be synced to make everything every checksum covers durable (``fsync`` interval, and on stop);
        as ``sync_job``."""
        return self._sync_job(list(self._segments.values())) if self.buffers.checksums else None

    def _sync_job(self, segments: list[Segment]) -> SyncJob | None:
        ranges = []
        for segment in segments:
            if segment.checked > segment.synced:
                ranges.append((segment, segment.synced, segment.checked))
                segment.synced = segment.checked
        return SyncJob(self.buffers, ranges) if ranges else None

    # -- segments -----------------------------------------------------------------------------------------------

    def _open_segment(self, stream: Stream, frame_bytes: int, counts: Counts, count: int) -> Segment | None:
        self._end_segment(stream)
        segment = self._new_segment(stream, frame_bytes)
        if isinstance(segment, Segment):
            return segment
        if segment.startswith("process"):
            counts.capped_events += count
            counts.capped_bytes += frame_bytes
        else:
            counts.discarded_events += count
            counts.discarded_bytes += frame_bytes
        self._log_refusal(segment)
        return None

    def _new_segment(self, stream: Stream, frame_bytes: int) -> Segment | str:
        """The stream's next segment, opened with its session frames; or why it cannot be (nothing is counted)."""
        needed = stream.session_bytes + frame_bytes + INDEX_ENTRY.size + self.reserve
        # The session frames take at most a quarter of a segment, unless that does not fit the bounds.
        roomy = 4 * stream.session_bytes if 8 * stream.session_bytes <= self.process_capacity_bytes else 0
        size = _aligned(max(stream.next_size, needed, roomy))
        largest = self._largest_segment()
        refusal = self._make_room(stream.owner, size)
        if refusal is None:
            # A spare buffer up to the size the stream's segments grow to, if it fits as well, rather than a fresh one.
            spare = self.buffers.spare_size(size, at_most=max(size, largest))
            if spare != size and self._fits(stream.owner, spare):
                size = spare
            if not self.buffers.has(size):  # a new buffer: make room for it among the spare ones
                self.buffers.trim(self.capacity_bytes - self.held_bytes - self.table_bytes - size)
        buffer = None
        while refusal is None and buffer is None:
            try:
                buffer = self.buffers.new(self._seq, size)
            except OSError as exc:  # a full disk, say: under ring, the oldest segment makes room as when full
                if self.policy == "discard" or not self._segments:
                    refusal = f"allocation: cannot allocate a segment of {size} bytes: {exc}"
                else:
                    self._evict(self._oldest(), "overwritten")
                    self.buffers.trim(0)  # a spare of another size gives its room back
        if refusal is not None or buffer is None:
            return refusal or "allocation: no buffer"
        segment = Segment(self._seq, buffer, stream.owner)
        self._seq += 1
        for data in stream.session_frames():
            segment.write(data)
        self._segments[segment.seq] = segment
        self._writers[segment.seq] = stream
        process = self._processes[stream.owner]
        process.segments.append(segment)
        process.held_bytes += size
        self.held_bytes += size
        stream.segment = segment
        stream.next_size = _power_of_two_within(min(max(size, stream.next_size) * 2, largest))
        return segment

    def _largest_segment(self) -> int:
        """What a stream's segments grow to: up to segment_bytes, and to half of a stream's share of the capacity,
        so that open segments are not evicted while many connections write at once (the one being read into would
        be, and reading would go by copy). A power of two: evicted segments' buffers, pooled by size, then fit the
        next ones (a fresh buffer costs zeroing and a page fault per page)."""
        share = max(self.capacity_bytes // (2 * self._streams), MIN_SEGMENT_BYTES)
        return _power_of_two_within(min(self.segment_bytes, share))

    def _make_room(self, owner: int, size: int) -> str | None:
        """Evict (ring) until a segment of ``size`` fits both bounds; or why it cannot be stored."""
        process, cap = self._processes[owner], self._process_cap
        if size > self.process_capacity_bytes:
            return (
                f"{'process ' if cap else ''}capacity: a segment of {size} bytes (the stream's session frames and "
                f"one frame) exceeds {'process_capacity' if cap else 'capacity'}={self.process_capacity_bytes}"
            )
        while cap is not None and process.held_bytes + size > cap:
            if self.policy == "discard" or not process.segments:
                return f"process capacity: process_capacity={cap} bytes reached (policy discard)"
            self._evict(process.segments[0], "capped")
        while self.held_bytes + self.table_bytes + size > self.capacity_bytes:
            if self.policy == "discard":
                return f"capacity: capacity={self.capacity_bytes} bytes reached (policy discard)"
            if not self._segments:  # (ring) what is left is connections' tables: nothing to overwrite
                return (
                    f"capacity: capacity={self.capacity_bytes} bytes taken by connections' tables "
                    f"({self.table_bytes} bytes): no room for a segment of {size} bytes"
                )
            self._evict(self._oldest(), "overwritten")
        return None

    def _fits(self, owner: int, size: int) -> bool:
        """Whether a segment of ``size`` fits both bounds as they stand."""
        cap = self._process_cap
        fits_cap = cap is None or self._processes[owner].held_bytes + size <= cap
        return fits_cap and self.held_bytes + self.table_bytes + size <= self.capacity_bytes

    def _end_segment(self, stream: Stream) -> None:
        """The stream writes into its open segment no more: sealed, or dropped if it holds no events (its session
        frames open the next one again)."""
        segment = stream.segment
        if segment is not None and segment.entries == 0:
            self._drop(segment)
        elif segment is not None:
            self._seal(stream)

    def _seal(self, stream: Stream) -> None:
        segment = stream.segment
        assert segment is not None
        self.commit(stream)
        if self.buffers.fsync in ("flush", "always"):  # synced by the stream's next sync job
            stream.unsynced = [s for s in stream.unsynced if not s.evicted]  # a stream that never flushes
            stream.unsynced.append(segment)
        self._writers.pop(segment.seq, None)
        stream.segment = None
        stream.direct = False

    def _evict(self, segment: Segment, why: Literal["overwritten", "capped", "cleared"]) -> None:
        del self._segments[segment.seq]
        writer = self._writers.pop(segment.seq, None)
        if writer is not None:
            writer.segment = None
            writer.direct = False
        process = self._processes[segment.owner]
        oldest = process.segments.popleft()
        assert oldest is segment, "a process's segments leave oldest first"
        process.held_bytes -= segment.size
        self.held_bytes -= segment.size
        events_name, bytes_name = f"{why}_events", f"{why}_bytes"
        for track_id, (events, size) in segment.tracks.items():
            counts = process.counts[track_id]
            setattr(counts, events_name, getattr(counts, events_name) + events)
            setattr(counts, bytes_name, getattr(counts, bytes_name) + size)
        segment.evicted = True
        if segment.pins == 0:
            self._release(segment)
        else:
            self.buffers.retire(segment)

    def _oldest(self) -> Segment:
        """The segment the ring overwrites next: the oldest sealed one, or the oldest of all when every segment is
        open (a connection's open segment holds its newest events, and is read into as they arrive)."""
        writers = self._writers
        for segment in self._segments.values():
            if segment.seq not in writers:
                return segment
        return next(iter(self._segments.values()))

    def _drop(self, segment: Segment) -> None:
        """Remove a segment that holds no events (nothing to count): session frames replayed for a frame that never
        came."""
        del self._segments[segment.seq]
        writer = self._writers.pop(segment.seq)
        writer.segment, writer.direct = None, False
        process = self._processes[segment.owner]
        process.segments.remove(segment)
        process.held_bytes -= segment.size
        self.held_bytes -= segment.size
        segment.evicted = True
        if segment.pins == 0:
            self._release(segment)

    def _release(self, segment: Segment) -> None:
        reuse = self.held_bytes + self.table_bytes + self.buffers.pooled_bytes + segment.size <= self.capacity_bytes
        self.buffers.release(segment, reuse=reuse)

    def _log_refusal(self, why: str) -> None:
        kind = why.split(":", 1)[0]  # "process capacity", "capacity" or "allocation"
        if kind not in self._refusals_logged:  # once per kind: a full discard store refuses every frame
            self._refusals_logged.add(kind)
            log.warning("refusing frames: %s; counted per track (logged once)", why)

    # -- recovery -----------------------------------------------------------------------------------------------

    def adopt(self, recovered: Recovered, owner: int) -> None:
        """A segment recovered from the data dir, sealed, as if it had just been stored (oldest ones first)."""
        process = self._processes.setdefault(owner, ProcessHolding())
        segment = Segment(recovered.seq, recovered.buffer, owner)
        for offset, size, track_id, count, first_ts, last_ts in recovered.entries:
            segment.index_events(offset, size, track_id, count, first_ts, last_ts)
            counts = process.counts.setdefault(track_id, Counts())
            counts.received_events += count
            counts.received_bytes += size
        segment.used = segment.checked = recovered.used
        if segment.size > min(self.capacity_bytes, self._process_cap or self.capacity_bytes):  # restarted smaller
            for track_id, (events, size) in segment.tracks.items():
                process.counts[track_id].overwritten_events += events
                process.counts[track_id].overwritten_bytes += size
            self.buffers.release(segment, reuse=False)
            self._seq = max(self._seq, segment.seq + 1)
            return
        while self.held_bytes + segment.size > self.capacity_bytes and self._segments:  # restarted smaller
            self._evict(self._oldest(), "overwritten")
        while self._process_cap and process.held_bytes + segment.size > self._process_cap and process.segments:
            self._evict(process.segments[0], "capped")
        self._segments[segment.seq] = segment
        process.segments.append(segment)
        process.held_bytes += segment.size
        self.held_bytes += segment.size
        self._seq = max(self._seq, segment.seq + 1)
        self.buffers.trim(self.capacity_bytes - self.held_bytes)

    def skip_to(self, seq: int) -> None:
        """New segments are numbered from ``seq`` on (past every file a data dir holds)."""
        self._seq = max(self._seq, seq)

    # -- reading ------------------------------------------------------------------------------------------------

    def snapshot(
        self,
        on_store_thread: Callable[[Callable[[], None]], object] | None = None,
        owners: Container[int] | None = None,
    ) -> StoreSnapshot:
        """References to every stored segment (of the processes ``owners``, if given), pinned; no payload is copied.
        ``on_store_thread``: see ``StoreSnapshot``."""
        segments = [s for s in self._segments.values() if owners is None or s.owner in owners]
        for segment in segments:
            segment.pins += 1
        return StoreSnapshot(self, segments, on_store_thread)

    def pin(self, segment: Segment) -> None:
        """Keep the segment's buffer from reuse until ``unpin`` (a snapshot reads it, or a connection reads into it)."""
        segment.pins += 1

    def unpin(self, segments: list[Segment]) -> None:
        for segment in segments:
            segment.pins -= 1
            if segment.evicted and segment.pins == 0:
                self._release(segment)

    def holds(self, owner: int) -> bool:
        """Whether process ``owner`` has a connection or anything stored."""
        process = self._processes.get(owner)
        return process is not None and (process.streams > 0 or bool(process.segments))

    def clear(self, owners: Iterable[int]) -> int:
        """Remove everything the processes ``owners`` hold (counted as cleared); their connections go on writing into
        new segments. Returns the number of events removed."""
        removed = 0
        for owner in owners:
            process = self._processes.get(owner)
            while process is not None and process.segments:
                segment = process.segments[0]
                removed += segment.events
                self.accounts.cleared(segment.seq, owner, segment.events)
                self._evict(segment, "cleared")
        return removed

    def forget(self, owner: int) -> None:
        """Fold the counts of a process that holds nothing into ``forgotten``, and drop its bookkeeping."""
        assert not self.holds(owner), "only a process with no connection and nothing stored is forgotten"
        self.accounts.forget(owner)

    @property
    def stored_events(self) -> int:
        return sum(segment.events for segment in self._segments.values())

    @property
    def stored_frames(self) -> int:
        return sum(segment.entries for segment in self._segments.values())

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def used_bytes(self) -> int:
        return sum(segment.used for segment in self._segments.values())

    # -- accounting (``accounts.py``) ---------------------------------------------------------------------------

    @property
    def forgotten(self) -> Counts:
        """Counts of processes forgotten (``forget``)."""
        return self.accounts.forgotten

    def totals(self) -> Counts:
        return self.accounts.totals()

    def track_counts(self) -> dict[tuple[int, int], Counts]:
        return self.accounts.track_counts()

    def process_counts(self) -> dict[int, Counts]:
        return self.accounts.process_counts()

    def process_received(self) -> dict[int, tuple[int, int]]:
        return self.accounts.process_received()

    def process_held_bytes(self, owner: int) -> int:
        return self.accounts.process_held_bytes(owner)

    def kept_events(self, owners: Iterable[int]) -> dict[int, int]:
        return self.accounts.kept_events(owners)

    def cleared_segments(self, owners: Container[int], after_seq: int) -> dict[int, tuple[int, int]]:
        return self.accounts.cleared_segments(owners, after_seq)
