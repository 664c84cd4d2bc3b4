"""A live tail with ``until`` (``GET /stream``) ends once the clock is past it, with what was stored before then shown
whole, however much of it a step could not read. Driven in process: the collector's HTTP app, a stand-in connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import ClientResponse, ClientSession
from aiohttp.test_utils import TestServer
from ringtrace.collector.http.api import make_app
from ringtrace.collector.http.query import time_text
from ringtrace.collector.ingest.connection import IngestProtocol
from ringtrace.collector.read.tail import MAX_STEP_BYTES
from ringtrace.wire.frames import encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import INSTANT, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder
from test_collector_limits import StandInTransport, feed, small_collector


async def tailed(response: ClientResponse) -> tuple[int, list[str], list[dict[str, Any]]]:
    """The data events of a tail until it ends, the names of its other events and their documents."""
    shown, others, documents, event = 0, [], [], "message"
    async for line in response.content:
        if line.startswith(b"event: "):
            event = line[7:].strip().decode()
        elif line.startswith(b"data: "):
            if event == "message":
                shown += orjson.loads(line[6:])["process"] == "flood"
            else:
                others.append(event)
                documents.append(orjson.loads(line[6:]))
            event = "message"
    return shown, others, documents


def test_a_tail_whose_until_passed_ends_only_once_it_showed_what_was_stored_before() -> None:
    # More than a step reads (MAX_STEP_BYTES), stored at once, all of it before the until: the tail shows it all,
    # then says it is done (it said done after one step's worth, the rest never shown).
    until = time.time_ns() - 3_000_000_000  # past, and past the grace at the tail's first step
    track = TrackInfo(1, THREAD_TRACK, "main", 1)
    encoder = StreamEncoder()
    encoder.declare(track)
    padded = {"pad": "x" * 1000}
    starts = [until - 10**9 + i for i in range(3 * MAX_STEP_BYTES // 1000)]
    batch = encoder.encode(track, [field for ts in starts for field in (INSTANT, "tick", ts, ts, padded)])

    async def scenario() -> tuple[int, list[str], list[dict[str, Any]]]:
        collector = small_collector(capacity_bytes=256 << 20, max_frame_bytes=1 << 20)
        async with (
            TestServer(make_app(collector)) as server,
            ClientSession() as session,
            session.get(server.make_url(f"/stream?until={until}")) as response,
        ):
            assert (await response.content.readline()).startswith(b":")  # begun
            wall_ns = time.time_ns()
            hello = Hello(4321, "host", "flood", "instance-flood", "", wall_ns, wall_ns, "test")
            protocol, transport = IngestProtocol(collector), StandInTransport()
            protocol.connection_made(transport)  # type: ignore[arg-type]
            frames = [preamble(), encode(hello), *encoder.prefix(), *batch.control, *(f for f, _ in batch.events)]
            feed(protocol, b"".join(frames))  # (no await: all of it is stored before the tail's next step)
            assert not transport.closing and protocol.process is not None
            assert collector.store.kept_events([protocol.process.uid]) == {protocol.process.uid: batch.event_count}
            return await tailed(response)

    shown, others, documents = asyncio.run(scenario())
    assert others == ["done"]
    # its until said as a time (it was said in ns alone), and in ns for a program
    assert documents == [{"reason": f"its until ({time_text(until)}) has passed", "until_ns": until}]
    assert shown == batch.event_count, f"{shown} of {batch.event_count} events stored before its until shown"


def test_a_tail_with_grace_shows_what_a_slow_client_sends_past_the_default_grace() -> None:
    # A client whose batch_interval_s is over the default grace (2 s) sends events stamped before the until after the
    # tail would have ended: the tail's grace covers it (here: events stamped before an until 5 s gone, stored now).
    until = time.time_ns() - 5_000_000_000
    track = TrackInfo(1, THREAD_TRACK, "main", 1)
    encoder = StreamEncoder()
    encoder.declare(track)
    # A second before the until: a HELLO read more than 10 ms after its clocks (a busy machine) has its events placed
    # by the collector's clock, that much later; stamped 100 ns before the until, none was shown, and the wait ran out.
    stamped = until - 1_000_000_000
    batch = encoder.encode(track, [f for ts in range(stamped - 100, stamped) for f in (INSTANT, "late", ts, ts, {})])

    async def scenario() -> tuple[int, list[str]]:
        collector = small_collector(capacity_bytes=64 << 20)
        async with (
            TestServer(make_app(collector)) as server,
            ClientSession() as session,
            session.get(server.make_url(f"/stream?until={until}&grace=60s")) as response,
        ):
            assert response.status == 200, await response.text()
            assert (await response.content.readline()).startswith(b":")  # begun
            wall_ns = time.time_ns()
            hello = Hello(4321, "host", "flood", "instance-flood", "", wall_ns, wall_ns, "test")
            protocol, transport = IngestProtocol(collector), StandInTransport()
            protocol.connection_made(transport)  # type: ignore[arg-type]
            feed(protocol, b"".join([preamble(), encode(hello), *encoder.prefix(), *batch.control,
                                     *(f for f, _ in batch.events)]))  # fmt: skip
            shown, others, event = 0, [], "message"
            async with asyncio.timeout(30):  # (the tail goes on for a minute: read what was fed, then leave)
                while shown < batch.event_count and not others:
                    line = await response.content.readline()
                    if line.startswith(b"event: "):
                        event = line[7:].strip().decode()
                    elif line.startswith(b"data: "):
                        if event == "message":
                            shown += 1
                        else:
                            others.append(event)
            return shown, others

    shown, others = asyncio.run(scenario())
    assert (shown, others) == (batch.event_count, [])


def test_a_bad_grace_is_refused_with_a_400_naming_it() -> None:
    async def answers() -> list[tuple[int, str]]:
        collector = small_collector()
        got = []
        async with TestServer(make_app(collector)) as server, ClientSession() as session:
            for query in ("until=%2B5s&grace=abc", "until=%2B5s&grace=2m", "until=%2B5s&grace=-1s", "grace=5s"):
                async with session.get(server.make_url(f"/stream?{query}")) as response:
                    got.append((response.status, await response.text()))
        return got

    (abc, long, negative, alone) = asyncio.run(answers())
    assert abc == (400, "query parameter 'grace': a duration is a number and a unit (ns, us, ms, s, m, h), like 1ms "
                        "or 250us, got 'abc'\n")  # fmt: skip
    assert long == (400, "query parameter 'grace' must be at most 60s, got '2m'\n")
    assert negative[0] == 400 and negative[1].startswith("query parameter 'grace': a duration must not be negative")
    assert alone[0] == 400 and alone[1].startswith("query parameter 'grace' goes with 'until' only")
