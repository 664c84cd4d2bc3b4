"""``GET /metrics``: the collector's counters in Prometheus' text format, through prometheus-client.

Counters and gauges are read from the collector when Prometheus scrapes (a custom collector), so ingest keeps no
second set of books; snapshot durations are a histogram observed by the HTTP handlers, the event loop's lag one
observed by its monitor (``loop_lag.py``). Each ``Collector`` has a
registry of its own, so that several in one process (tests) do not clash.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as _MetricsSource
from ringtrace.collector.incidents.counts import IncidentCounts
from ringtrace.collector.ingest.traffic import Traffic
from ringtrace.collector.store.ring import Counts

__all__ = ["CONTENT_TYPE", "CollectorMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: What the store lost, by reason: ``Counts`` field prefixes (cleared, removed on request, is not a loss).
_STORE_LOSSES = ("overwritten", "capped", "discarded")
#: What clients lost, by reason: ``Stats`` fields as totals name them.
_CLIENT_LOSSES = {
    "client_dropped_events": "client_dropped",
    "label_overflow_events": "label_overflow",
    "rejected_events": "rejected",
}


class MetricsState(Protocol):
    """What the metrics read of the collector at each scrape."""

    @property
    def traffic(self) -> Traffic: ...

    def metric_gauges(self) -> dict[str, float]: ...

    def metric_totals(self) -> tuple[Counts, dict[str, int]]: ...

    def otlp_items(self) -> dict[tuple[str, str], int]: ...

    def published_counters(self) -> dict[str, int] | None: ...

    def incident_totals(self) -> IncidentCounts: ...


class CollectorMetrics:
    """The registry ``/metrics`` serves, and the snapshot histogram the handlers observe."""

    def __init__(self, state: MetricsState) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Scrape(state))
        self.snapshot_seconds = Histogram(
            "ringtrace_snapshot_duration_seconds",
            "Time to serve a snapshot, from the request to the last byte written, by format",
            ["format"],
            registry=self.registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
        )
        self.loop_lag_seconds = Histogram(
            "ringtrace_event_loop_lag_seconds",
            "How much later than due the event loop ran a timer, looked at every 5 ms while the collector is at work "
            "(a stall of S seconds shows as S - 0.005 to S), every 250 ms while it idles",
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Scrape(_MetricsSource):
    def __init__(self, state: MetricsState) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        state = self._state
        traffic = state.traffic
        yield CounterMetricFamily(
            "ringtrace_ingest_bytes", "Bytes received from clients (every frame)", value=traffic.bytes_received
        )
        connections = CounterMetricFamily(
            "ringtrace_connections", "Client connections, by how they were taken", labels=["outcome"]
        )
        connections.add_metric(["accepted"], traffic.connections_accepted)
        connections.add_metric(["refused"], traffic.connections_refused)
        connections.add_metric(["protocol_error"], traffic.protocol_errors)
        connections.add_metric(["unauthenticated"], traffic.authentication_failures)
        connections.add_metric(["too_slow"], traffic.too_slow)
        connections.add_metric(["tables_refused"], traffic.tables_refused)
        yield connections
        yield CounterMetricFamily(
            "ringtrace_throttled_reads",
            "Times a connection's reading paused: control frames (FLUSH, STATS) past 1000 a second",
            value=traffic.throttled,
        )
        store, client = state.metric_totals()
        yield CounterMetricFamily("ringtrace_received_events", "Events the store received", value=store.received_events)
        yield CounterMetricFamily(
            "ringtrace_received_event_bytes", "Bytes of EVENTS frames the store received", value=store.received_bytes
        )
        lost = CounterMetricFamily(
            "ringtrace_lost_events",
            "Events lost: by the store (overwritten, capped, discarded) or by clients (client_dropped, label_overflow, "
            "rejected)",
            labels=["reason"],
        )
        for reason in _STORE_LOSSES:
            lost.add_metric([reason], getattr(store, f"{reason}_events"))
        for name, reason in _CLIENT_LOSSES.items():
            lost.add_metric([reason], client[name])
        yield lost
        yield CounterMetricFamily(
            "ringtrace_cleared_events", "Events removed on request (POST /clear, POST /pop)", value=store.cleared_events
        )
        yield CounterMetricFamily(
            "ringtrace_client_unacknowledged_events",
            "Events clients sent on connections that broke before the collector acknowledged them: lost if no "
            "collector stored them, maybe stored (not in ringtrace_lost_events)",
            value=client["client_unacknowledged_events"],
        )
        otlp = state.otlp_items()
        if otlp:
            items = CounterMetricFamily(
                "ringtrace_otlp_items",
                "Spans, log records and data points the OTLP receiver took (accepted: stored) or refused, by signal",
                labels=["signal", "outcome"],
            )
            for (path, outcome), count in otlp.items():
                items.add_metric([path.rsplit("/", 1)[-1], outcome], count)
            yield items
        published = state.published_counters()  # (``--jetstream``: what this collector published)
        if published is not None:
            yield from _jetstream_metrics(published)
        yield from _incident_metrics(state.incident_totals())
        for name, value in state.metric_gauges().items():
            yield GaugeMetricFamily(f"ringtrace_{name}", _GAUGES[name], value=value)
        yield GaugeMetricFamily("ringtrace_stored_events", "Events stored now", value=store.stored_events)


#: What became of the rules' firings (``IncidentCounts`` fields).
_INCIDENT_OUTCOMES = ("fired", "saved", "suppressed", "failed")


def _incident_metrics(counts: IncidentCounts) -> Iterator[Metric]:
    """Incidents since start, by rule and outcome; and those the retention removed."""
    incidents = CounterMetricFamily(
        "ringtrace_incidents",
        "Incidents by rule and outcome: fired (within the rule's limit), saved, suppressed (past its max_per_minute), "
        "failed (not saved; its record says why)",
        labels=["rule", "outcome"],
    )
    for outcome in _INCIDENT_OUTCOMES:
        for rule, count in sorted(getattr(counts, outcome).items()):
            incidents.add_metric([rule, outcome], count)
    yield incidents
    yield CounterMetricFamily(
        "ringtrace_incidents_removed",
        "Saved incidents removed by the retention (--incidents-max-count, --incidents-max-bytes)",
        value=counts.removed,
    )


#: ``--jetstream``'s metrics: name, help, the key in the publisher's counters, and whether it is a gauge.
_JETSTREAM_METRICS = (
    ("published_messages", "Segments the JetStream stream acknowledged", "messages", False),
    ("published_bytes", "Payload bytes of the segments the stream acknowledged", "bytes", False),
    ("published_events", "Events in the segments the stream acknowledged", "events", False),
    ("publish_retries", "Publishes retried (no answer from the stream)", "retries", False),
    ("refused_events", "Events in segments the stream refused (counted discarded)", "refused_events", False),
    ("waiting_events", "Events sealed and not yet acknowledged by the stream", "waiting_events", True),
    ("failing", "1 while publishes to the stream fail and are retried", "failing", True),
)


def _jetstream_metrics(counters: dict[str, int]) -> Iterator[Metric]:
    """``--jetstream``: what this collector published. (The fleet's totals are the sums of every collector's.)"""
    for name, text, key, gauge in _JETSTREAM_METRICS:
        family = GaugeMetricFamily if gauge else CounterMetricFamily
        yield family(f"ringtrace_jetstream_{name}", text, value=counters[key])


_GAUGES = {
    "connections": "Client connections open (OTLP's streams not among them)",
    "otlp_streams": "OTLP resources with a stream open (at most --otlp-max-processes)",
    "processes": "Processes known (connected, or with something stored)",
    "held_bytes": "Bytes of the store's segments",
    "table_bytes": "Memory of the open connections' tables, counted against the capacity with the segments",
    "buffer_bytes": "Memory of the open connections' own read buffers (not counted against the capacity)",
    "capacity_bytes": "What the store may hold (--capacity)",
    "segments": "Segments stored",
    "snapshots_running": "Snapshots being served",
    "tails_running": "Live tails (GET /stream) open",
    "uptime_seconds": "Seconds since the collector started",
}
