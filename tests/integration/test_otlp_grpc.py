"""OTLP/gRPC ingest (``--otlp-grpc``): the real OpenTelemetry SDK and its OTLP/gRPC exporters send spans, logs and
metrics (histograms among them) to a real collector, and requests made by hand reach the same receiver over real
sockets: its answers (codes, RetryInfo, partial_success), the token, TLS and the limits."""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from certificates import make_certificates
from collector_process import CollectorProcess, events
from google.rpc import error_details_pb2, status_pb2
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import (
    ExplicitBucketHistogramAggregation,
    ExponentialBucketHistogramAggregation,
    View,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from perfetto_model import PerfettoTrace
from ringtrace.collector.ingest.otlp.request_shape import MAX_RESOURCES
from waiting import wait_for

pytestmark = pytest.mark.integration

_GRPC_LISTEN = re.compile(r"otlp/grpc listening on ([\d.]+):(\d+)")
_HTTP_LISTEN = re.compile(r"otlp listening on https?://([\d.]+):(\d+)")
TRACES = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TOKEN = "grpc-test-token-0123456789abcdef"
T0 = 1_700_000_000_000_000_000


class GrpcCollector(CollectorProcess):
    """The collector with its OTLP/gRPC receiver on a port of its own."""

    def __init__(self, *extra_args: str, **options: Any) -> None:
        super().__init__("--otlp-grpc", "127.0.0.1:0", *extra_args, **options)
        match = _GRPC_LISTEN.search(self.wait_for_log(lambda line: "otlp/grpc listening" in line))
        assert match is not None
        self.target = f"{match.group(1)}:{match.group(2)}"
        self.endpoint = f"http://{self.target}"

    def call(
        self, body: bytes, method: str = TRACES, channel: grpc.Channel | None = None, **options: Any
    ) -> tuple[grpc.StatusCode, bytes, dict[str, Any], str]:
        """One Export of ``body`` as it is: the status code, the answer, the trailing metadata and the details."""
        with channel or grpc.insecure_channel(self.target) as open_channel:
            export = open_channel.unary_unary(method)  # (no serializers: bytes both ways)
            try:
                answer, call = export.with_call(body, timeout=30, **options)
            except grpc.RpcError as exc:
                error: Any = exc
                return error.code(), b"", dict(error.trailing_metadata() or ()), error.details()
            return call.code(), answer, dict(call.trailing_metadata() or ()), ""


@pytest.fixture
def collector() -> Iterator[GrpcCollector]:
    running = GrpcCollector()
    try:
        yield running
    finally:
        running.stop()


def attribute(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def request_of(*spans: Span, service: str = "checkout") -> bytes:
    export = ExportTraceServiceRequest()
    export.resource_spans.append(
        ResourceSpans(
            scope_spans=[ScopeSpans(spans=list(spans))], resource={"attributes": [attribute("service.name", service)]}
        )
    )
    return export.SerializeToString()


def span(name: str, start: int, end: int, span_id: int = 1) -> Span:
    return Span(
        trace_id=bytes(range(1, 17)), span_id=span_id.to_bytes(8, "big"), name=name,
        start_time_unix_nano=start, end_time_unix_nano=end,
    )  # fmt: skip


def retry_delay_s(trailing: dict[str, Any]) -> float:
    """The RetryInfo's delay, which must be both in the status details and where OpenTelemetry's Python exporter
    reads it."""
    status = status_pb2.Status.FromString(trailing["grpc-status-details-bin"])
    (detail,) = status.details
    retry = error_details_pb2.RetryInfo()
    assert detail.Unpack(retry)
    assert error_details_pb2.RetryInfo.FromString(trailing["google.rpc.retryinfo-bin"]) == retry
    return retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9


def metrics_provider(collector: GrpcCollector, *views: View) -> MeterProvider:
    """A meter provider whose reader exports only when flushed, over gRPC to ``collector``."""
    exporter = OTLPMetricExporter(endpoint=collector.endpoint, insecure=True)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=math.inf)
    return MeterProvider(
        metric_readers=[reader], resource=Resource.create({"service.name": "worker"}), views=list(views)
    )


def test_the_sdk_sends_spans_logs_and_metrics_over_grpc_and_snapshots_show_them(collector: GrpcCollector) -> None:
    collector.wait_for_log(lambda line: "event loop: uvloop" in line)  # (grpc.aio on the collector's loop: uvloop's)
    resource = Resource.create({"service.name": "checkout", "host.name": "web-1"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector.endpoint, insecure=True))
    )
    thread = {"thread.id": threading.get_native_id(), "thread.name": "main"}
    tracer = tracer_provider.get_tracer("shop")
    for i in range(3):
        with tracer.start_as_current_span("request", attributes={"i": i, **thread}):
            pass
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=collector.endpoint, insecure=True))
    )
    logger_provider.get_logger("shop.payments").emit(
        timestamp=T0, severity_number=SeverityNumber.WARN, body="card declined", attributes={"order": 7}
    )
    meter_provider = metrics_provider(collector)
    meter_provider.get_meter("shop").create_counter("orders").add(5, {"route": "/buy"})
    assert meter_provider.force_flush(timeout_millis=30_000)
    for provider in (tracer_provider, logger_provider, meter_provider):
        provider.shutdown()
    trace = collector.snapshot()
    assert [e["args"]["i"] for e in events(trace, "X") if e["name"] == "request"] == [0, 1, 2]
    (message,) = [e for e in events(trace, "i") if "priority" in e["args"]]
    assert (message["cat"], message["args"]["priority"], message["name"]) == (
        "shop.payments", "warning", "card declined"
    )  # fmt: skip
    assert [(e["name"], e["args"]["value"]) for e in events(trace, "C")] == [("orders {route=/buy}", 5)]
    assert {p["process_name"] for p in trace["otherData"]["processes"]} == {"checkout", "worker"}
    items = collector.json("/stats")["otlp_items"]
    assert {path: counts["accepted"] for path, counts in items.items()} == {
        "/v1/traces": 3, "/v1/logs": 1, "/v1/metrics": 1
    }  # fmt: skip


def test_histograms_of_both_kinds_arrive_as_counters_of_count_and_sum_with_their_buckets(
    collector: GrpcCollector,
) -> None:
    provider = metrics_provider(
        collector,
        View(instrument_name="latency", aggregation=ExplicitBucketHistogramAggregation(boundaries=(10.0, 100.0))),
        View(instrument_name="size", aggregation=ExponentialBucketHistogramAggregation(max_size=20)),
    )
    meter = provider.get_meter("shop")
    latency, size = meter.create_histogram("latency"), meter.create_histogram("size")
    for value in (5, 50, 500, 7):
        latency.record(value, {"route": "/a"})
    for value in (1.0, 2.0, 4.0):
        size.record(value)
    assert provider.force_flush(timeout_millis=30_000)
    provider.shutdown()
    counters = {e["name"]: e["args"] for e in events(collector.snapshot(), "C")}
    # Each a line of its own: the only number in a counter's args, which viewers draw, is its value.
    assert {key for args in counters.values() for key, value in args.items() if not isinstance(value, dict)} == {
        "value"
    }
    assert counters["latency.count {route=/a}"] == {
        "value": 4,
        "histogram": {"explicit_bounds": [10.0, 100.0], "bucket_counts": [2, 1, 1], "min": 5.0, "max": 500.0},
    }
    assert counters["latency.sum {route=/a}"] == {"value": 562.0}
    assert counters["size.count"]["value"] == 3
    exponential = counters["size.count"]["histogram"]
    assert (exponential["zero_count"], exponential["min"], exponential["max"]) == (0, 1, 4)
    # Bucket offset+i holds (base^(offset+i), base^(offset+i+1)], base = 2^(2^-scale): each value in its own.
    base = 2 ** (2 ** -exponential["scale"])
    positive = exponential["positive"]
    held = [
        value for value in (1.0, 2.0, 4.0) for i, n in enumerate(positive["bucket_counts"])
        if n and base ** (positive["offset"] + i) < value <= base ** (positive["offset"] + i + 1) * (1 + 1e-9)
    ]  # fmt: skip
    assert sorted(held) == [1.0, 2.0, 4.0] and sum(positive["bucket_counts"]) == 3
    assert counters["size.sum"] == {"value": 7.0}
    status, body = collector.get("/snapshot?format=perfetto")
    assert status == 200
    tracks = {track.name for track in PerfettoTrace(body).tracks.values() if track.kind == "counter"}
    assert tracks == {"latency.count {route=/a}", "latency.sum {route=/a}", "size.count", "size.sum"}
    assert collector.json("/stats")["otlp_items"]["/v1/metrics"] == {"accepted": 2, "refused": 0}


def test_partial_success_and_bad_data_are_answered_as_the_specification_says(collector: GrpcCollector) -> None:
    code, answer, _, _ = collector.call(request_of(span("ok", T0, T0 + 10), span("backwards", T0 + 10, T0, 2)))
    assert code == grpc.StatusCode.OK
    partial = ExportTraceServiceResponse.FromString(answer).partial_success
    assert partial.rejected_spans == 1 and "backwards" in partial.error_message
    code, _, _, details = collector.call(b"\xff\xff\xff")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not an ExportTraceServiceRequest" in details
    assert [e["name"] for e in events(collector.snapshot(), "X")] == ["ok"]
    assert collector.json("/stats")["otlp_requests_refused"] == {"400": 1}


def test_with_a_token_and_tls_the_sdk_gets_through_and_a_request_without_the_token_does_not(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path)
    (tmp_path / "token").write_text(TOKEN + "\n")
    collector = GrpcCollector(
        "--token-file", str(tmp_path / "token"), "--tls-cert", certificates.cert, "--tls-key", certificates.key,
        token=TOKEN, cafile=certificates.ca,
    )  # fmt: skip
    try:
        trusting = grpc.ssl_channel_credentials(Path(certificates.ca).read_bytes())
        for metadata, said in (((), "missing"), ((("authorization", "Bearer wrong-token"),), "wrong")):
            code, _, _, details = collector.call(
                request_of(span("x", T0, T0 + 1)),
                channel=grpc.secure_channel(collector.target, trusting),
                metadata=metadata,
            )
            assert (code, details) == (grpc.StatusCode.UNAUTHENTICATED, "authentication failed")
            collector.wait_for_log(lambda line, said=said: "refusing gRPC traces export" in line and said in line)
        code, _, _, _ = collector.call(request_of(span("x", T0, T0 + 1)))  # (plain gRPC to the TLS listener)
        assert code == grpc.StatusCode.UNAVAILABLE
        exporter = OTLPSpanExporter(
            endpoint=f"https://{collector.target}", credentials=trusting, headers={"authorization": f"Bearer {TOKEN}"}
        )
        provider = TracerProvider(resource=Resource.create({"service.name": "billing"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        with provider.get_tracer("t").start_as_current_span("charge"):
            pass
        provider.shutdown()
        assert [e["name"] for e in events(collector.snapshot(), "X")] == ["charge"]
        assert collector.json("/stats")["http_unauthorized"] == 2
    finally:
        collector.stop()


@pytest.mark.parametrize("compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip])
def test_a_message_past_the_body_limit_is_refused_and_the_next_one_taken(compression: grpc.Compression) -> None:
    collector = GrpcCollector("--otlp-max-body", "64KiB")
    try:
        large = request_of(span("x" * 100_000, T0, T0 + 1))  # (gzip makes it small: it is refused as it inflates)
        code, _, trailing, details = collector.call(large, compression=compression)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details
        assert "google.rpc.retryinfo-bin" not in trailing  # sent again, it would be refused again
        code, _, _, _ = collector.call(request_of(span("after", T0, T0 + 1)), compression=compression)
        assert code == grpc.StatusCode.OK
        assert [e["name"] for e in events(collector.snapshot(), "X")] == ["after"]
    finally:
        collector.stop()


def test_past_the_bound_on_requests_in_flight_grpc_gets_resource_exhausted_with_retry_info() -> None:
    collector = GrpcCollector("--otlp-http", "127.0.0.1:0", "--otlp-max-body", "64KiB", "--http-timeout", "300")
    http = _HTTP_LISTEN.search(collector.wait_for_log(lambda line: "otlp listening" in line))
    assert http is not None
    body = request_of(span("slow", T0, T0 + 1))
    waiting = []
    try:
        for _ in range(8):  # OTLP/HTTP requests that have said their body is the largest there may be, and wait
            sock = socket.create_connection((http.group(1), int(http.group(2))))
            sock.sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                b"Content-Length: %d\r\n\r\n" % (64 * 1024)
            )
            waiting.append(sock)
        # The eight reach the receiver in their own time; a gRPC request sent meanwhile would hold bytes of the bound
        # while the last of them came, and that one would be refused (a 503, rightly) instead of the gRPC one.
        stats = wait_for(
            lambda: collector.json("/stats"),
            until=lambda stats: stats["otlp_bytes_in_flight"] == stats["otlp_max_bytes_in_flight"],
            timeout_s=60,
            what="the eight bodies counted in flight",
        )
        assert stats["otlp_max_bytes_in_flight"] == 8 * 64 * 1024
        code, _, trailing, details = collector.call(body)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "in flight" in details
        assert retry_delay_s(trailing) == 1
        for sock in waiting:
            sock.close()
        wait_for(  # the eight closed, their bytes are no longer in flight
            lambda: collector.call(body)[0],
            until=lambda code: code == grpc.StatusCode.OK,
            timeout_s=30,
            what="a request taken once the eight are gone",
        )
        assert collector.json("/stats")["otlp_requests_refused"]["503"] >= 1
    finally:
        for sock in waiting:
            sock.close()
        collector.stop()


@contextlib.contextmanager
def held_requests(collector: GrpcCollector, count: int) -> Iterator[tuple[list[grpc.Future], threading.Event]]:
    """``count`` Export requests begun, whose message is sent only once the event is set (at the latest, on leaving)."""
    release = threading.Event()

    def message_when_released() -> Iterator[bytes]:
        release.wait()
        yield request_of(span("held", T0, T0 + 1))

    with grpc.insecure_channel(collector.target) as channel:
        # (a stream of one message: the same on the wire as a unary request, but held back)
        held = [channel.stream_unary(TRACES).future(message_when_released(), timeout=60) for _ in range(count)]
        try:
            yield held, release
        finally:
            release.set()


def first_refusal(
    collector: GrpcCollector, body: bytes, held: list[grpc.Future]
) -> tuple[grpc.StatusCode, bytes, dict[str, Any], str] | None:
    """The first answer to ``body`` other than OK, once the ``held`` requests reach the receiver; None if one of them
    was refused instead (on a busy machine, one of ``body``'s may reach the receiver before the last of them)."""
    return wait_for(
        lambda: None if any(future.done() for future in held) else collector.call(body),
        until=lambda answer: answer is None or answer[0] != grpc.StatusCode.OK,
        timeout_s=60,
        what="a request refused past those held",
    )


def test_a_request_past_those_handled_at_once_is_resource_exhausted_with_retry_info_and_counted() -> None:
    collector = GrpcCollector("--http-timeout", "300")  # (requests held on purpose)
    body = request_of(span("next", T0, T0 + 1))
    try:
        for _ in range(3):  # again if one of those held was refused, not the request past them
            with held_requests(collector, 8) as (held, release):
                if (answer := first_refusal(collector, body, held)) is None:
                    continue
                code, _, trailing, details = answer
                assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "at once" in details
                assert retry_delay_s(trailing) == 1  # (so that every exporter retries, not only Python's)
                assert collector.json("/stats")["otlp_requests_refused"]["503"] >= 1
                release.set()
                assert [future.code() for future in held] == [grpc.StatusCode.OK] * 8
                break
        else:
            pytest.fail("in three tries, a request held was refused before the one past them")
        assert collector.call(body)[0] == grpc.StatusCode.OK
    finally:
        collector.stop()


def test_requests_their_sender_cancels_before_their_message_leave_room_and_count_no_refusal() -> None:
    collector = GrpcCollector("--http-timeout", "300")  # (requests held on purpose)
    body = request_of(span("next", T0, T0 + 1))
    try:
        with held_requests(collector, 8) as (held, _):
            first_refusal(collector, body, held)  # (a refused one of them leaves the rest, and counts a 503 too)
            for future in held:
                future.cancel()
            wait_for(
                lambda: collector.call(body)[0],
                until=lambda code: code == grpc.StatusCode.OK,
                timeout_s=30,
                what="their room given back",
            )
        refused = collector.json("/stats")["otlp_requests_refused"]
        assert set(refused) == {"503"}  # those past the eight; the cancelled ones refused nothing
    finally:
        collector.stop()


def test_requests_whose_message_never_comes_are_ended_and_leave_room_for_others() -> None:
    collector = GrpcCollector("--http-timeout", "0.5")
    body = request_of(span("next", T0, T0 + 1))
    try:
        with held_requests(collector, 8) as (held, _):
            codes = {future.code() for future in held}  # (each waits for its answer, up to its own timeout)
            assert codes == {grpc.StatusCode.DEADLINE_EXCEEDED}
            assert "no request message within http_timeout_s=0.5" in held[0].details()
            assert collector.call(body)[0] == grpc.StatusCode.OK
        assert collector.json("/stats")["otlp_requests_refused"]["408"] == 8
    finally:
        collector.stop()


def test_a_full_store_under_discard_is_unavailable_with_retry_info_so_exporters_retry() -> None:
    collector = GrpcCollector("--policy", "discard", "--capacity", "512KiB", "--max-frame-size", "64KiB")
    try:
        for round_ in range(200):
            batch = [span("op" + "x" * 200, T0 + i, T0 + i + 1, span_id=round_ * 512 + i + 1) for i in range(512)]
            code, _, trailing, details = collector.call(request_of(*batch))
            if code != grpc.StatusCode.OK:
                break
        assert code == grpc.StatusCode.UNAVAILABLE and "store refused" in details
        assert retry_delay_s(trailing) == 1
        assert collector.snapshot()["otherData"]["discarded_events"] > 0
    finally:
        collector.stop()


def test_without_grpcio_the_collector_says_which_pip_install_it_needs(tmp_path: Path) -> None:
    (tmp_path / "grpc").mkdir()  # a grpc package that cannot be imported, ahead of the real one
    (tmp_path / "grpc" / "__init__.py").write_text("raise ImportError('No module named grpc')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "ringtrace.collector", "--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0",
         "--otlp-grpc", "127.0.0.1:0"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--otlp-grpc needs grpcio: pip install 'ringtrace[grpc]'" in done.stderr
    assert "listening" not in done.stderr  # refused before anything was begun


def test_a_grpc_address_in_use_is_refused_at_start_saying_so() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "ringtrace.collector", "--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0",
             "--otlp-grpc", address],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1
    assert f"cannot start: --otlp-grpc {address}: cannot listen there (in use" in done.stderr


def test_a_request_of_more_resources_than_the_otlp_bound_is_ok_with_the_rest_refused_in_partial_success() -> None:
    collector = GrpcCollector("--otlp-max-processes", "2")
    try:
        export = ExportTraceServiceRequest()
        for n, name in enumerate(("a", "b", "c")):
            export.MergeFromString(request_of(span("op", T0, T0 + 1, span_id=n + 1), service=name))
        code, answer, _, _ = collector.call(export.SerializeToString())
        assert code == grpc.StatusCode.OK
        partial = ExportTraceServiceResponse.FromString(answer).partial_success
        assert partial.rejected_spans == 1 and "past --otlp-max-processes=2" in partial.error_message
        assert collector.json("/healthz")["otlp_streams"] == 2
    finally:
        collector.stop()


def test_a_request_of_more_resources_than_it_may_hold_is_resource_exhausted_naming_the_bound(
    collector: GrpcCollector,
) -> None:
    code, _, trailing, details = collector.call(b"\x0a\x00" * (MAX_RESOURCES + 1))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and f"more than {MAX_RESOURCES} resources" in details
    assert "grpc-status-details-bin" not in trailing  # (no RetryInfo: sent again, it would be refused again)
    code, _, _, _ = collector.call(request_of(span("after", T0, T0 + 5)))
    assert code == grpc.StatusCode.OK
