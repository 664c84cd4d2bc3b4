"""HTTP connections that cannot be held for nothing: a slowloris guard and a connection limit for an HTTP listener
(the API's and the OTLP receiver's each have their own, so that a flood of one leaves the other answering).

aiohttp times out idle keep-alive connections, but not a request whose headers never finish: a peer that opens many
connections and sends a byte now and then would hold them forever. Each HTTP connection here is wrapped
(``GuardedConnection``, delegating everything to aiohttp's own protocol) so that it must *begin* a request (its
headers complete, its handler running) within ``timeout_s`` of opening or of the end of its previous request, or it
is closed with a log line naming the peer and the limit. A response being written (a snapshot, a live tail) is cut
off by its handler when the peer takes nothing of it for as long (``api.py``, ``HttpGuard.cut_off``): counted with
the connections timed out, and reset. Past ``max_connections`` open at once, a new connection is answered a 503 with
Retry-After and closed at once, counted, and logged at most once a minute (``log_repeats.py``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web
from ringtrace.collector.http.request_log import RequestLog
from ringtrace.collector.log_repeats import Repeats

__all__ = ["GuardedConnection", "HttpGuard", "reset"]

log = logging.getLogger("ringtrace.collector.http")


class HttpGuard:
    """One listener's open HTTP connections, the middleware that tells them when a request begins and ends, and the
    log of its request handlers (``request_log``).

    Args:
        listener: what its log lines call it (``HTTP``, ``OTLP``).
        limit: the name of ``max_connections``' setting, for log lines and refusals.
    """

    def __init__(
        self, timeout_s: float, max_connections: int, listener: str = "HTTP", limit: str = "max_http_connections"
    ) -> None:
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.listener = listener
        self.limit = limit
        self.connections: dict[asyncio.BaseTransport, GuardedConnection] = {}
        #: Connections closed for not beginning a request in time or not reading a response, and refused past
        #: max_connections.
        self.timed_out = 0
        self.refused = 0
        #: Requests begun since the start, and under way now (whether the collector is at work: ``loop_lag.py``).
        self.requests = 0
        self.in_flight = 0
        self.request_log = RequestLog(listener)
        self._refusals_logged = Repeats()
        why = f"{max_connections} connections open, the most ({limit}); retry later\n".encode()
        self._busy = (
            b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(why), why)
        )

    def refuse(self, transport: asyncio.BaseTransport, peer: str) -> None:
        """A connection past ``max_connections``: answered a 503 with Retry-After before any request (an HTTP client
        retries later, where a bare close looks like a broken network) and closed, counted and logged."""
        self.refused += 1
        unlogged = self._refusals_logged.due(self.limit)
        if unlogged is not None:
            log.warning("refusing %s connection from %s: %s=%d reached%s", self.listener, peer, self.limit,
                        self.max_connections, Repeats.since(unlogged, "refused so"))  # fmt: skip
        # A cast, not an isinstance check: uvloop's transports do not subclass asyncio's.
        writing = cast(asyncio.WriteTransport, transport)
        writing.write(self._busy)
        writing.close()

    def cut_off(self, transport: asyncio.Transport | None) -> None:
        """A reader took nothing of a response for ``timeout_s``: counted, and its connection reset. (Closed, it
        would stay open, its socket established at the peer, for as long as the kernel tried to send what is still
        unsent: a reset drops that.)"""
        self.timed_out += 1
        reset(transport)

    def count_idle_closed(self) -> None:
        """A connection closed for beginning no request within ``timeout_s`` (``GuardedConnection``): counted."""
        self.timed_out += 1

    def factory(self, make: Callable[[], asyncio.Protocol] | None) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server``, wrapping ``make``'s protocols (aiohttp's server)."""
        assert make is not None, "the runner is set up"
        return lambda: GuardedConnection(make(), self)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        connection = self.connections.get(request.transport) if request.transport is not None else None
        self.requests += 1
        self.in_flight += 1
        if connection is not None:
            connection.begin()
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1
            if connection is not None:
                connection.end()


class GuardedConnection(asyncio.Protocol):
    """aiohttp's protocol for one connection, with a deadline to begin each request (see the module docstring)."""

    __slots__ = ("_busy", "_guard", "_inner", "_peer", "_timer", "_transport")

    def __init__(self, inner: asyncio.Protocol, guard: HttpGuard) -> None:
        self._inner = inner
        self._guard = guard
        self._transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._busy = 0
        self._peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self._guard
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if len(guard.connections) >= guard.max_connections:
            guard.refuse(transport, self._peer)
            return
        self._transport = transport
        guard.connections[transport] = self
        self._arm()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is None:
            return  # refused: aiohttp never saw it
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._guard.connections.pop(self._transport, None)
        self._inner.connection_lost(exc)

    def begin(self) -> None:
        self._busy += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def end(self) -> None:
        self._busy -= 1
        if not self._busy:
            self._arm()

    def _arm(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._guard.timeout_s, self._expire)

    def _expire(self) -> None:
        self._timer = None
        transport = self._transport
        if self._busy or transport is None or transport.is_closing():
            return
        log.info("closing %s connection from %s: no request begun within http_timeout_s=%s", self._guard.listener,
                 self._peer, self._guard.timeout_s)  # fmt: skip
        self._guard.count_idle_closed()
        transport.close()


def reset(transport: asyncio.Transport | None) -> None:
    """Reset the connection (a TCP RST): its reader sees it broken, whatever it was sent (a response cut short by a
    clean close could pass for a whole one), and nothing unsent is kept for the kernel to retry."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # on, 0 s: a reset
    transport.abort()
