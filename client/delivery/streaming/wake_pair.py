"""The wake-up of the streamer thread: a socket pair its select watches, written to by any thread."""

from __future__ import annotations

import contextlib

from ringtrace.client.delivery import unpatched
from ringtrace.client.delivery.owned_fds import OwnedSocket

__all__ = ["WakePair"]

#: What one read of the pair takes at most.
_READ_BYTES = 4096


class WakePair:
    """``wake()`` from any thread ends the streamer thread's select; the thread ``drain``s what woke it.

    At most one byte is on its way at a time: another would not wake the thread sooner, and a full pair would block.
    A pair the program closed under us (``holds()`` false: see ``owned_fds``) is never written to, read or closed
    again; the streamer thread makes a new one.
    """

    __slots__ = ("_pending", "_reader", "_writer", "reader")

    def __init__(self) -> None:
        #: A wake-up byte is on its way to the streamer thread.
        self._pending = False
        self.reader, writer = unpatched.socketpair()
        self.reader.setblocking(False)
        writer.setblocking(False)
        self._reader, self._writer = OwnedSocket(self.reader), OwnedSocket(writer)

    def holds(self) -> bool:
        """Both ends are still ours."""
        return self._reader.holds() and self._writer.holds()

    def wake(self) -> None:
        if self._pending:
            return
        self._pending = True
        if not self._writer.holds():  # (the streamer thread makes a new pair, within its wait's timeout)
            return
        with contextlib.suppress(OSError):  # the pair is full (a wake-up is pending anyway) or closed
            self._writer.sock.send(b"\0")

    def drain(self) -> None:
        """Read what woke the thread (on the streamer thread, once its select saw ``reader`` readable, and the pair
        ``holds()``)."""
        # One byte at a time is on its way (``wake``): one read takes it, and the loop reads on only after a full
        # read (a read of fewer bytes took all there was), not until the pair says it is empty, a call more a wake-up.
        with contextlib.suppress(BlockingIOError):
            while len(self.reader.recv(_READ_BYTES)) == _READ_BYTES:
                pass
        # After the bytes are read, never before: a wake-up asked for meanwhile would be read with them and leave the
        # flag set with no byte on its way, and no wake-up asked for would be sent again.
        self._pending = False

    def close(self) -> None:
        self._pending = True  # (no wake-up is sent into a closed pair, or one the program has now)
        self._reader.close()
        self._writer.close()
