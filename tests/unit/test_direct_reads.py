"""Zero-copy ingest: connections that read straight into their segments store exactly what they were sent.

Several IngestProtocol connections are driven in process (bytes in through get_buffer/buffer_updated, in chunks of
any size, interleaved), the way asyncio drives them, against a small store that must wrap, cap, refuse and evict the
very segments being read into. Then every event sent is accounted for, and every segment decodes alone to events in
the order they were sent, none twice.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ringtrace.collector.ingest.connection import TURN_BYTES, IngestProtocol
from ringtrace.collector.ingest.turns import LOOP_TURN_BYTES, READERS_PER_TURN
from ringtrace.collector.service.app import Collector, CollectorConfig
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES
from ringtrace.collector.store.segment_scan import scan_segment
from ringtrace.collector.store.writer import DIRECT_READ_SIZE
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.frame_types import EVENTS_HEADER, FRAME_HEADER, FrameType
from ringtrace.wire.frames import Flush, FlushAck, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import INSTANT, THREAD_TRACK, KindRegistry, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder
from ringtrace.wire.stream_limits import Limits
from test_collector_limits import StandInTransport
from waiting import wait_for_async

MAX_FRAME = 256 * 1024


class Connection:
    """One client: its wire stream built by the real encoder, fed to an IngestProtocol in chunks."""

    def __init__(self, collector: Collector, number: int) -> None:
        self.protocol, self.transport = IngestProtocol(collector), StandInTransport()
        self.protocol.connection_made(self.transport)  # type: ignore[arg-type]
        # Kinds of its own: the process's (``KINDS``) hold those every test before it in this worker registered, and
        # a stream declares them all, which could take a connection's tables past its share of a small capacity.
        self.encoder = StreamEncoder(max_frame_bytes=MAX_FRAME, max_events_per_frame=8000, registry=KindRegistry())
        self.tracks = [TrackInfo(t + 1, THREAD_TRACK, f"t{t}", t + 1) for t in range(2)]
        self.ts = itertools.count(10**15, 1000)
        self.sent = 0
        #: Events of the EVENTS frames delivered whole to the collector.
        self.received = 0
        #: (end offset in the stream, events) of each EVENTS frame not delivered yet.
        self.frames: list[tuple[int, int]] = []
        self.delivered = 0
        self.flushes = 0
        self.pending = bytearray(preamble() + encode(Hello(number, "host", f"p{number}", f"i{number}", "b", 1, 2, "t")))
        self.send(len(self.pending))  # a client sends nothing more until it is welcomed
        self.pending += b"".join(self.encoder.prefix())

    def record(self, track: int, events: int, pad: int) -> None:
        records: list[Any] = []
        for _ in range(events):
            ts = next(self.ts)
            records += [INSTANT, "tick", ts, ts, {"i": self.sent, "pad": "x" * 10 * pad}]
            self.sent += 1
        batch = self.encoder.encode(self.tracks[track], records)
        self.pending += b"".join(batch.control)
        for frame, count in batch.events:
            self.pending += frame
            self.frames.append((self.delivered + len(self.pending), count))

    def flush(self) -> None:
        self.flushes += 1
        self.pending += encode(Flush(self.flushes))

    def send(self, nbytes: int) -> None:
        """Up to ``nbytes`` of what is pending, as the kernel would deliver it."""
        data, self.pending = self.pending[:nbytes], self.pending[nbytes:]
        self.delivered += len(data)
        while self.frames and self.frames[0][0] <= self.delivered:
            self.received += self.frames.pop(0)[1]
        while data:
            view = self.protocol.get_buffer(-1)
            assert len(view) > 0
            n = min(len(view), len(data))
            view[:n] = data[:n]
            self.protocol.buffer_updated(n)
            data = data[n:]
        assert not self.transport.closing, "a good stream was closed"

    def poll(self) -> int:
        """What the event loop does when the socket is readable and ``pending`` is there: read while reading is on
        and each read fills the room offered, up to 32 times (libuv's ``uv__read``); returns the bytes read."""
        before = self.delivered
        for _ in range(32):
            if not self.pending or not self.transport.reading:
                break
            view = self.protocol.get_buffer(-1)
            n = min(len(view), len(self.pending))
            view[:n] = self.pending[:n]
            del self.pending[:n]
            self.delivered += n
            while self.frames and self.frames[0][0] <= self.delivered:
                self.received += self.frames.pop(0)[1]
            self.protocol.buffer_updated(n)
            if n < len(view):
                break
        return self.delivered - before

    def acknowledged(self) -> list[int]:
        """The tokens of the FLUSH_ACK frames the collector wrote, in order."""
        tokens = []
        written = bytes(self.transport.written)
        position = len(preamble())
        while position < len(written):
            length, frame_type = FRAME_HEADER.unpack_from(written, position)
            body = written[position + FRAME_HEADER.size : position + FRAME_HEADER.size + length]
            if frame_type == FrameType.FLUSH_ACK:
                tokens.append(FlushAck.decode_body(body).token)
            position += FRAME_HEADER.size + length
        return tokens


def events_frames(data: bytes) -> list[tuple[int, int, int, int]]:
    """(offset, size, track, count) of each EVENTS frame of a segment's stream, walked frame by frame."""
    found, position = [], len(preamble())
    while position + FRAME_HEADER.size <= len(data):
        length, frame_type = FRAME_HEADER.unpack_from(data, position)
        if length == frame_type == 0:
            break
        if frame_type == FrameType.EVENTS:
            _, _, track, count, _, _ = EVENTS_HEADER.unpack_from(data, position + FRAME_HEADER.size)
            found.append((position, FRAME_HEADER.size + length, track, count))
        position += FRAME_HEADER.size + length
    return found


def decoded_segments(collector: Collector, checksums: bool) -> dict[int, list[int]]:
    """Per process: the event indices the stored segments hold, each segment decoded alone (and its index entries
    are the EVENTS frames it holds)."""
    out: dict[int, list[int]] = {}
    with collector.store.snapshot() as snapshot:
        for segment in snapshot.segments:
            data = segment.data()
            decoder = SessionDecoder(Limits(max_frame_bytes=MAX_FRAME), live=False)
            decoder.receive_data(data)
            decoder.receive_data(b"")
            owner = -1
            for frame in decoder:
                if frame.TYPE == FrameType.HELLO:
                    owner = int(frame.instance_id[1:])  # type: ignore[union-attr]
                elif frame.TYPE == FrameType.EVENTS:
                    out.setdefault(owner, []).extend(event.args["i"] for event in decoder.tables.events(frame))  # type: ignore[arg-type]
            entries = [entry[:4] for entry in segment.index()]
            assert entries == events_frames(data)
            assert entries, "a segment that holds no events is dropped, not kept"
            if checksums:  # closed: checksums cover everything stored, and recovery stops where it ends
                scan = scan_segment(bytes(segment.buffer), Limits(max_frame_bytes=MAX_FRAME), segment.seq)
                assert scan.why_cut is None
                assert [entry[:4] for entry in scan.entries] == entries
    return out


@pytest.mark.parametrize("checksums", [False, True], ids=["memory", "data-dir"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    capacity_segments=st.integers(4, 12),
    # More connections than open segments fit in the smallest stores: the ring then overwrites one being read into.
    connection_count=st.integers(1, 6),
    policy=st.sampled_from(["ring", "discard"]),
    process_cap=st.booleans(),
    ops=st.lists(
        st.one_of(
            st.tuples(
                st.just("record"), st.integers(0, 5), st.integers(0, 1), st.integers(1, 3000), st.integers(0, 60)
            ),
            st.tuples(st.just("send"), st.integers(0, 5), st.integers(1, 300_000)),
            st.tuples(st.just("flush"), st.integers(0, 5)),
            st.tuples(st.just("snapshot"), st.integers(0, 5)),
            st.tuples(st.just("reconnect"), st.integers(0, 5)),
        ),
        max_size=40,
    ),
)
def test_connections_reading_into_segments_store_every_event_once_and_count_the_rest(
    tmp_path: Path,
    checksums: bool,
    capacity_segments: int,
    connection_count: int,
    policy: str,
    process_cap: bool,
    ops: list[Any],
) -> None:
    async def scenario() -> None:
        config: dict[str, Any] = {
            "tcp_port": 0,
            "http_port": 0,
            "capacity_bytes": capacity_segments * MIN_SEGMENT_BYTES + 4 * MAX_FRAME,
            "max_frame_bytes": MAX_FRAME,
            "segment_bytes": MIN_SEGMENT_BYTES * 2,
            "policy": policy,
        }
        if process_cap:
            config["process_capacity_bytes"] = config["capacity_bytes"] // 2
        if checksums:
            config["data_dir"] = str(tmp_path / f"d{next(_dirs)}")
            config["fsync"] = "never"
        collector = Collector(CollectorConfig(**config))
        connections = [Connection(collector, number) for number in range(connection_count)]
        closed: list[Connection] = []
        snapshots = []
        try:
            for op in ops:
                index = op[1] % connection_count
                connection = connections[index]
                if op[0] == "record":
                    connection.record(op[2], op[3], op[4])
                elif op[0] == "send":
                    connection.send(op[2])
                elif op[0] == "flush":
                    connection.flush()
                elif op[0] == "reconnect":  # what it did not send is not counted anywhere: it never left the client
                    connection.protocol.connection_lost(None)
                    closed.append(connection)
                    connections[index] = Connection(collector, len(connections) + len(closed))
                elif len(snapshots) < 2:
                    snapshots.append(collector.store.snapshot())
                else:
                    snapshots.pop(0).close()
            for connection in connections:
                connection.flush()
                connection.send(len(connection.pending) + 1)
                assert connection.acknowledged() == list(range(1, connection.flushes + 1))
            for connection in connections:
                connection.protocol.connection_lost(None)
            stored = decoded_segments(collector, checksums)
            totals = collector.store.totals()
            assert totals.received_events == sum(c.received for c in connections + closed)
            lost = totals.overwritten_events + totals.capped_events + totals.discarded_events
            assert totals.received_events == totals.stored_events + lost
            assert sum(len(indices) for indices in stored.values()) == totals.stored_events
            for indices in stored.values():
                assert indices == sorted(set(indices))
            assert collector.store.held_bytes <= collector.store.capacity_bytes
        finally:
            for snapshot in snapshots:
                snapshot.close()
            if collector.data_dir is not None:
                collector.data_dir.close()

    asyncio.run(scenario())


_dirs = itertools.count()


def test_segments_a_data_dir_stream_filled_end_where_recovery_stops(tmp_path: Path) -> None:
    """Segments sealed while frames were arriving keep bytes past their end (moved to the next segment): recovery
    must stop at the end, not take those for frames that a checksum should have covered."""

    async def scenario() -> None:
        config = CollectorConfig(tcp_port=0, http_port=0, capacity_bytes=8 << 20, max_frame_bytes=MAX_FRAME)
        collector = Collector(replace(config, data_dir=str(tmp_path / "data"), fsync="never"))
        connection = Connection(collector, 0)
        for i in range(30):
            connection.record(i % 2, 3000, 5)
        connection.flush()
        connection.send(len(connection.pending) + 1)
        connection.protocol.connection_lost(None)
        with collector.store.snapshot() as snapshot:
            assert len(snapshot.segments) > 4
            for segment in snapshot.segments:
                scan = scan_segment(bytes(segment.buffer), Limits(max_frame_bytes=MAX_FRAME), segment.seq)
                assert (scan.why_cut, scan.used) == (None, segment.used)
        assert collector.data_dir is not None
        collector.data_dir.close()

    asyncio.run(scenario())


def test_a_segment_being_read_into_is_overwritten_only_when_every_segment_is_open() -> None:
    async def scenario() -> None:
        config = CollectorConfig(
            tcp_port=0,
            http_port=0,
            capacity_bytes=4 * MAX_FRAME,
            max_frame_bytes=MAX_FRAME,
            segment_bytes=2 * MIN_SEGMENT_BYTES,
        )
        collector = Collector(config)
        connections = [Connection(collector, number) for number in range(6)]
        for connection in connections:
            connection.record(0, 10, 0)
            connection.send(len(connection.pending))  # a segment opens: the next frames are read into it
        for connection in connections:  # then one large frame each: six segments that fit it do not fit at once
            connection.record(0, 1500, 10)
            connection.send(len(connection.pending) - 100)  # its segment stays open, being read into
        for connection in connections:
            connection.record(1, 10, 0)
            connection.flush()
            connection.send(len(connection.pending))
            assert connection.acknowledged() == [1]
        for connection in connections:
            connection.protocol.connection_lost(None)
        totals = collector.store.totals()
        assert totals.received_events == sum(c.sent for c in connections)
        assert totals.overwritten_events > 0
        assert totals.received_events == totals.stored_events + totals.overwritten_events
        stored = decoded_segments(collector, checksums=False)
        assert sum(len(indices) for indices in stored.values()) == totals.stored_events
        for indices in stored.values():
            assert indices == sorted(set(indices))

    asyncio.run(scenario())


@pytest.mark.parametrize("checksums", [False, True], ids=["memory", "data-dir"])
def test_a_frame_that_breaks_a_rule_is_not_stored_and_what_came_before_it_is(tmp_path: Path, checksums: bool) -> None:
    async def scenario() -> None:
        config = CollectorConfig(tcp_port=0, http_port=0, capacity_bytes=8 << 20, max_frame_bytes=MAX_FRAME)
        if checksums:
            config = replace(config, data_dir=str(tmp_path / "data"), fsync="never")
        collector = Collector(config)
        connection = Connection(collector, 0)
        connection.record(0, 200, 1)
        connection.flush()
        connection.send(len(connection.pending))  # a segment opens: what follows is read into it
        connection.record(0, 300, 1)
        connection.flush()
        body = EVENTS_HEADER.pack(EVENTS_HEADER.size, 0, 99, 1, 5, 6) + b"\x90"  # track 99 was never declared
        connection.pending += FRAME_HEADER.pack(len(body), FrameType.EVENTS) + body
        data = bytes(connection.pending)
        view = connection.protocol.get_buffer(-1)
        assert len(view) >= len(data)  # one read: the good frames, a FLUSH, and the bad frame
        view[: len(data)] = data
        connection.protocol.buffer_updated(len(data))
        assert connection.transport.closing
        assert connection.acknowledged() == [1, 2]
        connection.protocol.connection_lost(None)
        totals = collector.store.totals()
        assert totals.received_events == totals.stored_events == 500
        assert decoded_segments(collector, checksums) == {0: list(range(500))}  # alone, and by recovery's scan
        if collector.data_dir is not None:
            collector.data_dir.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("checksums", [False, True], ids=["memory", "data-dir"])
def test_tiny_frames_read_in_large_pieces_move_on_where_their_index_entries_do_not_fit(
    tmp_path: Path, checksums: bool
) -> None:
    """A one-event frame is not much larger than its index entry, and a read takes most of the room left: a run of
    such frames stops where its entries would not fit, and what was read past it (a TRACK frame among them) moves to
    the next segment."""

    async def scenario() -> None:
        config = CollectorConfig(
            tcp_port=0,
            http_port=0,
            capacity_bytes=8 << 20,
            max_frame_bytes=MAX_FRAME,
            segment_bytes=2 * MIN_SEGMENT_BYTES,
        )
        if checksums:
            config = replace(config, data_dir=str(tmp_path / "data"), fsync="never")
        collector = Collector(config)
        connection = Connection(collector, 0)
        connection.record(0, 10, 0)
        connection.send(len(connection.pending))  # a segment opens: what follows is read into it
        for i in range(8000):
            connection.record(0 if i < 6000 else 1, 1, i % 3)  # track 1 is declared among them
        connection.flush()
        connection.send(len(connection.pending))  # in reads as large as offered
        assert connection.acknowledged() == [1]
        connection.protocol.connection_lost(None)
        totals = collector.store.totals()
        assert totals.received_events == totals.stored_events == connection.sent
        assert decoded_segments(collector, checksums) == {0: list(range(connection.sent))}
        with collector.store.snapshot() as snapshot:
            assert len(snapshot.segments) > 4
        if collector.data_dir is not None:
            collector.data_dir.close()

    asyncio.run(scenario())


def test_large_frames_fill_segments_without_short_reads_for_index_room_and_tiny_ones_after_them_move_on() -> None:
    """Frames of about 48 KB need an index entry per 1500 bytes of them: a read keeps that much room for entries, not
    a 1/32 of what is left (which took one more, short read per segment: a third of the reads). Tiny frames after
    them, whose entries need more, stop their run and move on to the next segment, all stored."""

    async def scenario() -> None:
        config = CollectorConfig(
            tcp_port=0, http_port=0, capacity_bytes=256 << 20, max_frame_bytes=MAX_FRAME, segment_bytes=4 << 20
        )
        collector = Collector(config)
        connection = Connection(collector, 0)
        connection.send(len(connection.pending))  # its tables
        while len(connection.pending) < 24 << 20:
            connection.record(0, 400, 10)
        reads: list[int] = []
        while connection.pending:  # each read as large as offered, as a busy socket gives
            view = connection.protocol.get_buffer(-1)
            n = min(len(view), len(connection.pending))
            view[:n] = connection.pending[:n]
            del connection.pending[:n]
            connection.delivered += n
            connection.protocol.buffer_updated(n)
            reads.append(n)
        assert sum(1 for n in reads if n < 64 * 1024) <= 1  # the last one, at most
        for i in range(3000):
            connection.record(i % 2, 1, 0)
        connection.flush()
        connection.send(len(connection.pending))
        assert connection.acknowledged() == [1]
        connection.protocol.connection_lost(None)
        totals = collector.store.totals()
        assert totals.received_events == totals.stored_events == connection.sent
        assert decoded_segments(collector, checksums=False) == {0: list(range(connection.sent))}

    asyncio.run(scenario())


def test_fsync_interval_syncs_what_was_written_within_a_second_and_the_rest_on_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        config = CollectorConfig(tcp_port=0, http_port=0, capacity_bytes=8 << 20, max_frame_bytes=MAX_FRAME)
        collector = Collector(replace(config, data_dir=str(tmp_path / "data"), fsync="interval"))
        assert collector.data_dir is not None
        synced: list[tuple[int, int]] = []  # (segment seq, end synced)
        real_sync = collector.data_dir.sync
        monkeypatch.setattr(
            collector.data_dir, "sync", lambda s, start, end: (synced.append((s.seq, end)), real_sync(s, start, end))
        )
        await collector.start()
        connection = Connection(collector, 0)
        connection.record(0, 500, 3)
        connection.flush()
        connection.send(len(connection.pending))
        assert connection.acknowledged() == [1]  # at once: acknowledgements do not wait for the disk
        with collector.store.snapshot() as snapshot:
            written = {(segment.seq, segment.used) for segment in snapshot.segments}
        await wait_for_async(  # (at the interval: nothing stops the collector meanwhile)
            lambda: set(synced),
            until=lambda synced_now: written <= synced_now,
            timeout_s=30,
            what=f"{written} synced",
            interval_s=0.05,
        )
        connection.record(0, 10, 3)
        connection.flush()
        connection.send(len(connection.pending))
        synced.clear()
        await collector.stop()  # before the next interval: stopping syncs what is left
        with collector.store.snapshot() as snapshot:
            assert {(segment.seq, segment.used) for segment in snapshot.segments} <= set(synced)

    asyncio.run(scenario())


def test_a_connection_lets_the_others_read_after_turn_bytes_and_reads_on_in_the_next_loop_turn() -> None:
    async def scenario() -> None:
        config = CollectorConfig(tcp_port=0, http_port=0, capacity_bytes=16 << 20, max_frame_bytes=MAX_FRAME)
        collector = Collector(config)
        connection = Connection(collector, 0)
        while len(connection.pending) <= 2 * TURN_BYTES:
            connection.record(0, 3000, 40)
        connection.send(TURN_BYTES)
        assert not connection.transport.reading  # its turn is over: the loop serves the others first
        await asyncio.sleep(0)
        assert connection.transport.reading
        connection.send(TURN_BYTES)
        connection.protocol.pause_writing()  # the peer does not read our answers: reading stays paused
        await asyncio.sleep(0)
        assert not connection.transport.reading
        connection.protocol.resume_writing()
        assert connection.transport.reading
        connection.protocol.connection_lost(None)

    asyncio.run(scenario())


def test_busy_connections_take_turns_reading_and_a_loop_turn_reads_a_bounded_share_of_what_they_sent() -> None:
    async def scenario() -> None:
        config = CollectorConfig(tcp_port=0, http_port=0, capacity_bytes=128 << 20, max_frame_bytes=MAX_FRAME)
        collector = Collector(config)
        quiet = Connection(collector, 12)
        quiet.send(len(quiet.pending))  # its tables
        busy = [Connection(collector, number) for number in range(12)]
        for connection in busy:
            while len(connection.pending) <= 2 * TURN_BYTES:
                connection.record(0, 3000, 40)
            connection.flush()
        turns = 0
        while any(connection.pending for connection in busy):
            if turns == 1:  # a client that sends little flushes while the others fill the turns
                quiet.flush()
            reading = [connection for connection in [*busy, quiet] if connection.transport.reading]
            assert reading, "no connection reads: none would ever be served again"
            read = [connection.poll() for connection in reading]
            # Past the turn's share, a connection reads a frame header's worth and waits in line (but those whose turn
            # it is read once, all they may).
            bound = LOOP_TURN_BYTES + (READERS_PER_TURN + 1) * DIRECT_READ_SIZE + len(reading) * FRAME_HEADER.size
            assert sum(read) <= bound
            await asyncio.sleep(0)  # the next loop turn
            assert sum(connection.transport.reading for connection in busy if connection.pending) <= READERS_PER_TURN
            if turns == 1 + len(busy) // READERS_PER_TURN + 1:  # it waited its turn once, at most
                assert quiet.acknowledged() == [1]
            turns += 1
        assert turns > len(busy)  # (they took turns)
        for number, connection in enumerate(busy):
            assert connection.acknowledged() == [1], number
        assert collector.store.totals().stored_events == sum(connection.sent for connection in busy)
        for connection in [*busy, quiet]:
            connection.protocol.connection_lost(None)

    asyncio.run(scenario())
