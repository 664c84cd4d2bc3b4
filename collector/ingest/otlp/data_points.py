"""OTLP metrics as counters: each data point of a gauge or a sum is a counter value at its time, on its process's
``metrics`` track, named after the metric (and its data point's attributes, so that each series is a line of its
own).

A histogram's or an exponential histogram's data point is two counter values: ``NAME.count``, its count, and
``NAME.sum``, its sum (when it has one); both with the attributes' series after the name (``latency.count
{route=/a}``). The count's ``histogram`` arg holds the buckets as sent: ``explicit_bounds`` and ``bucket_counts`` for
a histogram; ``scale``, ``zero_count`` and the ``positive``/``negative`` buckets' ``offset`` and ``bucket_counts`` for
an exponential one (bucket ``i`` counts values in (base^(offset+i), base^(offset+i+1)], base = 2^(2^-scale)); ``min``
and ``max`` where sent. (One arg that is not a number: viewers draw every number of a counter's args as a line.) A
summary's data points have no counter to become: they are refused in ``partial_success``, with the reason, as is a
data point whose value, sum, min or max is NaN or infinite (no export has a number for it: JSON's would be null).
"""

from __future__ import annotations

import math
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    ExponentialHistogramDataPoint,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
)
from ringtrace.collector.ingest.otlp.resources import ProcessEvents, attributes_of, late_time, process_of
from ringtrace.wire.model import COUNTER

__all__ = ["metrics_by_process"]


def metrics_by_process(request: ExportMetricsServiceRequest) -> list[ProcessEvents]:
    """The request's gauge, sum and histogram data points, per process, as counter values."""
    processes: dict[str, ProcessEvents] = {}
    for resource_metrics in request.resource_metrics:
        process = process_of(resource_metrics.resource, processes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                _add_metric(process, metric)
    return list(processes.values())


def _add_metric(process: ProcessEvents, metric: Metric) -> None:
    which = metric.WhichOneof("data")
    points = getattr(metric, which).data_points if which is not None else ()
    for point in points:
        process.items += 1
        if which == "summary":
            process.reject(f"metric {metric.name!r:.60}: a summary has no counter to become")
        elif not point.time_unix_nano:
            process.reject(f"metric {metric.name!r:.60}: a data point without time_unix_nano")
        elif late := late_time(f"metric {metric.name!r:.60}: a data point", time_unix_nano=point.time_unix_nano):
            process.reject(late)
        elif not_finite := _not_finite(point):
            process.reject(f"metric {metric.name!r:.60}: a data point's {not_finite} is not a finite number")
        elif which in ("gauge", "sum"):
            _add_number(process, metric.name, point)
        else:
            _add_histogram(process, metric.name, point)


def _not_finite(point: NumberDataPoint | HistogramDataPoint | ExponentialHistogramDataPoint) -> str:
    """Which of the point's values is NaN or infinite (``as_double``, ``sum``, ``min``, ``max``), else ''."""
    if isinstance(point, NumberDataPoint):
        value = point.as_double
        return f"as_double {value}" if point.WhichOneof("value") == "as_double" and not math.isfinite(value) else ""
    for name in ("sum", "min", "max"):
        if point.HasField(name) and not math.isfinite(getattr(point, name)):
            return f"{name} {getattr(point, name)}"
    return ""


def _add_number(process: ProcessEvents, name: str, point: NumberDataPoint) -> None:
    value = point.as_double if point.WhichOneof("value") == "as_double" else point.as_int
    process.add("metrics", COUNTER, _series(name, point), point.time_unix_nano, point.time_unix_nano, {"value": value})


def _add_histogram(
    process: ProcessEvents, name: str, point: HistogramDataPoint | ExponentialHistogramDataPoint
) -> None:
    histogram: dict[str, Any] = {}
    if isinstance(point, HistogramDataPoint):
        histogram["explicit_bounds"] = list(point.explicit_bounds)
        histogram["bucket_counts"] = list(point.bucket_counts)
    else:
        histogram["scale"], histogram["zero_count"] = point.scale, point.zero_count
        for side in ("positive", "negative"):
            buckets = getattr(point, side)
            if any(buckets.bucket_counts):  # (an SDK sends a side that counted nothing as [0])
                histogram[side] = {"offset": buckets.offset, "bucket_counts": list(buckets.bucket_counts)}
    for bound in ("min", "max"):
        if point.HasField(bound):
            histogram[bound] = getattr(point, bound)
    ts = point.time_unix_nano
    process.add(
        "metrics", COUNTER, _series(f"{name}.count", point), ts, ts, {"value": point.count, "histogram": histogram}
    )
    if point.HasField("sum"):
        process.add("metrics", COUNTER, _series(f"{name}.sum", point), ts, ts, {"value": point.sum})


def _series(name: str, point: NumberDataPoint | HistogramDataPoint | ExponentialHistogramDataPoint) -> str:
    """The counter of ``name`` and the point's attributes: a line of its own for each series."""
    attributes = attributes_of(point.attributes)
    return name if not attributes else f"{name} {{{', '.join(f'{k}={v}' for k, v in sorted(attributes.items()))}}}"
