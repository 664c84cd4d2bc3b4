"""The collector service: its parts, composed on one event loop, started and stopped in order (its configuration:
``config.py``).

- ``servers.py``: the ingest TCP server and the HTTP API's server, with TLS;
- ``snapshots.py``: pinned views of the store (snapshots and pops after a flush round trip, tails, ``/sources``);
- ``process_control.py``: selecting, prioritising, clearing and forgetting the known processes;
- ``housekeeping.py``: the timers (forgetting, idle connections, rates, the loop-lag watch, interval syncs);
- ``data_dir.py``: recovering the data dir at start, syncing it;
- ``status.py``: what ``/healthz``, ``/stats`` and ``/metrics`` report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import ssl
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from ringtrace.collector.auth import Authenticator
from ringtrace.collector.http.api import make_app
from ringtrace.collector.http.guard import HttpGuard
from ringtrace.collector.http.metrics import CollectorMetrics
from ringtrace.collector.ingest.connection import IngestProtocol
from ringtrace.collector.ingest.traffic import Traffic
from ringtrace.collector.ingest.turns import DecodeTurns, ReadTurns
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.inventory import RateSampler
from ringtrace.collector.read.pairing import Pairing
from ringtrace.collector.read.pool import reader_pool
from ringtrace.collector.read.query import EventFilter
from ringtrace.collector.read.rows import Row
from ringtrace.collector.read.tail import Tail
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.service.data_dir import DataDirSync, recover
from ringtrace.collector.service.housekeeping import Housekeeping
from ringtrace.collector.service.jetstream_tier import JETSTREAM_MAX_FRAME_BYTES, JetStreamTier, staging_store
from ringtrace.collector.service.loop_lag import LoopLag
from ringtrace.collector.service.process_control import FORGOTTEN_PROCESS_BYTES, ProcessControl
from ringtrace.collector.service.servers import Servers, host_port
from ringtrace.collector.service.snapshots import Snapshots
from ringtrace.collector.service.status import Status
from ringtrace.collector.store.clocks import own_boot_id
from ringtrace.collector.store.heap import HeapTrimmer
from ringtrace.collector.store.processes import ProcessRecord, Registry
from ringtrace.collector.store.ring import Counts, Store, table_charge_bound
from ringtrace.collector.store.segments import DataDir, SegmentBuffers
from ringtrace.wire.decoder import Limits
from ringtrace.wire.version import __version__

if TYPE_CHECKING:
    from aiohttp import web
    from ringtrace.collector.ingest.otlp.receiver import OtlpReceiver

__all__ = ["FORGOTTEN_PROCESS_BYTES", "Collector", "CollectorConfig"]

log = logging.getLogger("ringtrace.collector")

_DAY_NS = 86_400 * 10**9

#: How long a stopping collector waits for its clients to flush.
STOP_FLUSH_TIMEOUT_S = 1.0
#: How often ``--max-age`` removes what aged out.
MAX_AGE_SWEEP_S = 1.0


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
    the traffic counters) are its attributes; the rest is in its parts, which the HTTP API reaches through it.

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
        buffers: SegmentBuffers | None = self.data_dir
        if config.jetstream is not None:  # segments on their way to the stream (``jetstream_tier.py``)
            self.store = staging_store(config)
        else:
            self.store = Store(
                config.capacity_bytes,
                segment_bytes=config.effective_segment_bytes,
                process_capacity_bytes=config.process_capacity_bytes,
                policy=config.policy,
                buffers=buffers,
            )
        self.limits = _ingest_limits(config)
        if config.jetstream is not None:  # a segment, its frame and its session frames are one message
            self.limits = dataclasses.replace(
                self.limits, max_frame_bytes=min(self.limits.max_frame_bytes, JETSTREAM_MAX_FRAME_BYTES)
            )
        #: Reading what is stored: it was checked on the way in, perhaps by a run with other limits (a data dir).
        self.stored_limits = Limits(2**31, 2**32 - 1, 2**32 - 1, 2**32 - 1)
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
        self.metrics = CollectorMetrics(self)
        self.loop_lag = LoopLag(self.metrics.loop_lag_seconds.observe)
        self.http_guard = HttpGuard(config.http_timeout_s, config.max_http_connections)
        #: The OTLP listener's connections, apart from the API's: a flood of exporters leaves ``/healthz`` answering.
        self.otlp_guard = HttpGuard(config.http_timeout_s, config.otlp_max_connections, "OTLP", "otlp_max_connections")
        self.otlp: OtlpReceiver | None = None
        #: Where stored segments are read for snapshots and pops (``read/pool.py``).
        self.readers = reader_pool()
        #: ``--jetstream``: the stream the store publishes to, and reads of the fleet from it.
        self.jetstream = (
            JetStreamTier(
                config,
                self.store,
                self.registry,
                self.connections,
                self.every_connection,
                self.rates,
                self.stored_limits,
                self.origin_ns,
            )
            if config.jetstream is not None
            else None
        )
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
        self.data_dir_sync = DataDirSync(self.store)
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
            "store": "jetstream" if config.jetstream else "data dir" if config.data_dir else "memory",
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

    async def start(self) -> None:
        """Recover the data dir, bind both listeners and log one line each with the port actually bound."""
        config = self.config
        if self.data_dir is not None:
            recover(self.data_dir, self.registry, self.store, self.stored_limits)
        if self.jetstream is not None:
            await self.jetstream.start()
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
            )
            if config.otlp_http is not None:
                await self.servers.open_otlp(self._otlp_app(self.otlp), self.otlp_guard)
            if config.otlp_grpc is not None:
                await self.servers.open_otlp_grpc(self.otlp, self.auth)
        _log_store(config, self.store, self.limits)
        interval_syncs = self.data_dir is not None and config.fsync == "interval"
        ages = config.max_age_s is not None and self.jetstream is None  # (the stream ages its own messages)
        extra = (
            self.loop_lag.run,
            *([self.data_dir_sync.every_interval] if interval_syncs else []),
            *([self._expire_every_second] if ages else []),
        )
        self.housekeeping.start(*extra)

    async def _expire_every_second(self) -> None:
        """``--max-age``: every second, seal the open segments opened a quarter of it ago, and remove what was sealed
        longer ago than it (counted overwritten)."""
        assert self.config.max_age_s is not None
        max_age_ns = int(self.config.max_age_s * 1e9)
        while True:
            await asyncio.sleep(MAX_AGE_SWEEP_S)
            self._expire(max_age_ns)

    def _expire(self, max_age_ns: int) -> None:
        # Not in the coroutine: its loop variable would keep the last connection alive while it sleeps.
        now = time.monotonic_ns()
        for connection in list(self.every_connection):
            connection.seal_segment(opened_before_ns=now - max_age_ns // 4)
        self.store.expire(now - max_age_ns)

    def _otlp_app(self, receiver: OtlpReceiver) -> web.Application:
        from aiohttp import web

        auth = [self.auth.middleware()] if self.auth.required else []
        app = web.Application(client_max_size=receiver.max_body_bytes, middlewares=[self.otlp_guard.middleware, *auth])
        app.add_routes(receiver.routes())
        return app

    async def stop(self) -> None:
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
        if self.jetstream is not None:
            await self.jetstream.stop()
        await self.servers.close_http()
        self.readers.shutdown(wait=True, cancel_futures=True)  # (a step runs 50 ms at most)
        if self.data_dir is not None:
            if self.config.fsync != "never":
                await self.data_dir_sync.sync()
            self.data_dir.close()

    # What the HTTP API (``CollectorAPI``), the metrics (``MetricsState``) and callers use, kept where they were.

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

    @property
    def snapshots_running(self) -> int:
        return self.snapshots.running

    @snapshots_running.setter
    def snapshots_running(self, running: int) -> None:
        self.snapshots.running = running

    @property
    def tails_running(self) -> int:
        return self.snapshots.tails_running

    @tails_running.setter
    def tails_running(self, running: int) -> None:
        self.snapshots.tails_running = running

    @property
    def pop_left_open(self) -> Pairing:
        return self.snapshots.pop_left_open

    @pop_left_open.setter
    def pop_left_open(self, left_open: Pairing) -> None:
        self.snapshots.pop_left_open = left_open

    @property
    def pop_lock(self) -> asyncio.Lock:
        return self.snapshots.pop_lock

    async def snapshot(self, flush_timeout_s: float, selected: EventFilter | None = None) -> SnapshotView:
        """Ask connected clients to flush (waiting at most ``flush_timeout_s``), then freeze what is stored (with
        ``--jetstream``: read what the stream holds, of the processes ``selected`` may select)."""
        if self.jetstream is not None:
            acknowledged, asked = await self.snapshots.flush_clients(flush_timeout_s)
            return await self.jetstream.view(acknowledged, asked, selected)
        return await self.snapshots.snapshot(flush_timeout_s)

    async def pop(self, flush_timeout_s: float, selected: EventFilter) -> SnapshotView:
        """``POST /pop``: a snapshot of the processes ``selected``, and what they held removed from the store at the
        same instant (counted as cleared): nothing stored in between is lost, and nothing is popped twice. The
        caller holds ``pop_lock`` while it exports the view, with ``pop_left_open``. With ``--jetstream``: what the
        stream holds of them, the messages read purged from it."""
        if self.jetstream is not None:
            acknowledged, asked = await self.snapshots.flush_clients(flush_timeout_s)
            return await self.jetstream.pop(acknowledged, asked, selected)
        view = await self.snapshots.snapshot(flush_timeout_s)
        self.process_control.clear(selected)
        return view

    async def sources(self, selected: EventFilter) -> dict[str, Any]:
        """``GET /sources``: every process ``selected`` and its tracks (``inventory.py``); with ``--jetstream``, every
        process the stream holds, and the fleet's totals."""
        if self.jetstream is not None:
            return await self.jetstream.sources(selected)
        return {"processes": await self.snapshots.sources(self.process_control.matching(selected))}

    async def tail_step(self, tail: Tail) -> list[Row]:
        """The rows stored since the tail's last step (``tail.py``), read on a worker thread; with ``--jetstream``,
        of the messages the stream stored since (``fleet_tail.py``)."""
        if self.jetstream is not None:
            return await self.jetstream.tail_step(tail)
        return await self.snapshots.tail_step(tail)

    def matching(self, selected: EventFilter) -> list[ProcessRecord]:
        """The known processes ``selected`` (by pid, name, host), oldest first."""
        return self.process_control.matching(selected)

    def set_priority(self, selected: EventFilter, priority: str, timeline: str = "") -> list[ProcessRecord]:
        """Send SET_PRIORITY to every connection of the processes ``selected``; returns the processes it reached."""
        return self.process_control.set_priority(selected, priority, timeline)

    async def clear(self, selected: EventFilter) -> tuple[list[ProcessRecord], int]:
        """Remove what the processes ``selected`` hold (counted as cleared); returns them and the events removed. With
        ``--jetstream``: purged from the stream, whichever collector they are connected to."""
        if self.jetstream is not None:
            return await self.jetstream.clear(selected)
        return self.process_control.clear(selected)

    def forget_idle(self) -> int:
        """Forget every process idle past ``forget_after_s`` that holds nothing; returns how many."""
        return self.process_control.forget_idle()

    async def sync_data_dir(self) -> None:
        """Make everything stored in the data dir durable, on a worker thread (``DataDirSync.sync``)."""
        await self.data_dir_sync.sync()

    def health(self) -> dict[str, Any]:
        """Liveness and a few gauges."""
        return self.status.health()

    def stats(self) -> dict[str, Any]:
        """Collector totals: traffic, store, every loss counter (forgotten processes included), the ingest address
        as bound, and what the OTLP receiver took and refused, by signal (``otlp_items``)."""
        stats = self.status.stats()
        if self.tcp_address is not None:  # (what clients connect to: the web view's hint says it)
            stats["ingest_address"] = host_port(self.tcp_address)
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
        return await self.jetstream.stats() if self.jetstream is not None else {}

    def otlp_items(self) -> dict[tuple[str, str], int]:
        """Items (spans, log records, data points) the OTLP receiver took and refused, by signal path and outcome."""
        if self.otlp is None:
            return {}
        accepted, refused = self.otlp.accepted, self.otlp.refused
        return {
            **{(path, "accepted"): n for path, n in accepted.items()},
            **{(path, "refused"): n for path, n in refused.items()},
        }

    def jetstream_counters(self) -> dict[str, int] | None:
        """With ``--jetstream``: what this collector published, for ``/metrics``; else None."""
        if self.jetstream is None:
            return None
        counters = self.jetstream.publisher.counters
        return {
            "messages": counters.messages,
            "events": counters.events,
            "retries": counters.retries,
            "refused_events": counters.refused_events,
            "waiting_events": counters.waiting_events,
            "failing": int(bool(counters.failing)),
        }

    def metric_gauges(self) -> dict[str, float]:
        return self.status.metric_gauges()

    def metric_totals(self) -> tuple[Counts, dict[str, int]]:
        """The store's counts and the clients' own loss counters, over every process (forgotten ones included)."""
        return self.status.metric_totals()


def _ingest_limits(config: CollectorConfig) -> Limits:
    """What a client's stream may declare (``--max-frame-bytes``, ``--max-strings``, ...)."""
    return Limits(
        config.max_frame_bytes,
        config.max_strings,
        config.max_tracks,
        config.max_kinds,
        config.max_string_bytes,
        config.max_schema_bytes,
    )


def _warn_process_capacity(config: CollectorConfig) -> None:
    if config.process_capacity_bytes is not None and config.process_capacity_bytes > config.capacity_bytes:
        log.warning(
            "--process-capacity %d is more than --capacity %d: one process may hold up to the capacity",
            config.process_capacity_bytes,
            config.capacity_bytes,
        )


def _log_store(config: CollectorConfig, store: Store, limits: Limits) -> None:
    """One line saying how the store is set up, and a warning for each setting that does not do what it seems to."""
    log.info(
        "store: capacity %d bytes (%d per process), policy %s, %s; segments up to %d bytes; max frame %d bytes",
        store.capacity_bytes,
        store.process_capacity_bytes,
        store.policy,
        f"data dir {config.data_dir} (fsync {config.fsync})"
        if config.data_dir
        else "in memory until the JetStream stream acknowledges"
        if config.jetstream
        else "in memory",
        store.segment_bytes,
        limits.max_frame_bytes,
    )
    if config.data_dir is None and config.fsync != "never":
        log.warning("--fsync %s does nothing without --data-dir: everything stays in memory", config.fsync)
    # (with --jetstream the store is the buffer of what the stream has not acknowledged yet: the stream is --capacity)
    option = "--jetstream-buffer" if config.jetstream else "--capacity"
    log.info("%s", capacity_holds(store.capacity_bytes, table_charge_bound(limits), option))


#: What one event takes in a segment, about (measured: a span with three args 36 bytes, a span or an instant without
#: args 13), to say what a capacity holds in events.
_STORED_EVENT_BYTES: Final = 32


def capacity_holds(capacity_bytes: int, most_table_bytes: int, option: str = "--capacity") -> str:
    """What the store's ``option`` (``--capacity``; ``--jetstream-buffer``) holds, in events and in processes' tables
    (each connection's count against it, up to ``most_table_bytes`` at the table limits, all together up to half of
    it: ``Budget.table_room``), and what to do if that is too little: one line, for the log at start. A process whose
    tables do not fit is refused, and both sides say so then (``ingest/connection.py``)."""
    at_limits = capacity_bytes // 2 // most_table_bytes
    such = f"room for {at_limits:,} such" if at_limits else "a process whose tables do not fit is refused, and says so"
    events = _rounded(capacity_bytes // _STORED_EVENT_BYTES)
    return (
        f"{option.removeprefix('--')} {_mib(capacity_bytes)} holds about {events:,} events "
        f"(~{_STORED_EVENT_BYTES} bytes each) less each connected process's string and track tables (a few KiB for "
        f"most, up to {_mib(most_table_bytes)} at the table limits; all together at most half of it: "
        f"{such}); for more, raise {option}"
    )


def _rounded(count: int) -> int:
    """``count`` to two significant digits: an estimate says no more."""
    digits = max(len(str(count)) - 2, 0)
    return round(count, -digits)


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"
