"""The bounds on what one OTLP request holds (``request_shape.py``): counted before it is read, each at its bound."""

from __future__ import annotations

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint
from ringtrace.collector.ingest.otlp.answers import BadRequest
from ringtrace.collector.ingest.otlp.request_shape import (
    MAX_ITEMS,
    MAX_RESOURCES,
    MAX_SCOPES,
    check_json_shape,
    check_shape,
)


def test_each_bound_is_held_to_the_last_entry_and_refused_one_past_it() -> None:
    at_bound = ExportTraceServiceRequest()
    for _ in range(MAX_RESOURCES):
        at_bound.resource_spans.add()
    check_shape(at_bound.SerializeToString(), "spans")
    check_json_shape(json_format.MessageToDict(at_bound), "spans")
    at_bound.resource_spans.add()
    with pytest.raises(BadRequest, match=f"more than {MAX_RESOURCES} resources") as refused:
        check_shape(at_bound.SerializeToString(), "spans")
    assert refused.value.status == 413
    logs = ExportLogsServiceRequest()
    scopes = [logs.resource_logs.add() for _ in range(2)]
    for resource in scopes:
        for _ in range(MAX_SCOPES // 2):
            resource.scope_logs.add()
    check_shape(logs.SerializeToString(), "log records")
    scopes[1].scope_logs.add()
    with pytest.raises(BadRequest, match=f"more than {MAX_SCOPES} scopes"):
        check_shape(logs.SerializeToString(), "log records")
    with pytest.raises(BadRequest, match=f"more than {MAX_SCOPES} scopes"):
        check_json_shape(json_format.MessageToDict(logs), "log records")


def test_a_metrics_data_points_count_as_its_items_as_it_does() -> None:
    metrics = ExportMetricsServiceRequest()
    scope = metrics.resource_metrics.add().scope_metrics.add()
    points = [NumberDataPoint(as_int=1)] * (MAX_ITEMS - 1)
    scope.metrics.append(Metric(name="m", gauge=Gauge(data_points=points)))
    check_shape(metrics.SerializeToString(), "data points")
    scope.metrics.add()
    with pytest.raises(BadRequest, match=f"more than {MAX_ITEMS} metrics and data points"):
        check_shape(metrics.SerializeToString(), "data points")
    with pytest.raises(BadRequest, match=f"more than {MAX_ITEMS} metrics and data points"):
        check_json_shape(json_format.MessageToDict(metrics), "data points")


@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x0a\x05ab", b"\x0b", b"\x0a\x80"])
def test_what_is_not_protobuf_is_left_to_the_decoder_to_refuse(body: bytes) -> None:
    check_shape(body, "spans")
