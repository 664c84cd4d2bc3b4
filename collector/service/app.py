"""The collector service: listeners, snapshots, shutdown (its configuration: ``config.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from ringtrace.client._version import __version__
from ringtrace.client.wire.decoder import Limits
from ringtrace.collector.auth import Authenticator, server_tls_context
from ringtrace.collector.export.chrome import Row
from ringtrace.collector.http.api import make_app
from ringtrace.collector.http.guard import HttpGuard
from ringtrace.collector.http.metrics import CollectorMetrics
from ringtrace.collector.ingest.connection import IngestProtocol
from ringtrace.collector.ingest.traffic import Traffic
from ringtrace.collector.ingest.turns import DecodeTurns
from ringtrace.collector.read.event_walk import client_counts, store_counts
from ringtrace.collector.read.frame_walk import ProcessView, SnapshotView
from ringtrace.collector.read.inventory import ProcessFacts, RateSampler, scan_segments, sources_document
from ringtrace.collector.read.pairing import Pairing
from ringtrace.collector.read.pool import reader_pool
from ringtrace.collector.read.query import EventFilter
from ringtrace.collector.read.tail import Tail
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.service.loop_lag import LoopLag
from ringtrace.collector.store.clocks import own_boot_id
from ringtrace.collector.store.heap import HeapTrimmer
from ringtrace.collector.store.processes import ProcessRecord, Registry, stats_sum
from ringtrace.collector.store.ring import Counts, Store, StoreSnapshot, table_charge_bound
from ringtrace.collector.store.segments import SYNC_INTERVAL_S, DataDir, SegmentBuffers

__all__ = ["Collector", "CollectorConfig"]

log = logging.getLogger("ringtrace.collector")

_DAY_NS = 86_400 * 10**9
_R = TypeVar("_R")


#: About what a process's records take (the registry's and the store's), freed when it is forgotten.
FORGOTTEN_PROCESS_BYTES = 4096
#: How long a stopping collector waits for its clients to flush.
STOP_FLUSH_TIMEOUT_S = 1.0


class Collector:
    """Ingest listener + store + HTTP API, on one event loop.

    Raises:
        ConfigError: the capacity cannot hold two segments of the largest frame; the data dir is not writable.
    """

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.version = __version__
        #: Both listeners speak TLS with it (None: plain TCP and HTTP); loaded first, so a bad file stops nothing begun.
        self.tls = server_tls_context(config.tls_cert, config.tls_key) if config.tls_cert and config.tls_key else None
        self.auth = Authenticator(config.token)
        if config.process_capacity_bytes is not None and config.process_capacity_bytes > config.capacity_bytes:
            log.warning(
                "--process-capacity %d is more than --capacity %d: one process may hold up to the capacity",
                config.process_capacity_bytes,
                config.capacity_bytes,
            )
        self.data_dir = DataDir(config.data_dir, config.fsync) if config.data_dir is not None else None
        buffers: SegmentBuffers | None = self.data_dir
        self.store = Store(
            config.capacity_bytes,
            segment_bytes=config.effective_segment_bytes,
            process_capacity_bytes=config.process_capacity_bytes,
            policy=config.policy,
            buffers=buffers,
        )
        self.limits = Limits(
            config.max_frame_bytes,
            config.max_strings,
            config.max_tracks,
            config.max_kinds,
            config.max_string_bytes,
            config.max_schema_bytes,
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
        #: Time of each loop turn for decoding table frames, shared by every connection.
        self.decode_turns = DecodeTurns()
        #: Memory freed in many small objects (connections' tables, forgotten processes), given back to the OS.
        self.heap = HeapTrimmer()
        self.traffic = Traffic()
        self.started_s = time.monotonic()
        self.rates = RateSampler()
        self.metrics = CollectorMetrics(self)
        self.loop_lag = LoopLag(self.metrics.loop_lag_seconds.observe)
        self.snapshots_running = 0
        #: What the last pop left open for the next (``POST /pop``); one pop at a time.
        self.pop_left_open = Pairing()
        self.pop_lock = asyncio.Lock()
        self.max_snapshots = config.max_snapshots
        #: Live tails (``GET /stream``) that have begun.
        self.tails_running = 0
        self.tcp_address: tuple[str, int] | None = None
        self.http_address: tuple[str, int] | None = None
        self._tcp_server: asyncio.Server | None = None
        self._http_runner: web.AppRunner | None = None
        self._http_server: asyncio.Server | None = None
        self.http_guard = HttpGuard(config.http_timeout_s, config.max_http_connections)
        #: Where stored segments are read for snapshots and pops (``readers.py``).
        self.readers = reader_pool()
        self._forgetting: asyncio.Task[None] | None = None
        self._sampling: asyncio.Task[None] | None = None
        self._idling: asyncio.Task[None] | None = None
        self._lag_watch: asyncio.Task[None] | None = None
        self._syncing: asyncio.Task[None] | None = None
        self._sync_running: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """Recover the data dir, bind both listeners and log one line each with the port actually bound."""
        loop = asyncio.get_running_loop()
        config = self.config
        if self.data_dir is not None:
            self._recover(self.data_dir)
        self._log_exposure()
        # With TLS, asyncio's SSL protocol decrypts straight into the buffer IngestProtocol.get_buffer lends it (a
        # segment): frames are still stored where they are read. A handshake must end within the HELLO timeout.
        self._tcp_server = server = await loop.create_server(
            lambda: IngestProtocol(self),
            config.tcp_host,
            config.tcp_port,
            ssl=self.tls,
            ssl_handshake_timeout=self.handshake_timeout_s if self.tls else None,
        )
        self.tcp_address = server.sockets[0].getsockname()[:2]
        log.info("ingest listening on tcp://%s%s", _host_port(self.tcp_address), " with TLS" if self.tls else "")
        app = make_app(self, self.auth.middleware() if self.auth.required else None)
        self._http_runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._http_runner.setup()
        self._http_server = await loop.create_server(
            self.http_guard.factory(self._http_runner.server),
            config.http_host,
            config.http_port,
            ssl=self.tls,
            ssl_handshake_timeout=config.http_timeout_s if self.tls else None,  # (before the guard sees it)
        )
        self.http_address = self._http_server.sockets[0].getsockname()[:2]
        scheme = "https" if self.tls else "http"
        log.info("http listening on %s://%s", scheme, _host_port(self.http_address))
        log.info(
            "store: capacity %d bytes (%d per process), policy %s, %s; segments up to %d bytes; max frame %d bytes",
            self.store.capacity_bytes,
            self.store.process_capacity_bytes,
            self.store.policy,
            f"data dir {config.data_dir} (fsync {config.fsync})" if config.data_dir else "in memory",
            self.store.segment_bytes,
            config.max_frame_bytes,
        )
        if config.data_dir is None and config.fsync != "never":
            log.warning("--fsync %s does nothing without --data-dir: everything stays in memory", config.fsync)
        most = table_charge_bound(self.limits)  # connections' tables count against the capacity
        if self.store.capacity_bytes < 2 * most:
            log.warning(
                "--capacity %d bytes holds the tables of only %d connection(s) declaring all that --max-strings, "
                "--max-string-bytes, --max-tracks and --max-schema-bytes allow (up to %d bytes each): a client "
                "declaring that much is refused once they fill it; raise --capacity or lower those limits",
                self.store.capacity_bytes, self.store.capacity_bytes // most, most,
            )  # fmt: skip
        self._forgetting = asyncio.create_task(self._forget_idle_processes())
        self._sampling = asyncio.create_task(self._sample_rates())
        self._idling = asyncio.create_task(self._close_idle_connections())
        self._lag_watch = asyncio.create_task(self.loop_lag.run())
        if self.data_dir is not None and config.fsync == "interval":
            self._syncing = asyncio.create_task(self._sync_every_interval())

    def _log_exposure(self) -> None:
        """One line saying who may talk to the collector, and a warning where that is anyone beyond this machine."""
        exposed = self.config.exposed_listeners
        if self.auth.required:
            log.info("authentication: a token is required on ingest and HTTP (GET /healthz answers its status only)")
            if exposed and self.tls is None:
                log.warning(
                    "listening on %s without TLS: the token and the traces cross the network in clear text "
                    "(--tls-cert, --tls-key)",
                    " and ".join(exposed),
                )
        elif exposed:
            log.warning(
                "listening on %s with no token (--insecure-open): whoever reaches these ports may send events and "
                "read every trace",
                " and ".join(exposed),
            )

    def _recover(self, data_dir: DataDir) -> None:
        started = time.monotonic()
        segments = events = cut = 0
        for recovered in data_dir.recover(self.stored_limits):
            process = self.registry.known(recovered.hello)
            if recovered.stats is not None:  # segments come oldest first: the last one seen is the latest
                process.report(recovered.stats)
            self.store.adopt(recovered, process.uid)
            segments += 1
            events += sum(count for _, _, _, count, _, _ in recovered.entries)
            cut += recovered.why_cut is not None
        self.store.skip_to(data_dir.highest_seq + 1)  # never reuse the name of a file found there
        totals = self.store.totals()
        overwritten = totals.overwritten_events + totals.capped_events
        if overwritten:
            log.warning(
                "%d of the %d events recovered were overwritten at once: the data dir held more than "
                "--capacity (%d bytes) or --process-capacity allows",
                overwritten,
                events,
                self.store.capacity_bytes,
            )
        if segments:
            log.info(
                "recovered %d segments, %d events of %d processes from %s in %.2fs (%d with a tail cut)",
                segments,
                events,
                len(self.registry.processes),
                Path(data_dir.path),
                time.monotonic() - started,
                cut,
            )

    async def _forget_idle_processes(self) -> None:
        """Every few seconds: forget processes with no connection and nothing stored (bounded bookkeeping)."""
        interval = min(max(self.config.forget_after_s / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            self.forget_idle()
            self.heap.trim_if_due()

    async def _close_idle_connections(self) -> None:
        """Now and then: close connections idle past ``idle_timeout_s`` (``IngestProtocol.close_if_idle``)."""
        timeout_s = self.config.idle_timeout_s
        while True:
            await asyncio.sleep(min(timeout_s / 4, 5.0))
            now_s = time.monotonic()
            for connection in list(self.connections):
                connection.close_if_idle(now_s, timeout_s)

    async def _sync_every_interval(self) -> None:
        """``--fsync interval``: every SYNC_INTERVAL_S, what was written since the last sync, on a worker thread."""
        while True:
            await asyncio.sleep(SYNC_INTERVAL_S)
            await self.sync_data_dir()

    async def sync_data_dir(self) -> None:
        """Make everything stored in the data dir durable, on a worker thread; a failure is logged (what was
        acknowledged stays in the page cache, not known to be on the disk). A sync running is waited for first: a
        task cancelled while it waits leaves the sync running to its end."""
        if self._sync_running is not None:
            await asyncio.wait([self._sync_running])
        job = self.store.sync_all_job()
        if job is None:
            return
        running = self._sync_running = asyncio.get_running_loop().run_in_executor(None, job.run)
        running.add_done_callback(self._synced)
        await asyncio.wait([running])

    def _synced(self, running: asyncio.Future[None]) -> None:
        if self._sync_running is running:
            self._sync_running = None
        error = None if running.cancelled() else running.exception()
        if isinstance(error, OSError):
            log.error("cannot sync the data dir: %s; what was acknowledged since the last sync may not survive a "
                      "power loss", error)  # fmt: skip
        elif error is not None:
            log.error("syncing the data dir failed", exc_info=error)

    async def _sample_rates(self) -> None:
        """Every second: each process's totals, from which ``/sources`` tells its rate."""
        while True:
            self.rates.sample(self.store.process_received())
            await asyncio.sleep(1.0)

    def forget_idle(self) -> int:
        """Forget every process idle past ``forget_after_s`` that holds nothing; returns how many."""
        forgotten = 0
        for process in self.registry.idle(self.config.forget_after_s):
            if not self.store.holds(process.uid):
                self.registry.forget(process)
                self.store.forget(process.uid)
                self.heap.freed(FORGOTTEN_PROCESS_BYTES)
                if not self.pop_lock.locked():  # (a pop's worker copies it; the next sweep catches up)
                    self.pop_left_open.forget({process.uid})
                forgotten += 1
        return forgotten

    def health(self) -> dict[str, Any]:
        """Liveness and a few gauges."""
        store = self.store
        return {
            "status": "ok",
            "connections": len(self.connections),
            "processes": len(self.registry.processes),
            "forgotten_processes": self.registry.forgotten_processes,
            "stored_events": store.stored_events,
            "stored_frames": store.stored_frames,
            "segments": store.segment_count,
            "held_bytes": store.held_bytes,
            "table_bytes": store.table_bytes,
            "used_bytes": store.used_bytes,
            "capacity_bytes": store.capacity_bytes,
            "event_loop_lag_max_ms": round(self.loop_lag.longest_s * 1000, 3),
            **{name: value for name, value in store.totals().as_dict().items() if name != "stored_events"},
        }

    def stats(self) -> dict[str, Any]:
        """Collector totals: traffic, store, every loss counter (forgotten processes included)."""
        store_totals, client_totals = self.metric_totals()
        traffic = self.traffic
        return {
            "collector_version": self.version,
            "clock_origin_wall_ns": self.origin_ns,
            "policy": self.store.policy,
            "data_dir": self.config.data_dir,
            **self.metric_gauges(),
            "process_capacity_bytes": self.store.process_capacity_bytes,
            "used_bytes": self.store.used_bytes,
            "stored_frames": self.store.stored_frames,
            "forgotten_processes": self.registry.forgotten_processes,
            "ingest_bytes": traffic.bytes_received,
            "connections_accepted": traffic.connections_accepted,
            "connections_refused": traffic.connections_refused,
            "connections_unauthenticated": traffic.authentication_failures,
            "connections_too_slow": traffic.too_slow,
            "protocol_errors": traffic.protocol_errors,
            "throttled_reads": traffic.throttled,
            "http_connections_timed_out": self.http_guard.timed_out,
            "http_connections_refused": self.http_guard.refused,
            "http_unauthorized": self.auth.http_refusals,
            **store_counts(store_totals),
            **client_totals,
        }

    def metric_gauges(self) -> dict[str, float]:
        store = self.store
        return {
            "connections": len(self.connections),
            "processes": len(self.registry.processes),
            "held_bytes": store.held_bytes,
            "table_bytes": store.table_bytes,
            "capacity_bytes": store.capacity_bytes,
            "segments": store.segment_count,
            "snapshots_running": self.snapshots_running,
            "tails_running": self.tails_running,
            "uptime_seconds": round(time.monotonic() - self.started_s, 3),
        }

    def metric_totals(self) -> tuple[Counts, dict[str, int]]:
        """The store's counts and the clients' own loss counters, over every process (forgotten ones included)."""
        client = self.registry.forgotten_stats
        for process in self.registry.processes.values():
            client = stats_sum(client, process.reported_stats)
        return self.store.totals(), client_counts(client)

    def matching(self, selected: EventFilter) -> list[ProcessRecord]:
        """The known processes ``selected`` (by pid, name, host), oldest first."""
        return [p for p in self.registry.processes.values() if selected.selects_process(p)]

    async def sources(self, selected: EventFilter) -> list[dict[str, Any]]:
        """``GET /sources``: every process ``selected`` and its tracks (``inventory.py``). The stored segments'
        indexes are read on a worker thread, pinned meanwhile."""
        processes = [ProcessFacts.of(p, self.store.process_held_bytes(p.uid)) for p in self.matching(selected)]
        uids = {p.view.uid for p in processes}
        counts = {key: c for key, c in self.store.track_counts().items() if key[0] in uids}
        received = self.store.process_received()
        rates = {uid: self.rates.rate(uid, received[uid]) if uid in received else None for uid in uids}
        with_frames = self.store.snapshot(owners=uids)
        times = await _on_worker(with_frames, lambda: scan_segments(with_frames.segments))
        return sources_document(processes, counts, times, rates)

    async def tail_step(self, tail: Tail) -> list[Row]:
        """The rows stored since the tail's last step (``tail.py``), read on a worker thread."""
        # Only what the tail selects is copied and pinned: a step runs every 200 ms, for each tail.
        selected = tail.selected.selects_process
        processes = {uid: ProcessView.of(p) for uid, p in self.registry.by_uid.items() if selected(p)}
        frames = self.store.snapshot(owners=processes)
        segments = [(processes[segment.owner], segment) for segment in frames.segments]
        kept = self.store.kept_events(processes)
        cleared = self.store.cleared_segments(processes, tail.cleared_floor)
        return await _on_worker(frames, lambda: tail.step(segments, kept, cleared))

    def set_priority(self, selected: EventFilter, priority: str, timeline: str = "") -> list[ProcessRecord]:
        """Send SET_PRIORITY to every connection of the processes ``selected``; returns the processes it reached."""
        reached = {}
        for connection in list(self.connections):
            process = connection.process
            if process is None or not selected.selects_process(process):
                continue
            if connection.set_priority(priority, timeline):
                reached[process.uid] = process
        return list(reached.values())

    def clear(self, selected: EventFilter) -> tuple[list[ProcessRecord], int]:
        """Remove what the processes ``selected`` hold (counted as cleared); returns them and the events removed."""
        processes = self.matching(selected)
        removed = self.store.clear(p.uid for p in processes)
        if removed:
            log.info("cleared %d events of %d processes on request", removed, len(processes))
        return processes, removed

    async def stop(self) -> None:
        for task in (self._forgetting, self._sampling, self._idling, self._lag_watch, self._syncing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._tcp_server is not None:
            self._tcp_server.close()
            # Clients are asked to flush first: what they sent is then acknowledged, and none of it is in doubt.
            await self._flush_clients(STOP_FLUSH_TIMEOUT_S)
            for connection in list(self.connections):
                connection.close()
            await self._tcp_server.wait_closed()
        if self._http_server is not None:
            self._http_server.close()
        if self._http_runner is not None:
            await self._http_runner.cleanup()  # ends the connections (live tails first)
        self.readers.shutdown(wait=True, cancel_futures=True)  # (a step runs 50 ms at most)
        if self.data_dir is not None:
            if self.config.fsync != "never":
                await self.sync_data_dir()
            self.data_dir.close()

    async def snapshot(self, flush_timeout_s: float) -> SnapshotView:
        """Ask connected clients to flush (waiting at most ``flush_timeout_s``), then freeze what is stored."""
        return self._freeze(*await self._flush_clients(flush_timeout_s))

    async def pop(self, flush_timeout_s: float, selected: EventFilter) -> SnapshotView:
        """``POST /pop``: a snapshot of the processes ``selected``, and what they held removed from the store at the
        same instant (counted as cleared): nothing stored in between is lost, and nothing is popped twice. The
        caller holds ``pop_lock`` while it exports the view, with ``pop_left_open``."""
        view = self._freeze(*await self._flush_clients(flush_timeout_s))
        self.clear(selected)
        return view

    async def _flush_clients(self, flush_timeout_s: float) -> tuple[int, int]:
        """Ask connected clients to flush and wait, at most ``flush_timeout_s``; (acknowledged, asked)."""
        flushes = [c.request_flush() for c in list(self.connections)] if flush_timeout_s > 0 else []
        if flushes:
            await asyncio.wait(flushes, timeout=flush_timeout_s)
        acknowledged = sum(1 for f in flushes if f.done() and f.result())
        for future in flushes:
            if not future.done():
                future.cancel()
        return acknowledged, len(flushes)

    def _freeze(self, acknowledged: int, asked: int) -> SnapshotView:
        """What is stored now, pinned, with the facts a snapshot reports."""
        processes = {p.uid: ProcessView.of(p) for p in self.registry.processes.values()}
        # Frozen before export starts on a worker thread: ingest goes on changing the live records.
        other = {
            "collector_version": __version__,
            "snapshot_wall_ns": time.time_ns(),
            "capacity_bytes": self.store.capacity_bytes,
            "process_capacity_bytes": self.store.process_capacity_bytes,
            "policy": self.store.policy,
            "clients_flushed": acknowledged,
            "clients_connected": asked,
            "forgotten_processes": self.registry.forgotten_processes,
        }
        return SnapshotView(
            self.store.snapshot(asyncio.get_running_loop().call_soon_threadsafe),
            processes,
            self.store.track_counts(),
            other,
            limits=self.stored_limits,
            forgotten=replace(self.store.forgotten),
            forgotten_client=self.registry.forgotten_stats,
            origin_ns=self.origin_ns,
        )


async def _on_worker(frames: StoreSnapshot, read: Callable[[], _R]) -> _R:
    """``read()`` on a worker thread, with ``frames`` pinned until it ends (even if the caller is cancelled meanwhile:
    the read goes on, and the segments it reads must stay). Not on the readers, where snapshots take their turns: a
    tail's step and ``/sources`` are light, and should not wait behind them."""
    future = asyncio.get_running_loop().run_in_executor(None, read)
    try:
        return await asyncio.shield(future)
    finally:
        if future.done():
            frames.close()
        else:
            future.add_done_callback(lambda _: frames.close())


def _host_port(address: tuple[str, int]) -> str:
    """``HOST:PORT``, with an IPv6 host in brackets, as clients and --tcp take it."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
