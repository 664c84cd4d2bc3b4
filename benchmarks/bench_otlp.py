"""OTLP ingest against native ingest: the same spans into one real collector (``--otlp-http``), both ways, in one run.

For each round and each way, N spans (name, start and end, trace and span ids, kind, one attribute, on one thread),
encoded beforehand so that only the collector's work is timed:

  otlp    ``ExportTraceServiceRequest`` protobuf bodies of 512 spans (the SDK's BatchSpanProcessor's batch), POSTed one
          after the other on one keep-alive HTTP connection to ``/v1/traces``, as an SDK's exporter sends them.
  lanes   the same, without the thread attributes: each span on a lane of its trace (8 spans a trace), placed there;
          and again with ``--spans-per-trace`` spans a trace (1 by default: a service's part of a trace is often 1 to
          3 spans), with the ratio of the two's CPU per span.
  sdk     spans made by the real OpenTelemetry SDK (a root and its 7 children a trace, one attribute each, no thread),
          encoded by its OTLP exporter's own encoder (``encode_spans``) into bodies of 512, POSTed as ``otlp``.
  native  the same spans as the ringtrace client's stream encoder packs them (SPAN events with the same args), sent
          on one TCP connection after HELLO/WELCOME, with a FLUSH at the end.

Timed from the first byte until the collector has stored all N (its /healthz ``stored_events``). spans/s = N / that;
collector CPU per span from its /proc/<pid>/stat (user + system) over the same interval. Rounds of the two ways are
interleaved; medians are reported, with the ratio otlp/native. The collector runs with ``--capacity 2GiB``.

``--lanes-only`` runs only the two ``lanes`` ways. ``--compare PYTHON`` runs them also into a second collector started
by that interpreter (another install: its code before a change, say), rounds interleaved with this one's.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import socket
import sys
import time
from contextlib import ExitStack
from typing import Any

from _common import Collector, collector, interleave, median, recorder, table
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


def spans(n: int, base_ns: int, per_trace: int = 8) -> list[tuple[str, int, int, bytes, bytes, int]]:
    """``(name, start, end, trace id, span id, i)`` of N spans, 1 µs apart, ``per_trace`` a trace."""
    return [
        (
            "work",
            base_ns + 1000 * i,
            base_ns + 1000 * i + 500,
            (i // per_trace + 1).to_bytes(16, "big"),
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
    coll: Collector, address: tuple[str, int], n: int, on_thread: bool = True, sdk: bool = False, per_trace: int = 8
) -> tuple[float, float]:
    service = f"otlp-{next(_rounds)}"
    made = spans(n, time.time_ns(), per_trace)
    bodies = sdk_bodies(n, service) if sdk else otlp_bodies(made, service, on_thread)
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


def otlp_address(coll: Collector) -> tuple[str, int]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = [m for m in map(_OTLP.search, coll.log) if m]
        if found:
            return found[0].group(1), int(found[0].group(2))
        time.sleep(0.05)
    raise AssertionError("the collector did not report its OTLP listener")


def bench(n: int, rounds: int, per_trace: int = 1, lanes_only: bool = False, compare: str | None = None) -> int:
    args = ("--otlp-http", "127.0.0.1:0", "--capacity", "2GiB")
    with collector(*args) as coll, ExitStack() as stack:
        address = otlp_address(coll)
        ways: dict[str, Any] = {
            "lanes": lambda: otlp_round(coll, address, n, on_thread=False),
            "lanes n": lambda: otlp_round(coll, address, n, on_thread=False, per_trace=per_trace),
        }
        if not lanes_only:
            ways["otlp"] = lambda: otlp_round(coll, address, n)
            ways["sdk"] = lambda: otlp_round(coll, address, n, sdk=True)
            ways["native"] = lambda: native_round(coll, n)
        if compare is not None:
            other = stack.enter_context(collector(*args, python=compare))
            other_address = otlp_address(other)
            ways["lanes (compare)"] = lambda: otlp_round(other, other_address, n, on_thread=False)
            ways["lanes n (compare)"] = lambda: otlp_round(
                other, other_address, n, on_thread=False, per_trace=per_trace
            )
        results = interleave(ways, rounds)
    rate = {way: median([r[0] for r in values]) for way, values in results.items()}
    cpu = {way: median([r[1] for r in values]) for way, values in results.items()}
    names = {
        "otlp": "otlp (protobuf, 512 a request)",
        "lanes": "otlp, no thread: on trace lanes, 8 a trace",
        "lanes n": f"otlp, no thread: on trace lanes, {per_trace} a trace",
        "lanes (compare)": "compare: on trace lanes, 8 a trace",
        "lanes n (compare)": f"compare: on trace lanes, {per_trace} a trace",
        "sdk": "otlp, the SDK's exporter's bodies",
        "native": "native",
    }
    print(
        table(
            ["way", "spans/s", "collector CPU ns/span"],
            [[names[way], f"{rate[way]:,.0f}", f"{cpu[way]:,.0f}"] for way in names if way in results],
            title=f"{n:,} spans a round, {rounds} rounds, medians",
        )
    )
    print(f"collector CPU per span, {per_trace} a trace / 8 a trace: {cpu['lanes n'] / cpu['lanes']:.2f}x")
    if compare is not None:
        this_n, other_n = cpu["lanes n"], cpu["lanes n (compare)"]
        print(f"collector CPU per span, {per_trace} a trace, this / compare: {this_n / other_n:.2f}x")
        print(f"collector CPU per span, 8 a trace, this / compare: {cpu['lanes'] / cpu['lanes (compare)']:.2f}x")
    if not lanes_only:
        print(f"otlp / native spans/s: {rate['otlp'] / rate['native']:.3f}x (no target set: the figure is reported)")
        if cpu["native"]:  # (its CPU time counts in 10 ms ticks: a small quick run may read 0)
            print(f"collector CPU per span, otlp / native: {cpu['otlp'] / cpu['native']:.1f}x")
            print(f"collector CPU per span, sdk / native: {cpu['sdk'] / cpu['native']:.1f}x")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200_000, help="spans per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="N=20,000 and 1 round, a smoke test")
    parser.add_argument("--spans-per-trace", type=int, default=1, help="of the second lanes way (default %(default)s)")
    parser.add_argument("--lanes-only", action="store_true", help="run only the two lanes ways")
    parser.add_argument("--compare", metavar="PYTHON", help="also the lanes ways into this interpreter's collector")
    args = parser.parse_args()
    if args.spans_per_trace < 1:
        parser.error(f"--spans-per-trace must be at least 1, not {args.spans_per_trace}")
    print(f"recorder: {recorder()}")
    n, rounds = (20_000, 1) if args.quick else (args.n, args.rounds)
    return bench(n, rounds, args.spans_per_trace, args.lanes_only, args.compare)


if __name__ == "__main__":
    sys.exit(main())
