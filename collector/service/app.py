"""The collector service: its parts, composed on one event loop, started and stopped in order (its configuration:
``config.py``).

- ``servers.py``: the ingest TCP server and the HTTP API's server, with TLS;
- ``snapshots.py``: pinned views of the store (snapshots and pops after a flush round trip, tails, ``/sources``);
- ``process_control.py``: selecting, prioritising, clearing and forgetting the known processes;
- ``housekeeping.py``: the timers (forgetting, idle connections, rates, the loop-lag watch, interval syncs);
- ``status.py``: what ``/healthz``, ``/stats`` and ``/metrics`` report;
- ``incident_dir.py``: where saved incidents are kept (``IncidentFiles``; ``IncidentObjects`` with ``--jetstream``),
  which the HTTP API lists and serves;
- where what is received is kept (``store/backend.py``): ``local_store.py``, in memory or a data dir (recovered at
  start, synced: ``data_dir.py``), or ``jetstream_tier.py``, a JetStream stream shared by a fleet of collectors.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ringtrace.collector.auth import Authenticator
from ringtrace.collector.http.api import make_app
from ringtrace.collector.http.guard import HttpGuard
from ringtrace.collector.http.metrics import CollectorMetrics
from ringtrace.collector.incidents.counts import IncidentCounts
from ringtrace.collector.incidents.incident_store import IncidentStore
from ringtrace.collector.incidents.rules import Scope
from ringtrace.collector.ingest.connection import IngestProtocol
from ringtrace.collector.ingest.traffic import Traffic
from ringtrace.collector.ingest.turns import DecodeTurns, ReadTurns
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.inventory import RateSampler
from ringtrace.collector.read.pairing import Pairing
from ringtrace.collector.read.pool import reader_pool
from ringtrace.collector.read.rows import Row
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.read.tail import Tail
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.service.housekeeping import Housekeeping
from ringtrace.collector.service.incident_dir import close_incidents, incident_files, open_incidents
from ringtrace.collector.service.incidents_setup import IncidentsSetup
from ringtrace.collector.service.jetstream_tier import JetStreamTier
from ringtrace.collector.service.local_store import LocalStore
from ringtrace.collector.service.loop_lag import Activity, LoopLag
from ringtrace.collector.service.process_control import FORGOTTEN_PROCESS_BYTES, ProcessControl
from ringtrace.collector.service.servers import Servers, host_port
from ringtrace.collector.service.snapshots import Snapshots
from ringtrace.collector.service.status import Status
from ringtrace.collector.store.backend import StoreBackend
from ringtrace.collector.store.clocks import own_boot_id
from ringtrace.collector.store.heap import HeapTrimmer
from ringtrace.collector.store.processes import ProcessRecord, Registry
from ringtrace.collector.store.ring import Counts
from ringtrace.collector.store.segment_files import DataDir
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.version import __version__

if TYPE_CHECKING:
    from aiohttp import web
    from ringtrace.collector.ingest.otlp.receiver import OtlpReceiver

__all__ = ["FORGOTTEN_PROCESS_BYTES", "Backend", "Collector", "CollectorConfig"]

log = logging.getLogger("ringtrace.collector")

_DAY_NS = 86_400 * 10**9

#: How long a stopping collector waits for its clients to flush.
STOP_FLUSH_TIMEOUT_S = 1.0

#: Where the collector keeps what it receives, with the read room's types (``store/backend.py``).
Backend = StoreBackend[EventFilter, SnapshotView, Tail, Row]


class EveryConnection:
    """The clients' connections and the OTLP receiver's loopback ones, as one live collection (iterated anew each
    time): the native ones are counted against ``--max-connections``, the others against ``--otlp-max-processes``."""

    def __init__(self, *members: set[IngestProtocol]) -> None:
        self._members = members

    def __iter__(self) -> Iterator[IngestProtocol]:
        return itertools.chain.from_iterable(self._members)


class Collector:
    """Ingest listener + store + HTTP API, on one event loop.

    What ingest connections read of it (``IngestSink``: the limits, the registry, the store, the set of connections,
    the traffic counters) are its attributes; the rest is in its parts, which the HTTP API reaches through it. Where
    what is received is kept is its ``backend`` (``--jetstream``: a stream; else its own store), which decides what
    differs between the two.

    Raises:
        ConfigError: the capacity cannot hold two segments of the largest frame; the data dir is not writable.
    """

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.version = __version__
        self.servers = Servers(config)  # (first: a bad TLS file stops nothing begun)
        self.auth = Authenticator(config.token)
        _warn_process_capacity(config)
        self.data_dir = DataDir(config.data_dir, config.fsync) if config.data_dir is not None else None
        #: Reading what is stored: it was checked on the way in, perhaps by a run with other limits (a data dir).
        self.stored_limits = Limits(
            2**31, 2**32 - 1, 2**32 - 1, 2**32 - 1, max_stacks=2**32 - 1, max_stack_frames=2**32 - 1
        )
        self.max_connections = config.max_connections
        self.max_connections_per_address = config.max_connections_per_address or max(config.max_connections // 2, 1)
        self.connections_by_address: dict[str, int] = {}
        self.handshake_timeout_s = config.handshake_timeout_s
        self.snapshot_flush_timeout_s = config.snapshot_flush_timeout_s
        #: What ``ts`` 0 means in every snapshot: midnight UTC of the day before the collector started.
        self.origin_ns = (time.time_ns() // _DAY_NS - 1) * _DAY_NS
        self.registry = Registry(own_boot_id())
        self.connections: set[IngestProtocol] = set()
        #: The OTLP receiver's loopback connections, one per resource with a stream: no client's connection slot.
        self.otlp_connections: set[IngestProtocol] = set()
        #: Both, for what is done to every stream: sealed, closed when idle, closed at the stop.
        self.every_connection = EveryConnection(self.connections, self.otlp_connections)
        #: Time of each loop turn for decoding table frames, shared by every connection.
        self.decode_turns = DecodeTurns()
        #: Busy connections in line to read on, shared by every connection.
        self.read_turns = ReadTurns()
        #: Memory freed in many small objects (connections' tables, forgotten processes), given back to the OS.
        self.heap = HeapTrimmer()
        self.traffic = Traffic()
        self.rates = RateSampler()
        #: ``--jetstream``: the stream the store publishes to, and reads of the fleet from it; else the store.
        self.backend: Backend = JetStreamTier(config, self) if config.jetstream else LocalStore(config, self)
        #: What ingest writes into (with ``--jetstream``: segments on their way to the stream).
        self.store = self.backend.store
        self.limits = self.backend.ingest_limits(_ingest_limits(config))
        self.metrics = CollectorMetrics(self)
        self.http_guard = HttpGuard(config.http_timeout_s, config.max_http_connections)
        #: The OTLP listener's connections, apart from the API's: a flood of exporters leaves ``/healthz`` answering.
        self.otlp_guard = HttpGuard(config.http_timeout_s, config.otlp_max_connections, "OTLP", "otlp_max_connections")
        #: Watched finely while the collector is at work, coarsely while it idles (``loop_lag.py``).
        self.loop_lag = LoopLag(
            self.metrics.loop_lag_seconds.observe, Activity(self.traffic, (self.http_guard, self.otlp_guard))
        )
        self.otlp: OtlpReceiver | None = None
        #: Where stored segments are read for snapshots and pops (``read/pool.py``).
        self.readers = reader_pool()
        #: Saved incidents (``--incidents-dir``), and what the incidents did since start (the engine counts).
        tier = self.backend if isinstance(self.backend, JetStreamTier) else None
        jetstream = (lambda: tier.jetstream) if tier is not None else None  # (with --jetstream: the fleet's bucket)
        self.incident_files: IncidentStore = incident_files(config, jetstream)
        self.incident_counts = IncidentCounts()
        self._compose(config)

    def _compose(self, config: CollectorConfig) -> None:
        """The parts, over the shared state above."""
        self.snapshots = Snapshots(
            self.store,
            self.registry,
            self.connections,
            self.rates,
            self.stored_limits,
            self.origin_ns,
            config.max_snapshots,
        )
        self.process_control = ProcessControl(
            self.registry,
            self.store,
            self.connections,
            self.heap,
            config.forget_after_s,
            forgotten=self.snapshots.forget_left_open,
        )
        self.housekeeping = Housekeeping(
            self.store,
            self.every_connection,
            self.rates,
            self.heap,
            self.process_control.forget_idle,
            config.forget_after_s,
            config.idle_timeout_s,
        )
        facts = {
            "collector_version": self.version,
            "clock_origin_wall_ns": self.origin_ns,
            "policy": self.store.policy,
            "data_dir": config.data_dir,
            "store": self.backend.kind,
        }
        self.status = Status(
            facts,
            self.store,
            self.registry,
            self.connections,
            self.otlp_connections,
            self.traffic,
            self.snapshots,
            self.http_guard,
            self.auth,
            self.loop_lag,
        )
        #: Rules watched on what is stored, their windows captured and saved (a rule file with an error: ConfigError).
        self.incidents = IncidentsSetup(config, self.store, self.registry, self.snapshots, self.incident_files,
                                        self.incident_counts, self.stored_limits,
                                        self.backend.view if config.jetstream else None)  # fmt: skip

    async def start(self) -> None:
        """Make what is stored readable, bind both listeners and log one line each with the port actually bound."""
        config = self.config
        await self.backend.start()
        self.servers.log_exposure(self.auth.required)
        await self.servers.open_ingest(lambda: IngestProtocol(self), self.handshake_timeout_s)
        app = make_app(self, self.auth.middleware() if self.auth.required else None)
        await self.servers.open_http(app, self.http_guard)
        if config.otlp_http is not None or config.otlp_grpc is not None:
            from ringtrace.collector.ingest.otlp.receiver import OtlpReceiver  # (protobuf loads only if asked for)

            self.otlp = OtlpReceiver(
                self,
                config.token,
                config.otlp_max_body_bytes,
                config.otlp_max_processes,
                self.otlp_connections,
                config.http_timeout_s,
                config.otlp_max_span_events,
            )
            if config.otlp_http is not None:
                await self.servers.open_otlp(self._otlp_app(self.otlp), self.otlp_guard)
            if config.otlp_grpc is not None:
                await self.servers.open_otlp_grpc(self.otlp, self.auth)
        self.backend.log_setup(self.limits)
        await open_incidents(self.incident_files)
        await self.incidents.start(fleet=config.jetstream is not None)
        self.housekeeping.start(self.loop_lag.run, *self.backend.timers())

    def _otlp_app(self, receiver: OtlpReceiver) -> web.Application:
        from aiohttp import web

        auth = [self.auth.middleware()] if self.auth.required else []
        app = web.Application(client_max_size=receiver.max_body_bytes, middlewares=[self.otlp_guard.middleware, *auth])
        app.add_routes(receiver.routes())
        return app

    async def stop(self) -> None:
        await self.incidents.stop()  # (first: captures under way write what they hold, and no crash fires)
        await self.housekeeping.stop()
        self.servers.stop_otlp()
        if self.otlp is not None:
            self.otlp.stopping = True
        if self.servers.stop_ingest():
            # Clients are asked to flush first: what they sent is then acknowledged, and none of it is in doubt.
            await self.snapshots.flush_clients(STOP_FLUSH_TIMEOUT_S)
            for connection in list(self.every_connection):
                connection.close()
            await self.servers.ingest_closed()
        await self.backend.stop()
        await self.servers.close_http()
        self.readers.shutdown(wait=True, cancel_futures=True)  # (a step runs 50 ms at most)
        await self.backend.close()
        close_incidents(self.incident_files)

    # What the HTTP API (``CollectorAPI``), the metrics (``MetricsState``) and callers use.

    @property
    def tls(self) -> ssl.SSLContext | None:
        return self.servers.tls

    @property
    def tcp_address(self) -> tuple[str, int] | None:
        return self.servers.tcp_address

    @property
    def http_address(self) -> tuple[str, int] | None:
        return self.servers.http_address

    @property
    def max_snapshots(self) -> int:
        return self.snapshots.max_snapshots

    def begin_snapshot(self) -> bool:
        """Take a slot for a snapshot being served; False: all ``max_snapshots`` are taken."""
        return self.snapshots.begin_snapshot()

    def end_snapshot(self) -> None:
        self.snapshots.end_snapshot()

    def tail_begun(self) -> None:
        self.snapshots.tail_begun()

    def tail_ended(self) -> None:
        self.snapshots.tail_ended()

    @property
    def pop_left_open(self) -> Pairing:
        return self.snapshots.pop_left_open

    def keep_pop_left_open(self, left_open: Pairing) -> None:
        """What a pop delivered whole left open, for the next pop."""
        self.snapshots.keep_left_open(left_open)

    @property
    def pop_lock(self) -> asyncio.Lock:
        return self.snapshots.pop_lock

    async def snapshot(self, flush_timeout_s: float, selected: EventFilter | None = None) -> SnapshotView:
        """Ask connected clients to flush (waiting at most ``flush_timeout_s``), then freeze what is stored (with
        ``--jetstream``: read what the stream holds, of the processes ``selected`` may select)."""
        return await self.backend.view(await self.snapshots.flush_clients(flush_timeout_s), selected)

    async def pop(self, flush_timeout_s: float, selected: EventFilter) -> SnapshotView:
        """``POST /pop``: a snapshot of the processes ``selected``, and what they held removed from the store at the
        same instant (counted as cleared): nothing stored in between is lost, and nothing is popped twice. The
        caller holds ``pop_lock`` while it exports the view, with ``pop_left_open``. With ``--jetstream``: what the
        stream holds of them, the messages read purged from it."""
        return await self.backend.pop(await self.snapshots.flush_clients(flush_timeout_s), selected)

    async def sources(self, selected: EventFilter) -> dict[str, Any]:
        """``GET /sources``: every process ``selected`` and its tracks (``inventory.py``); with ``--jetstream``, every
        process the stream holds, and the fleet's totals."""
        return await self.backend.sources(selected)

    async def tail_step(self, tail: Tail) -> list[Row]:
        """The rows stored since the tail's last step (``tail.py``), read on a worker thread; with ``--jetstream``,
        of the messages the stream stored since (``fleet_tail.py``)."""
        return await self.backend.tail_step(tail)

    def set_priority(self, selected: EventFilter, priority: str, timeline: str = "") -> list[ProcessRecord]:
        """Send SET_PRIORITY to every connection of the processes ``selected``; returns the processes it reached."""
        return self.process_control.set_priority(selected, priority, timeline)

    async def clear(self, selected: EventFilter) -> tuple[list[ProcessRecord], int]:
        """Remove what the processes ``selected`` hold (counted as cleared); returns them and the events removed. With
        ``--jetstream``: purged from the stream, whichever collector they are connected to."""
        return await self.backend.clear(selected)

    def process_crashed(self, process: ProcessRecord) -> None:
        """A connection of ``process`` ended by the peer without a GOODBYE: the incidents' crash rules fire."""
        self.incidents.engine.crashed(process)

    async def fire_incident(
        self,
        reason: str,
        *,
        scope: Scope,
        before_ns: int,
        after_ns: int,
        selected: EventFilter | None,
        args: dict[str, Any] | None = None,
    ) -> str:
        """``POST /incidents``: an incident now, of the processes ``selected`` (all, if None), its trigger event
        carrying ``args``; returns its id."""
        processes = self.process_control.matching(selected) if selected is not None else None
        return await self.incidents.engine.fire_by_hand(
            reason, scope=scope, before_ns=before_ns, after_ns=after_ns, selected=selected, args=dict(args or {}),
            processes=processes,
        )  # fmt: skip

    def incidents_under_way(self) -> dict[str, dict[str, Any]]:
        """The records of the incidents being captured here (``pending``), by id, each with ``ready_wall_ns``."""
        return self.incidents.engine.under_way

    def health(self) -> dict[str, Any]:
        """Liveness and a few gauges."""
        return self.status.health()

    def not_ready(self) -> str | None:
        """Why the store cannot take events now (``/readyz``: 503); None: it can."""
        return self.backend.not_ready()

    def stats(self) -> dict[str, Any]:
        """Collector totals: traffic, store, every loss counter (forgotten processes included), the ingest address
        as bound, and what the OTLP receiver took and refused, by signal (``otlp_items``)."""
        stats = self.status.stats()
        if self.tcp_address is not None:  # (what clients connect to: the web view's hint says it)
            stats["ingest_address"] = host_port(self.tcp_address)
        incidents = self.incident_totals()
        stats["incidents"] = {
            "directory": self.incident_files.where,
            **{name: sum(getattr(incidents, name).values()) for name in ("fired", "saved", "suppressed", "failed")},
            "removed": incidents.removed,
        }
        stats["incident_engine"] = self.incidents.engine.stats()
        if self.otlp is not None:
            stats["otlp_items"] = {path: {"accepted": self.otlp.accepted[path], "refused": self.otlp.refused[path]}
                                   for path in self.otlp.accepted}  # fmt: skip
            stats["otlp_requests_refused"] = {
                str(status): n for status, n in sorted(self.otlp.refused_requests.items())
            }
            stats["otlp_connections"] = len(self.otlp_guard.connections)
            stats["otlp_connections_timed_out"] = self.otlp_guard.timed_out
            stats["otlp_connections_refused"] = self.otlp_guard.refused
            stats["otlp_requests_malformed"] = self.otlp_guard.request_log.malformed
            in_flight = self.otlp.in_flight
            stats["otlp_bytes_in_flight"] = in_flight.held
            stats["otlp_bytes_in_flight_peak"] = in_flight.peak
            stats["otlp_max_bytes_in_flight"] = in_flight.most
        return stats

    async def fleet_stats(self) -> dict[str, Any]:
        """With ``--jetstream``: what this collector published and the fleet's totals in the stream; else nothing."""
        return await self.backend.stats()

    def otlp_items(self) -> dict[tuple[str, str], int]:
        """Items (spans, log records, data points) the OTLP receiver took and refused, by signal path and outcome."""
        if self.otlp is None:
            return {}
        accepted, refused = self.otlp.accepted, self.otlp.refused
        return {
            **{(path, "accepted"): n for path, n in accepted.items()},
            **{(path, "refused"): n for path, n in refused.items()},
        }

    def published_counters(self) -> dict[str, int] | None:
        """With ``--jetstream``: what this collector published, for ``/metrics``; else None."""
        return self.backend.published_counters()

    def incident_totals(self) -> IncidentCounts:
        """What the incidents did since start; the retention's removals as the files count them."""
        return replace(self.incident_counts, removed=self.incident_files.removed)

    def metric_gauges(self) -> dict[str, float]:
        return self.status.metric_gauges()

    def metric_totals(self) -> tuple[Counts, dict[str, int]]:
        """The store's counts and the clients' own loss counters, over every process (forgotten ones included)."""
        return self.status.metric_totals()


def _ingest_limits(config: CollectorConfig) -> Limits:
    """What a client's stream may declare (``--max-frame-bytes``, ``--max-strings``, ...), as WELCOME states it."""
    return Limits(
        config.max_frame_bytes,
        config.max_strings,
        config.max_tracks,
        config.max_kinds,
        config.max_string_bytes,
        config.max_schema_bytes,
        max_stacks=config.max_stacks,
        max_stack_frames=config.max_stack_frames,
    )


def _warn_process_capacity(config: CollectorConfig) -> None:
    if config.process_capacity_bytes is not None and config.process_capacity_bytes > config.capacity_bytes:
        log.warning(
            "--process-capacity %d is more than --capacity %d: one process may hold up to the capacity",
            config.process_capacity_bytes,
            config.capacity_bytes,
        )
