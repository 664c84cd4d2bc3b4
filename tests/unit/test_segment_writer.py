"""The seams of ingest: a reader that reads into lent memory, the store's segment writer that lends it segments, the
per-connection pacing and admission rules.

The writer is driven here as a connection drives it (reads go where ``read_buffer`` says, runs of EVENTS frames are
stored in place, other frames one by one), without asyncio: what it stores must be exactly what was sent, read in
place whenever the segment has room, and by copy otherwise.
"""

from __future__ import annotations

import asyncio
import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.collector.ingest.lending import IngestDecoder, LendingFrameReader
from ringtrace.collector.ingest.traffic import (
    MAX_CONTROL_FRAMES_PER_S,
    MIN_FRAME_BYTES_PER_S,
    ControlBudget,
    FrameArrival,
    counted_address,
    refusal,
)
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.collector.store.writer import SegmentWriter
from ringtrace.wire.decoder import Limits
from ringtrace.wire.frames import (
    MIN_MAX_FRAME_BYTES,
    Events,
    Flush,
    Hello,
    Strings,
    Track,
    encode,
    preamble,
)
from ringtrace.wire.model import THREAD_TRACK
from ringtrace.wire.reader import NEED_DATA, Sentinel
from test_collector_limits import connect, small_collector

HELLO = Hello(7, "host", "proc", "instance", "boot", 1, 2, "test")
TRACK = Track(1, THREAD_TRACK, "main", 11)
LIMITS = Limits(max_frame_bytes=MIN_MAX_FRAME_BYTES)


def events_frame(number: int, size: int) -> bytes:
    return encode(Events(TRACK.track_id, 1, number, number, b"\x91" + b"x" * size))


# -- LendingFrameReader ----------------------------------------------------------------------------------------------


def test_a_lent_buffer_holds_the_frames_read_and_reclaim_moves_the_unread_bytes_back() -> None:
    reader = LendingFrameReader("client")
    reader.receive_data(preamble())
    assert reader.next_frame() is NEED_DATA
    lent = bytearray(4096)
    reader.lend(lent, 100)
    data = encode(Flush(1)) + encode(Flush(2))
    with reader.get_buffer(limit=100 + len(data) - 3) as view:  # all but the last 3 bytes, where the lender says
        assert len(view) == len(data) - 3
        view[:] = data[:-3]
    reader.buffer_updated(len(data) - 3)
    assert reader.next_frame() == Flush(1)
    assert (reader.frame_start, reader.position) == (100, 100 + len(encode(Flush(1))))
    assert bytes(lent[100 : reader.position]) == encode(Flush(1))  # read where it is stored
    assert reader.next_frame() is NEED_DATA
    reader.reclaim()  # the unread part of the second frame goes along
    reader.receive_data(data[-3:])
    assert reader.next_frame() == Flush(2)


def test_make_room_moves_the_unread_bytes_on_and_says_where_the_room_is() -> None:
    reader = LendingFrameReader("client")
    lent = bytearray(4096)
    reader.lend(lent, 0, preamble() + encode(Flush(1)) + encode(Flush(2))[:4])
    assert reader.next_frame() == Flush(1)
    position = reader.position
    assert reader.make_room(9) == position
    assert reader.position == position + 9 and reader.unread() == encode(Flush(2))[:4]


# -- SegmentWriter ---------------------------------------------------------------------------------------------------


class Connection:
    """A connection's use of its decoder and writer, as ``IngestProtocol`` makes it, minus asyncio."""

    def __init__(self, store: Store) -> None:
        self.decoder = IngestDecoder(LIMITS, borrow=True, keep_strings=False)
        self.decoder.receive_data(preamble() + encode(HELLO))
        assert self.decoder.next_frame() == HELLO
        self.decoder.welcome()
        hello = bytes(self.decoder.last_frame())
        self.writer = SegmentWriter(store, store.open_stream(1, hello), self.decoder.reader, LIMITS.max_frame_bytes)
        self.refused = 0
        self.read_in_place = 0
        self.filled = False

    def send(self, data: bytes, chunk: int) -> None:
        while data:
            view = self.writer.read_buffer(self.filled)
            in_place = view is not None
            if view is None:
                view = self.decoder.get_buffer(-1)
            n = min(len(view), len(data), chunk)
            view[:n] = data[:n]
            self.filled = n == len(view)
            self.read_in_place += n if in_place else 0
            data = data[n:]
            self.decoder.buffer_updated(n)
            self.handle()

    def handle(self) -> None:
        self.writer.begin()
        while True:
            self.writer.store_runs(self.decoder.events_run)
            frame = self.decoder.next_frame()
            if isinstance(frame, Sentinel):
                break
            if isinstance(frame, Events):
                stored = self.writer.events(
                    frame.track_id, frame.count, frame.first_ts_ns, frame.last_ts_ns, self.decoder.last_frame()
                )
                self.refused += 0 if stored else frame.count
            else:
                self.writer.taken()
                if isinstance(frame, Track):
                    self.writer.session_frame(self.decoder.last_frame(), "track", track_id=frame.track_id)
        self.writer.commit(force=False)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 20_000), min_size=1, max_size=40),
    chunk=st.sampled_from([509, 4096, 64 * 1024, 1 << 20]),
)
def test_the_writer_stores_every_events_frame_sent_in_place_or_by_copy(sizes: list[int], chunk: int) -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, 4 * MIN_SEGMENT_BYTES)
    connection = Connection(store)
    data = encode(TRACK) + b"".join(events_frame(i, size) for i, size in enumerate(sizes))
    connection.send(data, chunk)
    assert connection.decoder.reader.unread() == b""
    assert connection.refused == 0
    assert store.stored_events == len(sizes)
    assert store.totals().received_events == len(sizes)
    if sum(sizes) > 4 * MIN_SEGMENT_BYTES:
        assert connection.read_in_place > 0  # once a segment is open, reads go into it
    connection.writer.close()


def test_a_store_that_refuses_every_segment_refuses_the_frames_and_counts_them() -> None:
    store = Store(2 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, policy="discard")
    connection = Connection(store)
    frames = [events_frame(i, 1000) for i in range(300)]  # far past the capacity
    connection.send(encode(TRACK) + b"".join(frames), 64 * 1024)
    totals = store.totals()
    assert connection.refused == totals.discarded_events > 0
    assert totals.received_events == len(frames)
    assert store.stored_events + connection.refused == len(frames)
    connection.writer.close()


# -- pacing and admission --------------------------------------------------------------------------------------------


def test_the_control_budget_refills_at_its_rate_and_says_how_long_to_wait_below_zero() -> None:
    budget = ControlBudget()
    for _ in range(int(MAX_CONTROL_FRAMES_PER_S) + 10):
        budget.take(0.0)
    assert budget.left == -10
    assert budget.wait_s == pytest.approx(10 / MAX_CONTROL_FRAMES_PER_S)
    budget.take(1.0)  # a second later: refilled by MAX_CONTROL_FRAMES_PER_S, less this one
    assert budget.left == MAX_CONTROL_FRAMES_PER_S - 11
    budget.take(3.0)  # never past full
    assert budget.left == MAX_CONTROL_FRAMES_PER_S - 1


def test_a_frame_is_too_slow_only_past_the_idle_timeout_below_the_least_rate() -> None:
    arrival = FrameArrival()
    arrival.received(100)
    arrival.taken(unread=100, last_read_s=0.0)  # a frame began at 0 s
    assert arrival.too_slow(5.0, 10.0, 100) is None  # within the idle timeout
    assert arrival.too_slow(20.0, 10.0, 100) == 20.0
    assert arrival.too_slow(20.0, 10.0, 20 * MIN_FRAME_BYTES_PER_S) is None  # fast enough on average
    arrival.received(50)
    arrival.taken(unread=150, last_read_s=19.0)  # the same frame: nothing more was taken
    assert arrival.too_slow(20.0, 10.0, 150) == 20.0
    arrival.taken(unread=0, last_read_s=21.0)  # between frames: nothing is arriving
    assert arrival.too_slow(40.0, 10.0, 0) is None


def test_admission_counts_remote_hosts_and_names_the_limit_it_refuses_at() -> None:
    assert counted_address(("127.0.0.1", 5000)) is None
    assert counted_address(("10.0.0.1", 5000)) == "10.0.0.1"
    assert refusal(("10.0.0.1", 1), 3, 3, {}, 5) == "max_connections=3 reached"
    assert refusal(("10.0.0.1", 1), 2, 3, {"10.0.0.1": 5}, 5) == ("max_connections_per_address=5 reached for 10.0.0.1")
    assert refusal(("127.0.0.1", 1), 2, 3, {"127.0.0.1": 5}, 5) is None


# -- a connection's memory -------------------------------------------------------------------------------------------


def test_a_connection_and_its_tables_are_freed_as_it_ends_not_at_the_next_garbage_collection() -> None:
    """Nothing of a connection refers back to it (a bound method, a table of them): its tables, which may take
    megabytes, go as soon as asyncio lets go of the connection."""

    async def scenario() -> int:
        collector = small_collector()
        gc.collect()
        gc.disable()
        try:
            protocol, _ = connect(collector, Strings(0, ("a", "b")), TRACK, Flush(1))
            protocol.connection_lost(None)
            del protocol
            return sum(1 for o in gc.get_objects() if isinstance(o, IngestDecoder))
        finally:
            gc.enable()

    assert asyncio.run(scenario()) == 0


def test_segments_sealed_for_their_age_are_sized_to_what_came_not_doubled_each_time() -> None:
    # (JetStream seals a connection's segment every 200 ms; --max-age seals old ones.)
    store = Store(64 * 1024 * 1024, 4 * 1024 * 1024)
    connection = Connection(store)
    connection.send(encode(TRACK), 4096)
    for number in range(8):
        connection.send(events_frame(number, 100), 4096)
        connection.writer.seal()
    snapshot = store.snapshot()
    sizes = [segment.size for segment in snapshot.segments]
    snapshot.close()
    assert len(sizes) == 8 and set(sizes) == {MIN_SEGMENT_BYTES}
