"""The collector service: configuration, listeners, snapshots, shutdown."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from ringtrace.client._version import __version__
from ringtrace.client.errors import ConfigError
from ringtrace.client.protocol import DEFAULT_MAX_FRAME_BYTES, MIN_MAX_FRAME_BYTES
from ringtrace.client.session import Limits

from .export import ProcessView, SnapshotView
from .http import make_app
from .ingest import IngestProtocol
from .sessions import Registry
from .store import ENTRY_OVERHEAD_BYTES, RingStore

__all__ = ["Collector", "CollectorConfig"]

log = logging.getLogger("ringtrace.collector")


@dataclass(frozen=True)
class CollectorConfig:
    tcp_host: str = "127.0.0.1"
    tcp_port: int = 7700
    http_host: str = "127.0.0.1"
    http_port: int = 7701
    capacity_bytes: int = 256 * 1024 * 1024
    #: Largest frame accepted from a client, header included; also the size of one ring segment.
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_connections: int = 1024
    #: Largest string table one connection may declare (each string at most MAX_STRING_CHARS long).
    max_strings: int = 100_000
    #: Most tracks (threads, asyncio task lanes, sources) one connection may declare.
    max_tracks: int = 10_000
    #: Most event kinds one connection may declare.
    max_kinds: int = 1_000
    #: A connection that has not said HELLO by then is closed: it would hold a max_connections slot for nothing.
    handshake_timeout_s: float = 10.0
    #: How long GET /snapshot waits for connected clients to flush, unless the query says otherwise.
    snapshot_flush_timeout_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_frame_bytes < MIN_MAX_FRAME_BYTES:
            raise ConfigError(f"max_frame_bytes must be >= {MIN_MAX_FRAME_BYTES}, got {self.max_frame_bytes}")
        if self.max_connections < 1:
            raise ConfigError(f"max_connections must be >= 1, got {self.max_connections}")
        for name in ("max_strings", "max_tracks", "max_kinds"):
            if getattr(self, name) < 2:
                raise ConfigError(f"{name} must be >= 2, got {getattr(self, name)}")
        if self.handshake_timeout_s <= 0:
            raise ConfigError(f"handshake_timeout_s must be > 0, got {self.handshake_timeout_s}")
        if self.snapshot_flush_timeout_s < 0:
            raise ConfigError(f"snapshot_flush_timeout_s must be >= 0, got {self.snapshot_flush_timeout_s}")


class Collector:
    """Ingest listener + ring store + HTTP API, on one event loop.

    Raises:
        ConfigError: the capacity cannot hold two frames of ``max_frame_bytes``.
    """

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.version = __version__
        # A segment holds at least one frame of the largest size with its index entry.
        self.store = RingStore(config.capacity_bytes, segment_bytes=config.max_frame_bytes + ENTRY_OVERHEAD_BYTES)
        self.limits = Limits(config.max_frame_bytes, config.max_strings, config.max_tracks, config.max_kinds)
        self.max_connections = config.max_connections
        self.handshake_timeout_s = config.handshake_timeout_s
        self.snapshot_flush_timeout_s = config.snapshot_flush_timeout_s
        self.registry = Registry()
        self.connections: set[IngestProtocol] = set()
        self.tcp_address: tuple[str, int] | None = None
        self.http_address: tuple[str, int] | None = None
        self._tcp_server: asyncio.Server | None = None
        self._http_runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Bind both listeners and log one line each with the port actually bound."""
        loop = asyncio.get_running_loop()
        config = self.config
        self._tcp_server = server = await loop.create_server(
            lambda: IngestProtocol(self), config.tcp_host, config.tcp_port
        )
        self.tcp_address = server.sockets[0].getsockname()[:2]
        log.info("ingest listening on tcp://%s", _host_port(self.tcp_address))
        self._http_runner = web.AppRunner(make_app(self), access_log=None, handle_signals=False)
        await self._http_runner.setup()
        site = web.TCPSite(self._http_runner, config.http_host, config.http_port)
        await site.start()
        self.http_address = self._http_runner.addresses[0][:2]
        log.info("http listening on http://%s", _host_port(self.http_address))
        log.info(
            "ring capacity %d bytes in %d segments; max frame %d bytes",
            self.store.capacity_bytes,
            self.store.segment_count,
            config.max_frame_bytes,
        )

    def health(self) -> dict[str, Any]:
        """Liveness and a few gauges."""
        store = self.store
        return {
            "status": "ok",
            "connections": len(self.connections),
            "processes": len(self.registry.processes),
            "stored_events": store.stored_events,
            "stored_frames": store.stored_frames,
            "used_bytes": store.used_bytes,
            "capacity_bytes": store.capacity_bytes,
        }

    async def stop(self) -> None:
        if self._tcp_server is not None:
            self._tcp_server.close()
            for connection in list(self.connections):
                connection.close()
            await self._tcp_server.wait_closed()
        if self._http_runner is not None:
            await self._http_runner.cleanup()

    async def snapshot(self, flush_timeout_s: float) -> SnapshotView:
        """Ask connected clients to flush (waiting at most ``flush_timeout_s``), then freeze what is stored."""
        flushes = [c.request_flush() for c in list(self.connections)] if flush_timeout_s > 0 else []
        if flushes:
            await asyncio.wait(flushes, timeout=flush_timeout_s)
        acknowledged = sum(1 for f in flushes if f.done() and f.result())
        for future in flushes:
            if not future.done():
                future.cancel()
        processes = {p.uid: ProcessView.of(p) for p in self.registry.processes.values()}
        lost = {cast(tuple[int, int], key): loss.events for key, loss in self.store.lost.items()}
        # Frozen before export starts on a worker thread: ingest goes on changing the live records.
        other = {
            "collector_version": __version__,
            "capacity_bytes": self.store.capacity_bytes,
            "stored_events": self.store.stored_events,
            "clients_flushed": acknowledged,
            "clients_connected": len(flushes),
        }
        return SnapshotView(self.store.snapshot(), processes, lost, other)


def _host_port(address: tuple[str, int]) -> str:
    """``HOST:PORT``, with an IPv6 host in brackets, as clients and --tcp take it."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
