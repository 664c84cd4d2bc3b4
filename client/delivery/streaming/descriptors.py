"""The streamer thread's descriptors: the collector's socket, the wake-up pair, and the poll over both.

A program may close them under us (a daemon's ``os.closerange``) and get their numbers for its own sockets: each is
checked before it is used or closed (``owned_fds``), and one no longer ours is let go of, never written, read or
closed. A lost wake-up pair is made anew here; a lost socket is the streamer's to report (its link dials again).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
from typing import TYPE_CHECKING

from ringtrace.client.delivery.owned_fds import OwnedSocket
from ringtrace.client.delivery.streaming.wake_pair import WakePair

if TYPE_CHECKING:
    import ssl

__all__ = ["StreamerDescriptors"]

#: poll(), where there is one: it holds no descriptor of its own (an epoll's would be closed under us with the rest).
_Selector = getattr(selectors, "PollSelector", selectors.SelectSelector)


class StreamerDescriptors:
    """``sock`` (None while not connected) and ``wake_pair``, used by the streamer thread (``wake`` by any thread)."""

    __slots__ = ("_owned", "_selector", "sock", "wake_pair")

    def __init__(self) -> None:
        self.sock: socket.socket | ssl.SSLSocket | None = None
        self._owned: OwnedSocket | None = None
        self.wake_pair = WakePair()
        self._selector: selectors.BaseSelector = _Selector()
        self._selector.register(self.wake_pair.reader, selectors.EVENT_READ)

    def wake(self) -> None:
        self.wake_pair.wake()

    def attach(self, sock: socket.socket | ssl.SSLSocket) -> None:
        """A new connection's socket (non-blocking from now on)."""
        # A pair the program closed leaves its reader's number registered: a socket given that number would not be.
        self._keep_wake_pair()
        sock.setblocking(False)
        self.sock, self._owned = sock, OwnedSocket(sock)
        self._selector.register(sock, selectors.EVENT_READ)

    def socket_is_ours(self) -> bool:
        return self._owned is not None and self._owned.holds()

    def close_socket(self) -> None:
        """Close the socket, if still ours (else only let go of it); None after."""
        sock, self.sock = self.sock, None
        owned, self._owned = self._owned, None
        if sock is not None:
            with _not_registered():
                self._selector.unregister(sock)
        if owned is not None:
            owned.close()

    def keep(self) -> bool:
        """Make a new wake-up pair if the program closed ours; let go of the socket if it closed that, and say so
        (False)."""
        lost = self.sock is not None and not self.socket_is_ours()
        if lost:  # (first: its number, registered until then, may be the new pair's)
            self.close_socket()
        self._keep_wake_pair()
        return not lost

    def _keep_wake_pair(self) -> None:
        if not self.wake_pair.holds():
            with _not_registered():
                self._selector.unregister(self.wake_pair.reader)
            self.wake_pair.close()
            self.wake_pair = WakePair()
            self._selector.register(self.wake_pair.reader, selectors.EVENT_READ)

    def wait(self, timeout_s: float, writable: bool) -> bool | None:
        """Wait up to ``timeout_s`` for a wake-up (read here) or the socket (readable; writable too if ``writable``).
        True when the socket is readable; None when the program closed it (let go of: see ``keep``)."""
        sock = self.sock
        if sock is not None:
            self._selector.modify(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if writable else 0))
        ready = self._selector.select(timeout_s)
        if not self.keep():
            return None
        readable = False
        for key, mask in ready:
            if key.fileobj is self.wake_pair.reader:  # (not one made anew by keep(): that one holds nothing yet)
                self.wake_pair.drain()
            elif key.fileobj is self.sock and mask & selectors.EVENT_READ:
                readable = True
        return readable

    def close(self) -> None:
        self.close_socket()
        self._selector.close()
        self.wake_pair.close()


def _not_registered() -> contextlib.AbstractContextManager[None]:
    return contextlib.suppress(KeyError, ValueError)
