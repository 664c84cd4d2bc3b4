"""OTLP ingest against native ingest: the same spans into one real collector (``--otlp-http``), both ways, in one run.

For each round and each way, N spans (name, start and end, trace and span ids, kind, one attribute, on one thread),
encoded beforehand so that only the collector's work is timed:

  otlp    ``ExportTraceServiceRequest`` protobuf bodies of 512 spans (the SDK's BatchSpanProcessor's batch), POSTed one
          after the other on one keep-alive HTTP connection to ``/v1/traces``, as an SDK's exporter sends them.
  lanes   the same, without the thread attributes: each span on a lane of its trace (8 spans a trace), placed there.
  sdk     spans made by the real OpenTelemetry SDK (a root and its 7 children a trace, one attribute each, no thread),
          encoded by its OTLP exporter's own encoder (``encode_spans``) into bodies of 512, POSTed as ``otlp``.
  native  the same spans as the ringtrace client's stream encoder packs them (SPAN events with the same args), sent
          on one TCP connection after HELLO/WELCOME, with a FLUSH at the end.

Timed from the first byte until the collector has stored all N (its /healthz ``stored_events``). spans/s = N / that;
collector CPU per span from its /proc/<pid>/stat (user + system) over the same interval. Rounds of the two ways are
interleaved; medians are reported, with the ratio otlp/native. The collector runs with ``--capacity 2GiB``.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import sys
import time
from typing import Any

from _common import Collector, bench_main, collector, interleave, median, table
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from ringtrace.wire.frames import Flush, FlushAck, encode, preamble
from ringtrace.wire.handshake_frames import Hello, Welcome
from ringtrace.wire.model import SPAN, THREAD_TRACK, KindRegistry, TrackInfo
from ringtrace.wire.reply_decoder import ReplyDecoder
from ringtrace.wire.stream_encoder import StreamEncoder

BATCH = 512
_OTLP = re.compile(r"otlp listening on http://([^\s:]+):(\d+)")
_rounds = iter(range(1, 1 << 30))


def spans(n: int, base_ns: int) -> list[tuple[str, int, int, bytes, bytes, int]]:
    """``(name, start, end, trace id, span id, i)`` of N spans, 1 µs apart."""
    return [
        (
            "work",
            base_ns + 1000 * i,
            base_ns + 1000 * i + 500,
            (i // 8 + 1).to_bytes(16, "big"),
            (i + 1).to_bytes(8, "big"),
            i,
        )
        for i in range(n)
    ]


def otlp_bodies(made: list[tuple[str, int, int, bytes, bytes, int]], service: str, on_thread: bool) -> list[bytes]:
    resource = {"attributes": [KeyValue(key="service.name", value=AnyValue(string_value=service))]}
    thread = [
        KeyValue(key="thread.id", value=AnyValue(int_value=1)),
        KeyValue(key="thread.name", value=AnyValue(string_value="main")),
    ]
    if not on_thread:
        thread = []
    bodies = []
    for start in range(0, len(made), BATCH):
        batch = [
            Span(
                name=name, start_time_unix_nano=t0, end_time_unix_nano=t1, trace_id=trace_id, span_id=span_id,
                kind=Span.SPAN_KIND_INTERNAL, attributes=[KeyValue(key="i", value=AnyValue(int_value=i)), *thread],
            )
            for name, t0, t1, trace_id, span_id, i in made[start : start + BATCH]
        ]  # fmt: skip
        export = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=batch)])]
        )
        bodies.append(export.SerializeToString())
    return bodies


def sdk_bodies(n: int, service: str) -> list[bytes]:
    """Bodies of N spans made by the OpenTelemetry SDK, as its OTLP/HTTP exporter encodes them (512 a request)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench_otlp", "1.0")
    for i in range(0, n, 8):
        with tracer.start_as_current_span("request", attributes={"i": i}):
            for j in range(1, 8):
                with tracer.start_as_current_span("work", attributes={"i": i + j}):
                    pass
    made = exporter.get_finished_spans()[:n]
    provider.shutdown()
    return [encode_spans(made[start : start + BATCH]).SerializeToString() for start in range(0, len(made), BATCH)]


def native_stream(made: list[tuple[str, int, int, bytes, bytes, int]], service: str) -> tuple[Hello, list[bytes]]:
    """HELLO, and the frames after WELCOME (prefix, EVENTS), as the client's encoder makes them."""
    now = time.time_ns()
    hello = Hello(os.getpid(), "", service, service, "", now, now, "bench", recorded=True)
    encoder = StreamEncoder(registry=KindRegistry())
    encoder.strings.recycles = True
    track = TrackInfo(1, THREAD_TRACK, "main", 1)
    records: list[Any] = []
    for name, t0, t1, trace_id, span_id, i in made:
        args = {"trace_id": trace_id.hex(), "span_id": span_id.hex(), "kind": "internal", "i": i, "thread.id": 1}
        records += (SPAN, name, t0, t1, args)
    frames = encoder.prefix()
    for batch, _ in encoder.encode_pieces(track, records):
        frames += batch.control
        frames += (frame for frame, _ in batch.events)
    return hello, frames


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(coll: Collector, n: int, send: Any) -> tuple[float, float]:
    """spans/s and collector CPU ns per span of ``send()`` storing n spans."""
    base = coll.stored_events()
    cpu0, t0 = cpu_s(coll.process.pid), time.perf_counter()
    send()
    stored = coll.wait_stored(base + n, deadline_s=120, poll_s=0.002) - base
    elapsed, cpu = time.perf_counter() - t0, cpu_s(coll.process.pid) - cpu0
    assert stored >= n, f"only {stored} of {n} stored"
    return n / elapsed, cpu / n * 1e9


def otlp_round(
    coll: Collector, address: tuple[str, int], n: int, on_thread: bool = True, sdk: bool = False
) -> tuple[float, float]:
    service = f"otlp-{next(_rounds)}"
    bodies = sdk_bodies(n, service) if sdk else otlp_bodies(spans(n, time.time_ns()), service, on_thread)
    connection = http.client.HTTPConnection(*address, timeout=60)

    def send() -> None:
        for body in bodies:
            connection.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
            response = connection.getresponse()
            response.read()
            assert response.status == 200, response.status

    try:
        return timed(coll, n, send)
    finally:
        connection.close()


def native_round(coll: Collector, n: int) -> tuple[float, float]:
    hello, frames = native_stream(spans(n, time.time_ns()), f"native-{next(_rounds)}")
    host, port = coll.tcp.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    replies = ReplyDecoder()

    def reply(kind: type) -> Any:
        while True:
            for frame in replies:
                if isinstance(frame, kind):
                    return frame
            data = sock.recv(65536)
            assert data, "the collector closed the connection"
            replies.receive_data(data)

    def send() -> None:
        sock.sendall(preamble() + encode(hello))
        reply(Welcome)
        sock.sendall(b"".join([*frames, encode(Flush(1))]))
        reply(FlushAck)

    try:
        return timed(coll, n, send)
    finally:
        sock.close()


def bench(n: int, rounds: int) -> int:
    with collector("--otlp-http", "127.0.0.1:0", "--capacity", "2GiB") as coll:
        deadline = time.monotonic() + 20
        address = None
        while address is None and time.monotonic() < deadline:
            found = [m for m in map(_OTLP.search, coll.log) if m]
            if found:
                address = (found[0].group(1), int(found[0].group(2)))
            else:
                time.sleep(0.05)
        assert address is not None, "the collector did not report its OTLP listener"
        ways = {
            "otlp": lambda: otlp_round(coll, address, n),
            "lanes": lambda: otlp_round(coll, address, n, on_thread=False),
            "sdk": lambda: otlp_round(coll, address, n, sdk=True),
            "native": lambda: native_round(coll, n),
        }
        results = interleave(ways, rounds)
    otlp_rate, native_rate = median([r[0] for r in results["otlp"]]), median([r[0] for r in results["native"]])
    otlp_cpu, native_cpu = median([r[1] for r in results["otlp"]]), median([r[1] for r in results["native"]])
    lanes_rate, lanes_cpu = median([r[0] for r in results["lanes"]]), median([r[1] for r in results["lanes"]])
    sdk_rate, sdk_cpu = median([r[0] for r in results["sdk"]]), median([r[1] for r in results["sdk"]])
    ratio = otlp_rate / native_rate
    print(
        table(
            ["way", "spans/s", "collector CPU ns/span"],
            [
                ["otlp (protobuf, 512 a request)", f"{otlp_rate:,.0f}", f"{otlp_cpu:,.0f}"],
                ["otlp, no thread: on trace lanes", f"{lanes_rate:,.0f}", f"{lanes_cpu:,.0f}"],
                ["otlp, the SDK's exporter's bodies", f"{sdk_rate:,.0f}", f"{sdk_cpu:,.0f}"],
                ["native", f"{native_rate:,.0f}", f"{native_cpu:,.0f}"],
            ],
            title=f"{n:,} spans a round, {rounds} rounds, medians",
        )
    )
    print(f"otlp / native spans/s: {ratio:.3f}x (no target set: the figure is reported)")
    if native_cpu:  # (its CPU time counts in 10 ms ticks: a small quick run may read 0)
        print(f"collector CPU per span, otlp / native: {otlp_cpu / native_cpu:.1f}x")
        print(f"collector CPU per span, sdk / native: {sdk_cpu / native_cpu:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, n=200_000, rounds=3, quick=(20_000, 1)))
