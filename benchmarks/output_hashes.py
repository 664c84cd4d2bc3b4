"""Hashes of every output the collector and the ``ringtrace`` command make of one fixed recording: run it on two
commits and diff, to hold a refactor to "every output byte stays the same".

    python benchmarks/output_hashes.py > hashes.json

It starts a real collector (``python -m ringtrace.collector``, OS-chosen ports, OTLP/HTTP on), and feeds it, one
source after another so that the store's layout does not depend on timing:

- native streams written with fixed pids, hosts, instance ids, clock pairings and timestamps (``RECORDING``): spans,
  instants with arguments of every type, typed events, messages of several priorities, markers, sources, counters,
  async slices on a task lane, trace context (spans of one trace across processes, so flows), two connections of one
  process, and a process whose pid another host's process has too;
- OTLP/HTTP requests (protobuf) of spans (on threads and on the lanes of their traces, with events, links and
  statuses), log records and metrics, with fixed ids and times;
- the foreign recordings in ``tests/data/foreign`` and a Chrome JSON file, through ``ringtrace replay``.

Then it fetches ``/snapshot`` in each format and ``/timeline`` with each filter ``http/query.py`` takes, ``/sources``,
``/``, the web view's files, error answers, ``ringtrace snapshot``/``dump``/``convert`` outputs, and last the
destructive ``/pop`` and ``/clear``; it prints one JSON object, case name -> sha256 of the body, sorted by name.

What would differ from run to run is normalised where it is fetched, each with the reason. The collector's clock
origin (midnight UTC of the day before it started, the base of Chrome JSON's ``ts``) would carry the day of the run
into every absolute time: the collector's wall clock is moved by whole days (``SHIFTED_CLOCK``) so that it is
2026-01-01 on any day, and the recording is placed a fixed time after it.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import Collector, collector

# -- ringtrace internals: every import of them is here ----------------------------------------------------------------
# The wire protocol moves from ringtrace.client.wire to ringtrace.wire; either is taken.
try:
    from ringtrace.wire.arg_values import normalise_values
    from ringtrace.wire.frames import Flush, FlushAck, encode, preamble
    from ringtrace.wire.handshake_frames import Hello  # type: ignore[import-not-found]
    from ringtrace.wire.model import (
        ASYNC_BEGIN,
        ASYNC_END,
        ASYNC_TRACK,
        COUNTER,
        COUNTER_TRACK,
        INSTANT,
        MARKER,
        MARKER_END,
        MARKER_START,
        SOURCE_CLOSE,
        SOURCE_OPEN,
        SOURCE_TRACK,
        SPAN,
        THREAD_TRACK,
        KindRegistry,
        TrackInfo,
    )
    from ringtrace.wire.reader import CLOSED, NEED_DATA, FrameReader  # type: ignore[import-not-found]
except ImportError:
    from ringtrace.client.wire.frames import Flush, FlushAck, Hello, encode, preamble
    from ringtrace.client.wire.model import (
        ASYNC_BEGIN,
        ASYNC_END,
        ASYNC_TRACK,
        COUNTER,
        COUNTER_TRACK,
        INSTANT,
        MARKER,
        MARKER_END,
        MARKER_START,
        SOURCE_CLOSE,
        SOURCE_OPEN,
        SOURCE_TRACK,
        SPAN,
        THREAD_TRACK,
        KindRegistry,
        TrackInfo,
        normalise_values,
    )
    from ringtrace.client.wire.reader import CLOSED, NEED_DATA, FrameReader
# Events with fixed timestamps cannot come through a Timeline (it reads the clock): the stream encoder packs them.
from ringtrace.wire.stream_encoder import StreamEncoder

# ---------------------------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
FOREIGN = ROOT / "tests" / "data" / "foreign"
FOREIGN_FILES = (
    "hawktracer-hello-world.htdump",
    "hawktracer-custom-event-type.htdump",
    "hawktracer-nodejs-test.htdump",
    "timelogger-sample.bin",
    "hawktracer-hello-world.converter.json",
)
MS = 1_000_000
DAY_NS = 86_400 * 10**9
#: The clock origin the collector gets (2026-01-01T00:00:00Z): see ``SHIFTED_CLOCK``.
ORIGIN_NS = 1_767_225_600 * 10**9
#: The modification time given to the foreign files converted (2026-01-02T00:00:00Z).
FILES_MODIFIED_NS = 1_767_312_000 * 10**9
#: Where the recording starts: this long after the collector's clock origin (see the module docstring).
START_AFTER_ORIGIN_NS = 30 * 3600 * 10**9
#: Trace ids (32 hex digits).
TRACE_A = "0af7651916cd43dd8448eb211c80319c"
TRACE_B = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_OTLP = bytes(range(1, 17))


# -- the native recording ---------------------------------------------------------------------------------------------


class Stream:
    """One native connection's events, packed by the stream encoder with the timestamps given (monotonic ns of the
    process, whose clock pairing HELLO carries)."""

    def __init__(self, hello: Hello, registry: KindRegistry) -> None:
        self.hello = hello
        self.encoder = StreamEncoder(max_events_per_frame=16, registry=registry)
        self.frames: list[bytes] = list(self.encoder.prefix())

    def add(self, track: TrackInfo, records: list[Any]) -> None:
        batch = self.encoder.encode(track, records)
        self.frames += [*batch.control, *(frame for frame, _ in batch.events)]

    def end(self, track: TrackInfo) -> None:
        frame = self.encoder.retire(track)
        if frame is not None:
            self.frames.append(frame)

    def file_bytes(self) -> bytes:
        """The stream as a trace file holds it."""
        return preamble() + encode(self.hello) + b"".join(self.frames)


def _hello(pid: int, host: str, name: str, instance: str, boot: str, mono_ns: int, wall_ns: int) -> Hello:
    # ``recorded``: the collector takes the clock pairing as given, not checked against its own clock.
    return Hello(pid, host, name, instance, boot, mono_ns, wall_ns, "hashes", recorded=True)


def _kinds() -> tuple[KindRegistry, dict[str, int]]:
    """A registry of the built-in kinds, a typed event's and messages' (the client registers them as they are
    defined; here, in a fixed order)."""
    registry = KindRegistry()
    ids = {
        "FileRead": registry.register(
            "FileRead", "instant", (("id", "u64"), ("path", "str"), ("size", "u32"), ("ok", "bool")), normalise_values
        ).id,
    }
    messages = (
        ("db.query", "info", "query $sql took $ms ms"),
        ("db.query", "debug", "plan for $sql"),
        ("http", "warning", "slow request $path"),
        ("http", "error", "request $path failed: $why"),
        ("auth", "fatal", "key store unreadable"),
        ("cache", "trace+", "lookup $key"),
    )
    for category, priority, text in messages:
        kind = registry.register(category, "message", _fields_of(text), normalise_values, text, priority)
        ids[f"{category}/{priority}"] = kind.id
    return registry, ids


def _fields_of(text: str) -> tuple[tuple[str, str], ...]:
    return tuple((name, "any") for name in dict.fromkeys(re.findall(r"\$(\w+)", text)))


def recording(origin_ns: int) -> list[Stream]:
    """The native streams, in the order they are sent."""
    base_wall = origin_ns + START_AFTER_ORIGIN_NS
    registry, kinds = _kinds()
    streams = []

    # Process "web" (host alpha): two threads, a task lane, a counter, markers, messages, trace A's root.
    mono = 5_000 * 10**9
    web = Stream(_hello(1001, "alpha", "web", "web-instance", "boot-alpha", mono, base_wall), registry)
    main = TrackInfo(1, THREAD_TRACK, "MainThread", 1001)
    worker = TrackInfo(2, THREAD_TRACK, "worker-1", 1007)
    lane = TrackInfo(3, ASYNC_TRACK, "task fetch", 0, 1)
    depth = TrackInfo(4, COUNTER_TRACK, "queue depth")
    t = mono + 1 * MS
    root = {"trace_id": TRACE_A, "span_id": "00f067aa0ba902b7", "kind": "server", "route": "/orders"}
    call = {"trace_id": TRACE_A, "span_id": "1f067aa0ba902b70", "parent_span_id": "00f067aa0ba902b7"}
    web.add(
        main,
        [
            *(SPAN, "handle /orders", t, t + 40 * MS, root),
            *(SPAN, "load user", t + 1 * MS, t + 5 * MS, {"trace_id": TRACE_A, "user": 42}),
            *(SPAN, "parse", t + 2 * MS, t + 3 * MS, None),
            *(SPAN, "call db", t + 6 * MS, t + 30 * MS, {**call, "kind": "client"}),
            *(INSTANT, "cache-miss", t + 7 * MS, t + 7 * MS, {"key": "user:42", "hit": False, "ratio": 0.25}),
            *(INSTANT, "args", t + 8 * MS, t + 8 * MS, _all_kinds_of_args()),
            *(kinds["FileRead"], "FileRead", t + 9 * MS, t + 9 * MS, [7, "/etc/orders.conf", 512, True]),
            *(kinds["http/warning"], "http", t + 10 * MS, t + 10 * MS, ["/orders"]),
            *(kinds["http/error"], "http", t + 31 * MS, t + 31 * MS, ["/orders", "timeout"]),
            *(kinds["cache/trace+"], "cache", t + 32 * MS, t + 32 * MS, ["user:42"]),
            *(MARKER_START, "GC", t + 11 * MS, t + 11 * MS, {"generation": 2}),
            *(MARKER_END, "GC", t + 13 * MS, t + 13 * MS, None),
            *(MARKER, "checkpoint", t + 14 * MS, t + 14 * MS, {"n": 1}),
            *(MARKER_START, "still open", t + 35 * MS, t + 35 * MS, None),
        ],
    )
    jobs: list[Any] = []
    for i in range(12):
        jobs += (SPAN, f"job {i}", t + i * 3 * MS, t + i * 3 * MS + 2 * MS, {"i": i})
    web.add(worker, jobs)
    web.add(
        lane,
        [
            *(ASYNC_BEGIN, "fetch", t + 3 * MS, t + 3 * MS, {"id": 9, "url": "http://x/y"}),
            *(ASYNC_END, "fetch", t + 25 * MS, t + 25 * MS, {"id": 9}),
            *(ASYNC_BEGIN, "fetch", t + 26 * MS, t + 26 * MS, {"id": "s-10"}),
        ],
    )
    web.add(
        depth,
        [x for i in range(8) for x in (COUNTER, "queue depth", t + i * 5 * MS, t + i * 5 * MS, {"value": i * 1.5})],
    )
    web.end(worker)
    streams.append(web)

    # A second connection of "web" (same instance): one more thread.
    web2 = Stream(_hello(1001, "alpha", "web", "web-instance", "boot-alpha", mono, base_wall), registry)
    late = TrackInfo(5, THREAD_TRACK, "late-thread", 1011)
    web2.add(
        late,
        [
            *(SPAN, "late work", t + 50 * MS, t + 55 * MS, {"trace_id": TRACE_B}),
            *(INSTANT, "late", t + 56 * MS, t + 56 * MS, None),
        ],
    )
    streams.append(web2)

    # Process "db" (host alpha, same boot, another monotonic origin): trace A's server span, sources, messages.
    mono_db = 9_000 * 10**9
    db = Stream(_hello(1002, "alpha", "db", "db-instance", "boot-alpha", mono_db, base_wall + 2 * MS), registry)
    db_main = TrackInfo(1, THREAD_TRACK, "MainThread", 1002)
    disk = TrackInfo(2, SOURCE_TRACK, "disk")
    d = mono_db + 7 * MS
    served = {"trace_id": TRACE_A, "span_id": "2f067aa0ba902b71", "parent_span_id": "1f067aa0ba902b70"}
    db.add(
        db_main,
        [
            *(SPAN, "SELECT orders", d, d + 20 * MS, {**served, "kind": "server"}),
            *(SPAN, "scan", d + 1 * MS, d + 15 * MS, None),
            *(kinds["db.query/info"], "db.query", d + 16 * MS, d + 16 * MS, ["SELECT *", 15]),
            *(kinds["db.query/debug"], "db.query", d + 17 * MS, d + 17 * MS, ["SELECT *"]),
            *(kinds["auth/fatal"], "auth", d + 18 * MS, d + 18 * MS, []),
        ],
    )
    db.add(
        disk,
        [
            *(SOURCE_OPEN, "disk", d + 2 * MS, d + 2 * MS, None),
            *(SOURCE_OPEN, "disk", d + 3 * MS, d + 3 * MS, None),
            *(SOURCE_CLOSE, "disk", d + 8 * MS, d + 8 * MS, None),
            *(SOURCE_CLOSE, "disk", d + 12 * MS, d + 12 * MS, None),
            *(SOURCE_OPEN, "disk", d + 14 * MS, d + 14 * MS, None),
        ],
    )
    streams.append(db)

    # Process "batch" on host beta with web's pid (shown under a pid of its own), another boot, a long run.
    mono_b = 1_000 * 10**9
    batch = Stream(
        _hello(1001, "beta", "batch", "batch-instance", "boot-beta", mono_b, base_wall - 5 * 1000 * MS), registry
    )
    b_main = TrackInfo(1, THREAD_TRACK, "MainThread", 1001)
    b = mono_b + 5_000 * MS
    records: list[Any] = []
    for i in range(40):
        start = b + i * 10 * MS
        records += (SPAN, f"step {i % 4}", start, start + 8 * MS, {"i": i, "trace_id": TRACE_B})
        records += (kinds["db.query/info"], "db.query", start + 9 * MS, start + 9 * MS, [f"q{i}", i])
    batch.add(b_main, records)
    streams.append(batch)
    return streams


def _all_kinds_of_args() -> dict[str, Any]:
    return {
        "int": -7,
        "big": 2**64 - 1,
        "wider": 2**70,
        "float": 3.25,
        "nan": float("nan"),
        "str": 'héllo \u2603 "quoted"',
        "bytes": b"\x00\xff",
        "bool": True,
        "none": None,
        "list": [1, "two", [3.0]],
        "map": {"a": {"b": [None]}},
        "tuple": (1, 2),
    }


def send_stream(address: str, stream: Stream) -> None:
    """Send one stream on a connection of its own, wait for the collector to acknowledge it, close."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        reader = FrameReader("collector")
        sock.sendall(preamble() + encode(stream.hello))
        _next_frame(sock, reader)  # WELCOME
        sock.sendall(b"".join(stream.frames) + encode(Flush(1)))
        while not isinstance(_next_frame(sock, reader), FlushAck):
            pass


def _next_frame(sock: socket.socket, reader: Any) -> Any:
    while True:
        frame = reader.next_frame()
        if frame is CLOSED:
            raise ConnectionError("the collector closed the connection")
        if frame is not NEED_DATA:
            return frame
        reader.receive_data(sock.recv(65536))


# -- OTLP -------------------------------------------------------------------------------------------------------------


def otlp_bodies(base_wall: int) -> dict[str, bytes]:
    """Protobuf bodies of OTLP/HTTP requests, by path: spans, logs, metrics, with fixed ids and times."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
    from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics
    from opentelemetry.proto.metrics.v1.metrics_pb2 import Sum as MetricSum
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

    def attributes(**values: Any) -> list[KeyValue]:
        out = []
        for key, value in values.items():
            if isinstance(value, bool):
                any_value = AnyValue(bool_value=value)
            elif isinstance(value, int):
                any_value = AnyValue(int_value=value)
            elif isinstance(value, float):
                any_value = AnyValue(double_value=value)
            else:
                any_value = AnyValue(string_value=value)
            out.append(KeyValue(key=key.replace("_", "."), value=any_value))
        return out

    resource = Resource(attributes=attributes(service_name="otel-svc", host_name="gamma", process_pid=3003))
    t = base_wall + 100 * MS
    trace_a = bytes.fromhex(TRACE_A)
    spans = [
        Span(
            trace_id=TRACE_OTLP,
            span_id=bytes([1] * 8),
            name="GET /items",
            kind=Span.SPAN_KIND_SERVER,
            start_time_unix_nano=t,
            end_time_unix_nano=t + 30 * MS,
            attributes=attributes(http_method="GET", thread_id=77, thread_name="http-77"),
            events=[Span.Event(name="parsed", time_unix_nano=t + 1 * MS, attributes=attributes(bytes=120))],
        ),
        Span(
            trace_id=TRACE_OTLP,
            span_id=bytes([2] * 8),
            parent_span_id=bytes([1] * 8),
            name="load items",
            kind=Span.SPAN_KIND_CLIENT,
            start_time_unix_nano=t + 2 * MS,
            end_time_unix_nano=t + 20 * MS,
            status=Status(code=Status.STATUS_CODE_ERROR, message="partial"),
            links=[Span.Link(trace_id=trace_a, span_id=bytes.fromhex("00f067aa0ba902b7"))],
        ),
        Span(
            trace_id=TRACE_OTLP,
            span_id=bytes([3] * 8),
            parent_span_id=bytes([1] * 8),
            name="render",
            start_time_unix_nano=t + 4 * MS,
            end_time_unix_nano=t + 25 * MS,
            status=Status(code=Status.STATUS_CODE_OK),
        ),
        Span(
            trace_id=trace_a,
            span_id=bytes([4] * 8),
            parent_span_id=bytes.fromhex("2f067aa0ba902b71"),
            name="cache get",
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=t + 5 * MS,
            end_time_unix_nano=t + 6 * MS,
        ),
    ]
    scope = InstrumentationScope(name="hashes.scope", version="1.0")
    traces = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(scope=scope, spans=spans)])]
    )
    records = [
        LogRecord(
            time_unix_nano=t + i * MS,
            severity_number=severity,
            severity_text=text,
            body=AnyValue(string_value=f"log line {i}"),
            attributes=attributes(n=i),
            trace_id=TRACE_OTLP if i % 2 else b"",
            span_id=bytes([1] * 8) if i % 2 else b"",
        )
        for i, (severity, text) in enumerate(((9, "INFO"), (13, "WARN"), (17, "ERROR"), (5, "DEBUG"), (1, "TRACE")))
    ]
    logs = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(resource=resource, scope_logs=[ScopeLogs(scope=scope, log_records=records)])]
    )
    points = [NumberDataPoint(time_unix_nano=t + i * 2 * MS, as_double=i * 0.5) for i in range(5)]
    counts = [NumberDataPoint(time_unix_nano=t + i * 2 * MS, as_int=i * 10) for i in range(5)]
    metrics = ExportMetricsServiceRequest(
        resource_metrics=[
            ResourceMetrics(
                resource=resource,
                scope_metrics=[
                    ScopeMetrics(
                        scope=scope,
                        metrics=[
                            Metric(name="load", gauge=Gauge(data_points=points)),
                            Metric(name="requests", sum=MetricSum(data_points=counts, is_monotonic=True)),
                        ],
                    )
                ],
            )
        ]
    )
    return {
        "/v1/traces": traces.SerializeToString(),
        "/v1/logs": logs.SerializeToString(),
        "/v1/metrics": metrics.SerializeToString(),
    }


def chrome_json_file(base_wall: int) -> bytes:
    """A small Chrome trace JSON file to replay and convert: complete, begin/end, instant, counter, async, metadata."""
    ts = (base_wall + 200 * MS) // 1000
    events = [
        {"name": "process_name", "ph": "M", "pid": 7, "args": {"name": "chrome-app"}},
        {"name": "thread_name", "ph": "M", "pid": 7, "tid": 70, "args": {"name": "CrRendererMain"}},
        {"name": "layout", "ph": "X", "pid": 7, "tid": 70, "ts": ts, "dur": 1500, "args": {"nodes": 12}},
        {"name": "paint", "ph": "B", "pid": 7, "tid": 70, "ts": ts + 2000},
        {"name": "paint", "ph": "E", "pid": 7, "tid": 70, "ts": ts + 2600},
        {"name": "vsync", "ph": "i", "pid": 7, "tid": 70, "ts": ts + 3000, "s": "t"},
        {"name": "heap", "ph": "C", "pid": 7, "tid": 70, "ts": ts + 3100, "args": {"used": 1024}},
        {"name": "load", "ph": "b", "cat": "net", "id": "0x1", "pid": 7, "tid": 70, "ts": ts + 100},
        {"name": "load", "ph": "e", "cat": "net", "id": "0x1", "pid": 7, "tid": 70, "ts": ts + 2900},
    ]
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}).encode()


# -- what is fetched --------------------------------------------------------------------------------------------------


def filters(base_wall: int) -> dict[str, list[tuple[str, str]]]:
    """Each filter ``/snapshot`` and ``/timeline`` take, alone and combined, by case name."""
    since = base_wall + 8 * MS
    until = base_wall + 30 * MS
    rfc = datetime.fromtimestamp(since // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{since % 10**9:09d}Z"
    return {
        "all": [],
        "since": [("since", str(since))],
        "until": [("until", str(until))],
        "window": [("since", str(since)), ("until", str(until))],
        "since_rfc3339": [("since", rfc)],
        "pid": [("pid", "1001")],
        "pids": [("pid", "1001,1002,3003")],
        "process": [("process", "web")],
        "process_glob": [("process", "[bd]*")],
        "host": [("host", "beta")],
        "host_glob": [("host", "al*")],
        "track": [("track", "MainThread")],
        "track_glob": [("track", "*e*")],
        "category_span": [("category", "span")],
        "category_instant": [("category", "instant")],
        "category_counter": [("category", "counter")],
        "category_marker": [("category", "marker")],
        "category_source": [("category", "source")],
        "category_async": [("category", "async")],
        "category_typed": [("category", "FileRead")],
        "category_message": [("category", "db.query")],
        "name": [("name", "call db")],
        "name_glob": [("name", "step [12]*")],
        "name_message": [("name", "query*")],
        "min_priority_warning": [("min_priority", "WARNING")],
        "min_priority_trace": [("min_priority", "trace")],
        "messages_only": [("messages_only", "true")],
        "messages_only_off": [("messages_only", "off")],
        "trace_a": [("trace_id", TRACE_A)],
        "trace_b": [("trace_id", TRACE_B.upper())],
        "trace_otlp": [("trace_id", TRACE_OTLP.hex())],
        "limit_1": [("limit", "1")],
        "limit_25": [("limit", "25")],
        "combined": [("process", "web"), ("track", "MainThread"), ("since", str(since)), ("limit", "5")],
        "combined_messages": [("host", "alpha"), ("min_priority", "info"), ("messages_only", "1")],
        "nothing": [("process", "no-such-process")],
    }


#: Queries that are refused: their 400 answers' texts are outputs too.
BAD_QUERIES = {
    "unknown": "/snapshot?colour=red",
    "repeated": "/snapshot?pid=1&pid=2",
    "bad_time": "/snapshot?since=yesterday",
    "since_after_until": "/snapshot?since=20&until=10",
    "bad_format": "/snapshot?format=svg",
    "bad_trace_id": "/snapshot?trace_id=abc",
    "bad_limit": "/snapshot?limit=0",
    "bad_glob": "/snapshot?process=%5Bab",
    "bad_priority": "/snapshot?min_priority=loud",
    "timeline_format": "/timeline?format=chrome",
    "sources_unknown": "/sources?track=x",
    "healthz_param": "/healthz?x=1",
}


class Hashes:
    """Case name -> sha256 of its body, and each HTTP answer's status and headers that describe the body."""

    def __init__(self, save: Path | None = None) -> None:
        self.cases: dict[str, str] = {}
        self.headers: dict[str, list[object]] = {}
        self.save = save

    def add(self, name: str, body: bytes) -> None:
        if name in self.cases:
            raise ValueError(f"case {name!r} twice")
        self.cases[name] = hashlib.sha256(body).hexdigest()
        if self.save is not None:
            (self.save / name).write_bytes(body)


class Http:
    def __init__(self, base: str, hashes: Hashes) -> None:
        self.base = base
        self.hashes = hashes

    def request(
        self, path: str, data: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any, bytes]:
        request = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.headers, exc.read()

    def case(
        self,
        name: str,
        path: str,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        normalise: Callable[[bytes], bytes] | None = None,
    ) -> bytes:
        status, answer_headers, body = self.request(path, data, headers)
        encoding = answer_headers.get("Content-Encoding")
        if encoding == "gzip":
            # The compressed bytes depend on where the writer's pieces fall (each is what a time budget made): the
            # content is compared, and the header kept below.
            body = gzip.decompress(body)
        self.hashes.add(name, normalise(body) if normalise is not None else body)
        self.hashes.headers[name] = [status, answer_headers.get("Content-Type"), encoding]
        return body


_SNAPSHOT_TIME = re.compile(rb'("snapshot_wall_ns":)(\d+)')
_SNAPSHOT_TIME_ATTRIBUTE = re.compile(rb"(ringtrace\.snapshot_wall_ns.)([\x80-\xff]*[\x00-\x7f])", re.DOTALL)
#: An OTLP process's HELLO (msgpack): its clock pairing is the collector's wall clock when the resource was first seen,
#: as both ``monotonic_ns`` and ``wall_ns`` (a native process's two readings differ).
_OTLP_PAIRING = re.compile(rb"(\xacmonotonic_ns\xcf)(.{8})(\xa7wall_ns\xcf)\2", re.DOTALL)


def normalised_snapshot(body: bytes) -> bytes:
    """A snapshot less when it was taken (``snapshot_wall_ns``: in Chrome JSON's ``otherData``, and in a Perfetto
    trace's report and its own attribute) and the pairing of the OTLP process's HELLO (a snapshot file): both read
    the collector's clock. Each is overwritten in place, its length kept."""
    body = _SNAPSHOT_TIME.sub(lambda m: m[1] + b"1" + b"0" * (len(m[2]) - 1), body)  # (still a JSON number)
    body = _SNAPSHOT_TIME_ATTRIBUTE.sub(lambda m: m[1] + b"\x80" * (len(m[2]) - 1) + b"\x00", body)
    return _OTLP_PAIRING.sub(lambda m: m[1] + bytes(8) + m[3] + bytes(8), body)


_CLOCK_READ = re.compile(rb'("(?:last_seen_wall_ns|events_per_s|bytes_per_s)": ?)(null|[-+.\deE]+)')


def normalised_sources(body: bytes) -> bytes:
    """``/sources`` less what the clock decides: when a process was last heard of (the time its connection closed,
    or its OTLP request came) and its receive rates (sampled over the last seconds of the collector's run)."""
    return _CLOCK_READ.sub(lambda m: m[1] + b'"normalised"', body)


# -- the run ----------------------------------------------------------------------------------------------------------


#: The collector's wall clock, moved by whole days (``HASHES_CLOCK_SHIFT_NS``) so that its clock origin (midnight UTC
#: of the day before it started: ``otherData.clock_origin_wall_ns``, the base of Chrome JSON's ``ts``) is the same on
#: every day the script runs, and with it every absolute time in its outputs. Loaded at the collector's start, before
#: any of ringtrace is imported (``from time import time_ns`` would take it too); the collector reads the wall clock
#: nowhere else.
SHIFTED_CLOCK = """
import os
import time

_shift_ns = int(os.environ.get("HASHES_CLOCK_SHIFT_NS", "0"))
_time_ns = time.time_ns
_time = time.time
time.time_ns = lambda: _time_ns() + _shift_ns
time.time = lambda: _time() + _shift_ns / 1e9
"""


def run(work: Path, save: Path | None = None) -> dict[str, str]:
    hashes = Hashes(save)
    clock = work / "clock"
    clock.mkdir()
    (clock / "sitecustomize.py").write_text(SHIFTED_CLOCK)
    # The day after the origin wanted, at this time of day.
    shift_ns = ORIGIN_NS + DAY_NS - time.time_ns() // DAY_NS * DAY_NS
    paths = os.pathsep.join(filter(None, [str(clock), os.environ.get("PYTHONPATH")]))
    environment = {"PYTHONPATH": paths, "HASHES_CLOCK_SHIFT_NS": str(shift_ns)}
    with collector("--otlp-http", "127.0.0.1:0", "--capacity", "64MiB", environment=environment) as running:
        otlp = _otlp_address(running)
        http = Http(f"http://{running.http}", hashes)
        origin_ns = json.loads(http.request("/snapshot")[2])["otherData"]["clock_origin_wall_ns"]
        if origin_ns != ORIGIN_NS:  # (midnight UTC came between reading the clock here and in the collector)
            raise RuntimeError(f"the collector's clock origin is {origin_ns}, not {ORIGIN_NS}: run it again")
        base_wall = origin_ns + START_AFTER_ORIGIN_NS
        streams = recording(origin_ns)
        for stream in streams:
            send_stream(running.tcp, stream)
        for path, body in otlp_bodies(base_wall).items():
            status, _, answer = Http(f"http://{otlp}", Hashes()).request(
                path, body, {"Content-Type": "application/x-protobuf"}
            )
            if status != 200:
                raise RuntimeError(f"OTLP {path}: {status} {answer!r}")
            hashes.add(f"otlp{path.replace('/', '_')}_answer", answer)
        # Foreign recordings and a Chrome JSON file, replayed by the command line (relative names: a file's name is
        # part of what a conversion writes).
        replayed = work / "replay"
        _write_files(replayed, streams, base_wall, base_wall + 1000 * MS)
        for name in (*FOREIGN_FILES, "app.json"):
            said = _ringtrace(replayed, "replay", name, "--to", running.tcp)
            hashes.add(f"cli_replay_{name}", said.replace(running.tcp.encode(), b"HOST:PORT"))  # (an OS-chosen port)
        _wait_idle(running, http)

        _snapshots(http, base_wall)
        _endpoints(http)
        _command_line(work, running, streams, base_wall, hashes)
        _destructive(http)
    hashes.add("http_headers", json.dumps(hashes.headers, sort_keys=True).encode())
    return dict(sorted(hashes.cases.items()))


def _snapshots(http: Http, base_wall: int) -> None:
    for filter_name, params in filters(base_wall).items():
        for fmt in ("chrome", "native", "perfetto"):
            query = urllib.parse.urlencode([*params, ("format", fmt)])
            http.case(f"snapshot_{fmt}_{filter_name}", f"/snapshot?{query}", normalise=normalised_snapshot)
        http.case(f"timeline_{filter_name}", f"/timeline?{urllib.parse.urlencode(params)}")
    for fmt in ("chrome", "native", "perfetto"):  # compressed answers: their content, and their headers
        gzip_accepted = {"Accept-Encoding": "gzip"}
        http.case(
            f"snapshot_{fmt}_all_gzip", f"/snapshot?format={fmt}", headers=gzip_accepted, normalise=normalised_snapshot
        )
    http.case("timeline_all_gzip", "/timeline", headers={"Accept-Encoding": "gzip"})
    http.case("snapshot_default_format", "/snapshot", normalise=normalised_snapshot)
    http.case("snapshot_format_any_case", "/snapshot?format=Chrome", normalise=normalised_snapshot)


def _endpoints(http: Http) -> None:
    for name, query in {"all": "", "pid": "?pid=1001", "process": "?process=db", "host": "?host=gamma"}.items():
        http.case(f"sources_{name}", f"/sources{query}", normalise=normalised_sources)
    http.case("index_json", "/")
    page = http.case("index_html", "/", headers={"Accept": "text/html"})
    # The web view's files: those the page names, and those they import, found as they are fetched.
    found = re.findall(rb"/?ui/([\w.-]+)", page)
    done: set[bytes] = set()
    while found:
        file = found.pop()
        if file not in done:
            done.add(file)
            body = http.case(f"ui_{file.decode()}", f"/ui/{file.decode()}")
            found += re.findall(rb"""from ["']\./([\w.-]+)["']""", body)
    for name, path in BAD_QUERIES.items():
        http.case(f"error_{name}", path)
    http.case("error_not_found", "/no-such-endpoint")


def _write_files(directory: Path, streams: list[Stream], base_wall: int, modified_ns: int) -> None:
    """The foreign recordings, a Chrome JSON file and the native streams as trace files, in ``directory``.

    A foreign recording's clock is placed by the file's modification time (its last event's wall clock), which is
    set, so that it is not the time of the copy."""
    directory.mkdir()
    (directory / "app.json").write_bytes(chrome_json_file(base_wall))
    for name in FOREIGN_FILES:
        (directory / name).write_bytes((FOREIGN / name).read_bytes())
    for name in (*FOREIGN_FILES, "app.json"):
        os.utime(directory / name, ns=(modified_ns, modified_ns))
    for i, stream in enumerate(streams):
        (directory / f"native-{i}.rttrace").write_bytes(stream.file_bytes())


def _command_line(work: Path, running: Collector, streams: list[Stream], base_wall: int, hashes: Hashes) -> None:
    url = f"http://{running.http}"
    chosen = {name: params for name, params in filters(base_wall).items() if name in _CLI_FILTERS}
    for filter_name, params in chosen.items():
        flags = [f"--{key.replace('_', '-')}={value}" for key, value in params if key != "messages_only"]
        flags += ["--messages-only"] * any(key == "messages_only" for key, _ in params)
        for fmt in ("chrome", "native", "perfetto"):
            out = work / f"snapshot-{fmt}-{filter_name}"
            _ringtrace(work, "snapshot", url, "-o", out.name, f"--format={fmt}", *flags)
            hashes.add(f"cli_snapshot_{fmt}_{filter_name}", normalised_snapshot(out.read_bytes()))
        hashes.add(f"cli_dump_url_{filter_name}", _ringtrace(work, "dump", url, *flags))
        hashes.add(f"cli_dump_url_newest_first_{filter_name}", _ringtrace(work, "dump", url, "--newest-first", *flags))
    for name, flags in {"all": [], "host": ["--host=alpha"], "pid": ["--pid=1001"]}.items():
        said = _ringtrace(work, "sources", url, "--json", *flags)
        hashes.add(f"cli_sources_json_{name}", normalised_sources(said))
    # Files converted by the command line: their wall clocks, from a fixed modification time, are the same every day.
    work = work / "convert"
    _write_files(work, streams, base_wall, FILES_MODIFIED_NS)
    files = [*FOREIGN_FILES, "app.json", *sorted(p.name for p in work.glob("native-*.rttrace"))]
    for name in files:
        for fmt in ("chrome", "native", "perfetto"):
            _ringtrace(work, "convert", name, "-o", "converted", f"--format={fmt}")
            hashes.add(f"cli_convert_{fmt}_{name}", (work / "converted").read_bytes())
        hashes.add(f"cli_dump_file_{name}", _ringtrace(work, "dump", name))
    _ringtrace(work, "convert", "native-0.rttrace", "-o", "converted", "--track=MainThread", "--category=span")
    hashes.add("cli_convert_chrome_filtered_native-0.rttrace", (work / "converted").read_bytes())


_CLI_FILTERS = ("all", "window", "process_glob", "trace_a", "combined_messages", "limit_25")


def _destructive(http: Http) -> None:
    """Last: what removes what is stored (each answer, then what is left)."""
    snapshot = normalised_snapshot
    http.case("pop_process_web", "/pop?process=web", data=b"", normalise=snapshot)
    http.case("after_pop_snapshot_chrome", "/snapshot", normalise=snapshot)
    http.case("pop_again_process_web", "/pop?process=web", data=b"", normalise=snapshot)
    http.case("clear_host_beta", "/clear?host=beta", data=b"")
    http.case("after_clear_snapshot_chrome", "/snapshot", normalise=snapshot)
    http.case("after_clear_sources", "/sources", normalise=normalised_sources)
    http.case("clear_all", "/clear", data=b"")
    http.case("after_clear_all_snapshot_native", "/snapshot?format=native", normalise=snapshot)


def _ringtrace(work: Path, *args: str) -> bytes:
    """The ``ringtrace`` command of this checkout, run in ``work``; its standard output."""
    command = [sys.executable, "-c", "import sys; from ringtrace.collector.command.main import main; sys.exit(main())"]
    done = subprocess.run([*command, *args], cwd=work, capture_output=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ringtrace {' '.join(args)}: exit {done.returncode}: {done.stderr.decode()}")
    return done.stdout


def _otlp_address(running: Collector) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for line in list(running.log):
            found = re.search(r"otlp listening on https?://([\d.]+:\d+)", line)
            if found:
                return found.group(1)
        time.sleep(0.05)
    raise RuntimeError("the collector did not say where OTLP listens:\n" + "\n".join(running.log))


def _wait_idle(running: Collector, http: Http) -> None:
    """Until no native connection is open (the replays' and ours closed): ``/sources`` says a connected process
    is live."""
    deadline = time.monotonic() + 30
    while json.loads(http.request("/healthz")[2])["connections"]:
        if time.monotonic() > deadline:
            raise RuntimeError("connections still open after 30 s")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--save", type=Path, metavar="DIR", help="also write each case's body to DIR/<case> (to diff two runs' bodies)"
    )
    args = parser.parse_args(argv)
    # Stopped (SIGTERM), it still stops its collector (the ``finally`` of ``collector()``).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.save is not None:
        args.save.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as directory:
        result = run(Path(directory), args.save)
    print(json.dumps(result, indent=1))
    print(f"{len(result)} cases in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
