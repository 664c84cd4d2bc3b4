"""OTLP items that are hostile or odd on their own (a time past what is stored, a value that is no number, a body
that is no string): each is refused in ``partial_success`` and counted, or stored as documented, and the valid items
sent beside it are stored and readable."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from collector_process import events
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link
from ringtrace.collector.ingest.otlp.logs import NO_BODY
from ringtrace.collector.ingest.otlp.request_pieces import PIECE_BYTES
from test_otlp import T0, OtlpCollector, attribute, request_of, response_of, span

pytestmark = pytest.mark.integration

#: A time past 2^63 - 1 ns, the latest the store shows (OTLP's are uint64).
PAST = 18_000_000_000_000_000_000


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    running = OtlpCollector()
    try:
        yield running
    finally:
        running.stop()


def logs_request(*records: LogRecord) -> bytes:
    export = ExportLogsServiceRequest()
    export.resource_logs.append(
        ResourceLogs(
            resource={"attributes": [attribute("service.name", "checkout")]},
            scope_logs=[ScopeLogs(log_records=list(records))],
        )
    )
    return export.SerializeToString()


def metrics_request(*metrics: Metric) -> bytes:
    export = ExportMetricsServiceRequest()
    export.resource_metrics.append(
        ResourceMetrics(
            resource={"attributes": [attribute("service.name", "worker")]},
            scope_metrics=[ScopeMetrics(metrics=list(metrics))],
        )
    )
    return export.SerializeToString()


def test_a_span_past_the_latest_time_stored_is_refused_and_the_one_beside_it_is_read(
    collector: OtlpCollector,
) -> None:
    late_event = span("late event", T0, T0 + 5, span_id=3)
    late_event.events.add(name="boom", time_unix_nano=2**63)
    export = request_of(span("ok", T0, T0 + 10, span_id=1), span("late", PAST, PAST, span_id=2), late_event)
    status, _, body = collector.export(export.SerializeToString())
    assert status == 200
    partial = response_of(body).partial_success
    assert partial.rejected_spans == 2
    assert f"'late': start_time_unix_nano {PAST} is past {2**63 - 1} ns" in partial.error_message
    assert [e["name"] for e in events(collector.snapshot(), "X")] == ["ok"]
    (process,) = collector.snapshot()["otherData"]["processes"]
    assert process["rejected_events"] == 2 and process.get("undecodable_events", 0) == 0


def test_a_log_record_or_data_point_past_the_latest_time_stored_is_refused_and_the_one_beside_it_is_read(
    collector: OtlpCollector,
) -> None:
    status, _, body = collector.export(
        logs_request(LogRecord(time_unix_nano=T0, body={"string_value": "fine"}), LogRecord(time_unix_nano=PAST)),
        path="/v1/logs",
    )
    assert status == 200
    logs = ExportLogsServiceResponse.FromString(body).partial_success
    assert logs.rejected_log_records == 1 and f"time_unix_nano {PAST} is past" in logs.error_message
    points = [NumberDataPoint(time_unix_nano=T0, as_int=1), NumberDataPoint(time_unix_nano=PAST, as_int=2)]
    status, _, body = collector.export(
        metrics_request(Metric(name="depth", gauge=Gauge(data_points=points))), path="/v1/metrics"
    )
    assert status == 200
    metrics = ExportMetricsServiceResponse.FromString(body).partial_success
    assert metrics.rejected_data_points == 1
    assert f"'depth': a data point: time_unix_nano {PAST}" in metrics.error_message
    trace = collector.snapshot()
    assert [e["args"]["value"] for e in events(trace, "C")] == [1]
    assert [e["args"]["body"] for e in events(trace, "i") if "priority" in e["args"]] == ["fine"]


def test_a_log_record_is_named_by_its_body_as_text_json_or_its_severity_text(collector: OtlpCollector) -> None:
    provider = LoggerProvider(resource=Resource.create({"service.name": "checkout"}))
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=collector.otlp_base + "/v1/logs"))
    )
    logger = provider.get_logger("shop")
    sent: list[tuple[object, str]] = [
        ("done 0", ""),
        ({"a": 1}, ""),
        ([1, "x"], ""),
        (None, "WARN"),
        (None, ""),
        (b"\x01", ""),
    ]
    for i, (body, severity_text) in enumerate(sent):
        logger.emit(timestamp=T0 + i, body=body, severity_text=severity_text)
    provider.shutdown()
    messages = [e for e in events(collector.snapshot(), "i") if "priority" in e["args"]]
    assert [e["name"] for e in messages] == ["done 0", '{"a": 1}', '[1, "x"]', "WARN", NO_BODY, '"AQ=="']
    assert messages[1]["args"]["body"] == {"a": 1}


def test_a_data_point_whose_value_is_nan_or_infinite_is_refused_and_counted(collector: OtlpCollector) -> None:
    values = [1.5, float("nan"), float("inf"), float("-inf")]
    gauge = Metric(
        name="depth",
        gauge=Gauge(data_points=[NumberDataPoint(time_unix_nano=T0 + i, as_double=v) for i, v in enumerate(values)]),
    )
    points = [
        HistogramDataPoint(time_unix_nano=T0, count=1, sum=2.0, bucket_counts=[1]),
        HistogramDataPoint(time_unix_nano=T0 + 1, count=1, sum=float("nan"), bucket_counts=[1]),
    ]
    histogram = Metric(name="latency", histogram=Histogram(data_points=points))
    status, _, body = collector.export(metrics_request(gauge, histogram), path="/v1/metrics")
    assert status == 200
    partial = ExportMetricsServiceResponse.FromString(body).partial_success
    assert partial.rejected_data_points == 4
    assert "'depth': a data point's as_double nan is not a finite number" in partial.error_message
    trace = collector.snapshot()
    counters = sorted((e["name"], e["args"]["value"]) for e in events(trace, "C"))
    assert counters == [("depth", 1.5), ("latency.count", 1), ("latency.sum", 2.0)]
    (process,) = trace["otherData"]["processes"]
    assert process["rejected_events"] == 4


def test_a_span_links_attributes_are_kept_beside_its_links(collector: OtlpCollector) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "checkout"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector.otlp_url)))
    tracer = provider.get_tracer("shop")
    with tracer.start_as_current_span("first") as first, tracer.start_as_current_span("second") as second:
        pass
    links = [Link(first.get_span_context(), {"why": "retry", "n": 2}), Link(second.get_span_context())]
    with tracer.start_as_current_span("batch", links=links):
        pass
    provider.shutdown()
    (batch,) = [e for e in events(collector.snapshot(), "X") if e["name"] == "batch"]
    ids = [f"{c.trace_id:032x}/{c.span_id:016x}" for c in (first.get_span_context(), second.get_span_context())]
    assert batch["args"]["links"] == ids
    assert batch["args"]["link_attributes"] == [{"why": "retry", "n": 2}, {}]


@pytest.mark.parametrize("pure_python", [False, True], ids=["c", "python"])
def test_a_span_of_more_events_and_links_than_the_limit_keeps_the_first_and_counts_the_rest(pure_python: bool) -> None:
    env = {**os.environ, "RINGTRACE_PURE_PYTHON": "1"} if pure_python else None
    collector = OtlpCollector("--otlp-max-span-events", "3", env=env)
    try:
        many = span("many", T0, T0 + 100, span_id=1)
        for i in range(5):
            many.events.add(name=f"e{i}", time_unix_nano=T0 + i)
        for i in range(4):
            many.links.add(trace_id=bytes([i + 1] * 16), span_id=bytes([i + 1] * 8))
        export = request_of(many, span("few", T0 + 200, T0 + 300, span_id=2))
        status, _, body = collector.export(export.SerializeToString())
        assert status == 200
        partial = response_of(body).partial_success
        assert partial.rejected_spans == 0  # (both spans are stored)
        assert "3 events and links of spans past --otlp-max-span-events=3 were not stored" in partial.error_message
        trace = collector.snapshot()
        assert sorted(e["name"] for e in events(trace, "X")) == ["few", "many"]
        assert sorted(e["name"] for e in events(trace, "i")) == ["e0", "e1", "e2"]
        (kept,) = [e for e in events(trace, "X") if e["name"] == "many"]
        assert len(kept["args"]["links"]) == 3
        (process,) = trace["otherData"]["processes"]
        assert process["rejected_events"] == 3
    finally:
        collector.stop()


@pytest.mark.parametrize("pure_python", [False, True], ids=["c", "python"])
def test_a_large_request_is_stored_a_piece_at_a_time_each_span_once_and_in_order(pure_python: bool) -> None:
    env = {**os.environ, "RINGTRACE_PURE_PYTHON": "1"} if pure_python else None
    collector = OtlpCollector(env=env)
    try:
        sent = [span(f"s{i}", T0 + 10 * i, T0 + 10 * i + 5, span_id=i + 1, **{"thread.id": 7}) for i in range(20_000)]
        sent[12_345].start_time_unix_nano = 0  # (one refused, counted once)
        body = request_of(*sent).SerializeToString()
        assert len(body) > 8 * PIECE_BYTES
        status, _, answer = collector.export(body)
        assert status == 200
        assert response_of(answer).partial_success.rejected_spans == 1
        assert collector.json("/stats")["otlp_items"]["/v1/traces"] == {"accepted": 19_999, "refused": 1}
        stored = [e["name"] for e in events(collector.snapshot(), "X")]
        assert stored == [f"s{i}" for i in range(20_000) if i != 12_345]
    finally:
        collector.stop()


def test_a_piece_that_is_not_protobuf_after_others_were_stored_refuses_the_rest_in_partial_success(
    collector: OtlpCollector,
) -> None:
    def body_of(spans: int) -> bytes:
        sent = [span(f"s{i}", T0 + 10 * i, T0 + 10 * i + 5, span_id=i + 1) for i in range(spans)]
        sent[-1].name = "\0"  # (replaced below by bytes that are not UTF-8: protobuf refuses them)
        body = request_of(*sent).SerializeToString()
        assert body.count(b"\x2a\x01\x00") == 1  # (the name field, 1 byte long, and nothing else)
        return body.replace(b"\x2a\x01\x00", b"\x2a\x01\xff")

    small = body_of(10)  # (read whole: refused whole, as before)
    status, _, _ = collector.export(small)
    assert status == 400
    large = body_of(6_000)
    assert len(large) > 2 * PIECE_BYTES
    status, _, answer = collector.export(large)
    assert status == 200
    partial = response_of(answer).partial_success
    assert 0 < partial.rejected_spans < 6_000 and "of the request were not read" in partial.error_message
    counted = collector.json("/stats")["otlp_items"]["/v1/traces"]
    assert counted == {"accepted": 6_000 - partial.rejected_spans, "refused": partial.rejected_spans}
    assert len(events(collector.snapshot(), "X")) == counted["accepted"]


def test_a_large_logs_request_is_stored_a_piece_at_a_time_each_record_once_and_in_order(
    collector: OtlpCollector,
) -> None:
    records = [LogRecord(time_unix_nano=T0 + i, body={"string_value": f"r{i}"}) for i in range(20_000)]
    body = logs_request(*records)
    assert len(body) > 3 * PIECE_BYTES
    status, _, answer = collector.export(body, path="/v1/logs")
    assert status == 200 and not ExportLogsServiceResponse.FromString(answer).HasField("partial_success")
    assert collector.json("/stats")["otlp_items"]["/v1/logs"] == {"accepted": 20_000, "refused": 0}
    messages = [e["name"] for e in events(collector.snapshot(), "i") if "priority" in e["args"]]
    assert messages == [f"r{i}" for i in range(20_000)]


def test_a_request_read_in_pieces_of_which_none_is_stored_as_a_later_one_is_not_protobuf_is_a_400(
    collector: OtlpCollector,
) -> None:
    sent = [span(f"s{i}", T0 + 10 * i, T0 + 10 * i + 5, span_id=i + 1) for i in range(6_000)]
    for each in sent:
        each.start_time_unix_nano = 0  # (refused as read: no start)
    sent[-1].name = "\0"
    body = request_of(*sent).SerializeToString()
    assert body.count(b"\x2a\x01\x00") == 1 and len(body) > 2 * PIECE_BYTES
    # a 503 would have the exporter send it again until its timeout, each time refused the same way
    status, _, answer = collector.export(body.replace(b"\x2a\x01\x00", b"\x2a\x01\xff"))
    assert status == 400, answer
    counted = collector.json("/stats")["otlp_items"]["/v1/traces"]
    assert counted == {"accepted": 0, "refused": 6_000}
