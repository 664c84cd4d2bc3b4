"""OTLP metrics as counters: each data point of a gauge or a sum is a counter value at its time, on its process's
``metrics`` track, named after the metric (and its data point's attributes, so that each series is a line of its
own). Histograms, exponential histograms and summaries have no counter to become: their data points are refused in
``partial_success``, with the reason."""

from __future__ import annotations

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, NumberDataPoint
from ringtrace.client.wire.model import COUNTER
from ringtrace.collector.ingest.otlp.resources import ProcessEvents, attributes_of, process_of

__all__ = ["metrics_by_process"]


def metrics_by_process(request: ExportMetricsServiceRequest) -> list[ProcessEvents]:
    """The request's gauge and sum data points, per process, as counter values."""
    processes: dict[str, ProcessEvents] = {}
    for resource_metrics in request.resource_metrics:
        process = process_of(resource_metrics.resource, processes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                _add_metric(process, metric)
    return list(processes.values())


def _add_metric(process: ProcessEvents, metric: Metric) -> None:
    which = metric.WhichOneof("data")
    if which in ("gauge", "sum"):
        for point in getattr(metric, which).data_points:
            process.items += 1
            _add_point(process, metric.name, point)
        return
    points = len(getattr(metric, which).data_points) if which is not None else 0
    process.items += points
    for _ in range(points):
        process.reject(f"metric {metric.name!r:.60}: a {which} has no counter to become (only gauges and sums do)")


def _add_point(process: ProcessEvents, name: str, point: NumberDataPoint) -> None:
    if not point.time_unix_nano:
        process.reject(f"metric {name!r:.60}: a data point without time_unix_nano")
        return
    value = point.as_double if point.WhichOneof("value") == "as_double" else point.as_int
    attributes = attributes_of(point.attributes)
    series = name if not attributes else f"{name} {{{', '.join(f'{k}={v}' for k, v in sorted(attributes.items()))}}}"
    process.add("metrics", COUNTER, series, point.time_unix_nano, point.time_unix_nano, {"value": value})
