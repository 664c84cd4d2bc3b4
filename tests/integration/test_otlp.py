"""OTLP/HTTP ingest (``--otlp-http``): the real OpenTelemetry SDK and its OTLP/HTTP exporter send spans to a real
collector, and bodies built by hand (protobuf, OTLP/JSON, gzip) reach the same receiver over real sockets."""

from __future__ import annotations

import gzip
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess, events, metadata, run_script
from google.protobuf import json_format
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
    Summary,
    SummaryDataPoint,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import set_span_in_context
from perfetto_model import PerfettoTrace
from ringtrace.collector.ingest.otlp.request_pieces import PIECE_BYTES
from waiting import wait_for

pytestmark = pytest.mark.integration

_OTLP_LISTEN = re.compile(r"otlp listening on https?://([\d.]+):(\d+)")
TRACE_ID = bytes(range(1, 17))


class OtlpCollector(CollectorProcess):
    """The collector with its OTLP/HTTP receiver on a port of its own."""

    def __init__(self, *extra_args: str, **options: Any) -> None:
        super().__init__("--otlp-http", "127.0.0.1:0", *extra_args, **options)
        line = self.wait_for_log(lambda line: "otlp listening" in line)
        match = _OTLP_LISTEN.search(line)
        assert match is not None
        self.otlp_base = f"http://{match.group(1)}:{match.group(2)}"
        self.otlp_url = f"{self.otlp_base}/v1/traces"

    def export(
        self, body: bytes, content_type: str = "application/x-protobuf", path: str = "/v1/traces", **headers: str
    ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(
            self.otlp_base + path, data=body, method="POST", headers={"Content-Type": content_type, **headers}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    running = OtlpCollector()
    try:
        yield running
    finally:
        running.stop()


def attribute(key: str, value: object) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    assert isinstance(value, int)
    return KeyValue(key=key, value=AnyValue(int_value=value))


def request_of(*spans: Span, service: str = "checkout", **resource: object) -> ExportTraceServiceRequest:
    attributes = [attribute("service.name", service), *(attribute(k.replace("_", "."), v) for k, v in resource.items())]
    export = ExportTraceServiceRequest()
    export.resource_spans.append(
        ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))], resource={"attributes": attributes})
    )
    return export


def span(name: str, start: int, end: int, span_id: int = 1, **attributes: object) -> Span:
    return Span(
        trace_id=TRACE_ID,
        span_id=span_id.to_bytes(8, "big"),
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=[attribute(key, value) for key, value in attributes.items()],
    )


def response_of(body: bytes) -> ExportTraceServiceResponse:
    response = ExportTraceServiceResponse()
    response.ParseFromString(body)
    return response


T0 = 1_700_000_000_000_000_000


def test_the_opentelemetry_sdk_exports_spans_that_snapshots_show(collector: OtlpCollector) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "checkout", "host.name": "web-1"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector.otlp_url)))
    tracer = provider.get_tracer("shop")
    thread = {"thread.id": threading.get_native_id(), "thread.name": "main"}
    for i in range(3):
        with (
            tracer.start_as_current_span("request", attributes={"i": i, **thread}),
            tracer.start_as_current_span("db.query") as child,
        ):
            child.add_event("rows", {"n": 3})
    assert provider.force_flush()
    provider.shutdown()
    trace = collector.snapshot()
    requests = [e for e in events(trace, "X") if e["name"] == "request"]
    assert [e["args"]["i"] for e in requests] == [0, 1, 2]
    queries = [e for e in events(trace, "X") if e["name"] == "db.query"]  # no thread.id: on its trace's lane
    assert len(queries) == 3
    # Each query is a child of its request: same trace, its parent the request's span.
    by_span = {e["args"]["span_id"]: e for e in requests}
    for query in queries:
        parent = by_span[query["args"]["parent_span_id"]]
        assert query["args"]["trace_id"] == parent["args"]["trace_id"]
        assert parent["ts"] <= query["ts"]
    assert len(events(trace, "i")) == 3
    (process,) = trace["otherData"]["processes"]
    assert process["process_name"] == "checkout" and process["host"] == "web-1"
    assert trace["otherData"]["received_events"] == trace["otherData"]["stored_events"] == 3 + 3 + 3


def nesting(slices: list[tuple[object, int, int, str, str]]) -> dict[object, int]:
    """The rows each lane of ``slices`` (lane, start, end, span id, parent span id) takes: how deep they nest. Each
    sits right under its parent: the innermost slice of its lane that holds it is its parent's, if any holds it."""
    rows: dict[object, int] = {}
    for lane, start, end, span_id, parent_id in slices:
        holders = [s for s in slices if s[0] == lane and s[1] <= start and end <= s[2] and s[3] != span_id]
        if holders:
            assert max(holders, key=lambda s: s[1])[3] == parent_id, f"{span_id} not right under its parent"
        rows[lane] = max(rows.get(lane, 0), len(holders) + 1)
    return rows


def test_a_traces_spans_nest_on_lanes_of_their_trace_in_both_formats(collector: OtlpCollector) -> None:
    """50 spans of one trace, each exported alone as it ends (children before parents), take the rows their nesting
    takes, not one each: a request of 7 steps of 6 queries, two steps at once (concurrent siblings: a second lane)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "checkout"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector.otlp_url)))
    tracer = provider.get_tracer("shop")
    root = tracer.start_span("request", start_time=T0)
    for i in range(7):
        start = T0 + 1_000 + i * 10_000 - (5_000 if i == 6 else 0)  # step 6 begins while step 5 runs
        step = tracer.start_span(f"step {i}", context=set_span_in_context(root), start_time=start)
        for j in range(6):
            query = tracer.start_span("query", context=set_span_in_context(step), start_time=start + 100 + j * 1_000)
            query.end(end_time=start + 600 + j * 1_000)
        step.end(end_time=start + 9_000)
    root.end(end_time=T0 + 100_000)
    provider.shutdown()
    short = f"{root.get_span_context().trace_id:032x}"[:8]

    trace = collector.snapshot()
    spans = events(trace, "X")
    assert len(spans) == 50 and not events(trace, "b")
    rows = nesting([(e["tid"], *_interval(e), e["args"]["span_id"], e["args"].get("parent_span_id")) for e in spans])
    names = metadata(trace, "thread_name")
    assert {names[(spans[0]["pid"], tid)]: depth for tid, depth in rows.items()} == {
        f"trace {short}": 3,  # the request, its steps, their queries
        f"trace {short} #2": 2,  # step 6 and its queries
    }

    status, body = collector.get("/snapshot?format=perfetto")
    assert status == 200
    perfetto = PerfettoTrace(body)
    assert not perfetto.unmatched_ends
    slices = [
        (s.track, s.start_ns, s.end_ns or 0, s.args["span_id"], s.args.get("parent_span_id")) for s in perfetto.slices
    ]
    assert {perfetto.label(track): depth for track, depth in nesting(slices).items()} == {
        f"trace {short}": 3,
        f"trace {short} #2": 2,
    }


def test_past_its_lanes_a_process_ends_its_oldest_traces_lanes_and_its_threads_keep_their_tracks(
    collector: OtlpCollector,
) -> None:
    traces = [span(f"op {i}", T0 + i, T0 + i + 1, span_id=i + 1) for i in range(1_500)]
    for i, each in enumerate(traces):
        each.trace_id = (i + 1).to_bytes(16, "big")  # 1,500 traces, a lane each: past the 1,000 live at once
    threads = [
        span(f"work {n}", T0, T0 + 10, span_id=9_000 + n, **{"thread.id": n, "thread.name": f"w{n}"}) for n in (1, 2)
    ]
    for part in (traces[:750], traces[750:], threads):
        assert collector.export(request_of(*part).SerializeToString())[0] == 200
    trace = collector.snapshot()
    spans = events(trace, "X")
    assert len(spans) == 1_502  # every lane shown, those ended too
    names = metadata(trace, "thread_name")
    assert sorted((names[(e["pid"], e["tid"])], e["tid"]) for e in spans if e["name"].startswith("work")) == [
        ("w1", 1), ("w2", 2),
    ]  # fmt: skip
    (process,) = collector.json("/sources")["processes"]
    tracks = process["tracks"]
    assert sum(t["live"] for t in tracks if t["name"].startswith("trace ")) == 1_000


def test_a_request_of_more_traces_than_max_tracks_ends_lanes_as_it_goes_and_stores_every_span() -> None:
    """With --max-tracks 100 a process keeps 50 lanes live: a request of 300 traces ends the lanes of the oldest
    before it declares more, not past the tracks its stream may hold (which would close it: a 400, all lost)."""
    collector = OtlpCollector("--max-tracks", "100")
    try:
        traces = [span(f"op {i}", T0 + i * 10, T0 + i * 10 + 5, span_id=i + 1) for i in range(300)]
        for i, each in enumerate(traces):
            each.trace_id = (i + 1).to_bytes(16, "big")
        threads = [span("work", T0, T0 + 10, span_id=9_000, **{"thread.id": 7, "thread.name": "w"})]
        assert collector.export(request_of(*traces, *threads).SerializeToString())[0] == 200
        assert collector.export(request_of(*traces).SerializeToString())[0] == 200  # (the same traces again)
        assert len(events(collector.snapshot(), "X")) == 2 * 300 + 1
        (process,) = collector.json("/sources")["processes"]
        assert sum(t["live"] for t in process["tracks"] if t["name"].startswith("trace ")) == 50
    finally:
        collector.stop()


def test_threads_past_what_max_tracks_leaves_beside_the_lanes_share_the_threads_track() -> None:
    """With --max-tracks 100, 50 live lanes of traces leave 47 threads a track each (and 3 named tracks): the spans
    of 60 threads are all stored, those of the last 13 on the ``threads`` track, not past the stream's tracks."""
    collector = OtlpCollector("--max-tracks", "100")
    try:
        traces = [span(f"op {i}", T0 + i * 10, T0 + i * 10 + 5, span_id=i + 1) for i in range(60)]
        for i, each in enumerate(traces):
            each.trace_id = (i + 1).to_bytes(16, "big")
        thread = {n: {"thread.id": n, "thread.name": f"w{n}"} for n in range(1, 61)}
        threads = [span("work", T0, T0 + 10, span_id=9_000 + n, **thread[n]) for n in thread]
        assert collector.export(request_of(*traces).SerializeToString())[0] == 200
        assert collector.export(request_of(*threads).SerializeToString())[0] == 200
        trace = collector.snapshot()
        names = metadata(trace, "thread_name")
        works = [names[(e["pid"], e["tid"])] for e in events(trace, "X") if e["name"] == "work"]
        assert sorted(works) == sorted([f"w{n}" for n in range(1, 48)] + ["threads"] * 13)
    finally:
        collector.stop()


def test_a_resources_stream_opened_again_after_idle_puts_its_traces_on_tracks_of_their_own() -> None:
    """The stream of a resource idle past --idle-timeout closes; the next one's lanes take new track ids, not those
    of the ended lanes of the same process (whose spans would share their row, crossing these)."""
    collector = OtlpCollector("--idle-timeout", "1")
    try:
        first = span("first", T0, T0 + 100_000, span_id=1)
        second = span("second", T0 + 50_000, T0 + 150_000, span_id=2)  # (crosses the first)
        second.trace_id = bytes(range(17, 33))
        assert collector.export(request_of(first).SerializeToString())[0] == 200
        collector.wait_for_log(lambda line: "closing connection from otlp:checkout" in line, timeout_s=30)
        assert collector.export(request_of(second).SerializeToString())[0] == 200
        trace = collector.snapshot()
        names = metadata(trace, "thread_name")
        shown = {e["name"]: names[(e["pid"], e["tid"])] for e in events(trace, "X")}
        assert shown == {"first": f"trace {TRACE_ID.hex()[:8]}", "second": f"trace {second.trace_id.hex()[:8]}"}
        status, body = collector.get("/snapshot?format=perfetto")
        assert status == 200
        perfetto = PerfettoTrace(body)
        assert len({s.track for s in perfetto.slices}) == 2
    finally:
        collector.stop()


def test_the_lanes_of_traces_long_overwritten_are_counted_in_their_process_not_listed_one_by_one() -> None:
    """A lane a trace: 12,000 traces through a store that keeps a few thousand spans leave 12,000 ended tracks; past
    the 1,000 latest emptied, one's counts go into its process's, which stay exact (what /sources and every
    snapshot list, and the collector keeps, does not grow with every trace ever received)."""
    collector = OtlpCollector("--capacity", "3MB")
    try:
        for first in range(0, 12_000, 500):
            traces = [span("op", T0 + i * 10, T0 + i * 10 + 5, span_id=i + 1) for i in range(first, first + 500)]
            for i, each in enumerate(traces, first):
                each.trace_id = (i + 1).to_bytes(16, "big")
            assert collector.export(request_of(*traces).SerializeToString())[0] == 200
        (process,) = collector.json("/sources")["processes"]
        assert process["received_events"] == 12_000 == process["stored_events"] + process["overwritten_events"]
        assert 0 < process["stored_events"] < 12_000 - 2_000  # (most overwritten)
        held = [t for t in process["tracks"] if t["stored_events"] or t["live"]]
        assert len(process["tracks"]) == len(held) + 1_000
        (listed,) = collector.snapshot()["otherData"]["processes"]
        assert len(listed["tracks"]) == len(process["tracks"])
        assert listed["received_events"] == 12_000
    finally:
        collector.stop()


def _interval(event: dict[str, Any]) -> tuple[int, int]:
    """A Chrome slice's start and end in ns (from its µs)."""
    start = round(event["ts"] * 1000)
    return start, start + round(event["dur"] * 1000)


#: A program that records with ringtrace and OpenTelemetry both: ringtrace's span processor, and the OTLP exporter
#: whose resource names the program's host and pid.
BOTH = """
import os, socket, sys
import ringtrace.client, ringtrace.client.otel
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

tl = ringtrace.client.connect(sys.argv[1], process_name="shop")
resource = Resource.create({"service.name": "checkout", "process.pid": os.getpid(), "host.name": socket.gethostname()})
provider = TracerProvider(resource=resource)
provider.add_span_processor(ringtrace.client.otel.SpanProcessor(tl))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[2])))
tracer = provider.get_tracer("shop")
for request in ("other", "this"):
    with tracer.start_as_current_span("handle", attributes={"request": request}) as span:
        with tl.scope("render", request=request):  # plain: no trace id of its own
            pass
provider.shutdown()
assert tl.flush(timeout_s=30)
print(f"{span.get_span_context().trace_id:032x}")
"""


def test_the_span_processor_puts_plain_scopes_in_an_opentelemetry_spans_trace_and_otlp_joins_its_process(
    collector: OtlpCollector,
) -> None:
    trace_id = run_script(collector, BOTH, collector.otlp_url).strip()
    trace = collector.snapshot(f"?trace_id={trace_id}")
    slices = events(trace, "X")
    recorded = {(e["name"], "scope" in e["args"]): e for e in slices}  # (OTLP spans carry their scope's name)
    assert sorted(recorded) == [("handle", False), ("handle", True), ("render", False)]
    span, scope, otlp = recorded[("handle", False)], recorded[("render", False)], recorded[("handle", True)]
    assert span["args"]["trace_id"] == otlp["args"]["trace_id"] == trace_id
    assert span["args"]["span_id"] == otlp["args"]["span_id"] and span["args"]["kind"] == "internal"
    assert scope["args"] == {"request": "this"} and scope["tid"] == span["tid"]  # the plain scope, on its track
    assert span["ts"] <= scope["ts"] and scope["ts"] + scope["dur"] <= span["ts"] + span["dur"]
    # The OTLP resource of the same host and pid is the same process: one pid, named as the program named it.
    assert span["pid"] == scope["pid"] == otlp["pid"] and otlp["tid"] != span["tid"]
    assert metadata(trace, "process_name") == {(span["pid"], 0): "shop"}

    status, body = collector.get(f"/snapshot?trace_id={trace_id}&format=perfetto")
    assert status == 200
    perfetto = PerfettoTrace(body)
    assert sorted(s.name for s in perfetto.slices) == ["handle", "handle", "render"]
    assert len({perfetto.pid(s.track) for s in perfetto.slices}) == 1
    assert [t.name for t in perfetto.tracks.values() if t.kind == "process"] == ["shop"]
    (ours,) = [s for s in perfetto.slices if s.name == "handle" and "scope" not in s.args]
    (inside,) = [s for s in perfetto.slices if s.name == "render"]
    assert inside.track == ours.track and inside.depth == ours.depth + 1


#: A program whose OpenTelemetry span fails: an attribute set after its start, an event, then the exception it ends
#: by; sent both ways, through ringtrace's span processor and as OTLP.
FAILING = (
    BOTH.split("tracer = provider.get_tracer")[0]
    + """tracer = provider.get_tracer("shop")
try:
    with tracer.start_as_current_span("failing", attributes={"early": 1}) as span:
        span.set_attribute("late", 2)
        span.add_event("retrying", {"attempt": 1})
        raise RuntimeError("out of stock")
except RuntimeError:
    pass
provider.shutdown()
assert tl.flush(timeout_s=30)
"""
)


def test_the_span_processor_records_a_failing_span_as_opentelemetry_ended_it_as_otlp_does(
    collector: OtlpCollector,
) -> None:
    run_script(collector, FAILING, collector.otlp_url)
    (ours,) = collector.json("/spans?process=shop&has_error=yes")["spans"]
    (otlp,) = collector.json("/spans?process=checkout&has_error=yes")["spans"]
    assert ours["name"] == otlp["name"] == "failing"
    shared = ("trace_id", "span_id", "kind", "status", "status_message", "early", "late")
    assert {key: ours["args"][key] for key in shared} == {key: otlp["args"][key] for key in shared}
    assert ours["args"]["status"] == "error" and ours["args"]["late"] == 2
    assert ours["args"]["status_message"] == "RuntimeError: out of stock"
    assert ours["duration_ns"] == otlp["duration_ns"]  # (both from the span's own start and end times)
    trace = collector.snapshot(f"?trace_id={ours['args']['trace_id']}")
    span = next(e for e in events(trace, "X") if e["name"] == "failing" and "scope" not in e["args"])
    instants = {e["name"]: e for e in events(trace, "i") if e["tid"] == span["tid"]}
    assert sorted(instants) == ["exception", "retrying"]
    exception = instants["exception"]["args"]
    assert exception["exception.type"] == "RuntimeError" and exception["exception.message"] == "out of stock"
    assert instants["retrying"]["args"]["attempt"] == 1
    assert instants["retrying"]["args"]["span_id"] == ours["args"]["span_id"]
    for instant in instants.values():
        assert span["ts"] <= instant["ts"] <= span["ts"] + span["dur"]


def test_a_snapshot_of_the_otlp_data_alone_names_its_process_after_it_not_the_client_left_out(
    collector: OtlpCollector,
) -> None:
    run_script(collector, BOTH, collector.otlp_url)
    trace = collector.snapshot("?process=checkout")
    (shown,) = trace["otherData"]["processes"]
    assert shown["process_name"] == "checkout"
    assert metadata(trace, "process_name") == {(shown["pid"], 0): "checkout"}
    status, body = collector.get("/snapshot?process=checkout&format=perfetto")
    assert status == 200
    perfetto = PerfettoTrace(body)
    assert [t.name for t in perfetto.tracks.values() if t.kind == "process"] == ["checkout"]


def test_otlp_data_forgotten_and_sent_again_shows_its_clients_pid_again() -> None:
    """The OTLP data of a client's OS process, cleared and forgotten (its stream idle) while the client's data stays,
    shows the client's pid again when its process sends more: not another pid, as another process's would."""
    collector = OtlpCollector("--idle-timeout", "1", "--forget-after", "0")
    try:
        script = "import os, sys, ringtrace.client\n"
        script += "tl = ringtrace.client.connect(sys.argv[1], process_name='shop')\n"
        script += "with tl.scope('work'):\n    pass\n"
        script += "assert tl.flush(timeout_s=30)\nprint(os.getpid())\n"
        pid = int(run_script(collector, script))
        resource = {"host_name": socket.gethostname(), "process_pid": pid}
        export = request_of(span("handle", T0, T0 + 10), **resource).SerializeToString()
        assert collector.export(export)[0] == 200
        assert collector.post("/clear?process=checkout")[0] == 200
        wait_for(  # (its stream closed, idle)
            lambda: collector.json("/healthz"),
            until=lambda health: health["forgotten_processes"] >= 1,
            timeout_s=30,
            what="the cleared process forgotten",
        )
        assert collector.export(export)[0] == 200
        shown = {p["process_name"]: p["pid"] for p in collector.json("/sources")["processes"]}
        assert shown == {"shop": pid, "checkout": pid}
    finally:
        collector.stop()


def test_otlp_json_with_hex_ids_and_gzip_bodies_are_taken(collector: OtlpCollector) -> None:
    export = request_of(span("GET /a", T0, T0 + 5_000, span_id=7))
    as_json = json_format.MessageToDict(export)
    as_json["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = TRACE_ID.hex()  # OTLP/JSON: hex ids
    as_json["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = (7).to_bytes(8, "big").hex()
    status, _, body = collector.export(json.dumps(as_json).encode(), "application/json")
    assert (status, json.loads(body)) == (200, {})
    zipped = request_of(span("GET /b", T0 + 10_000, T0 + 20_000, span_id=8)).SerializeToString()
    status, _, body = collector.export(gzip.compress(zipped), **{"Content-Encoding": "gzip"})
    assert status == 200 and response_of(body) == ExportTraceServiceResponse()
    begins = events(collector.snapshot(), "X")
    assert [(e["name"], e["args"]["trace_id"], e["args"]["span_id"]) for e in begins] == [
        ("GET /a", TRACE_ID.hex(), "0000000000000007"),
        ("GET /b", TRACE_ID.hex(), "0000000000000008"),
    ]
    assert begins[1]["ts"] - begins[0]["ts"] == pytest.approx(10.0)  # µs, from the spans' own wall-clock times


def test_a_span_that_ends_before_it_starts_is_refused_in_partial_success(collector: OtlpCollector) -> None:
    export = request_of(span("ok", T0, T0 + 10, span_id=1), span("backwards", T0 + 10, T0, span_id=2))
    status, _, body = collector.export(export.SerializeToString())
    assert status == 200
    partial = response_of(body).partial_success
    assert partial.rejected_spans == 1 and "backwards" in partial.error_message
    assert [e["name"] for e in events(collector.snapshot(), "X")] == ["ok"]


def test_a_span_whose_span_id_is_all_zeros_is_refused_not_taken_as_every_roots_parent(
    collector: OtlpCollector,
) -> None:
    """The zero span id is OTLP's "none" (a root's parent): such a span would hold the trace's roots as its
    children on its lane."""
    export = request_of(span("zero", T0, T0 + 100, span_id=0), span("root", T0 + 10, T0 + 20, span_id=5))
    status, _, body = collector.export(export.SerializeToString())
    assert status == 200
    partial = response_of(body).partial_success
    assert partial.rejected_spans == 1 and "span 'zero': span_id is all zeros" in partial.error_message
    assert [e["name"] for e in events(collector.snapshot(), "X")] == ["root"]


@pytest.mark.parametrize(
    ("body", "headers", "status", "says"),
    [
        (b"\xff\xff\xff", {}, 400, "not an ExportTraceServiceRequest"),
        (b"{}", {"Content-Type": "text/plain"}, 415, "Content-Type"),
        (b"x", {"Content-Encoding": "br"}, 415, "Content-Encoding"),
        (b"not gzip", {"Content-Encoding": "gzip"}, 400, "not gzip"),
        (gzip.compress(bytes(2 * 1024 * 1024)), {"Content-Encoding": "gzip"}, 413, "inflates past the limit"),
        (bytes(1024 * 1024 + 1), {}, 413, "past the limit of 1048576 bytes"),
    ],
    ids=["garbage", "content-type", "encoding", "bad-gzip", "gzip-bomb", "too-large"],
)
def test_a_bad_body_gets_a_status_that_says_why_and_nothing_else_is_lost(
    body: bytes, headers: dict[str, str], status: int, says: str
) -> None:
    collector = OtlpCollector("--otlp-max-body", "1MiB")
    try:
        headers = {"Content-Type": "application/x-protobuf", **headers}
        got, _, answer = collector.export(body, headers.pop("Content-Type"), **headers)
        assert got == status and says in answer.decode(errors="replace")
        ok, _, _ = collector.export(request_of(span("after", T0, T0 + 1)).SerializeToString())
        assert ok == 200 and [e["name"] for e in events(collector.snapshot(), "X")] == ["after"]
        assert collector.json("/stats")["otlp_requests_refused"] == {str(status): 1}
    finally:
        collector.stop()


def test_with_a_token_an_export_without_it_is_refused_and_the_sdk_with_it_gets_through(tmp_path: Path) -> None:
    token = "s3cret-token-0123456789"
    (tmp_path / "token").write_text(token + "\n")
    collector = OtlpCollector("--token-file", str(tmp_path / "token"), token=token)
    try:
        status, headers, _ = collector.export(request_of(span("x", T0, T0 + 1)).SerializeToString())
        assert status == 401 and headers.get("WWW-Authenticate") == "Bearer"
        exporter = OTLPSpanExporter(endpoint=collector.otlp_url, headers={"Authorization": f"Bearer {token}"})
        provider = TracerProvider(resource=Resource.create({"service.name": "billing"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        with provider.get_tracer("t").start_as_current_span("charge"):
            pass
        provider.shutdown()
        assert [e["name"] for e in events(collector.snapshot(), "X")] == ["charge"]
    finally:
        collector.stop()


def test_two_services_are_two_processes_and_a_resource_sent_again_is_the_same_one(collector: OtlpCollector) -> None:
    for service, start in (("web", T0), ("db", T0 + 100), ("web", T0 + 200)):
        status, _, _ = collector.export(
            request_of(span(f"{service}-op", start, start + 50), service=service).SerializeToString()
        )
        assert status == 200
    trace = collector.snapshot()
    names = {p["process_name"] for p in trace["otherData"]["processes"]}
    assert names == {"web", "db"} and len(trace["otherData"]["processes"]) == 2
    by_pid: dict[int, set[str]] = {}
    for event in events(trace, "X"):
        by_pid.setdefault(event["pid"], set()).add(event["name"])
    assert sorted(map(sorted, by_pid.values())) == [["db-op"], ["web-op"]]  # each its own pid in the trace


def test_two_services_of_one_sdk_process_sharing_its_instance_id_are_two_processes(collector: OtlpCollector) -> None:
    providers = {}
    for service in ("web", "db"):  # the SDK gives every resource of a process the same service.instance.id
        providers[service] = provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector.otlp_url)))
    for service, provider in providers.items():
        with provider.get_tracer("test").start_as_current_span(f"{service}-op"):
            pass
        provider.shutdown()
    trace = collector.snapshot()
    assert sorted(p["process_name"] for p in trace["otherData"]["processes"]) == ["db", "web"]
    names = {p["pid"]: p["process_name"] for p in trace["otherData"]["processes"]}
    shown = {names[event["pid"]]: event["name"] for event in events(trace, "X")}
    assert shown == {"web": "web-op", "db": "db-op"}  # each span in its own service's process


def test_the_sdks_log_records_become_messages_at_their_severitys_priority(collector: OtlpCollector) -> None:
    provider = LoggerProvider(resource=Resource.create({"service.name": "checkout"}))
    exporter = OTLPLogExporter(endpoint=collector.otlp_base + "/v1/logs")
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("shop.payments")
    for i, (severity, body) in enumerate(
        [(SeverityNumber.WARN, "card declined"), (SeverityNumber.DEBUG2, "retrying"), (SeverityNumber.TRACE3, "x")]
    ):
        logger.emit(timestamp=T0 + i, severity_number=severity, body=body, attributes={"order": 7})
    provider.shutdown()
    messages = [e for e in events(collector.snapshot(), "i") if "priority" in e["args"]]
    shown = [(e["cat"], e["args"]["priority"], e["name"], e["args"]["attributes"]) for e in messages]
    assert shown == [
        ("shop.payments", "warning", "card declined", {"order": 7}),
        ("shop.payments", "debug", "retrying", {"order": 7}),
        ("shop.payments", "trace++", "x", {"order": 7}),
    ]


def test_gauges_sums_and_histograms_become_counters_and_summaries_are_refused_with_a_reason(
    collector: OtlpCollector,
) -> None:
    gauge = Metric(
        name="queue.depth",
        gauge=Gauge(data_points=[NumberDataPoint(time_unix_nano=T0 + i, as_int=i) for i in range(3)]),
    )
    total = Metric(
        name="requests",
        sum=Sum(data_points=[NumberDataPoint(time_unix_nano=T0, as_double=2.5, attributes=[attribute("route", "/a")])]),
    )
    point = HistogramDataPoint(time_unix_nano=T0, count=3, sum=12.5, explicit_bounds=[1.0], bucket_counts=[1, 2])
    histogram = Metric(name="latency", histogram=Histogram(data_points=[point]))
    summary = Metric(name="quantiles", summary=Summary(data_points=[SummaryDataPoint(time_unix_nano=T0)] * 2))
    export = ExportMetricsServiceRequest()
    export.resource_metrics.append(
        ResourceMetrics(
            resource={"attributes": [attribute("service.name", "worker")]},
            scope_metrics=[ScopeMetrics(metrics=[gauge, total, histogram, summary])],
        )
    )
    status, _, body = collector.export(export.SerializeToString(), path="/v1/metrics")
    assert status == 200
    response = ExportMetricsServiceResponse()
    response.ParseFromString(body)
    assert response.partial_success.rejected_data_points == 2
    assert "'quantiles': a summary has no counter" in response.partial_success.error_message
    trace = collector.snapshot()
    counters = sorted((e["name"], e["args"]["value"]) for e in events(trace, "C"))
    assert counters == [
        ("latency.count", 3), ("latency.sum", 12.5), ("queue.depth", 0), ("queue.depth", 1), ("queue.depth", 2),
        ("requests {route=/a}", 2.5),
    ]  # fmt: skip
    (count,) = [e["args"] for e in events(trace, "C") if e["name"] == "latency.count"]
    assert count == {"value": 3, "histogram": {"explicit_bounds": [1.0], "bucket_counts": [1, 2]}}
    (process,) = trace["otherData"]["processes"]
    assert process["rejected_events"] == 2  # the refused data points reach the process's counters
    assert collector.json("/stats")["otlp_items"]["/v1/metrics"] == {"accepted": 5, "refused": 2}
    _, metrics = collector.get("/metrics")
    assert b'ringtrace_otlp_items_total{outcome="refused",signal="metrics"} 2.0' in metrics


def test_an_exponential_histogram_of_the_sdk_keeps_the_buckets_that_count_something(collector: OtlpCollector) -> None:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View

    exporter = OTLPMetricExporter(endpoint=f"{collector.otlp_base}/v1/metrics")
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)  # (exported when flushed)
    exponential = View(instrument_name="latency", aggregation=ExponentialBucketHistogramAggregation())
    provider = MeterProvider(metric_readers=[reader], views=[exponential])
    latency = provider.get_meter("test").create_histogram("latency")
    for value in (1, 2, 100):  # none negative: the SDK still sends its negative buckets, all of them 0
        latency.record(value)
    assert provider.force_flush(timeout_millis=30_000)
    provider.shutdown()
    counts = [e["args"] for e in events(collector.snapshot(), "C") if e["name"] == "latency.count"]
    assert counts  # (one export when flushed, another as it shuts down)
    for count in counts:
        histogram = count["histogram"]
        assert count["value"] == 3 and sum(histogram["positive"]["bucket_counts"]) == 3
        assert "negative" not in histogram  # (as the docs say: where they count anything)


def test_a_full_store_under_discard_answers_503_with_retry_after_so_exporters_retry() -> None:
    collector = OtlpCollector("--policy", "discard", "--capacity", "512KiB", "--max-frame-size", "64KiB")
    try:
        answers = []
        for round_ in range(200):
            batch = [span("op", T0 + i, T0 + i + 1, span_id=round_ * 512 + i + 1, pad="x" * 200) for i in range(512)]
            status, headers, body = collector.export(request_of(*batch).SerializeToString())
            answers.append(status)
            if status == 503:
                assert headers.get("Retry-After") == "1" and b"refused" in body
                break
            assert status == 200
        assert answers[-1] == 503
        other = collector.snapshot()["otherData"]
        assert other["discarded_events"] > 0
        refused = collector.json("/stats")["otlp_items"]["/v1/traces"]["refused"]
        assert refused >= 512  # the last request's, at least, and any partial refusals before it
    finally:
        collector.stop()


def test_past_eight_bodies_in_flight_a_request_gets_503_and_those_in_flight_go_through() -> None:
    collector = OtlpCollector("--otlp-max-body", "64KiB", "--http-timeout", "300")  # (bodies held on purpose)
    host, port = collector.otlp_base.removeprefix("http://").split(":")
    body = request_of(span("slow", T0, T0 + 1)).SerializeToString()
    waiting = []
    try:
        for _ in range(8):  # each has said its body is the largest there may be, and sends it later
            sock = socket.create_connection((host, int(port)))
            sock.sendall(
                f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                f"Content-Length: {64 * 1024}\r\n\r\n".encode()
            )
            waiting.append(sock)
        wait_for(  # the eight reach the receiver in their own time
            lambda: collector.export(body)[0],
            until=lambda status: status == 503,
            timeout_s=30,
            what="the eight bodies in flight",
        )
        status, headers, answer = collector.export(body)
        assert status == 503 and headers.get("Retry-After") == "1" and b"in flight" in answer
        for sock in waiting:  # their bodies come: padding past the request, so each is a 400, not a wait
            sock.sendall(body + bytes(64 * 1024 - len(body)))
            assert sock.recv(100).startswith(b"HTTP/1.1 400")
        assert collector.export(body)[0] == 200
    finally:
        for sock in waiting:
            sock.close()
        collector.stop()


def test_data_that_breaks_a_limit_of_its_stream_midway_is_refused_from_there_and_says_which() -> None:
    # A request of 3.6 MB is read and stored in pieces: those before the one that broke the limit went in, the rest
    # are refused (sent again, they would break it again), every span counted once.
    collector = OtlpCollector("--capacity", "3MB", "--max-string-bytes", "8MiB")
    try:
        names = [span(f"{i:06d}" + "n" * 240, T0 + i, T0 + i + 1, span_id=i + 1) for i in range(14_000)]
        status, _, answer = collector.export(request_of(*names).SerializeToString())
        assert status == 200
        partial = ExportTraceServiceResponse.FromString(answer).partial_success
        assert "--capacity is too small for these tables" in partial.error_message
        counted = collector.json("/stats")["otlp_items"]["/v1/traces"]
        assert 0 < partial.rejected_spans == counted["refused"] < 14_000
        assert counted["accepted"] + counted["refused"] == 14_000
    finally:
        collector.stop()


def test_trace_id_selects_one_request_across_every_process(collector: OtlpCollector) -> None:
    one, other = bytes(range(1, 17)), bytes(range(17, 33))

    def traced(name: str, trace_id: bytes, span_id: int, start: int) -> Span:
        made = span(name, start, start + 100, span_id=span_id)
        made.trace_id = trace_id
        made.events.add(time_unix_nano=start + 10, name=f"{name}-event")
        return made

    web = request_of(traced("GET /a", one, 1, T0), traced("GET /b", other, 2, T0 + 1000), service="web")
    db = request_of(traced("SELECT a", one, 3, T0 + 10), traced("SELECT b", other, 4, T0 + 1010), service="db")
    for export in (web, db):
        assert collector.export(export.SerializeToString())[0] == 200
    trace = collector.snapshot(f"?trace_id={one.hex().upper()}")
    shown = sorted((e["ph"], e["name"]) for e in trace["traceEvents"] if e["ph"] in "Xi")
    assert shown == [("X", "GET /a"), ("X", "SELECT a"), ("i", "GET /a-event"), ("i", "SELECT a-event")]
    assert {p["process_name"] for p in trace["otherData"]["processes"]} == {"web", "db"}
    assert trace["otherData"]["capture"]["query"]["trace_id"] == one.hex()
    status, body = collector.get("/snapshot?trace_id=12")
    assert status == 400 and b"'trace_id' must be 32 hex digits" in body


def services(*names: str, spans: int = 1) -> bytes:
    """One request with a resource per service name, each with ``spans`` spans."""
    export = ExportTraceServiceRequest()
    for n, name in enumerate(names):
        batch = [span("op", T0 + i, T0 + i + 1, span_id=n * spans + i + 1) for i in range(spans)]
        export.resource_spans.extend(request_of(*batch, service=name).resource_spans)
    return export.SerializeToString()


def test_otlp_resources_take_no_native_connection_slot_and_a_client_still_connects_and_flushes() -> None:
    collector = OtlpCollector("--max-connections", "3")
    timeline = None
    try:
        status, _, body = collector.export(services(*(f"service-{i}" for i in range(6))))
        assert status == 200 and not response_of(body).HasField("partial_success")
        health = collector.json("/healthz")
        assert (health["connections"], health["otlp_streams"]) == (0, 6)
        import ringtrace.client

        timeline = ringtrace.client.connect(collector.tcp_address, process_name="native")
        with timeline.scope("work"):
            pass
        assert timeline.flush(timeout_s=30)
        assert collector.json("/healthz")["connections"] == 1
        assert collector.export(services("one-more"))[0] == 200  # a new service still gets in
        stats = collector.json("/stats")
        assert (stats["connections"], stats["otlp_streams"], stats["connections_refused"]) == (1, 7, 0)
        _, metrics = collector.get("/metrics")
        assert b"ringtrace_connections 1.0" in metrics and b"ringtrace_otlp_streams 7.0" in metrics
        names = {e["name"] for e in collector.snapshot()["traceEvents"] if e["ph"] in "Xb"}
        assert names == {"op", "work"}
    finally:
        if timeline is not None:
            timeline.close(timeout_s=30)
        collector.stop()


def test_an_idle_otlp_stream_is_closed_for_a_new_resource_past_the_otlp_bound() -> None:
    collector = OtlpCollector("--otlp-max-processes", "2")
    try:
        for name in ("first", "second", "third"):
            assert collector.export(services(name))[0] == 200
        assert collector.json("/healthz")["otlp_streams"] == 2  # the first one's, idle, closed for the third
        stored = {p["process_name"]: p["stored_events"] for p in collector.json("/sources")["processes"]}
        assert set(stored) == {"first", "second", "third"} and stored["first"] == stored["third"] > 0
    finally:
        collector.stop()


@pytest.mark.parametrize("spans", [3, 1000], ids=["whole", "in-pieces"])
def test_a_request_of_more_resources_than_the_otlp_bound_stores_what_fits_and_says_why_in_partial_success(
    spans: int,
) -> None:
    collector = OtlpCollector("--otlp-max-processes", "4")
    try:
        body = services(*(f"service-{i}" for i in range(6)), spans=spans)
        assert (len(body) > PIECE_BYTES) == (spans == 1000)
        status, _, body = collector.export(body)
        assert status == 200
        partial = response_of(body).partial_success
        assert partial.rejected_spans == 2 * spans
        assert "2 resources of the request past --otlp-max-processes=4" in partial.error_message
        stored = {p["process_name"] for p in collector.json("/sources")["processes"]}
        assert stored == {f"service-{i}" for i in range(4)}
        assert collector.json("/stats")["otlp_items"]["/v1/traces"] == {"accepted": 4 * spans, "refused": 2 * spans}
        assert len(events(collector.snapshot(), "X")) == 4 * spans
    finally:
        collector.stop()


def test_sources_say_how_each_process_reaches_the_collector_and_when_it_was_last_seen(
    collector: OtlpCollector,
) -> None:
    before = time.time_ns()
    assert collector.export(services("web"))[0] == 200
    after = time.time_ns()
    import ringtrace.client

    timeline = ringtrace.client.connect(collector.tcp_address, process_name="native")
    try:
        with timeline.scope("work"):
            pass
        assert timeline.flush(timeout_s=30)
        processes = {p["process_name"]: p for p in collector.json("/sources")["processes"]}
        web, native = processes["web"], processes["native"]
        assert (web["via"], web["connections"]) == ("otlp", 0)  # its stream is open, but it is no connection
        assert before <= web["last_seen_wall_ns"] <= after
        assert all(track["live"] for track in web["tracks"])
        assert (native["via"], native["connections"]) == ("native", 1)
        assert native["last_seen_wall_ns"] >= after  # (connected: seen now)
        health = collector.json("/healthz")
        assert (health["connections"], health["otlp_streams"]) == (1, 1)
    finally:
        timeline.close(timeout_s=30)


def test_an_idle_otlp_stream_is_closed_and_its_process_keeps_when_it_was_last_seen() -> None:
    collector = OtlpCollector("--idle-timeout", "1")
    try:
        assert collector.export(services("web"))[0] == 200
        (seen,) = (p["last_seen_wall_ns"] for p in collector.json("/sources")["processes"])
        wait_for(
            lambda: collector.json("/healthz"),
            until=lambda health: health["otlp_streams"] == 0,
            timeout_s=30,
            what="the stream closed by the idle timeout",
        )
        (web,) = collector.json("/sources")["processes"]
        assert (web["via"], web["connections"], web["last_seen_wall_ns"]) == ("otlp", 0, seen)
        assert not any(track["live"] for track in web["tracks"])
        assert collector.export(services("web"))[0] == 200  # a stream opens again
        assert collector.json("/healthz")["otlp_streams"] == 1
    finally:
        collector.stop()


def test_the_sources_command_shows_an_otlp_service_as_otlp_not_as_no_connection(
    collector: OtlpCollector, capsys: pytest.CaptureFixture[str]
) -> None:
    from ringtrace.collector.command.main import main

    assert collector.export(request_of(span("op", T0, T0 + 50), host_name="web-1").SerializeToString())[0] == 200
    assert main(["sources", collector.http_url]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    (process,) = [row for row in rows if row[1:4] == ["checkout", "process", "web-1"]]
    assert process[4] == "otlp"  # its conn column


def test_services_that_name_no_pid_are_shown_by_their_names_alone_not_as_pid_0(collector: OtlpCollector) -> None:
    for service in ("web", "db"):  # neither names a process.pid: one shows pid 0, the other an alias of it
        assert (
            collector.export(request_of(span(f"{service}-op", T0, T0 + 50), service=service).SerializeToString())[0]
            == 200
        )
    trace = collector.snapshot()
    assert sorted(metadata(trace, "process_name").values()) == ["db", "web"]
    status, body = collector.get("/snapshot?format=perfetto")
    assert status == 200
    processes = [track.name for track in PerfettoTrace(body).tracks.values() if track.kind == "process"]
    assert sorted(processes) == ["db", "web"]
