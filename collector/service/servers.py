"""The collector's listeners: ingest over TCP, the HTTP API (aiohttp behind ``HttpGuard``) and, if asked for, the
OTLP/HTTP and OTLP/gRPC receivers, all with TLS when a certificate and key are configured."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from ringtrace.collector.auth import Authenticator, server_tls_context
from ringtrace.collector.http.guard import HttpGuard
from ringtrace.collector.service.config import CollectorConfig

if TYPE_CHECKING:
    from ringtrace.collector.ingest.otlp.grpc_receiver import OtlpGrpcServer
    from ringtrace.collector.ingest.otlp.receiver import OtlpReceiver

__all__ = ["Servers", "host_port"]

log = logging.getLogger("ringtrace.collector")


class Servers:
    """Both servers: bound by ``open_ingest`` and ``open_http`` (each logs the address actually bound), closed in the
    order a stop needs: ingest stops accepting, its connections are flushed and closed (by the caller), then HTTP.

    Raises:
        ConfigError: the TLS certificate or key cannot be loaded (at construction, before anything is begun).
    """

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        #: Both listeners speak TLS with it (None: plain TCP and HTTP); loaded first, so a bad file stops nothing begun.
        self.tls = server_tls_context(config.tls_cert, config.tls_key) if config.tls_cert and config.tls_key else None
        self.tcp_address: tuple[str, int] | None = None
        self.http_address: tuple[str, int] | None = None
        self._tcp_server: asyncio.Server | None = None
        self._http_runner: web.AppRunner | None = None
        self._http_server: asyncio.Server | None = None
        self.otlp_address: tuple[str, int] | None = None
        self._otlp_runner: web.AppRunner | None = None
        self._otlp_server: asyncio.Server | None = None
        self.otlp_grpc_address: tuple[str, int] | None = None
        self._otlp_grpc: OtlpGrpcServer | None = None
        self._otlp_grpc_stopped: asyncio.Future[None] | None = None
        if config.otlp_grpc is not None:  # (without grpcio: a ConfigError naming the extra, before anything is begun)
            importlib.import_module("ringtrace.collector.ingest.otlp.grpc_receiver")

    async def open_ingest(self, connection: Callable[[], asyncio.BufferedProtocol], timeout_s: float) -> None:
        """Listen for clients, each served by a new ``connection()``; a TLS handshake must end within ``timeout_s``."""
        config = self.config
        # With TLS, asyncio's SSL protocol decrypts straight into the buffer IngestProtocol.get_buffer lends it (a
        # segment): frames are still stored where they are read. A handshake must end within the HELLO timeout.
        self._tcp_server = server = await _listen(
            "--tcp",
            connection,
            config.tcp_host,
            config.tcp_port,
            ssl=self.tls,
            ssl_handshake_timeout=timeout_s if self.tls else None,
        )
        self.tcp_address = server.sockets[0].getsockname()[:2]
        log.info("ingest listening on tcp://%s%s", host_port(self.tcp_address), " with TLS" if self.tls else "")

    async def open_http(self, app: web.Application, guard: HttpGuard) -> None:
        """Serve ``app``, each connection watched by ``guard`` (its count and its deadlines)."""
        config = self.config
        self._http_runner = web.AppRunner(app, access_log=None, handle_signals=False, logger=guard.request_log)
        await self._http_runner.setup()
        self._http_server = await _listen(
            "--http",
            guard.factory(self._http_runner.server),
            config.http_host,
            config.http_port,
            ssl=self.tls,
            ssl_handshake_timeout=config.http_timeout_s if self.tls else None,  # (before the guard sees it)
        )
        self.http_address = self._http_server.sockets[0].getsockname()[:2]
        scheme = "https" if self.tls else "http"
        log.info("http listening on %s://%s", scheme, host_port(self.http_address))

    async def open_otlp(self, app: web.Application, guard: HttpGuard) -> None:
        """Serve the OTLP/HTTP receiver's ``app`` on ``--otlp-http``, its connections watched by ``guard`` as the
        API's are by theirs (``--otlp-max-connections``, apart from the API's ``--max-http-connections``)."""
        assert self.config.otlp_http is not None
        host, port = self.config.otlp_http
        # Bodies arrive as sent: the receiver inflates gzip itself, within its limit (a bomb is refused as it grows).
        self._otlp_runner = web.AppRunner(
            app, access_log=None, handle_signals=False, auto_decompress=False, logger=guard.request_log
        )
        await self._otlp_runner.setup()
        self._otlp_server = await _listen(
            "--otlp-http",
            guard.factory(self._otlp_runner.server),
            host,
            port,
            ssl=self.tls,
            ssl_handshake_timeout=self.config.http_timeout_s if self.tls else None,
        )
        self.otlp_address = self._otlp_server.sockets[0].getsockname()[:2]
        scheme = "https" if self.tls else "http"
        log.info("otlp listening on %s://%s (/v1/traces, /v1/logs, /v1/metrics)", scheme, host_port(self.otlp_address))

    async def open_otlp_grpc(self, receiver: OtlpReceiver, auth: Authenticator) -> None:
        """Serve OTLP/gRPC on ``--otlp-grpc``, its requests handed to ``receiver`` (as the OTLP/HTTP listener's are)."""
        from ringtrace.collector.ingest.otlp.grpc_receiver import OtlpGrpcServer

        config = self.config
        assert config.otlp_grpc is not None
        host, _ = config.otlp_grpc
        tls = None
        if config.tls_cert is not None and config.tls_key is not None:  # (PEM, as gRPC takes them: read again)
            tls = (Path(config.tls_key).read_bytes(), Path(config.tls_cert).read_bytes())
        self._otlp_grpc = OtlpGrpcServer(receiver, auth, config.http_timeout_s)
        port = await self._otlp_grpc.listen(host_port(config.otlp_grpc), tls)
        self.otlp_grpc_address = (host, port)
        log.info(
            "otlp/grpc listening on %s%s (TraceService, LogsService, MetricsService)",
            host_port(self.otlp_grpc_address),
            " with TLS" if tls else "",
        )

    def stop_otlp(self) -> None:
        """Accept no more OTLP requests (before ingest's connections, its loopback ones among them, are closed); gRPC
        ones being handled have a grace period to be answered (``close_http`` waits for it)."""
        if self._otlp_server is not None:
            self._otlp_server.close()
        if self._otlp_grpc is not None:
            self._otlp_grpc_stopped = asyncio.ensure_future(self._otlp_grpc.stop())

    def log_exposure(self, token_required: bool) -> None:
        """One line saying who may talk to the collector, and a warning where that is anyone beyond this machine."""
        exposed = self.config.exposed_listeners
        if token_required:
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

    def stop_ingest(self) -> bool:
        """Accept no more clients; False if ingest never listened (nothing to flush or close)."""
        if self._tcp_server is None:
            return False
        self._tcp_server.close()
        return True

    async def ingest_closed(self) -> None:
        """Wait until the ingest server has ended (after its connections are closed)."""
        if self._tcp_server is not None:
            await self._tcp_server.wait_closed()

    async def close_http(self) -> None:
        """Accept no more HTTP connections and end those open (live tails first)."""
        if self._http_server is not None:
            self._http_server.close()
        if self._http_runner is not None:
            await self._http_runner.cleanup()  # ends the connections (live tails first)
        if self._otlp_runner is not None:
            await self._otlp_runner.cleanup()
        if self._otlp_grpc_stopped is not None:
            await self._otlp_grpc_stopped


async def _listen(
    flag: str, protocol: Callable[[], asyncio.BaseProtocol], host: str, port: int, **options: Any
) -> asyncio.Server:
    """``loop.create_server``, but a port it cannot bind is an error naming the flag that gave it, and the address.

    Raises:
        OSError: the address cannot be bound (in use, or not an address of this machine).
    """
    try:
        return await asyncio.get_running_loop().create_server(protocol, host, port, **options)
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)  # (uvloop's text repeats the address)
        raise OSError(f"{flag} {host_port((host, port))}: cannot listen there: {why.lower()}") from exc


def host_port(address: tuple[str, int]) -> str:
    """``HOST:PORT``, with an IPv6 host in brackets, as clients and --tcp take it."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
