"""Who may talk to the collector: the shared token (ingest HELLO and HTTP ``Authorization: Bearer``), TLS, and which
addresses count as loopback.

Theory of operation
-------------------
One ``Authenticator`` holds the token as bytes and compares what a peer presents with ``hmac.compare_digest``, whose
time does not depend on where the two differ. A peer that fails is told only that it failed (GOODBYE "authentication
failed", HTTP 401): the reason (missing or wrong) goes to the log, with the peer's address, never the token. A
misconfigured fleet or a scanner could fill the log with those lines, so each (address, channel, reason) is logged
at once the first time, then at most once a minute with the count of refusals not logged meanwhile (``log_repeats.py``);
every refusal is counted (``/stats``, ``/metrics``).

With a token, ``GET /healthz`` without an ``Authorization`` header answers ``{"status": "ok"}`` and nothing else, and
``GET /readyz`` its status (200 ``ready`` or 503 ``not ready``) without the reason, so that probes need no secret;
with the right token they give their gauges and reason. The web view's page and its static files (``http/page.py``)
hold no data and are served without the token; the requests the page makes for data send it as a Bearer header like
any other client.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import logging
import ssl
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from ringtrace.collector.http.page import is_open_page
from ringtrace.collector.log_repeats import Repeats
from ringtrace.wire.errors import ConfigError

__all__ = [
    "AuthenticationFailed",
    "Authenticator",
    "is_loopback",
    "server_tls_context",
]

log = logging.getLogger("ringtrace.collector.auth")

#: Shorter tokens are taken, with a warning.
_SHORT_TOKEN_CHARS: Final = 16
_OPEN_PATHS: Final = frozenset({"/healthz"})
#: Answered without the token too: its status, and no reason.
_READINESS: Final = "/readyz"
#: Characters of a refused request's path that its log line shows.
_MAX_LOGGED_PATH: Final = 200


class AuthenticationFailed(Exception):
    """A HELLO without the collector's token, or with another one; ``reason`` is ``missing`` or ``wrong``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Authenticator:
    """The collector's token, if it has one, and the log of refusals.

    Args:
        token: what peers must present; None: anyone may talk (loopback, or ``--insecure-open``).
    """

    def __init__(self, token: str | None) -> None:
        self._token = None if token is None else token.encode("ascii")
        if token is not None and len(token) < _SHORT_TOKEN_CHARS:
            log.warning(
                "the token is only %d characters long: a random one of 32 or more is safer (openssl rand -hex 32)",
                len(token),
            )
        #: Refusals logged, per (peer host, channel, reason).
        self._repeats = Repeats()
        #: Refusals of HTTP requests (ingest ones are counted with the connections).
        self.http_refusals = 0

    @property
    def required(self) -> bool:
        return self._token is not None

    def refusal(self, presented: str | None) -> str | None:
        """None if ``presented`` is the token (or none is required); else why not: ``missing`` or ``wrong``."""
        expected = self._token
        if expected is None:
            return None
        if not presented:
            return "missing"
        # Bytes, so that any text compares (compare_digest takes only ASCII str); the time depends on the lengths.
        return None if hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), expected) else "wrong"

    def bearer_refusal(self, header: str | None) -> str | None:
        """As ``refusal``, of an ``Authorization: Bearer TOKEN`` header (or gRPC's ``authorization`` metadata)."""
        scheme, _, presented = (header or "").strip().partition(" ")
        return self.refusal(presented.strip() if scheme.lower() == "bearer" else "")

    def log_refusal(self, what: str, peer: str, reason: str) -> None:
        """One WARNING line naming the peer and the reason, or counted for the next one (see the module)."""
        host = peer.rpartition(":")[0] or peer
        unlogged = self._repeats.due((host, what.partition(" ")[0], reason))
        if unlogged is not None:
            since = Repeats.since(unlogged, "refused like it")
            log.warning("refusing %s from %s: authentication failed (%s token)%s", what, peer, reason, since)

    def middleware(self) -> Middleware:
        """An aiohttp middleware: requests without ``Authorization: Bearer TOKEN`` get a 401 (``/healthz`` and
        ``/readyz`` without the header: their status only; the web view's page and files: served)."""

        @web.middleware
        async def bearer_token(request: web.Request, handler: Handler) -> web.StreamResponse:
            header = request.headers.get("Authorization")
            if header is None and request.path in _OPEN_PATHS:
                return web.json_response({"status": "ok"})
            if header is None and request.path == _READINESS:  # (the reason may name servers: for the token's holders)
                response = await handler(request)
                if response.status == 200:
                    return response
                return web.json_response({"status": "not ready"}, status=response.status, headers={"Retry-After": "1"})
            if is_open_page(request):  # no data in it: the browser gets the page, which asks for the token
                return await handler(request)
            reason = self.bearer_refusal(header)
            if reason is None:
                return await handler(request)
            self.http_refusals += 1
            # The path as sent (still percent-encoded: a decoded newline would forge a log line), cut short.
            path = request.rel_url.raw_path[:_MAX_LOGGED_PATH]
            self.log_refusal(f"HTTP {request.method} {path}", _peer(request), reason)
            raise web.HTTPUnauthorized(text="authentication failed\n", headers={"WWW-Authenticate": "Bearer"})

        return bearer_token


def _peer(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    if isinstance(peer, tuple):
        return f"[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"{peer[0]}:{peer[1]}"
    return request.remote or "?"


@functools.lru_cache(maxsize=256)  # asked of every connection's peer: parsing the address cost 10 us each time
def is_loopback(host: str) -> bool:
    """Whether a listener bound to ``host`` is reachable from this machine only: ``localhost``, 127.0.0.0/8, ::1."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def server_tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or newer) with the certificate chain and key given.

    Raises:
        ConfigError: a file cannot be read, or they do not hold a certificate and its key.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"--tls-cert {cert_file} --tls-key {key_file}: cannot load the certificate and its key: "
            f"{exc.strerror or exc}"
        ) from None
    return context
