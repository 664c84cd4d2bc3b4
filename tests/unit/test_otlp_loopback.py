"""The OTLP receiver's loopback streams, in process: what they keep once closed, and a collector's FLUSH answered
while a request's frames are still going in."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from ringtrace.collector.ingest.otlp import receiver as receiver_module
from ringtrace.collector.ingest.otlp.request_pieces import PIECE_BYTES, Piece, RequestPlan
from ringtrace.collector.ingest.otlp.signals import SIGNALS
from ringtrace.collector.service.app import Collector
from ringtrace.collector.service.config import CollectorConfig
from waiting import wait_for_async

T0 = 1_700_000_000_000_000_000
TRACES = SIGNALS[0]


def request(instance: str, spans: int, name_bytes: int = 40) -> ExportTraceServiceRequest:
    export = ExportTraceServiceRequest()
    attributes = [
        KeyValue(key="service.name", value=AnyValue(string_value="job")),
        KeyValue(key="service.instance.id", value=AnyValue(string_value=instance)),
    ]
    export.resource_spans.append(
        ResourceSpans(
            resource={"attributes": attributes},
            scope_spans=[
                ScopeSpans(
                    spans=[
                        Span(
                            trace_id=bytes(range(1, 17)),
                            span_id=(i + 1).to_bytes(8, "big"),
                            name=f"{instance}-{i}-" + "x" * name_bytes,
                            start_time_unix_nano=T0 + i,
                            end_time_unix_nano=T0 + i + 5,
                            attributes=[KeyValue(key="k", value=AnyValue(string_value="v" * 200))],
                        )
                        for i in range(spans)
                    ]
                )
            ],
        )
    )
    return export


def collector() -> Collector:
    return Collector(CollectorConfig(tcp_port=0, http_port=0, otlp_http=("127.0.0.1", 0)))


def test_a_resource_whose_loopback_connection_closed_is_forgotten() -> None:
    async def scenario() -> int:
        running = collector()
        await running.start()
        try:
            receiver = running.otlp
            assert receiver is not None
            for n in range(5):
                response = await receiver.store(TRACES, request(f"run-{n}", 100).SerializeToString(), False)
                assert response.status == 200
            for connection in list(running.otlp_connections):  # as the idle timeout closes them
                connection.close()
            return await wait_for_async(
                lambda: receiver.open_streams, until=lambda n: n == 0, timeout_s=30, what="every stream closed"
            )
        finally:
            await running.stop()

    assert asyncio.run(scenario()) == 0


def test_a_flush_the_collector_asks_for_while_a_large_request_goes_in_is_answered_between_frames() -> None:
    async def scenario() -> tuple[int, int]:
        running = collector()
        await running.start()
        try:
            receiver = running.otlp
            assert receiver is not None
            first = await receiver.store(TRACES, request("big", 10).SerializeToString(), False)  # the stream opens
            assert first.status == 200
            # ~3 MB of frames: they go in a turn (TURN_BYTES) at a time, reading paused between turns
            storing = asyncio.ensure_future(receiver.store(TRACES, request("big", 12_000).SerializeToString(), False))
            await asyncio.sleep(0)  # (the request has begun: its frames are going in)
            flushes = 0
            while not storing.done():  # (snapshots ask clients only: OTLP data is stored before its answer)
                for answered in asyncio.as_completed([c.request_flush() for c in running.otlp_connections], timeout=30):
                    assert await answered
                flushes += 1
            response = storing.result()
            return response.status, flushes
        finally:
            await running.stop()

    status, flushes = asyncio.run(scenario())
    assert flushes >= 1
    assert status == 200


def test_a_request_on_a_kept_alive_connection_while_the_collector_stops_is_503_and_opens_no_connection() -> None:
    import aiohttp

    async def scenario() -> tuple[int, int]:
        running = collector()
        await running.start()
        assert running.servers.otlp_address is not None
        host, port = running.servers.otlp_address
        session = aiohttp.ClientSession()  # keeps its connection alive past the listener's close
        headers = {"Content-Type": "application/x-protobuf"}

        async def post(instance: str) -> int:
            body = request(instance, 10).SerializeToString()
            async with session.post(f"http://{host}:{port}/v1/traces", data=body, headers=headers) as response:
                return response.status

        try:
            assert await post("first") == 200
            real = running.servers.ingest_closed
            late: list[int] = []

            async def ingest_closed() -> None:  # an exporter's request arrives as ingest closes
                await real()
                late.append(await post("late"))

            running.servers.ingest_closed = ingest_closed  # type: ignore[method-assign]
            await running.stop()
            return late[0], len(list(running.every_connection))
        finally:
            await session.close()

    status, open_connections = asyncio.run(scenario())
    assert status == 503
    assert open_connections == 0


def test_a_new_resource_while_the_otlp_bound_is_busy_with_another_request_gets_503_with_retry_after() -> None:
    import aiohttp

    async def scenario() -> list[tuple[int, str | None, bytes]]:
        running = Collector(CollectorConfig(tcp_port=0, http_port=0, otlp_http=("127.0.0.1", 0), otlp_max_processes=1))
        await running.start()
        assert running.servers.otlp_address is not None
        host, port = running.servers.otlp_address
        url = f"http://{host}:{port}/v1/traces"
        headers = {"Content-Type": "application/x-protobuf"}
        answers: list[tuple[int, str | None, bytes]] = []
        try:
            async with aiohttp.ClientSession() as session:

                async def post(body: bytes) -> tuple[int, str | None, bytes]:
                    async with session.post(url, data=io.BytesIO(body), headers=headers) as response:
                        return response.status, response.headers.get("Retry-After"), await response.read()

                async def a_small_one_while_a_large_one_goes_in() -> list[tuple[int, str | None, bytes]]:
                    large = f"large-{len(answers)}"  # its stream is busy while its frames go in, a turn at a time
                    known = len(running.registry.processes)
                    made = request(large, 1500, name_bytes=0)
                    for i, span in enumerate(made.resource_spans[0].scope_spans[0].spans):
                        span.trace_id = (i + 1).to_bytes(16, "big")  # (a trace each: many lanes to place)
                        del span.attributes[:]  # (a map: read the Python way, on a worker thread)
                        span.attributes.add(key="map").value.kvlist_value.values.add(key="k").value.int_value = 1
                    body = made.SerializeToString()
                    assert len(body) <= PIECE_BYTES  # (read whole: a request read in pieces holds the decoding)
                    storing = asyncio.ensure_future(post(body))
                    while not storing.done() and len(running.registry.processes) == known:
                        await asyncio.sleep(0)  # (its stream opens as it is packed: its process is known)
                    answers.append(await post(request(f"small-{len(answers)}", 1).SerializeToString()))
                    assert (await storing)[0] == 200
                    return answers

                await wait_for_async(
                    a_small_one_while_a_large_one_goes_in,
                    until=lambda answers: any(status == 503 for status, _, _ in answers),
                    timeout_s=60,
                    what="a small request refused 503 while a large one goes in",
                    interval_s=0,
                )
            return answers
        finally:
            await running.stop()

    answers = asyncio.run(scenario())
    for status, retry_after, body in answers:
        assert status == 200 or (status == 503 and retry_after == "1" and b"--otlp-max-processes=1" in body)


def test_a_request_already_taken_when_the_collector_begins_to_stop_is_503_not_400() -> None:
    async def scenario() -> tuple[int, str | None]:
        running = collector()
        await running.start()
        try:
            receiver = running.otlp
            assert receiver is not None
            receiver.stopping = True  # as ``stop`` does while this request waits for its turn
            response = await receiver.store(TRACES, request("late", 10).SerializeToString(), False)
            return response.status, response.headers.get("Retry-After")
        finally:
            await running.stop()

    assert asyncio.run(scenario()) == (503, "1")


def test_a_large_request_is_cut_into_pieces_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    cut_on: set[int] = set()  # (the threads that walked the body's items: cutting 1M items took seconds)
    real_plan, real_pieces = receiver_module.plan, RequestPlan.pieces

    def plan(body: bytes) -> RequestPlan | None:
        cut_on.add(threading.get_ident())
        return real_plan(body)

    def pieces(self: RequestPlan, *args: Any, **kwargs: Any) -> Iterator[Piece]:
        for piece in real_pieces(self, *args, **kwargs):
            cut_on.add(threading.get_ident())
            yield piece

    monkeypatch.setattr(receiver_module, "plan", plan)
    monkeypatch.setattr(RequestPlan, "pieces", pieces)

    async def scenario() -> tuple[int, int]:
        running = collector()
        await running.start()
        try:
            receiver = running.otlp
            assert receiver is not None
            body = request("large", 2000).SerializeToString()
            assert len(body) > 2 * PIECE_BYTES
            response = await receiver.store(TRACES, body, False)
            return response.status, threading.get_ident()
        finally:
            await running.stop()

    status, loop_thread = asyncio.run(scenario())
    assert status == 200
    assert cut_on and loop_thread not in cut_on
