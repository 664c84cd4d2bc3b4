"""Memory one connection can make the collector hold, beyond what its configuration bounds.

IngestProtocol is driven in process through a stand-in transport (bytes in through get_buffer/buffer_updated, writes
kept), the way asyncio drives it; the ring store is measured with tracemalloc.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import time
import tracemalloc
from typing import Any

import msgpack
import pytest
from ringtrace.collector.ingest.connection import READ_SIZE, IngestProtocol
from ringtrace.collector.service.app import Collector, CollectorConfig
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.arg_values import MAX_STRING_CHARS
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.frame_types import MIN_MAX_FRAME_BYTES
from ringtrace.wire.frames import Events, Flush, FlushAck, Frame, Goodbye, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import INSTANT, THREAD_TRACK, TrackInfo
from ringtrace.wire.reply_decoder import ReplyDecoder
from ringtrace.wire.stream_encoder import StreamEncoder
from ringtrace.wire.table_frames import KindSpec, Schema, Strings, Track
from waiting import wait_for_async

HELLO = Hello(1234, "host", "proc", "instance", "", 1, 2, "test")


class StandInTransport:
    """What IngestProtocol uses of an asyncio transport."""

    def __init__(self, peer: tuple[str, int] = ("127.0.0.1", 50000)) -> None:
        self.written = bytearray()
        self.closing = False
        self.peer = peer
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def get_write_buffer_size(self) -> int:
        return len(self.written)

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True


def feed(protocol: IngestProtocol, data: bytes) -> None:
    while data:
        view = protocol.get_buffer(len(data))
        n = min(len(view), len(data))
        view[:n] = data[:n]
        protocol.buffer_updated(n)
        data = data[n:]


async def read_on(transport: StandInTransport) -> None:
    """Let the loop turn until the connection reads again: table frames past a turn's share wait for later turns."""
    while not transport.reading and not transport.closing:
        await asyncio.sleep(0)


def small_collector(**config: Any) -> Collector:
    defaults: dict[str, Any] = {
        "tcp_port": 0,
        "http_port": 0,
        "capacity_bytes": 2 * (MIN_MAX_FRAME_BYTES + MIN_SEGMENT_BYTES),
        "max_frame_bytes": MIN_MAX_FRAME_BYTES,
    }
    return Collector(CollectorConfig(**{**defaults, **config}))


def connect(collector: Collector, *frames: Frame) -> tuple[IngestProtocol, StandInTransport]:
    """A connection that said HELLO and ``frames``, open or closed by what they held."""
    protocol, transport = IngestProtocol(collector), StandInTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    feed(protocol, preamble() + b"".join(encode(f, collector.config.max_frame_bytes) for f in (HELLO, *frames)))
    return protocol, transport


def test_unanswered_snapshot_flushes_do_not_accumulate() -> None:
    async def scenario() -> int:
        collector = small_collector()
        _, transport = connect(collector)  # a client that never answers FLUSH
        assert not transport.closing
        for _ in range(50):
            await collector.snapshot(flush_timeout_s=0.001)
        await asyncio.sleep(0)  # done-callbacks run on the next turn of the loop
        gc.collect()
        running = asyncio.current_task()
        return sum(1 for o in gc.get_objects() if isinstance(o, asyncio.Future) and not o.done() and o is not running)

    assert asyncio.run(scenario()) == 0


def test_one_connection_cannot_declare_strings_beyond_their_bound() -> None:
    async def scenario() -> None:  # connections are made on a running loop
        collector = small_collector(max_strings=200)
        longest = "s" * MAX_STRING_CHARS
        _, transport = connect(collector, *(Strings(i, (longest,)) for i in range(200)))
        assert not transport.closing
        # One character more than a client ever sends, or one id past the limit, closes the connection.
        _, transport = connect(collector, Strings(0, (longest + "s",)))
        assert transport.closing
        _, transport = connect(collector, Strings(200, ("x",)))
        assert transport.closing

    asyncio.run(scenario())


def test_a_connection_at_every_limit_holds_no_more_than_its_tables_are_charged() -> None:
    def text(i: int, chars: int = MAX_STRING_CHARS) -> str:
        # The most memory per byte of UTF-8: one emoji makes Python keep every character in 4 bytes.
        return f"{i:08d}" + "a" * (chars - 9) + "\U0001f600"

    async def scenario() -> tuple[int, int, bool]:
        config = CollectorConfig(tcp_port=0, http_port=0, capacity_bytes=64 * 1024 * 1024)
        collector = Collector(config)
        per_text = len(text(0).encode())
        strings = config.max_string_bytes // per_text
        kinds: list[KindSpec] = []
        while len(kinds) < config.max_kinds:
            kinds.append(KindSpec(len(kinds), text(len(kinds), 40), "span"))
        assert sum(kind.text_bytes for kind in kinds) <= config.max_schema_bytes
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            protocol, transport = connect(collector)
            for first in range(0, strings, 64):
                feed(protocol, encode(Strings(first, tuple(text(i) for i in range(first, min(strings, first + 64))))))
                await read_on(transport)
            for i in range(min(config.max_tracks, strings)):  # the track names' budget is the strings' one
                feed(protocol, encode(Track(i + 1, THREAD_TRACK, text(i), i + 1)))
                await read_on(transport)
            for first in range(0, len(kinds), 50):
                feed(protocol, encode(Schema(tuple(kinds[first : first + 50]))))
                await read_on(transport)
            gc.collect()
            used = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        return used, collector.store.table_bytes, transport.closing

    used, charged, closed = asyncio.run(scenario())
    assert not closed
    # What is counted against the capacity (docs/collector.md, "--max-strings") is at least what the tables take; the
    # connection's read buffer and objects are the rest.
    assert used <= charged + READ_SIZE + 64 * 1024, f"{used} bytes for one connection at every limit, {charged} charged"


def test_store_memory_stays_within_its_capacity_with_small_frames() -> None:
    # One instant, as a real client packs it when a thread recorded one event during a sweep interval.
    track = TrackInfo(1, THREAD_TRACK, "t", 1)
    ((frame, _),) = StreamEncoder().encode(track, [INSTANT, "tick", 10**15, 10**15, None]).events
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        # Big enough that allocations of other threads during the measurement are noise.
        store = Store(capacity_bytes=1024 * 1024, segment_bytes=128 * 1024)
        streams = [store.open_stream(owner, encode(HELLO)) for owner in range(8)]
        for i in range(100_000):
            store.events(streams[i % 8], 1000 + i % 3, 1, 10**15 + i, 10**15 + i, frame)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert store.stored_frames > 0
    assert store.held_bytes <= store.capacity_bytes
    # The segments, their index included, are the memory: what is left is a few objects per stream and track.
    assert used <= store.capacity_bytes + 64 * 1024, (
        f"{used} bytes for a {store.capacity_bytes}-byte store of {len(frame)}-byte frames"
    )


def test_client_that_never_reads_cannot_grow_the_collectors_write_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bound = 2 * 1024 * 1024
    consumed = [0]
    real_buffer_updated = IngestProtocol.buffer_updated

    def counting_buffer_updated(self: IngestProtocol, nbytes: int) -> None:
        consumed[0] += nbytes
        real_buffer_updated(self, nbytes)

    monkeypatch.setattr(IngestProtocol, "buffer_updated", counting_buffer_updated)

    async def scenario() -> int:
        collector = Collector(CollectorConfig(tcp_port=0, http_port=0))
        await collector.start()
        loop = asyncio.get_running_loop()
        assert collector.tcp_address is not None
        client = socket.socket()
        try:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.connect(collector.tcp_address)
            client.setblocking(False)
            data = preamble() + encode(HELLO) + encode(Flush(1)) * 1_000_000  # 13 MB, never reading an answer
            sending = asyncio.ensure_future(loop.sock_sendall(client, data))
            deadline = loop.time() + 3
            largest = 0
            while loop.time() < deadline and largest <= bound:
                for connection in list(collector.connections):
                    largest = max(largest, connection.unsent_bytes)
                if consumed[0] == len(data):
                    break  # the collector read everything we sent
                await asyncio.sleep(0.05)
            sending.cancel()
            return largest
        finally:
            client.close()
            await collector.stop()

    largest = asyncio.run(scenario())
    assert largest <= bound, f"{largest} bytes of FLUSH_ACK buffered for a client that never reads"


def test_connection_that_never_says_hello_is_closed_after_the_handshake_timeout() -> None:
    async def scenario() -> tuple[bool, bool]:
        collector = Collector(CollectorConfig(tcp_port=0, http_port=0, handshake_timeout_s=0.05))
        silent, greeted = StandInTransport(), StandInTransport()
        IngestProtocol(collector).connection_made(silent)  # type: ignore[arg-type]
        talker = IngestProtocol(collector)
        talker.connection_made(greeted)  # type: ignore[arg-type]
        feed(talker, preamble() + encode(HELLO))
        await wait_for_async(lambda: silent.closing, timeout_s=30, what="the silent connection closed")
        await asyncio.sleep(0.2)  # (on purpose: the greeted connection's timer, also 0.05 s, has run by then)
        return silent.closing, greeted.closing

    assert asyncio.run(scenario()) == (True, False)


def test_a_peer_that_floods_flushes_and_reads_no_answers_is_not_read_again_when_its_throttle_ends() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        collector = Collector(CollectorConfig(tcp_port=0, http_port=0))
        protocol, transport = connect(collector)
        protocol.pause_writing()  # its answers pile up: it does not read them
        feed(protocol, b"".join(encode(Flush(token)) for token in range(1, 3001)))  # past 1000 a second: throttled
        throttled = collector.traffic.throttled > 0
        await asyncio.sleep(2.5)  # the throttle's pause has ended
        still_paused = not transport.reading
        protocol.resume_writing()  # it reads its answers again: so do we
        return throttled, still_paused, transport.reading

    assert asyncio.run(scenario()) == (True, True, True)


def test_a_peer_that_reads_no_answers_for_the_idle_timeout_is_closed_and_counted() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        collector = Collector(CollectorConfig(tcp_port=0, http_port=0))
        protocol, transport = connect(collector)
        protocol.pause_writing()  # its answers pile up: it does not read them, and so is not read either
        now_s = time.monotonic()
        kept = not protocol.close_if_idle(now_s + 59, 60.0) and not transport.closing
        closed = protocol.close_if_idle(now_s + 61, 60.0) and transport.closing
        return kept, closed, collector.traffic.too_slow

    assert asyncio.run(scenario()) == (True, True, 1)


def test_one_address_cannot_take_every_slot_but_local_processes_are_not_limited_per_address() -> None:
    async def scenario() -> list[bool]:
        collector = Collector(
            CollectorConfig(tcp_port=0, http_port=0, max_connections=6, max_connections_per_address=2)
        )
        peers = [("10.0.0.5", 1), ("10.0.0.5", 2), ("10.0.0.5", 3), ("10.0.0.6", 1), ("127.0.0.1", 1), ("::1", 1)]
        transports = [StandInTransport(peer) for peer in peers]
        protocols = [IngestProtocol(collector) for _ in peers]
        for protocol, transport in zip(protocols, transports, strict=True):
            protocol.connection_made(transport)  # type: ignore[arg-type]
        refused = [t.closing for t in transports]
        protocols[0].connection_lost(None)  # a slot of 10.0.0.5 is free again
        again = StandInTransport(("10.0.0.5", 4))
        IngestProtocol(collector).connection_made(again)  # type: ignore[arg-type]
        return [*refused, again.closing]

    assert asyncio.run(scenario()) == [False, False, True, False, False, False, False]


def test_a_connection_past_max_connections_is_told_so_and_a_crowd_of_them_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> list[StandInTransport]:
        collector = Collector(CollectorConfig(tcp_port=0, http_port=0, max_connections=2))
        transports = [StandInTransport(("127.0.0.1", port)) for port in range(1, 12)]
        for transport in transports:
            IngestProtocol(collector).connection_made(transport)  # type: ignore[arg-type]
        return transports

    with caplog.at_level("WARNING", logger="ringtrace.collector.ingest"):
        transports = asyncio.run(scenario())
    assert [t.closing for t in transports] == [False] * 2 + [True] * 9
    for transport in transports[2:]:  # a GOODBYE that says why: the client logs it, not "is it a collector?"
        decoder = ReplyDecoder()
        decoder.receive_data(bytes(transport.written))
        (goodbye,) = list(decoder)
        assert isinstance(goodbye, Goodbye) and "max_connections=2 reached" in goodbye.reason
    refusals = [r.getMessage() for r in caplog.records if "refusing connection" in r.getMessage()]
    assert len(refusals) == 1 and "max_connections=2 reached" in refusals[0]


def test_tracks_per_connection_are_bounded_and_named_within_the_string_limit() -> None:
    async def scenario() -> None:
        collector = small_collector(max_tracks=3)
        _, transport = connect(collector, *(Track(i, THREAD_TRACK, f"t{i}", 100 + i) for i in range(3)))
        assert not transport.closing
        _, transport = connect(collector, *(Track(i, THREAD_TRACK, f"t{i}", 100 + i) for i in range(4)))
        assert transport.closing
        _, transport = connect(collector, Track(1, THREAD_TRACK, "n" * (MAX_STRING_CHARS + 1), 7))
        assert transport.closing

    asyncio.run(scenario())


def test_strings_and_kinds_sent_again_are_not_replayed_again_into_every_segment() -> None:
    kinds = (KindSpec(70, "custom", "instant"),)
    strings = Strings(0, tuple(f"label-{i}" * 20 for i in range(50)))
    mixed = Strings(49, (strings.strings[49], "new"))  # one known, one new: only the new one is kept
    event = Events(1, 1, 10**15, 10**15, msgpack.packb([[1], [50], [0], [0], [None]]))

    def stored_bytes(resends: int) -> int:
        async def scenario() -> int:
            collector = small_collector()
            again = [strings, Schema(kinds)] * resends
            frames = [Schema(kinds), strings, *again, mixed, Track(1, THREAD_TRACK, "t", 1), event]
            _, transport = connect(collector, *frames)
            await read_on(transport)
            assert not transport.closing
            with collector.store.snapshot() as snapshot:
                (segment,) = snapshot.segments
                decoder = SessionDecoder(live=False)
                decoder.receive_data(segment.data())
                assert [
                    e.name for frame in decoder if isinstance(frame, Events) for e in decoder.tables.events(frame)
                ] == ["new"]
                return segment.used

        return asyncio.run(scenario())

    assert stored_bytes(20) == stored_bytes(0)


@pytest.mark.parametrize("max_age", [None, 60.0], ids=["default", "max-age"])
def test_a_closed_connection_and_its_tables_are_let_go_of_while_the_timers_run_on(max_age: float | None) -> None:
    # The timers that go through every connection (idle ones closed; with --max-age, segments sealed) once kept the
    # last one they went through alive while they slept, with all its tables: for good, once every one was gone.
    def alive() -> int:
        gc.collect()
        return sum(isinstance(o, IngestProtocol) for o in gc.get_objects())

    async def scenario() -> bool:
        collector = Collector(CollectorConfig(tcp_port=0, http_port=0, idle_timeout_s=1.0, max_age_s=max_age))
        await collector.start()
        assert collector.tcp_address is not None
        before = alive()  # (of other tests)
        try:
            reader, writer = await asyncio.open_connection(*collector.tcp_address)
            writer.write(preamble() + encode(HELLO) + encode(Strings(0, ("a label",))) + encode(Flush(1)))
            replies = ReplyDecoder()
            while not any(isinstance(frame, FlushAck) for frame in replies):
                replies.receive_data(await asyncio.wait_for(reader.read(65536), 30))
            await asyncio.sleep(1.2)  # (the timers go through it: every 0.25 s, and every second with --max-age)
            writer.close()
            await writer.wait_closed()
            await wait_for_async(
                alive,
                until=lambda count: count <= before,
                timeout_s=30,
                what=f"no more connections referred to than the {before} before",
                interval_s=0.05,
            )
            return alive() == before
        finally:
            await collector.stop()

    assert asyncio.run(scenario())
