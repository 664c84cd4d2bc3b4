"""Connections to the collector, blocking (on the streamer's thread): TCP, then TLS with ``tls``; between several
collectors, in turn."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

from ringtrace.client.delivery import unpatched
from ringtrace.client.delivery.owned_fds import OwnedSocket
from ringtrace.client.delivery.streaming.exit_attempts import nothing_listens
from ringtrace.client.delivery.streaming.outage import connect_failure
from ringtrace.client.options import StreamerOptions
from ringtrace.wire.parsing import parse_addresses

if TYPE_CHECKING:
    import ssl

__all__ = ["ConnectFailed", "Dialer"]

#: What a non-blocking socket raises when it cannot go on now: wait for the selector. TLS has exceptions of its own.
#: Why a connection is given up when the program closed its descriptor and took the number for its own socket.
_TAKEN = "the program closed the connection's descriptor"
_WOULD_BLOCK: tuple[type[Exception], ...] = (BlockingIOError, InterruptedError)


class ConnectFailed(Exception):
    """``at_once``: waiting will not mend it (TLS); ``nobody``: nothing listens there (refused, unreachable)."""

    def __init__(self, reason: str, *, at_once: bool = False, nobody: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.at_once, self.nobody = reason, at_once, nobody


class Dialer:
    """Opens connections to the collector: TCP, then TLS with ``tls`` (blocking, within ``connect_timeout_s``).

    Given several collectors (``"c1:7700,c2:7700"``), it dials the one that answered last, and after a failed
    attempt the next one, in turn: a client of a collector that died moves to another at its next attempt (the
    link's backoff, 0.1 s at first). A connection that breaks is made again to the same one first.
    """

    def __init__(self, address: str, options: StreamerOptions) -> None:
        self.addresses = parse_addresses(address)
        self._turn = 0
        self.options = options
        #: With ``tls``: the context, made on the first connection.
        self._tls_context: ssl.SSLContext | None = None
        #: Its connections are TLS (all of them, with ``tls``). Never told by ``ssl`` in ``sys.modules``: while
        #: another thread imports ssl (requests and aiohttp do, at start) it is there half run, with no SSLSocket
        #: yet, and the AttributeError ended the streamer's thread: a plain connection delivered nothing.
        self.tls = bool(options.tls)
        #: What a non-blocking send or receive on its connections raises to say "not now".
        self.would_block = _WOULD_BLOCK
        if self.tls:  # ssl only for TLS (a tenth of the client's import time): imported here, on the caller's
            import ssl  # thread, not on the streamer's after a fork

            self.would_block = (*_WOULD_BLOCK, ssl.SSLWantReadError, ssl.SSLWantWriteError)

    @property
    def host(self) -> str:
        return self.addresses[self._turn][0]

    @property
    def port(self) -> int:
        return self.addresses[self._turn][1]

    @property
    def address_text(self) -> str:
        """The collector dialled now (next), as ``HOST:PORT``."""
        host, port = self.addresses[self._turn]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def dial(self) -> socket.socket | ssl.SSLSocket:
        """A connected socket (blocking).

        Raises:
            ConnectFailed: why, in words a user acts on; ``at_once`` for a failure waiting will not mend (TLS).
        """
        try:
            return self._dial()
        except ConnectFailed:
            self._turn = (self._turn + 1) % len(self.addresses)  # the next collector, at the next attempt
            raise

    def _dial(self) -> socket.socket | ssl.SSLSocket:
        timeout_s = self.options.connect_timeout_s
        deadline = time.monotonic() + timeout_s
        owned = self._connect(timeout_s)
        if not self.options.tls:
            return owned.sock
        try:
            tls = self._handshake(owned, deadline)
        except Exception as exc:  # an untrusted certificate, a peer that does not speak TLS, a timeout
            owned.close()
            hint = "do both sides use TLS, and is the collector's certificate trusted?"
            raise ConnectFailed(f"TLS with {self.address_text} failed: {exc} ({hint})", at_once=True) from None
        if not owned.holds():
            owned.close()
            raise ConnectFailed(f"TLS with {self.address_text}: {_TAKEN}")
        return tls

    def _connect(self, timeout_s: float) -> OwnedSocket:
        """A TCP connection to the collector dialled now, to each of its addresses in turn (as
        ``socket.create_connection``), owned from before its connect: connecting and in the TLS handshake it waits on
        the network, and a program may close the descriptor meanwhile and take its number for a socket of its own (a
        daemon's ``os.closerange``), which we must neither use nor close (``owned_fds.py``).

        Raises:
            ConnectFailed: refused, unreachable, unresolvable, timed out, or the descriptor taken by the program.
        """
        failure: Exception = OSError(f"getaddrinfo gave no address for {self.address_text}")
        try:
            found = unpatched.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM)
        except Exception as exc:  # unresolvable
            found, failure = [], exc
        for family, kind, proto, _, address in found:
            owned: OwnedSocket | None = None
            try:  # refused, unreachable, timed out: the next address
                owned = OwnedSocket(unpatched.create_socket(family, kind, proto))
                owned.sock.settimeout(timeout_s)
                owned.sock.connect(address)
                if owned.holds():  # else the program's socket now: whatever its connect said was not of ours
                    owned.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    return owned
                failure = ConnectionError(_TAKEN)
            except Exception as exc:
                failure = exc
            if owned is not None:
                owned.close()
        reason = connect_failure(self.address_text, failure, timeout_s)
        raise ConnectFailed(reason, nobody=nothing_listens(failure))

    def _handshake(self, owned: OwnedSocket, deadline: float) -> ssl.SSLSocket:
        """``owned``'s socket wrapped in TLS (``owned`` holds the wrapped one), the handshake done (blocking, until
        ``deadline``; not by ``wrap_socket``, which closes the descriptor when the handshake fails)."""
        context = self._tls_context
        if context is None:  # loading the system's CAs takes a while: here, not in connect()
            tls = self.options.tls
            import ssl  # (imported already, by __init__)

            context = self._tls_context = tls if isinstance(tls, ssl.SSLContext) else ssl.create_default_context()
        owned.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        wrapped = context.wrap_socket(owned.sock, server_hostname=self.host, do_handshake_on_connect=False)
        owned.sock = wrapped
        wrapped.do_handshake()
        return wrapped
