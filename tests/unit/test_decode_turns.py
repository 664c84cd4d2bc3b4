"""Table frames (STRINGS, SCHEMA, TRACK) past a loop turn's share wait for later turns, in the order they came, and
hold up no other connection (``turns.py``). Connections are driven in process through a stand-in transport."""

from __future__ import annotations

import asyncio

from ringtrace.collector.ingest.turns import FRAME_COST, TABLE_BYTES_PER_TURN
from ringtrace.wire.decoder import ReplyDecoder
from ringtrace.wire.frames import Flush, FlushAck, Track, encode
from ringtrace.wire.model import THREAD_TRACK
from test_collector_limits import StandInTransport, connect, feed, read_on, small_collector


def acknowledged(transport: StandInTransport) -> list[int]:
    decoder = ReplyDecoder()
    decoder.receive_data(bytes(transport.written))
    return [frame.token for frame in decoder if isinstance(frame, FlushAck)]


def test_tables_past_a_turn_s_share_wait_for_later_turns_and_hold_no_other_flush_up() -> None:
    tracks = [encode(Track(i + 1, THREAD_TRACK, f"thread-{i}".ljust(100), i + 1)) for i in range(3000)]
    per_turn = TABLE_BYTES_PER_TURN // (len(tracks[0]) + FRAME_COST)
    assert len(tracks) > 2 * per_turn  # three turns' worth at least

    async def scenario() -> None:
        collector = small_collector(max_tracks=len(tracks), capacity_bytes=64 << 20)  # (tables are charged to it)
        filler, filling = connect(collector)
        good, served = connect(collector)
        feed(filler, b"".join(tracks) + encode(Flush(1)))
        assert not filling.reading and acknowledged(filling) == []  # the rest of its tables wait for their turn
        feed(good, encode(Flush(2)))
        assert acknowledged(served) == [2]  # at once: it sent no tables
        turns = 0
        while not filling.reading:
            await asyncio.sleep(0)
            turns += 1
        assert turns >= 2 and acknowledged(filling) == [1] and not filling.closing
        process = filler.process
        assert process is not None and len(process.tracks) == len(tracks)

    asyncio.run(scenario())


def test_connections_waiting_for_a_turn_take_their_turns_in_the_order_they_came() -> None:
    tracks = b"".join(encode(Track(i + 1, THREAD_TRACK, f"t{i}".ljust(100), i + 1)) for i in range(3000))

    async def scenario() -> list[int]:
        collector = small_collector(max_tracks=3000, capacity_bytes=64 << 20)
        connections = [connect(collector) for _ in range(3)]
        for token, (protocol, _) in enumerate(connections, 1):
            feed(protocol, tracks + encode(Flush(token)))
        order: list[int] = []
        while len(order) < len(connections):
            await asyncio.sleep(0)
            order += [t for _, transport in connections for t in acknowledged(transport) if t not in order]
        for _, transport in connections:
            await read_on(transport)
        return order

    assert asyncio.run(scenario()) == [1, 2, 3]
