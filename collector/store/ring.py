"""The store: every client stream's recent past in self-describing segments, within a byte budget, every loss counted.

Theory of operation
-------------------
Each connection writes into segments of its own (``Stream``, ``streams.py``). A segment opens with the session frames
the stream has declared so far, replayed verbatim, so that it decodes alone (``segments.py``); then it takes the
stream's frames as they come. A stream's segments double in size up to ``segment_bytes``, one open at a time
(``stream_segments.py``).

Budget (``budget.py``): all stored segments and the tables of the open connections stay within ``capacity_bytes``, and
one process's segments within ``process_capacity_bytes``. Room for a new segment is made, under the ``ring`` policy,
by evicting the oldest segments; under ``discard``, the frame is refused instead, so the store keeps the beginning.

Accounting, per (process, track), in events and bytes of EVENTS frames: every frame received either stays stored or
leaves by exactly one of overwritten (evicted to make room), capped (evicted or refused for its process's cap) and
discarded (refused: the store is full, or the frame cannot be stored at all) and cleared (removed on request). So
received = stored + overwritten + capped + discarded + cleared holds at every moment, per track, per process and in
total (``accounts.py``; which segments are held, and their counts as they leave: ``holdings.py``).

A store may replicate its sealed segments elsewhere (a JetStream stream: ``Store.on_sealed``, ``Store.replication``,
``replication.py``): a segment the replica acknowledged leaves, its events counted stored still (``published``); one
it refused leaves counted discarded (``refused``). ``expire`` removes what was sealed before a time (``--max-age``),
counted overwritten.

Snapshots pin the segments they read (``views.py``): an evicted segment's buffer is reused or unmapped only once no
snapshot reads it (each snapshot lets go of a segment as soon as it has read it). In a data dir, segments carry
checksums and are synced as ``fsync`` says (``durability.py``), and are taken back in on restart (``recovery.py``).
No asyncio here: plain synchronous code, called from the event loop.

``Store`` is the one door to all of these: what ingest, the service and the readers call. The per-frame paths
(``events``, ``events_in_place``, ``advance``, ``session_frame``) are written out here, not delegated: they run for
every frame received.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import Final

from ringtrace.collector.store.accounts import Accounts, Counts, ProcessHolding
from ringtrace.collector.store.budget import TABLE_LIMITS, Budget, Policy, TableRefusal, table_charge_bound
from ringtrace.collector.store.durability import Durability, SyncJob
from ringtrace.collector.store.holdings import Holdings, Removal
from ringtrace.collector.store.recovery import adopt
from ringtrace.collector.store.replication import Replication
from ringtrace.collector.store.segment_buffers import MemoryBuffers, SegmentBuffers
from ringtrace.collector.store.segment_files import Recovered
from ringtrace.collector.store.segments import CHECKSUM_FRAME, CHECKSUM_RESERVE, INDEX_ENTRY, EventsRun, Segment
from ringtrace.collector.store.stream_segments import StreamSegments
from ringtrace.collector.store.streams import MIN_SEGMENT_BYTES, SessionKind, Stream
from ringtrace.collector.store.views import SegmentView, StoreSnapshot
from ringtrace.wire.errors import ConfigError

__all__ = [
    "MIN_SEGMENT_BYTES",
    "TABLE_LIMITS",
    "Counts",
    "Policy",
    "Removal",
    "Replication",
    "SegmentView",
    "Store",
    "StoreSnapshot",
    "Stream",
    "SyncJob",
    "TableRefusal",
    "table_charge_bound",
]

_ENTRY: Final = INDEX_ENTRY.size


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
        self.policy: Policy = policy
        self.buffers = buffers if buffers is not None else MemoryBuffers()
        #: Room kept free in every segment for its closing CHECKSUM frame, and for one more that a connection reading
        #: into the segment makes room for before its unread bytes (``LendingFrameReader.make_room``).
        self.reserve = CHECKSUM_RESERVE + CHECKSUM_FRAME.size if self.buffers.checksums else 0
        self._holdings = Holdings()
        self._budget = Budget(self._holdings, self.buffers, capacity_bytes, process_capacity_bytes, policy)
        self._durability = Durability(self.buffers)
        self._stream_segments = StreamSegments(self._budget, self._durability, segment_bytes, self.reserve)
        #: What every process received and lost, and which segments were removed on request (``accounts.py``).
        self.accounts = Accounts(self._holdings.processes)
        #: Where sealed segments are replicated to (a JetStream stream), if anywhere: a FLUSH is acknowledged once
        #: it has acknowledged everything before it (``replication.py``).
        self.replication: Replication | None = None

    def set_segment_bytes(self, segment_bytes: int) -> None:
        """Segments opened from now on grow to ``segment_bytes`` (at most half of either capacity, as at start): the
        JetStream tier's, once the servers said how large a message may be."""
        self.segment_bytes = min(segment_bytes, self.capacity_bytes // 2, self.process_capacity_bytes // 2)
        self._stream_segments.segment_bytes = self.segment_bytes

    def on_sealed(self, hook: Callable[[Stream, Segment], None] | None) -> None:
        """Call ``hook`` with each segment sealed that holds events, and its stream (it may pin the segment)."""
        self._stream_segments.on_sealed = hook

    def on_evicted(self, hook: Callable[[Segment, Removal], None] | None, spare: Callable[[], int] = int) -> None:
        """Call ``hook`` with each segment that leaves holding events (overwritten, capped, cleared, expired, published
        or refused) and why, as they leave (never per frame), before its buffer is released: it may pin the segment
        (``pin``) to read it still. ``spare()``: what spare buffers may take past the capacity (``WatchHold``)."""
        self._budget.on_evicted, self._budget.spare_beyond = hook, spare

    @property
    def held_bytes(self) -> int:
        """What all stored segments take (prefix, frames, index and unused tail alike)."""
        return self._holdings.held_bytes

    @property
    def table_bytes(self) -> int:
        """Memory of the open connections' tables, counted against the capacity as segments are (``charge_tables``)."""
        return self._budget.table_bytes

    # -- streams ------------------------------------------------------------------------------------------------

    def open_stream(self, owner: int, hello_frame: bytes | memoryview) -> Stream:
        """A new connection of process ``owner``, which said ``hello_frame`` (the HELLO frame's bytes)."""
        process = self._holdings.processes.setdefault(owner, ProcessHolding())
        process.streams += 1
        self._holdings.streams += 1
        self._holdings.connected += process.streams == 1
        return Stream(owner, process.counts, bytes(hello_frame), MIN_SEGMENT_BYTES)

    def close_stream(self, stream: Stream) -> None:
        """The connection ended: seal its segment (what it holds stays stored; a segment without events goes)."""
        self._stream_segments.end(stream)
        process = self._holdings.processes[stream.owner]
        process.streams -= 1
        self._holdings.streams -= 1
        self._holdings.connected -= process.streams == 0
        self._budget.uncharge(stream)

    def charge_tables(self, stream: Stream, decoder_bytes: int) -> TableRefusal | None:
        """Count the stream's tables against the capacity and its process's share: ``decoder_bytes`` (what its
        decoder's tables take) and its session frames. A connection's tables cost memory as its segments do, and
        clients choose how much: counted this way, ``capacity`` bounds them too, whatever ``max_connections`` is, and
        one process's tables take no more than its fair share of half of it (``budget.py``). Under ``ring``, room is
        made as for the process's segments (but its open one is not overwritten); ``discard`` overwrites nothing, and
        takes tables past the stored segments (a full store would otherwise end every connection that declares a
        string), within their half of the capacity. Returns None, or why they cannot grow: the connection must
        end."""
        return self._budget.charge_tables(stream, decoder_bytes)

    def session_frame(self, stream: Stream, frame: bytes | memoryview, *, track_id: int = -1, ended: bool = False,
                      kind: SessionKind) -> None:  # fmt: skip
        """A SCHEMA, STRINGS, TRACK or STATS frame (header included) the stream's decoder accepted."""
        data = stream.keep(frame, kind, track_id, ended)
        segment = stream.segment
        if segment is None or stream.direct:
            return  # the next segment opens with it; or it is in the segment already
        if segment.free >= len(data) + self.reserve:
            segment.write(data)
        else:
            self._stream_segments.end(stream)

    def events(
        self, stream: Stream, track_id: int, count: int, first_ts_ns: int, last_ts_ns: int, frame: bytes | memoryview
    ) -> bool:
        """Store one EVENTS frame (header included); False when it was refused (and counted so)."""
        size = len(frame)
        stream.counts.received(track_id, count, size)
        segment = stream.segment
        if segment is None or segment.size - segment.used - _ENTRY * (segment.entries + 1) - self.reserve < size:
            segment = self._stream_segments.open_for(stream, size, track_id, count)
            if segment is None:
                return False
        segment.write_events(frame, track_id, count, first_ts_ns, last_ts_ns)
        return True

    def events_in_place(self, stream: Stream, run: EventsRun) -> None:
        """Store EVENTS frames the connection read into its open segment (``stream.direct``)."""
        segment, received = stream.segment, stream.counts.received
        assert segment is not None and stream.direct, "frames in place need the segment they were read into"
        segment.index_run(run)
        for track_id, (events, nbytes) in run.tracks.items():
            received(track_id, events, nbytes)

    def advance(self, stream: Stream, end: int) -> None:
        """Everything the connection read into its open segment up to ``end`` is stored (``stream.direct``)."""
        if stream.segment is not None and stream.direct:
            stream.segment.used = end

    def open_direct(self, stream: Stream, frame_bytes: int) -> Segment | None:
        """Seal the stream's open segment and open one for the connection to read into (``set_direct``), with room
        for a frame of ``frame_bytes``; None when the policy refuses it (the connection then stores by copy, and
        each frame is counted where it is refused)."""
        self._stream_segments.end(stream)
        segment = self._stream_segments.open(stream, frame_bytes)
        return segment if isinstance(segment, Segment) else None

    def end_segment(self, stream: Stream) -> None:
        """Seal the stream's open segment now (dropped if it holds no events); its next frame opens another. The
        caller reads into it no more (``SegmentWriter.seal``)."""
        self._stream_segments.end(stream)

    def set_direct(self, stream: Stream, direct: bool) -> None:
        """Whether the connection reads straight into the stream's open segment (its frames are then stored where
        they are: ``events_in_place``, ``advance``) or stores frames by copy."""
        stream.direct = direct and stream.segment is not None

    # -- checksums and syncs (data dir: ``durability.py``) --------------------------------------------------------

    def commit(self, stream: Stream, *, end_marker: bool = True) -> None:
        """Checksum what the stream wrote since the last checksum (data dir): a CHECKSUM frame at ``used`` and, with
        ``end_marker``, an end marker after it (without: the caller has unread bytes there, moved out of the way)."""
        self._durability.commit(stream, end_marker=end_marker)

    def uncommitted(self, stream: Stream) -> bool:
        """Whether the stream wrote bytes that no checksum covers yet (data dir)."""
        return self._durability.uncommitted(stream)

    def sync_job(self, stream: Stream) -> SyncJob | None:
        """What must be synced to make everything the stream's checksums cover durable (None: nothing, or ``fsync``
        never); the caller commits first."""
        return self._durability.stream_job(stream)

    def sync_all_job(self) -> SyncJob | None:
        """What must be synced to make everything every checksum covers durable (``fsync`` interval, and on stop);
        as ``sync_job``."""
        return self._durability.all_job(self._holdings.segments.values())

    # -- recovery (``recovery.py``) -----------------------------------------------------------------------------

    def adopt(self, recovered: Recovered, owner: int) -> None:
        """A segment recovered from the data dir, sealed, as if it had just been stored (oldest ones first)."""
        adopt(self._budget, recovered, owner)
        self._stream_segments.skip_to(recovered.seq + 1)

    def skip_to(self, seq: int) -> None:
        """New segments are numbered from ``seq`` on (past every file a data dir holds)."""
        self._stream_segments.skip_to(seq)

    # -- reading ------------------------------------------------------------------------------------------------

    def snapshot(
        self,
        on_store_thread: Callable[[Callable[[], None]], object] | None = None,
        owners: Container[int] | None = None,
        also: Iterable[Segment] = (),
        reads: Callable[[list[Segment]], Container[int]] | None = None,
    ) -> StoreSnapshot:
        """References to every stored segment (of the processes ``owners``, if given), pinned; no payload is copied.
        ``on_store_thread``: see ``StoreSnapshot``. ``also``: segments gone but pinned still (older than the stored
        ones of their process), taken first. ``reads``: the seqs of those read; the others are seen, unpinned."""
        segments = [s for s in self._holdings.segments.values() if owners is None or s.owner in owners]
        segments = [*(s for s in also if owners is None or s.owner in owners), *segments]
        read = None if reads is None else reads(segments)
        for segment in (s for s in segments if read is None or s.seq in read):
            segment.pins += 1
        return StoreSnapshot(self, segments, on_store_thread, read)

    def stored(self, owners: Iterable[int]) -> list[Segment]:
        """The stored segments of the processes ``owners``, each process's oldest first (not pinned: ``pin``)."""
        processes = self._holdings.processes
        return [segment for owner in owners if owner in processes for segment in processes[owner].segments]

    def pin(self, segment: Segment) -> None:
        """Keep the segment's buffer from reuse until ``unpin`` (a snapshot reads it, or a connection reads into it)."""
        segment.pins += 1

    def unpin(self, segments: list[Segment]) -> None:
        for segment in segments:
            segment.pins -= 1
            if segment.evicted and segment.pins == 0:
                self._budget.release(segment)

    def published(self, segment: Segment) -> None:
        """A sealed segment is stored elsewhere now (replicated: ``replication``): it leaves, its events counted
        stored still."""
        if not segment.evicted:
            self._budget.evict(segment, "published")

    def refused(self, segment: Segment) -> None:
        """A sealed segment that where it was replicated to refused (a full stream under ``discard``): it leaves, its
        events counted discarded."""
        if not segment.evicted:
            self._budget.evict(segment, "discarded")

    def expire(self, written_before_ns: int) -> int:
        """``--max-age``: remove the sealed segments sealed before ``written_before_ns`` (the collector's monotonic
        ns), their events counted overwritten (open ones are sealed by their writers: ``SegmentWriter.seal``).
        Returns the events removed."""
        removed = 0
        writers = self._holdings.writers
        for segment in [s for s in self._holdings.segments.values() if s.written_ns < written_before_ns]:
            if segment.seq not in writers:
                removed += segment.events
                self._budget.evict(segment, "overwritten")
        return removed

    def process_counts_of(self, owner: int) -> dict[int, Counts]:
        """Process ``owner``'s counts per track id (the store's own, not copied: read them at once)."""
        process = self._holdings.processes.get(owner)
        return process.counts if process is not None else {}

    def unsealed_tracks(self, owner: int) -> dict[int, list[int]]:
        """Per track id: [events, bytes] that process ``owner``'s open segments hold (received, not yet sealed)."""
        held: dict[int, list[int]] = {}
        process = self._holdings.processes.get(owner)
        writers = self._holdings.writers
        for segment in process.segments if process is not None else ():
            if segment.seq in writers:
                for track_id, (events, size) in segment.tracks.items():
                    total = held.setdefault(track_id, [0, 0])
                    total[0] += events
                    total[1] += size
        return held

    def track_ended(self, owner: int, track_id: int) -> None:
        """Process ``owner`` ended track ``track_id``: once nothing of it is stored, it is among the tracks whose
        counts are folded into its process's past a bound (``accounts.EMPTIED_TRACKS_LISTED``)."""
        process = self._holdings.processes.get(owner)
        if process is not None:
            process.track_ended(track_id)

    def holds(self, owner: int) -> bool:
        """Whether process ``owner`` has a connection or anything stored."""
        process = self._holdings.processes.get(owner)
        return process is not None and (process.streams > 0 or bool(process.segments))

    def clear(self, owners: Iterable[int]) -> int:
        """Remove everything the processes ``owners`` hold (counted as cleared); their connections go on writing into
        new segments. Returns the number of events removed."""
        removed = 0
        for owner in owners:
            process = self._holdings.processes.get(owner)
            while process is not None and process.segments:
                segment = process.segments[0]
                removed += segment.events
                self.accounts.cleared(segment.seq, owner, segment.events)
                self._budget.evict(segment, "cleared")
        return removed

    def forget(self, owner: int) -> None:
        """Fold the counts of a process that holds nothing into ``forgotten``, and drop its bookkeeping."""
        assert not self.holds(owner), "only a process with no connection and nothing stored is forgotten"
        self.accounts.forget(owner)

    @property
    def stored_events(self) -> int:
        return sum(segment.events for segment in self._holdings.segments.values())

    @property
    def stored_frames(self) -> int:
        return sum(segment.entries for segment in self._holdings.segments.values())

    @property
    def segment_count(self) -> int:
        return len(self._holdings.segments)

    @property
    def used_bytes(self) -> int:
        return sum(segment.used for segment in self._holdings.segments.values())

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
