"""What ``GET /healthz``, ``GET /stats`` and ``GET /metrics`` report: gauges and totals, read from the collector's
parts each time they are asked for (ingest keeps no second set of counters)."""

from __future__ import annotations

import time
from collections.abc import Collection, Sized
from typing import Any, Protocol

from ringtrace.collector.auth import Authenticator
from ringtrace.collector.http.guard import HttpGuard
from ringtrace.collector.ingest.traffic import Traffic
from ringtrace.collector.read.event_walk import client_counts, store_counts
from ringtrace.collector.service.loop_lag import LoopLag
from ringtrace.collector.service.snapshots import Snapshots
from ringtrace.collector.store.processes import Registry, stats_sum
from ringtrace.collector.store.ring import Counts, Store

__all__ = ["Status"]


class Connection(Protocol):
    @property
    def buffer_bytes(self) -> int:
        """Memory of its own read buffer."""


class Status:
    """The collector's gauges and loss counters, as the HTTP API reports them.

    Args:
        facts: what ``/stats`` reports first, as given: the version, the clock origin, the policy, the data dir.
        connections: the connected clients (counted, and their read buffers summed).
        otlp_connections: the OTLP receiver's loopback connections (counted apart: OTLP processes with a stream).
    """

    def __init__(
        self,
        facts: dict[str, Any],
        store: Store,
        registry: Registry,
        connections: Collection[Connection],
        otlp_connections: Sized,
        traffic: Traffic,
        snapshots: Snapshots,
        http_guard: HttpGuard,
        auth: Authenticator,
        loop_lag: LoopLag,
    ) -> None:
        self._facts = facts
        self._store = store
        self._registry = registry
        self._connections = connections
        self._otlp_connections = otlp_connections
        self._traffic = traffic
        self._snapshots = snapshots
        self._http_guard = http_guard
        self._auth = auth
        self._loop_lag = loop_lag
        self._started_s = time.monotonic()

    def health(self) -> dict[str, Any]:
        """Liveness and a few gauges."""
        store = self._store
        return {
            "status": "ok",
            "connections": len(self._connections),
            "otlp_streams": len(self._otlp_connections),
            "processes": len(self._registry.processes),
            "forgotten_processes": self._registry.forgotten_processes,
            "stored_events": store.stored_events,
            "stored_frames": store.stored_frames,
            "segments": store.segment_count,
            "held_bytes": store.held_bytes,
            "table_bytes": store.table_bytes,
            "buffer_bytes": self.buffer_bytes(),
            "used_bytes": store.used_bytes,
            "capacity_bytes": store.capacity_bytes,
            "event_loop_lag_max_ms": round(self._loop_lag.longest_s * 1000, 3),
            **{name: value for name, value in store.totals().as_dict().items() if name != "stored_events"},
        }

    def buffer_bytes(self) -> int:
        """Memory of the connections' own read buffers (besides the segments they read into), which the capacity
        does not count: ``READ_SIZE`` each, more only while a larger frame arrives."""
        return sum(connection.buffer_bytes for connection in self._connections)

    def stats(self) -> dict[str, Any]:
        """Collector totals: traffic, store, every loss counter (forgotten processes included)."""
        store_totals, client_totals = self.metric_totals()
        traffic = self._traffic
        return {
            **self._facts,
            **self.metric_gauges(),
            "process_capacity_bytes": self._store.process_capacity_bytes,
            "used_bytes": self._store.used_bytes,
            "stored_frames": self._store.stored_frames,
            "forgotten_processes": self._registry.forgotten_processes,
            "ingest_bytes": traffic.bytes_received,
            "connections_accepted": traffic.connections_accepted,
            "connections_refused": traffic.connections_refused,
            "connections_unauthenticated": traffic.authentication_failures,
            "connections_too_slow": traffic.too_slow,
            "protocol_errors": traffic.protocol_errors,
            "connections_tables_refused": traffic.tables_refused,
            "throttled_reads": traffic.throttled,
            "http_connections_timed_out": self._http_guard.timed_out,
            "http_connections_refused": self._http_guard.refused,
            "http_requests_malformed": self._http_guard.request_log.malformed,
            "http_unauthorized": self._auth.http_refusals,
            **store_counts(store_totals),
            **client_totals,
        }

    def metric_gauges(self) -> dict[str, float]:
        store = self._store
        return {
            "connections": len(self._connections),
            "otlp_streams": len(self._otlp_connections),
            "processes": len(self._registry.processes),
            "held_bytes": store.held_bytes,
            "table_bytes": store.table_bytes,
            "buffer_bytes": self.buffer_bytes(),
            "capacity_bytes": store.capacity_bytes,
            "segments": store.segment_count,
            "snapshots_running": self._snapshots.running,
            "tails_running": self._snapshots.tails_running,
            "uptime_seconds": round(time.monotonic() - self._started_s, 3),
        }

    def metric_totals(self) -> tuple[Counts, dict[str, int]]:
        """The store's counts and the clients' own loss counters, over every process (forgotten ones included)."""
        client = self._registry.forgotten_stats
        for process in self._registry.processes.values():
            client = stats_sum(client, process.reported_stats)
        return self._store.totals(), client_counts(client)
