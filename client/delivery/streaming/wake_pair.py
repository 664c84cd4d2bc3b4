"""The wake-up of the streamer thread: a socket pair its select watches, written to by any thread."""

from __future__ import annotations

import contextlib
import socket

__all__ = ["WakePair"]


class WakePair:
    """``wake()`` from any thread ends the streamer thread's select; the thread ``drain``s what woke it.

    At most one byte is on its way at a time: another would not wake the thread sooner, and a full pair would block.
    """

    __slots__ = ("_pending", "_writer", "reader")

    def __init__(self) -> None:
        #: A wake-up byte is on its way to the streamer thread.
        self._pending = False
        self.reader, self._writer = socket.socketpair()
        self.reader.setblocking(False)
        self._writer.setblocking(False)

    def wake(self) -> None:
        if self._pending:
            return
        self._pending = True
        with contextlib.suppress(OSError):  # the pair is full (a wake-up is pending anyway) or closed
            self._writer.send(b"\0")

    def drain(self) -> None:
        """Read what woke the thread (on the streamer thread, once its select saw ``reader`` readable)."""
        with contextlib.suppress(BlockingIOError):
            while self.reader.recv(4096):
                pass
        # After the bytes are read, never before: a wake-up asked for meanwhile would be read with them and leave the
        # flag set with no byte on its way, and no wake-up asked for would be sent again.
        self._pending = False

    def close(self) -> None:
        for sock in (self.reader, self._writer):
            with contextlib.suppress(OSError):
                sock.close()
